import itertools

import numpy as np
import pytest

from models.dp import best_count, shape_dp, shape_dp_counts
from models.instance import Instance
from models.requests import Requests
from solver.heuristics import HEURISTICS, counts_to_try, dp_plans, pow2_shapes, weighted_shape_dp_counts
from solver.pipeline import evaluate
from tests.brute import BucketAssignment, broken_limits, limits_of, objective_of, plan_metrics
from tests.helpers import load, make_config, recompute, rows_from


def instance(tmp_path, prompts, gens, limits=None, **sections):
    sections.setdefault("shapes", {"max_unique": 3, "granularity": 64})
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": limits or {}}, **sections)
    cfg = load(path)
    return Instance(cfg, {"a": Requests.from_arrays("a", prompts, gens, [f"r-{i}" for i in range(len(prompts))])})


@pytest.mark.parametrize("method", sorted(HEURISTICS))
def test_every_heuristic_gives_a_valid_plan(tmp_path, method):
    rng = np.random.default_rng(1)
    prompts, gens = rng.integers(1, 900, 300), rng.integers(1, 300, 300)
    inst = instance(tmp_path, prompts, gens, {"sequential_time_ms": 5e4}, batching={"max_batch_size": 16})
    res = evaluate(inst, method, HEURISTICS[method](inst), 0.0)   # raises if invalid
    ref = recompute(inst.cfg, inst.requests["a"], res.plans["a"].batch_of, res.plans["a"].seq_align)
    assert res.metrics["a"].cost == pytest.approx(ref["cost"], rel=1e-12)
    assert len(res.shapes) <= 3


@pytest.mark.parametrize("k,gran,expected", [
    (3, 64, [64, 128, 1024]),                 # 256 and 512 dropped (the largest below the top), 1024 kept
    (8, 64, [64, 128, 256, 512, 1024]),
    (1, 64, [1024]),
    (3, 128, [128, 256, 1024]),
])
def test_pow2_shapes_are_powers_of_two(tmp_path, k, gran, expected):
    inst = instance(tmp_path, [10, 100, 300, 1000], [1, 1, 1, 1], shapes={"max_unique": k, "granularity": gran})
    shapes = pow2_shapes(inst)
    assert shapes == expected
    assert all(s > 0 and s & (s - 1) == 0 for s in shapes)


def test_baseline_rounds_up_to_powers_of_two_in_arrival_order(tmp_path):
    """Each request at the smallest kept power of two holding it; batches per shape in arrival order."""
    prompts, gens = [300, 10, 1000, 100, 700, 20, 900], [5, 1, 2, 3, 4, 6, 7]
    inst = instance(tmp_path, prompts, gens, batching={"max_batch_size": 2})
    plan = HEURISTICS["baseline"](inst)["a"]
    assert plan.seq_align[plan.batch_of].tolist() == [1024, 64, 1024, 128, 1024, 64, 1024]
    members = sorted(sorted(np.flatnonzero(plan.batch_of == b).tolist()) for b in range(plan.num_batches))
    assert members == [[0, 2], [1, 5], [3], [4, 6]]


def test_shape_dp_equals_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(20):
        m = int(rng.integers(2, 8))
        levels = np.sort(rng.choice(np.arange(1, 40), m, replace=False)) * 64
        counts = rng.integers(1, 5, m).astype(float)
        a = -counts * levels * 0.5
        fixed = rng.uniform(0, 500, m)
        k = int(rng.integers(1, m + 1))
        _, value = shape_dp(levels, a, counts, np.zeros(m), fixed, k)
        per_count = shape_dp_counts(levels, a, counts, np.zeros(m), fixed, k)
        exact = {}
        for r in range(1, k + 1):
            for combo in itertools.combinations(range(m), r):
                if combo[-1] != m - 1:
                    continue
                chosen = levels[list(combo)]
                serve = chosen[np.searchsorted(chosen, levels)]
                exact[r] = min(exact.get(r, np.inf), float((a + counts * serve).sum() + fixed[list(combo)].sum()))
        assert value == pytest.approx(min(exact.values()))
        assert sorted(per_count) == sorted(exact)
        for r, (chosen, total) in per_count.items():
            assert len(chosen) == r and total == pytest.approx(exact[r])
            serve = np.array(chosen)[np.searchsorted(chosen, levels)]
            assert total == pytest.approx(float((a + counts * serve).sum() + fixed[np.isin(levels, chosen)].sum()))


def test_best_count_is_the_least_total():
    assert best_count({1: ([64], 5.0), 2: ([64, 128], 3.0), 3: ([64, 128, 192], 4.0)}) == 2
    assert best_count({2: ([64, 128], 1.0), 4: ([64, 128, 192, 256], 7.0)}) == 2
    assert counts_to_try(6) == [6, 5, 4, 3] and counts_to_try(5) == [5, 4, 3] and counts_to_try(1) == [1]


def independent_rank(cfg, req, plan):
    """(limits broken, total relative excess, objective) of a one-bucket plan, from recompute alone."""
    metrics = plan_metrics(cfg, {"a": req}, {"a": BucketAssignment(plan.batch_of.tolist(), plan.seq_align.tolist())})
    limits = limits_of(cfg)["a"]
    excess = sum((metrics["a"][k] - v) / v for k, v in limits.items() if metrics["a"][k] > v)
    return bool(broken_limits(cfg, metrics)), excess, objective_of(cfg, metrics)


def test_dp_keeps_the_best_shape_count(tmp_path):
    """dp tries the DP's best shape count and fewer; its plan ranks no worse than the plan of any
    count tried, every plan ranked from an independent recomputation."""
    rng = np.random.default_rng(5)
    prompts, gens = rng.integers(1, 2000, 160), rng.integers(1, 80, 160)
    for limit in (2.0e4, 3.0e4, 5.0e4):
        inst = instance(tmp_path, prompts, gens, {"sequential_time_ms": limit},
                        shapes={"max_unique": 8, "granularity": 64}, batching={"max_batch_size": 32})
        weights = inst.cfg.objective.weight_map()
        per_count = weighted_shape_dp_counts(inst, weights)
        req = inst.requests["a"]
        broken, excess, objective = independent_rank(inst.cfg, req, HEURISTICS["dp"](inst)["a"])
        for n in counts_to_try(best_count(per_count)):
            o_broken, o_excess, o_objective = independent_rank(inst.cfg, req, dp_plans(inst, per_count[n][0], weights)[1]["a"])
            assert broken <= o_broken
            if broken == o_broken:
                assert excess <= o_excess * (1 + 1e-9) + 1e-12
                if not broken:
                    assert objective <= o_objective * (1 + 1e-9)
