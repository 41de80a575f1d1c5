"""The solve pipeline: load, heuristics, bounds, warm-started CP-SAT, post-process, verify."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from models.config import Config
from models.cost import Costs
from models.cpsat_model import ShapeModel
from models.errors import InputError
from models.instance import Instance, group_bucket, prune_shapes
from models.plan import BucketPlan
from models.requests import Requests, load_requests
from solver.heuristics import HEURISTICS
from solver.postprocess import classes_to_plan, plan_to_classes
from solver.verify import BucketMetrics, bucket_metrics, verify_plans

log = logging.getLogger(__name__)
METHODS = ("cpsat", "dp", "greedy", "baseline", "baseline_step128", "baseline_exp")


@dataclass
class MethodResult:
    """One method's plans and their exact metrics."""

    method: str
    plans: dict[str, BucketPlan]
    metrics: dict[str, BucketMetrics]
    shapes: list[int]
    total_cost: float
    objective: float
    time_s: float
    solver: dict = field(default_factory=dict)      # cpsat only: status, best_bound, gap, ...

    @property
    def feasible(self) -> bool:
        return all(not m.broken() for m in self.metrics.values())

    def violation(self) -> float:
        total = 0.0
        for name, m in self.metrics.items():
            for key in m.broken():
                limit = self.limits_of[name][key]
                total += (getattr(m, key) - limit) / max(limit, 1e-9)
        return total

    limits_of: dict = field(default_factory=dict)


@dataclass
class SolveResult:
    """Everything a run produced, for the report, the CLI and the Python API."""

    config: Config
    requests: dict[str, Requests]
    results: dict[str, MethodResult]
    stage_s: dict[str, float]


def load_all(cfg: Config) -> dict[str, Requests]:
    reqs = {b.name: load_requests(b.requests, b.name, b.columns) for b in cfg.buckets}
    check_fits(cfg, reqs)
    return reqs


def check_fits(cfg: Config, reqs: dict[str, Requests]) -> None:
    """Every request must fit some allowed shape and, alone, max_batch_tokens."""
    for name, r in reqs.items():
        if isinstance(cfg.shapes.candidates, list) and r.prompt.max() > max(cfg.shapes.candidates):
            i = int(np.argmax(r.prompt))
            raise InputError(f"{r.path}:{r.lines[i]}: prompt_len {r.prompt[i]} is longer than the largest "
                             f"shapes.candidates value {max(cfg.shapes.candidates)}")
        if cfg.batching.max_batch_tokens:
            gran = cfg.shapes.granularity
            need = -(-r.prompt // gran) * gran + r.gen
            bad = np.flatnonzero(need > cfg.batching.max_batch_tokens)
            if len(bad):
                i = int(bad[0])
                raise InputError(f"{r.path}:{r.lines[i]}: request needs {need[i]} tokens alone "
                                 f"> batching.max_batch_tokens {cfg.batching.max_batch_tokens}")


def evaluate(inst: Instance, method: str, plans: dict[str, BucketPlan], elapsed: float) -> MethodResult:
    """Verify a plan set (invalid plans are a bug: raise) and compute its exact metrics."""
    errors = verify_plans(inst.cfg, inst.requests, plans)
    if errors:
        raise RuntimeError(f"{method} produced an invalid plan: {errors[0]}")
    limits = {b.name: dict(b.limits.items()) for b in inst.cfg.buckets}
    metrics = {n: bucket_metrics(inst.requests[n], plans[n], inst.costs, limits[n]) for n in plans}
    shapes = sorted(set().union(*[m.shapes for m in metrics.values()]))
    compile_cost = float(inst.costs.compile(np.array(shapes, dtype=np.float64)).sum())
    total = sum(m.cost for m in metrics.values()) + compile_cost
    w = inst.cfg.objective.weight_map()
    objective = w.get("cost", 0) * total + sum(
        w.get("sequential_time_ms", 0) * m.sequential_time_ms + w.get("pad_tokens", 0) * m.pad_tokens
        for m in metrics.values())
    return MethodResult(method, plans, metrics, shapes, total, objective, elapsed, limits_of=limits)


def rank_key(r: MethodResult):
    """Plans meeting every limit first, then least violation, then objective."""
    return (not r.feasible, r.violation(), r.objective)


def run_heuristic(inst: Instance, method: str) -> MethodResult:
    start = time.monotonic()
    plans = HEURISTICS[method](inst)
    return evaluate(inst, method, plans, time.monotonic() - start)


def bound_scope(inst: Instance, shapes, groups) -> str:
    parts = []
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
    return "; ".join(parts)


def run_cpsat(inst: Instance, heuristics: list[MethodResult], time_limit: float) -> MethodResult:
    cfg = inst.cfg
    start = time.monotonic()
    best_h = min(heuristics, key=rank_key) if heuristics else None
    keep = set().union(*[set(h.shapes) for h in heuristics]) if heuristics else set()
    prompts = np.concatenate([r.prompt for r in inst.requests.values()])
    shapes = np.array(prune_shapes(inst.all_shapes, prompts, keep, cfg.solver.max_candidates), dtype=np.int64)
    groups = {n: group_bucket(r, shapes, cfg.solver.gen_caps) for n, r in inst.requests.items()}
    ref = best_h.objective if best_h else 1.0
    model = ShapeModel(cfg, shapes, groups, cfg.objective.weight_map(), ref)
    hinted = [h for h in heuristics if h.feasible] or ([best_h] if best_h else [])
    if hinted:
        h = min(hinted, key=rank_key)
        parts = {n: plan_to_classes(cfg, inst.requests[n], shapes, groups[n], h.plans[n]) for n in groups}
        use = np.any([p[0] for p in parts.values()], axis=0)
        model.add_hint(use, {n: p[1] for n, p in parts.items()}, {n: p[2] for n, p in parts.items()},
                       {n: p[3] for n, p in parts.items()})
        log.info("cpsat: hint from %s (objective %.6g)", h.method, h.objective)
    build_s = time.monotonic() - start
    log.info("cpsat: model with %d variables, %d constraints, built in %.1fs",
             len(model.model.proto.variables), len(model.model.proto.constraints), build_s)
    sol = model.solve(max(time_limit - build_s, 1.0), cfg.solver.workers, cfg.solver.seed, cfg.solver.log_progress)
    info = {"status": sol.status, "best_bound": sol.bound, "model_objective": sol.objective,
            "solve_time_s": sol.solve_time_s, "bound_scope": bound_scope(inst, shapes, groups),
            "interrupted": sol.interrupted, "num_variables": len(model.model.proto.variables),
            "candidate_shapes": len(shapes)}
    candidates = []
    if sol.objective is not None:
        plans = {n: classes_to_plan(cfg, inst.requests[n], shapes, groups[n], sol.v[n], sol.m[n]) for n in groups}
        candidates.append(evaluate(inst, "cpsat", plans, 0.0))
        candidates[-1].solver["plan_source"] = "cpsat"
    for h in heuristics:
        copy = evaluate(inst, "cpsat", h.plans, 0.0)
        copy.solver["plan_source"] = f"heuristic {h.method} (kept: better than the CP-SAT solution)"
        candidates.append(copy)
    result = min(candidates, key=rank_key)
    source = result.solver.get("plan_source", "cpsat")
    result.solver = dict(info, plan_source=source)
    result.solver["objective"] = result.objective
    bound = sol.bound
    result.solver["gap"] = (result.objective - bound) / abs(result.objective) if result.objective and \
        math.isfinite(bound) else None
    result.time_s = time.monotonic() - start
    return result


def solve(cfg: Config, methods=("cpsat",), time_limit: float | None = None,
          requests: dict[str, Requests] | None = None) -> SolveResult:
    """Run the chosen methods; cpsat runs every heuristic first for its warm start."""
    stage = {}
    t = time.monotonic()
    requests = requests if requests is not None else load_all(cfg)
    stage["load"] = time.monotonic() - t
    inst = Instance(cfg, requests)
    wanted = set(methods)
    heur_names = [m for m in METHODS[1:] if m in wanted or "cpsat" in wanted]
    results = {}
    t = time.monotonic()
    for name in heur_names:
        results[name] = run_heuristic(inst, name)
        log.info("%s: objective %.6g, limits %s", name, results[name].objective,
                 "met" if results[name].feasible else "broken")
    stage["heuristics"] = time.monotonic() - t
    if "cpsat" in wanted:
        t = time.monotonic()
        results["cpsat"] = run_cpsat(inst, list(results.values()), time_limit or cfg.solver.time_limit_s)
        stage["cpsat"] = time.monotonic() - t
    results = {m: results[m] for m in METHODS if m in wanted or m in results and "cpsat" not in wanted}
    return SolveResult(cfg, requests, {m: r for m, r in results.items() if m in wanted}, stage)
