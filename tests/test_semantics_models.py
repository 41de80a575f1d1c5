"""The CP-SAT model alone (no heuristic or polish fallback) under the original task's semantics (spec 4b),
against an exhaustive optimum that also tries every shape a batch may take and every placement of the
first-use latency. Plans are judged only by tests.helpers.recompute (through tests.brute)."""
import itertools
import math

import numpy as np
import pytest

from models.cpsat_model import ShapeModel
from models.instance import Instance, group_bucket, model_space
from solver.stages import model_plan_exact
from tests.brute import BucketAssignment, broken_limits, objective_of, plan_metrics, plan_value
from tests.helpers import set_partitions
from tests.test_models_alone import config

TASK = {"prefill_cost": [0, 4096, 2], "decode_step_cost": [0, 2048, 1], "compile_cost": [0, 8192, 500],
        "prefill_ms": [0, 6.144, 0.002], "decode_step_ms": [0, 2.4576, 0.0012], "batch_overhead_cost": 1.0e7,
        "batch_overhead_ms": 8, "prefill_length": "request", "decode_context": "batch", "prompt_pad": "request",
        "first_use_ms": 1500, "compile_in_bucket_cost": True}
PROMPTS, GENS = [40, 100, 130, 60, 250], [10, 12, 30, 10, 5]


def placements(req, a: BucketAssignment):
    """Every choice of which batch of each shape comes first and which member is its first line."""
    by_shape = {}
    for b, s in enumerate(a.seq_align):
        by_shape.setdefault(s, []).append(b)
    members = {b: [r for r in range(len(req)) if a.batch_of[r] == b] for b in range(len(a.seq_align))}
    options = [[(b, r) for b in bs for r in members[b]] for bs in by_shape.values()]
    for pick in itertools.product(*options):
        lead_batches = [b for b, _ in pick]
        rank = {b: i for i, b in enumerate(lead_batches + [b for b in range(len(a.seq_align)) if b not in lead_batches])}
        ids = [f"x-{rank[b]:04d}" for b in range(len(a.seq_align))]
        leads = {r for _, r in pick}
        order = sorted(range(len(req)), key=lambda r: (rank[a.batch_of[r]], r not in leads, r))
        yield BucketAssignment(a.batch_of, a.seq_align, order, ids)


def brute_force_4b(cfg, reqs):
    """Least objective over every shape set, partition, shape per batch (any chosen one that holds it) and
    first-use placement; one bucket."""
    (name, req), = reqs.items()
    gran = cfg.shapes.granularity
    allowed = sorted({-(-int(p) // gran) * gran for p in req.prompt})
    best, best_plan = math.inf, None
    for k in range(1, cfg.shapes.max_unique + 1):
        for shapes in itertools.combinations(allowed, k):
            for part in set_partitions(list(range(len(req)))):
                if any(len(b) > cfg.batching.max_batch_size for b in part):
                    continue
                fits = [[s for s in shapes if s >= max(int(req.prompt[r]) for r in b)] for b in part]
                for seq in itertools.product(*fits):
                    batch_of = [0] * len(req)
                    for b, members in enumerate(part):
                        for r in members:
                            batch_of[r] = b
                    for a in placements(req, BucketAssignment(batch_of, list(seq))):
                        ok, value = plan_value(cfg, reqs, {name: a})
                        if ok and value < best:
                            best, best_plan = value, a
    return best, best_plan


def context_model(cfg, reqs, scale_ref=1e10):
    """The CP-SAT model over every occurring shape (context mode where the semantics allow): (model, space, groups)."""
    inst = Instance(cfg, reqs)
    space = model_space(cfg, np.asarray(inst.all_shapes), reqs, 64)
    groups = {n: group_bucket(r, space.levels, 48, level=space.level_of(r)) for n, r in reqs.items()}
    return ShapeModel(cfg, space, groups, cfg.objective.weight_map(), scale_ref, reqs), space, groups


def cpsat_alone(cfg, reqs):
    model, space, groups = context_model(cfg, reqs)
    sol = model.solve(20, 2, 0, progress=False)
    if sol.objective is None:
        return sol, None
    plans = {n: model_plan_exact(cfg, reqs[n], space, groups[n], sol) for n in groups}
    return sol, as_assignments(plans)


def as_assignments(plans: dict) -> dict:
    """Placed plans (batch ids and line order set) as the brute-force module's assignments."""
    return {n: BucketAssignment(list(p.batch_of), list(p.seq_align), list(p.order), list(p.batch_ids))
            for n, p in plans.items()}


def solve_both(tmp_path, limits, minimize="cost"):
    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": limits}, k=2, batch=3, cost_model=TASK,
                       objective={"minimize": minimize})
    best, _ = brute_force_4b(cfg, reqs)
    sol, assign = cpsat_alone(cfg, reqs)
    if not math.isfinite(best):             # no plan meets the limits: the model alone must find none either
        assert sol.status == "INFEASIBLE" or any(sol.slack.values())
        pytest.skip("no plan meets this limit")
    return cfg, best, sol, plan_metrics(cfg, reqs, assign)


def unconstrained(tmp_path, minimize="cost"):
    cfg, best, sol, metrics = solve_both(tmp_path / "free", {}, minimize)
    return best, metrics["a"]


def test_unconstrained_optimum(tmp_path):
    cfg, best, sol, metrics = solve_both(tmp_path, {})
    assert sol.status == "OPTIMAL"
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)
    assert sol.bound <= best * (1 + 1e-9)


@pytest.mark.parametrize("limits", [{}, {"p95_latency_ms": 18100}])
def test_batches_of_one(tmp_path, limits):
    """max_batch_size 1 (every class holds one member per batch; with a latency limit, in origin flows): the
    model alone still reaches the brute-force optimum."""
    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": limits}, k=2, batch=1, cost_model=TASK)
    best, _ = brute_force_4b(cfg, reqs)
    sol, assign = cpsat_alone(cfg, reqs)
    assert sol.status == "OPTIMAL" and math.isfinite(best)
    assert objective_of(cfg, plan_metrics(cfg, reqs, assign)) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("key,factor,minimize", [("cost", 0.995, "pad_tokens"), ("pad_ratio", 0.97, "cost")])
def test_binding_limit_optimum(tmp_path, key, factor, minimize):
    """The limit is set below what the unconstrained optimum reaches (so it binds); the model alone reaches
    the brute-force optimum of the constrained problem and its plan meets the limit."""
    free_best, free = unconstrained(tmp_path, minimize)
    limit = free[key] * factor
    cfg, best, sol, metrics = solve_both(tmp_path / "lim", {key: limit}, minimize)
    if not math.isfinite(best):
        pytest.skip("no plan meets this limit")
    assert best > free_best                              # the limit binds
    assert not broken_limits(cfg, metrics)
    assert sol.status == "OPTIMAL"
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)
    assert sol.bound <= best * (1 + 1e-9)


@pytest.mark.parametrize("factor", [0.9, 0.97])
def test_first_use_placed_exactly_under_sequential_time(tmp_path, factor):
    """Where each shape's first-use latency lands is decided by the model (a lead member per shape): under a
    binding sequential-time limit the model alone reaches the exhaustive optimum, which tries every batch and
    member a shape's first use may land on (a warm-up on a short-prompt member hides under its batch's slowest)."""
    free_best, free = unconstrained(tmp_path)
    cfg, best, sol, metrics = solve_both(tmp_path / "lim", {"sequential_time_ms": free["sequential_time_ms"] * factor})
    assert best > free_best * (1 + 1e-9)                 # the limit binds
    assert sol.status == "OPTIMAL" and not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)
    assert sol.bound <= best * (1 + 1e-9)


@pytest.mark.parametrize("key", ["p95_latency_ms", "max_latency_ms"])
def test_first_use_placed_exactly_under_latency_limits(tmp_path, key):
    """A latency limit below the slowest member plus the warm-up: the model must land each shape's first use on a
    member it does not push over the limit, and still reach the exhaustive optimum."""
    prompts, gens = PROMPTS + [450], GENS + [8]
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, k=2, batch=3, cost_model=TASK)
    _, plan = brute_force_4b(cfg, reqs)
    limit = plan_metrics(cfg, reqs, {"a": plan})["a"][key] - 0.9 * TASK["first_use_ms"]
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": {key: limit}}, k=2, batch=3, cost_model=TASK)
    best, _ = brute_force_4b(cfg, reqs)
    sol, assign = cpsat_alone(cfg, reqs)
    metrics = plan_metrics(cfg, reqs, assign)
    assert math.isfinite(best) and sol.status == "OPTIMAL" and not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)


SHAPE_MODE_FIRST_USE = {"first_use_ms": 120}      # section 4 semantics (every member at its batch's latency)


@pytest.mark.parametrize("key,factor,instance", [("sequential_time_ms", 0.9, "six"), ("max_latency_ms", 0.8, "six"),
                                                 ("max_latency_ms", 0.9, "lat")])
def test_first_use_placed_exactly_in_shape_mode(tmp_path, key, factor, instance):
    """Section 4 semantics with a warm-up: the model picks the class whose batch carries each shape's first use,
    and equals the exhaustive optimum under a binding sequential-time or max-latency limit."""
    from tests.test_models_alone import LAT, SIX
    prompts, gens = {"six": (SIX[0][:5], SIX[1][:5]), "lat": LAT}[instance]
    args = dict(k=2, batch=3, cost_model=SHAPE_MODE_FIRST_USE)
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, **args)
    free_best, plan = brute_force_4b(cfg, reqs)
    limit = plan_metrics(cfg, reqs, {"a": plan})["a"][key] * factor
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": {key: limit}}, **args)
    best, _ = brute_force_4b(cfg, reqs)
    sol, assign = cpsat_alone(cfg, reqs)
    metrics = plan_metrics(cfg, reqs, assign)
    assert best > free_best * (1 + 1e-9)                 # the limit binds
    assert sol.status == "OPTIMAL" and not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)


def test_levels_without_batches_need_no_covering_shape():
    """Context mode: a bucket's used shapes cover the levels it has batches at; other levels may be left
    uncovered (regression: the writer refused such a solution)."""
    from models.instance import Space
    from solver.postprocess import level_shapes

    space = Space(np.array([64, 128, 256]), np.array([64, 128, 256]), np.array([0, 1, 2]), True, 64)
    assert level_shapes(space, np.array([True, False, False])).tolist() == [64, 64, 64]
    assert level_shapes(space, np.array([False, True, True])).tolist() == [128, 128, 256]


@pytest.mark.parametrize("key", ["p95_latency_ms", "max_latency_ms"])
def test_latency_limits_count_each_member_at_its_own_latency(tmp_path, key):
    """Members of one batch differ by their own prefill: the model's origin flow judges each member at its own
    latency, so it matches the exhaustive optimum (a prompt of 450 makes the slowest member)."""
    prompts, gens = PROMPTS + [450], GENS + [8]
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, k=2, batch=3, cost_model=TASK)
    _, plan = brute_force_4b(cfg, reqs)
    limit = 0.95 * plan_metrics(cfg, reqs, {"a": plan})["a"][key]
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": {key: limit}}, k=2, batch=3, cost_model=TASK)
    best, _ = brute_force_4b(cfg, reqs)
    sol, assign = cpsat_alone(cfg, reqs)
    metrics = plan_metrics(cfg, reqs, assign)
    assert math.isfinite(best) and not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)


def pair_alone_in_context_mode(cfg, reqs):
    """The pair MIP over every candidate shape and every pair, classes by decode context; plan per bucket with
    the first use placed by the writer."""
    from models.pair_model import PairModel
    from solver.polish import pairs_to_plan
    from solver.postprocess import place_first_use
    inst = Instance(cfg, reqs)
    space = model_space(cfg, np.asarray(inst.all_shapes), reqs, 64)
    assert space.context_mode
    classes = {n: group_bucket(r, space.levels, 48, level=space.level_of(r)) for n, r in reqs.items()}
    model = PairModel(cfg, inst.costs, space, reqs, cfg.objective.weight_map(), classes, 1e9)
    for b in model.buckets.values():
        g, c = np.meshgrid(np.arange(len(b.n)), np.arange(b.num_classes), indexing="ij")
        ok = (b.ci[c] >= b.gi[g]) & (b.cj[c] >= b.gj[g])
        b.add_pairs(g[ok], c[ok])
    res, _, layout = model.solve(20, integral=True)
    chosen = res.x[:len(space.shapes)] > 0.5
    plans = {n: place_first_use(cfg, reqs[n], pairs_to_plan(cfg, b, res.x[layout[n][0]:layout[n][0] + len(b.pg)],
                                                            chosen)) for n, b in model.buckets.items()}
    return as_assignments(plans)


@pytest.mark.parametrize("limits,minimize", [({}, "cost"), ({"pad_ratio": 0.2}, "cost"), ({}, "pad_tokens")])
def test_pair_model_alone_in_context_mode(tmp_path, limits, minimize):
    """Classes by decode context (longest aligned prompt), groups by own aligned prompt: the pair MIP alone reaches
    the exhaustive optimum where no latency limit is set (the warm-up then changes no limit or objective)."""
    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": limits}, k=2, batch=3, cost_model=TASK,
                       objective={"minimize": minimize})
    best, _ = brute_force_4b(cfg, reqs)
    metrics = plan_metrics(cfg, reqs, pair_alone_in_context_mode(cfg, reqs))
    assert not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)


def test_polish_in_context_mode_reaches_the_optimum(tmp_path):
    """The polish (pair MIP on a plan's shapes) under the task's semantics: started from dp's plan with every
    allowed shape offered, it reaches the exhaustive optimum (a pad limit binding, no latency limit)."""
    from solver.heuristics import HEURISTICS
    from solver.polish import polish
    from solver.postprocess import place_first_use
    free_best, free = unconstrained(tmp_path)
    cfg, reqs = config(tmp_path / "lim", {"a": (PROMPTS, GENS)}, {"a": {"pad_ratio": free["pad_ratio"] * 0.97}},
                       k=2, batch=3, cost_model=TASK)
    best, _ = brute_force_4b(cfg, reqs)
    inst = Instance(cfg, reqs)
    plans = polish(inst, list(inst.all_shapes), HEURISTICS["dp"](inst), 1e9, 20.0)
    plans = {n: place_first_use(cfg, reqs[n], p) for n, p in plans.items()}
    metrics = plan_metrics(cfg, reqs, as_assignments(plans))
    assert best > free_best and not broken_limits(cfg, metrics)
    assert objective_of(cfg, metrics) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("limits,extra", [({}, False), ({"sequential_time_ms": 0.9}, False),
                                          ({"pad_ratio": 0.97}, False), ({"max_latency_ms": 0.99}, True),
                                          ({"p95_latency_ms": 0.95}, True)])
def test_global_bound_in_context_mode_below_the_optimum(tmp_path, limits, extra):
    """The pair-LP bound under the task's semantics (classes by decode context, the percentile limits, the warm-up
    and a bucket's compile cost relaxed away) never exceeds the exhaustive optimum, whatever limit binds, and is
    not a trivial number."""
    from solver.global_bound import GlobalBound
    prompts, gens = (PROMPTS + [450], GENS + [8]) if extra else (PROMPTS, GENS)
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, k=2, batch=3, cost_model=TASK)
    free_best, plan = brute_force_4b(cfg, reqs)
    free = plan_metrics(cfg, reqs, {"a": plan})["a"]
    scaled = {key: free[key] * f for key, f in limits.items()}
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": scaled}, k=2, batch=3, cost_model=TASK)
    best, _ = brute_force_4b(cfg, reqs) if scaled else (free_best, plan)
    assert math.isfinite(best)
    res = GlobalBound(Instance(cfg, reqs), cfg.objective.weight_map(), 1e9, max_caps=100).run(30, progress=False)
    assert res.converged and res.bound <= best * (1 + 1e-9)
    assert res.bound >= 0.5 * best


def test_leads_that_cannot_be_placed_fall_back_to_the_writer(tmp_path, caplog):
    """A solution whose leads cannot be matched to its shapes (here: none at all) is a bug; the run still gets a
    valid plan, each warm-up placed by the writer, and says so in the log."""
    from solver.stages import model_plan
    from solver.verify import verify_plans
    cfg, reqs = config(tmp_path, {"a": (PROMPTS, GENS)}, {"a": {"sequential_time_ms": 1e9}}, k=2, batch=3,
                       cost_model=TASK)
    model, space, groups = context_model(cfg, reqs)
    sol = model.solve(20, 2, 0, progress=False)
    sol.lead["a"] = np.zeros_like(sol.lead["a"])
    with pytest.raises(StopIteration):
        model_plan_exact(cfg, reqs["a"], space, groups["a"], sol)
    plan = model_plan(cfg, reqs["a"], space, groups["a"], sol)
    assert verify_plans(cfg, reqs, {"a": plan}) == []
    assert "could not be placed" in caplog.text


# --- the hint of a placed plan, in context mode with first-use leads and origin flows --------------------------

def hint_plan(cfg, reqs, model, space, groups, assignment: dict):
    """add_hint with plan_to_classes of placed plans {bucket: BucketAssignment with order and batch ids}."""
    from models.plan import BucketPlan
    from solver.postprocess import plan_to_classes
    model.add_hint({n: plan_to_classes(cfg, reqs[n], space, groups[n],
                                       BucketPlan(np.asarray(a.batch_of), np.asarray(a.seq_align),
                                                  np.asarray(a.batch_ids), np.asarray(a.order)))
                    for n, a in assignment.items()})


def fix_to_hint(target, hinted, keep=lambda var: True):
    """Fix in CpModel `target` every variable of `hinted`'s hint (a CpModel with the same variables) that `keep`
    accepts by name."""
    proto = hinted.proto
    for var, value in zip(list(proto.solution_hint.vars), list(proto.solution_hint.values)):
        if keep(proto.variables[var].name):
            target.add(target.get_int_var_from_proto_index(var) == value)


def solve_fixed(model, keep=lambda var: True):
    """CP-SAT on the model with every hinted variable that `keep` accepts fixed to its hint: (status, objective
    in real units or None, slack values)."""
    from ortools.sat.python import cp_model
    fixed = model.model.clone()
    fix_to_hint(fixed, model.model, keep)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 20
    status = solver.solve(fixed)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver.status_name(status), None, {}
    return solver.status_name(status), model.to_real(solver.objective_value), \
        {key: solver.value(fixed.get_int_var_from_proto_index(s.index)) for key, s in model.slack.items()}


HINT_CASES = {                       # limits as factors of the unconstrained optimum's metrics; objective
    "free, sequential objective": ({}, {"minimize": "sequential_time_ms"}, False),
    "sequential binding": ({"sequential_time_ms": 0.9}, {"minimize": "cost"}, False),
    "p95 binding": ({"p95_latency_ms": 0.95}, {"minimize": "cost"}, True),
    "max latency binding": ({"max_latency_ms": 0.95}, {"minimize": "cost"}, True),
    "p99 and weights": ({"p99_latency_ms": 1.0}, {"weights": {"cost": 1.0, "sequential_time_ms": 1.0e7}}, True),
}


@pytest.mark.parametrize("case", list(HINT_CASES))
def test_hint_of_the_exhaustive_optimum_is_a_solution_at_its_value(tmp_path, case):
    """Context mode, leads and (with latency limits) origin flows: the hint made from the exhaustive optimum's
    placed plan, with every hinted variable fixed, is a solution of the model alone whose objective is that
    optimum and whose slacks are all 0. A hint that misses a variable (has, leads, origin flows, slacks) or
    miscounts one is infeasible there or priced differently."""
    factors, objective, extra = HINT_CASES[case]
    prompts, gens = (PROMPTS + [450], GENS + [8]) if extra else (PROMPTS, GENS)
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, k=2, batch=3, cost_model=TASK,
                       objective=objective)
    _, plan = brute_force_4b(cfg, reqs)
    free = plan_metrics(cfg, reqs, {"a": plan})["a"]
    limits = {key: free[key] * f for key, f in factors.items()}
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": limits}, k=2, batch=3, cost_model=TASK,
                       objective=objective)
    best, plan = brute_force_4b(cfg, reqs)
    model, space, groups = context_model(cfg, reqs, best)
    assert model.leads["a"] and model.origin["a"]          # a warm-up matters: leads placed, origin flows
    hint_plan(cfg, reqs, model, space, groups, {"a": plan})
    proto = model.model.proto
    free_vars = [i for i, v in enumerate(proto.variables) if len(set(v.domain)) > 1]
    assert set(free_vars) <= set(proto.solution_hint.vars)                        # complete
    status, value, slack = solve_fixed(model)
    assert status == "OPTIMAL", status
    assert value == pytest.approx(best, rel=1e-6)
    assert all(v == 0 for v in slack.values())
    assert len(slack) == len(set(limits) - {"max_latency_ms"})     # max latency is a hard bound on the cells


@pytest.mark.parametrize("key,factor", [("sequential_time_ms", 0.8), ("p95_latency_ms", 0.8), ("cost", 0.9)])
def test_hint_of_a_plan_breaking_a_limit_sets_the_least_slack(tmp_path, key, factor):
    """The unconstrained optimum hinted under a limit it breaks: with every hinted variable fixed the model is
    feasible (the slack hint covers the excess) and no dearer than with the slacks left free (the slack hint is
    the least that does), and some slack is positive."""
    prompts, gens = PROMPTS + [450], GENS + [8]
    cfg, reqs = config(tmp_path / "free", {"a": (prompts, gens)}, {"a": {}}, k=2, batch=3, cost_model=TASK)
    _, plan = brute_force_4b(cfg, reqs)
    limit = plan_metrics(cfg, reqs, {"a": plan})["a"][key] * factor
    cfg, reqs = config(tmp_path / "lim", {"a": (prompts, gens)}, {"a": {key: limit}}, k=2, batch=3, cost_model=TASK)
    model, space, groups = context_model(cfg, reqs, 1e10)
    hint_plan(cfg, reqs, model, space, groups, {"a": plan})
    status, fixed, slack = solve_fixed(model)
    assert status == "OPTIMAL", status
    assert any(slack.values())
    status, free_slack, _ = solve_fixed(model, keep=lambda name: not name.startswith("slack["))
    assert status == "OPTIMAL" and fixed == pytest.approx(free_slack, rel=1e-12)


# --- two buckets: a given plan is priced and written back exactly ---------------------------------------------

TWO = {"a": ([40, 100, 130, 60], [10, 12, 30, 10]), "b": ([250, 190, 60], [5, 40, 10])}
TWO_PLAN = {"a": ([0, 1, 2, 0], [128, 128, 256]), "b": ([0, 1, 1], [256, 256])}     # batch of each request; shapes
SHAPE_SEMANTICS = {"prefill_length": "shape", "decode_context": "shape", "prompt_pad": "shape"}


@pytest.mark.parametrize("semantics", ["context", "shape"])
@pytest.mark.parametrize("lead", [0, -1])
def test_two_buckets_a_fixed_plan_is_priced_and_written_exactly(tmp_path, semantics, lead):
    """Two buckets sharing shapes, first-use leads and (context mode) origin flows in both: a plan fixed
    through its hint is worth, in the model alone, what the spec recomputation says, and the model's own
    solution is written back (leads placed per bucket) as a plan worth the same. A bucket key mixed up, a
    lead counted in the other bucket or a lead hint lost shows up as a different value or an infeasible fix."""
    cm = TASK | (SHAPE_SEMANTICS if semantics == "shape" else {})
    limits = {"p95_latency_ms": 1e9, "sequential_time_ms": 1e12}
    cfg, reqs = config(tmp_path, TWO, {"a": limits, "b": limits}, k=3, batch=3, cost_model=cm,
                       objective={"weights": {"cost": 1.0, "sequential_time_ms": 1.0e4}})
    plan = {n: list(placements(reqs[n], BucketAssignment(*TWO_PLAN[n])))[lead] for n in TWO}
    ok, value = plan_value(cfg, reqs, plan)
    assert ok
    model, space, groups = context_model(cfg, reqs, value)
    assert all(model.leads.values()) and all(model.origin.values()) == (semantics == "context")
    hint_plan(cfg, reqs, model, space, groups, plan)
    fix_to_hint(model.model, model.model)
    sol = model.solve(20, 1, 0, progress=False)
    assert sol.status == "OPTIMAL" and sol.objective == pytest.approx(value, rel=1e-6)
    written = as_assignments({n: model_plan_exact(cfg, reqs[n], space, groups[n], sol) for n in TWO})
    assert plan_value(cfg, reqs, written) == (True, pytest.approx(value, rel=1e-9))


@pytest.mark.parametrize("limit", [10000, 2500])
def test_the_one_slow_request_p95_leaves_in_twenty_is_counted_once(tmp_path, limit):
    """20 requests (one may be slower than p95), 19 short and one long, batches dear: under the task's semantics
    the long request goes alone, the one slow request. At 2500 ms the shape's warm-up makes a short request slow
    too, so it must land on the long one. The optimum is the least over every first-use placement of that plan
    (any plan batching the long request with others has more than one slow request)."""
    cfg, reqs = config(tmp_path, {"a": ([40] * 20, [10] * 19 + [200])}, {"a": {"p95_latency_ms": limit}}, k=1,
                       batch=32, cost_model=TASK | {"batch_overhead_cost": 1e12})
    one = BucketAssignment([0] * 20, [64])
    assert all(broken_limits(cfg, plan_metrics(cfg, reqs, {"a": p})) for p in placements(reqs["a"], one))
    alone = BucketAssignment([0] * 19 + [1], [64, 64])
    values = [plan_value(cfg, reqs, {"a": p}) for p in placements(reqs["a"], alone)]
    best = min(v for ok, v in values if ok)
    assert (limit < 3000) == (not all(ok for ok, _ in values))       # at 2500 ms the lead's place matters
    sol, plans = cpsat_alone(cfg, reqs)
    assert sol.status == "OPTIMAL" and sol.objective == pytest.approx(best, rel=1e-6)
    assert plan_value(cfg, reqs, plans) == (True, pytest.approx(best, rel=1e-9))
