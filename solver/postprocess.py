"""Model solution <-> concrete batches."""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from models.config import Config
from models.cost import Costs
from models.instance import BucketGroups, Space, aligned, as_space, batch_classes
from models.plan import BucketPlan, batch_id_strings
from models.requests import Requests
from solver.batching import chunk_run


def levels(req: Requests, space: Space, caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return space.level_of(req), np.searchsorted(caps, req.gen, side="left")


def level_shapes(space: Space, bucket_use: np.ndarray | None) -> np.ndarray:
    """The seq_align of a batch at each level: the level itself (shape mode), or the smallest shape the
    bucket uses at or above the level's cover (context mode)."""
    if not space.context_mode:
        return np.asarray(space.shapes)
    used = np.flatnonzero(bucket_use)
    if len(used) == 0:
        return np.asarray(space.shapes)[space.cover]
    # a level without batches may have no covering shape (the model covers every level it uses); the
    # verifier checks every batch's shape anyway
    pick = used[np.minimum(np.searchsorted(used, space.cover), len(used) - 1)]
    return np.asarray(space.shapes)[pick]


def fill_by_counts(keys: np.ndarray, sort_key: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """For each key value k, hand the members (sorted by sort_key) counts[k, :] targets in order."""
    out = np.empty(len(keys), dtype=np.int64)
    order = np.lexsort((sort_key, keys))
    bounds = np.searchsorted(keys[order], np.arange(counts.shape[0] + 1))
    for k in range(counts.shape[0]):
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            out[order[lo:hi]] = np.repeat(np.arange(counts.shape[1]), counts[k])
    return out


def classes_to_plan(cfg: Config, req: Requests, shapes, groups: BucketGroups,
                    v: np.ndarray | None, m: np.ndarray, bucket_use: np.ndarray | None = None,
                    wo: np.ndarray | None = None, lead: np.ndarray | None = None) -> BucketPlan:
    """Concrete batches from class counts: requests climb levels in prompt order, then gen caps
    in gen order (the flows are monotone, so this is always feasible); with origin counts wo[o, c, j]
    they climb gen caps at their own level first, then go to their class level. Each class is chunked
    from its largest gen down so that chunks get tight caps. With the model's first-use leads (`lead`,
    see place_leads) each shape's first use is placed as the model placed it; without, the plan comes
    unplaced (place_first_use does it)."""
    space = as_space(cfg, shapes)
    seq_of_level = level_shapes(space, bucket_use)
    pi, gj = levels(req, space, groups.caps)
    L = len(groups.caps)
    if wo is None:
        shape_of = fill_by_counts(gj, pi, v.T)            # per gen level, fill levels in prompt order
        class_of = fill_by_counts(shape_of, req.gen, m)   # per level, fill caps in gen order
    else:
        class_of = fill_by_counts(pi, req.gen, wo.sum(axis=1))            # per own level, caps in gen order
        shape_of = fill_by_counts(pi * L + class_of, req.prompt,           # per (own level, cap), class levels
                                  wo.transpose(0, 2, 1).reshape(-1, wo.shape[1]))
    key = shape_of * L + class_of
    need = np.zeros(len(space.levels) * L, dtype=np.int64) if lead is None else \
        (lead.sum(axis=0) if lead.ndim == 3 else lead).reshape(-1)     # leads, hence batches, per class
    order = np.lexsort((-req.gen, key))
    keys_sorted = key[order]
    starts = np.flatnonzero(np.r_[True, keys_sorted[1:] != keys_sorted[:-1]])
    ends = np.r_[starts[1:], len(order)]
    sizes, seq, batch_key = [], [], []
    for lo, hi in zip(starts, ends):
        s = int(seq_of_level[shape_of[order[lo]]])
        chunk = split_to(chunk_run(cfg, s, req.gen[order[lo:hi]]), int(need[keys_sorted[lo]]))
        sizes += chunk
        seq += [s] * len(chunk)
        batch_key += [int(keys_sorted[lo])] * len(chunk)
    plan = BucketPlan.from_chunks(len(req), order, np.array(sizes), np.array(seq))
    if lead is None:
        return plan
    return place_leads(cfg, req, space, plan, np.array(batch_key, dtype=np.int64), lead, bucket_use, L)


def split_to(sizes: list[int], count: int) -> list[int]:
    """Chunk sizes split (largest first, in halves) until there are at least `count` chunks."""
    sizes = list(sizes)
    while len(sizes) < count:
        i = max(range(len(sizes)), key=lambda x: sizes[x])
        if sizes[i] < 2:
            raise AssertionError("a class holds fewer members than the leads placed in it")
        sizes[i:i + 1] = [sizes[i] - sizes[i] // 2, sizes[i] // 2]
    return sizes


def lead_shapes(space: Space, lead: np.ndarray, bucket_use: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The model's leads as (shape index, own level o, class level c, cap j), each used shape matched to a
    lead at a level it covers (ascending shapes, any eligible lead: the eligible sets are nested)."""
    if lead.ndim == 2:                                    # shape mode: the lead's class level is its shape
        return [(int(i), -1, int(i), int(j)) for i, j in zip(*np.nonzero(lead))]
    pool = [(int(o), int(c), int(j)) for o, c, j in zip(*np.nonzero(lead)) for _ in range(int(lead[o, c, j]))]
    out = []
    for t in np.flatnonzero(bucket_use):
        pick = next(x for x in pool if space.cover[x[1]] <= t)
        pool.remove(pick)
        out.append((int(t), *pick))
    return out


def place_leads(cfg: Config, req: Requests, space: Space, plan: BucketPlan, batch_key: np.ndarray,
                lead: np.ndarray, bucket_use: np.ndarray, L: int) -> BucketPlan:
    """Each shape's first use where the model put it: the lead batch (one of its class, a batch of its own)
    takes the shape and the first batch id, and a member of the lead's own level (moved into that batch by a
    swap within the class when needed; the class's figures stay those the model charged) its first line.
    Shape mode: the lead is the batch's member with the shortest prompt."""
    batch_of, seq = plan.batch_of.copy(), plan.seq_align.copy()
    own = space.level_of(req)
    taken, leads = set(), []
    for t, o, c, j in lead_shapes(space, lead, bucket_use):
        b = next(b for b in np.flatnonzero(batch_key == c * L + j) if int(b) not in taken)
        taken.add(int(b))
        seq[b] = space.shapes[t]
        members = np.flatnonzero(batch_of == b)
        if o < 0:
            leads.append(int(members[np.argmin(req.prompt[members])]))
            continue
        leads.append(member_of_level(batch_of, batch_key, own, b, o, set(leads)))
    return ordered_plan(req, BucketPlan(batch_of, seq), leads)


def member_of_level(batch_of: np.ndarray, batch_key: np.ndarray, own: np.ndarray, b: int, o: int,
                    fixed: set[int]) -> int:
    """A member of own level o in batch b; when b has none, one from another batch of b's class is swapped in
    for a member of b that is not a lead (`fixed`). batch_of is updated in place."""
    members = np.flatnonzero(batch_of == b)
    here = [int(r) for r in members if own[r] == o and int(r) not in fixed]
    if here:
        return here[0]
    same = np.flatnonzero(batch_key[batch_of] == batch_key[b])
    donor = next(int(r) for r in same if own[r] == o and batch_of[r] != b and int(r) not in fixed)
    out = next(int(r) for r in members if int(r) not in fixed)
    batch_of[donor], batch_of[out] = b, batch_of[donor]
    return donor


def ordered_plan(req: Requests, plan: BucketPlan, leads: list[int]) -> BucketPlan:
    """Batch ids and line order: the lead members' batches first (in the order given), each lead its batch's
    first line; the other batches after them."""
    leads = np.asarray(leads, dtype=np.int64)
    chosen = plan.batch_of[leads] if len(leads) else np.zeros(0, dtype=np.int64)
    rank = np.full(plan.num_batches, -1, dtype=np.int64)
    rank[chosen] = np.arange(len(chosen))
    rest = np.flatnonzero(rank < 0)
    rank[rest] = len(chosen) + np.arange(len(rest))
    width = max(4, len(str(plan.num_batches - 1)))
    ids = np.array([f"{req.bucket}-{r:0{width}d}" for r in rank], dtype=object)
    first = np.zeros(len(req), dtype=np.int64)
    first[leads] = -1
    order = np.lexsort((np.arange(len(req)), first, rank[plan.batch_of]))
    return BucketPlan(plan.batch_of, plan.seq_align, ids, order)


@dataclass
class ClassCounts:
    """A plan on the model's terms (one bucket): what the hint gives each variable family."""

    use: np.ndarray     # [i] shape i holds a batch
    v: np.ndarray       # [i, j0] requests of gen level j0 whose batch has shape i
    w: np.ndarray       # [i, j0, j] of those, the ones in a batch of gen cap level j
    m: np.ndarray       # [i, j] members of class (i, j)
    k: np.ndarray       # [i, j] batches of class (i, j)
    wo: np.ndarray      # [o, i, j] members of own level o in class (i, j)
    lead: np.ndarray | None = None          # [i, j] shapes whose first use lands in a batch of class (i, j)
    lead_origin: np.ndarray | None = None   # [o, i, j] the same by the lead member's own level o


def plan_to_classes(cfg: Config, req: Requests, shapes, groups: BucketGroups, plan: BucketPlan):
    """A plan as model counts (v, m, k, shapes used): each batch at its class level (shape mode: the
    smallest candidate that holds its members; context mode: its longest aligned prompt), its cap the
    smallest gen cap >= its longest gen."""
    space = as_space(cfg, shapes)
    _, gj = levels(req, space, groups.caps)
    b_shape, b_cap = batch_classes(req, plan, space.shapes, groups.caps, space)
    size = np.bincount(plan.batch_of, minlength=plan.num_batches)
    P, L = len(space.levels), len(groups.caps)
    v = np.zeros((P, L), dtype=np.int64)
    np.add.at(v, (b_shape[plan.batch_of], gj), 1)
    m = np.zeros((P, L), dtype=np.int64)
    k = np.zeros((P, L), dtype=np.int64)
    used = size > 0
    np.add.at(m, (b_shape[used], b_cap[used]), size[used])
    np.add.at(k, (b_shape[used], b_cap[used]), 1)
    cap = np.full((P, L), cfg.batching.max_batch_size, dtype=np.int64)
    if cfg.batching.max_batch_tokens:
        cap = np.maximum(np.minimum(cap, cfg.batching.max_batch_tokens //
                                    (space.levels[:, None] + groups.caps[None, :])), 1)
    k = np.maximum(k, -(-m // cap))
    use = np.zeros(len(space.shapes), dtype=bool)
    if space.context_mode:
        use[np.searchsorted(space.shapes, np.unique(plan.seq_align[used]))] = True
    else:
        use[np.unique(b_shape[used])] = True
    w = np.zeros((P, L, L), dtype=np.int64)
    np.add.at(w, (b_shape[plan.batch_of], gj, b_cap[plan.batch_of]), 1)
    own = space.level_of(req)
    wo = np.zeros((P, P, L), dtype=np.int64)
    np.add.at(wo, (own, b_shape[plan.batch_of], b_cap[plan.batch_of]), 1)
    first = spec_first_use(req, plan)
    lead = np.zeros((P, L), dtype=np.int64)
    np.add.at(lead, (b_shape[plan.batch_of[first]], b_cap[plan.batch_of[first]]), 1)
    lead_origin = np.zeros((P, P, L), dtype=np.int64)
    np.add.at(lead_origin, (own[first], b_shape[plan.batch_of[first]], b_cap[plan.batch_of[first]]), 1)
    return ClassCounts(use, v, w, m, k, wo, lead, lead_origin)


def spec_first_use(req: Requests, plan: BucketPlan) -> np.ndarray:
    """Per shape the plan uses, the member that carries its first use (spec 4b): the first line, in plan order,
    of the batch with the least batch id among those of that shape."""
    if len(req) == 0:
        return np.zeros(0, dtype=np.int64)
    ids = plan.batch_ids if plan.batch_ids is not None else batch_id_strings(req.bucket, plan.num_batches)
    order = plan.order if plan.order is not None else np.arange(len(req))
    used, at = np.unique(plan.batch_of[order], return_index=True)
    first_line = np.full(plan.num_batches, -1, dtype=np.int64)
    first_line[used] = order[at]
    out = {}
    for b in sorted(used.tolist(), key=lambda x: str(ids[x])):
        out.setdefault(int(plan.seq_align[b]), int(first_line[b]))
    return np.array(sorted(out.values()), dtype=np.int64)


# --- the plan writer's choice of where each shape's first-use latency lands (spec 4b) ----------

def member_latencies(cfg: Config, req: Requests, plan: BucketPlan) -> np.ndarray:
    """Each member's latency under spec 4b, first-use latency left out."""
    cm = cfg.cost_model
    a = aligned(req.prompt, cfg.shapes.granularity)
    s = plan.seq_align[plan.batch_of]
    length = s if cm.prefill_length == "shape" else a
    context = (plan.seq_align if cm.decode_context == "shape" else plan.batch_max(a))[plan.batch_of]
    return Costs(cm).member_latency(length, context, plan.batch_max(req.gen)[plan.batch_of])


def bucket_limits(cfg: Config, bucket: str) -> dict:
    return next((dict(b.limits.items()) for b in cfg.buckets if b.name == bucket), {})


def first_use_members(cfg: Config, req: Requests, plan: BucketPlan, lat: np.ndarray) -> np.ndarray:
    """Per shape, the member whose latency plus the warm-up crosses the fewest latency limits, then raises its
    batch's slowest latency (the sequential time) least."""
    fu = cfg.cost_model.first_use_ms
    slowest = np.full(plan.num_batches, -np.inf)
    np.maximum.at(slowest, plan.batch_of, lat)
    limits = bucket_limits(cfg, req.bucket)
    crossed = np.zeros(len(req))
    for key in ("p95_latency_ms", "p99_latency_ms", "max_latency_ms"):
        if key in limits:
            crossed += (lat <= limits[key]) & (lat + fu > limits[key])
    raised = np.maximum(lat + fu - slowest[plan.batch_of], 0.0)
    shape = plan.seq_align[plan.batch_of]
    best = np.lexsort((raised, crossed, shape))                                   # per shape, best first
    return best[np.r_[True, shape[best][1:] != shape[best][:-1]]]                # one member per shape


def place_first_use(cfg: Config, req: Requests, plan: BucketPlan) -> BucketPlan:
    """Batch ids and line order that put each shape's first-use latency where it hurts least (see
    first_use_members): the chosen batch of each shape gets the first id, the chosen member the first
    line. Without first-use latency the plan is returned as it is."""
    if not cfg.cost_model.first_use_ms or len(req) == 0:
        return plan
    first = first_use_members(cfg, req, plan, member_latencies(cfg, req, plan))
    return ordered_plan(req, plan, list(first))


@dataclass
class Figures:
    """A plan's metrics on the optimizer's side (closed forms, models/cost.py), for ranking plans inside the
    heuristics and the search; every plan that leaves the optimizer is measured by the verifier instead."""

    cost: float
    batch_cost: float
    pad_tokens: int
    pad_ratio: float
    p95_latency_ms: float
    p99_latency_ms: float
    max_latency_ms: float
    sequential_time_ms: float
    num_requests: int
    shapes: list


def plan_figures(cfg: Config, req: Requests, plan: BucketPlan) -> Figures:
    """Spec 4 / 4b metrics of one bucket's plan, the first-use latency placed as the plan writer places it."""
    cm, costs = cfg.cost_model, Costs(cfg.cost_model)
    a = aligned(req.prompt, cfg.shapes.granularity)
    s = plan.seq_align[plan.batch_of]
    length = s if cm.prefill_length == "shape" else a
    context = (plan.seq_align if cm.decode_context == "shape" else plan.batch_max(a))[plan.batch_of]
    gmax = plan.batch_max(req.gen)
    lat = costs.member_latency(length, context, gmax[plan.batch_of])
    if cm.first_use_ms and len(req):
        lat[first_use_members(cfg, req, plan, lat)] += cm.first_use_ms
    used = np.bincount(plan.batch_of, minlength=plan.num_batches) > 0
    slowest = np.full(plan.num_batches, -np.inf)
    np.maximum.at(slowest, plan.batch_of, lat)
    shapes = sorted(int(x) for x in np.unique(plan.seq_align[used]))
    batch_cost = float(costs.member_cost(length, context, gmax[plan.batch_of]).sum()
                       + used.sum() * cm.batch_overhead_cost)
    own = float(costs.compile(np.array(shapes, dtype=np.float64)).sum()) if cm.compile_in_bucket_cost else 0.0
    pad = int(((s if cm.prompt_pad == "shape" else a) - req.prompt).sum() + (gmax[plan.batch_of] - req.gen).sum())
    ordered = np.sort(lat)
    rank = lambda pct: float(ordered[max(-(-pct * len(lat) // 100) - 1, 0)]) if len(lat) else 0.0
    return Figures(batch_cost + own, batch_cost, pad, pad / max(req.real_tokens, 1), rank(95), rank(99),
                   float(lat.max()) if len(lat) else 0.0, float(slowest[used].sum()), len(req), shapes)
