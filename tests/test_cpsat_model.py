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
    assert r.solver["bound_scope"] == "global" and r.solver["bound_global"]
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


# --- issue 20: the model is valid for every config the loader accepts -------------------------------

from models.cpsat_model import VALID_STATUSES, ShapeModel  # noqa: E402
from models.instance import Instance, group_bucket, model_space  # noqa: E402

LIMIT_KEYS = ["p95_latency_ms", "p99_latency_ms", "max_latency_ms", "pad_ratio", "pad_tokens", "cost",
              "sequential_time_ms"]


def built_model(cfg, reqs, scale_ref=1e9):
    inst = Instance(cfg, reqs)
    space = model_space(cfg, np.asarray(inst.all_shapes), reqs, 64)
    groups = {n: group_bucket(r, space.levels, 48, level=space.level_of(r)) for n, r in reqs.items()}
    return ShapeModel(cfg, space, groups, cfg.objective.weight_map(), scale_ref, reqs)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(LIMIT_KEYS), st.sampled_from([0, 1e-300, 1e-6, 1, 10, 1e4, 1e9, 1e15, 1e30]),
                       min_size=1, max_size=4),
       st.sampled_from([{}, {"prefill_length": "request", "decode_context": "batch", "prompt_pad": "request",
                             "first_use_ms": 1500, "compile_in_bucket_cost": True}]))
def test_model_valid_for_limits_from_loose_to_absurd(tmp_path_factory, limits, semantics):
    """Right-hand sides of 0, 1 and a million times below reachable, and absurdly loose ones: the model
    validates (no int64 overflow) and CP-SAT answers with a regular status."""
    from solver.pipeline import load_all

    rng = np.random.default_rng(len(limits))
    tmp = tmp_path_factory.mktemp("ovf")
    path = make_config(tmp, {"a": rows_from(rng.integers(20, 901, 30), rng.integers(5, 301, 30))}, {"a": limits},
                       shapes={"max_unique": 4}, batching={"max_batch_size": 16}, cost_model=semantics,
                       solver={"log_progress": False})
    cfg = load(path)
    model = built_model(cfg, load_all(cfg))
    assert model.model.validate() == ""
    sol = model.solve(1.0, 2, 0, progress=False)
    assert sol.status in VALID_STATUSES


def test_issue20_repro_ends_with_the_models_own_status(tmp_path):
    """120 requests, 4 shapes, batches of 16, sequential_time_ms 10 (least reachable about 2e4 ms)."""
    from solver.pipeline import solve as run

    rng = np.random.default_rng(1)
    path = make_config(tmp_path, {"a": rows_from(rng.integers(20, 901, 120), rng.integers(5, 301, 120))},
                       {"a": {"sequential_time_ms": 10}}, shapes={"max_unique": 4}, batching={"max_batch_size": 16},
                       solver={"log_progress": False, "time_limit_s": 3})
    res = run(load(path), ("cpsat",))
    info = res.results["cpsat"].solver
    assert info["model_status"] in VALID_STATUSES and "model_error" not in info
    assert not res.results["cpsat"].feasible
    assert info["best_bound"] is None and info["gap"] is None     # no cost bound beside a plan breaking limits
    assert info["bound_scope"].startswith("none")


def test_model_alone_keeps_a_feasible_plan_under_a_real_valued_limit(tmp_path):
    """Regression: with sequential-time coefficients near 1e15 CP-SAT's presolve lost the feasible plan and
    claimed OPTIMAL at a penalized objective 35x too high; rows now use at most ~2**30 steps per rhs."""
    from solver.pipeline import load_all

    cfg = tiny(tmp_path, [1, 65, 65], [1, 2, 58], {"sequential_time_ms": 1500}, k=2)
    reqs = load_all(cfg)
    sol = built_model(cfg, reqs).solve(10, 2, 0, progress=False)
    best = brute_force(cfg, reqs)
    assert sol.status == "OPTIMAL" and all(v == 0 for v in sol.slack.values())
    assert sol.objective == pytest.approx(best, rel=1e-6)


# --- solve() and the progress line, on the model alone ----------------------------------------------------

def model_of(tmp_path, n=5, limits=None, k=2, batch=3, seed=0):
    from solver.pipeline import load_all

    rng = np.random.default_rng(seed)
    prompts = [40, 100, 130, 60, 250] if n == 5 else rng.integers(20, 901, n)
    gens = [10, 12, 30, 10, 5] if n == 5 else rng.integers(5, 301, n)
    cfg = tiny(tmp_path, prompts, gens, limits, k=k, batch=batch)
    reqs = load_all(cfg)
    return cfg, reqs, built_model(cfg, reqs)


def test_solve_returns_the_optimum_with_its_bound_and_decisions(tmp_path, caplog):
    cfg, reqs, model = model_of(tmp_path)
    sol = model.solve(10, 2, 0, progress=False)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]          # a valid status is no error
    best = brute_force(cfg, reqs)
    assert sol.status == "OPTIMAL" and not sol.interrupted
    assert sol.objective == pytest.approx(best, rel=1e-6)
    assert best * (1 - 2e-5) <= sol.bound <= sol.objective * (1 + 1e-9)    # relative_gap_limit 1e-5
    assert 0 < sol.solve_time_s < 10
    assert sol.use.dtype == bool and 1 <= sol.use.sum() <= 2
    assert sol.m["a"].dtype == np.int64 and sol.m["a"].sum() == 5             # every request in a class
    assert sol.k["a"].sum() >= 2                                              # 5 requests, batches of 3


def test_solve_maps_an_infeasible_model_to_no_objective_and_no_bound(tmp_path):
    _, _, model = model_of(tmp_path)
    model.model.add_bool_or([])                   # an empty clause: no solution exists
    sol = model.solve(10, 1, 0, progress=False)
    assert (sol.status, sol.objective, sol.bound, sol.interrupted) == ("INFEASIBLE", None, -np.inf, False)
    assert sol.solve_time_s >= 0 and sol.use is None


def test_solve_stopped_before_any_solution_is_unknown_with_a_valid_bound(tmp_path):
    cfg, reqs, model = model_of(tmp_path, n=40, k=3, batch=4)
    sol = model.solve(10, 1, 0, progress=False, deterministic_time=1e-9)
    assert sol.status == "UNKNOWN" and sol.objective is None and not sol.interrupted
    assert sol.solve_time_s < 10 and -np.inf < sol.bound <= objective_of_hint_free_plan(cfg, reqs)


def objective_of_hint_free_plan(cfg, reqs):
    """Any valid plan's cost bounds the optimum from above: every request alone at the largest shape."""
    total = 0.0
    for name, req in reqs.items():
        ref = recompute(cfg, req, np.arange(len(req)), np.full(len(req), 960))
        total += ref["cost"]
    return total + cfg.cost_model.compile_cost[0] + cfg.cost_model.compile_cost[1] * 960 + \
        cfg.cost_model.compile_cost[2] * 960 ** 2


def hard_model(tmp_path):
    """400 requests, 4 shapes, batches of 8, a sequential-time limit: not proven within seconds."""
    return model_of(tmp_path, n=400, k=4, batch=8, seed=3, limits={"sequential_time_ms": 3e5})[2]


def test_work_limit_reached_is_not_an_interruption(tmp_path):
    sol = hard_model(tmp_path).solve(60, 1, 0, progress=False, deterministic_time=0.3)
    assert sol.status == "FEASIBLE" and not sol.interrupted and sol.solve_time_s < 57


def test_time_limit_reached_is_not_an_interruption(tmp_path):
    sol = hard_model(tmp_path).solve(2, 1, 0, progress=False)
    assert sol.status in ("FEASIBLE", "OPTIMAL") and not sol.interrupted     # FEASIBLE here (2 cores)


def test_a_search_stopped_early_is_reported_interrupted(tmp_path, monkeypatch):
    """stop_search at the first solution (as Ctrl-C does): FEASIBLE long before the limit, so interrupted."""
    from models import cpsat_model

    def first_and_stop(self):
        self.best = self.to_real(self.objective_value)
        self.stop_search()

    monkeypatch.setattr(cpsat_model.Progress, "on_solution_callback", first_and_stop)
    sol = hard_model(tmp_path).solve(60, 1, 0, progress=False)
    assert sol.status == "FEASIBLE" and sol.interrupted and sol.objective is not None


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_line_is_exact_and_throttled_to_one_per_two_seconds(monkeypatch, caplog):
    from models import cpsat_model

    clock = Clock()
    monkeypatch.setattr(cpsat_model.time, "monotonic", clock)
    p = cpsat_model.Progress(lambda x: x, True)
    caplog.set_level("INFO", logger="models.cpsat_model")
    p.best, p.bound = 10.0, 8.0
    clock.now = 101.0
    p.report(force=False)                               # 1 s after the start: too soon
    assert caplog.messages == []
    clock.now = 102.0
    p.report(force=False)                               # exactly 2 s: printed
    assert caplog.messages == ["cpsat  incumbent 10  bound 8  gap 20.000%  elapsed 2.0s"]
    clock.now = 103.5
    p.report(force=False)                               # 1.5 s after the last line
    clock.now = 103.6
    p.report(force=True)                                # a new incumbent is always printed
    assert caplog.messages[1:] == ["cpsat  incumbent 10  bound 8  gap 20.000%  elapsed 3.6s"]
    clock.now = 106.0
    p.best, p.bound = None, 7.0
    p.report(force=False)
    assert caplog.messages[2:] == ["cpsat  incumbent none  bound 7  gap nan%  elapsed 6.0s"]
    p.best = -4.0                                       # the gap is relative to |incumbent|
    p.report(force=True)
    assert caplog.messages[3:] == ["cpsat  incumbent -4  bound 7  gap -275.000%  elapsed 6.0s"]


def test_a_bound_alone_is_shown_in_real_units_at_most_every_two_seconds(monkeypatch, caplog):
    from models import cpsat_model

    clock = Clock()
    monkeypatch.setattr(cpsat_model.time, "monotonic", clock)
    p = cpsat_model.Progress(lambda x: x / 10, True)
    caplog.set_level("INFO", logger="models.cpsat_model")
    p.best = 10.0
    clock.now = 101.0
    p.on_bound(80)                                      # 1 s in: kept, not shown
    assert p.bound == 8.0 and caplog.messages == []
    clock.now = 102.5
    p.on_bound(90)
    assert caplog.messages == ["cpsat  incumbent 10  bound 9  gap 10.000%  elapsed 2.5s"]
    clock.now = 103.0
    p.on_bound(95)                                      # 0.5 s after the last line
    assert p.bound == 9.5 and len(caplog.messages) == 1


def test_solve_hands_every_bound_improvement_to_the_progress_display(tmp_path, monkeypatch):
    from models import cpsat_model

    seen = []
    monkeypatch.setattr(cpsat_model.Progress, "on_bound", lambda self, bound: seen.append(self.to_real(bound)))
    model = hard_model(tmp_path)
    sol = model.solve(3, 1, 0, progress=False)
    assert seen and seen == sorted(seen) and seen[-1] <= sol.objective * (1 + 1e-9)


def test_progress_off_prints_nothing(monkeypatch, caplog):
    from models import cpsat_model

    caplog.set_level("INFO", logger="models.cpsat_model")
    p = cpsat_model.Progress(lambda x: x, False)
    p.best, p.bound = 10.0, 8.0
    p.report(force=True)
    assert caplog.messages == []


def test_solve_streams_progress_in_real_units(tmp_path, caplog):
    caplog.set_level("INFO", logger="models.cpsat_model")
    cfg, reqs, model = model_of(tmp_path)
    sol = model.solve(10, 1, 0, progress=True)
    lines = [m for m in caplog.messages if m.startswith("cpsat  incumbent")]
    assert lines and f"incumbent {sol.objective:.6g}" in lines[-1]


# --- limit rows scaled to integers: a relaxation, within the budget, and no looser than its resolution ---------

def random_row(rng, integral):
    n = int(rng.integers(1, 5))
    big = rng.random() < 0.3
    if integral:
        coef = rng.integers(-50, 200, n).astype(float) * (float(2 ** 58) if big else 1.0)
        rhs = float(rng.integers(-100, 3000)) * (float(2 ** 58) if big else 1.0)
    else:
        mag = 10.0 ** rng.uniform(-6, 15)
        coef = rng.uniform(-0.3, 1.0, n) * mag
        rhs = rng.uniform(-0.5, 30.0) * mag
    ub = rng.integers(1, 40, n)
    return [(float(a), f"x{i}", int(u)) for i, (a, u) in enumerate(zip(coef, ub))], rhs


@pytest.mark.parametrize("integral", [True, False])
def test_scaled_row_is_a_relaxation_within_budget_and_resolution(integral):
    from models.cpsat_model import ROW_BUDGET, ROW_RESOLUTION

    rng = np.random.default_rng(5 if integral else 6)
    exact_rows = 0
    for _ in range(400):
        terms, rhs = random_row(rng, integral)
        scaled, srhs, f = ShapeModel._scaled_row(None, terms, rhs, integral)
        terms = [t for t in terms if t[0] != 0]   # a zero coefficient is dropped
        assert [x for _, x, _ in scaled] == [x for _, x, _ in terms] and all(type(a) is int for a, _, _ in scaled)
        assert sum(abs(a) * ub for a, _, ub in scaled) + abs(srhs) <= ROW_BUDGET * (1 + 1e-9) + 1
        if integral and sum(abs(a) * ub for a, _, ub in terms) + abs(rhs) <= ROW_BUDGET:
            exact_rows += 1                       # small integral rows are kept exactly
            assert f == 1.0 and [a for a, _, _ in scaled] == [int(a) for a, _, _ in terms] and srhs == rhs
        if not integral and sum(abs(a) * ub for a, _, ub in terms) + abs(rhs) < ROW_BUDGET / ROW_RESOLUTION:
            assert ROW_RESOLUTION * 0.99 <= abs(srhs) <= ROW_RESOLUTION + 1 or abs(rhs) < 1   # the rhs in ~2**30 steps
        for _ in range(30):
            x = [int(rng.integers(0, ub + 1)) for _, _, ub in terms]
            lhs = sum(a * v for (a, _, _), v in zip(terms, x))
            slhs = sum(a * v for (a, _, _), v in zip(scaled, x))
            if lhs <= rhs:                        # every assignment the row allows, the scaled row allows
                assert slhs <= srhs
            if lhs > rhs + (sum(x) + 1) / f:      # and it lets through no more than its resolution
                assert slhs > srhs
    assert (exact_rows > 50) == integral


def test_scaled_row_of_a_tiny_real_limit_keeps_its_resolution():
    from models.cpsat_model import ROW_RESOLUTION

    scaled, srhs, f = ShapeModel._scaled_row(None, [(1e-4, "x", 10)], 1e-3, False)
    assert f == pytest.approx(ROW_RESOLUTION / 1e-3) and srhs == pytest.approx(ROW_RESOLUTION, abs=1)
    assert scaled[0][0] * 10 <= srhs < scaled[0][0] * 11          # x <= 10 allowed, x = 11 would not be


def test_scaled_row_of_a_real_limit_near_zero_stays_within_the_budget():
    """A real-valued limit far below its coefficients (rhs 1e-12, terms of size 1): the rhs can not get its
    2**30 steps without passing the row budget, and the budget wins."""
    from models.cpsat_model import ROW_BUDGET

    scaled, srhs, f = ShapeModel._scaled_row(None, [(1.0, "x", 10), (-0.5, "y", 4)], 1e-12, False)
    assert sum(abs(a) * ub for a, _, ub in scaled) + abs(srhs) <= ROW_BUDGET * (1 + 1e-9) + 1
    assert f == pytest.approx(ROW_BUDGET / 12.0) and scaled[0][0] * 1 > srhs    # x = 1 still breaks it


# --- which buckets place first-use leads, and which judge max latency per member -----------------------------

def leads_model(tmp_path, limits, objective, first_use_ms=500, context=True):
    from solver.pipeline import load_all

    cm = {"prefill_length": "request", "decode_context": "batch", "prompt_pad": "request"} if context else {}
    path = make_config(tmp_path, {"a": rows_from([40, 100, 130], [10, 12, 30])}, {"a": limits},
                       shapes={"max_unique": 2}, batching={"max_batch_size": 2},
                       cost_model={**cm, "first_use_ms": first_use_ms}, objective=objective,
                       solver={"log_progress": False})
    cfg = load(path)
    return built_model(cfg, load_all(cfg))


@pytest.mark.parametrize("limits,objective,first_use_ms,expected", [
    ({}, {"minimize": "cost"}, 500, False),                                       # nothing a warm-up changes
    ({}, {"weights": {"cost": 1.0, "sequential_time_ms": 0.5}}, 500, True),       # it lengthens the objective
    ({}, {"minimize": "sequential_time_ms"}, 0, False),                           # no warm-up at all
    ({"sequential_time_ms": 1e9}, {"minimize": "cost"}, 500, True),
    ({"p95_latency_ms": 1e9}, {"minimize": "cost"}, 500, True),
    ({"max_latency_ms": 1e9}, {"minimize": "cost"}, 500, True),
    ({"pad_ratio": 9.0}, {"minimize": "cost"}, 500, False),
])
def test_first_use_leads_only_where_a_warm_up_matters(tmp_path, limits, objective, first_use_ms, expected):
    model = leads_model(tmp_path, limits, objective, first_use_ms)
    assert model.leads["a"] is expected and (len(model.e) > 0) is expected


def test_max_latency_is_judged_per_member_in_an_origin_bucket(tmp_path):
    origin = leads_model(tmp_path, {"max_latency_ms": 1e9, "pad_ratio": 9.0}, {"minimize": "cost"})
    assert origin.origin["a"] and origin.class_limits("a") == {"pad_ratio": 9.0}
    assert origin.limits["a"] == {"max_latency_ms": 1e9, "pad_ratio": 9.0}         # the bucket's own stay whole
    (tmp_path / "s").mkdir()
    shape = leads_model(tmp_path / "s", {"max_latency_ms": 1e9}, {"minimize": "cost"}, context=False)
    assert not shape.origin["a"] and shape.class_limits("a") == {"max_latency_ms": 1e9}


# --- the objective's integer scale, for any reference objective ------------------------------------------------

@pytest.mark.parametrize("ref", ["0", "1", 1e-6, 1e-2, 1.0, 1e3])       # absolute, or times the optimum
@pytest.mark.parametrize("limits", [None, {"pad_ratio": 0.6, "sequential_time_ms": 1e4}])
def test_objective_scale_fits_and_keeps_the_optimum_for_any_reference(tmp_path, ref, limits):
    """The reference objective (the pipeline passes the best heuristic's, or 1) only sets the integer scale: from
    0 or 1 (every coefficient would pass int64 at SCALE / ref) to far above the optimum, the plan terms and the
    slack terms of the objective each stay within OBJ_BUDGET (sum of |coefficient| x bound; CP-SAT rejects a
    model whose objective could pass int64), and the model alone still finds the brute-force optimum, reported
    in real units: with limits the optimum pays more than the unconstrained plan, and a reference far below it
    must not make breaking the limits (slack) look cheaper."""
    from models.cpsat_model import OBJ_BUDGET

    from solver.pipeline import load_all

    cfg = tiny(tmp_path, [40, 100, 130, 60, 250], [10, 12, 30, 10, 5], limits)
    reqs = load_all(cfg)
    best = brute_force(cfg, reqs)
    scale_ref = float(ref) if isinstance(ref, str) else ref * best
    model = built_model(cfg, reqs, scale_ref)
    proto = model.model.proto
    reach = {True: 0, False: 0}
    for v, c in zip(proto.objective.vars, proto.objective.coeffs):
        reach[proto.variables[v].name.startswith("slack[")] += abs(c) * max(abs(d) for d in proto.variables[v].domain)
    assert reach[False] <= OBJ_BUDGET and reach[True] <= OBJ_BUDGET
    assert (reach[True] > 0) == bool(limits)
    sol = model.solve(10, 2, 0, progress=False)
    assert sol.status == "OPTIMAL" and sol.objective == pytest.approx(best, rel=1e-6)


def test_token_capacity_counts_whole_requests(tmp_path):
    """Seven identical requests (prompt 200, gen 40; the only shape is 256) under max_batch_tokens 700 and
    max_batch_size 3: a batch holds floor(700 / (256 + 40)) = 2 of them, so the model alone needs ceil(7 / 2) = 4
    batches. A fractional capacity (2.36) would let 3 batches hold all 7."""
    from tests.test_models_alone import config

    cfg, reqs = config(tmp_path, {"a": ([200] * 7, [40] * 7)}, {}, k=2, batch=3, tokens=700)
    sol = built_model(cfg, reqs).solve(10, 1, 0, progress=False)
    assert sol.status == "OPTIMAL" and int(sol.k["a"].sum()) == 4 and int(sol.m["a"].sum()) == 7
