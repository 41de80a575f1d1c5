"""The post-processor's pieces alone, each against values worked out by hand or recomputed from the definitions."""
import itertools

import numpy as np
import pytest

from models.instance import as_space, group_bucket, model_space
from models.plan import BucketPlan
from models.requests import Requests
from solver.postprocess import (first_use_members, member_latencies, member_of_level, ordered_plan, place_leads,
                                plan_to_classes, spec_first_use,
                                split_to)
from tests.helpers import load, make_config, rows_from, spec_batch

CONTEXT = {"prefill_length": "request", "decode_context": "batch", "prompt_pad": "request"}


def reqs(prompts, gens, bucket="a"):
    return Requests.from_arrays(bucket, np.asarray(prompts), np.asarray(gens))


# --- split_to ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes,count,expected", [
    ([5], 1, [5]), ([5], 3, [2, 1, 2]), ([7, 4], 3, [4, 3, 4]), ([4, 7], 3, [4, 4, 3]), ([2], 2, [1, 1]),
    ([3, 3], 4, [2, 1, 2, 1]), ([6], 2, [3, 3]),
])
def test_split_to_halves_the_largest_chunk_first(sizes, count, expected):
    assert split_to(sizes, count) == expected
    assert all(type(x) is int for x in split_to(sizes, count))


def test_split_to_refuses_a_class_smaller_than_its_leads():
    with pytest.raises(AssertionError, match="^a class holds fewer members than the leads placed in it$"):
        split_to([1, 1], 3)


# --- ordered_plan and spec_first_use ----------------------------------------------------------------------

def test_ordered_plan_puts_lead_batches_first_and_each_lead_on_its_first_line():
    plan = BucketPlan(np.array([0, 1, 1, 2, 0]), np.array([64, 128, 64]))
    out = ordered_plan(reqs([1] * 5, [1] * 5, "b"), plan, [2, 4])
    assert list(out.batch_ids) == ["b-0001", "b-0000", "b-0002"]      # batch 1 holds lead 2, batch 0 lead 4
    assert out.order.tolist() == [2, 1, 4, 0, 3]
    assert (out.batch_of == plan.batch_of).all() and (out.seq_align == plan.seq_align).all()


def test_ordered_plan_without_leads_keeps_batch_and_line_order():
    plan = BucketPlan(np.array([1, 0, 1]), np.array([64, 128]))
    out = ordered_plan(reqs([1] * 3, [1] * 3, "b"), plan, [])
    assert list(out.batch_ids) == ["b-0000", "b-0001"] and out.order.tolist() == [1, 0, 2]


def test_ordered_plan_ids_grow_past_four_digits():
    n = 10_001
    plan = BucketPlan(np.arange(n), np.full(n, 64))
    out = ordered_plan(reqs([1] * n, [1] * n, "b"), plan, [n - 1])
    assert out.batch_ids[n - 1] == "b-00000" and out.batch_ids[0] == "b-00001" and out.batch_ids[n - 2] == "b-10000"


def test_spec_first_use_by_batch_id_then_plan_line():
    plan = BucketPlan(np.array([0, 1, 1, 2, 0]), np.array([128, 64, 128]),
                      np.array(["a-0002", "a-0000", "a-0001"], dtype=object), np.array([3, 1, 2, 4, 0]))
    # shape 64: batch 1 (a-0000), first line request 1; shape 128: batch 2 (a-0001, before a-0002), request 3
    assert spec_first_use(reqs([1] * 5, [1] * 5), plan).tolist() == [1, 3]
    plain = BucketPlan(np.array([0, 1, 1, 2, 0]), np.array([128, 64, 128]))
    assert spec_first_use(reqs([1] * 5, [1] * 5), plain).tolist() == [0, 1]        # ids and lines by index
    assert spec_first_use(reqs([9], [9]), BucketPlan(np.array([0]), np.array([64]))).tolist() == [0]
    empty = spec_first_use(reqs([], []), BucketPlan(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    assert empty.dtype == np.int64 and empty.shape == (0,)


# --- first_use_members: an independent recomputation over random latencies ---------------------------------

def expected_first_use(lat, batch_of, seq_align, fu, limits):
    slowest = {b: max(lat[r] for r in range(len(lat)) if batch_of[r] == b) for b in set(batch_of.tolist())}
    out = []
    for s in sorted(set(seq_align[batch_of].tolist())):
        def key(r):
            crossed = sum(1 for k in ("p95_latency_ms", "p99_latency_ms", "max_latency_ms")
                          if k in limits and lat[r] <= limits[k] < lat[r] + fu)
            return crossed, max(lat[r] + fu - slowest[batch_of[r]], 0.0), r
        out.append(min((r for r in range(len(lat)) if seq_align[batch_of[r]] == s), key=key))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_first_use_member_crosses_fewest_limits_then_raises_least(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n = 14
    keys = ["p95_latency_ms", "p99_latency_ms", "max_latency_ms"]
    limits = {k: int(rng.integers(5, 12)) for k in keys if rng.random() < 0.7 or seed < 3}
    path = make_config(tmp_path, {"a": rows_from([10] * n, [1] * n)}, {"a": limits},
                       cost_model={**CONTEXT, "first_use_ms": int(rng.integers(1, 5))})
    cfg = load(path)
    lat = rng.integers(0, 15, n).astype(np.float64)
    batch_of = rng.integers(0, 5, n)
    batch_of[:5] = np.arange(5)
    plan = BucketPlan(batch_of, np.array([64, 128, 64, 128, 192]))
    got = first_use_members(cfg, reqs([10] * n, [1] * n), plan, lat)
    assert got.tolist() == expected_first_use(lat, batch_of, plan.seq_align, cfg.cost_model.first_use_ms, limits)


# --- member_latencies --------------------------------------------------------------------------------------

LAT_PROMPTS, LAT_GENS = [10, 70, 130, 200, 5], [3, 9, 4, 2, 6]
LAT_PLAN = BucketPlan(np.array([0, 0, 1, 1, 0]), np.array([192, 256]))
LAT_COST = {"prefill_ms": [1.0, 0.5, 0.01], "decode_step_ms": [2.0, 0.25, 0.002], "batch_overhead_ms": 7.0,
            "first_use_ms": 1000}
SEMANTICS = list(itertools.product(["shape", "request"], ["shape", "batch"]))


def latency_config(tmp_path, prefill: str, context: str):
    folder = tmp_path / f"{prefill}-{context}"
    folder.mkdir()
    cm = {"prefill_length": prefill, "decode_context": context, **LAT_COST}
    return load(make_config(folder, {"a": rows_from(LAT_PROMPTS, LAT_GENS)}, {"a": {}}, cost_model=cm))


def spec_member_latencies(cfg) -> list[float]:
    """Each member's latency from spec 4b written out (tests.helpers.spec_batch), batch by batch, no warm-up."""
    out = [0.0] * len(LAT_PROMPTS)
    for b, s in enumerate(LAT_PLAN.seq_align):
        mine = [r for r in range(len(LAT_PROMPTS)) if LAT_PLAN.batch_of[r] == b]
        _, lats, _ = spec_batch(cfg, int(s), [(LAT_PROMPTS[r], LAT_GENS[r]) for r in mine])
        for r, lat in zip(mine, lats):
            out[r] = lat
    return out


@pytest.mark.parametrize("prefill,context", SEMANTICS)
def test_member_latencies_follow_the_semantics(tmp_path, prefill, context):
    """Prefill at seq_align or at the member's own aligned prompt; decode from seq_align or from the batch's longest
    aligned prompt, for G_b steps; no warm-up. The instance tells the four semantics apart."""
    cfg = latency_config(tmp_path, prefill, context)
    got = member_latencies(cfg, reqs(LAT_PROMPTS, LAT_GENS), LAT_PLAN)
    assert got == pytest.approx(spec_member_latencies(cfg), rel=1e-12)
    for other in SEMANTICS:
        if other != (prefill, context):
            assert got != pytest.approx(spec_member_latencies(latency_config(tmp_path, *other)), rel=1e-6)


# --- place_leads -------------------------------------------------------------------------------------------

def test_place_leads_in_shape_mode_gives_each_shape_its_shortest_prompt_member_first(tmp_path):
    """A lead per shape (its class a batch of that shape): per spec 4b's first use, each shape's first line is
    that batch's member with the shortest prompt; batches and shapes stay as they were."""
    prompts, gens = [10, 50, 100, 70, 150, 120, 90], [1] * 7
    cfg = load(make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": {}}))
    space = as_space(cfg, np.array([64, 128, 192]))
    batch_of, seq = np.array([0, 0, 1, 1, 2, 2, 3]), np.array([64, 128, 192, 128])
    plan = place_leads(cfg, reqs(prompts, gens), space, BucketPlan(batch_of, seq), np.array([0, 1, 2, 1]),
                       np.ones((3, 1), dtype=np.int64), None, 1)
    assert plan.batch_of.tolist() == batch_of.tolist() and plan.seq_align.tolist() == seq.tolist()
    assert spec_first_use(reqs(prompts, gens), plan).tolist() == [0, 3, 5]


def test_place_leads_in_context_mode_takes_a_member_of_the_leads_own_level_and_a_batch_per_shape(tmp_path):
    """Context mode: levels 64 and 128, shapes 64, 128, 192; class (level 1, cap 0) has batches 0 and 2, and two
    of its leads go to two of its batches (128 and 192). Lead (own level 0, class level 1) lands in batch 0, which
    holds no level-0 member: request 2 is swapped in from batch 2 of the same class and carries 128's first use."""
    prompts, gens = [10, 100, 20, 110, 30, 120], [1] * 6
    cfg = load(make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": {}}, cost_model=CONTEXT))
    req = reqs(prompts, gens)
    space = model_space(cfg, np.array([64, 128, 192]), {"a": req}, 64)
    assert space.context_mode and space.levels.tolist() == [64, 128] and space.cover.tolist() == [0, 1]
    batch_of, seq = np.array([1, 0, 2, 0, 1, 2]), np.array([128, 64, 128])
    lead = np.zeros((2, 2, 1), dtype=np.int64)
    lead[0, 0, 0] = lead[0, 1, 0] = lead[1, 1, 0] = 1             # (own level, class level, cap)
    plan = place_leads(cfg, req, space, BucketPlan(batch_of, seq), np.array([1, 0, 1]), lead,
                       np.array([1, 1, 1]), 1)
    assert plan.seq_align.tolist() == [128, 64, 192]
    assert sorted(plan.batch_of[[1, 2, 3, 5]].tolist()) == [0, 0, 2, 2] and plan.batch_of[[0, 4]].tolist() == [1, 1]
    assert plan.batch_of[2] == 0                                    # swapped into the lead batch
    first = set(spec_first_use(req, plan).tolist())                # one member per shape, sorted
    third = (first - {0, 2}).pop()
    assert {0, 2} < first and len(first) == 3 and plan.batch_of[third] == 2 and prompts[third] > 64


# --- member_of_level ----------------------------------------------------------------------------------------

def test_member_of_level_takes_one_already_there():
    batch_of = np.array([0, 0, 1, 1])
    assert member_of_level(batch_of, np.array([5, 5]), np.array([0, 1, 0, 1]), 0, 1, set()) == 1
    assert batch_of.tolist() == [0, 0, 1, 1]


def test_member_of_level_swaps_one_in_from_a_batch_of_the_same_class():
    # batch 0 (class 5) has no member of own level 1; batch 1 is another class; batch 2 (class 5) has one
    batch_of = np.array([0, 0, 1, 2, 2])
    own = np.array([0, 0, 1, 0, 1])
    got = member_of_level(batch_of, np.array([5, 7, 5]), own, 0, 1, {0})
    assert got == 4                                      # from batch 2, not from batch 1 (another class)
    assert batch_of.tolist() == [0, 2, 1, 2, 0]          # request 1 (not the fixed lead 0) went the other way


def test_member_of_level_skips_fixed_members():
    batch_of = np.array([0, 0, 1, 1, 1])
    own = np.array([1, 0, 0, 1, 1])
    assert member_of_level(batch_of, np.array([3, 3]), own, 0, 1, {0}) == 3
    assert batch_of.tolist() == [0, 1, 1, 0, 1]
    batch_of = np.array([0, 0, 1, 1, 1])
    assert member_of_level(batch_of, np.array([3, 3]), own, 0, 1, {0, 3}) == 4


# --- plan_to_classes: every count recomputed batch by batch from the definitions ---------------------------

def recount(cfg, req, space, caps, plan):
    P, L = len(space.levels), len(caps)
    own = space.level_of(req)
    gj = np.searchsorted(caps, req.gen)
    out = {k: np.zeros(s, dtype=np.int64) for k, s in
           (("v", (P, L)), ("m", (P, L)), ("k", (P, L)), ("w", (P, L, L)), ("wo", (P, P, L)), ("lead", (P, L)),
            ("lead_origin", (P, P, L)))}
    use = np.zeros(len(space.shapes), dtype=bool)
    cls = {}
    for b in range(plan.num_batches):
        members = [r for r in range(len(req)) if plan.batch_of[r] == b]
        if not members:
            continue
        if space.context_mode:
            i = int(np.searchsorted(space.levels, max(int(-(-req.prompt[r] // 64) * 64) for r in members)))
            use[list(space.shapes).index(plan.seq_align[b])] = True
        else:
            # its own shape (the largest candidate at or below its seq_align), never below what holds its members
            i = max(max(x for x, s in enumerate(space.shapes) if s <= plan.seq_align[b]),
                    min(x for x, s in enumerate(space.shapes) if s >= max(req.fit[r] for r in members)))
            use[i] = True
        j = min(x for x, c in enumerate(caps) if c >= max(req.gen[r] for r in members))
        cls[b] = (i, j)
        out["m"][i, j] += len(members)
        out["k"][i, j] += 1
        for r in members:
            out["v"][i, gj[r]] += 1
            out["w"][i, gj[r], j] += 1
            out["wo"][own[r], i, j] += 1
    out["k"] = np.maximum(out["k"], -(-out["m"] // cfg.batching.max_batch_size))
    ids = plan.batch_ids
    for s in sorted(set(plan.seq_align[plan.batch_of].tolist())):
        b = min((b for b in cls if plan.seq_align[b] == s), key=lambda b: ids[b])
        r = next(r for r in plan.order if plan.batch_of[r] == b)
        out["lead"][cls[b]] += 1
        out["lead_origin"][(own[r], *cls[b])] += 1
    return use, out


@pytest.mark.parametrize("context", [False, True])
def test_plan_to_classes_counts_each_batch_in_its_class(tmp_path, context):
    rng = np.random.default_rng(7)
    n = 24
    prompts, gens = rng.integers(1, 300, n), rng.integers(1, 40, n)
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, {"a": {}},
                       cost_model=CONTEXT if context else {}, batching={"max_batch_size": 4})
    cfg = load(path)
    req = reqs(prompts, gens)
    shapes = np.array([64, 128, 192, 256, 320])
    space = model_space(cfg, shapes, {"a": req}, 64) if context else as_space(cfg, shapes)
    groups = group_bucket(req, space.levels, 6, level=space.level_of(req))
    batch_of = rng.integers(0, 7, n)
    batch_of[:6] = np.arange(6)                                   # batch 6 may be empty
    top = np.zeros(7, dtype=np.int64)
    np.maximum.at(top, batch_of, np.searchsorted(shapes, req.prompt))
    seq = shapes[np.minimum(top + rng.integers(0, 2, 7), len(shapes) - 1)]   # some batches on a larger shape
    ids = np.array([f"a-{x:04d}" for x in rng.permutation(7)], dtype=object)
    plan = BucketPlan(batch_of, seq, ids, rng.permutation(n))
    got = plan_to_classes(cfg, req, space, groups, plan)
    use, want = recount(cfg, req, space, groups.caps, plan)
    assert got.use.dtype == bool and got.use.tolist() == use.tolist()
    for name, arr in want.items():
        assert getattr(got, name).tolist() == arr.tolist(), name


@pytest.mark.parametrize("limits", [{}, {"max_latency_ms": 85000}])
def test_place_first_use_hurts_least_under_the_task_semantics(tmp_path, limits):
    """Context mode (prefill per request, decode from the batch's longest prompt): in a batch mixing a
    1000-token prompt and short ones, a short member's warm-up stays under the batch's slowest latency, so
    place_first_use must put it there. Judged against every placement, by tests.brute: the least sequential
    time among the placements crossing no limit."""
    from tests.brute import BucketAssignment, plan_metrics, plan_value
    from tests.test_models_alone import config
    from tests.test_semantics_models import TASK, as_assignments, placements
    from solver.postprocess import place_first_use

    cfg, reqs = config(tmp_path, {"a": ([1000, 40, 60, 50, 30], [20, 20, 5, 5, 5])}, {"a": limits}, k=1, batch=3,
                       cost_model=TASK)
    req = reqs["a"]
    a = BucketAssignment([0, 0, 1, 1, 0], [1024, 1024])
    options = [(plan_metrics(cfg, reqs, {"a": p})["a"]["sequential_time_ms"], plan_value(cfg, reqs, {"a": p})[0])
               for p in placements(req, a)]
    best = min(t for t, ok in options if ok)
    assert max(t for t, _ in options) > best                        # where the warm-up lands matters
    placed = place_first_use(cfg, req, BucketPlan(np.asarray(a.batch_of), np.asarray(a.seq_align)))
    got = as_assignments({"a": placed})["a"]
    assert plan_value(cfg, reqs, {"a": got})[0]
    assert plan_metrics(cfg, reqs, {"a": got})["a"]["sequential_time_ms"] == pytest.approx(best, rel=1e-12)
