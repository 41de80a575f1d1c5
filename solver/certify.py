"""What a result may claim (spec section 6): its bound, the bound's scope, gap and status."""
from __future__ import annotations

import math

from models.config import Config
from models.instance import Instance
from solver.results import MethodResult

GAP_TOLERANCE = 1e-4     # a gap this small is reported as OPTIMAL (when the bound is global)


def bound_scope(inst: Instance, space, groups) -> str:
    parts = []
    shapes = space.shapes
    total = len(inst.all_shapes)
    kind = "shapes.candidates" if isinstance(inst.cfg.shapes.candidates, list) else "occurring aligned prompt lengths"
    if len(shapes) < total:
        parts.append(f"shapes restricted to {len(shapes)} of the {total} {kind} (pruned: the bound holds only "
                     "for plans using these shapes)")
    else:
        parts.append(f"all {total} {kind} as candidate shapes (no loss)")
    ladder = [g for g in groups.values() if not g.exact_gens]
    if ladder:
        caps = ", ".join(f"{g.name}: {len(g.caps)}" for g in ladder)
        parts.append(f"batch gen caps restricted to a ladder ({caps} caps): the bound holds for plans whose "
                     "batches are charged the next ladder cap above their longest gen")
    else:
        parts.append("gen caps exact (every distinct gen length)")
    parts += semantics_scope(inst.cfg, space)
    return "; ".join(parts)


def semantics_scope(cfg: Config, space) -> list[str]:
    """What the spec 4b semantics make the model charge above the exact cost (the bound covers plans so charged)."""
    cm, out = cfg.cost_model, []
    if space.context_mode:
        out.append(f"decode contexts: {len(space.levels)} levels (exact when every occurring aligned prompt)")
    elif cm.decode_context == "batch":
        out.append("decode charged from seq_align, not the batch's longest aligned prompt (an upper estimate)")
    limits = {k for b in cfg.buckets for k, _ in b.limits.items()}
    if cm.prefill_length == "request" and not space.context_mode and \
            limits & {"p95_latency_ms", "p99_latency_ms", "max_latency_ms"}:
        out.append("latency limits count every member of a batch at its slowest member's latency (members with "
                   "shorter prompts are faster)")
    if cm.first_use_ms and cm.prefill_length == "request" and not space.context_mode and \
            limits & {"sequential_time_ms", "p95_latency_ms", "p99_latency_ms", "max_latency_ms"}:
        out.append("a shape's first use is charged as if it landed on its batch's slowest member")
    return out


def proven_before_search(best: MethodResult | None, bounds: tuple) -> bool:
    """A global bound known before the search (pre-search, pair LP) already proves the best plan so far optimal
    within GAP_TOLERANCE: the search could only confirm it."""
    finite = [b for b in bounds if b is not None and math.isfinite(b)]
    return best is not None and best.feasible and bool(finite) and \
        best.objective - max(finite) <= GAP_TOLERANCE * abs(best.objective)


def proven(sol, bound: float, candidates: list[MethodResult], inst: Instance, space, groups) -> bool:
    """CP-SAT's bound proves the best candidate optimal for every valid plan: no time is worth spending."""
    if not candidates or not math.isfinite(bound) or not is_global(inst, space, groups):
        return False
    best = min(candidates, key=MethodResult.rank)
    return best.feasible and best.objective - bound <= GAP_TOLERANCE * abs(best.objective)


def certify(result: MethodResult, cpsat_bound: float, space, groups, inst: Instance,
            global_bounds: tuple = ()) -> None:
    """Bound, gap and status as spec section 6 reads them. best_bound is the largest bound that holds for
    every valid plan meeting the limits (the pre-search bound, the pair-LP bound, and CP-SAT's own when its
    model lost nothing: bound_global); a cost bound only beside a plan meeting every limit; OPTIMAL only
    when the gap is proven within GAP_TOLERANCE."""
    info = result.solver
    info["model_status"] = info["status"]
    info["cpsat_bound_scope"] = info.get("bound_scope")    # what CP-SAT's own bound covers
    info["bound_scope"] = "global" if result.feasible else "none: the plan breaks limits"
    if not result.feasible:
        info["penalized_bound"] = cpsat_bound if math.isfinite(cpsat_bound) else None
        info["best_bound"], info["gap"], info["bound_global"] = None, None, None
        info["bound_note"] = ("the plan breaks limits, so no cost bound or gap applies; penalized_bound bounds the "
                              "model's objective with every unit of limit excess priced at 100x the reference plan")
        info["status"] = "FEASIBLE" if info["status"] in ("OPTIMAL", "FEASIBLE", "UNKNOWN") else info["status"]
        return
    bounds = [b for b in global_bounds if b is not None and math.isfinite(b)]
    if math.isfinite(cpsat_bound) and is_global(inst, space, groups):
        bounds.append(cpsat_bound)
    bound = max(bounds) if bounds else None
    info["best_bound"], info["bound_global"] = bound, bound is not None
    info["gap"] = max(0.0, (result.objective - bound) / abs(result.objective)) \
        if bound is not None and result.objective else None
    if bound is not None and bound > result.objective * (1 + 1e-9):
        raise AssertionError(f"a global bound {bound:.9g} above a valid plan's objective {result.objective:.9g}")
    info["status"] = "OPTIMAL" if info["gap"] is not None and info["gap"] <= GAP_TOLERANCE else "FEASIBLE"


def is_global(inst: Instance, space, groups) -> bool:
    """The bound holds for every valid plan: no pruned shapes, exact gens, no semantics charged above cost."""
    return len(space.shapes) >= len(inst.all_shapes) and all(g.exact_gens for g in groups.values()) and \
        not semantics_scope(inst.cfg, space)
