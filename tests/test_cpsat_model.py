import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from solver.heuristics import HEURISTICS
from solver.pipeline import solve
from solver.verify import verify_plans
from tests.helpers import brute_force, load, make_config, recompute, rows_from


def tiny(tmp_path, prompts, gens, limits=None, k=2, batch=3):
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": limits or {}},
                       shapes={"max_unique": k, "granularity": 64}, batching={"max_batch_size": batch},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False})
    return load(path)


def check(cfg, res):
    """Every plan valid and its metrics equal an independent recomputation."""
    reqs = res.requests
    for method, r in res.results.items():
        assert verify_plans(cfg, reqs, r.plans) == []
        for name, m in r.metrics.items():
            ref = recompute(cfg, reqs[name], r.plans[name].batch_of, r.plans[name].seq_align)
            assert m.cost == pytest.approx(ref["cost"], rel=1e-12)
            assert m.sequential_time_ms == pytest.approx(ref["sequential_time_ms"], rel=1e-12)
            assert m.pad_tokens == ref["pad_tokens"]


CASES = [
    ([40, 100, 130, 60, 250], [10, 12, 30, 10, 5], {}),
    ([40, 100, 130, 60, 250], [10, 12, 30, 10, 5], {"sequential_time_ms": 900}),
    ([300, 20, 20, 20, 130, 65], [40, 2, 50, 3, 3, 3], {"p95_latency_ms": 800}),
    ([300, 20, 20, 20, 130, 65], [40, 2, 50, 3, 3, 3], {"pad_ratio": 1.5}),
]


@pytest.mark.parametrize("prompts,gens,limits", CASES)
def test_cpsat_equals_brute_force(tmp_path, prompts, gens, limits):
    cfg = tiny(tmp_path, prompts, gens, limits)
    res = solve(cfg, ("cpsat",))
    check(cfg, res)
    r = res.results["cpsat"]
    best = brute_force(cfg, res.requests)
    assert r.solver["status"] == "OPTIMAL"
    assert r.objective == pytest.approx(best, rel=1e-9)
    assert r.solver["best_bound"] <= best * (1 + 1e-9)
    assert r.feasible


def test_infeasible_limit_is_reported(tmp_path):
    cfg = tiny(tmp_path, [40, 100, 130, 60, 250], [10, 12, 30, 10, 5], {"sequential_time_ms": 10})
    res = solve(cfg, ("cpsat",))
    check(cfg, res)
    assert brute_force(cfg, res.requests) == float("inf")
    assert not res.results["cpsat"].feasible
    assert res.results["cpsat"].metrics["a"].broken() == ["sequential_time_ms"]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 60)), min_size=2, max_size=6),
       st.sampled_from([{}, {"sequential_time_ms": 1500}, {"p95_latency_ms": 800}, {"pad_ratio": 1.0}]),
       st.integers(1, 3))
def test_property_never_worse_than_heuristics(tmp_path_factory, reqs, limits, k):
    tmp = tmp_path_factory.mktemp("prop")
    prompts, gens = [p for p, _ in reqs], [g for _, g in reqs]
    cfg = tiny(tmp, prompts, gens, limits, k=k)
    res = solve(cfg, ("cpsat",) + tuple(HEURISTICS))
    check(cfg, res)
    cp = res.results["cpsat"]
    for name in HEURISTICS:
        h = res.results[name]
        if h.feasible:
            assert cp.feasible and cp.objective <= h.objective * (1 + 1e-9)
    best = brute_force(cfg, res.requests)
    if cp.solver["best_bound"] is not None and np.isfinite(best):
        assert cp.solver["best_bound"] <= best * (1 + 1e-9)
        assert cp.objective == pytest.approx(best, rel=1e-9)
    assert cp.feasible == np.isfinite(best)
