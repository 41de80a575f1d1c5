"""The pair-LP bound (gen caps rounded down, column generation) never exceeds the exhaustive optimum, and
its Lagrangian bound at every round never exceeds the converged LP."""
import numpy as np
import pytest

from models.instance import Instance
from solver.global_bound import GlobalBound, cap_ladder, global_bound
from tests.brute import brute_force
from tests.test_models_alone import config

CASES = [
    ({}, 2),
    ({"sequential_time_ms": 900}, 2),
    ({"p95_latency_ms": 800}, 2),
    ({"pad_ratio": 1.5}, 1),
    ({"cost": 2.0e9}, 2),
]


@pytest.mark.parametrize("limits,k", CASES)
def test_bound_below_the_optimum_and_lagrangian_below_the_lp(tmp_path, limits, k):
    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])}, {"a": limits}, k=k)
    best = brute_force(cfg, reqs)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=3)   # caps rounded down
    res = model.run(30, per_group=1, progress=False)
    assert res.converged
    assert res.bound <= best.objective * (1 + 1e-9)
    for _, lagrangian in res.history:
        assert lagrangian <= res.lp_value * (1 + 1e-9) + 1e-6


def test_exact_caps_on_two_buckets(tmp_path):
    """With every distinct gen a cap the rounding loses nothing; the LP still bounds the shared-shape optimum."""
    cfg, reqs = config(tmp_path, {"a": ([40, 100, 130], [10, 12, 30]), "b": ([60, 250, 190], [10, 5, 40])},
                       {"a": {"sequential_time_ms": 1200}}, k=2)
    best = brute_force(cfg, reqs)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=100).run(30, progress=False)
    assert res.converged and res.bound <= best.objective * (1 + 1e-9)
    assert res.bound > 0.5 * best.objective                  # not a trivial number


def test_seeded_with_a_plan_still_bounds_the_optimum(tmp_path):
    """Starting from a heuristic plan's pairs (caps rounded down) changes where the LP starts, not its value."""
    from solver.heuristics import dp

    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])},
                       {"a": {"sequential_time_ms": 900}}, k=2)
    best = brute_force(cfg, reqs)
    inst = Instance(cfg, reqs)
    plain = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3).run(30, progress=False)
    seeded = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3).run(30, progress=False, plans=dp(inst))
    assert plain.converged and seeded.converged
    assert seeded.bound == pytest.approx(plain.bound, rel=1e-7) and seeded.bound <= best.objective * (1 + 1e-9)


# --- when the pipeline runs the bound stage -----------------------------------------------------------

def test_bound_stage_share_by_default_only_in_context_mode_or_long_runs(tmp_path):
    from solver import stages
    from tests.test_semantics_models import TASK

    shape, _ = config(tmp_path / "s", {"a": ([40, 100], [10, 12])}, {"a": {}})
    context, _ = config(tmp_path / "c", {"a": ([40, 100], [10, 12])}, {"a": {}}, cost_model=TASK)
    assert [stages.bound_share(shape, t) for t in (10, 30, 299, 300, 600)] == [0.0, 0.4, 0.4, 0.65, 0.65]
    assert [stages.polish_share(shape, t) for t in (10, 299, 300, 600)] == [0.5, 0.5, 0.3, 0.3]
    assert [stages.polish_share(context, t) for t in (60, 600)] == [0.5, 0.5]
    crowded = shape.model_copy(update={"solver": shape.solver.model_copy(update={"lns_share": 0.4})})
    assert stages.bound_share(crowded, 60) == pytest.approx(0.05)        # CP-SAT keeps 0.05 beside 0.5 + 0.4
    assert [stages.bound_share(context, t) for t in (60, 600)] == [0.2, 0.2]
    assert (stages.bound_caps(shape), stages.bound_caps(context)) == (48, 2000)
    fixed = shape.model_copy(update={"solver": shape.solver.model_copy(update={"bound_share": 0.1, "bound_caps": 7})})
    assert (stages.bound_share(fixed, 600), stages.bound_caps(fixed)) == (0.1, 7)
    assert stages.polish_share(fixed, 600) == 0.5             # a bound share set by hand keeps the polish's 0.5
    polished = shape.model_copy(update={"solver": shape.solver.model_copy(update={"polish_share": 0.2})})
    assert (stages.polish_share(polished, 600), stages.bound_share(polished, 600)) == (0.2, 0.65)
    for t in (60, 300, 600):
        assert stages.polish_share(shape, t) + stages.bound_share(shape, t) <= 1 - stages.MIN_CPSAT_SHARE + 1e-12


def test_the_bound_may_overrun_only_into_what_cpsat_has_beyond_its_least_share(tmp_path):
    """bound_overrun: 1 - 0.05 (CP-SAT's least) - polish - LNS - bound, of the time limit, never below 0."""
    from solver import stages

    shape, _ = config(tmp_path / "s", {"a": ([40, 100], [10, 12])}, {"a": {}})
    assert stages.bound_overrun(shape, 60) == pytest.approx((1 - 0.05 - 0.5 - 0.4) * 60)        # 3 s
    assert stages.bound_overrun(shape, 600) == 0.0                      # 0.65 + 0.3 + 0.05: nothing left
    assert stages.bound_overrun(shape, 10) == pytest.approx((1 - 0.05 - 0.5) * 10)            # no bound share
    fixed = shape.model_copy(update={"solver": shape.solver.model_copy(update={"bound_share": 0.2})})
    assert stages.bound_overrun(fixed, 60) == pytest.approx((1 - 0.05 - 0.5 - 0.2) * 60)
    crowded = shape.model_copy(update={"solver": shape.solver.model_copy(update={"lns_share": 0.45})})
    assert stages.bound_overrun(crowded, 60) == 0.0


def test_the_pipeline_hands_the_bound_its_overrun(tmp_path, monkeypatch):
    """The solve passes bound_overrun on to global_bound (3 s at 60 s) beside the bound's share (24 s)."""
    from solver import pipeline, stages

    seen = []
    monkeypatch.setattr(stages, "global_bound", lambda *a, **k: seen.append(a) or None)
    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])}, {"a": {}}, k=2)
    inst = Instance(cfg, reqs)
    heuristics = [pipeline.run_heuristic(inst, "dp")]
    pipeline.search_stages(inst, heuristics, 60.0, None, -np.inf)
    assert seen and seen[0][2] == pytest.approx(0.4 * 60) and seen[0][6] == pytest.approx(stages.bound_overrun(cfg, 60))


def test_bound_stage_skipped_when_the_presearch_bound_proves_the_best_plan(tmp_path, monkeypatch):
    from solver import stages
    from solver.evaluate import run_heuristic
    from solver.results import Stages

    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])}, {"a": {}}, k=2)
    inst = Instance(cfg, reqs)
    best = run_heuristic(inst, "dp")
    calls = []
    monkeypatch.setattr(stages, "global_bound", lambda *a, **k: calls.append(a) or "ran")
    assert stages.run_bound_stage(inst, [best], 5.0, Stages(), best.objective) is None     # proven: skipped
    assert stages.run_bound_stage(inst, [best], 0.0, Stages(), -np.inf) is None            # no time: off
    assert stages.run_bound_stage(inst, [best], 5.0, Stages(), 0.5 * best.objective) == "ran" and len(calls) == 1


# --- members charged at max(own gen, class cap) -----------------------------------------------------

SINGLES = ([10, 30, 64, 50, 20], [3, 9, 17, 26, 40])      # one shape level; five gens, a ladder of two caps


def singles_value(cfg, prompts, gens):
    """The one plan there is with one request per batch and one shape (64): spec section 4 recomputed."""
    from tests.helpers import batch_numbers, q

    cm = cfg.cost_model
    return sum(batch_numbers(cm, 64, [(p, g)])[0] for p, g in zip(prompts, gens)) + q(cm.compile_cost, 64)


@pytest.mark.parametrize("limits", [{}, {"pad_tokens": sum(64 - p for p in SINGLES[0])}])
def test_members_charged_at_their_own_gen_when_above_the_floor_cap(tmp_path, limits):
    """With one member per batch and a single shape every plan is the same, so the bound must equal its cost:
    a member in the class of the cap below its gen is charged its own gen (cost and pad), never the cap
    (the older rounding-down charge gave less), and never above it (a pad limit met exactly stays met)."""
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": limits}, k=1, batch=1)
    expected = singles_value(cfg, *SINGLES)
    assert brute_force(cfg, reqs).objective == pytest.approx(expected, rel=1e-12)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), expected, max_caps=2).run(30, progress=False)
    assert res.caps == {"a": 3} and res.converged        # two ladder caps plus the shortest gen: gens rounded
    assert res.bound == pytest.approx(expected, rel=1e-9)


def test_percentile_count_at_own_gen(tmp_path):
    """A p95 limit at the slowest request's latency (of five requests none may exceed it) is met by the one plan
    there is: a member counted at its own gen, and no higher, is not slow."""
    from tests.helpers import batch_numbers

    cm_cfg, _ = config(tmp_path / "probe", {"a": SINGLES}, {"a": {}}, k=1, batch=1)
    lats = sorted(batch_numbers(cm_cfg.cost_model, 64, [(p, g)])[1] for p, g in zip(*SINGLES))
    limit = lats[-1]
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": {"p95_latency_ms": limit}}, k=1, batch=1)
    expected = singles_value(cfg, *SINGLES)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), expected, max_caps=2).run(30, progress=False)
    assert res.converged and res.bound == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("objective", [{"minimize": "pad_tokens"}, {"weights": {"cost": 1.0, "pad_tokens": 1.0e7}}])
def test_pad_objective_charged_at_own_gen(tmp_path, objective):
    """Pad tokens in the objective: the one plan there is pays its prompt padding and no gen padding (one member
    per batch), so the bound equals that weighted sum, as brute force finds it."""
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": {}}, k=1, batch=1, objective=objective)
    w = cfg.objective.weight_map()
    pad = sum(64 - p for p in SINGLES[0])
    expected = w.get("cost", 0.0) * singles_value(cfg, *SINGLES) + w.get("pad_tokens", 0.0) * pad
    assert brute_force(cfg, reqs).objective == pytest.approx(expected, rel=1e-12)
    res = GlobalBound(Instance(cfg, reqs), w, max(expected, 1.0), max_caps=2).run(30, progress=False)
    assert res.converged and res.bound == pytest.approx(expected, rel=1e-9)


SEQ_WEIGHT = {"weights": {"cost": 1.0, "sequential_time_ms": 1.0e7}}


def singles_latency(cfg, prompts, gens):
    from tests.helpers import batch_numbers

    return sum(batch_numbers(cfg.cost_model, 64, [(p, g)])[1] for p, g in zip(prompts, gens))


def test_sequential_time_objective_charged_at_own_gen(tmp_path):
    """Sequential time in the objective: each one-member batch's latency at its own gen, not at the cap below
    it, so the bound equals the one plan's weighted sum (the batch latency at the cap alone gives less)."""
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": {}}, k=1, batch=1, objective=SEQ_WEIGHT)
    w = cfg.objective.weight_map()
    expected = singles_value(cfg, *SINGLES) + w["sequential_time_ms"] * singles_latency(cfg, *SINGLES)
    assert brute_force(cfg, reqs).objective == pytest.approx(expected, rel=1e-12)
    res = GlobalBound(Instance(cfg, reqs), w, expected, max_caps=2).run(30, progress=False)
    assert res.converged and res.bound == pytest.approx(expected, rel=1e-9)


def test_sequential_time_limit_row_at_own_gen(tmp_path):
    """A sequential-time limit 1 ms below the one plan's own: no plan meets it, and the LP can only meet it on
    its slack, so its bound rises above the plan's cost (charged at the caps the limit would look met)."""
    probe, _ = config(tmp_path / "probe", {"a": SINGLES}, {"a": {}}, k=1, batch=1)
    seq = singles_latency(probe, *SINGLES)
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": {"sequential_time_ms": seq - 1.0}}, k=1, batch=1)
    expected = singles_value(cfg, *SINGLES)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), expected, max_caps=2).run(30, progress=False)
    assert res.converged and res.bound > expected * (1 + 1e-6)


def test_sequential_time_objective_with_shared_batches_below_the_optimum(tmp_path):
    """Members sharing batches: each pays at most the mean of what its gen adds to its batch's latency, so the
    bound stays at or below brute force's optimum."""
    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])}, {"a": {}}, k=2,
                       objective=SEQ_WEIGHT)
    best = brute_force(cfg, reqs)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), best.objective, max_caps=3).run(30,
                                                                                                      progress=False)
    assert res.converged and res.bound <= best.objective * (1 + 1e-9)
    assert res.bound > 0.5 * best.objective


# --- the cap ladder ---------------------------------------------------------------------------------

def test_cap_ladder_coarse_first():
    assert cap_ladder(48, False) == [12, 48]
    assert cap_ladder(24, False) == [12, 24]
    assert cap_ladder(10, False) == [10]
    assert cap_ladder(2000, True) == [2000]


def ladder_instance(tmp_path) -> Instance:
    """30 distinct gens (12 caps round them) on 30 prompts: a ladder of two LPs."""
    gens = list(range(3, 63, 2))
    cfg, reqs = config(tmp_path, {"a": ([20 + 7 * i for i in range(len(gens))], gens)}, {"a": {}}, k=2)
    return Instance(cfg, reqs)


def test_ladder_answer_is_the_best_bound_reached(tmp_path):
    """Every LP of the ladder is a bound; the answer is the highest and it lists each LP."""
    inst = ladder_instance(tmp_path)
    cfg = inst.cfg
    res = global_bound(inst, 1e9, 60, max_caps=30, progress=False)
    counts = [c for c, _, _, _ in res.ladder]
    assert len(counts) == 2 and counts[0] < counts[1] == 30   # the last: every distinct gen a cap
    assert all(v for _, _, v, _ in res.ladder)
    assert res.bound == max(b for _, b, _, _ in res.ladder)
    assert sum(t for _, _, _, t in res.ladder) <= res.time_s + 1e-6   # each LP its own time, the answer the total
    exact = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=30).run(30, progress=False)
    assert res.bound >= exact.bound * (1 - 1e-9)             # never below the configured LP alone


def singles_bucket_cost(cfg, prompts, gens):
    from tests.helpers import batch_numbers

    return sum(batch_numbers(cfg.cost_model, 64, [(p, g)])[0] for p, g in zip(prompts, gens))


@pytest.mark.parametrize("below,rises", [(0.0, False), (1.0, True)])
def test_cost_limit_row_at_own_gen(tmp_path, below, rises):
    """A bucket cost limit at the one plan's cost is met (the bound is that plan's objective); 1 below it no
    plan meets it and the LP only on its slack, so the bound rises above the plan."""
    probe, _ = config(tmp_path / "probe", {"a": SINGLES}, {"a": {}}, k=1, batch=1)
    limit = singles_bucket_cost(probe, *SINGLES) - below
    cfg, reqs = config(tmp_path, {"a": SINGLES}, {"a": {"cost": limit}}, k=1, batch=1)
    expected = singles_value(cfg, *SINGLES)
    if not rises:
        assert brute_force(cfg, reqs).objective == pytest.approx(expected, rel=1e-12)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), expected, max_caps=2).run(30, progress=False)
    assert res.converged
    if rises:
        assert res.bound > expected * (1 + 1e-6)
    else:
        assert res.bound == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("limits,k", CASES)
def test_lagrangian_meets_the_lp_at_convergence(tmp_path, limits, k):
    """With no pair left to price in, the Lagrangian term is zero: the last round's Lagrangian bound is the LP."""
    cfg, reqs = config(tmp_path, {"a": ([300, 20, 20, 130, 65, 250], [40, 2, 50, 3, 3, 5])}, {"a": limits}, k=k)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=3).run(30, progress=False)
    assert res.converged
    assert res.history[-1][1] == pytest.approx(res.lp_value, rel=1e-9)


# --- column generation against the LP with every pair written ------------------------------------------

SPREAD = ([300, 20, 20, 130, 65, 250, 190, 500, 90, 40], [40, 2, 50, 3, 3, 5, 17, 9, 28, 12])


def full_lp_value(inst, caps: int) -> float:
    """The same LP with every eligible pair written up front and solved once: what pricing must reach."""
    model = GlobalBound(inst, inst.cfg.objective.weight_map(), 1e9, max_caps=caps)
    for b in model.buckets:
        gs, cs = np.nonzero(b.eligible(np.arange(len(b.n))))
        model.add_pairs(b, gs, cs)
    model.h.run()
    return model.h.getInfo().objective_function_value * model.reference + model.constant


def test_column_generation_on_two_buckets_reaches_the_lp_over_every_pair(tmp_path):
    """Pricing stops only when no bucket has a pair left to price in."""
    cfg, reqs = config(tmp_path, {"a": SPREAD, "b": ([70, 330, 20, 140, 260], [6, 44, 21, 2, 30])},
                       {"a": {"sequential_time_ms": 1500}, "b": {}}, k=2)
    inst = Instance(cfg, reqs)
    res = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=8).run(60, per_group=1, progress=False)
    assert res.converged and res.lp_value == pytest.approx(full_lp_value(inst, 8), rel=1e-7)


def test_no_time_no_round(tmp_path):
    cfg, reqs = config(tmp_path, {"a": SPREAD}, {"a": {}}, k=2)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=8).run(0, progress=False)
    assert (res.rounds, res.converged, res.history) == (0, False, []) and res.bound == -np.inf


@pytest.mark.parametrize("limits,k", CASES)
def test_column_generation_reaches_the_lp_over_every_pair(tmp_path, limits, k):
    """Priced in one group's best pair per round, the LP converges to the LP over every pair, and the
    Lagrangian bound of every round stays at or below it."""
    cfg, reqs = config(tmp_path, {"a": SPREAD}, {"a": limits}, k=k)
    inst = Instance(cfg, reqs)
    full = full_lp_value(inst, 8)
    res = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=8).run(60, per_group=1, progress=False)
    assert res.converged and res.rounds > 1 and res.rounds == len(res.history)
    assert res.lp_value == pytest.approx(full, rel=1e-7)
    assert 0 < res.columns <= sum(int(b.eligible(np.arange(len(b.n))).sum())
                                  for b in GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=8).buckets)
    for _, lagrangian in res.history:
        assert lagrangian <= full * (1 + 1e-9) + 1e-6


def test_a_group_may_join_classes_at_or_above_its_shape_and_floor_cap(tmp_path):
    """Eligibility from the requests themselves: the class shape covers the prompt, and the class cap is at
    or above the largest ladder cap at or below the gen."""
    cfg, reqs = config(tmp_path, {"a": (SPREAD[0] + [480], SPREAD[1] + [1])}, {"a": {}}, k=2)   # gen 1 at level 5
    b = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=4).buckets[0]
    got = b.eligible(np.arange(len(b.n)))
    req = reqs["a"]
    for r in range(len(req)):
        g = b.request_group[r]
        assert b.gg[g] == req.gen[r] and b.space.levels[b.gi[g]] >= req.fit[r]       # own gen, own shape level
        assert b.gi[g] == 0 or b.space.levels[b.gi[g] - 1] < req.fit[r]
        floor = max(int(c) for c in b.caps if c <= req.gen[r])
        for c in range(b.num_classes):
            want = b.space.levels[b.ci[c]] >= req.fit[r] and b.caps[b.cj[c]] >= floor
            assert got[g, c] == want, (r, c)


def test_a_seeded_first_lp_already_holds_the_plan(tmp_path):
    """The plan's own pairs are written before the first solve, and the relaxation never charges a plan more
    than it costs: the first restricted LP is at or below the plan's objective."""
    from solver.evaluate import evaluate
    from solver.heuristics import dp

    cfg, reqs = config(tmp_path, {"a": SPREAD}, {"a": {"sequential_time_ms": 2000}}, k=2)
    inst = Instance(cfg, reqs)
    plans = dp(inst)
    objective = evaluate(inst, "dp", plans, 0.0).objective
    res = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=4).run(60, per_group=1, progress=False,
                                                                            plans=plans)
    assert res.history[0][0] <= objective * (1 + 1e-9)


def test_ladder_of_twelve_caps_is_one_lp():
    assert cap_ladder(12, False) == [12]
    assert cap_ladder(13, False) == [12, 13]


def test_bound_applies_to_section_4_with_a_token_cap_and_not_to_other_semantics(tmp_path):
    from tests.test_models_alone import REQUEST_SEMANTICS

    cfg, reqs = config(tmp_path / "t", {"a": SPREAD}, {"a": {}}, k=2, tokens=4096)
    assert global_bound(Instance(cfg, reqs), 1e9, 30, max_caps=4, progress=False) is not None
    cfg, reqs = config(tmp_path / "r", {"a": SPREAD}, {"a": {}}, k=2, **REQUEST_SEMANTICS)
    assert global_bound(Instance(cfg, reqs), 1e9, 30, max_caps=4, progress=False) is None
    context = {"cost_model": dict(REQUEST_SEMANTICS["cost_model"], decode_context="batch")}
    cfg, reqs = config(tmp_path / "c", {"a": SPREAD}, {"a": {}}, k=2, tokens=4096, **context)
    assert global_bound(Instance(cfg, reqs), 1e9, 30, max_caps=4, progress=False) is None
    cfg, reqs = config(tmp_path / "d", {"a": SPREAD}, {"a": {}}, k=2, **context)
    res = global_bound(Instance(cfg, reqs), 1e9, 30, max_caps=20, progress=False)
    assert len(res.ladder) == 1                              # context mode: one LP, no 12-cap one first


def test_an_unconverged_coarse_lp_is_the_answer_and_ends_the_ladder(tmp_path, monkeypatch):
    """A coarse LP stopped before convergence still gives its (Lagrangian) bound; no finer LP follows."""
    import time

    real = GlobalBound.run

    def stopped(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        result.converged = False
        return result

    monkeypatch.setattr(GlobalBound, "run", stopped)
    inst = ladder_instance(tmp_path)
    start = time.monotonic()
    res = global_bound(inst, 1e9, 60, max_caps=30, progress=False)
    wall = time.monotonic() - start
    assert res is not None and len(res.ladder) == 1 and res.ladder[0][0] < 30
    assert 0 <= res.time_s <= wall


@pytest.mark.parametrize("limits", [{"sequential_time_ms": 1500}, {"p95_latency_ms": 800}, {"p99_latency_ms": 800},
                                    {"pad_ratio": 0.4}, {"cost": 3.5e8}])
def test_a_binding_limit_raises_the_bound(tmp_path, limits):
    """Each limit is a row of the LP: one the unconstrained LP breaks lifts the bound (without the penalty slack:
    the bound stays below the unconstrained one plus the compile cost of one more shape)."""
    def bound(lim, sub):
        cfg, reqs = config(tmp_path / sub, {"a": SPREAD}, {"a": lim}, k=2)
        return GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=8).run(
            30, progress=False).bound

    free, held = bound({}, "free"), bound(limits, "held")
    assert free * (1 + 1e-6) < held < 10 * free


def test_no_time_left_for_the_finer_lp_keeps_the_coarse_answer(tmp_path, monkeypatch):
    """The coarse LP converged but used up the time: its bound is the answer, and no finer LP starts."""
    import time

    real = GlobalBound.run

    def slow(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        time.sleep(1.1)
        return result

    monkeypatch.setattr(GlobalBound, "run", slow)
    res = global_bound(ladder_instance(tmp_path), 1e9, 1.0, max_caps=30, progress=False)
    assert res is not None and res.converged and len(res.ladder) == 1


@pytest.mark.parametrize("coarse_s, finer", [(100.0, False), (5.0, True)])
def test_a_finer_lp_starts_only_with_enough_time_left(tmp_path, monkeypatch, coarse_s, finer):
    """After a converged coarse LP that took t seconds, the finer LP runs only with at least FINER_START * t left
    (60 s here: no after a 100 s coarse LP, yes after a 5 s one)."""
    real = GlobalBound.run

    def timed(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        result.time_s = coarse_s if self.buckets[0].caps.size < 30 else result.time_s
        return result

    monkeypatch.setattr(GlobalBound, "run", timed)
    res = global_bound(ladder_instance(tmp_path), 1e9, 60, max_caps=30, progress=False)
    assert [c for c, _, _, _ in res.ladder][-1] == (30 if finer else res.ladder[0][0])
    assert len(res.ladder) == (2 if finer else 1)


def test_shape_use_is_the_lps_z_over_every_candidate_shape(tmp_path):
    """shape_use has every candidate shape, each z in [0, 1], at most max_unique in all, and the top shape (the
    only one holding the longest prompt) open."""
    inst = ladder_instance(tmp_path)
    res = global_bound(inst, 1e9, 60, max_caps=30, progress=False)
    use = res.shape_use
    assert sorted(use) == sorted(int(s) for s in inst.all_shapes)
    assert all(-1e-9 <= v <= 1 + 1e-9 for v in use.values())
    assert sum(use.values()) <= inst.cfg.shapes.max_unique + 1e-9
    assert use[max(use)] > 1e-9


# --- cuts: sum over a level's caps of x[g, c] <= n_g z ------------------------------------------------

CUT_CASES = [   # found by a random search: instances where the cuts lift the converged LP
    (([250, 60, 300, 130, 100], [3, 28, 37, 43, 8]), {}),
    (([250, 300, 60, 190, 20, 100], [3, 3, 3, 43, 36, 2]), {"sequential_time_ms": 900}),
    (([60, 190, 60, 20, 300], [14, 36, 37, 16, 27]), {"p95_latency_ms": 800}),
]


@pytest.mark.parametrize("data,limits", CUT_CASES)
def test_cuts_lift_the_bound_and_stay_below_the_optimum(tmp_path, data, limits):
    cfg, reqs = config(tmp_path, {"a": data}, {"a": limits}, k=2)
    best = brute_force(cfg, reqs)
    inst = Instance(cfg, reqs)
    plain = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3).run(30, progress=False)
    cut = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3).run(30, progress=False, cuts=True)
    assert plain.converged and cut.converged and plain.cuts == 0 < cut.cuts
    assert plain.bound * (1 + 1e-3) < cut.bound <= best.objective * (1 + 1e-9)
    for _, lagrangian in cut.history:
        assert lagrangian <= cut.lp_value * (1 + 1e-9) + 1e-6


def lp_entries(h) -> dict[int, dict[int, float]]:
    """{row: {column: value}} of the LP matrix as HiGHS holds it (column-wise)."""
    lp = h.getLp()
    A = lp.a_matrix_
    entries = {}
    for j in range(lp.num_col_):
        for k in range(A.start_[j], A.start_[j + 1]):
            entries.setdefault(A.index_[k], {})[j] = A.value_[k]
    return entries


def every_cut_lp_value(inst, caps: int) -> float:
    """The LP with every eligible pair and every (group, level) cut written up front, solved once."""
    model = GlobalBound(inst, inst.cfg.objective.weight_map(), 1e9, max_caps=caps)
    for b in model.buckets:
        for g in range(len(b.n)):
            for i in range(b.cut_of.shape[1]):
                b.cut_of[g, i] = model._row(-np.inf, 0, [model.z[i]], [-float(b.n[g])])
        gs, cs = np.nonzero(b.eligible(np.arange(len(b.n))))
        model.add_pairs(b, gs, cs)
    model.h.run()
    return model.h.getInfo().objective_function_value * model.reference + model.constant


@pytest.mark.parametrize("data,limits", CUT_CASES)
def test_column_generation_with_cuts_reaches_the_lp_with_every_cut(tmp_path, data, limits):
    """Cuts added only where broken, pairs priced in with the cuts' duals: at convergence the LP with every pair
    and every cut written up front."""
    cfg, reqs = config(tmp_path, {"a": data}, {"a": limits}, k=2)
    inst = Instance(cfg, reqs)
    res = GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3).run(30, per_group=1, progress=False,
                                                                             cuts=True)
    assert res.converged and res.lp_value == pytest.approx(every_cut_lp_value(inst, 3), rel=1e-7)


def test_a_cut_row_holds_every_written_pair_of_its_group_and_level(tmp_path):
    """Pairs written before the cut and priced in after it both enter it; no other pair does; z enters at -n_g."""
    data, limits = CUT_CASES[0]
    cfg, reqs = config(tmp_path, {"a": data}, {"a": limits}, k=2)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=3)
    model.run(30, per_group=1, progress=False, cuts=True)
    entries = lp_entries(model.h)
    b = model.buckets[0]
    checked = 0
    for g, i in zip(*np.nonzero(b.cut_of >= 0)):
        row = entries[b.cut_of[g, i]]
        pairs = {int(b.col_of[g, c]) for c in np.flatnonzero((b.col_of[g] >= 0) & (b.ci == i))}
        assert row == {**{c: 1.0 for c in pairs}, model.z[i]: -float(b.n[g])}
        checked += 1
    assert checked == (b.cut_of >= 0).sum() > 0


def test_only_the_last_lp_of_the_ladder_runs_cuts(tmp_path, monkeypatch):
    """The coarse LP (a finer one follows) runs without cuts; the last goes on with cuts on the same model, and
    the answer sums its rounds and time over both calls."""
    calls = []
    real = GlobalBound.run

    def record(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        calls.append((int(self.buckets[0].caps.size), kw.get("cuts", False), result.rounds))
        return result

    monkeypatch.setattr(GlobalBound, "run", record)
    res = global_bound(ladder_instance(tmp_path), 1e9, 60, max_caps=30, progress=False)
    coarse = calls[0][0]
    assert [(c, k) for c, k, _ in calls] == [(coarse, False), (30, False), (30, True)] and coarse < 30
    assert res.rounds == calls[1][2] + calls[2][2]


def test_joined_keeps_the_higher_bound_and_sums_the_calls():
    from solver.global_bound import BoundResult, joined

    before = BoundResult(5.0, 5.0, True, 3, 10, 2.0, {"a": 4}, [(5.0, 4.0)], shape_use={64: 1.0})
    after = BoundResult(4.0, 6.0, False, 2, 12, 1.5, {"a": 4}, [(6.0, 4.0)], shape_use={}, cuts=7)
    both = joined(before, after)
    assert (both.bound, both.lp_value, both.converged, both.rounds, both.columns, both.time_s) == \
        (5.0, 6.0, False, 5, 12, 3.5)
    assert both.history == [(5.0, 4.0), (6.0, 4.0)] and both.shape_use == {64: 1.0} and both.cuts == 7


def test_a_coarse_lp_with_no_time_for_the_finer_goes_on_with_cuts(tmp_path, monkeypatch):
    """When the finer LP will not start (its coarse LP took over 1/FINER_START of the time left), the coarse LP's
    model goes on with cuts instead."""
    calls = []
    real = GlobalBound.run

    def slow(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        calls.append((int(self.buckets[0].caps.size), kw.get("cuts", False)))
        result.time_s = 100.0
        return result

    monkeypatch.setattr(GlobalBound, "run", slow)
    res = global_bound(ladder_instance(tmp_path), 1e9, 60, max_caps=30, progress=False)
    assert len(calls) == 2 and calls[0][0] == calls[1][0] < 30 and [k for _, k in calls] == [False, True]
    assert len(res.ladder) == 1 and res.time_s < 100.0      # the answer's time is the wall time


# found by a random search: pricing after the cuts needs their duals (a pair whose reduced cost without them is
# negative, with them positive)
PRICED_AFTER_CUTS = (([60, 60, 100, 250, 100, 20], [31, 34, 9, 26, 19, 23]), {}, 4)


@pytest.mark.parametrize("data,limits,caps", [case + (3,) for case in CUT_CASES] + [PRICED_AFTER_CUTS])
def test_every_pair_priced_in_has_a_negative_reduced_cost_in_the_lp_it_enters(tmp_path, data, limits, caps):
    """c_j - sum_i a_ij y_i recomputed from the LP matrix and the duals that priced the pair (cut rows included,
    a new pair's own link row at 0): below zero for every pair added after the first LP."""
    cfg, reqs = config(tmp_path, {"a": data}, {"a": limits}, k=2)
    model = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=caps)
    priced, real_price, real_add = {}, model._price, model.add_pairs
    checked = []

    def price(b, duals, *rest):
        priced["duals"] = duals / model.reference
        return real_price(b, duals, *rest)

    def add(b, gs, cs):
        first = model.h.getNumCol()
        real_add(b, gs, cs)
        if "duals" in priced and len(gs):
            y, cost, entries = priced["duals"], model.h.getLp().col_cost_, lp_entries(model.h)
            for j in range(first, model.h.getNumCol()):
                checked.append(cost[j] - sum(row[j] * y[i] for i, row in entries.items() if j in row and i < len(y)))

    model._price, model.add_pairs = price, add
    res = model.run(30, progress=False, cuts=True)
    assert res.converged and res.cuts > 0 and len(checked) > 0
    assert max(checked) < 0


def broken_by(h, row: int, x: np.ndarray) -> float:
    """How far the LP solution x breaks row `row` (activity minus its upper side), read from the LP matrix."""
    return sum(v * x[j] for j, v in lp_entries(h)[row].items()) - h.getLp().row_upper_[row]


def test_cuts_are_added_only_where_broken_and_the_most_broken_first(tmp_path):
    """On the converged LP without cuts: each cut add_cuts writes is broken by the solution it was made from;
    capped at one, the one written is the most broken of them."""
    data, limits = CUT_CASES[1]                           # its cuts are broken by different amounts
    cfg, reqs = config(tmp_path, {"a": data}, {"a": limits}, k=2)
    inst = Instance(cfg, reqs)
    models = [GlobalBound(inst, cfg.objective.weight_map(), 1e9, max_caps=3) for _ in range(2)]
    breaks = []
    for model, most in zip(models, (10_000, 1)):
        assert model.run(30, progress=False).converged
        x = np.asarray(model.h.getSolution().col_value)
        b = model.buckets[0]
        assert model.add_cuts(b, x, x[model.z], most=most) == (b.cut_of >= 0).sum()
        breaks.append(sorted(broken_by(model.h, int(r), x) for r in b.cut_of[b.cut_of >= 0]))
    every, capped = breaks
    assert len(every) > 1 and min(every) > 0 and capped == pytest.approx([max(every)], rel=1e-9)


@pytest.mark.parametrize("history,converged,grace", [
    ([(100.0, 50.0), (100.0, 98.5)], False, 0.25 * 40),     # the last round within 2%: a quarter of the stage more
    ([(100.0, 99.0), (100.0, 97.9)], False, 0.0),           # the last round decides, and 2.1% is too far
    ([(100.0, 98.0)], False, 0.25 * 40),                    # exactly 2%: still close
    ([(-100.0, -101.5)], False, 0.25 * 40),                 # the gap is taken on |value|
    ([(100.0, 100.0)], True, 0.0),                          # converged: nothing more
    ([], False, 0.0)])                                      # no round at all
def test_grace_goes_to_an_lp_stopped_close_to_converging(history, converged, grace):
    from solver.global_bound import BoundResult, grace_s

    result = BoundResult(0.0, 0.0, converged, len(history), 0, 1.0, history=history)
    assert grace_s(result, 40.0) == pytest.approx(grace)
    assert grace_s(result, 40.0, 3.0) == pytest.approx(min(grace, 3.0))      # at most what the stage may overrun
    assert grace_s(result, 40.0, 0.0) == 0.0


@pytest.mark.parametrize("lagrangian_share,calls_expected,stage_s", [(0.99, 3, 60), (0.99, 3, 2.0), (0.5, 1, 60)])
def test_an_lp_stopped_close_to_converging_goes_on_to_convergence(tmp_path, monkeypatch, lagrangian_share,
                                                                  calls_expected, stage_s):
    """The first call on the coarse LP is made to look stopped by its time with its last Lagrangian bound at a share
    of its value: close (99%), a second call on the same model with the grace time finishes it, the cuts follow
    (the last LP of its ladder) and the answer is the bound of a run left alone; far (50%), no second call."""
    from solver.global_bound import GRACE_SHARE

    inst = ladder_instance(tmp_path)
    alone = global_bound(inst, 1e9, stage_s, max_caps=12, progress=False)
    calls = []
    real = GlobalBound.run

    def stopped_first(self, time_limit_s, **kw):
        result = real(self, time_limit_s, **kw)
        calls.append(time_limit_s)
        if len(calls) == 1:
            value = result.lp_value
            result.converged, result.bound = False, lagrangian_share * value
            result.history = result.history[:-1] + [(value, lagrangian_share * value)]
        return result

    monkeypatch.setattr(GlobalBound, "run", stopped_first)
    res = global_bound(inst, 1e9, stage_s, max_caps=12, progress=False)
    assert len(calls) == calls_expected
    if calls_expected == 3:
        assert calls[1] == pytest.approx(GRACE_SHARE * stage_s)         # a 2 s stage: half a second more
        assert res.converged and res.bound == pytest.approx(alone.bound, rel=1e-9)
    else:
        assert not res.converged and len(res.ladder) == 1
    calls.clear()
    global_bound(inst, 1e9, stage_s, max_caps=12, progress=False, overrun_s=0.3)   # the grace capped at 0.3 s
    assert len(calls) == calls_expected and (calls_expected == 1 or calls[1] == pytest.approx(0.3))


def test_the_plan_given_seeds_the_first_lp(tmp_path, monkeypatch):
    """global_bound hands the plans it is given to the first LP's run (its seed), and only to that one."""
    from solver.heuristics import dp

    inst = ladder_instance(tmp_path)
    plans, seen = dp(inst), []
    real = GlobalBound.run

    def spy(self, time_limit_s, **kw):
        seen.append(kw.get("plans"))
        return real(self, time_limit_s, **kw)

    monkeypatch.setattr(GlobalBound, "run", spy)
    global_bound(inst, 1e9, 60, max_caps=30, progress=False, plans=plans)
    assert seen[0] is plans and len(seen) >= 2 and all(p is None or p is plans for p in seen[1:])
