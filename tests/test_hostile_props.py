"""Property tests (issue 18): configs, traces and plan files drawn from a grammar of hostile values.

Whatever is drawn: exit code 0, 1 or 2; no traceback; exit 1 is one message and leaves the output
folder byte-identical; exit 0/2 leave a consistent set (verify.py passes, the report matches the plans)."""
from __future__ import annotations

import json
import shutil

import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from solver.commands.cli import solve_main, verify_main
from tests.test_hostile import check_consistent_set, seed_folder, snapshot

HOSTILE = st.one_of(
    st.sampled_from([True, False, None, 0, -1, 1, 3, 64, 2 ** 31, 2 ** 40, 2 ** 63 - 1, 2 ** 63, -2 ** 63 - 1, 2 ** 64,
                     0.5, 1e-300, 1e30, 1e308, float("inf"), float("-inf"), float("nan"), "", "x", "64", [], {},
                     [0, 1, 2], [1, 2], {"cost": 1}]),
    st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True))

CONFIG_KEYS = ["shapes.max_unique", "shapes.granularity", "shapes.candidates", "shapes.heads_align",
               "batching.max_batch_size", "batching.max_batch_tokens", "cost_model.prefill_cost",
               "cost_model.batch_overhead_cost", "cost_model.decode_step_ms", "cost_model.first_use_ms",
               "objective.weights", "solver.time_limit_s", "solver.seed", "solver.workers", "solver.gen_caps",
               "solver.max_candidates", "solver.polish_share", "buckets.0.limits.p95_latency_ms",
               "buckets.0.limits.pad_ratio", "buckets.0.limits.cost", "buckets.0.limits.sequential_time_ms",
               "buckets.0.limits.max_latency_ms", "output.dir", "name", "buckets.0.name"]

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
_SEED = {}


def fresh(tmp_path_factory):
    if "path" not in _SEED:
        _SEED["path"] = seed_folder(tmp_path_factory.mktemp("propseed"))
    folder = tmp_path_factory.mktemp("prop") / "case"
    shutil.copytree(_SEED["path"], folder)
    return folder


def set_dotted(conf: dict, dotted: str, value) -> None:
    node = conf
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            return
    node[parts[-1]] = value


def outcome(folder, main, argv, capsys, before):
    code = main(argv)
    cap = capsys.readouterr()
    assert code in (0, 1, 2), (code, cap.err)
    event(f"exit {code}")
    assert "Traceback" not in cap.err + cap.out
    if code == 1:
        assert snapshot(folder / "out") == before
    return code, cap


def run_solve(folder, capsys, method="greedy"):
    before = snapshot(folder / "out")
    code, cap = outcome(folder, solve_main, [str(folder / "config.yaml"), "--quiet", "--no-plots", "--method", method,
                                             "--time-limit", "1"], capsys, before)
    if code == 1:
        assert cap.err.startswith("error: ") and cap.err.count("\n") == 1, cap.err
    else:
        conf = yaml.safe_load((folder / "config.yaml").read_text())
        check_consistent_set(folder, (folder / conf["output"]["dir"]).resolve())
    return code


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), HOSTILE), min_size=1, max_size=3))
def test_hostile_configs(tmp_path_factory, capsys, edits):
    folder = fresh(tmp_path_factory)
    conf = yaml.safe_load((folder / "config.yaml").read_text())
    for key, value in edits:
        if key == "output.dir" and not isinstance(value, str):
            continue
        if key == "output.dir":
            value = "out"                 # another folder would not be the seeded one: keep the check meaningful
        set_dotted(conf, key, value)
    (folder / "config.yaml").write_text(yaml.safe_dump(conf))
    run_solve(folder, capsys)


FIELD = st.sampled_from(["request_id", "prompt_len", "gen_len", "extra"])
ROW = st.one_of(
    st.dictionaries(FIELD, HOSTILE, max_size=4),
    st.fixed_dictionaries({"request_id": st.text(max_size=4), "prompt_len": HOSTILE, "gen_len": HOSTILE}),
    st.lists(HOSTILE, max_size=3), HOSTILE)


@SETTINGS
@given(st.lists(ROW, min_size=1, max_size=4), st.booleans())
def test_hostile_traces(tmp_path_factory, capsys, extra_rows, keep_good):
    folder = fresh(tmp_path_factory)
    good = (folder / "t.jsonl").read_text() if keep_good else ""
    lines = [json.dumps(r) for r in extra_rows]          # json.dumps writes NaN/Infinity as JSON cannot
    (folder / "t.jsonl").write_text(good + "\n".join(lines) + "\n")
    run_solve(folder, capsys)


PLAN_FIELD = st.sampled_from(["request_id", "batch_id", "shape", "shape.seq_align", "shape.heads_align",
                              "shape.hidden_align", "shape.other", "other"])


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 5), PLAN_FIELD, HOSTILE), min_size=1, max_size=3))
def test_hostile_plan_files(tmp_path_factory, capsys, edits):
    folder = fresh(tmp_path_factory)
    path = folder / "out" / "greedy" / "t.plan.jsonl"
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    for row, key, value in edits:
        obj = objs[row % len(objs)]
        if key.startswith("shape.") and isinstance(obj.get("shape"), dict):
            obj["shape"][key[6:]] = value
        elif not key.startswith("shape."):
            obj[key] = value
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    before = snapshot(folder / "out")
    outcome(folder, verify_main, [str(folder / "config.yaml"), str(folder / "out" / "greedy")], capsys, before)
