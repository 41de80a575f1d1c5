"""Model solution <-> concrete batches."""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from models.config import Config
from models.instance import BucketGroups, batch_classes
from models.plan import BucketPlan
from models.requests import Requests
from solver.batching import chunk_run


def levels(req: Requests, shapes: np.ndarray, caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.searchsorted(shapes, req.prompt, side="left"), np.searchsorted(caps, req.gen, side="left")


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


def classes_to_plan(cfg: Config, req: Requests, shapes: np.ndarray, groups: BucketGroups,
                    v: np.ndarray, m: np.ndarray) -> BucketPlan:
    """Concrete batches from class counts: requests climb shapes in prompt order, then gen caps
    in gen order (the flows are monotone, so this is always feasible); each class is chunked
    from its largest gen down so that chunks get tight caps."""
    pi, gj = levels(req, shapes, groups.caps)
    shape_of = fill_by_counts(gj, pi, v.T)            # per gen level, fill shapes in prompt order
    class_of = fill_by_counts(shape_of, req.gen, m)   # per shape, fill caps in gen order
    key = shape_of * len(groups.caps) + class_of
    order = np.lexsort((-req.gen, key))
    keys_sorted = key[order]
    starts = np.flatnonzero(np.r_[True, keys_sorted[1:] != keys_sorted[:-1]])
    ends = np.r_[starts[1:], len(order)]
    sizes, seq = [], []
    for lo, hi in zip(starts, ends):
        s = int(shapes[shape_of[order[lo]]])
        chunk = chunk_run(cfg, s, req.gen[order[lo:hi]])
        sizes += chunk
        seq += [s] * len(chunk)
    return BucketPlan.from_chunks(len(req), order, np.array(sizes), np.array(seq))


@dataclass
class ClassCounts:
    """A plan on the model's terms (one bucket): what the hint gives each variable family."""

    use: np.ndarray     # [i] shape i holds a batch
    v: np.ndarray       # [i, j0] requests of gen level j0 whose batch has shape i
    w: np.ndarray       # [i, j0, j] of those, the ones in a batch of gen cap level j
    m: np.ndarray       # [i, j] members of class (i, j)
    k: np.ndarray       # [i, j] batches of class (i, j)


def plan_to_classes(cfg: Config, req: Requests, shapes: np.ndarray, groups: BucketGroups, plan: BucketPlan):
    """A plan as model counts (v, m, k, shapes used): each batch at the smallest candidate that
    holds its members, its cap the smallest gen cap >= its longest gen."""
    _, gj = levels(req, shapes, groups.caps)
    b_shape, b_cap = batch_classes(req, plan, shapes, groups.caps)
    size = np.bincount(plan.batch_of, minlength=plan.num_batches)
    P, L = len(shapes), len(groups.caps)
    v = np.zeros((P, L), dtype=np.int64)
    np.add.at(v, (b_shape[plan.batch_of], gj), 1)
    m = np.zeros((P, L), dtype=np.int64)
    k = np.zeros((P, L), dtype=np.int64)
    used = size > 0
    np.add.at(m, (b_shape[used], b_cap[used]), size[used])
    np.add.at(k, (b_shape[used], b_cap[used]), 1)
    cap = np.full((P, L), cfg.batching.max_batch_size, dtype=np.int64)
    if cfg.batching.max_batch_tokens:
        cap = np.maximum(np.minimum(cap, cfg.batching.max_batch_tokens // (shapes[:, None] + groups.caps[None, :])), 1)
    k = np.maximum(k, -(-m // cap))
    use = np.zeros(P, dtype=bool)
    use[np.unique(b_shape[used])] = True
    w = np.zeros((P, L, L), dtype=np.int64)
    np.add.at(w, (b_shape[plan.batch_of], gj, b_cap[plan.batch_of]), 1)
    return ClassCounts(use, v, w, m, k)
