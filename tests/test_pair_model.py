import numpy as np
import pytest

highspy = pytest.importorskip("highspy")

from models.instance import Instance, group_bucket
from models.pair_model import LiveLP, PairModel, solve_mip
from tests.helpers import brute_force
from tests.test_cpsat_model import CASES, tiny


def model_for(cfg, reqs, shapes):
    inst = Instance(cfg, reqs)
    classes = {n: group_bucket(r, np.asarray(shapes), 48) for n, r in reqs.items()}
    return inst, PairModel(cfg, inst.costs, shapes, reqs, cfg.objective.weight_map(), classes, 1e9)


def write_all_pairs(model):
    for b in model.buckets.values():
        g, c = np.meshgrid(np.arange(len(b.n)), np.arange(b.num_classes), indexing="ij")
        ok = (b.ci[c] >= b.gi[g]) & (b.cj[c] >= b.gj[g])
        b.add_pairs(g[ok], c[ok])


def requests_of(cfg):
    from solver.pipeline import load_all
    return load_all(cfg)


@pytest.mark.parametrize("prompts,gens,limits", CASES)
def test_mip_over_every_pair_equals_brute_force(tmp_path, prompts, gens, limits):
    """With every candidate shape and every pair written, the pair MIP is the exact joint problem (through scipy and
    through solve_mip, the polish's MIP)."""
    cfg = tiny(tmp_path, prompts, gens, limits)
    reqs = requests_of(cfg)
    inst, model = model_for(cfg, reqs, Instance(cfg, reqs).all_shapes)
    write_all_pairs(model)
    res, _, _ = model.solve(30, integral=True)
    assert res.status == 0
    best = brute_force(cfg, reqs)
    assert model.value(res) == pytest.approx(best, rel=1e-6)
    x, value, _ = solve_mip(model, 30)
    assert x is not None and value == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("prompts,gens,limits", CASES)
def test_column_generation_reaches_the_full_lp(tmp_path, prompts, gens, limits):
    """Pricing in from a few neighbours ends at the LP optimum over every pair."""
    cfg = tiny(tmp_path, prompts, gens, limits)
    reqs = requests_of(cfg)
    full, lp, priced = full_lp_and_priced(cfg, reqs)
    assert priced.converged
    assert priced.columns <= sum(len(b.pg) for b in full.buckets.values())
    assert priced.lp_value == pytest.approx(lp, rel=1e-7)
    assert priced.lp_value <= brute_force(cfg, reqs) * (1 + 1e-9)


def full_lp_and_priced(cfg, reqs):
    """(the model with every pair written, its LP value, the pricing result from a few neighbours only)."""
    shapes = Instance(cfg, reqs).all_shapes
    _, full = model_for(cfg, reqs, shapes)
    write_all_pairs(full)
    res, _, _ = full.solve(30)
    _, cg = model_for(cfg, reqs, shapes)
    for b in cg.buckets.values():
        b.add_neighbours(span_i=0, span_j=0)
    return full, full.value(res), cg.price_in(30)


# --- mutation survivors of models/pair_model.py (bench/mutation_pair_polish.md) ----------------------

WIDE = ([40, 100, 130, 60, 250, 300, 20, 190], [1, 2, 3, 4, 5, 6, 7, 8])    # 5 shapes, 8 gen levels


def written(b) -> set:
    return set(zip(b.pg.tolist(), b.pc.tolist()))


@pytest.mark.parametrize("span", [None, (0, 0), (1, 3), (2, 1), (0, 4)])
def test_neighbours_are_the_classes_a_few_levels_above_and_the_top_class(tmp_path, span):
    """add_neighbours writes, for every group, the classes at most span_i shape levels and span_j gen
    levels above its own (default 1 and 3), and the top class (largest shape, longest cap); nothing else."""
    cfg = tiny(tmp_path, *WIDE, k=3, batch=3)
    reqs = requests_of(cfg)
    _, model = model_for(cfg, reqs, Instance(cfg, reqs).all_shapes)
    b = model.buckets["a"]
    si, sj = span or (1, 3)
    b.add_neighbours() if span is None else b.add_neighbours(span_i=si, span_j=sj)
    shape_top = b.ci.max()
    top = [c for c in range(b.num_classes) if b.ci[c] == shape_top and b.cj[c] == b.cj[b.ci == shape_top].max()]
    expected = {(g, c) for g in range(len(b.n)) for c in range(b.num_classes)
                if 0 <= b.ci[c] - b.gi[g] <= si and 0 <= b.cj[c] - b.gj[g] <= sj} | {(g, top[0]) for g in range(len(b.n))}
    assert len(b.shapes) == 5 and len(b.caps) == 8
    assert written(b) == expected


def test_a_plans_own_pairs_hold_that_plan(tmp_path):
    """add_plan alone writes enough pairs for the MIP to place every request, at no more than the plan's
    own cost (recomputed from the spec); the demand cannot be met without them."""
    from models.instance import batch_caps
    from models.plan import BucketPlan
    from tests.helpers import q, recompute

    cfg = tiny(tmp_path, *WIDE, k=3, batch=3)
    reqs = requests_of(cfg)
    req = reqs["a"]
    shapes = np.asarray([128, 256, 320])
    plan = BucketPlan(np.array([0, 0, 1, 0, 1, 2, 1, 2]), np.array([128, 256, 320]))
    inst = Instance(cfg, reqs)
    classes = {"a": group_bucket(req, shapes, 48, batch_caps(req, plan), keep_all=True)}
    model = PairModel(cfg, inst.costs, shapes, reqs, cfg.objective.weight_map(), classes, 1e9)
    b = model.buckets["a"]
    b.add_plan(plan)
    res, _, _ = model.solve(30, integral=True)
    assert res.status == 0
    own = recompute(cfg, req, plan.batch_of, plan.seq_align)["cost"] + sum(
        q(cfg.cost_model.compile_cost, s) for s in (128, 256, 320))
    assert model.value(res) <= own * (1 + 1e-9)
    assert len(written(b)) <= 8


@pytest.mark.parametrize("limits", [{"sequential_time_ms": 250}, {"p95_latency_ms": 120}, {"pad_ratio": 0.5},
                                    {"sequential_time_ms": 250, "pad_ratio": 0.5}, {"pad_ratio": 0.5, "p95_latency_ms": 120}])
def test_column_generation_prices_binding_limits(tmp_path, limits):
    """With a limit binding in the LP (the LP optimum over every pair is above the unconstrained one),
    pricing in from each group's own class alone still ends at the LP optimum over every pair: the
    reduced costs account for the limit's dual."""
    cfg = tiny(tmp_path, *WIDE, limits, k=3, batch=3)
    reqs = requests_of(cfg)
    shapes = Instance(cfg, reqs).all_shapes
    values = {}
    for name, c in (("limited", cfg), ("free", tiny(tmp_path, *WIDE, {}, k=3, batch=3))):
        _, full = model_for(c, reqs, shapes)
        write_all_pairs(full)
        res, _, _ = full.solve(30)
        assert res.status == 0
        values[name] = full.value(res)
    assert values["limited"] > values["free"] * (1 + 1e-6)
    _, cg = model_for(cfg, reqs, shapes)
    for b in cg.buckets.values():
        b.add_neighbours(span_i=0, span_j=0)
    priced = cg.price_in(30)
    assert priced.converged
    assert priced.lp_value == pytest.approx(values["limited"], rel=1e-7)


def own_class_start(tmp_path, limits=None):
    cfg = tiny(tmp_path, *WIDE, limits or {}, k=3, batch=3)
    reqs = requests_of(cfg)
    _, cg = model_for(cfg, reqs, Instance(cfg, reqs).all_shapes)
    for b in cg.buckets.values():
        b.add_neighbours(span_i=0, span_j=0)
    return cg


def counting(monkeypatch):
    """A list that gains an entry at every LP solve of price_in's live model (LiveLP.solve wrapped)."""
    calls = []
    solve = LiveLP.solve

    def counted(self, *args, **kwargs):
        calls.append(1)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(LiveLP, "solve", counted)
    return calls


def test_price_in_reports_its_rounds_and_stops_at_max_rounds(tmp_path, monkeypatch):
    """rounds = LP solves; at most max_rounds of them (then not converged); none when under half a second
    is given; time_s is the wall time spent."""
    import math
    import time

    calls = counting(monkeypatch)
    cg = own_class_start(tmp_path)
    t0 = time.monotonic()
    done = cg.price_in(30)
    wall = time.monotonic() - t0
    assert done.converged and done.rounds == len(calls) >= 3
    assert 0 < done.time_s <= wall
    for cap in (1, 2):
        cg = own_class_start(tmp_path)
        calls.clear()
        stopped = cg.price_in(30, max_rounds=cap)
        assert (stopped.rounds, len(calls), stopped.converged) == (cap, cap, False)
        assert stopped.lp_value > done.lp_value * (1 + 1e-9)          # the LP over the pairs written so far
    cg = own_class_start(tmp_path)
    calls.clear()
    none = cg.price_in(0.4)
    assert (none.rounds, len(calls), none.converged, none.lp_value) == (0, 0, False, math.inf)
    assert own_class_start(tmp_path).price_in(1.2).rounds >= 1


@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_pricing_in_chunks_prices_the_same_pairs(tmp_path, chunk):
    """Reduced costs are computed a few groups at a time (chunk / classes groups per step); any chunk
    size gives the same new pairs, none of them written already, each eligible (class at or above the
    group's shape and gen levels)."""
    cg = own_class_start(tmp_path, {"sequential_time_ms": 250})
    b = cg.buckets["a"]
    duals = LiveLP(cg).solve(30)[1]["a"]
    whole = set(zip(*(x.tolist() for x in b.price(*duals, 12))))
    parts = set(zip(*(x.tolist() for x in b.price(*duals, 12, chunk=chunk * b.num_classes))))
    assert whole and parts == whole
    assert not whole & written(b)
    assert all(b.ci[c] >= b.gi[g] and b.cj[c] >= b.gj[g] for g, c in whole)


def test_column_generation_over_two_buckets(tmp_path):
    """Two buckets sharing the shapes: pricing in continues while either bucket adds pairs, and ends at
    the LP over every pair."""
    from tests.helpers import load, make_config, rows_from

    path = make_config(tmp_path, {"a": rows_from(*WIDE), "b": rows_from([300], [2], prefix="s")}, {},
                       shapes={"max_unique": 3, "granularity": 64}, batching={"max_batch_size": 3},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False})
    cfg = load(path)
    _, lp, priced = full_lp_and_priced(cfg, requests_of(cfg))
    assert priced.converged
    assert priced.lp_value == pytest.approx(lp, rel=1e-7)


class Ticks:
    """time.monotonic for models.pair_model: each reading one `step` later than the last."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def monotonic(self):
        self.now += self.step
        return self.now


@pytest.mark.parametrize("limit,rounds", [(1.5, 0), (2.0, 1), (3.0, 1), (4.0, 2)])
def test_price_in_starts_a_round_only_with_over_half_a_second_left(tmp_path, monkeypatch, limit, rounds):
    """A clock advancing 1 s per reading: a round starts while time_limit_s - elapsed > 0.5, where elapsed is
    read before the round (and once more for the LP's own time limit)."""
    import models.pair_model as pair_module

    cg = own_class_start(tmp_path)
    monkeypatch.setattr(pair_module, "time", Ticks(1.0))
    assert cg.price_in(limit).rounds == rounds


@pytest.mark.parametrize("prompts,gens,limits", CASES[:2])
def test_coarse_groups_keep_the_class_caps(tmp_path, prompts, gens, limits):
    """Groups coarser than the gens (group_caps=2 for 4 distinct gens) still split at every class cap, so
    the MIP over every pair stays the exact joint problem."""
    cfg = tiny(tmp_path, prompts, gens, limits)
    reqs = requests_of(cfg)
    inst = Instance(cfg, reqs)
    shapes = inst.all_shapes
    classes = {n: group_bucket(r, np.asarray(shapes), 48) for n, r in reqs.items()}
    model = PairModel(cfg, inst.costs, shapes, reqs, cfg.objective.weight_map(), classes, 1e9, group_caps=2)
    assert len(set(gens)) == 4 and model.buckets["a"].group_caps.tolist() == sorted(set(gens))
    write_all_pairs(model)
    res, _, _ = model.solve(30, integral=True)
    assert res.status == 0
    assert model.value(res) == pytest.approx(brute_force(cfg, reqs), rel=1e-6)


@pytest.mark.parametrize("limits", [{"sequential_time_ms": 300, "pad_ratio": 0.5},
                                    {"pad_ratio": 0.5, "p95_latency_ms": 120}])
def test_limit_duals_are_the_lp_value_per_unit_of_limit(tmp_path, limits):
    """Each limit's dual (what pricing reads from the live LP) equals the LP value's change per unit of that limit's right-hand
    side, measured by re-solving with the limit moved a little (sensitivity, independent of the dual rows)."""
    cfg = tiny(tmp_path, *WIDE, limits, k=3, batch=3)
    reqs = requests_of(cfg)
    shapes = Instance(cfg, reqs).all_shapes

    def lp(shift: dict):
        _, model = model_for(cfg, reqs, shapes)
        write_all_pairs(model)
        for key, delta in shift.items():
            model.buckets["a"].rhs[key] += delta
        res, rows, layout = model.solve(30)
        assert res.status == 0
        return model, res, rows, layout

    model, res, rows, layout = lp({})
    duals = LiveLP(model).solve(30)[1]["a"][2]
    assert all(value < 0 for value in duals.values())        # every limit binds in the LP
    for key in model.buckets["a"].rows:
        step = 1e-4 * max(abs(model.buckets["a"].rhs[key]), 1.0)
        moved, res2, _, _ = lp({key: step})
        assert duals[key] == pytest.approx((moved.value(res2) - model.value(res)) / step, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("limits", [{}, {"sequential_time_ms": 250, "pad_ratio": 0.5}, {"p95_latency_ms": 120},
                                    {"cost": 2.0e9}])
def test_the_live_lp_grown_round_by_round_is_the_lp_assembled_afresh(tmp_path, limits):
    """After every round of pairs appended to the live model, its LP value is that of the model assembled from
    scratch over the same pairs (scipy's HiGHS, rebuilt)."""
    cg = own_class_start(tmp_path, limits)
    live, b = LiveLP(cg), cg.buckets["a"]
    for _ in range(40):
        value, duals = live.solve(30)
        res, _, _ = cg.solve(30)
        assert res.status == 0 and value == pytest.approx(cg.value(res), rel=1e-9)
        new_g, new_c = b.price(*duals["a"], 4)
        if len(new_g) == 0:
            break
        live.add_pairs("a", new_g, new_c)
        b.add_pairs(new_g, new_c)
    assert len(new_g) == 0                                   # converged within the rounds


def plan_model(tmp_path, limits, cost_model=None):
    """(model over every candidate shape holding dp's plan and its neighbours, dp's plans) on WIDE (bucket a) and a
    second bucket b sharing the shapes; `cost_model` keys override the default semantics."""
    from models.instance import batch_caps
    from solver.heuristics import dp
    from tests.helpers import load, make_config, rows_from

    path = make_config(tmp_path, {"a": rows_from(*WIDE), "b": rows_from([20, 30], [2, 9], prefix="s")},
                       {"a": limits, "b": limits}, shapes={"max_unique": 3, "granularity": 64},
                       batching={"max_batch_size": 3}, cost_model=cost_model or {},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False})
    cfg = load(path)
    reqs = requests_of(cfg)
    inst = Instance(cfg, reqs)
    plans = dp(inst)
    classes = {n: group_bucket(r, np.asarray(inst.all_shapes), 48, batch_caps(r, plans[n]), keep_all=True)
               for n, r in reqs.items()}
    model = PairModel(cfg, inst.costs, inst.all_shapes, reqs, cfg.objective.weight_map(), classes, 1e9)
    for n, b in model.buckets.items():
        b.add_plan(plans[n])
        b.add_neighbours()
    return model, plans


TASK_SEMANTICS = {"prefill_length": "request", "decode_context": "batch", "prompt_pad": "request",
                  "compile_in_bucket_cost": True}


@pytest.mark.parametrize("limits,cost_model", [({}, None), ({"sequential_time_ms": 250}, None),
                                               ({"pad_ratio": 0.3, "p95_latency_ms": 120}, None),
                                               ({"cost": 1.0e9}, None), ({"cost": 1.0e9}, TASK_SEMANTICS),
                                               ({"sequential_time_ms": 250}, TASK_SEMANTICS)])
def test_a_plans_start_values_are_a_point_of_the_model_and_bound_the_mip(tmp_path, monkeypatch, limits, cost_model):
    """start_values is integral and meets every row of the assembled model once each limit slack takes that limit's
    excess (checked by the matrix product, no solver), in two buckets sharing shapes, in spec 4b context mode and
    with the compile cost in a bucket's cost limit; HiGHS receives it as its start, and the MIP answers at most its
    objective."""
    model, plans = plan_model(tmp_path, limits, cost_model)
    cost, lo, hi, ub, eq, layout, n = model._assemble()
    v = model.start_values(plans, layout, n)
    assert v is not None and np.all(v == np.round(v)) and np.all(v >= lo) and np.all(v <= hi)
    assert np.allclose(eq.matrix(n) @ v, eq.rhs())
    excess = ub.matrix(n) @ v - ub.rhs()
    for name in model.buckets:
        xo, yo, ko, so, keys, _, first = layout[name]
        for t, key in enumerate(keys):
            row = ub.blocks[first + 4 + t][0]
            v[so + t] = max(excess[row], 0.0)                 # the slack's coefficient in its row is -1
            excess[row] = 0.0
    assert np.all(excess <= 1e-6 * np.maximum(np.abs(ub.rhs()), 1.0))
    start_value = float(cost @ v) + sum(b.constant for b in model.buckets.values())
    given = []
    real = highspy.Highs.setSolution

    def spy(self, *args):
        given.append((np.asarray(args[1]), np.asarray(args[2])))
        return real(self, *args)

    monkeypatch.setattr(highspy.Highs, "setSolution", spy)
    x, value, _ = solve_mip(model, 10, plans)
    assert x is not None and value <= start_value * (1 + 1e-9)
    (cols, vals), = given
    slack = np.zeros(n, dtype=bool)
    for _, _, _, so, keys, _, _ in layout.values():
        slack[so:so + len(keys)] = True
    assert np.array_equal(cols, np.flatnonzero(~slack)) and np.array_equal(vals, v[~slack])