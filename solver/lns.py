"""Large-neighbourhood search over shape sets (issue 16, item 4).

The state is a shape set: sorted `seq_align` values from `inst.all_shapes`, at most
`shapes.max_unique`, the largest the least candidate holding the longest fit (a larger top is never
better). A set is judged by re-solving the assignment on it with the gen DP of `dp_plans` (Lagrange
multipliers on the limits), ranked like every plan: limits met first, then least relative excess,
then objective. Bucket plans depend only on the shapes a bucket's requests round up to, so they are
cached per (bucket, shapes used): a move far from a bucket's prompts costs that bucket nothing.

Each step samples a batch of unseen neighbours of the current set (add, drop, shift by 1-3 levels,
merge two adjacent shapes, swap in a shape of another good set), evaluates them (in this process, a
local pool, or as Ray tasks through `solver.parallel.map_tasks`: `LnsSettings.backend`) and moves to the
best when it ranks better than the current set. With Ray the instance goes into the object store once per
search (`RaySession`), and every bucket plan of a step is one task.
After `patience` steps without a move the search restarts from one of the best sets found,
perturbed by a few random moves. All randomness comes from one seeded generator, so a run is
deterministic for a seed and a number of evaluated sets; the deadline only cuts it short.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from models.instance import Instance
from models.plan import BucketPlan
from solver import stop
from solver.batching import round_up
from solver.heuristics import LagrangeBatcher, bucket_objective, lagrange_search, weighted_shape_dp_counts
from solver.parallel import RaySession, Shared, map_tasks
from solver.postprocess import plan_figures
from solver.verify import BucketMetrics, plan_objective, rank

log = logging.getLogger(__name__)
MOVES = ("add", "drop", "shift", "merge", "swap")
IDLE_STEPS = 25          # steps in a row drawing no unseen set: the search has seen what it can reach


@dataclass
class LnsSettings:
    """How the search runs."""

    seed: int = field(default=0, metadata={"description": "seed of the move generator"})
    batch: int = field(default=4, metadata={"description": "neighbours sampled and evaluated per step"})
    patience: int = field(default=3, metadata={"description": "steps without a move before a restart"})
    kicks: int = field(default=3, metadata={"description": "random moves applied to a restart's set"})
    elite: int = field(default=6, metadata={"description": "best sets kept as restart points and swap sources"})
    max_sets: int | None = field(default=None, metadata={"description": "stop after this many sets evaluated"})
    jobs: int = field(default=1, metadata={"description": "local processes evaluating bucket plans (1 = this one)"})
    backend: str = field(default="local", metadata={"description": "local (this process, or `jobs` processes) or "
                                                                   "ray (one Ray task per bucket plan)"})
    address: str | None = field(default=None, metadata={"description": "Ray cluster address (None: a local Ray)"})
    log_progress: bool = field(default=True, metadata={"description": "log incumbent, sets and elapsed"})


@dataclass
class Evaluated:
    """One shape set with its rank key and plans."""

    shapes: tuple[int, ...] = field(metadata={"description": "the set, ascending"})
    key: tuple = field(metadata={"description": "rank key: (limits broken, relative excess, objective)"})
    plans: dict[str, BucketPlan] = field(metadata={"description": "gen-DP plan per bucket"})

    @property
    def objective(self) -> float:
        return self.key[2]


@dataclass
class LnsResult:
    """What the search found."""

    best: Evaluated | None = field(metadata={"description": "the best set found"})
    elite: list[Evaluated] = field(metadata={"description": "the best distinct sets, best first"})
    sets: int = field(metadata={"description": "shape sets evaluated (cache hits not counted)"})
    steps: int = field(metadata={"description": "search steps taken"})
    moves: int = field(metadata={"description": "steps that moved to a better set"})
    restarts: int = field(metadata={"description": "restarts from a perturbed elite set"})
    elapsed_s: float = field(metadata={"description": "wall time of the search"})
    search: "ShapeSetSearch | None" = field(default=None, repr=False,
                                            metadata={"description": "the search, to continue it later"})


def bucket_plan(inst: Instance, name: str, shapes: tuple[int, ...]) -> tuple[BucketPlan, BucketMetrics]:
    """The gen-DP plan of one bucket on `shapes` (as in `dp_plans`) and its metrics."""
    weights = inst.cfg.objective.weight_map()
    req = inst.requests[name]
    batcher = LagrangeBatcher(inst, name, round_up(req.fit, shapes), weights)
    plan = lagrange_search(batcher, lambda m: bucket_objective(m, weights))
    return plan, plan_figures(inst.cfg, req, plan)


class SetEvaluator:
    """Shape sets to (rank key, plans) through per-bucket cached gen-DP plans."""

    def __init__(self, inst: Instance, jobs: int = 1, backend: str = "local", address: str | None = None):
        self.inst, self.jobs = inst, jobs
        self.session = RaySession(address) if backend == "ray" else None
        self.weights = inst.cfg.objective.weight_map()
        self.limits = {b.name: dict(b.limits.items()) for b in inst.cfg.buckets}
        self.buckets: dict[tuple, tuple[BucketPlan, BucketMetrics]] = {}
        self.sets: dict[tuple[int, ...], Evaluated] = {}

    def used(self, name: str, shapes: tuple[int, ...]) -> tuple[int, ...]:
        """The shapes of `shapes` that some request of bucket `name` rounds up to."""
        return tuple(int(s) for s in np.unique(round_up(self.inst.requests[name].fit, shapes)))

    def evaluate(self, sets: list[tuple[int, ...]], deadline: float = math.inf) -> list[Evaluated]:
        """The sets evaluated (cached ones read back), in the order given; past `deadline` the sets
        not complete yet are left out (at most one bucket plan runs over it)."""
        todo = []
        for s in sets:
            for name in self.inst.requests:
                key = (name, self.used(name, s))
                if key not in self.buckets and key not in todo:
                    todo.append(key)
        self.solve_buckets(todo, deadline)
        return [self.assemble(s) for s in sets if all((n, self.used(n, s)) in self.buckets for n in self.inst.requests)]

    def solve_buckets(self, todo: list[tuple], deadline: float) -> None:
        if len(todo) <= 1 or (self.session is None and self.jobs <= 1):
            for name, used in todo:
                if time.monotonic() >= deadline:
                    return
                self.buckets[(name, used)] = bucket_plan(self.inst, name, used)
            return
        items = [(Shared("inst"), name, used) for name, used in todo]
        if self.session is None:
            tasks = map_tasks(bucket_plan, items, "local", jobs=self.jobs, shared={"inst": self.inst})
        else:
            tasks = map_tasks(bucket_plan, items, "ray", jobs=0, shared=self.session.share({"inst": self.inst}),
                              verbose=False)
        try:
            for done in tasks:
                if done.error:
                    raise RuntimeError(f"lns: bucket plan failed: {done.error}")
                self.buckets[todo[done.index]] = done.value
                if time.monotonic() >= deadline:
                    return
        finally:
            tasks.close()

    def close(self) -> None:
        """Shut down the Ray instance this evaluator started (a cluster it connected to stays up)."""
        if self.session is not None:
            self.session.close()

    def assemble(self, shapes: tuple[int, ...]) -> Evaluated:
        if shapes in self.sets:
            return self.sets[shapes]
        plans, metrics = {}, {}
        for name in self.inst.requests:
            plans[name], metrics[name] = self.buckets[(name, self.used(name, shapes))]
        _, _, objective = plan_objective(self.inst.cfg, metrics, self.weights)
        self.sets[shapes] = Evaluated(shapes, rank(metrics, self.limits, objective), plans)
        return self.sets[shapes]


class ShapeSetSearch:
    """The LNS state: current set, elite sets, the move generator."""

    def __init__(self, inst: Instance, settings: LnsSettings, seeds: list[list[int]]):
        self.inst, self.settings = inst, settings
        self.rng = np.random.default_rng(settings.seed)
        levels = np.asarray(inst.all_shapes, dtype=np.int64)
        top = int(np.searchsorted(levels, inst.max_prompt))
        self.levels = levels[: top + 1]            # candidates above the least covering one never help
        self.top = int(self.levels[-1])
        self.k = inst.cfg.shapes.max_unique
        self.evaluator = SetEvaluator(inst, settings.jobs, settings.backend, settings.address)
        self.pool = sorted({int(s) for seed in seeds for s in seed if s <= self.top})
        self.seeds = [self.normal(seed) for seed in seeds]
        self.current: Evaluated | None = None
        self.elite: list[Evaluated] = []
        self.steps = self.moves = self.restarts = self.stuck = self.idle = 0
        inner = len(self.levels) - 1
        self.space = sum(math.comb(inner, j) for j in range(min(self.k - 1, inner) + 1))
        self.batch = settings.batch
        if self.evaluator.session is not None:      # a bigger cluster: more neighbours per step, one task each
            self.batch = max(settings.batch, self.evaluator.session.cpus() // len(inst.requests))

    # --- sets and moves ------------------------------------------------------------------------

    def normal(self, shapes) -> tuple[int, ...]:
        """A valid set from any shapes: snapped onto candidates at or above, the top added, at most k
        (the smallest dropped first: their requests move up, which stays valid)."""
        snapped = {int(self.levels[min(int(np.searchsorted(self.levels, s)), len(self.levels) - 1)])
                   for s in shapes}
        below = sorted(s for s in snapped if s < self.top)
        return tuple(below[max(len(below) - (self.k - 1), 0):] if self.k > 1 else []) + (self.top,)

    def neighbour(self, shapes: tuple[int, ...]) -> tuple[int, ...] | None:
        """One random move applied to `shapes`, or None when the move drawn does not apply."""
        move = MOVES[int(self.rng.integers(len(MOVES)))]
        inner = [s for s in shapes if s != self.top]
        free = [int(s) for s in self.levels[:-1] if int(s) not in shapes]
        if move == "add" and len(shapes) < self.k and free:
            return self.normal(shapes + (self.pick(free),))
        if move == "drop" and inner:
            gone = self.pick(inner)
            return self.normal(tuple(s for s in shapes if s != gone))
        if move == "shift" and inner:
            return self.shift(shapes, self.pick(inner))
        if move == "merge" and len(shapes) >= 2:
            return self.merge(shapes, free)
        if move == "swap":
            return self.swap(shapes)
        return None

    def pick(self, values: list[int]) -> int:
        return int(values[int(self.rng.integers(len(values)))])

    def shift(self, shapes: tuple[int, ...], s: int) -> tuple[int, ...] | None:
        """`s` moved up or down by 1-3 candidate levels (not onto the top or another member)."""
        step = int(self.rng.integers(1, 4)) * (1 if self.rng.random() < 0.5 else -1)
        pos = int(np.searchsorted(self.levels, s)) + step
        if not 0 <= pos < len(self.levels) - 1 or int(self.levels[pos]) in shapes:
            return None
        return self.normal(tuple(x for x in shapes if x != s) + (int(self.levels[pos]),))

    def merge(self, shapes: tuple[int, ...], free: list[int]) -> tuple[int, ...]:
        """Two adjacent shapes become the upper one (its requests fit); the freed slot, when the set was
        full, goes to a random free level (merge and split elsewhere)."""
        i = int(self.rng.integers(len(shapes) - 1))
        out = shapes[:i] + shapes[i + 1:]
        if len(shapes) == self.k and free:
            out = out + (self.pick(free),)
        return self.normal(out)

    def swap(self, shapes: tuple[int, ...]) -> tuple[int, ...] | None:
        """A shape of another good set (seeds and elite) in place of this set's nearest one (or added)."""
        sources = sorted({s for e in self.elite for s in e.shapes} | set(self.pool))
        fresh = [s for s in sources if s not in shapes and s != self.top]
        if not fresh:
            return None
        new = self.pick(fresh)
        inner = [s for s in shapes if s != self.top]
        if len(shapes) < self.k and (not inner or self.rng.random() < 0.5):
            return self.normal(shapes + (new,))
        if not inner:
            return None
        nearest = min(inner, key=lambda s: (abs(s - new), s))
        return self.normal(tuple(s for s in shapes if s != nearest) + (new,))

    def sample(self, around: tuple[int, ...], count: int, tries: int = 60) -> list[tuple[int, ...]]:
        """Up to `count` distinct unseen neighbours of `around`, in at most max(tries, 15 * count) draws."""
        out = []
        for _ in range(max(tries, 15 * count)):
            if len(out) >= count:
                break
            n = self.neighbour(around)
            if n is not None and n != around and n not in self.evaluator.sets and n not in out:
                out.append(n)
        return out

    # --- the search ----------------------------------------------------------------------------

    def remember(self, found: list[Evaluated]) -> None:
        pool = {e.shapes: e for e in self.elite + found}
        self.elite = sorted(pool.values(), key=lambda e: (e.key, e.shapes))[: self.settings.elite]

    @property
    def best(self) -> Evaluated | None:
        return self.elite[0] if self.elite else None

    def start(self, deadline: float) -> None:
        """Evaluate the seeds (at least one, whatever the deadline); the best is the current set."""
        seeds = sorted(set(self.seeds), key=self.seeds.index)
        found = self.evaluator.evaluate(seeds[:1]) + self.evaluator.evaluate(seeds[1:], deadline)
        self.remember(found)
        self.current = self.best

    @property
    def exhausted(self) -> bool:
        """Every set was evaluated, or no unseen set was drawn in IDLE_STEPS steps in a row."""
        return len(self.evaluator.sets) >= self.space or self.idle >= IDLE_STEPS

    def step(self, deadline: float = math.inf) -> None:
        """One sampled batch around the current set; move, or restart when stuck."""
        self.steps += 1
        batch = self.sample(self.current.shapes, self.batch)
        self.idle = 0 if batch else self.idle + 1
        found = self.evaluator.evaluate(batch, deadline) if batch else []
        self.remember(found)
        better = min(found, key=lambda e: e.key, default=None)
        if better is not None and better.key < self.current.key:
            self.current, self.stuck = better, 0
            self.moves += 1
            return
        self.stuck += 1
        if self.stuck >= self.settings.patience or not batch:
            self.restart(deadline)

    def restart(self, deadline: float = math.inf) -> None:
        """From a random elite set, a few random moves (each kept only if it applies)."""
        self.restarts += 1
        self.stuck = 0
        shapes = self.elite[int(self.rng.integers(len(self.elite)))].shapes
        for _ in range(self.settings.kicks):
            n = self.neighbour(shapes)
            shapes = n if n is not None else shapes
        found = self.evaluator.evaluate([shapes], deadline)
        if found:
            self.current = found[0]
            self.remember(found)

    def close(self) -> None:
        """Release the evaluator's Ray instance (when it started one)."""
        self.evaluator.close()

    def result(self, elapsed: float) -> LnsResult:
        return LnsResult(self.best, list(self.elite), len(self.evaluator.sets), self.steps, self.moves,
                         self.restarts, elapsed, self)


def seed_sets(inst: Instance, extra: list[list[int]] = ()) -> list[list[int]]:
    """Starting sets: any given sets first, then the shape DP's best set of every count (dp's
    candidates), in the order of the DP's own estimate."""
    per_count = weighted_shape_dp_counts(inst, inst.cfg.objective.weight_map())
    return [list(s) for s in extra] + [list(v[0]) for v in sorted(per_count.values(), key=lambda v: v[1])]


def run_lns(inst: Instance, deadline: float, settings: LnsSettings | None = None,
            extra_seeds: list[list[int]] = (), search: ShapeSetSearch | None = None) -> LnsResult:
    """Search shape sets until `deadline` (time.monotonic()), `settings.max_sets` or a stop request.
    `search` continues an earlier search (its cache, elite and generator) with more time; a Ctrl-C
    inside (KeyboardInterrupt, with the stop handlers raising) ends it with the best found so far."""
    start = time.monotonic()
    settings = settings or LnsSettings()
    if search is None:
        search = ShapeSetSearch(inst, settings, seed_sets(inst, extra_seeds))
        search.start(deadline)
    else:
        more = sorted({search.normal(s) for s in extra_seeds})
        search.remember(search.evaluator.evaluate(more, deadline))
    last = -math.inf
    try:
        while time.monotonic() < deadline and not stop.requested() and not search.exhausted and \
                (settings.max_sets is None or len(search.evaluator.sets) < settings.max_sets):
            before = search.best.key
            search.step(deadline)
            now = time.monotonic()
            if settings.log_progress and (search.best.key < before or now - last >= 2.0):
                last = now
                report(search, now - start)
    except KeyboardInterrupt:
        log.info("lns: stopped early")
    return search.result(time.monotonic() - start)


def report(search: ShapeSetSearch, elapsed: float) -> None:
    best = search.best
    held = "" if not best.key[0] else "  (limits broken)"
    log.info("lns  incumbent %.6g%s  sets %d  elapsed %.1fs", best.objective, held, len(search.evaluator.sets),
             elapsed)
