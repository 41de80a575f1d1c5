"""Judging a plan set: the plan writer's first-use placement, the verifier, the exact metrics, and the ranking."""
from __future__ import annotations

import time

from models.instance import Instance
from models.plan import BucketPlan
from solver.heuristics import HEURISTICS
from solver.postprocess import place_first_use
from solver.results import MethodResult, Stages
from solver.verify import bucket_metrics, plan_objective, verify_plans



def evaluate(inst: Instance, method: str, plans: dict[str, BucketPlan], elapsed: float,
             stages: Stages | None = None, place: bool = True) -> MethodResult:
    """Verify a plan set (invalid plans are a bug: raise) and compute its exact metrics. With `place`, the
    plan writer first puts each shape's first-use latency where it hurts least (spec 4b)."""
    if place:
        plans = {n: place_first_use(inst.cfg, inst.requests[n], p) for n, p in plans.items()}
    with (stages if stages is not None else Stages()).timed("verify"):
        errors = verify_plans(inst.cfg, inst.requests, plans)
        if errors:
            raise RuntimeError(f"{method} produced an invalid plan: {errors[0]}")
        limits = {b.name: dict(b.limits.items()) for b in inst.cfg.buckets}
        metrics = {n: bucket_metrics(inst.cfg, inst.requests[n], plans[n], limits[n]) for n in plans}
    shapes, total, objective = plan_objective(inst.cfg, metrics, inst.cfg.objective.weight_map())
    return MethodResult(method, plans, metrics, shapes, total, objective, elapsed, limits_of=limits)


rank_key = MethodResult.rank


def run_heuristic(inst: Instance, method: str, stages: Stages | None = None) -> MethodResult:
    stages = stages if stages is not None else Stages()
    start = time.monotonic()
    with stages.timed("heuristics"):
        plans = HEURISTICS[method](inst)
    elapsed = time.monotonic() - start
    return evaluate(inst, method, plans, elapsed, stages)


def kept_copy(h: MethodResult) -> MethodResult:
    """A heuristic's (or the LNS's) plan as a cpsat candidate, saying where it came from."""
    copy = MethodResult("cpsat", h.plans, h.metrics, h.shapes, h.total_cost, h.objective, 0.0, limits_of=h.limits_of)
    source = h.solver.get("plan_source", f"heuristic {h.method}")
    copy.solver["plan_source"] = f"{source} (kept: better than the CP-SAT solution)"
    return copy
