"""A bound that sees whole batches at their exact shape and longest gen, from the pair LP's duals.

Every valid plan is a set of batches (columns c: a shape i, a longest gen G, members) covering each request once,
with a shape compiled (z[i] = 1) for every batch, sum z <= max_unique, and each limit a sum over batches. Take any
duals of the pair LP's rows (solver/global_bound.py): pi[g] of the demand rows (free), y[k] <= 0 of the limit rows,
and w[g, i] <= 0 for the rows "batches of shape i hold at most n_g members of group g when z[i] = 1, none
otherwise" (the LP's cut rows sum_c x[g, c at level i] <= n_g z[i], plus what its pair rows pass on to z: link_duals). With rc(c) = cost(c) - sum_{members} (pi + w[., i]) - sum_k y_k
a_k(c) and rc_z[i] = compile(i) + sum_g n_g w[g, i], every plan's objective is at least

    sum_g n_g pi[g] + sum_k y_k rhs_k + (sum of the max_unique most negative rc_z) + sum_c rc(c),

and since group g has n_g members, each in exactly one batch, sum_c rc(c) = sum_g sum_{c holding g} a_gc rc(c)/|c|
>= sum_g n_g min over batches c holding a member of g of rc(c)/|c| (over every possible batch, not only the LP's).
That minimum is exact and cheap: at (i, G) every member of an eligible group (level <= i, own gen <= G) adds the
same amount but for its own -pi - w, so with the members sorted by what they add, a batch of k holding g is best
made of g and the k - 1 cheapest others, and rc/k is unimodal in k. Batches are charged exactly (no gen ladder),
which the pair LP's rounded-down caps are not, so at the same duals this bound can be above the LP's value.

Measured (default config, 2 cores): at the duals of the converged 12-cap pair LP (8.606e11) it is 9.385e11 (8.930e11
with the cut duals alone as w), evaluated in about 1.6 s; at the 48-cap LP's after its cuts (9.703e11), 9.901e11. On dp's five shapes and 1856 (a fixed set, for scale) the whole batch-column LP is about
1.0414e12 against that set's 48-cap pair LP of 9.956e11: whole batches at exact gens are what the pair LP misses.
The bound is concave in the limit duals y and rhs - (each limit's use by the batches the minimum picks, counted per
member) is a supergradient there: `ascend` takes a few projected steps on y from the LP's (9.395e11 -> 9.448e11 in
six steps on the default config at 12 caps). Shape mode of spec section 4 only (member numbers depend on the shape and G alone); None elsewhere.
"""
from __future__ import annotations

import logging
import time

import numpy as np

log = logging.getLogger(__name__)
WORK_LIMIT = 3e8          # most (level, gen, eligible group) triples evaluated (default config: 6e6, azure 6.7e7)
ASCENT_STEPS = 4          # supergradient steps on the limit duals after the LP's (see ascend)


def batch_bound(model, duals: np.ndarray, limit_s: float = 30.0) -> float | None:
    """The bound above at `duals` (the pair LP's row duals in cost units), or None where it does not apply or
    would take too long (work above WORK_LIMIT, or `limit_s` passed: a part of the minimum is no bound)."""
    if not applies(model):
        return None
    found = _evaluate(model, multipliers(model, duals), time.monotonic(), limit_s)
    return None if found is None else found[0]


def applies(model) -> bool:
    if not _shape_mode(model):
        return False
    work = sum(_work(b) for b in model.buckets)
    if work > WORK_LIMIT:
        log.info("bound: the batch bound would take too long here (%.3g triples)", work)
        return False
    return True


def _shape_mode(model) -> bool:
    """Spec section 4's semantics in shape mode: member numbers depend on the shape and G alone."""
    return not model.space.context_mode and model.inst.cfg.cost_model.section4


def multipliers(model, duals: np.ndarray) -> list[tuple]:
    """Per bucket (pi, link duals w, limit duals y <= 0) read from the LP's row duals."""
    return [(duals[b.demand], link_duals(b, duals), {key: min(float(duals[row]), 0.0) for key, row in b.limit_rows.items()})
            for b in model.buckets]


def ascend(model, starts: list[np.ndarray], target: float, limit_s: float, steps: int = ASCENT_STEPS) -> float | None:
    """The bound at the best of the duals `starts`, raised by projected supergradient steps on the limit duals y
    alone (the bound is concave in them; pi and w stay the LP's): each step y <- min(y + t g, 0), t = lam (target -
    bound) / |g|^2 over the coordinates that move, lam halved after a step that loses. The best value met (every one
    is a bound), or None where the bound does not apply or the time ran out before a first value."""
    if not applies(model):
        return None
    begin = time.monotonic()
    tried = [(found, mult) for mult in (multipliers(model, d) for d in starts)
             if (found := _evaluate(model, mult, begin, limit_s)) is not None]
    if not tried:
        return None
    (best, grads), mult = max(tried, key=lambda t: t[0][0])
    first, lam = best, 1.0
    for _ in range(steps):
        moving = [{key: g for key, g in grad.items() if g < 0 or y[key] < 0} for (_, _, y), grad in zip(mult, grads)]
        norm = sum(g * g for grad in moving for g in grad.values())
        if norm == 0 or target <= best:
            break
        t = lam * (target - best) / norm
        trial = [(pi, w, {key: min(y[key] + t * grad.get(key, 0.0), 0.0) for key in y})
                 for (pi, w, y), grad in zip(mult, moving)]
        found = _evaluate(model, trial, begin, limit_s)
        if found is None:
            break
        if found[0] > best:
            (best, grads), mult = found, trial
        else:
            lam /= 2
    log.info("bound: whole batches at the LP's duals %.6g, the limit duals ascended %.6g", first, best)
    return best


def _evaluate(model, mult: list[tuple], start: float, limit_s: float) -> tuple[float, list[dict]] | None:
    """(the bound at these multipliers, per bucket its supergradient in each limit dual: rhs - the limit's use
    by the batches the minimum picks, each counted per member), or None when out of time."""
    wc = model.weights.get("cost", 0.0)
    z_rc = wc * model.inst.costs.compile(model.shapes.astype(np.float64))
    total, grads = model.constant, []
    for b, (pi, link, y) in zip(model.buckets, mult):
        total += float((b.n * pi).sum()) + sum(y[key] * b.limits[key][2] for key in y)
        z_rc = z_rc + (b.n[:, None] * link).sum(axis=0)
        found = _best_ratios(b, pi, y, link, start, limit_s)
        if found is None:
            return None
        best, i, j, size = found
        total += float((b.n * best).sum())
        grads.append({key: b.limits[key][2] - float((b.n * per_member(b, key, i, j, size)).sum()) for key in y})
    return total + float(np.sort(np.minimum(z_rc, 0.0))[:model.inst.cfg.shapes.max_unique].sum()), grads


def per_member(b, key: str, i: np.ndarray, j: np.ndarray, size: np.ndarray) -> np.ndarray:
    """What limit `key` counts per member of a batch at (level i, fine gen j) of `size` members."""
    per_member_use, per_batch_use = _limit_use(b, key)
    return per_member_use[i, j] + per_batch_use[i, j] / size


def lift_seconds(model, evaluations: int = 2) -> float:
    """About how long `evaluations` of the bound take (global_bound: two starts, then ASCENT_STEPS steps; measured:
    1.6 s each on the default config, whose 32 levels x 276 and x 159 gens make 14,000 (level, gen) steps and 6e6
    triples), 0 where the bound does not apply."""
    if not _shape_mode(model):
        return 0.0
    return evaluations * sum(9e-5 * b.member_per.size + 5.5e-8 * _work(b) for b in model.buckets)


def row_duals(duals: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Duals of `rows` (-1: no row; rows added after the last solve: 0)."""
    ok = (rows >= 0) & (rows < len(duals))
    return np.where(ok, duals[np.clip(rows, 0, len(duals) - 1)], 0.0)


def link_duals(b, duals: np.ndarray) -> np.ndarray:
    """w[g, level] <= 0: the cut row's dual plus the share of the pair rows x[g, c] <= n_g y[c] that the LP passes on
    to the compile cost through y[c] <= z (the rest goes to the batch through y[c] <= k, which the batch pays itself),
    summed over the level's classes, so that sum_g n_g w[g, i] is what the LP charges z[i] through its classes. Any
    values <= 0 keep the bound valid; these make it track the LP (the least share instead of the sum: 9.376e11
    against 9.385e11 on the default config at 12 caps; the cut duals alone: 8.930e11)."""
    w = row_duals(duals, b.cut_of)
    gs, cs = np.nonzero(b.link_of >= 0)
    alpha = np.minimum(row_duals(duals, b.link_of[gs, cs]), 0.0)
    to_k, to_z = (np.minimum(row_duals(duals, rows[cs]), 0.0) for rows in (b.y_k, b.y_z))
    both = to_k + to_z
    share = np.where(both < 0, alpha * to_z / np.where(both < 0, both, -1.0), 0.0)
    pair = np.zeros_like(w)
    np.add.at(pair, (gs, b.ci[cs]), share)
    return np.minimum(w + pair, 0.0)


def _work(b) -> float:
    return float(len(b.fine)) * sum(int((b.gi <= i).sum()) for i in range(b.member_per.shape[0]))


def _batch_terms(b, y: dict) -> tuple[np.ndarray, np.ndarray]:
    """(what each member adds, what the batch adds) at every (level, fine gen), duals of the limits included."""
    wc, wp, ws = b.member_weights
    member = wc * b.member_per + wp * b.member_tok
    batch = wc * b.overhead + ws * b.member_lat
    for key in b.limits:
        per_member_use, per_batch_use = _limit_use(b, key)
        member, batch = member - y[key] * per_member_use, batch - y[key] * per_batch_use
    return member, batch


def _limit_use(b, key: str) -> tuple[np.ndarray, np.ndarray]:
    """What limit `key` counts per member and per batch at every (level, fine gen)."""
    term, zero = b.limits[key][0], np.zeros(b.member_per.shape)
    if term == "latency":                          # sequential time: once per batch
        return zero, b.member_lat
    if term == "tokens":
        return b.member_tok, zero
    if term == "cost":
        return b.member_per, np.full(b.member_per.shape, float(b.overhead))
    if term is not None:                           # ("slow", threshold): members over a latency
        return (b.member_lat > term[1]).astype(np.float64), zero
    return zero, zero


def _best_ratios(b, pi, y, link, start: float, limit_s: float) -> tuple | None:
    """Per group, the least rc(c)/|c| over every batch c holding one of its members, and that batch's (level,
    fine gen, size)."""
    member, batch = _batch_terms(b, y)
    best = np.full(len(b.n), np.inf)
    at_i, at_j, size = (np.zeros(len(b.n), dtype=np.int64) for _ in range(3))
    for i in range(member.shape[0]):
        groups = np.flatnonzero(b.gi <= i)
        if len(groups) == 0:
            continue
        own = -pi[groups] - link[groups, i]
        order = np.argsort(own, kind="stable")
        groups, own = groups[order], own[order]
        for j, G in enumerate(b.fine):
            cap = int(b.member_cap[i, j])
            keep = b.gg[groups] <= G
            if cap <= 0 or not keep.any():
                continue
            ratio, k = _ratios(own[keep] + member[i, j], b.n[groups[keep]], batch[i, j], cap)
            at = groups[keep]
            better = ratio < best[at]
            at = at[better]
            best[at], at_i[at], at_j[at], size[at] = ratio[better], i, j, k[better]
        if time.monotonic() - start > limit_s:
            log.info("bound: the batch bound ran out of its %.0fs", limit_s)
            return None
    return best, at_i, at_j, np.maximum(size, 1)


def _ratios(v: np.ndarray, n: np.ndarray, F: float, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """For groups sorted by v (what each member adds), n members each, a batch cost F plus the members' v and at
    most cap members: per group, the least (F + sum of its members' v) / size over batches holding one of its
    members, and that batch's size. Such a batch of size k is g and the k - 1 cheapest others: the k cheapest when g's first member is
    among them (its place p <= k), else those k - 1 and g; the mean is unimodal in k."""
    before = np.cumsum(n) - n                         # members ahead of each group's first (its place - 1)
    counts = np.minimum(n, np.maximum(cap - before, 0))
    cheapest = np.repeat(v, counts)                  # the cap cheapest members, in order
    K = len(cheapest)
    P = np.cumsum(cheapest)
    k = np.arange(1, K + 1)
    back = ((F + P) / k)[::-1]                        # the mean of the k cheapest, k = K - t at t
    low = np.minimum.accumulate(back)                 # its least over k >= K - t ...
    low_at = np.maximum.accumulate(np.where(back == low, np.arange(K), 0))   # ... and the t where it is met
    at = K - 1 - np.minimum(before, K - 1)
    inside = np.where(before < K, low[at], np.inf)   # the k cheapest, k at least g's place
    A = F + P - cheapest                              # the k - 1 cheapest and F
    turn = k * cheapest - A                           # (A_k + v)/k <= (A_k+1 + v)/(k+1) iff v <= turn[k]: best k
    size = np.minimum(np.minimum(np.searchsorted(turn, v, side="left") + 1, K), before)
    outside = np.where(size >= 1, (A[np.maximum(size, 1) - 1] + v) / np.maximum(size, 1), np.inf)
    return np.minimum(inside, outside), np.where(inside <= outside, K - low_at[at], size)
