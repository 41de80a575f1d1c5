"""The shape-set LNS (solver/lns.py): never worse than dp, exact on a tiny case dp misses, seeded,
time-boxed, valid plans, and its place in the cpsat pipeline."""
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from models.instance import Instance
from solver.lns import LnsSettings, run_lns
from solver.pipeline import evaluate, load_all, run_heuristic, solve
from tests.brute import brute_force
from tests.helpers import checked, load, make_config, rows_from

QUIET = {"time_limit_s": 10, "workers": 2, "log_progress": False}


def instance(tmp_path, prompts, gens, limits=None, k=3, batch=4, cost_model=None, solver=None):
    sections = {"shapes": {"max_unique": k, "granularity": 64}, "batching": {"max_batch_size": batch},
                "solver": dict(QUIET, **(solver or {}))}
    if cost_model:
        sections["cost_model"] = cost_model
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": limits or {}}, **sections)
    cfg = load(path)
    return Instance(cfg, load_all(cfg))


def lns(inst, seconds=10.0, **kw):
    kw.setdefault("log_progress", False)
    return run_lns(inst, time.monotonic() + seconds, LnsSettings(**kw))


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(1, 900), st.integers(1, 120)), min_size=3, max_size=40),
       st.sampled_from([{}, {"sequential_time_ms": 4000}, {"p95_latency_ms": 1200}, {"pad_ratio": 0.8}]),
       st.integers(1, 4), st.integers(1, 8))
def test_never_worse_than_dp_and_valid(tmp_path_factory, reqs, limits, k, batch):
    inst = instance(tmp_path_factory.mktemp("lns"), [p for p, _ in reqs], [g for _, g in reqs], limits, k, batch)
    dp = run_heuristic(inst, "dp")
    found = lns(inst, max_sets=30)
    r = checked(inst, "lns", found.best.plans)
    assert r.rank() <= dp.rank()
    assert found.best.shapes[-1] == inst.all_shapes[int(np.searchsorted(inst.all_shapes, inst.max_prompt))]


def test_equals_brute_force_where_dp_is_not_optimal(tmp_path):
    """A huge batch overhead makes one batch (one shape) optimal, while the shape DP's estimate (no
    batch overhead, free compiles) wants every shape: dp tries 3 and 2 shapes only."""
    prompts, gens = [10, 20, 70, 80, 130, 140], [5, 5, 5, 5, 5, 5]
    cm = {"compile_cost": [0, 0, 0], "batch_overhead_cost": 1.0e10}
    inst = instance(tmp_path, prompts, gens, k=3, batch=6, cost_model=cm)
    best = brute_force(inst.cfg, inst.requests)
    dp = run_heuristic(inst, "dp")
    assert dp.objective > best.objective * (1 + 1e-6)
    r = checked(inst, "lns", lns(inst).best.plans)
    assert r.objective == pytest.approx(best.objective, rel=1e-12)
    assert r.shapes == [192]


def medium(tmp_path, n=200, seed=3, **kw):
    rng = np.random.default_rng(seed)
    prompts, gens = rng.integers(1, 1500, n), rng.integers(1, 300, n)
    return instance(tmp_path, prompts, gens, {"sequential_time_ms": 3e4}, k=kw.pop("k", 5), batch=16, **kw)


def test_deterministic_for_a_seed(tmp_path):
    inst = medium(tmp_path)
    runs = [lns(inst, 60, seed=7, max_sets=10) for _ in range(2)]
    assert list(runs[0].search.evaluator.sets) == list(runs[1].search.evaluator.sets)
    assert [(e.shapes, e.key) for e in runs[0].elite] == [(e.shapes, e.key) for e in runs[1].elite]
    other = lns(inst, 60, seed=8, max_sets=10)
    assert list(other.search.evaluator.sets) != list(runs[0].search.evaluator.sets)


def test_respects_the_deadline(tmp_path):
    inst = medium(tmp_path, n=800, k=8)
    budget = 0.5
    start = time.monotonic()
    found = lns(inst, budget)
    took = time.monotonic() - start
    assert found.best is not None and found.sets >= 1
    assert took <= budget + 0.5, f"{took:.2f}s for a {budget}s budget"


def test_continues_a_search(tmp_path):
    """A second call with `search` keeps the cache and the elite and evaluates new sets only."""
    inst = medium(tmp_path)
    first = lns(inst, 60, max_sets=8)
    seen = list(first.search.evaluator.sets)
    more = run_lns(inst, time.monotonic() + 60, LnsSettings(max_sets=14, log_progress=False), search=first.search)
    assert list(more.search.evaluator.sets)[:len(seen)] == seen and more.sets >= 14
    assert more.best.key <= first.best.key


def test_pipeline_stage_uses_the_whole_time_limit(tmp_path):
    """lns_share > 0: the LNS runs, its figures are reported, the answer ranks no worse than its plan, and
    without a proof (a gen ladder: no global bound) the run takes the whole time limit."""
    inst = medium(tmp_path, n=120, solver={"lns_share": 0.3, "time_limit_s": 3, "gen_caps": 4})
    r = solve(inst.cfg, ("cpsat",)).results["cpsat"]
    assert r.solver["lns_sets"] >= 1 and r.solver["status"] != "OPTIMAL"
    lns_plan = evaluate(inst, "lns", lns(inst, max_sets=1).best.plans, 0.0)
    assert r.rank() <= lns_plan.rank()
    assert r.time_s >= 0.95 * 3


def test_pipeline_without_lns(tmp_path):
    inst = instance(tmp_path, [40, 100, 130, 60, 250], [10, 12, 30, 10, 5], {"sequential_time_ms": 2000},
                    solver={"lns_share": 0.0, "time_limit_s": 2})
    r = solve(inst.cfg, ("cpsat",)).results["cpsat"]
    assert "lns_objective" not in r.solver and not r.solver["plan_source"].startswith("lns")


def test_shares_must_leave_cpsat_time(tmp_path):
    with pytest.raises(Exception, match="polish_share \\+ lns_share"):
        instance(tmp_path, [10], [1], solver={"lns_share": 0.6, "polish_share": 0.5})
