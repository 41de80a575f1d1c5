"""The whole-batch bound (solver/batch_bound.py): at any duals of the right signs it stays at or below brute force's
optimum, it equals the formula recomputed over every batch enumerated from the requests, and its per-group
minimum equals an enumeration of every batch holding the group."""
import itertools
import time

import numpy as np
import pytest

from models.cost import allowed_over
from models.instance import Instance
from solver.batch_bound import _evaluate, _ratios, ascend, batch_bound, multipliers
from solver.global_bound import GlobalBound, global_bound
from tests.test_global_bound import CASES
from tests.brute import brute_force
from tests.helpers import spec_batch
from tests.test_models_alone import config

LIMIT_CASES = CASES + [({"pad_tokens": 600}, 2), ({"max_latency_ms": 900}, 2)]   # every limit kind
PROMPTS, GENS = [300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5]


def solved(tmp_path, limits, k, weights=None, caps=3, cuts=False, buckets=None):
    sections = {"objective": {"weights": weights}} if weights else {}
    cfg, reqs = config(tmp_path, buckets or {"a": (PROMPTS, GENS)}, {"a": limits}, k=k, **sections)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=caps)
    res = model.run(30, per_group=1, progress=False, cuts=cuts)
    return cfg, reqs, model, res


NOISE = {"sequential_time_ms": 1e6, "pad": 1e5, "p95_latency_ms": 1e8, "p99_latency_ms": 1e8, "cost": 0.3}


def random_duals(model, rng) -> np.ndarray:
    """Any duals: demand rows free; limit rows mostly below zero, a fifth above (the bound reads those as 0); the
    rest scaled from the LP's (cut and pair rows, y <= k, y <= z), a few turned above zero."""
    y = model.last_priced_out * rng.uniform(0.0, 2.0, len(model.last_priced_out))
    y[rng.random(len(y)) < 0.05] *= -1.0
    for b in model.buckets:
        y[b.demand] = model.last_priced_out[b.demand] * rng.uniform(0.5, 1.5, len(b.n)) + rng.normal(0, 1e8, len(b.n))
        for key, row in b.limit_rows.items():
            y[row] = rng.exponential(NOISE[key]) * (1.0 if rng.random() < 0.2 else -1.0)
    return y


@pytest.mark.parametrize("limits,k", LIMIT_CASES)
def test_below_the_optimum_at_the_lp_duals_and_at_random_duals(tmp_path, limits, k):
    cfg, reqs, model, res = solved(tmp_path, limits, k, cuts=True)
    best = brute_force(cfg, reqs).objective
    assert res.converged
    assert batch_bound(model, model.last_priced_out) <= best * (1 + 1e-9)
    assert batch_bound(model, model.first_priced_out) <= best * (1 + 1e-9)
    rng = np.random.default_rng(len(limits) * 7 + k)
    for _ in range(30):
        assert batch_bound(model, random_duals(model, rng)) <= best * (1 + 1e-9)


def test_below_the_optimum_on_two_buckets_sharing_shapes(tmp_path):
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 1200}, 2, caps=2, cuts=True,
                                   buckets={"a": ([40, 100, 130], [10, 12, 30]), "b": ([60, 250, 190], [10, 5, 40])})
    best = brute_force(cfg, reqs).objective
    rng = np.random.default_rng(3)
    for y in [model.last_priced_out] + [random_duals(model, rng) for _ in range(30)]:
        assert batch_bound(model, y) <= best * (1 + 1e-9)


WEIGHTS = [{"cost": 1.0, "pad_tokens": 2.0e5}, {"cost": 1.0, "sequential_time_ms": 3.0e6}, {"sequential_time_ms": 1.0},
           {"pad_tokens": 1.0}]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_below_the_optimum_under_objective_weights(tmp_path, weights):
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, weights=weights)
    best = brute_force(cfg, reqs).objective
    rng = np.random.default_rng(5)
    for y in [model.last_priced_out] + [random_duals(model, rng) for _ in range(20)]:
        assert batch_bound(model, y) <= best * (1 + 1e-9)


def test_lifts_the_rounded_down_lp_where_whole_batches_cost_more(tmp_path):
    """One cap rounds every gen down to the shortest: the LP charges a shared batch's overhead and latency there,
    whole batches at their longest gen cost more, and a binding sequential-time limit makes batches shared."""
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, caps=1)
    best = brute_force(cfg, reqs).objective
    lifted = batch_bound(model, model.last_priced_out)
    assert res.converged and res.bound < lifted <= best * (1 + 1e-9)


def test_global_bound_takes_the_higher_of_the_two(tmp_path):
    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": {"sequential_time_ms": 900}}, k=2)
    res = global_bound(Instance(cfg, reqs), 1e9, 30, max_caps=1, progress=False)
    assert res.batch_bound is not None and res.bound == max(res.batch_bound, res.lp_value)


# --- the formula, recomputed over every batch of the requests --------------------------------------------

def enumerated_bound(cfg, reqs, model, y) -> float:
    """Spec-level recomputation: every batch (shape, members) of at most max_batch_size requests of a bucket at a
    shape holding them, its cost, latency and pad from tests.helpers.spec_batch; rows as the bound reads them (pad:
    shape + longest gen per member against the budget plus the real tokens; p95/p99: members over the limit)."""
    cm, weights = cfg.cost_model, cfg.objective.weight_map()
    wc, wp, ws = (weights.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
    shapes = model.shapes
    z_rc = wc * np.array([cm.compile_cost[0] + cm.compile_cost[1] * s + cm.compile_cost[2] * s * s for s in shapes])
    total = 0.0
    for b, bucket in zip(model.buckets, cfg.buckets):
        req, limits = reqs[bucket.name], dict(bucket.limits.items())
        pi = y[b.demand][b.request_group]
        dual = {key: min(float(y[row]), 0.0) for key, row in b.limit_rows.items()}
        real = int(req.prompt.sum() + req.gen.sum())
        budgets = [limits[k] for k in ("pad_tokens",) if k in limits] + \
                  ([limits["pad_ratio"] * real] if "pad_ratio" in limits else [])
        rhs = {"sequential_time_ms": limits.get("sequential_time_ms"), "cost": limits.get("cost"),
               "pad": np.floor(min(budgets) + 1e-9) + real if budgets else None}
        for key, pct in (("p95_latency_ms", 95), ("p99_latency_ms", 99)):
            if key in limits:
                rhs[key] = allowed_over(len(req.gen), pct)
        total += float(pi.sum()) + sum(dual[k] * rhs[k] for k in dual)
        total += wp * -real                                   # the pad objective counts shape + gen less the real
        link = np.zeros((len(b.n), len(shapes)))
        for g, i in zip(*np.nonzero((b.cut_of >= 0) & (b.cut_of < len(y)))):
            link[g, i] += y[b.cut_of[g, i]]
        for g, c in zip(*np.nonzero((b.link_of >= 0) & (b.link_of < len(y)))):   # a pair row's share sent to z
            alpha, to_k, to_z = (min(y[row], 0.0) for row in (b.link_of[g, c], b.y_k[c], b.y_z[c]))
            if to_k + to_z < 0:
                link[g, b.ci[c]] += alpha * to_z / (to_k + to_z)
        link = np.minimum(link, 0.0)
        z_rc += (b.n[:, None] * link).sum(axis=0)
        best = np.full(len(req.gen), np.inf)
        for size in range(1, cfg.batching.max_batch_size + 1):
            for members in itertools.combinations(range(len(req.gen)), size):
                for i, s in enumerate(shapes):
                    if any(req.fit[m] > s for m in members):
                        continue
                    pairs = [(int(req.prompt[m]), int(req.gen[m])) for m in members]
                    cost, lats, _ = spec_batch(cfg, int(s), pairs)
                    G = max(g for _, g in pairs)
                    if limits.get("max_latency_ms") is not None and max(lats) > limits["max_latency_ms"]:
                        continue
                    if cfg.batching.max_batch_tokens and size * (s + G) > cfg.batching.max_batch_tokens:
                        continue
                    tokens = size * (s + G)
                    rc = wc * cost + wp * tokens + ws * max(lats)
                    rc -= sum(pi[m] + link[b.request_group[m], i] for m in members)
                    rc -= dual.get("sequential_time_ms", 0.0) * max(lats) + dual.get("pad", 0.0) * tokens
                    rc -= dual.get("cost", 0.0) * cost
                    for key in ("p95_latency_ms", "p99_latency_ms"):
                        rc -= dual.get(key, 0.0) * sum(lat > limits[key] for lat in lats) if key in dual else 0.0
                    for m in members:
                        best[m] = min(best[m], rc / size)
        total += float(best.sum())
    return total + float(np.sort(np.minimum(z_rc, 0.0))[:cfg.shapes.max_unique].sum())


@pytest.mark.parametrize("limits,k", LIMIT_CASES)
def test_equals_the_formula_over_every_enumerated_batch(tmp_path, limits, k):
    cfg, reqs, model, res = solved(tmp_path, limits, k, cuts=True)
    rng = np.random.default_rng(11 + k)
    for y in [model.last_priced_out, model.first_priced_out] + [random_duals(model, rng) for _ in range(3)]:
        assert batch_bound(model, y) == pytest.approx(enumerated_bound(cfg, reqs, model, y), rel=1e-9, abs=1e-3)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_equals_the_formula_under_objective_weights(tmp_path, weights):
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900, "pad_ratio": 1.5}, 2, weights=weights)
    rng = np.random.default_rng(2)
    for y in [model.last_priced_out] + [random_duals(model, rng) for _ in range(3)]:
        assert batch_bound(model, y) == pytest.approx(enumerated_bound(cfg, reqs, model, y), rel=1e-9, abs=1e-3)


SHORT_GEN_LONG_PROMPT = {"a": ([40, 300, 130], [30, 2, 12]), "b": ([60, 250, 190], [10, 5, 40])}


LAT = ([150, 100, 700, 100, 150], [26, 22, 4, 2, 34])       # tests.test_models_alone: max latency 602 ms unconstrained


@pytest.mark.parametrize("buckets,limits,tokens,batch", [
    (SHORT_GEN_LONG_PROMPT, {"sequential_time_ms": 1200}, None, 3), (SHORT_GEN_LONG_PROMPT, {}, 700, 3),
    (SHORT_GEN_LONG_PROMPT, {"sequential_time_ms": 1200}, None, 1), ({"a": LAT, "b": LAT}, {"max_latency_ms": 560}, None, 3)])
def test_equals_the_formula_on_two_buckets(tmp_path, buckets, limits, tokens, batch):
    """One request alone at the smallest shape, the shortest gen at the longest prompt (levels whose shortest gens
    hold no one), batches of one (a token cap of 700, or max_batch_size 1) or none (a latency cap) at some (shape,
    gen)."""
    cfg, reqs = config(tmp_path, buckets, {"a": limits, "b": limits}, k=2, tokens=tokens, batch=batch)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=2)
    assert model.run(30, per_group=1, progress=False, cuts=True).converged
    rng = np.random.default_rng(9)
    for y in [model.last_priced_out] + [random_duals(model, rng) for _ in range(3)]:
        assert batch_bound(model, y) == pytest.approx(enumerated_bound(cfg, reqs, model, y), rel=1e-9, abs=1e-3)


def test_rows_added_after_the_last_solve_count_zero(tmp_path):
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, cuts=True)
    y = model.last_priced_out
    for cut in (1, 3, 10):
        short = y[:len(y) - cut]
        assert batch_bound(model, short) == pytest.approx(enumerated_bound(cfg, reqs, model, short), rel=1e-9, abs=1e-3)


def test_not_applied_outside_shape_mode_of_section_4_nor_above_the_work_limit(tmp_path, monkeypatch):
    from solver import batch_bound as module
    from tests.test_models_alone import REQUEST_SEMANTICS

    context = {"cost_model": dict(REQUEST_SEMANTICS["cost_model"], decode_context="batch")}
    for name, sections in (("r", REQUEST_SEMANTICS), ("c", context)):
        cfg, reqs = config(tmp_path / name, {"a": (PROMPTS, GENS)}, {"a": {}}, k=2, **sections)
        model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=2)
        model.run(30, progress=False)
        assert batch_bound(model, model.last_priced_out) is None and module.lift_seconds(model) == 0.0
    cfg, reqs, model, res = solved(tmp_path / "s", {}, 2, buckets={"a": (PROMPTS, [40, 2, 50, 3, 7, 5])})
    assert module.lift_seconds(model) > 0.0 and len(model.buckets[0].fine) != len(model.shapes)
    # the work: every (level, gen of the fine ladder) times the groups at or below that level
    work = sum(len(b.fine) * sum(int((b.gi <= i).sum()) for i in range(len(model.shapes))) for b in model.buckets)
    monkeypatch.setattr(module, "WORK_LIMIT", work)
    assert batch_bound(model, model.last_priced_out) is not None
    monkeypatch.setattr(module, "WORK_LIMIT", work - 1)
    assert batch_bound(model, model.last_priced_out) is None
    monkeypatch.setattr(module, "WORK_LIMIT", 1e12)
    assert batch_bound(model, model.last_priced_out, limit_s=-1.0) is None      # out of time: no bound


# --- the ascent on the limit duals ---------------------------------------------------------------------------

def at_limit_duals(model, duals, y):
    """The multipliers read from `duals` with the limit duals replaced by y (one dict per bucket)."""
    return [(pi, w, dict(ys)) for (pi, w, _), ys in zip(multipliers(model, duals), y)]


@pytest.mark.parametrize("limits,k", LIMIT_CASES)
def test_the_limit_use_is_a_supergradient(tmp_path, limits, k):
    """The bound is concave in the limit duals, so at any y and y' <= 0: f(y') <= f(y) + g(y) . (y' - y), with g
    the rhs less the use by the batches the minimum picks: a wrong use (or a wrong argmin size) breaks it."""
    cfg, reqs, model, res = solved(tmp_path, limits, k, cuts=True)
    rng = np.random.default_rng(len(limits) + 11 * k)
    duals = model.last_priced_out
    for _ in range(15):
        y, y2 = ([{key: -rng.exponential(NOISE[key]) * float(rng.random() < 0.8) for key in b.limit_rows}
                  for b in model.buckets] for _ in range(2))
        f, grads = _evaluate(model, at_limit_duals(model, duals, y), time.monotonic(), 30.0)
        f2, _ = _evaluate(model, at_limit_duals(model, duals, y2), time.monotonic(), 30.0)
        rise = sum(g[key] * (b2[key] - b1[key]) for g, b1, b2 in zip(grads, y, y2) for key in g)
        assert f2 <= f + rise + 1e-9 * abs(f) + 1e-6


@pytest.mark.parametrize("limits,k", LIMIT_CASES)
def test_the_ascent_stays_below_the_optimum_and_never_below_its_start(tmp_path, limits, k):
    cfg, reqs, model, res = solved(tmp_path, limits, k, cuts=True)
    best = brute_force(cfg, reqs).objective
    starts = [model.first_priced_out, model.last_priced_out]
    raised = ascend(model, starts, best, 30.0, steps=8)
    assert max(batch_bound(model, d) for d in starts) <= raised <= best * (1 + 1e-9)


def test_the_ascent_raises_the_bound_from_zero_limit_duals_where_a_limit_binds(tmp_path):
    """Limit duals of 0 drop the limit: the ascent must find duals that charge it (sequential time binding)."""
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, cuts=True)
    best = brute_force(cfg, reqs).objective
    duals = model.last_priced_out.copy()
    for b in model.buckets:
        duals[list(b.limit_rows.values())] = 0.0
    start = batch_bound(model, duals)
    raised = ascend(model, [duals], best, 30.0, steps=8)
    assert start < raised <= best * (1 + 1e-9)
    assert ascend(model, [duals], best, 30.0, steps=0) == start
    assert ascend(model, [duals], best, -1.0) is None                  # out of time before a first value


def test_a_step_goes_where_its_rule_says_and_a_slack_limit_stays_at_zero(tmp_path):
    """From limit duals of 0, with the sequential time binding and the pad ratio slack: one step moves only the
    coordinates that can rise, y1 = min(t g, 0) with t = (target - f0) / |g|^2 over them, and the answer is the
    better of f0 and f(y1)."""
    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900, "pad_ratio": 50.0}, 2, cuts=True)
    best = brute_force(cfg, reqs).objective
    duals = model.last_priced_out.copy()
    for b in model.buckets:
        duals[list(b.limit_rows.values())] = 0.0
    f0, (g0,) = _evaluate(model, multipliers(model, duals), time.monotonic(), 30.0)
    assert g0["sequential_time_ms"] < 0 < g0["pad"]
    t = (best - f0) / g0["sequential_time_ms"] ** 2
    y1 = [{"sequential_time_ms": min(t * g0["sequential_time_ms"], 0.0), "pad": 0.0}]
    f1, _ = _evaluate(model, at_limit_duals(model, duals, y1), time.monotonic(), 30.0)
    assert f1 > f0
    assert ascend(model, [duals], best, 30.0, steps=1) == pytest.approx(f1, rel=1e-12)


def test_out_of_time_within_the_ascent_keeps_the_best_value_met(tmp_path, monkeypatch):
    import solver.batch_bound as module

    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, cuts=True)
    duals = model.last_priced_out.copy()
    for b in model.buckets:
        duals[list(b.limit_rows.values())] = 0.0
    first = batch_bound(model, duals)
    real, calls = module._evaluate, []

    def first_only(*args):
        calls.append(1)
        return real(*args) if len(calls) == 1 else None

    monkeypatch.setattr(module, "_evaluate", first_only)
    assert ascend(model, [duals], brute_force(cfg, reqs).objective, 30.0, steps=3) == first
    assert len(calls) == 2


# --- the per-group minimum ------------------------------------------------------------------------------

def enumerated_ratios(v, n, F, cap):
    """Per group, the least (F + sum of member values) / size over every multiset of members (at most n of each
    group, at most cap in all) holding one member of that group, and every size at which it is met."""
    best, sizes = np.full(len(v), np.inf), [set() for _ in v]
    for counts in itertools.product(*[range(c + 1) for c in n]):
        size = sum(counts)
        if not 1 <= size <= cap:
            continue
        mean = (F + sum(c * x for c, x in zip(counts, v))) / size
        for g, c in enumerate(counts):
            if c and mean < best[g] - 1e-12:
                best[g], sizes[g] = mean, {size}
            elif c and abs(mean - best[g]) <= 1e-12:
                sizes[g].add(size)
    return best, sizes


@pytest.mark.parametrize("seed", range(40))
def test_ratios_equal_an_enumeration(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(1, 6))
    v = np.sort(rng.normal(0, 3, groups) if seed % 2 else rng.integers(-4, 5, groups).astype(float))
    n = rng.integers(1, 4, groups)
    F = float(rng.choice([0.0, 0.5, 2.0, 10.0, -1.0]))
    cap = int(rng.integers(1, 7))
    ratio, size = _ratios(v, n, F, cap)
    best, sizes = enumerated_ratios(v, n, F, cap)
    assert ratio == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert all(int(k) in ks for k, ks in zip(size, sizes))          # the size of a batch meeting the minimum


# --- lift: the whole-batch bound at the duals of the LPs no pair priced into --------------------------------

def test_lift_without_a_priced_out_lp_leaves_the_result(tmp_path):
    """No LP converged (no run at all): nothing to evaluate at, the result stays as it was."""
    from solver.global_bound import BoundResult, lift

    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": {"sequential_time_ms": 900}}, k=2)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=1)
    result = BoundResult(5.0, 6.0, False, 0, 0, 0.0)
    lift(model, result, 30.0)
    assert (result.bound, result.batch_bound) == (5.0, None)


def test_lift_at_the_lps_duals_when_no_cut_ran(tmp_path):
    """Converged without cuts (the first priced-out duals are the last): the lift evaluates there and the result's
    bound becomes the higher of its own and the lifted one."""
    from solver.global_bound import lift

    cfg, reqs, model, res = solved(tmp_path, {"sequential_time_ms": 900}, 2, caps=1)
    assert model.first_priced_out is model.last_priced_out
    start = batch_bound(model, model.last_priced_out)
    before = res.bound
    lift(model, res, 30.0)
    assert res.batch_bound is not None and res.batch_bound >= start - 1e-6 * abs(start)
    assert res.bound == max(before, res.batch_bound) and res.batch_bound <= brute_force(cfg, reqs).objective * (1 + 1e-9)


def test_lift_starts_from_the_better_of_the_duals_before_and_after_the_cuts(tmp_path):
    """With cuts the last priced-out duals differ from the first; here the whole-batch bound is higher at the
    last, and the lift's value is at least that (never below its best start), still below brute force."""
    from solver.global_bound import lift
    from tests.test_global_bound import CUT_CASES

    data, limits = CUT_CASES[0]
    cfg, reqs, model, res = solved(tmp_path, limits, 2, caps=3, cuts=True, buckets={"a": data})
    first, last = (batch_bound(model, d) for d in (model.first_priced_out, model.last_priced_out))
    assert model.first_priced_out is not model.last_priced_out and last > first
    lift(model, res, 30.0)
    assert last - 1e-6 * abs(last) <= res.batch_bound <= brute_force(cfg, reqs).objective * (1 + 1e-9)
