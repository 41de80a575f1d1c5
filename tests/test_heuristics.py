import itertools

import numpy as np
import pytest

from models.dp import best_count, shape_dp, shape_dp_counts
from models.instance import Instance
from models.requests import Requests
from solver.heuristics import HEURISTICS, counts_to_try, dp_plans, pow2_shapes, weighted_shape_dp_counts
from solver.pipeline import evaluate, rank_key
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


def test_pow2_covers_longest_and_fits(tmp_path):
    inst = instance(tmp_path, [10, 100, 300, 1000], [1, 1, 1, 1])
    shapes = pow2_shapes(inst)
    assert shapes[-1] >= 1000 and len(shapes) <= 3 and all(s % 64 == 0 for s in shapes)


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


def test_dp_keeps_the_best_shape_count(tmp_path):
    """dp tries the DP's best shape count and fewer; its plan ranks no worse than any count tried."""
    rng = np.random.default_rng(5)
    prompts, gens = rng.integers(1, 2000, 160), rng.integers(1, 80, 160)
    for limit in (2.0e4, 3.0e4, 5.0e4):
        inst = instance(tmp_path, prompts, gens, {"sequential_time_ms": limit},
                        shapes={"max_unique": 8, "granularity": 64}, batching={"max_batch_size": 32})
        weights = inst.cfg.objective.weight_map()
        per_count = weighted_shape_dp_counts(inst, weights)
        best_n = best_count(per_count)
        assert per_count[best_n][1] == min(total for _, total in per_count.values())
        res = evaluate(inst, "dp", HEURISTICS["dp"](inst), 0.0)
        for n in counts_to_try(best_n):
            other = evaluate(inst, "dp", dp_plans(inst, per_count[n][0], weights)[1], 0.0)
            assert rank_key(res) <= rank_key(other)
