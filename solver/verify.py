"""The plan verifier: validity and every metric, recomputed from plan and requests alone."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from models.config import Config
from models.cost import Costs, percentile_nearest_rank
from models.plan import BucketPlan, read_plan_file
from models.requests import Requests

LIMIT_METRIC = {
    "p95_latency_ms": "p95_latency_ms", "p99_latency_ms": "p99_latency_ms", "max_latency_ms": "max_latency_ms",
    "pad_ratio": "pad_ratio", "pad_tokens": "pad_tokens", "cost": "cost",
    "sequential_time_ms": "sequential_time_ms",
}


@dataclass
class BucketMetrics:
    """Spec section 4 metrics of one bucket's plan, in floating point."""

    cost: float
    pad_tokens: int
    real_tokens: int
    pad_ratio: float
    p95_latency_ms: float
    p99_latency_ms: float
    max_latency_ms: float
    sequential_time_ms: float
    num_batches: int
    num_requests: int
    shapes: list[int]
    limits: dict[str, bool] = field(default_factory=dict)

    def broken(self) -> list[str]:
        return [k for k, ok in self.limits.items() if not ok]


def bucket_metrics(req: Requests, plan: BucketPlan, costs: Costs, limits=None) -> BucketMetrics:
    """Recompute every metric of a (structurally valid) bucket plan."""
    nb = plan.num_batches
    size = np.bincount(plan.batch_of, minlength=nb)
    gmax = np.zeros(nb, dtype=np.int64)
    np.maximum.at(gmax, plan.batch_of, req.gen)
    used = size > 0
    s, g, n = plan.seq_align[used], gmax[used], size[used]
    batch_lat = costs.latency(s, g)
    lat_of_batch = np.zeros(nb)
    lat_of_batch[used] = batch_lat
    req_lat = lat_of_batch[plan.batch_of]
    pad = int((plan.seq_align[plan.batch_of] - req.prompt).sum() + (gmax[plan.batch_of] - req.gen).sum())
    real = req.real_tokens
    m = BucketMetrics(
        cost=float(costs.batch_cost(s, g, n).sum()), pad_tokens=pad, real_tokens=real, pad_ratio=pad / real,
        p95_latency_ms=percentile_nearest_rank(req_lat, 95), p99_latency_ms=percentile_nearest_rank(req_lat, 99),
        max_latency_ms=float(req_lat.max()) if len(req_lat) else 0.0,
        sequential_time_ms=float(batch_lat.sum()), num_batches=int(used.sum()), num_requests=len(req),
        shapes=sorted(int(x) for x in np.unique(s)))
    if limits is not None:
        m.limits = {k: getattr(m, LIMIT_METRIC[k]) <= v * (1 + 1e-12) for k, v in limits.items()}
    return m


def structure_errors(cfg: Config, req: Requests, plan: BucketPlan, label: str) -> list[str]:
    """Validity problems of one bucket plan (shape covers prompts, granularity, batch limits)."""
    errors = []
    ids = plan.batch_ids if plan.batch_ids is not None else None
    name = (lambda b: ids[b]) if ids is not None else (lambda b: f"#{b}")
    gran = cfg.shapes.granularity
    bad = np.flatnonzero((plan.seq_align < 1) | (plan.seq_align % gran != 0))
    errors += [f"{label}: batch {name(b)} seq_align {plan.seq_align[b]} is not a positive multiple of {gran}"
               for b in bad[:20]]
    if isinstance(cfg.shapes.candidates, list):
        bad = np.flatnonzero(~np.isin(plan.seq_align, cfg.shapes.candidates))
        errors += [f"{label}: batch {name(b)} seq_align {plan.seq_align[b]} is not among shapes.candidates"
                   for b in bad[:20]]
    short = np.flatnonzero(plan.seq_align[plan.batch_of] < req.prompt)
    errors += [f"{label}: request {req.ids[r]} (prompt_len {req.prompt[r]}) does not fit seq_align "
               f"{plan.seq_align[plan.batch_of[r]]} of batch {name(plan.batch_of[r])}" for r in short[:20]]
    size = np.bincount(plan.batch_of, minlength=plan.num_batches)
    big = np.flatnonzero(size > cfg.batching.max_batch_size)
    errors += [f"{label}: batch {name(b)} has {size[b]} requests > max_batch_size {cfg.batching.max_batch_size}"
               for b in big[:20]]
    if cfg.batching.max_batch_tokens:
        gmax = np.zeros(plan.num_batches, dtype=np.int64)
        np.maximum.at(gmax, plan.batch_of, req.gen)
        tokens = size * (plan.seq_align + gmax)
        big = np.flatnonzero(tokens > cfg.batching.max_batch_tokens)
        errors += [f"{label}: batch {name(b)} uses {tokens[b]} tokens > max_batch_tokens "
                   f"{cfg.batching.max_batch_tokens}" for b in big[:20]]
    return errors


def shape_count_errors(cfg: Config, plans: dict[str, BucketPlan]) -> list[str]:
    used = set()
    for plan in plans.values():
        size = np.bincount(plan.batch_of, minlength=plan.num_batches)
        used |= set(int(s) for s in plan.seq_align[size > 0])
    if len(used) > cfg.shapes.max_unique:
        return [f"{len(used)} distinct shapes {sorted(used)} > shapes.max_unique {cfg.shapes.max_unique}"]
    return []


def verify_plans(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan]) -> list[str]:
    """All validity errors of an in-memory plan set (empty list = valid)."""
    errors = []
    for name, req in requests.items():
        errors += structure_errors(cfg, req, plans[name], name)
    return errors + shape_count_errors(cfg, plans)


def plan_from_rows(cfg: Config, req: Requests, path: Path) -> tuple[BucketPlan | None, list[str]]:
    """Read a plan file into a BucketPlan, collecting id and shape errors one line each."""
    rows = read_plan_file(path)
    errors = []
    index = {rid: i for i, rid in enumerate(req.ids)}
    seen = {}
    for rid, line in zip(rows.request_id, rows.lines):
        if rid not in index:
            errors.append(f"{path}:{line}: unknown request_id {rid!r}")
        elif rid in seen:
            errors.append(f"{path}:{line}: request_id {rid!r} appears again (first at line {seen[rid]})")
        else:
            seen[rid] = line
    missing = [rid for rid in req.ids if rid not in seen]
    errors += [f"{path}: request_id {rid!r} is missing from the plan" for rid in missing[:20]]
    if len(missing) > 20:
        errors.append(f"{path}: ... and {len(missing) - 20} more missing requests")
    batch_shape, batch_line = {}, {}
    for bid, s, h, d, line in zip(rows.batch_id, rows.seq_align, rows.heads_align, rows.hidden_align, rows.lines):
        if not isinstance(s, int) or isinstance(s, bool):
            errors.append(f"{path}:{line}: seq_align {s!r} is not an integer")
            continue
        if (h, d) != (cfg.shapes.heads_align, cfg.shapes.hidden_align):
            errors.append(f"{path}:{line}: shape heads/hidden ({h}, {d}) differ from the config "
                          f"({cfg.shapes.heads_align}, {cfg.shapes.hidden_align})")
        key = str(bid)
        if key in batch_shape and batch_shape[key] != s:
            errors.append(f"{path}:{line}: batch {key} has seq_align {s} but {batch_shape[key]} at line "
                          f"{batch_line[key]} (one shape per batch)")
        batch_shape.setdefault(key, s)
        batch_line.setdefault(key, line)
    if errors:
        return None, errors
    bids = np.array(list(batch_shape), dtype=object)
    bindex = {b: i for i, b in enumerate(bids)}
    batch_of = np.empty(len(req), dtype=np.int64)
    for rid, bid in zip(rows.request_id, rows.batch_id):
        batch_of[index[rid]] = bindex[str(bid)]
    seq = np.array([batch_shape[b] for b in bids], dtype=np.int64)
    return BucketPlan(batch_of, seq, bids), []


def verify_dir(cfg: Config, requests: dict[str, Requests], plan_dir: Path):
    """Read `<plan_dir>/<bucket>.plan.jsonl` for every bucket; (plans, errors)."""
    plans, errors = {}, []
    for name, req in requests.items():
        path = plan_dir / f"{name}.plan.jsonl"
        if not path.exists():
            errors.append(f"{path}: plan file for bucket {name!r} not found")
            continue
        plan, errs = plan_from_rows(cfg, req, path)
        errors += errs
        if plan is not None:
            errors += structure_errors(cfg, req, plan, str(path))
            plans[name] = plan
    if not errors:
        errors += shape_count_errors(cfg, plans)
    return plans, errors


def limit_excess(m: BucketMetrics, limits: dict[str, float]) -> dict[str, float]:
    """Relative excess of each broken limit of one bucket ({} when every limit holds)."""
    out = {}
    for key, value in limits.items():
        got = getattr(m, LIMIT_METRIC[key])
        if got > value * (1 + 1e-12):
            out[key] = (got - value) / max(value, 1e-9)
    return out


def plan_objective(metrics: dict[str, BucketMetrics], costs: Costs, weights: dict[str, float]):
    """(shapes used, total cost with compile cost, weighted objective) of a plan set."""
    shapes = sorted(set().union(*[m.shapes for m in metrics.values()]))
    compile_cost = float(costs.compile(np.array(shapes, dtype=np.float64)).sum())
    total = sum(m.cost for m in metrics.values()) + compile_cost
    objective = weights.get("cost", 0) * total + sum(
        weights.get("sequential_time_ms", 0) * m.sequential_time_ms + weights.get("pad_tokens", 0) * m.pad_tokens
        for m in metrics.values())
    return shapes, total, objective


def rank(metrics: dict[str, BucketMetrics], limits: dict[str, dict], objective: float) -> tuple:
    """Sort key of a plan set: every limit met first, then least total relative excess, then objective."""
    excess = sum(sum(limit_excess(m, limits[name]).values()) for name, m in metrics.items())
    return (excess > 0, excess, objective)
