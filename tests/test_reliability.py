"""Bad input never gives a traceback or a written plan; time-outs and Ctrl-C keep a verified plan."""
import json
import signal
import subprocess
import sys
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from solver.commands.cli import solve_main, verify_main
from tests.helpers import ROOT, make_config, rows_from

PROMPTS, GENS = [40, 100, 130, 60, 250, 200], [10, 12, 30, 10, 5, 30]


def setup(tmp):
    return make_config(tmp, {"t": rows_from(PROMPTS, GENS)}, shapes={"max_unique": 2}, batching={"max_batch_size": 4},
                       solver={"time_limit_s": 3, "workers": 2, "log_progress": False})


def run_quiet(cfg, out, capsys):
    code = solve_main([str(cfg), "--out", str(out), "--quiet", "--method", "greedy"])
    captured = capsys.readouterr()
    return code, captured.err


def check_outcome(code, err, out, cfg):
    assert code in (0, 1, 2), code
    assert "Traceback" not in err
    if code == 1:
        assert err.startswith("error: ") and err.count("\n") == 1
        assert not out.exists() or not any(out.rglob("*.plan.jsonl"))
    else:
        assert verify_main([str(cfg), str(out / "greedy")]) in (0, 2)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["del", "ins", "dup"]),
                           st.sampled_from(list('{}":,-0.9ax \n'))), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits)
def test_fuzz_corrupted_traces(tmp_path_factory, capsys, ops):
    tmp = tmp_path_factory.mktemp("fz")
    cfg = setup(tmp)
    path = tmp / "t.jsonl"
    text = path.read_text()
    for pos, op, ch in ops:
        pos %= max(len(text), 1)
        text = text[:pos] + text[pos + 1:] if op == "del" else \
            text[:pos] + ch + text[pos:] if op == "ins" else text + text.splitlines()[0] + "\n"
    path.write_text(text)
    code, err = run_quiet(cfg, tmp / "out", capsys)
    check_outcome(code, err, tmp / "out", cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits)
def test_fuzz_corrupted_configs(tmp_path_factory, capsys, ops):
    tmp = tmp_path_factory.mktemp("fc")
    cfg = setup(tmp)
    text = cfg.read_text()
    for pos, op, ch in ops:
        pos %= max(len(text), 1)
        text = text[:pos] + text[pos + 1:] if op == "del" else text[:pos] + ch + text[pos:] if op == "ins" \
            else text
    cfg.write_text(text)
    code, err = run_quiet(cfg, tmp / "out", capsys)
    check_outcome(code, err, tmp / "out", cfg)


def test_tiny_time_limit_still_returns_a_verified_plan(tmp_path):
    out = tmp_path / "out"
    code = solve_main([str(ROOT / "configs" / "default.yaml"), "--time-limit", "0.01", "--out", str(out), "--quiet"])
    assert code in (0, 2)
    report = json.loads((out / "report.json").read_text())
    cp = report["methods"]["cpsat"]
    assert cp["status"] in ("FEASIBLE", "OPTIMAL", "UNKNOWN")
    assert verify_main([str(ROOT / "configs" / "default.yaml"), str(out / "cpsat")]) in (0, 2)


def test_ctrl_c_keeps_best_plan(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "solve.py"), str(ROOT / "configs" / "default.yaml"),
                          "--time-limit", "120", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 100
    while time.time() < deadline:
        line = p.stderr.readline()
        if "cpsat  incumbent" in line and "none" not in line:
            break
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode in (0, 2), stderr
    assert "Traceback" not in stderr
    assert "stopped early" in stdout
    assert verify_main([str(ROOT / "configs" / "default.yaml"), str(out / "cpsat")]) in (0, 2)
