import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from models.instance import Instance
from solver.pipeline import evaluate, load_all, run_heuristic, solve
from solver.heuristics import rule_plan
from solver.polish import polish
from tests.helpers import Q, checked, load, make_config, q, rows_from


def instance(tmp_path, prompts, gens, limits, k=3, batch=4, polish_share=0.5):
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": limits},
                       shapes={"max_unique": k, "granularity": 64}, batching={"max_batch_size": batch},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False, "polish_share": polish_share})
    cfg = load(path)
    return Instance(cfg, load_all(cfg))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(1, 900), st.integers(1, 120)), min_size=3, max_size=40),
       st.sampled_from([{}, {"sequential_time_ms": 4000}, {"p95_latency_ms": 1200}, {"pad_ratio": 0.8}]),
       st.integers(1, 4), st.integers(1, 8))
def test_polish_never_worse_than_its_start(tmp_path_factory, reqs, limits, k, batch):
    """Polishing the dp plan gives a valid plan, no worse, meeting the limits whenever dp did."""
    inst = instance(tmp_path_factory.mktemp("polish"), [p for p, _ in reqs], [g for _, g in reqs], limits, k, batch)
    start = run_heuristic(inst, "dp")
    plans = polish(inst, start.shapes, start.plans, start.objective, 20.0)
    assert plans is not None
    r = checked(inst, "polish", plans)
    assert set(r.shapes) <= set(start.shapes)
    if start.feasible:
        assert r.feasible and r.objective <= start.objective * (1 + 1e-9)


def test_polish_mixes_shapes_to_save_batches(tmp_path):
    """13 long and 11 short prompts, batches of 8, a sequential-time limit of two long batches and
    one short: only a plan where 3 short requests ride in a long batch meets it (rounding every
    request up to its own shape needs 4 batches, one shape for all needs 3 long ones)."""
    prompts, gens = [1000] * 13 + [50] * 11, [50] * 24
    inst = instance(tmp_path, prompts, gens, {}, k=2, batch=8)
    cm = inst.cfg.cost_model
    latency = lambda s, g: q(cm.prefill_ms, s) + Q(cm.decode_step_ms, s, g) + cm.batch_overhead_ms
    limit = float(2 * latency(1024, 50) + latency(64, 50)) * (1 + 1e-9)
    inst = instance(tmp_path, prompts, gens, {"sequential_time_ms": limit}, k=2, batch=8)
    start = evaluate(inst, "rounding", rule_plan(inst, [64, 1024], order="gen"), 0.0)
    assert not start.feasible and start.metrics["a"].num_batches == 4
    r = checked(inst, "polish", polish(inst, [64, 1024], start.plans, start.objective, 20.0))
    assert r.feasible and r.metrics["a"].num_batches == 3 and r.shapes == [64, 1024]
    one_shape = 24 * (q(cm.prefill_cost, 1024) + Q(cm.decode_step_cost, 1024, 50))
    assert r.metrics["a"].cost < one_shape


def test_pipeline_reports_the_polish(tmp_path):
    prompts, gens = [40, 100, 130, 60, 250, 300, 20], [10, 12, 30, 10, 5, 40, 2]
    for share, reported in ((0.5, True), (0.0, False)):
        inst = instance(tmp_path, prompts, gens, {"sequential_time_ms": 2000}, polish_share=share)
        r = solve(inst.cfg, ("cpsat",)).results["cpsat"]
        assert ("polish_objective" in r.solver) == reported
        assert r.objective <= r.solver.get("polish_objective", np.inf) * (1 + 1e-9)


# --- mutation survivors of solver/polish.py (bench/mutation_pair_polish.md) --------------------------

def cheap_compile(tmp_path, prompts, gens, k, batch):
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": {}},
                       shapes={"max_unique": k, "granularity": 64}, batching={"max_batch_size": batch},
                       cost_model={"compile_cost": [1.0, 0, 0]},
                       solver={"time_limit_s": 10, "workers": 2, "log_progress": False})
    cfg = load(path)
    return Instance(cfg, load_all(cfg))


def test_polish_prices_in_a_class_two_shape_levels_up(tmp_path):
    """Shapes 64..256, batches of 4, compiling nearly free: the optimum (brute force) puts the short
    request into the batch of the three 190-token prompts at 192, two shape levels above its own and
    below the top. The start plan's pairs and their neighbours (one level up, and the top class) do not
    hold it; only the column generation finds it."""
    from tests.helpers import brute_force

    inst = cheap_compile(tmp_path, [190, 190, 190, 10, 250], [5] * 5, k=4, batch=4)
    shapes = [64, 128, 192, 256]
    start = evaluate(inst, "rounding", rule_plan(inst, shapes, order="gen"), 0.0)
    assert start.metrics["a"].num_batches == 3
    r = checked(inst, "polish", polish(inst, shapes, start.plans, start.objective, 20.0))
    assert r.objective == pytest.approx(brute_force(inst.cfg, inst.requests), rel=1e-12)
    assert r.shapes == [192, 256] and r.metrics["a"].num_batches == 2


class FakeClock:
    """time.monotonic for solver.polish: 0 at the start, then `elapsed` seconds later ever after."""

    def __init__(self, elapsed):
        self.calls, self.elapsed = 0, elapsed

    def monotonic(self):
        self.calls += 1
        return 0.0 if self.calls == 1 else self.elapsed


@pytest.mark.parametrize("limit,elapsed,runs", [(1.5, 0.6, False), (2.0, 1.0, True), (2.5, 1.0, True),
                                                (0.9, 0.0, False)])
def test_polish_needs_a_second_left_for_the_mip(tmp_path, monkeypatch, limit, elapsed, runs):
    """After the column generation, the MIP runs only with at least 1 s of the polish time left
    (time_limit_s less the time spent so far); else polish returns None."""
    import solver.polish as polish_module

    inst = instance(tmp_path, [40, 100, 130, 60, 250], [10, 12, 30, 10, 5], {}, k=2, batch=3)
    start = run_heuristic(inst, "dp")
    monkeypatch.setattr(polish_module, "time", FakeClock(elapsed))
    plans = polish(inst, start.shapes, start.plans, start.objective, limit)
    assert (plans is not None) == runs
    if runs:
        checked(inst, "polish", plans)


@pytest.mark.parametrize("seed", [0, 1])
def test_polish_keeps_the_start_plans_caps_beyond_the_ladder(tmp_path, seed):
    """130 distinct gens in batches of 2: more than the 48 ladder caps plus the start plan's batch caps
    (65, more than half the caps), so the start plan is representable only because every one of its
    batch caps is kept; the polished plan is then never worse than the start."""
    rng = np.random.default_rng(seed)
    prompts, gens = rng.integers(1, 300, 130).tolist(), rng.permutation(np.arange(1, 131)).tolist()
    inst = instance(tmp_path, prompts, gens, {}, k=2, batch=2)
    start = run_heuristic(inst, "dp")
    r = checked(inst, "polish", polish(inst, start.shapes, start.plans, start.objective, 20.0))
    assert r.objective <= start.objective * (1 + 1e-9)


# --- which plans the pipeline polishes ----------------------------------------------------------------

class Start:
    """A stand-in for a MethodResult: its shapes, objective and limit excess (0: every limit met)."""

    def __init__(self, shapes, objective, excess=0.0):
        self.shapes, self.objective, self.excess = shapes, objective, excess

    @property
    def feasible(self):
        return self.excess == 0

    def rank(self):
        return (self.excess > 0, self.excess, self.objective)


def test_polish_starts_are_the_best_plan_of_each_shape_set_close_to_the_best(monkeypatch):
    from solver import stages

    monkeypatch.setattr(stages, "rank_key", Start.rank)
    best, same_set, second, third = Start([1, 2], 100.0), Start([2, 1], 101.0), Start([1, 3], 110.0), Start([4], 105.0)
    assert stages.polish_starts([second, same_set, best]) == [best, second]       # one per set, best first
    assert stages.polish_starts([third, second, best]) == [best, third]           # at most POLISH_SETS
    assert stages.polish_starts([Start([1, 3], 110.1), best]) == [best]           # over 10% more: left out
    assert stages.polish_starts([Start([1, 3], 50.0, excess=0.2), best]) == [best]  # breaks a limit: left out
    broken = Start([5], 70.0, excess=0.1)
    assert stages.polish_starts([broken, Start([6], 60.0, excess=0.3)]) == [broken]   # none meets: the least excess


def test_polishes_share_the_time_left_and_report_the_best(monkeypatch):
    from solver import stages

    clock, calls = [0.0], []

    def fake_polish(inst, start, time_left, stages, info, extra=()):
        calls.append((start.objective, time_left))
        clock[0] += time_left / 2                  # each polish uses half its share
        return [Start(start.shapes, start.objective - 1)]

    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(stages, "run_polish", fake_polish)
    info = {}
    out = stages.run_polishes(None, [Start([1], 100.0), Start([2], 104.0)], 30.0, None, info)
    assert calls == [(100.0, 15.0), (104.0, 22.5)]      # the second gets what the first left
    assert [r.objective for r in out] == [99.0, 103.0] and info["polish_objective"] == 99.0


def test_the_best_plans_polish_may_add_the_shape_the_bound_lp_uses_most(monkeypatch):
    """Only the first polish (the best plan) gets an extra shape: the one outside its set with the largest z in the
    bound's LP, when that z reaches POLISH_EXTRA_USE; none without a bound LP."""
    from types import SimpleNamespace

    from solver import stages

    extras = []

    def fake_polish(inst, start, time_left, stages_, info, extra=()):
        extras.append(list(extra))
        return []

    monkeypatch.setattr(stages, "run_polish", fake_polish)
    lp = SimpleNamespace(shape_use={64: 1.0, 128: 0.3, 192: 0.9, 256: 0.6})
    info = {}
    stages.run_polishes(None, [Start([64, 256], 100.0), Start([128], 104.0)], 30.0, None, info, lp)
    assert extras == [[192], []] and info["polish_extra_shapes"] == [192]
    extras.clear()
    info = {}
    stages.run_polishes(None, [Start([64, 192, 256], 100.0)], 30.0, None, info, lp)
    assert extras == [[]] and "polish_extra_shapes" not in info    # 128's z 0.3 is below the threshold
    extras.clear()
    stages.run_polishes(None, [Start([64], 100.0)], 30.0, None, {}, None)
    assert extras == [[]]
