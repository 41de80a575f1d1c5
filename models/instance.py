"""Preprocessed instance data: requests aggregated into (prompt level, gen level) groups.

The CP-SAT model reads only this. Its size follows the number of candidate shapes times the
number of gen caps, never the number of requests.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import math

import numpy as np

from models.config import Config
from models.cost import Costs, allowed_over
from models.dp import shape_dp
from models.errors import InputError
from models.plan import BucketPlan
from models.requests import Requests


def quad_sum_coeffs(c, g):
    """Q(c, s, g) = A + B*s + C*s^2: the coefficient arrays (A, B, C) for gen lengths g."""
    g = np.asarray(g, dtype=np.float64)
    t1 = g * (g - 1) / 2.0
    t2 = (g - 1) * g * (2 * g - 1) / 6.0
    return c[0] * g + c[1] * t1 + c[2] * t2, c[1] * g + 2 * c[2] * t1, c[2] * g


def aligned(values, granularity: int) -> np.ndarray:
    """Round up to a positive multiple of granularity."""
    values = np.asarray(values, dtype=np.int64)
    return np.maximum(-(-values // granularity), 1) * granularity


@dataclass
class BucketGroups:
    """One bucket aggregated for the model."""

    name: str = field(metadata={"description": "bucket name"})
    caps: np.ndarray = field(metadata={"description": "gen caps (ascending), the last = longest gen"})
    counts: np.ndarray = field(metadata={"description": "counts[i, j]: requests at shape level i, gen level j"})
    real_tokens: int = field(metadata={"description": "sum of prompt_len + gen_len"})
    exact_gens: bool = field(metadata={"description": "caps are every distinct gen length"})

    @property
    def size(self) -> int:
        return int(self.counts.sum())


class Instance:
    """Config + requests + derived data shared by heuristics and the model."""

    def __init__(self, cfg: Config, requests: dict[str, Requests]):
        self.cfg = cfg
        self.requests = requests
        self.costs = Costs(cfg.cost_model)
        gran = cfg.shapes.granularity
        prompts = np.concatenate([r.fit for r in requests.values()])      # the least seq_align each fits
        self.max_prompt = int(prompts.max())
        self.min_prompt_aligned = int(aligned(prompts.min(), gran))
        if isinstance(cfg.shapes.candidates, list):
            shapes = sorted(set(cfg.shapes.candidates))
            if shapes[-1] < self.max_prompt:
                raise InputError(f"shapes.candidates: the largest, {shapes[-1]}, is below the longest prompt "
                                 f"{self.max_prompt}")
            # a candidate below the shortest prompt's level can never be the shape of a batch
            first = int(np.searchsorted(shapes, prompts.min()))
            self.all_shapes = shapes[first:]
        else:
            self.all_shapes = sorted(int(x) for x in np.unique(aligned(prompts, gran)))

    def cfg_bucket(self, name: str):
        return next(b for b in self.cfg.buckets if b.name == name)


def gen_ladder(gen: np.ndarray, max_caps: int, keep=(), keep_all: bool = False) -> tuple[np.ndarray, bool]:
    """Gen caps: every distinct gen when few, else the `keep` caps (e.g. a hint plan's batch caps, so
    that plan is represented exactly; all of them with keep_all, else only when they are at most
    half the caps) and the caps minimizing total gen padding (exact DP)."""
    vals, counts = np.unique(gen, return_counts=True)
    if len(vals) <= max_caps:
        return vals.astype(np.int64), True
    keep = set(int(x) for x in keep) if keep_all or len(set(keep)) <= max_caps // 2 else set()
    sums = np.bincount(np.searchsorted(vals, gen), weights=gen.astype(np.float64), minlength=len(vals))
    caps, _ = shape_dp(vals, -sums, counts.astype(np.float64), np.zeros(len(vals)), np.zeros(len(vals)),
                       max(max_caps - len(keep), 1))
    return np.array(sorted(set(int(c) for c in caps) | keep), dtype=np.int64), False


def prune_shapes(shapes: list[int], prompts: np.ndarray, keep: set[int], limit: int) -> list[int]:
    """At most `limit` candidates: the top one, the `keep` ones, then evenly spaced prompt quantiles."""
    if len(shapes) <= limit:
        return list(shapes)
    arr = np.asarray(shapes)
    chosen = {shapes[-1]} | {s for s in keep if s in set(shapes)}
    for q in np.linspace(0, 1, 4 * limit):
        if len(chosen) >= limit:
            break
        value = np.quantile(prompts, q)
        chosen.add(int(arr[min(np.searchsorted(arr, value), len(arr) - 1)]))
    for s in shapes:                      # fill evenly if quantiles repeat
        if len(chosen) >= limit:
            break
        chosen.add(s)
    return sorted(chosen)[:limit] if shapes[-1] in sorted(chosen)[:limit] else sorted(chosen)[-limit:]


@dataclass
class Space:
    """Where the model's classes live. Shape mode (spec 4 and most of 4b): a class level is a candidate shape.
    Context mode (decode from the batch, prefill and prompt padding per request): a class level is a
    decode context, the batch's longest aligned prompt, and the shape only has to cover it."""

    levels: np.ndarray = field(metadata={"description": "class level values (shapes, or decode contexts)"})
    shapes: np.ndarray = field(metadata={"description": "candidate shapes (sorted)"})
    cover: np.ndarray = field(metadata={"description": "per level, index of the smallest shape covering it"})
    context_mode: bool = field(metadata={"description": "levels are decode contexts, not shapes"})
    granularity: int = field(default=1, metadata={"description": "shapes.granularity, for a(p)"})

    def level_of(self, req: Requests) -> np.ndarray:
        """Each request's own class level: its shape (smallest covering its fit), or its aligned prompt."""
        if self.context_mode:
            return np.searchsorted(self.levels, aligned(req.prompt, self.granularity), side="left")
        return np.searchsorted(self.levels, req.fit, side="left")


def as_space(cfg: Config, shapes) -> Space:
    """`shapes` as a Space: as it is when it is one, else shape mode (each candidate shape its own level)."""
    if isinstance(shapes, Space):
        return shapes
    shapes = np.asarray(shapes)
    return Space(shapes, shapes, np.arange(len(shapes)), False, cfg.shapes.granularity)


def model_space(cfg: Config, shapes: np.ndarray, requests: dict[str, Requests], max_levels: int) -> Space:
    """Shape mode unless the semantics make a batch's numbers independent of its shape (and no token limit
    ties capacity to the shape): then class levels are the occurring aligned prompts (at most max_levels)."""
    shapes = np.asarray(shapes, dtype=np.int64)
    cm, gran = cfg.cost_model, cfg.shapes.granularity
    context = (cm.decode_context, cm.prefill_length, cm.prompt_pad) == ("batch", "request", "request") and \
        not cfg.batching.max_batch_tokens
    if not context:
        return as_space(cfg, shapes)
    a = np.concatenate([aligned(r.prompt, gran) for r in requests.values()])
    fit = np.concatenate([r.fit for r in requests.values()])
    levels = np.asarray(prune_shapes(sorted(int(x) for x in np.unique(a)), a, set(), max_levels), dtype=np.int64)
    at = np.searchsorted(levels, a)
    most = np.zeros(len(levels), dtype=np.int64)
    np.maximum.at(most, at, fit)                    # the longest fit of the requests at each level
    cover = np.searchsorted(shapes, np.maximum.accumulate(np.maximum(most, levels)), side="left")
    return Space(levels, shapes, np.minimum(cover, len(shapes) - 1), True, gran)


def group_bucket(req: Requests, shapes: np.ndarray, max_caps: int, keep_caps=(), keep_all: bool = False,
                 level: np.ndarray | None = None) -> BucketGroups:
    """Counts per (level, gen cap level); `level` gives each request's level (default: smallest of `shapes`
    at or above its fit)."""
    caps, exact = gen_ladder(req.gen, max_caps, keep_caps, keep_all)
    i = np.searchsorted(shapes, req.fit, side="left") if level is None else level
    j = np.searchsorted(caps, req.gen, side="left")
    counts = np.zeros((len(shapes), len(caps)), dtype=np.int64)
    np.add.at(counts, (i, j), 1)
    return BucketGroups(req.bucket, caps, counts, req.real_tokens, exact)


def limit_rhs(limits: dict, g: BucketGroups, pad_const: float | None = None) -> dict[str, float]:
    """Right-hand side of each limit as a sum over members or batches. Pad: the budget less the part of the
    pad tokens that no decision changes (`pad_const`; by default -real tokens, as under spec section 4,
    where the model counts seq_align + cap per member)."""
    pad_const = -g.real_tokens if pad_const is None else pad_const
    rhs = {}
    if "sequential_time_ms" in limits:
        rhs["sequential_time_ms"] = float(limits["sequential_time_ms"])
    budgets = [limits[k] for k in ("pad_tokens",) if k in limits]
    if "pad_ratio" in limits:
        budgets.append(limits["pad_ratio"] * g.real_tokens)
    if budgets:
        rhs["pad"] = math.floor(min(budgets) + 1e-9) - pad_const
    for key, pct in (("p95_latency_ms", 95), ("p99_latency_ms", 99)):
        if key in limits:
            rhs[key] = float(allowed_over(g.size, pct))
    if "cost" in limits:
        rhs["cost"] = float(limits["cost"])
    return rhs


def batch_classes(req: Requests, plan: BucketPlan, shapes: np.ndarray, caps: np.ndarray, space: Space | None = None):
    """Each batch's class on the model's terms: (level, gen cap level). In shape mode the level is its shape
    (the largest candidate at or below its seq_align, and never below the smallest holding its members); in
    context mode the level of its longest aligned prompt. The cap level is the one of its longest gen."""
    if space is not None and space.context_mode:
        return plan.batch_max(space.level_of(req)), np.searchsorted(caps, plan.batch_max(req.gen))
    top = plan.batch_max(np.searchsorted(shapes, req.fit, side="left"))
    lowered = np.searchsorted(shapes, plan.seq_align, side="right") - 1
    return np.maximum(lowered, top), np.searchsorted(caps, plan.batch_max(req.gen))


def batch_caps(req: Requests, plan: BucketPlan) -> set[int]:
    """The longest gen of every batch of a plan."""
    gmax = plan.batch_max(req.gen)
    return set(np.unique(gmax[gmax > 0]).tolist())
