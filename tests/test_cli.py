import json
import subprocess
import sys

import pytest

from solver.commands.cli import solve_main, verify_main
from tests.helpers import ROOT, make_config, recompute, rows_from, load
from models.requests import load_requests
from solver.verify import verify_dir


def tiny_config(tmp_path, limits=None):
    prompts, gens = [40, 100, 130, 60, 250, 200, 64, 190], [10, 12, 30, 10, 5, 30, 12, 7]
    return make_config(tmp_path, {"tiny": rows_from(prompts, gens)}, {"tiny": limits or {}},
                       shapes={"max_unique": 2, "granularity": 64}, batching={"max_batch_size": 4},
                       solver={"time_limit_s": 5, "workers": 2})


def test_solve_all_writes_verified_plans_and_report(tmp_path, capsys):
    cfg_path = tiny_config(tmp_path, {"sequential_time_ms": 2000})
    out = tmp_path / "out"
    assert solve_main([str(cfg_path), "--method", "all", "--out", str(out), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "cpsat" in table and "baseline" in table and "all held" in table
    report = json.loads((out / "report.json").read_text())
    cp = report["methods"]["cpsat"]
    for key in ("status", "objective", "best_bound", "gap", "bound_scope", "solve_time_s"):
        assert key in cp
    assert cp["best_bound"] <= cp["objective"] * (1 + 1e-9)
    cfg = load(cfg_path)
    reqs = {"tiny": load_requests(cfg.buckets[0].requests, "tiny")}
    for method in report["methods"]:
        plans, errors = verify_dir(cfg, reqs, out / method)
        assert errors == []
        ref = recompute(cfg, reqs["tiny"], plans["tiny"].batch_of, plans["tiny"].seq_align)
        assert report["methods"][method]["buckets"]["tiny"]["cost"] == pytest.approx(ref["cost"], rel=1e-12)
        assert report["methods"][method]["buckets"]["tiny"]["pad_tokens"] == ref["pad_tokens"]
    assert verify_main([str(cfg_path), str(out / "cpsat")]) == 0
    for picture in ("tiny.png", "methods.png"):              # layout per bucket, comparison chart
        assert (out / picture).stat().st_size > 1000
    assert not list(out.glob(".staging-*")) and not list(out.glob(".old-*"))


def test_infeasible_limits_exit_2_and_still_write(tmp_path, capsys):
    cfg_path = tiny_config(tmp_path, {"sequential_time_ms": 10})
    out = tmp_path / "out"
    assert solve_main([str(cfg_path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "sequential_time_ms 10 cannot be met" in err
    report = json.loads((out / "report.json").read_text())
    assert report["methods"]["cpsat"]["buckets"]["tiny"]["limits"]["sequential_time_ms"]["holds"] is False
    assert report["infeasibility"]
    assert verify_main([str(cfg_path), str(out / "cpsat")]) == 2


def test_bad_input_exit_1_writes_nothing(tmp_path, capsys):
    cfg_path = tiny_config(tmp_path)
    (tmp_path / "tiny.jsonl").write_text('{"request_id": "a", "prompt_len": 0, "gen_len": 1}\n')
    out = tmp_path / "out"
    assert solve_main([str(cfg_path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "tiny.jsonl:1" in err and "prompt_len" in err and "Traceback" not in err
    assert not out.exists() or not any(out.rglob("*.plan.jsonl"))


def test_failed_run_keeps_previous_complete_set(tmp_path):
    cfg_path = tiny_config(tmp_path)
    out = tmp_path / "out"
    assert solve_main([str(cfg_path), "--method", "greedy", "--out", str(out), "--quiet"]) == 0
    before = (out / "greedy" / "tiny.plan.jsonl").read_text()
    (tmp_path / "tiny.jsonl").write_text("not json\n")
    assert solve_main([str(cfg_path), "--method", "greedy", "--out", str(out), "--quiet"]) == 1
    assert (out / "greedy" / "tiny.plan.jsonl").read_text() == before
    assert (out / "report.json").exists()


def test_verify_rejects_hand_edit(tmp_path, capsys):
    cfg_path = tiny_config(tmp_path)
    out = tmp_path / "out"
    assert solve_main([str(cfg_path), "--method", "baseline", "--out", str(out), "--quiet"]) == 0
    plan = out / "baseline" / "tiny.plan.jsonl"
    lines = plan.read_text().splitlines()
    plan.write_text("\n".join(lines[1:] + [lines[1]]) + "\n")
    assert verify_main([str(cfg_path), str(out / "baseline")]) == 1
    text = capsys.readouterr().out
    assert "appears again" in text and "missing" in text


def test_script_runs_without_traceback(tmp_path):
    tiny_config(tmp_path)
    bad = tmp_path / "config.yaml"
    bad.write_text(bad.read_text() + "bogus: 1\n")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "solve.py"), str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and "unknown key 'bogus'" in p.stderr and "Traceback" not in p.stderr


def test_default_config_baseline_end_to_end(tmp_path):
    out = tmp_path / "out"
    code = solve_main([str(ROOT / "configs" / "default.yaml"), "--method", "baseline", "--out", str(out), "--quiet"])
    assert code == 2        # valid plans written, limits broken
    report = json.loads((out / "report.json").read_text())
    assert report["methods"]["baseline"]["limits_hold"] is False   # the default limits beat the baseline
