"""sweep --backend ray: same CSV and plots as the local backend, dead workers retried, Ctrl-C keeps
the finished rows, --resume reruns nothing done, and the message when Ray is not installed."""
import csv
import os
import signal
import sys
import threading
import time

import pandas as pd
import pytest

from solver.commands.cli import sweep_main
from solver.commands.sweep import Interrupted, parse_sets, run_sweep, solve_point, write_plots
from tests.helpers import make_config, rows_from

GRID = ["shapes.max_unique=1,2", "batching.max_batch_size=2,4"]


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the point functions below
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


def tiny_config(tmp_path):
    prompts, gens = [40, 100, 130, 60, 250, 200, 64, 190], [10, 12, 30, 10, 5, 30, 12, 7]
    return make_config(tmp_path, {"tiny": rows_from(prompts, gens)}, {"tiny": {"p95_latency_ms": 900}},
                       shapes={"max_unique": 2, "granularity": 64}, batching={"max_batch_size": 4},
                       solver={"time_limit_s": 1, "workers": 1, "log_progress": False})


def sweep(tmp_path, out, **kw):
    kw = dict(dict(time_limit=1, workers=1, out=tmp_path / out), **kw)
    return run_sweep(str(tmp_path / "config.yaml"), parse_sets(GRID), **kw)


def marker(cfg, point, what):
    """A file beside the config (the workers share this machine's tmp dir)."""
    name = "-".join(f"{v}" for v in point.values())
    return cfg.output.dir.parent / f"{what}-{name}"


def die_once(cfg, point, method, time_limit, requests):
    """Kills its own worker process on the first try of the point (2, 4)."""
    if tuple(point.values()) == (2, 4) and not marker(cfg, point, "died").exists():
        marker(cfg, point, "died").touch()
        os._exit(1)
    return solve_point(cfg, point, method, time_limit, requests)


def slow_after_first(cfg, point, method, time_limit, requests):
    if tuple(point.values()) != (1, 2):
        time.sleep(60)
    return solve_point(cfg, point, method, time_limit, requests)


def recorded(cfg, point, method, time_limit, requests):
    marker(cfg, point, "ran").touch()
    return solve_point(cfg, point, method, time_limit, requests)


def test_same_csv_and_plots_as_local(tmp_path, ray_local):
    tiny_config(tmp_path)
    local = sweep(tmp_path, "local", jobs=2)
    remote = sweep(tmp_path, "ray", backend="ray")
    assert (tmp_path / "local/sweep.csv").read_bytes() == (tmp_path / "ray/sweep.csv").read_bytes()
    assert len(local) == 4 and (local["status"] != "FAILED").all()
    assert list(zip(remote["shapes.max_unique"], remote["batching.max_batch_size"])) == \
        [(1, 2), (1, 4), (2, 2), (2, 4)]                     # grid order, whatever finished first
    for a, b in zip(write_plots(local, ["shapes.max_unique"], tmp_path / "local"),
                    write_plots(remote, ["shapes.max_unique"], tmp_path / "ray")):
        assert a.read_bytes() == b.read_bytes()


def test_killed_worker_is_retried(tmp_path, ray_local):
    tiny_config(tmp_path)
    frame = sweep(tmp_path, "ray", backend="ray", point_fn=die_once, max_retries=2)
    assert (tmp_path / "died-2-4").exists()
    assert len(frame) == 4 and (frame["status"] != "FAILED").all() and frame["error"].isna().all()


def test_ctrl_c_keeps_a_valid_partial_csv_and_resume_reruns_nothing_done(tmp_path, ray_local):
    tiny_config(tmp_path)
    path = tmp_path / "ray/sweep.csv"

    def interrupt_at_first_row():
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_at_first_row, daemon=True)
    watcher.start()
    started = time.monotonic()
    with pytest.raises(Interrupted) as info:
        sweep(tmp_path, "ray", backend="ray", point_fn=slow_after_first)
    watcher.join()
    assert time.monotonic() - started < 50                   # the sleeping points were cancelled
    assert info.value.done == 1 and info.value.total == 4
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["shapes.max_unique"], r["batching.max_batch_size"], r["status"] != "FAILED") for r in rows] == \
        [("1", "2", True)]
    frame = sweep(tmp_path, "ray", backend="ray", point_fn=recorded, resume=True)
    assert not (tmp_path / "ran-1-2").exists()
    assert all((tmp_path / f"ran-{k}-{b}").exists() for k, b in [(1, 4), (2, 2), (2, 4)])
    assert len(frame) == 4 and (frame["status"] != "FAILED").all()
    first = pd.read_csv(path).iloc[0]
    assert first["total_cost"] == pytest.approx(float(rows[0]["total_cost"]), rel=0, abs=0)


def test_missing_ray_is_one_message(tmp_path, monkeypatch, capsys):
    tiny_config(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)           # `import ray` raises ImportError
    out = tmp_path / "s"
    assert sweep_main([str(tmp_path / "config.yaml"), "--set", GRID[0], "--backend", "ray", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ['error: the ray backend needs Ray, an optional extra: pip install -e ".[ray]"']
    assert not out.exists()


def test_deterministic_time_gives_the_same_rows_on_both_backends_whatever_the_wall_limit(tmp_path, ray_local):
    """Under a work limit the wall limit does not bind: local with a long one and Ray with next to none
    give the same CSV, on points where CP-SAT stops on the work limit (not solved to optimality)."""
    import numpy as np

    rng = np.random.default_rng(5)
    buckets = {n: rows_from(rng.integers(1, 1500, 100), rng.integers(1, 300, 100), n) for n in ("a", "b")}
    make_config(tmp_path, buckets, {"a": {"sequential_time_ms": 6e4}, "b": {"p95_latency_ms": 6000}},
                shapes={"max_unique": 4, "granularity": 64}, batching={"max_batch_size": 16},
                solver={"workers": 2, "log_progress": False, "lns_sets": 8})
    grid = parse_sets(["shapes.max_unique=3,5"])
    common = dict(workers=2, deterministic_time=0.2)
    local = run_sweep(str(tmp_path / "config.yaml"), grid, time_limit=600, jobs=2, out=tmp_path / "local", **common)
    run_sweep(str(tmp_path / "config.yaml"), grid, time_limit=0.01, backend="ray", out=tmp_path / "ray", **common)
    assert (tmp_path / "local/sweep.csv").read_bytes() == (tmp_path / "ray/sweep.csv").read_bytes()
    assert len(local) == 2 and local["limits_hold"].all()
    assert (local["gap"] > 0.01).all()                      # not proven optimal: stopped by the work limit
