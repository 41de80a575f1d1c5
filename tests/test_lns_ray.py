"""The shape-set LNS on Ray (solver.backend: ray): the same search as in this process for a seed and a
number of sets, the instance put into the object store once per search, the config keys validated,
and one message with the install command when Ray is missing."""
import sys
import time

import numpy as np
import pytest

from models.errors import InputError
from models.instance import Instance
from solver.commands.cli import solve_main
from solver.lns import LnsSettings, run_lns
from solver.parallel import RAY_MISSING
from solver.pipeline import load_all, solve
from tests.helpers import checked, load, make_config, rows_from


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


@pytest.fixture
def puts(ray_local, monkeypatch):
    """Every object put into Ray's object store, by type name."""
    seen = []
    real = ray_local.put

    def put(obj, *args, **kw):
        seen.append(type(obj).__name__)
        return real(obj, *args, **kw)

    monkeypatch.setattr(ray_local, "put", put)
    return seen


def two_buckets(tmp_path, n=100, **solver):
    rng = np.random.default_rng(11)
    buckets = {name: rows_from(rng.integers(1, 1500, n), rng.integers(1, 300, n), name) for name in ("a", "b")}
    limits = {"a": {"sequential_time_ms": 4e4}, "b": {"p95_latency_ms": 3000}}
    return make_config(tmp_path, buckets, limits, shapes={"max_unique": 5, "granularity": 64},
                       batching={"max_batch_size": 16},
                       solver=dict({"time_limit_s": 5, "workers": 1, "log_progress": False}, **solver))


def search(inst, backend, sets=10):
    found = run_lns(inst, time.monotonic() + 120, LnsSettings(seed=3, max_sets=sets, backend=backend,
                                                              log_progress=False))
    found.search.close()
    return found


def test_ray_search_equals_the_local_one(tmp_path, puts):
    cfg = load(two_buckets(tmp_path))
    inst = Instance(cfg, load_all(cfg))
    local = search(inst, "local")
    remote = search(inst, "ray")
    assert remote.sets == local.sets >= 10             # max_sets is checked between steps
    assert list(remote.search.evaluator.sets) == list(local.search.evaluator.sets)    # same sets, same order
    assert [(e.shapes, e.key) for e in remote.elite] == [(e.shapes, e.key) for e in local.elite]
    for name, plan in local.best.plans.items():
        assert np.array_equal(remote.best.plans[name].batch_of, plan.batch_of)
        assert np.array_equal(remote.best.plans[name].seq_align, plan.seq_align)
    checked(inst, "lns", remote.best.plans)
    assert puts.count("Instance") == 1                   # shipped once, not once per task or step
    assert puts.count("function") >= 3                   # several steps ran as Ray tasks


def test_pipeline_on_ray_gives_the_local_answer(tmp_path, puts):
    """solver.backend: ray reaches the LNS stage; under a work limit the whole solve is the local one."""
    path = two_buckets(tmp_path, n=60, deterministic_time=0.2, lns_sets=8)
    cfg = load(path)
    local = solve(cfg, ("cpsat",)).results["cpsat"]
    assert puts == []
    cfg.solver.backend = "ray"
    remote = solve(cfg, ("cpsat",)).results["cpsat"]
    assert puts.count("Instance") == 1
    for key in ("lns_sets", "lns_objective", "lns_shapes", "objective", "status", "plan_source"):
        assert remote.solver[key] == local.solver[key], key
    assert local.solver["lns_sets"] >= 8
    assert [m.cost for m in remote.metrics.values()] == [m.cost for m in local.metrics.values()]


def test_missing_ray_is_one_message(tmp_path, monkeypatch, capsys):
    path = two_buckets(tmp_path, n=10)
    monkeypatch.setitem(sys.modules, "ray", None)             # `import ray` raises ImportError
    out = tmp_path / "o"
    assert solve_main([str(path), "--backend", "ray", "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {RAY_MISSING}"]
    path.write_text(path.read_text().replace("solver:", "solver:\n  backend: ray"))
    assert solve_main([str(path), "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {RAY_MISSING}"]
    assert not out.exists()


@pytest.mark.parametrize("extra, message", [
    ("backend: rey", "solver.backend: backend='rey' must be 'local' or 'ray'"),
    ("backend: null", "solver.backend: backend=None must be 'local' or 'ray'"),
    ("address: 'host:6379'", "solver.address: address='host:6379' needs backend: ray (backend is 'local')"),
    ("address: 7", "solver.address: address=7 must be a Ray address"),
    ("deterministic_time: 0", "solver.deterministic_time: deterministic_time=0 must be > 0"),
    ("deterministic_time: -2.5", "solver.deterministic_time: deterministic_time=-2.5 must be > 0"),
    ("lns_sets: 0", "solver.lns_sets: Input should be greater than or equal to 1"),
])
def test_config_keys_are_checked(tmp_path, extra, message):
    path = two_buckets(tmp_path, n=5)
    path.write_text(path.read_text().replace("solver:", f"solver:\n  {extra}"))
    line = path.read_text().splitlines().index(f"  {extra}") + 1
    with pytest.raises(InputError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}:{line}: {message}")


def test_address_on_the_command_line_needs_ray(tmp_path, capsys):
    path = two_buckets(tmp_path, n=5)
    assert solve_main([str(path), "--address", "127.0.0.1:1", "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "address='127.0.0.1:1' needs backend: ray" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
