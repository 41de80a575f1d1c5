"""The solve pipeline: load, heuristics, bounds, warm-started CP-SAT, post-process, verify."""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from models.config import Config
from models.cost import Costs
from models.cpsat_model import VALID_STATUSES, ShapeModel
from models.engine import apply_engine
from models.errors import InputError
from models.instance import Instance, batch_caps, group_bucket, model_space, prune_shapes
from models.plan import BucketPlan
from models.requests import Requests, load_requests
from solver.bounds import objective_bound
from solver.current import current_plans
from solver.global_bound import global_bound
from solver.heuristics import HEURISTICS
from solver.lns import LnsSettings, ShapeSetSearch, run_lns
from solver.parallel import RaySession, check_backend
from solver.polish import polish
from solver.postprocess import classes_to_plan, place_first_use, plan_to_classes
from solver.results import MethodResult, SolveResult, Stages
from solver import stop
from solver.verify import bucket_metrics, plan_objective, verify_plans

log = logging.getLogger(__name__)
METHODS = ("cpsat", "dp", "greedy", "baseline", "baseline_step128", "baseline_exp")
GAP_TOLERANCE = 1e-4     # a gap this small is reported as OPTIMAL (when the bound is global)
POLISH_SETS = 2          # distinct shape sets the polish re-solves (see polish_starts)
POLISH_WITHIN = 0.1      # a second set is polished when its plan costs at most this much more than the best
LONG_RUN_S = 300.0       # from this time limit on, the pair-LP bound runs by default outside context mode too
LONG_BOUND_SHARE = 0.45  # its share then (with the polish's 0.5 default, CP-SAT keeps the rest)


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
    polish_share = 0.0 if det else cfg.solver.polish_share
    lp = run_bound_stage(inst, heuristics, 0.0 if det else time_limit * bound_share(cfg, time_limit), stages,
                         presearch_bound)
    lns_end = deadline if det else min(time.monotonic() + time_limit * lns_share(cfg), deadline)
    lns, search = run_lns_stage(inst, heuristics, lns_end, stages)
    searched = heuristics + lns
    best_h = min(searched, key=rank_key) if searched else None
    known = (presearch_bound, lp.bound if lp is not None else None)
    if proven_before_search(best_h, known):
        return proven_plan(inst, best_h, known, lp, search, start), search
    cpsat_end = deadline - time_limit * polish_share
    with stages.timed("cpsat"):
        space, groups, model = build_model(inst, searched, best_h)
        cpsat_s = max(cpsat_end - time.monotonic(), 1.0)
        with stop.searching():
            sol = model.solve(stop.time_left(cpsat_s), cfg.solver.workers, cfg.solver.seed, cfg.solver.log_progress,
                              None if stop.requested() else cfg.solver.deterministic_time)
    if sol.interrupted or (sol.status == "UNKNOWN" and early(sol.solve_time_s, cpsat_s) and not det):
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
    if candidates and polish_share > 0 and not interrupted:
        candidates += run_polishes(inst, polish_starts(candidates), deadline, stages, info)
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


def early(used_s: float, limit_s: float) -> bool:
    """CP-SAT ended well before its time limit: by 5% and by a second at least (its clock and ours start
    a fraction of a second apart, so a short search that runs to its limit is not taken for a stop)."""
    return used_s < min(0.95 * limit_s, limit_s - 1.0)


def proven_before_search(best: MethodResult | None, bounds: tuple) -> bool:
    """A global bound known before the search (pre-search, pair LP) already proves the best plan so far optimal
    within GAP_TOLERANCE: the search could only confirm it."""
    finite = [b for b in bounds if b is not None and math.isfinite(b)]
    return best is not None and best.feasible and bool(finite) and \
        best.objective - max(finite) <= GAP_TOLERANCE * abs(best.objective)


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


DETERMINISTIC_LNS_SETS = 40     # sets the LNS evaluates under deterministic_time when lns_sets is not given


def deterministic(cfg: Config) -> bool:
    """`solver.deterministic_time` is set: the run depends on the inputs alone. CP-SAT stops on that work
    limit (not on wall time: time_limit_s does not bound it), the LNS runs before CP-SAT (unless
    lns_share is 0) for `lns_sets` sets (default DETERMINISTIC_LNS_SETS), and the stages only a wall
    clock bounds (the polish and the pair-LP bound: HiGHS has no work limit) are skipped."""
    return cfg.solver.deterministic_time is not None


def lns_sets(cfg: Config) -> int | None:
    """Shape sets the LNS evaluates at most over all its stages (None: its time decides)."""
    return cfg.solver.lns_sets or (DETERMINISTIC_LNS_SETS if deterministic(cfg) else None)


def model_plan(cfg: Config, req, space, groups, sol) -> BucketPlan:
    """One bucket's plan from the CP-SAT solution, each shape's first use placed where the model put it (or,
    where it placed none, where it hurts least)."""
    try:
        return model_plan_exact(cfg, req, space, groups, sol)
    except (AssertionError, StopIteration) as err:          # a bug: keep the batches, place the warm-ups ourselves
        log.error("cpsat: the model's first-use leads of %s could not be placed (%s); placed by the writer",
                  req.bucket, err or type(err).__name__)
    plan = classes_to_plan(cfg, req, space, groups, sol.v.get(req.bucket), sol.m[req.bucket],
                           sol.bucket_use.get(req.bucket), sol.wo.get(req.bucket))
    return place_first_use(cfg, req, plan)


def model_plan_exact(cfg: Config, req, space, groups, sol) -> BucketPlan:
    """model_plan without its fallback (tests use it to see the model alone)."""
    n = req.bucket
    plan = classes_to_plan(cfg, req, space, groups, sol.v.get(n), sol.m[n], sol.bucket_use.get(n),
                           sol.wo.get(n), sol.lead.get(n))
    return plan if n in sol.lead else place_first_use(cfg, req, plan)


def kept_copy(h: MethodResult) -> MethodResult:
    """A heuristic's (or the LNS's) plan as a cpsat candidate, saying where it came from."""
    copy = MethodResult("cpsat", h.plans, h.metrics, h.shapes, h.total_cost, h.objective, 0.0, limits_of=h.limits_of)
    source = h.solver.get("plan_source", f"heuristic {h.method}")
    copy.solver["plan_source"] = f"{source} (kept: better than the CP-SAT solution)"
    return copy


def proven(sol, bound: float, candidates: list[MethodResult], inst: Instance, space, groups) -> bool:
    """CP-SAT's bound proves the best candidate optimal for every valid plan: no time is worth spending."""
    if not candidates or not math.isfinite(bound) or not is_global(inst, space, groups):
        return False
    best = min(candidates, key=rank_key)
    return best.feasible and best.objective - bound <= GAP_TOLERANCE * abs(best.objective)


def run_lns_stage(inst: Instance, known: list[MethodResult], deadline: float, stages: Stages,
                  search: ShapeSetSearch | None = None) -> tuple[list[MethodResult], ShapeSetSearch | None]:
    """The shape-set LNS until `deadline`, seeded with the shapes of the plans known so far (or
    continuing `search`): ([its best plan, verified], the search), or ([], None) when it is off."""
    cfg = inst.cfg
    if search is None and cfg.solver.lns_share == 0:
        return [], None
    if deadline - time.monotonic() < 0.5 or stop.requested():
        return [], search
    settings = LnsSettings(seed=cfg.solver.seed, log_progress=cfg.solver.log_progress, max_sets=lns_sets(cfg),
                           backend=cfg.solver.backend, address=cfg.solver.address)
    seeds = [h.shapes for h in sorted(known, key=rank_key)]
    start = time.monotonic()
    with stages.timed("lns"):
        with stop.interruptible():
            found = run_lns(inst, deadline, settings, seeds, search)
        if found.best is None:
            return [], found.search
        result = evaluate(inst, "lns", found.best.plans, time.monotonic() - start, stages)
    result.solver["plan_source"] = f"lns shape-set search ({found.sets} sets)"
    log.info("lns: objective %.6g, limits %s, shapes %s, %d sets in %.1fs", result.objective,
             "met" if result.feasible else "broken", result.shapes, found.sets, found.elapsed_s)
    return [result], found.search


def lp_info(info: dict, lp) -> None:
    """The pair-LP bound stage's figures in the report."""
    if lp is not None:
        info.update({"lp_bound": lp.bound, "lp_value": lp.lp_value, "lp_converged": lp.converged,
                     "lp_rounds": lp.rounds, "lp_pairs": lp.columns, "lp_time_s": lp.time_s})


def lns_info(info: dict, search: ShapeSetSearch | None) -> None:
    """The LNS figures in the report: best objective and shapes, sets evaluated, moves, restarts."""
    if search is None or search.best is None:
        return
    info.update({"lns_objective": search.best.objective, "lns_shapes": list(search.best.shapes),
                 "lns_limits_met": not search.best.key[0], "lns_sets": len(search.evaluator.sets),
                 "lns_steps": search.steps, "lns_moves": search.moves, "lns_restarts": search.restarts})


def bound_share(cfg: Config, time_limit: float) -> float:
    """The pair-LP bound's share: as configured, or (auto) 0.2 in spec 4b context mode, where its LP converges
    within seconds over every distinct gen (static_graph: 2.2283e11 beside a 2.2292e11 plan); elsewhere
    LONG_BOUND_SHARE of runs of at least LONG_RUN_S and 0 below (measured on the default config at 48 caps:
    the Lagrangian bound passes the pre-search bound's 7.79e11 after about 120 s, reaches 8.50e11 at 220 s
    and the LP converges to 9.545e11 in about 500 s; CP-SAT's own search added nothing there after 60 s)."""
    if cfg.solver.bound_share is not None:
        return cfg.solver.bound_share
    if Costs(cfg.cost_model).context_mode:
        return 0.2
    return LONG_BOUND_SHARE if time_limit >= LONG_RUN_S else 0.0


def bound_caps(cfg: Config) -> int:
    """Gen caps per bucket in the pair-LP bound: as configured, or (auto) every distinct gen up to 2000 in
    context mode, 48 elsewhere (at 96 caps its rounds on the default config take minutes each after the
    fifth)."""
    if cfg.solver.bound_caps is not None:
        return cfg.solver.bound_caps
    return 2000 if Costs(cfg.cost_model).context_mode else 48


def lns_share(cfg: Config) -> float:
    """The LNS's share before CP-SAT: as configured, or (auto) 0.2 in spec 4b context mode and 0 elsewhere
    (measured: on the default config the polish of dp's 5-shape set reaches 1.058e12, of the LNS's 4-shape
    set 1.074e12, so there the LNS runs on the time the polish leaves; on static_graph the LNS's set hints
    CP-SAT and the polish of it reaches 2.229e11)."""
    if cfg.solver.lns_share is not None:
        return cfg.solver.lns_share
    return 0.2 if Costs(cfg.cost_model).context_mode else 0.0


def run_bound_stage(inst: Instance, heuristics: list[MethodResult], time_s: float, stages: Stages,
                    presearch_bound: float = -math.inf):
    """The global pair-LP bound (solver/global_bound.py), seeded with the best heuristic plan; None when off or
    when the pre-search bound already proves that plan."""
    best = min(heuristics, key=rank_key) if heuristics else None
    if time_s <= 0 or proven_before_search(best, (presearch_bound,)):
        return None
    with stages.timed("lp_bound"):
        return global_bound(inst, best.objective if best else 1.0, time_s, bound_caps(inst.cfg),
                            inst.cfg.solver.log_progress, best.plans if best else None)


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


def polish_starts(candidates: list[MethodResult]) -> list[MethodResult]:
    """The plans the polish starts from, best first: the best plan of each distinct shape set, at most
    POLISH_SETS, a later one only when it meets the limits and costs at most POLISH_WITHIN more than the best.
    Measured on the default config: at 600 s CP-SAT's own plan beats dp's, yet dp's shape set polishes lower
    (1.058e12 against 1.065e12), and 15 s of polish on dp's set reach what 30 s do, so sharing the time loses
    little."""
    ranked = sorted(candidates, key=rank_key)
    best, out, seen = ranked[0], [], set()
    for c in ranked:
        key = tuple(sorted(c.shapes))
        close = c is best or (c.feasible and c.objective <= best.objective * (1 + POLISH_WITHIN))
        if key not in seen and close and len(out) < POLISH_SETS:
            seen.add(key)
            out.append(c)
    return out


def run_polishes(inst: Instance, starts: list[MethodResult], deadline: float, stages: Stages, info: dict) -> list:
    """The polish of each start in turn, the time left shared equally among those still to run."""
    out = []
    for i, start in enumerate(starts):
        if stop.requested():
            break
        share = (deadline - time.monotonic()) / (len(starts) - i)
        out += run_polish(inst, start, share, stages, info)
    if out:
        info["polish_objective"] = min(r.objective for r in out)
    return out


def run_polish(inst: Instance, start: MethodResult, time_left: float, stages: Stages, info: dict) -> list:
    """The pair-MIP polish of one plan on its own shapes: [] or [its result]."""
    if time_left < 2.0:
        return []
    with stages.timed("polish"):
        try:
            with stop.interruptible():
                plans = polish(inst, start.shapes, start.plans, start.objective, time_left)
        except KeyboardInterrupt:           # stopped: keep the best plan so far
            log.info("polish: stopped early")
            plans = None
        except AssertionError as err:        # a MIP answer that does not place every request: keep the rest
            log.warning("polish: skipped (%s)", err)
            plans = None
    if plans is None:
        return []
    result = evaluate(inst, "cpsat", plans, 0.0, stages)
    info["polish_time_s"] = stages["polish"]
    base = start.solver.get("plan_source", "cpsat").split(" (")[0]
    result.solver["plan_source"] = f"{base}, assignment re-solved by the pair MIP (polish)"
    log.info("polish: objective %.6g (was %.6g)", result.objective, start.objective)
    return [result]


def build_model(inst: Instance, heuristics: list[MethodResult], best_h: MethodResult | None):
    """Candidate shapes (the model's space), groups and the CP-SAT model, hinted with the best heuristic plan."""
    cfg = inst.cfg
    keep = set().union(*[set(h.shapes) for h in heuristics]) if heuristics else set()
    prompts = np.concatenate([r.fit for r in inst.requests.values()])
    shapes = np.array(prune_shapes(inst.all_shapes, prompts, keep, cfg.solver.max_candidates), dtype=np.int64)
    space = model_space(cfg, shapes, inst.requests, cfg.solver.max_candidates)
    hinted = [h for h in heuristics if h.feasible] or ([best_h] if best_h else [])
    hint = min(hinted, key=rank_key) if hinted else None
    caps = {n: batch_caps(r, hint.plans[n]) if hint else () for n, r in inst.requests.items()}
    groups = {n: group_bucket(r, space.levels, cfg.solver.gen_caps, caps[n], level=space.level_of(r))
              for n, r in inst.requests.items()}
    model = ShapeModel(cfg, space, groups, cfg.objective.weight_map(), best_h.objective if best_h else 1.0,
                       inst.requests)
    if hint:
        model.add_hint({n: plan_to_classes(cfg, inst.requests[n], space, groups[n], hint.plans[n]) for n in groups})
        log.info("cpsat: hint from %s (objective %.6g)", hint.method, hint.objective)
    log.info("cpsat: model with %d variables, %d constraints, %d candidate shapes%s",
             len(model.model.proto.variables), len(model.model.proto.constraints), len(shapes),
             f", {len(space.levels)} decode-context levels" if space.context_mode else "")
    return space, groups, model


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
