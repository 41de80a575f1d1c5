import os

import pandas as pd
import pytest

from models.errors import InputError
from solver.commands.cli import sweep_main
from solver.commands.sweep import parse_sets, run_sweep, solve_point
from models.config import load_config
from solver.pipeline import load_all
from tests.brute import brute_force, plan_metrics
from tests.helpers import make_config, rows_from

PROMPTS, GENS = [40, 100, 130, 60, 250, 200], [10, 12, 30, 10, 5, 30]     # small enough for the brute force


def tiny_config(tmp_path):
    return make_config(tmp_path, {"tiny": rows_from(PROMPTS, GENS)}, {"tiny": {"p95_latency_ms": 900}},
                       shapes={"max_unique": 2, "granularity": 64}, batching={"max_batch_size": 4},
                       solver={"time_limit_s": 3, "workers": 1, "log_progress": False},
                       cost_model={"compile_cost": [1.0e7, 0, 100]})      # a second shape pays for itself


def exact(config, point: dict):
    """(least total cost, pad_tokens of every plan reaching it) at one grid point, by brute force."""
    cfg = load_config(config, point)
    reqs = load_all(cfg)
    best = brute_force(cfg, reqs, keep_all=True)
    return best.objective, {plan_metrics(cfg, reqs, a)["tiny"]["pad_tokens"] for a in best.optima()}


def check_rows_exact(config, frame, keys):
    """Each point proven optimal and its figures those of an optimal plan (independent brute force)."""
    optima = []
    for _, row in frame.iterrows():
        cost, pads = exact(config, {k: row[k].item() if hasattr(row[k], "item") else row[k] for k in keys})
        assert row["status"] == "OPTIMAL"
        assert row["total_cost"] == pytest.approx(cost, rel=1e-9)
        assert row["pad_tokens"] in pads
        assert row["pad_ratio"] == pytest.approx(row["pad_tokens"] / (sum(PROMPTS) + sum(GENS)), rel=1e-12)
        optima.append(cost)
    return optima


def test_one_row_per_grid_point(tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    out = tmp_path / "sweep"
    assert sweep_main([str(cfg), "--set", "shapes.max_unique=1,2,3", "--set", "batching.max_batch_size=2,4",
                       "--out", str(out), "--time-limit", "3"]) == 0
    frame = pd.read_csv(out / "sweep.csv")
    assert len(frame) == 6
    assert sorted(zip(frame["shapes.max_unique"], frame["batching.max_batch_size"])) == \
        [(k, b) for k in (1, 2, 3) for b in (2, 4)]
    assert (frame["num_shapes"] <= frame["shapes.max_unique"]).all()
    assert (frame["best_bound"] <= frame["objective"] * (1 + 1e-9)).all()
    frame["optimum"] = check_rows_exact(str(cfg), frame, ["shapes.max_unique", "batching.max_batch_size"])
    # more shapes never make the optimum worse (same batch size), here strictly better from 1 to 2
    for b, sub in frame.groupby("batching.max_batch_size"):
        by_k = sub.sort_values("shapes.max_unique")["optimum"].tolist()
        assert by_k[0] > by_k[1] * (1 + 1e-6) and by_k[1] >= by_k[2]
    for name in ("sweep_shapes_max_unique.png", "sweep_batching_max_batch_size.png"):
        assert (out / name).stat().st_size > 1000
    assert "total_cost" in capsys.readouterr().out


def test_bucket_by_name_and_parallel_points(tmp_path):
    cfg = tiny_config(tmp_path)
    key = "buckets.tiny.limits.sequential_time_ms"
    frame = run_sweep(str(cfg), parse_sets([f"{key}=700,800,5000"]), jobs=2)
    assert list(frame[key]) == [700, 800, 5000]
    assert frame["limits_hold"].all()
    optima = check_rows_exact(str(cfg), frame, [key])
    assert optima[0] > optima[1] * (1 + 1e-6) and optima[1] == optima[2]   # a looser limit, never a higher cost


@pytest.mark.parametrize("sets,what", [
    (["shapes.max_unique"], "must look like key=v1,v2"),
    (["shapes.max_unique=2,0"], "sweep point shapes.max_unique=0"),
    (["shapes.nope=1,2"], "nope"),
])
def test_bad_grid_is_one_clear_error(tmp_path, capsys, sets, what):
    cfg = tiny_config(tmp_path)
    argv = [str(cfg), "--out", str(tmp_path / "s")]
    for s in sets:
        argv += ["--set", s]
    assert sweep_main(argv) == 1
    assert what in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_no_set_is_an_error(tmp_path):
    with pytest.raises(InputError, match="at least one --set"):
        parse_sets([])


def die_once(cfg, point, method, time_limit, requests):
    """Kills its own worker process on the first try of the point max_unique=2."""
    mark = cfg.output.dir.parent / "died"
    if point["shapes.max_unique"] == 2 and not mark.exists():
        mark.touch()
        os._exit(1)
    return solve_point(cfg, point, method, time_limit, requests)


def always_fail(cfg, point, method, time_limit, requests):
    if point["shapes.max_unique"] == 2:
        os._exit(1)
    if point["shapes.max_unique"] == 3:
        raise ValueError("bad point\nsecond line")
    return solve_point(cfg, point, method, time_limit, requests)


def test_local_pool_retries_a_dead_worker(tmp_path):
    cfg = tiny_config(tmp_path)
    frame = run_sweep(str(cfg), parse_sets(["shapes.max_unique=1,2,3"]), time_limit=1, jobs=2, workers=1,
                      point_fn=die_once, out=tmp_path / "s")
    assert (tmp_path / "died").exists()
    assert list(frame["shapes.max_unique"]) == [1, 2, 3] and (frame["status"] != "FAILED").all()


def test_a_failing_point_is_a_failed_row(tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    frame = run_sweep(str(cfg), parse_sets(["shapes.max_unique=1,2,3"]), time_limit=1, jobs=2, workers=1,
                      point_fn=always_fail, max_retries=1, out=tmp_path / "s")
    assert list(frame["status"])[1:] == ["FAILED", "FAILED"]
    assert frame["error"][1] == "worker process died (2 attempts)"
    assert frame["error"][2] == "ValueError: bad point"
    assert frame["total_cost"][0] > 0 and frame["error"].isna()[0]
    assert pd.read_csv(tmp_path / "s/sweep.csv").equals(frame)


def test_resume_local_reruns_only_missing_and_failed(tmp_path):
    cfg = tiny_config(tmp_path)
    out = tmp_path / "s"
    run_sweep(str(cfg), parse_sets(["shapes.max_unique=1,3"]), time_limit=1, jobs=1, workers=1, out=out)
    ran = []

    def record(cfg, point, method, time_limit, requests):
        ran.append(point["shapes.max_unique"])
        return solve_point(cfg, point, method, time_limit, requests)

    before = (out / "sweep.csv").read_text()
    frame = run_sweep(str(cfg), parse_sets(["shapes.max_unique=1,2,3"]), time_limit=1, jobs=1, workers=1,
                      out=out, resume=True, point_fn=record)
    assert ran == [2]
    assert list(frame["shapes.max_unique"]) == [1, 2, 3]
    lines = (out / "sweep.csv").read_text().splitlines()
    assert [lines[1], lines[3]] == before.splitlines()[1:]   # finished rows kept as they were
    with pytest.raises(InputError, match="no column 'batching.max_batch_size'"):
        run_sweep(str(cfg), parse_sets(["batching.max_batch_size=2"]), out=out, resume=True)
