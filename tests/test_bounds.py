import itertools

from hypothesis import HealthCheck, given, settings, strategies as st

from models.instance import Instance
from solver.bounds import bucket_bounds, least_padding, objective_bound
from solver.explain import explain_infeasible
from solver.pipeline import solve
from tests.helpers import brute_force, load, make_config, rows_from


def tiny(tmp_path, prompts, gens, limits=None, k=2, batch=3):
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": limits or {}},
                       shapes={"max_unique": k, "granularity": 64}, batching={"max_batch_size": batch},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False})
    return load(path)


def padding_brute_force(prompts, k, gran=64):
    """Least prompt padding over every set of at most k shapes covering the longest prompt."""
    aligned = sorted({-(-p // gran) * gran for p in prompts})
    best = None
    for r in range(1, k + 1):
        for shapes in itertools.combinations(aligned, r):
            if shapes[-1] < max(prompts):
                continue
            pad = sum(min(s for s in shapes if s >= p) - p for p in prompts)
            best = pad if best is None else min(best, pad)
    return best


requests = st.lists(st.tuples(st.integers(1, 700), st.integers(1, 40)), min_size=2, max_size=7)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests, st.integers(1, 4))
def test_least_padding_equals_brute_force(tmp_path_factory, reqs, k):
    prompts, gens = zip(*reqs)
    cfg = tiny(tmp_path_factory.mktemp("p"), prompts, gens, k=k)
    res = solve(cfg, ("dp", "greedy", "baseline"))
    inst = Instance(cfg, res.requests)
    pad, shapes = least_padding(inst, res.requests["a"], k)
    assert pad == padding_brute_force(list(prompts), k)
    assert len(shapes) <= k and max(shapes) >= max(prompts)
    for r in res.results.values():                 # no plan pads less than the bound
        assert r.metrics["a"].pad_tokens >= pad


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 40)), min_size=2, max_size=5), st.integers(1, 2))
def test_objective_bound_below_brute_force(tmp_path_factory, reqs, k):
    prompts, gens = zip(*reqs)
    cfg = tiny(tmp_path_factory.mktemp("b"), prompts, gens, k=k)
    res = solve(cfg, ("cpsat",))
    bound = objective_bound(Instance(cfg, res.requests))
    best = brute_force(cfg, res.requests)
    assert bound <= best * (1 + 1e-9)
    # the reported bound is a bound of the exact optimum, and proves it (within the solver's 1e-5 gap)
    info = res.results["cpsat"].solver
    assert info["status"] == "OPTIMAL"
    assert best * (1 - 2e-5) <= info["best_bound"] <= best * (1 + 1e-9)


def test_unreachable_pad_ratio_is_named_with_least_value(tmp_path):
    prompts, gens = [40, 100, 130, 60, 250, 500], [10, 12, 30, 10, 5, 8]
    cfg = tiny(tmp_path, prompts, gens, {"pad_ratio": 0.01, "sequential_time_ms": 1e9}, k=1)
    res = solve(cfg, ("cpsat",))
    lead = res.results["cpsat"]
    assert lead.metrics["a"].broken() == ["pad_ratio"]
    lines = explain_infeasible(cfg, res.requests, lead)
    least = padding_brute_force(prompts, 1) / (sum(prompts) + sum(gens))
    assert len(lines) == 1
    assert lines[0] == f"a: pad_ratio 0.01 cannot be met with 1 shapes: the least reachable is {least:.6g}"


def test_conflicting_limits_are_named(tmp_path):
    # each limit alone is reachable, together they are not: one batch is fast in sequence but pads gens
    prompts, gens = [40, 40, 40, 40], [1, 1, 1, 300]
    cfg = tiny(tmp_path, prompts, gens, batch=4)
    inst = Instance(cfg, solve(cfg, ("dp",)).requests)
    b = bucket_bounds(inst, "a")
    limits = {"pad_ratio": b.pad_ratio + 0.01, "sequential_time_ms": b.sequential_time_ms * 1.001}
    cfg = tiny(tmp_path, prompts, gens, limits, batch=4)
    res = solve(cfg, ("cpsat",))
    lead = res.results["cpsat"]
    assert not lead.feasible
    lines = explain_infeasible(cfg, res.requests, lead)
    assert lines and all("conflicts with" in line for line in lines)
    assert any(line.startswith(f"a: {key}") for key in lead.metrics["a"].broken() for line in lines)
