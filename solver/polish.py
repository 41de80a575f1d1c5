"""Polish: re-solve the assignment on the best plan's shapes in the pair form, as a MIP.

The pair form's LP is nearly integral once the shapes are fixed (models/pair_model.py); HiGHS
solves its MIP over the pairs the column generation wrote, starting from the best plan's own
pairs. The resulting plan is judged by the exact cost model like every other candidate: it is
kept only when it ranks better. In spec 4b context mode the classes are decode contexts (see
models/pair_model.py) and each shape's first use is then placed by the plan writer.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from models.config import Config
from models.instance import Instance, batch_caps, group_bucket, model_space
from models.pair_model import BucketPairs, PairModel, solve_mip
from models.plan import BucketPlan
from solver.batching import chunk_run

log = logging.getLogger(__name__)
CLASS_CAPS = 48          # ladder gen caps per bucket, on top of the plan's own batch caps
PRICING_SHARE = 0.4      # of the polish time at most, for the column generation (the rest, and what it leaves: the MIP)


def polish(inst: Instance, shapes: list[int], plans: dict[str, BucketPlan], reference: float,
           time_limit_s: float) -> dict[str, BucketPlan] | None:
    """A plan set on `shapes` from the pair MIP, or None when it found none in time."""
    start = time.monotonic()
    cfg, S = inst.cfg, np.asarray(sorted(shapes), dtype=np.int64)
    space = model_space(cfg, S, inst.requests, cfg.solver.max_candidates)
    classes = {}
    for name, req in inst.requests.items():
        keep = batch_caps(req, plans[name])
        classes[name] = group_bucket(req, space.levels, CLASS_CAPS + len(keep), keep, keep_all=True,
                                     level=space.level_of(req))
    model = PairModel(cfg, inst.costs, space, inst.requests, cfg.objective.weight_map(), classes, reference)
    for name, b in model.buckets.items():
        b.add_plan(plans[name])
        b.add_neighbours()
    priced = model.price_in(PRICING_SHARE * time_limit_s)
    left = time_limit_s - (time.monotonic() - start)
    log.info("polish: LP %.6g over %d pairs (%s, %d rounds, %.1fs)", priced.lp_value, priced.columns,
             "converged" if priced.converged else "stopped", priced.rounds, priced.time_s)
    if left < 1.0:
        return None
    x, value, layout = solve_mip(model, left, plans)
    if x is None:
        return None
    log.info("polish: MIP objective %.6g in %.1fs", value, time.monotonic() - start)
    chosen = x[:len(S)] > 0.5
    return {name: pairs_to_plan(cfg, b, x[layout[name][0]:layout[name][0] + len(b.pg)], chosen)
            for name, b in model.buckets.items()}


def pairs_to_plan(cfg: Config, b: BucketPairs, x: np.ndarray, chosen: np.ndarray | None = None) -> BucketPlan:
    """Concrete batches from integral pair counts: each class chunked from its longest gen down, its batches at
    the smallest chosen shape (default: every shape) at or above the one its level needs."""
    req = b.req
    chosen = np.arange(len(b.shapes)) if chosen is None else np.flatnonzero(chosen)    # indices of the chosen shapes
    group = b.request_groups()
    counts = np.rint(x).astype(np.int64)
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(len(b.n) + 1))
    by_group = np.argsort(b.pg, kind="stable")
    col_starts = np.searchsorted(b.pg[by_group], np.arange(len(b.n) + 1))
    class_of = np.full(len(req), -1, dtype=np.int64)
    for g in range(len(b.n)):
        cols = by_group[col_starts[g]:col_starts[g + 1]]
        members = order[starts[g]:starts[g + 1]]
        take = np.repeat(b.pc[cols], counts[cols])
        if len(take) != len(members):
            raise AssertionError(f"pair MIP placed {len(take)} of the {len(members)} requests of group {g}")
        class_of[members] = take
    key = np.lexsort((-req.gen, class_of))
    cuts = np.flatnonzero(np.r_[True, class_of[key][1:] != class_of[key][:-1], True])
    sizes, seq = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        s = int(b.shapes[chosen[np.searchsorted(chosen, b.link[class_of[key[lo]]])]])
        chunk = chunk_run(cfg, s, req.gen[key[lo:hi]])
        sizes += chunk
        seq += [s] * len(chunk)
    return BucketPlan.from_chunks(len(req), key, np.array(sizes), np.array(seq))
