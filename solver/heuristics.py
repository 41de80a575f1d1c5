"""Heuristic methods: engine bucket rules (baselines), greedy and dp.

Every method returns one BucketPlan per bucket; shapes are shared by all buckets.
"""
from __future__ import annotations

import logging

import numpy as np

from models.dp import best_count, shape_dp_counts
from models.instance import Instance, aligned as align, quad_sum_coeffs
from models.plan import BucketPlan
from solver.batching import capacity, plan_from_shape_choice, round_up
from solver.postprocess import plan_figures
from solver.verify import limit_excess, plan_objective, rank

log = logging.getLogger(__name__)


# --- engine rules ---------------------------------------------------------------------------

def trim_top(shapes: list[int], top: int, k: int) -> list[int]:
    """Drop the largest shapes below `top` until k fit; `top` covers the longest prompt."""
    below = sorted(s for s in set(shapes) if s < top)
    return below[: k - 1] + [top]


def fit_candidates(inst: Instance, shapes) -> list[int]:
    """Map rule shapes onto allowed seq_align values: with `candidates: auto` every positive multiple of the
    granularity is allowed, so the rule's own values stay (aligned); explicit candidates: the next one up."""
    if not isinstance(inst.cfg.shapes.candidates, list):
        return sorted(set(int(s) for s in align(np.asarray(shapes), inst.cfg.shapes.granularity)))
    allowed = np.asarray(inst.all_shapes)
    out = allowed[np.minimum(np.searchsorted(allowed, np.asarray(shapes)), len(allowed) - 1)]
    return sorted(set(int(s) for s in out))


def pow2_shapes(inst: Instance) -> list[int]:
    """Powers of two (aligned to granularity), the Neuron default."""
    top_prompt = inst.max_prompt
    gran = inst.cfg.shapes.granularity
    shapes, p = [], 1
    while True:
        s = int(align(p, gran))
        shapes.append(s)
        if s >= top_prompt:
            break
        p *= 2
    return fit_candidates(inst, trim_top(shapes, shapes[-1], inst.cfg.shapes.max_unique))


def step_shapes(inst: Instance, step: int = 128) -> list[int]:
    """Fixed steps (multiples of 128, as Gaudi TGI pads), widened until max_unique fit."""
    gran = inst.cfg.shapes.granularity
    step = int(align(step, gran))
    k = inst.cfg.shapes.max_unique
    widen = int(align(128, gran))
    need = -(-inst.max_prompt // k)                      # the least step with ceil(max_prompt / step) <= k
    step += max(0, -(-(need - step) // widen)) * widen   # widened by 128s at once, not one at a time
    count = -(-inst.max_prompt // step)
    if count <= 4096:
        shapes = [step * i for i in range(1, count + 1)]
    else:                       # only the multiples a prompt rounds up to, and the one below each: same plan
        prompts = np.concatenate([r.fit for r in inst.requests.values()])
        up = np.unique(-(-prompts // step) * step)
        shapes = sorted(int(s) for s in np.union1d(up, up - step) if s >= step)
    return fit_candidates(inst, shapes)


def exp_shapes(inst: Instance) -> list[int]:
    """Exponential spacing from the shortest to the longest prompt (vLLM Gaudi default)."""
    k = inst.cfg.shapes.max_unique
    lo, hi = inst.min_prompt_aligned, inst.max_prompt
    raw = np.geomspace(lo, hi, num=k) if k > 1 else np.array([hi])
    return fit_candidates(inst, align(np.ceil(raw), inst.cfg.shapes.granularity))


def rule_plan(inst: Instance, shapes: list[int], order: str = "arrival") -> dict[str, BucketPlan]:
    return {b: plan_from_shape_choice(inst.cfg, r.gen, round_up(r.fit, shapes), order)
            for b, r in inst.requests.items()}


def baseline(inst: Instance):
    return rule_plan(inst, pow2_shapes(inst))


def baseline_step128(inst: Instance):
    return rule_plan(inst, step_shapes(inst))


def baseline_exp(inst: Instance):
    return rule_plan(inst, exp_shapes(inst))


# --- greedy ---------------------------------------------------------------------------------

def quantile_shapes(inst: Instance) -> list[int]:
    """Shapes at evenly spaced quantiles of all prompts, the top covering the longest."""
    prompts = np.concatenate([r.fit for r in inst.requests.values()])
    k = inst.cfg.shapes.max_unique
    qs = np.quantile(prompts, np.arange(1, k + 1) / k)
    return fit_candidates(inst, np.append(qs, inst.max_prompt))[-k:]


def greedy(inst: Instance):
    """Quantile shapes, then per shape gen-sorted full batches (few batches, tight caps)."""
    return rule_plan(inst, quantile_shapes(inst), order="gen")


# --- dp -------------------------------------------------------------------------------------

def weighted_shape_dp(inst: Instance, weights: dict[str, float], lower: bool = False):
    """Shapes minimizing the weighted objective when each request rounds up and pays its own gen."""
    per_count = weighted_shape_dp_counts(inst, weights, lower)
    return per_count[best_count(per_count)]


def weighted_shape_dp_counts(inst: Instance, weights: dict[str, float],
                             lower: bool = False) -> dict[int, tuple[list[int], float]]:
    """weighted_shape_dp's best set of exactly n shapes, for each n up to max_unique. Each request is
    charged as if alone at the next shape up, its own gen, batch latency amortized over full batches.
    Under spec 4b, prefill and prompt padding per request do not depend on the shape; decode from the
    batch is charged from the shape (an estimate for plans) or, with `lower`, from the request's own
    aligned prompt (never above what any plan pays: a valid lower bound)."""
    cfg, costs = inst.cfg, inst.costs
    levels = np.asarray(inst.all_shapes)
    a = np.zeros(len(levels)); b = np.zeros(len(levels)); c = np.zeros(len(levels))
    w_cost, w_pad, w_seq = (weights.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
    cm = cfg.cost_model
    per_b = cfg.batching.max_batch_size
    for req in inst.requests.values():
        lvl = np.searchsorted(levels, req.fit)
        own = align(req.prompt, cfg.shapes.granularity).astype(np.float64)
        ra, rb, rc = (w_cost * x for x in shape_poly(cm.prefill_cost, cm.prefill_length == "request", own))
        pa, pb, pc = shape_poly(cm.prefill_ms, cm.prefill_length == "request", own)
        own_context = lower and cm.decode_context == "batch"
        da, db, dc = decode_poly(cm.decode_step_cost, req.gen, own if own_context else None)
        la, lb, lc = decode_poly(cm.decode_step_ms, req.gen, own if own_context else None)
        ra = ra + w_cost * da + w_seq * (pa + la + cm.batch_overhead_ms) / per_b
        rb = rb + w_cost * db + w_seq * (pb + lb) / per_b
        rc = rc + w_cost * dc + w_seq * (pc + lc) / per_b
        if cm.prompt_pad == "request":
            ra = ra + w_pad * (own - req.prompt)
        else:
            ra, rb = ra - w_pad * req.prompt, rb + w_pad
        a += np.bincount(lvl, ra, minlength=len(levels))
        b += np.bincount(lvl, rb, minlength=len(levels))
        c += np.bincount(lvl, rc, minlength=len(levels))
    fixed = w_cost * costs.compile(levels)
    return shape_dp_counts(levels, a, b, c, fixed, cfg.shapes.max_unique)


def shape_poly(coeffs, per_request: bool, own: np.ndarray):
    """q(coeffs, L) as A + B v + C v^2 in the shape v: L = v, or (per request) L = own aligned prompt."""
    if per_request:
        value = coeffs[0] + coeffs[1] * own + coeffs[2] * own * own
        return value, np.zeros_like(own), np.zeros_like(own)
    return np.full_like(own, coeffs[0]), np.full_like(own, coeffs[1]), np.full_like(own, coeffs[2])


def decode_poly(coeffs, gen: np.ndarray, own: np.ndarray | None):
    """Q(coeffs, C, gen) as A + B v + C v^2 in the shape v: C = v, or C = own aligned prompt when given."""
    A, B, C = quad_sum_coeffs(coeffs, gen)
    if own is None:
        return A, B, C
    return A + B * own + C * own * own, np.zeros_like(own), np.zeros_like(own)


def gen_runs(gens: np.ndarray, counts: np.ndarray, per_req: np.ndarray, per_batch: np.ndarray, cap: np.ndarray):
    """Split units sorted by gen (ascending) into contiguous batches minimizing
    sum(n_batch * per_req[last] + per_batch[last]), each batch holding at most cap[last] requests.

    Returns the list of (start, end) unit ranges."""
    u = len(gens)
    pref = np.concatenate([[0], np.cumsum(counts)])
    lows = np.searchsorted(pref, pref[1:] - cap, side="left")
    if u and int((np.arange(1, u + 1) - lows).max()) <= SMALL_WINDOW:
        return gen_runs_small(pref, lows, per_req, per_batch)
    dp = np.full(u + 1, np.inf)
    dp[0] = 0.0
    back = np.zeros(u + 1, dtype=np.int64)
    for e in range(1, u + 1):
        lo = min(int(lows[e - 1]), e - 1)
        cand = dp[lo:e] + (pref[e] - pref[lo:e]) * per_req[e - 1]
        i = int(np.argmin(cand))
        dp[e] = cand[i] + per_batch[e - 1]
        back[e] = lo + i
    runs, e = [], u
    while e > 0:
        runs.append((int(back[e]), e))
        e = int(back[e])
    return runs[::-1]


SMALL_WINDOW = 96        # batches spanning at most this many units: gen_runs_small's plain loop is faster


def gen_runs_small(pref: np.ndarray, lows: np.ndarray, per_req, per_batch) -> list[tuple[int, int]]:
    """gen_runs in plain Python over short windows: the same arithmetic and the same (first) argmin."""
    u = len(lows)
    pref_l, lows_l = pref.tolist(), lows.tolist()
    per_req_l = np.broadcast_to(np.asarray(per_req, dtype=np.float64), (u,)).tolist()
    per_batch_l = np.broadcast_to(np.asarray(per_batch, dtype=np.float64), (u,)).tolist()
    dp, back = [0.0] * (u + 1), [0] * (u + 1)
    for e in range(1, u + 1):
        lo = min(lows_l[e - 1], e - 1)
        top, p = pref_l[e], per_req_l[e - 1]
        best, arg = dp[lo] + (top - pref_l[lo]) * p, lo
        for i in range(lo + 1, e):
            v = dp[i] + (top - pref_l[i]) * p
            if v < best:
                best, arg = v, i
        dp[e] = best + per_batch_l[e - 1]
        back[e] = arg
    runs, e = [], u
    while e > 0:
        runs.append((back[e], e))
        e = back[e]
    return runs[::-1]


class LagrangeBatcher:
    """Per bucket, per shape: gen-sorted DP batches for a weighted objective plus limit multipliers."""

    SPLIT_MAX = 4000      # above this many requests at one shape, identical gens are batched by value first

    def __init__(self, inst: Instance, bucket: str, shape_of: np.ndarray, weights: dict[str, float]):
        self.inst, self.cfg, self.costs = inst, inst.cfg, inst.costs
        self.req = inst.requests[bucket]
        self.limits = dict(inst.cfg_bucket(bucket).limits.items())
        self.shape_of = shape_of
        self.weights = weights
        self.groups = [(int(s), np.flatnonzero(shape_of == s)) for s in np.unique(shape_of)]

    def plan(self, lam: dict[str, float]) -> BucketPlan:
        orders, sizes, shapes = [], [], []
        for s, idx in self.groups:
            idx = idx[np.argsort(self.req.gen[idx], kind="stable")]
            order, chunk = self._shape_batches(s, idx, lam)
            orders.append(order)
            sizes += chunk
            shapes += [s] * len(chunk)
        return BucketPlan.from_chunks(len(self.req), np.concatenate(orders), np.array(sizes), np.array(shapes))

    def _weights(self, s: int, g: np.ndarray, lam: dict[str, float]):
        w, lim, costs = self.weights, self.limits, self.costs
        w_cost = w.get("cost", 0.0) + lam.get("cost", 0.0)
        w_pad = w.get("pad_tokens", 0.0) + lam.get("pad", 0.0)
        w_seq = w.get("sequential_time_ms", 0.0) + lam.get("sequential_time_ms", 0.0)
        cm = self.cfg.cost_model
        lat = costs.member_latency(s, s, g)       # the slowest member: prefill and decode at most from s
        prefill = 0.0 if cm.prefill_length == "request" else costs.member_cost(s, 0, 0)
        per_req = w_cost * (costs.member_cost(0, s, g) - cm.prefill_cost[0] + prefill) + \
            w_pad * ((0 if cm.prompt_pad == "request" else s) + g)
        for key in ("p95_latency_ms", "p99_latency_ms"):
            if key in lim:
                per_req = per_req + lam.get(key, 0.0) * (lat > lim[key])
        per_batch = w_cost * self.cfg.cost_model.batch_overhead_cost + w_seq * lat
        if "max_latency_ms" in lim:
            per_batch = np.where(lat > lim["max_latency_ms"], 1e30, per_batch)
        return per_req, per_batch

    def _shape_batches(self, s: int, idx: np.ndarray, lam):
        gens = self.req.gen[idx]
        if len(idx) <= self.SPLIT_MAX:
            units, counts, pre_order, pre_sizes = gens, np.ones(len(gens), dtype=np.int64), [], []
            unit_start = np.arange(len(gens) + 1)
            rest = idx
        else:
            rest, pre_order, pre_sizes = self._full_chunks(s, idx, gens)
            gens = self.req.gen[rest]
            units, counts = np.unique(gens, return_counts=True)
            unit_start = np.concatenate([[0], np.cumsum(counts)])
        per_req, per_batch = self._weights(s, units, lam)
        runs = gen_runs(units, counts, per_req, per_batch, capacity(self.cfg, s, units))
        sizes = pre_sizes + [int(unit_start[e] - unit_start[b]) for b, e in runs]
        return np.concatenate(pre_order + [rest]), sizes

    def _full_chunks(self, s, idx, gens):
        vals, starts, counts = np.unique(gens, return_index=True, return_counts=True)
        cap = capacity(self.cfg, s, vals)
        full = counts // np.maximum(cap, 1)
        take = np.zeros(len(idx), dtype=bool)
        order, sizes = [], []
        for v, st, f, c in zip(vals, starts, full, cap):
            if f:
                take[st: st + f * c] = True
                order.append(idx[st: st + f * c])
                sizes += [int(c)] * int(f)
        return idx[~take], order, sizes


def lagrange_search(batcher: LagrangeBatcher, objective, rounds: int = 24) -> BucketPlan:
    """Raise the multipliers of broken limits until a plan meets them; keep the best plan met."""
    limits = batcher.limits
    lam: dict[str, float] = {}
    best, best_key = None, None
    lam_ok, lam_bad = None, None
    for r in range(rounds):
        plan = batcher.plan(lam)
        m = plan_figures(batcher.cfg, batcher.req, plan)
        broken = limit_excess(m, limits)
        key = (sum(broken.values()), objective(m))
        if best_key is None or (key[0] == 0 and (best_key[0] > 0 or key[1] < best_key[1])) or \
                (best_key[0] > 0 and key[0] < best_key[0]):
            best, best_key = plan, key
        if not broken:
            if lam_ok is None or not lam:
                lam_ok = dict(lam)
            if not lam or lam_bad is None:
                break
            lam_ok = dict(lam)
            lam = {k: (lam_ok.get(k, 0) + lam_bad.get(k, 0)) / 2 for k in lam_ok}
            continue
        if lam_ok is not None:
            lam_bad = dict(lam)
            lam = {k: (lam_ok.get(k, 0) + lam_bad.get(k, 0)) / 2 for k in set(lam_ok) | set(lam_bad)}
            continue
        lam_bad = dict(lam)
        scale = max(objective(m), 1.0)
        for k in broken:
            name = "pad" if k in ("pad_ratio", "pad_tokens") else k
            base = {"sequential_time_ms": scale / max(m.sequential_time_ms, 1e-9),
                    "pad": scale / max(m.pad_tokens, 1), "cost": 1.0}.get(name, scale / max(m.num_requests, 1))
            lam[name] = lam[name] * 3 if lam.get(name) else base * 0.05
    return best


def dp(inst: Instance):
    """Exact shape DP for the weighted objective, then per-bucket gen DP with limit multipliers.

    Fewer shapes mean fewer, fuller batches (a latency or sequential-time limit may need that), so
    the DP's best sets of every count down to half are tried too; the best plan set is kept."""
    weights = inst.cfg.objective.weight_map()
    per_count = weighted_shape_dp_counts(inst, weights)
    best_n = best_count(per_count)
    tried = [(dp_plans(inst, per_count[n][0], weights)) for n in counts_to_try(best_n) if n in per_count]
    return min(tried, key=lambda item: item[0])[1]


def counts_to_try(n: int) -> list[int]:
    """The DP's best count and every count down to half of it."""
    return list(range(n, (n - 1) // 2, -1))


def dp_plans(inst: Instance, shapes: list[int], weights: dict[str, float]):
    """(rank key, plans) of the gen DP on a fixed shape set."""
    plans, metrics, limits = {}, {}, {}
    for name, req in inst.requests.items():
        batcher = LagrangeBatcher(inst, name, round_up(req.fit, shapes), weights)
        plans[name] = lagrange_search(batcher, lambda m: bucket_objective(m, weights))
        metrics[name] = plan_figures(inst.cfg, req, plans[name])
        limits[name] = batcher.limits
    _, _, objective = plan_objective(inst.cfg, metrics, weights)
    return rank(metrics, limits, objective), plans


def bucket_objective(m, weights: dict[str, float]) -> float:
    """The weighted objective of one bucket (compile cost excluded: it is global)."""
    return weights.get("cost", 0.0) * m.cost + weights.get("sequential_time_ms", 0.0) * m.sequential_time_ms + \
        weights.get("pad_tokens", 0.0) * m.pad_tokens


HEURISTICS = {
    "baseline": baseline,
    "baseline_step128": baseline_step128,
    "baseline_exp": baseline_exp,
    "greedy": greedy,
    "dp": dp,
}
