"""The solve pipeline: load, heuristics, the pre-search bound, then run_cpsat's stages in order (the pair-LP
bound, the shape-set LNS, CP-SAT, the polish, the LNS again: solver/stages.py), and the certified answer."""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from models.config import Config
from models.cpsat_model import VALID_STATUSES
from models.engine import apply_engine
from models.errors import InputError
from models.instance import Instance
from models.requests import Requests, load_requests
from solver import stop
from solver.bounds import objective_bound
from solver.certify import bound_scope, certify, proven, proven_before_search
from solver.current import current_plans
from solver.evaluate import evaluate, kept_copy, rank_key, run_heuristic
from solver.parallel import RaySession, check_backend
from solver.results import MethodResult, SolveResult, Stages
from solver.stages import (bound_overrun, bound_share, build_model, deterministic, lns_info, lns_share, lp_info, model_plan,
                           polish_share, polish_starts, run_bound_stage, run_lns_stage, run_polishes,
                           stopped_by_its_own_handler)

log = logging.getLogger(__name__)
METHODS = ("cpsat", "dp", "greedy", "baseline", "baseline_step128", "baseline_exp")


def load_all(cfg: Config) -> dict[str, Requests]:
    reqs = {b.name: load_requests(b.requests, b.name, b.columns) for b in cfg.buckets}
    apply_engine(cfg, reqs)
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


def run_cpsat(inst: Instance, heuristics: list[MethodResult], time_limit: float,
              stages: Stages | None = None, presearch_bound: float = -math.inf) -> MethodResult:
    """The joint search, in stages sharing one deadline: the shape-set LNS (whose best plan joins the
    heuristics as hint and candidate), CP-SAT, the pair-MIP polish of the best plan, and the LNS again
    with whatever time the others left. The answer is the best verified candidate. Under
    `solver.deterministic_time` only work limits apply (see `deterministic`)."""
    search, session = None, None
    if inst.cfg.solver.backend == "ray" and inst.cfg.solver.lns_share != 0:
        session = RaySession(inst.cfg.solver.address)
        session.connect()           # before the search's clock: a local Ray takes some 10 s to start
    try:
        result, search = search_stages(inst, heuristics, time_limit, stages, presearch_bound)
    finally:
        if search is not None:
            search.close()
        if session is not None:
            session.close()
    return result


def search_stages(inst: Instance, heuristics: list[MethodResult], time_limit: float,
                  stages: Stages | None, presearch_bound: float):
    """run_cpsat's stages: (the result, the LNS search or None)."""
    cfg = inst.cfg
    stages = stages if stages is not None else Stages()
    start = time.monotonic()
    det = deterministic(cfg)
    deadline = math.inf if det else start + time_limit
    polish_part = 0.0 if det else polish_share(cfg, time_limit)
    lp = run_bound_stage(inst, heuristics, 0.0 if det else time_limit * bound_share(cfg, time_limit), stages,
                         presearch_bound, 0.0 if det else bound_overrun(cfg, time_limit))
    lns_end = deadline if det else min(time.monotonic() + time_limit * lns_share(cfg), deadline)
    lns, search = run_lns_stage(inst, heuristics, lns_end, stages)
    searched = heuristics + lns
    best_h = min(searched, key=rank_key) if searched else None
    known = (presearch_bound, lp.bound if lp is not None else None)
    if proven_before_search(best_h, known):
        return proven_plan(inst, best_h, known, lp, search, start), search
    cpsat_end = deadline - time_limit * polish_part
    with stages.timed("cpsat"):
        space, groups, model = build_model(inst, searched, best_h)
        cpsat_s = max(cpsat_end - time.monotonic(), 1.0)
        with stop.searching():
            sol = model.solve(stop.time_left(cpsat_s), cfg.solver.workers, cfg.solver.seed, cfg.solver.log_progress,
                              None if stop.requested() else cfg.solver.deterministic_time)
    if stopped_by_its_own_handler(sol, cpsat_s, det):
        stop.request()                  # CP-SAT stopped early on a Ctrl-C it caught itself
    interrupted = stop.requested()
    bound = max(sol.bound, presearch_bound)
    info = {"status": sol.status, "best_bound": bound, "cpsat_bound": sol.bound,
            "presearch_bound": presearch_bound if math.isfinite(presearch_bound) else None,
            "model_objective": sol.objective, "solve_time_s": sol.solve_time_s,
            "bound_scope": bound_scope(inst, space, groups), "interrupted": interrupted,
            "num_variables": len(model.model.proto.variables), "candidate_shapes": len(space.shapes)}
    lp_info(info, lp)
    if sol.status not in VALID_STATUSES:
        info["model_error"] = f"CP-SAT answered {sol.status}: a bug in the model; the plan below is not the optimizer's"
    candidates = []
    if sol.objective is not None:
        with stages.timed("postprocess"):
            plans = {n: model_plan(cfg, inst.requests[n], space, groups[n], sol) for n in groups}
        candidates.append(evaluate(inst, "cpsat", plans, 0.0, stages, place=False))
        candidates[-1].solver["plan_source"] = "cpsat"
    candidates += [kept_copy(h) for h in searched]
    if candidates and polish_part > 0 and not interrupted:
        candidates += run_polishes(inst, polish_starts(candidates), deadline, stages, info, lp)
    if cfg.solver.lns_share != 0 and not det and not stop.requested() and \
            not proven(sol, bound, candidates, inst, space, groups):
        more, search = run_lns_stage(inst, candidates, deadline, stages, search)
        candidates += more
    lns_info(info, search)
    info["interrupted"] = stop.requested()          # a stop in the polish or the LNS after CP-SAT too
    result = min(candidates, key=rank_key)
    source = result.solver.get("plan_source", "cpsat")
    result.solver = dict(info, plan_source=source)
    result.solver["objective"] = result.objective
    certify(result, sol.bound, space, groups, inst, (presearch_bound, info.get("lp_bound")))
    result.time_s = time.monotonic() - start
    return result, search


def proven_plan(inst: Instance, best: MethodResult, bounds: tuple, lp, search, start: float) -> MethodResult:
    """The cpsat answer when the plan is proven optimal before the search: that plan, certified, no CP-SAT run."""
    result = kept_copy(best)
    source = best.solver.get("plan_source", f"heuristic {best.method}")
    info = {"status": "OPTIMAL", "cpsat_bound": None, "model_objective": None, "solve_time_s": 0.0,
            "presearch_bound": bounds[0] if math.isfinite(bounds[0]) else None, "interrupted": stop.requested(),
            "num_variables": 0, "candidate_shapes": len(inst.all_shapes),
            "search_note": "proven optimal before the search (a global bound within the gap tolerance): CP-SAT, "
                           "the polish and the LNS were not run"}
    lp_info(info, lp)
    lns_info(info, search)
    result.solver = dict(info, plan_source=f"{source} (proven optimal before the search)", objective=best.objective)
    certify(result, -math.inf, None, None, inst, bounds)
    log.info("cpsat: %s is proven optimal before the search (gap %.4f%%); no search needed",
             source, 100 * result.solver["gap"])
    result.time_s = time.monotonic() - start
    return result


def solve(cfg: Config, methods=("cpsat",), time_limit: float | None = None,
          requests: dict[str, Requests] | None = None,
          baselines: dict[str, list[int]] | None = None) -> SolveResult:
    """Run the chosen methods; cpsat runs every heuristic first for its warm start. `baselines`
    ({"current:<format>": shapes}, from --baseline-from) are evaluated beside them with rule batching."""
    stages = Stages()
    if "cpsat" in methods:
        check_backend(cfg.solver.backend)          # Ray missing: one message with the install command
    with stages.timed("load"):
        requests = requests if requests is not None else load_all(cfg)
        apply_engine(cfg, requests)
        inst = Instance(cfg, requests)
    log.info("loaded %d requests in %d buckets", sum(len(r) for r in requests.values()), len(requests))
    wanted = set(methods)
    heur_names = [m for m in METHODS[1:] if m in wanted or "cpsat" in wanted]
    results = {}
    for name in heur_names:
        results[name] = run_heuristic(inst, name, stages)
        stop.plan_ready()
        log.info("%s: objective %.6g, limits %s", name, results[name].objective,
                 "met" if results[name].feasible else "broken")
        if stop.requested():
            break
    if "cpsat" in wanted:
        with stages.timed("bounds"):
            floor = objective_bound(inst)
        log.info("bounds: objective >= %.6g before any search", floor)
        results["cpsat"] = run_cpsat(inst, list(results.values()), time_limit or cfg.solver.time_limit_s,
                                     stages, floor)
    results = {m: results[m] for m in METHODS if m in wanted and m in results}
    for name, shapes in (baselines or {}).items():
        cur, plans, elapsed, info = current_plans(inst, name, shapes)
        results[name] = evaluate(cur, name, plans, elapsed, stages)
        results[name].solver = info
    return SolveResult(cfg, requests, results, dict(stages))
