import pandas as pd
import pytest

from models.errors import InputError
from solver.commands.cli import sweep_main
from solver.commands.sweep import parse_sets, run_sweep
from tests.helpers import make_config, rows_from


def tiny_config(tmp_path):
    prompts, gens = [40, 100, 130, 60, 250, 200, 64, 190], [10, 12, 30, 10, 5, 30, 12, 7]
    return make_config(tmp_path, {"tiny": rows_from(prompts, gens)}, {"tiny": {"p95_latency_ms": 900}},
                       shapes={"max_unique": 2, "granularity": 64}, batching={"max_batch_size": 4},
                       solver={"time_limit_s": 3, "workers": 1, "log_progress": False})


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
    # more shapes never make the optimum worse (same batch size); bigger batches never need more batches
    for b, sub in frame.groupby("batching.max_batch_size"):
        assert sub.sort_values("shapes.max_unique")["total_cost"].is_monotonic_decreasing
    real = sum([40, 100, 130, 60, 250, 200, 64, 190]) + sum([10, 12, 30, 10, 5, 30, 12, 7])
    assert frame["pad_ratio"].tolist() == pytest.approx((frame["pad_tokens"] / real).tolist(), rel=1e-12)
    for name in ("sweep_shapes_max_unique.png", "sweep_batching_max_batch_size.png"):
        assert (out / name).stat().st_size > 1000
    assert "total_cost" in capsys.readouterr().out


def test_bucket_by_name_and_parallel_points(tmp_path):
    cfg = tiny_config(tmp_path)
    frame = run_sweep(str(cfg), parse_sets(["buckets.tiny.limits.p95_latency_ms=300,900,5000"]), jobs=2)
    assert list(frame["buckets.tiny.limits.p95_latency_ms"]) == [300, 900, 5000]
    assert frame["limits_hold"].tolist()[-1]
    assert frame["total_cost"].is_monotonic_decreasing     # looser latency limit, never higher cost


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
