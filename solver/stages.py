"""The search stages run_cpsat strings together (solver/pipeline.py), each with its share of the time: the global
pair-LP bound, the shape-set LNS, the CP-SAT model and its plan, the pair-MIP polish; and the figures each adds
to the report."""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from models.config import AUTO_POLISH_SHARE, Config
from models.cost import Costs
from models.cpsat_model import ShapeModel
from models.instance import Instance, batch_caps, group_bucket, model_space, prune_shapes
from models.plan import BucketPlan
from solver import stop
from solver.certify import proven_before_search
from solver.evaluate import evaluate, rank_key
from solver.global_bound import global_bound
from solver.lns import LnsSettings, ShapeSetSearch, run_lns
from solver.polish import polish
from solver.postprocess import classes_to_plan, place_first_use, plan_to_classes
from solver.results import MethodResult, Stages

log = logging.getLogger(__name__)
POLISH_SETS = 2          # distinct shape sets the polish re-solves (see polish_starts)
POLISH_EXTRA_USE = 0.5   # least LP use (z) of a shape extra_shape adds to the best plan's polish
POLISH_WITHIN = 0.1      # a second set is polished when its plan costs at most this much more than the best
LONG_RUN_S = 300.0       # from this time limit on, the pair-LP bound runs by default outside context mode too
LONG_BOUND_SHARE = 0.65  # its share then (the polish's auto share is then LONG_POLISH_SHARE, CP-SAT keeps the rest)
POLISH_SHARE = AUTO_POLISH_SHARE   # the polish's auto share (the config's share check assumes it too)
LONG_POLISH_SHARE = 0.3  # ... in runs of LONG_RUN_S or more whose bound share is auto (outside context mode)
SHORT_BOUND_SHARE = 0.4   # its share in shorter runs, from SHORT_RUN_S on (24 s of a 60 s run: the 12-cap LP
                          # of the default config converges in 12-21 s, by machine)
SHORT_RUN_S = 30.0
MIN_CPSAT_SHARE = 0.05    # what an auto bound share leaves CP-SAT at least
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


def bound_share(cfg: Config, time_limit: float) -> float:
    """The pair-LP bound's share: as configured, or (auto) 0.2 in spec 4b context mode, where its LP converges
    within seconds over every distinct gen (static_graph: 2.2283e11 beside a 2.2292e11 plan); elsewhere
    LONG_BOUND_SHARE of runs of at least LONG_RUN_S, SHORT_BOUND_SHARE from SHORT_RUN_S on (time for the coarse LP of
    its cap ladder; measured on the default config: 12 caps converge to 8.61e11 in 14 s, beside the pre-search
    bound's 7.79e11; CP-SAT's own search, whose time this is, added nothing there) and 0 below; an auto share never leaves
    CP-SAT less than MIN_CPSAT_SHARE beside the polish and the LNS."""
    if cfg.solver.bound_share is not None:
        return cfg.solver.bound_share
    if Costs(cfg.cost_model).context_mode:
        return 0.2
    auto = LONG_BOUND_SHARE if time_limit >= LONG_RUN_S else SHORT_BOUND_SHARE if time_limit >= SHORT_RUN_S else 0.0
    return min(auto, max(0.0, spare_share(cfg, time_limit)))


def spare_share(cfg: Config, time_limit: float) -> float:
    """The share of the run neither the polish nor the LNS takes, less CP-SAT's least (MIN_CPSAT_SHARE)."""
    return round(1 - MIN_CPSAT_SHARE - polish_share(cfg, time_limit) - lns_share(cfg), 9)


def polish_share(cfg: Config, time_limit: float) -> float:
    """The polish's share: as configured, or (auto) POLISH_SHARE, and LONG_POLISH_SHARE in runs of LONG_RUN_S or more
    whose bound share is auto outside context mode (measured on the default config at 600 s: the polish's plan is
    1.057e12 after 30 s as after 300 s, while the bound's 48-cap LP, 50 s a round there, reaches 9.18e11 in 0.45 of
    the time and 9.57e11 in 0.65)."""
    if cfg.solver.polish_share is not None:
        return cfg.solver.polish_share
    long = time_limit >= LONG_RUN_S and cfg.solver.bound_share is None and not Costs(cfg.cost_model).context_mode
    return LONG_POLISH_SHARE if long else POLISH_SHARE


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


def bound_overrun(cfg: Config, time_limit: float) -> float:
    """The most the bound stage may run over its share (an LP close to converging, see global_bound.grace_s): what
    leaves CP-SAT MIN_CPSAT_SHARE beside the polish, the LNS and the bound (default config: 3 s of a 60 s run,
    none at 600 s, where the bound's and the polish's auto shares leave CP-SAT just that)."""
    return max(0.0, round(spare_share(cfg, time_limit) - bound_share(cfg, time_limit), 9) * time_limit)


def run_bound_stage(inst: Instance, heuristics: list[MethodResult], time_s: float, stages: Stages,
                    presearch_bound: float = -math.inf, overrun_s: float = 0.0):
    """The global pair-LP bound (solver/global_bound.py), seeded with the best heuristic plan, in `time_s` and at
    most `overrun_s` more; None when off or when the pre-search bound already proves that plan."""
    best = min(heuristics, key=rank_key) if heuristics else None
    if time_s <= 0 or proven_before_search(best, (presearch_bound,)):
        return None
    with stages.timed("lp_bound"):
        return global_bound(inst, best.objective if best else 1.0, time_s, bound_caps(inst.cfg),
                            inst.cfg.solver.log_progress, best.plans if best else None, overrun_s)


def lp_info(info: dict, lp) -> None:
    """The pair-LP bound stage's figures in the report."""
    if lp is not None:
        info.update({"lp_bound": lp.bound, "lp_value": lp.lp_value, "lp_converged": lp.converged,
                     "lp_rounds": lp.rounds, "lp_pairs": lp.columns, "lp_cuts": lp.cuts, "lp_time_s": lp.time_s,
                     "lp_batch_bound": lp.batch_bound,
                     "lp_ladder": [{"caps": c, "bound": b, "converged": v, "time_s": t} for c, b, v, t in lp.ladder]})


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


def lns_info(info: dict, search: ShapeSetSearch | None) -> None:
    """The LNS figures in the report: best objective and shapes, sets evaluated, moves, restarts."""
    if search is None or search.best is None:
        return
    info.update({"lns_objective": search.best.objective, "lns_shapes": list(search.best.shapes),
                 "lns_limits_met": not search.best.key[0], "lns_sets": len(search.evaluator.sets),
                 "lns_steps": search.steps, "lns_moves": search.moves, "lns_restarts": search.restarts})


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


def stopped_by_its_own_handler(sol, limit_s: float, det: bool) -> bool:
    """CP-SAT caught a Ctrl-C itself: only when the search ran without the guard (which sees every signal, see
    solver/stop.py) and CP-SAT ended well before its limit. Under the guard an early end is CP-SAT's own
    (e.g. `Stopped after presolve` when the presolve eats the time limit), not a stop."""
    if stop.search_was_guarded():
        return False
    return sol.interrupted or (sol.status == "UNKNOWN" and early(sol.solve_time_s, limit_s) and not det)


def early(used_s: float, limit_s: float) -> bool:
    """CP-SAT ended well before its time limit: by 5% and by a second at least (its clock and ours start
    a fraction of a second apart, so a short search that runs to its limit is not taken for a stop)."""
    return used_s < min(0.95 * limit_s, limit_s - 1.0)


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


def extra_shape(lp, shapes) -> list[int]:
    """The candidate shape outside `shapes` the bound's LP uses most ([] when it uses none to POLISH_EXTRA_USE), for
    the polish of the best plan to choose from beside that plan's own (measured on the default config: the 12-cap LP
    has z = 1.0 on 1856, outside dp's five shapes; the pair MIP over those five and 1856 reaches 1.0552e12 in 15 s
    and 1.0480e12 in 30 s, against 1.0570e12 on the five; with two extra shapes, 832 and 1856, it stays at its
    start for 30 s)."""
    if lp is None or not lp.shape_use:
        return []
    own = set(shapes)
    outside = {s: v for s, v in lp.shape_use.items() if s not in own}
    best = max(outside, key=outside.get, default=None)
    return [best] if best is not None and outside[best] >= POLISH_EXTRA_USE else []


def run_polishes(inst: Instance, starts: list[MethodResult], deadline: float, stages: Stages, info: dict,
                 lp=None) -> list:
    """The polish of each start in turn, the time left shared equally among those still to run; the first (the
    best plan) may also choose the shape extra_shape picks from the bound's LP."""
    out = []
    for i, start in enumerate(starts):
        if stop.requested():
            break
        share = (deadline - time.monotonic()) / (len(starts) - i)
        extra = extra_shape(lp, start.shapes) if i == 0 else []
        if extra:
            info["polish_extra_shapes"] = extra                  # in the report: the shape the polish could add
        out += run_polish(inst, start, share, stages, info, extra)
    if out:
        info["polish_objective"] = min(r.objective for r in out)
    return out


def run_polish(inst: Instance, start: MethodResult, time_left: float, stages: Stages, info: dict,
               extra: list[int] = ()) -> list:
    """The pair-MIP polish of one plan on its own shapes and the `extra` ones (the plan is the MIP's first
    incumbent): [] or [its result]."""
    if time_left < 2.0:
        return []
    with stages.timed("polish"):
        try:
            with stop.interruptible():
                if extra:
                    log.info("polish: shapes %s and %s from the bound's LP", start.shapes, extra)
                plans = polish(inst, sorted(set(start.shapes) | set(extra)), start.plans, start.objective, time_left)
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
