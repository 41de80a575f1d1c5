"""The `current:<format>` methods: the shapes an engine runs today (imported by `--baseline-from`), with the
project's rule batching (each request at the smallest imported shape it fits, batches in arrival order),
under the same cost model and engine rules as the optimized plan."""
from __future__ import annotations

import logging
import math
import time
from functools import reduce

from models.config import Config
from models.errors import InputError
from models.instance import Instance
from models.plan import BucketPlan
from solver.heuristics import rule_plan
from solver.verify import verify_plans

log = logging.getLogger(__name__)


def relaxed_config(cfg: Config, shapes: list[int]) -> tuple[Config, list[str]]:
    """A config the imported shapes are valid under: max_unique, granularity and candidates widened
    where the setup run today goes beyond them (said in the returned notes); engine and costs unchanged."""
    notes = []
    copy = cfg.model_copy(deep=True)
    if len(shapes) > cfg.shapes.max_unique:
        notes.append(f"shapes.max_unique {cfg.shapes.max_unique} -> {len(shapes)} (the imported shapes)")
        copy.shapes.max_unique = len(shapes)
    gran = reduce(math.gcd, shapes, cfg.shapes.granularity)
    if gran != cfg.shapes.granularity:
        notes.append(f"shapes.granularity {cfg.shapes.granularity} -> {gran} (the imported shapes' common divisor)")
        copy.shapes.candidates = "auto"
        copy.shapes.granularity = gran
    elif isinstance(cfg.shapes.candidates, list) and set(shapes) - set(cfg.shapes.candidates):
        notes.append("shapes.candidates -> auto (imported shapes outside the list)")
        copy.shapes.candidates = "auto"
    return copy, notes


def check_cover(name: str, inst: Instance, shapes: list[int]) -> None:
    for req in inst.requests.values():
        if len(req) and int(req.fit.max()) > shapes[-1]:
            i = int(req.fit.argmax())
            raise InputError(f"{name}: request {req.ids[i]} of {req.bucket} (prompt_len {req.prompt[i]}) needs "
                             f"seq_align >= {req.fit[i]} under engine {inst.cfg.engine.name}, above the largest "
                             f"imported shape {shapes[-1]}")


def current_plans(inst: Instance, name: str, shapes: list[int]) -> tuple[Instance, dict[str, BucketPlan], float, dict]:
    """(instance to evaluate under, plans, seconds, report notes) of one imported shape list."""
    start = time.monotonic()
    shapes = sorted(set(int(s) for s in shapes))
    check_cover(name, inst, shapes)
    cfg, notes = relaxed_config(inst.cfg, shapes)
    cur = Instance(cfg, inst.requests) if notes else inst
    plans = rule_plan(cur, shapes)
    errors = verify_plans(cfg, inst.requests, plans)
    if errors:
        raise InputError(f"{name}: the imported shapes {shapes} break a rule of the config: {errors[0]}")
    for note in notes:
        log.info("%s: evaluated with %s", name, note)
    info = {"status": "imported", "imported_shapes": shapes, "relaxed": notes}
    return cur, plans, time.monotonic() - start, info
