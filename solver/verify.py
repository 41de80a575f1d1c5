"""The plan verifier: validity and every metric, recomputed from plan and requests alone."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from models.config import Config
from models.errors import InputError
from models.plan import BucketPlan, read_plan_file
from models.requests import Requests

LIMIT_METRIC = {
    "p95_latency_ms": "p95_latency_ms", "p99_latency_ms": "p99_latency_ms", "max_latency_ms": "max_latency_ms",
    "pad_ratio": "pad_ratio", "pad_tokens": "pad_tokens", "cost": "cost",
    "sequential_time_ms": "sequential_time_ms",
}


@dataclass
class BucketMetrics:
    """Spec section 4 / 4b metrics of one bucket's plan, in floating point."""

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
    single_request_batches: int = 0
    batch_cost: float = 0.0
    limits: dict[str, bool] = field(default_factory=dict)

    def broken(self) -> list[str]:
        return [k for k, ok in self.limits.items() if not ok]


# --- the metrics, from the definitions (this file shares no code with the optimizer) ------------

STEP_SUM_MAX = 40_000_000     # decode steps summed one by one up to this many in all; beyond, the closed form
CHUNK = 4_000_000             # decode steps per vectorized chunk


def _q(c, x):
    x = np.asarray(x, dtype=np.float64)
    return c[0] + c[1] * x + c[2] * x * x


def _decode_sum(c, start: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per batch: sum_{t=0}^{steps-1} q(c, start + t), added step by step (chunked, vectorized)."""
    start, steps = np.asarray(start, dtype=np.int64), np.asarray(steps, dtype=np.int64)
    out = np.zeros(len(start))
    if int(steps.sum()) > STEP_SUM_MAX:      # astronomically long gens: the sum in closed form
        g, s = steps.astype(np.float64), start.astype(np.float64)
        t1, t2 = g * (g - 1) / 2, (g - 1) * g * (2 * g - 1) / 6
        return c[0] * g + c[1] * (g * s + t1) + c[2] * (g * s * s + 2 * s * t1 + t2)
    ends = np.cumsum(steps)
    lo = 0
    while lo < len(start):                       # chunks of about CHUNK steps
        base = ends[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(ends, base + CHUNK, side="right")), lo + 1)
        n = steps[lo:hi]
        batch = np.repeat(np.arange(hi - lo), n)
        t = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        out[lo:hi] = np.bincount(batch, weights=_q(c, start[lo:hi][batch] + t), minlength=hi - lo)
        lo = hi
    return out


def _nearest_rank(values: np.ndarray, pct: int) -> float:
    """pXX: sorted values, index ceil(XX/100 * n) - 1 (integer arithmetic)."""
    if len(values) == 0:
        return 0.0
    n = len(values)
    index = max(-(-pct * n // 100) - 1, 0)
    return float(np.sort(values)[index])


def first_use_members(req: Requests, plan: BucketPlan) -> np.ndarray:
    """Request indices carrying a shape's first-use latency: per distinct shape, the first line (plan-file
    order) of the batch with the smallest batch_id string among the batches of that shape."""
    nb = plan.num_batches
    ids = plan.batch_ids if plan.batch_ids is not None else np.array(
        [f"{req.bucket}-{b:04d}" for b in range(nb)], dtype=object)
    order = plan.order if plan.order is not None else np.arange(len(req))
    first_line = np.full(nb, -1, dtype=np.int64)
    for r in order[::-1].tolist():               # the earliest line of each batch wins
        first_line[plan.batch_of[r]] = r
    chosen = {}
    for b in np.flatnonzero(first_line >= 0).tolist():
        s = int(plan.seq_align[b])
        if s not in chosen or str(ids[b]) < str(ids[chosen[s]]):
            chosen[s] = b
    return np.array(sorted(first_line[b] for b in chosen.values()), dtype=np.int64)


def bucket_metrics(cfg: Config, req: Requests, plan: BucketPlan, limits=None) -> BucketMetrics:
    """Recompute every metric of a (structurally valid) bucket plan from spec sections 4 and 4b."""
    cm, gran = cfg.cost_model, cfg.shapes.granularity
    nb = plan.num_batches
    size = np.bincount(plan.batch_of, minlength=nb)
    used = np.flatnonzero(size > 0)
    a = -(-req.prompt // gran) * gran                                  # a(p): own aligned prompt
    s_of = plan.seq_align[plan.batch_of]                               # each member's seq_align
    gmax = np.zeros(nb, dtype=np.int64)
    np.maximum.at(gmax, plan.batch_of, req.gen)
    amax = np.zeros(nb, dtype=np.int64)
    np.maximum.at(amax, plan.batch_of, a)
    context = plan.seq_align if cm.decode_context == "shape" else amax  # C_b
    length = s_of if cm.prefill_length == "shape" else a              # L_r
    dec_cost = np.zeros(nb)
    dec_ms = np.zeros(nb)
    dec_cost[used] = _decode_sum(cm.decode_step_cost, context[used], gmax[used])
    dec_ms[used] = _decode_sum(cm.decode_step_ms, context[used], gmax[used])
    member_cost = _q(cm.prefill_cost, length) + dec_cost[plan.batch_of]
    lat = _q(cm.prefill_ms, length) + dec_ms[plan.batch_of] + cm.batch_overhead_ms
    if cm.first_use_ms:
        lat[first_use_members(req, plan)] += cm.first_use_ms
    batch_lat = np.full(nb, -np.inf)
    np.maximum.at(batch_lat, plan.batch_of, lat)
    prompt_pad = (s_of if cm.prompt_pad == "shape" else a) - req.prompt
    pad = int(prompt_pad.sum() + (gmax[plan.batch_of] - req.gen).sum())
    batch_cost = float(member_cost.sum() + len(used) * cm.batch_overhead_cost)
    shapes = sorted(int(x) for x in np.unique(plan.seq_align[used]))
    own_compile = float(_q(cm.compile_cost, np.array(shapes)).sum()) if cm.compile_in_bucket_cost else 0.0
    real = int(req.prompt.sum() + req.gen.sum())
    m = BucketMetrics(
        cost=batch_cost + own_compile, pad_tokens=pad, real_tokens=real, pad_ratio=pad / real,
        p95_latency_ms=_nearest_rank(lat, 95), p99_latency_ms=_nearest_rank(lat, 99),
        max_latency_ms=float(lat.max()) if len(lat) else 0.0,
        sequential_time_ms=float(batch_lat[used].sum()), num_batches=len(used), num_requests=len(req),
        shapes=shapes, single_request_batches=int((size == 1).sum()), batch_cost=batch_cost)
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
    errors += engine_errors(cfg, req, plan, label)
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


def engine_errors(cfg: Config, req: Requests, plan: BucketPlan, label: str) -> list[str]:
    """The engine's own fit rule (config `engine:`), recomputed here from prompt_len, not from req.fit:
    neuron takes a context bucket only when prompt_len < bucket (checked for every bucket, the largest too);
    jetstream / maxtext-offline add a BOS token; jetstream runs only powers of two 16..32768;
    vllm-gaudi (and a set engine.block_size) needs whole KV blocks."""
    eng = cfg.engine
    if eng.name == "generic" and eng.block_size is None:
        return []
    where = f"{label}: engine {eng.name}"
    errors = []
    used = np.flatnonzero(np.bincount(plan.batch_of, minlength=plan.num_batches) > 0)
    block = eng.block_size or (128 if eng.name == "vllm-gaudi" else None)
    if block:
        bad = used[plan.seq_align[used] % block != 0]
        errors += [f"{where}: seq_align {plan.seq_align[b]} is not a multiple of the KV block size {block}"
                   for b in bad[:20]]
    if eng.name == "jetstream":
        s = plan.seq_align[used]
        bad = used[(s < 16) | (s > 32768) | ((s & (s - 1)) != 0)]
        errors += [f"{where}: seq_align {plan.seq_align[b]} is not one of the server's power-of-two prefill lengths"
                   for b in bad[:20]]
    extra = {"neuron": 1, "jetstream": int(eng.add_bos), "maxtext-offline": int(eng.add_bos)}.get(eng.name, 0)
    if extra:
        short = np.flatnonzero(plan.seq_align[plan.batch_of] < req.prompt + extra)
        why = "prompt_len < bucket" if eng.name == "neuron" else "BOS + prompt_len <= seq_align"
        errors += [f"{where}: request {req.ids[r]} (prompt_len {req.prompt[r]}) does not fit seq_align "
                   f"{plan.seq_align[plan.batch_of[r]]} ({why})" for r in short[:20]]
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
    order = np.array([index[rid] for rid in rows.request_id], dtype=np.int64)   # plan-file line order
    return BucketPlan(batch_of, seq, bids, order), []


def verify_dir(cfg: Config, requests: dict[str, Requests], plan_dir: Path):
    """Read `<plan_dir>/<bucket>.plan.jsonl` for every bucket; (plans, errors)."""
    if not plan_dir.is_dir():
        raise InputError(f"{plan_dir}: no such plan folder")
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


def plan_objective(cfg: Config, metrics: dict[str, BucketMetrics], weights: dict[str, float]):
    """(shapes used, total cost: every batch plus each distinct shape's compile cost once, weighted objective)."""
    shapes = sorted(set().union(*[m.shapes for m in metrics.values()]))
    compile_cost = float(_q(cfg.cost_model.compile_cost, np.array(shapes, dtype=np.float64)).sum())
    total = sum(m.batch_cost for m in metrics.values()) + compile_cost
    objective = weights.get("cost", 0) * total + sum(
        weights.get("sequential_time_ms", 0) * m.sequential_time_ms + weights.get("pad_tokens", 0) * m.pad_tokens
        for m in metrics.values())
    return shapes, total, objective


def rank(metrics: dict[str, BucketMetrics], limits: dict[str, dict], objective: float) -> tuple:
    """Sort key of a plan set: every limit met first, then least total relative excess, then objective."""
    excess = sum(sum(limit_excess(m, limits[name]).values()) for name, m in metrics.items())
    return (excess > 0, excess, objective)
