"""Exhaustive optimum of tiny instances, for tests only.

Every partition of each bucket's requests into batches, times every shape set of at most
max_unique (<= 3) allowed shapes; each batch takes the smallest chosen shape holding its members
(optimal: every cost, latency and padding term grows with seq_align). Multi-bucket plans share the
shape set, so at most `max_unique` distinct shapes over all buckets and one compile cost per
distinct shape. Keep it tiny: <= 6 requests in total.

A candidate plan is judged only by `plan_value`, which checks validity itself (spec section 5) and
reads every metric from `tests.helpers.recompute` (spec sections 4 and 4b); nothing here imports the
code under test. `inner_choices` is the hook for choices inside one plan that recompute depends on
(plan-file order and batch ids, i.e. which request carries a shape's first-use latency): today it
yields the plan as is.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from tests.helpers import q, recompute, set_partitions

LIMIT_TOL = 1e-9          # relative: a limit holds when value <= limit * (1 + LIMIT_TOL)
MAX_REQUESTS = 6


@dataclass
class BucketAssignment:
    """One bucket's plan: request r in batch batch_of[r], batch b of shape seq_align[b]."""

    batch_of: list[int]
    seq_align: list[int]
    order: list[int] | None = None          # plan-file line order (request indices); None = arrival
    batch_ids: list[str] | None = None      # per batch; None = bucket-0000, bucket-0001, ...


@dataclass
class Best:
    objective: float = math.inf
    assignment: dict[str, BucketAssignment] | None = None
    metrics: dict[str, dict] = field(default_factory=dict)
    total_cost: float = math.inf
    plans_seen: int = 0
    feasible_plans: list = field(default_factory=list)     # (objective, assignment), with keep_all

    def optima(self, rel: float = 1e-12) -> list:
        """Every plan kept (keep_all) whose objective ties the optimum."""
        return [a for v, a in self.feasible_plans if v <= self.objective * (1 + rel)]

    @property
    def feasible(self) -> bool:
        return self.assignment is not None


def allowed_shapes(cfg, reqs) -> list[int]:
    """Every shape a valid plan may use that some batch could have: the explicit candidates, or
    every multiple of granularity up to the longest prompt's (nothing above is ever better)."""
    gran = cfg.shapes.granularity
    if isinstance(cfg.shapes.candidates, list):
        return sorted(set(int(c) for c in cfg.shapes.candidates))
    top = max(-(-int(p) // gran) * gran for r in reqs.values() for p in r.prompt)
    return list(range(gran, top + 1, gran))


def limits_of(cfg) -> dict[str, dict]:
    return {b.name: dict(b.limits.items()) for b in cfg.buckets}


def validity_errors(cfg, reqs, assignment: dict[str, BucketAssignment]) -> list[str]:
    """Spec section 5, checked from scratch."""
    errors, used = [], set()
    gran, B, T = cfg.shapes.granularity, cfg.batching.max_batch_size, cfg.batching.max_batch_tokens
    allowed = set(cfg.shapes.candidates) if isinstance(cfg.shapes.candidates, list) else None
    for name, req in reqs.items():
        a = assignment[name]
        if len(a.batch_of) != len(req):
            errors.append(f"{name}: {len(a.batch_of)} assignments for {len(req)} requests")
            continue
        members = {}
        for r, b in enumerate(a.batch_of):
            members.setdefault(int(b), []).append(r)
        for b, rs in members.items():
            s = int(a.seq_align[b])
            used.add(s)
            if s <= 0 or s % gran:
                errors.append(f"{name}: batch {b} seq_align {s} not a positive multiple of {gran}")
            if allowed is not None and s not in allowed:
                errors.append(f"{name}: batch {b} seq_align {s} not among shapes.candidates")
            if any(int(req.prompt[r]) > s for r in rs):
                errors.append(f"{name}: batch {b} seq_align {s} below a member's prompt")
            if len(rs) > B:
                errors.append(f"{name}: batch {b} has {len(rs)} > max_batch_size {B}")
            if T and len(rs) * (s + max(int(req.gen[r]) for r in rs)) > T:
                errors.append(f"{name}: batch {b} needs more than max_batch_tokens {T}")
    if len(used) > cfg.shapes.max_unique:
        errors.append(f"{len(used)} distinct shapes > max_unique {cfg.shapes.max_unique}")
    return errors


def plan_metrics(cfg, reqs, assignment: dict[str, BucketAssignment]) -> dict[str, dict]:
    """recompute() per bucket."""
    return {name: recompute(cfg, req, a.batch_of, a.seq_align, a.batch_ids, a.order)
            for name, req in reqs.items() for a in [assignment[name]]}


def total_cost(cfg, metrics: dict[str, dict]) -> float:
    """Sum of the buckets' batch costs plus each distinct shape's compile cost once."""
    shapes = set().union(*[set(m["shapes"]) for m in metrics.values()])
    return sum(m["batch_cost"] for m in metrics.values()) + sum(q(cfg.cost_model.compile_cost, s) for s in shapes)


def objective_of(cfg, metrics: dict[str, dict]) -> float:
    w = cfg.objective.weight_map()
    return (w.get("cost", 0.0) * total_cost(cfg, metrics)
            + w.get("sequential_time_ms", 0.0) * sum(m["sequential_time_ms"] for m in metrics.values())
            + w.get("pad_tokens", 0.0) * sum(m["pad_tokens"] for m in metrics.values()))


def broken_limits(cfg, metrics: dict[str, dict], limits: dict[str, dict] | None = None) -> list[str]:
    """'bucket.limit' for every limit a plan breaks (limits default to the config's)."""
    limits = limits_of(cfg) if limits is None else limits
    return [f"{name}.{key}" for name, m in metrics.items() for key, v in limits.get(name, {}).items()
            if not m[key] <= v * (1 + LIMIT_TOL)]


def plan_value(cfg, reqs, assignment: dict[str, BucketAssignment], use_limits: bool = True) -> tuple[bool, float]:
    """(feasible, objective) of one concrete plan; feasible = valid and (with use_limits) every limit held;
    objective inf when invalid."""
    if validity_errors(cfg, reqs, assignment):
        return False, math.inf
    metrics = plan_metrics(cfg, reqs, assignment)
    return (not use_limits or not broken_limits(cfg, metrics)), objective_of(cfg, metrics)


def inner_choices(cfg, reqs, assignment: dict[str, BucketAssignment]):
    """The concrete variants of one plan worth trying (the hook for first-use placement)."""
    yield assignment


def bucket_plans(req, shapes: tuple[int, ...]):
    """Every partition of one bucket, each batch at the smallest shape of `shapes` holding it
    (partitions some batch of which no shape holds are skipped)."""
    for part in set_partitions(list(range(len(req)))):
        seq = []
        for members in part:
            top = max(int(req.prompt[r]) for r in members)
            fits = [s for s in shapes if s >= top]
            if not fits:
                break
            seq.append(min(fits))
        else:
            batch_of = [0] * len(req)
            for b, members in enumerate(part):
                for r in members:
                    batch_of[r] = b
            yield BucketAssignment(batch_of, seq)


def brute_force(cfg, reqs, use_limits: bool = True, max_shapes: int = 3, keep_all: bool = False) -> Best:
    """Least objective over every plan (see the module docstring); Best() with objective inf when no
    plan meets the limits. keep_all: also every feasible plan (Best.optima gives the tied optima)."""
    n = sum(len(r) for r in reqs.values())
    assert n <= MAX_REQUESTS, f"{n} requests: too many for the brute force"
    assert cfg.shapes.max_unique <= max_shapes, "shape sets above max_shapes would be missed"
    allowed = allowed_shapes(cfg, reqs)
    best, seen = Best(), set()
    names = list(reqs)
    for k in range(1, cfg.shapes.max_unique + 1):
        for shapes in itertools.combinations(allowed, k):
            per_bucket = [list(bucket_plans(reqs[name], shapes)) for name in names]
            for combo in itertools.product(*per_bucket):
                key = tuple((tuple(a.batch_of), tuple(a.seq_align)) for a in combo)
                if key in seen:
                    continue
                seen.add(key)
                for assignment in inner_choices(cfg, reqs, dict(zip(names, combo))):
                    feasible, value = plan_value(cfg, reqs, assignment, use_limits)
                    best.plans_seen += 1
                    if feasible and keep_all:
                        best.feasible_plans.append((value, assignment))
                    if feasible and value < best.objective:
                        best.objective, best.assignment = value, assignment
    if best.feasible:
        best.metrics = plan_metrics(cfg, reqs, best.assignment)
        best.total_cost = total_cost(cfg, best.metrics)
    return best
