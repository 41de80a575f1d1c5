"""Bounds that hold before any search (used by analyze.py, the infeasibility explanation and tests)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.config import Config
from models.cost import percentile_nearest_rank
from models.dp import shape_dp
from models.instance import Instance, aligned
from models.requests import Requests


@dataclass
class BucketBounds:
    """Least values any valid plan of this bucket can reach (each alone)."""

    pad_tokens: int
    pad_ratio: float
    pad_shapes: list[int]
    num_batches: int
    cost: float
    p95_latency_ms: float
    p99_latency_ms: float
    max_latency_ms: float
    sequential_time_ms: float


def levels_of(inst: Instance, req: Requests) -> np.ndarray:
    shapes = np.asarray(inst.all_shapes)
    return np.searchsorted(shapes, req.fit)


def least_padding(inst: Instance, req: Requests, k: int) -> tuple[int, list[int]]:
    """Exact least pad tokens with k shapes: prompt padding by DP (or, when padding counts to each request's
    own aligned prompt, that fixed amount), gen padding 0 (one gen per batch)."""
    shapes = np.asarray(inst.all_shapes)
    lvl = levels_of(inst, req)
    if inst.cfg.cost_model.prompt_pad == "request":
        own = aligned(req.prompt, inst.cfg.shapes.granularity)
        return int((own - req.prompt).sum()), sorted(int(x) for x in np.unique(shapes[lvl]))[-k:]
    counts = np.bincount(lvl, minlength=len(shapes)).astype(np.float64)
    # only levels this bucket occupies matter, plus nothing above its longest prompt
    top = int(lvl.max())
    keep = np.arange(len(shapes)) <= top
    a = -np.bincount(lvl, weights=req.prompt.astype(np.float64), minlength=len(shapes))
    chosen, value = shape_dp(shapes[keep], a[keep], counts[keep], np.zeros(keep.sum()), np.zeros(keep.sum()), k)
    return int(round(value)), chosen


def least_batches(cfg: Config, inst: Instance, req: Requests) -> int:
    n = len(req)
    b = -(-n // cfg.batching.max_batch_size)
    if cfg.batching.max_batch_tokens:
        tokens = int((np.asarray(inst.all_shapes)[levels_of(inst, req)] + req.gen).sum())
        b = max(b, -(-tokens // cfg.batching.max_batch_tokens))
    return int(b)


def bucket_bounds(inst: Instance, name: str) -> BucketBounds:
    cfg, costs, req = inst.cfg, inst.costs, inst.requests[name]
    cm = cfg.cost_model
    own = np.asarray(inst.all_shapes)[levels_of(inst, req)]
    a = aligned(req.prompt, cfg.shapes.granularity)
    length = a if cm.prefill_length == "request" else own          # never above what any plan charges
    context = a if cm.decode_context == "batch" else own
    pad, pad_shapes = least_padding(inst, req, cfg.shapes.max_unique)
    lat = costs.member_latency(length, context, req.gen)
    leaders = np.sort(req.gen)[::-1][:: cfg.batching.max_batch_size]
    nb = least_batches(cfg, inst, req)
    seq = float(costs.member_latency(length.min(), context.min(), leaders).sum())
    cost = float(costs.member_cost(length, context, req.gen).sum()) + nb * cm.batch_overhead_cost
    if cm.compile_in_bucket_cost:      # at least the shape that holds the longest prompt
        cost += float(costs.compile(own.max()))
    return BucketBounds(pad, pad / req.real_tokens, pad_shapes, nb, cost, percentile_nearest_rank(lat, 95),
                        percentile_nearest_rank(lat, 99), float(lat.max()), seq)


def total_cost_bound(inst: Instance) -> float:
    return objective_bound(inst, {"cost": 1.0})


def objective_bound(inst: Instance, weights: dict[str, float] | None = None) -> float:
    """Lower bound on the objective of any valid plan (limits ignored, every candidate shape allowed):
    each request at its own gen and the next chosen shape, sequential time amortized over full
    batches, chosen by the exact shape DP, plus the least batch overhead."""
    from solver.heuristics import weighted_shape_dp

    w = weights if weights is not None else inst.cfg.objective.weight_map()
    _, value = weighted_shape_dp(inst, w, lower=True)
    overhead = sum(least_batches(inst.cfg, inst, r) for r in inst.requests.values())
    return value + w.get("cost", 0.0) * overhead * inst.cfg.cost_model.batch_overhead_cost


def all_bounds(inst: Instance) -> dict[str, BucketBounds]:
    return {name: bucket_bounds(inst, name) for name in inst.requests}

