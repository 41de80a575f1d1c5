"""The CP-SAT model: shape selection and request-to-class assignment, jointly.

Classes are (shape level i, gen cap level j). Requests of a group (i0, j0) reach a class
(i >= i0, j >= j0) through two monotone flows, first up the shapes, then up the gen caps, so
the model has O(shapes x caps) variables per bucket whatever the number of requests:

    counts[i, j] + u[i-1, j] = v[i, j] + u[i, j]      (prompt direction, gen level j)
    v[i, j]      + f[i, j-1] = m[i, j] + f[i, j]      (gen direction, at shape i)

Every assignment decomposes into such paths and every flow into assignments, so the flows
are exact. Linking to the shape booleans is written per cell (tight, see MODEL_NOTES).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from models.config import Config
from models.cost import Costs
from models.instance import BucketGroups, limit_rhs

log = logging.getLogger(__name__)
SCALE = 1.0e12          # the scaled objective of the reference plan is about this


@dataclass
class ClassData:
    """Per bucket, per class (i, j): what one member or one batch adds."""

    per_request: np.ndarray = field(metadata={"description": "cost of one member"})
    latency: np.ndarray = field(metadata={"description": "latency of a batch of this class (ms)"})
    tokens: np.ndarray = field(metadata={"description": "seq_align + cap: pad tokens + real tokens per member"})
    capacity: np.ndarray = field(metadata={"description": "members per batch at most (0 = class unusable)"})
    reach: np.ndarray = field(metadata={"description": "requests that may join this class"})
    up: np.ndarray = field(metadata={"description": "requests of gen level j with shape level <= i"})


def class_data(cfg: Config, costs: Costs, shapes: np.ndarray, g: BucketGroups, limits: dict) -> ClassData:
    """Per class (shape level i, gen cap level j) of one bucket: member cost, batch latency, capacity."""
    s = np.asarray(shapes)[:, None].astype(np.float64)
    c = g.caps[None, :].astype(np.float64)
    lat = costs.latency(s, c)
    cap = np.full(lat.shape, cfg.batching.max_batch_size, dtype=np.int64)
    if cfg.batching.max_batch_tokens:
        cap = np.minimum(cap, cfg.batching.max_batch_tokens // (np.asarray(shapes)[:, None] + g.caps[None, :]))
    if limits.get("max_latency_ms") is not None:
        cap = np.where(lat > limits["max_latency_ms"], 0, cap)
    up = np.cumsum(g.counts, axis=0)
    reach = np.cumsum(up, axis=1)
    return ClassData(costs.per_request(s, c), lat, (s + c).astype(np.int64), cap, reach, up)


@dataclass
class ModelSolution:
    """What the search found, on the model's terms."""

    status: str
    objective: float | None
    bound: float
    solve_time_s: float
    use: np.ndarray | None = None
    v: dict[str, np.ndarray] = field(default_factory=dict)
    m: dict[str, np.ndarray] = field(default_factory=dict)
    k: dict[str, np.ndarray] = field(default_factory=dict)
    interrupted: bool = False


class Progress(cp_model.CpSolverSolutionCallback):
    """Streams incumbent, bound, gap and elapsed time while CP-SAT searches."""

    def __init__(self, to_real, enabled: bool):
        super().__init__()
        self.to_real, self.enabled = to_real, enabled
        self.start = time.monotonic()
        self.best, self.bound, self.last_print = None, None, 0.0

    def on_solution_callback(self):
        self.best = self.to_real(self.objective_value)
        self.bound = self.to_real(self.best_objective_bound)
        self.report(force=True)

    def on_bound(self, bound):
        self.bound = self.to_real(bound)
        self.report(force=False)

    def report(self, force: bool):
        now = time.monotonic() - self.start
        if not self.enabled or (not force and now - self.last_print < 2.0):
            return
        self.last_print = now
        gap = (self.best - self.bound) / abs(self.best) if self.best else float("nan")
        inc = f"{self.best:.6g}" if self.best is not None else "none"
        log.info("cpsat  incumbent %s  bound %.6g  gap %.3f%%  elapsed %.1fs", inc, self.bound, 100 * gap, now)


class ShapeModel:
    """Builds the CP-SAT model from preprocessed instance data and solves it."""

    def __init__(self, cfg: Config, shapes: np.ndarray, groups: dict[str, BucketGroups],
                 weights: dict[str, float], scale_ref: float):
        self.cfg, self.costs = cfg, Costs(cfg.cost_model)
        self.shapes = np.asarray(shapes, dtype=np.int64)
        self.groups = groups
        self.weights = weights
        self.limits = {b.name: dict(b.limits.items()) for b in cfg.buckets}
        # rhs[bucket][limit]: each limit as a sum over members or batches (see limit_rhs)
        self.rhs = {name: limit_rhs(self.limits[name], g) for name, g in groups.items()}
        self.data = {name: class_data(cfg, self.costs, self.shapes, g, self.limits[name]) for name, g in groups.items()}
        self.scale = SCALE / max(scale_ref, 1e-9)
        self.model = cp_model.CpModel()
        # slack[(bucket, limit)]: how far a limit is exceeded; priced far above any plan's objective, so
        # it is 0 whenever the limits can be met, and the bound stays valid for the hard-limit problem
        self.slack: dict[tuple[str, str], cp_model.IntVar] = {}
        self.limit_rhs: dict[tuple[str, str], int] = {}
        self._make_variables()
        self._add_shape_count()
        for name in groups:
            self._add_prompt_flow(name)
            self._add_gen_flow(name)
            self._add_batches(name)
            self._add_latency_limits(name)
            self._add_pad_limits(name)
            self._add_cost_limit(name)
            self._add_sequential_limit(name)
        self._add_objective()

    # --- variables ------------------------------------------------------------------------
    def _int(self, ub: int, name: str):
        return self.model.new_int_var(0, int(ub), name) if ub > 0 else 0

    def _make_variables(self):
        P = len(self.shapes)
        # use[i]: shape i is compiled
        self.use = [self.model.new_bool_var(f"use[{s}]") for s in self.shapes]
        self.u, self.v, self.f, self.m, self.k = {}, {}, {}, {}, {}
        for name, g in self.groups.items():
            d, L = self.data[name], len(g.caps)
            for i in range(P):
                for j in range(L):
                    key = (name, i, j)
                    # u[b, i, j]: requests of gen level j passing shape level i upward (not stopping)
                    self.u[key] = self._int(d.up[i, j] if i < P - 1 else 0, f"u{key}")
                    # v[b, i, j]: requests of gen level j that stop at shape i
                    self.v[key] = self._int(d.up[i, j], f"v{key}")
                    # f[b, i, j]: requests at shape i passing gen cap j upward
                    self.f[key] = self._int(d.reach[i, j] if j < L - 1 else 0, f"f{key}")
                    usable = d.capacity[i, j] > 0
                    # m[b, i, j]: members of class (shape i, gen cap j)
                    self.m[key] = self._int(d.reach[i, j] if usable else 0, f"m{key}")
                    # k[b, i, j]: batches of class (shape i, gen cap j)
                    self.k[key] = self._int(d.reach[i, j] if usable else 0, f"k{key}")

    def cells(self, name: str):
        return [(name, i, j) for i in range(len(self.shapes)) for j in range(len(self.groups[name].caps))]

    # --- constraints ----------------------------------------------------------------------
    def _add_shape_count(self):
        self.model.add(sum(self.use) <= self.cfg.shapes.max_unique)

    def _add_prompt_flow(self, name):
        g, d = self.groups[name], self.data[name]
        for (_, i, j) in self.cells(name):
            below = self.u[(name, i - 1, j)] if i else 0
            self.model.add(int(g.counts[i, j]) + below == self.v[(name, i, j)] + self.u[(name, i, j)])
            if d.up[i, j] > 0:
                self.model.add(self.v[(name, i, j)] <= int(d.up[i, j]) * self.use[i])

    def _add_gen_flow(self, name):
        d = self.data[name]
        for (_, i, j) in self.cells(name):
            below = self.f[(name, i, j - 1)] if j else 0
            self.model.add(self.v[(name, i, j)] + below == self.m[(name, i, j)] + self.f[(name, i, j)])
            if d.reach[i, j] > 0 and d.capacity[i, j] > 0:
                self.model.add(self.m[(name, i, j)] <= int(d.reach[i, j]) * self.use[i])

    def _add_batches(self, name):
        d = self.data[name]
        for key in self.cells(name):
            _, i, j = key
            if d.capacity[i, j] > 0 and d.reach[i, j] > 0:
                self.model.add(self.m[key] <= int(d.capacity[i, j]) * self.k[key])
                self.model.add(self.k[key] <= self.m[key])

    def _add_latency_limits(self, name):
        d, n = self.data[name], self.groups[name].size
        for key, pct in (("p95_latency_ms", 95), ("p99_latency_ms", 99)):
            limit = self.limits[name].get(key)
            if limit is None:
                continue
            slow = [self.m[c] for c in self.cells(name) if d.latency[c[1], c[2]] > limit]
            self._limit(name, key, sum(slow), int(self.rhs[name][key]), n)

    def _add_pad_limits(self, name):
        g, d = self.groups[name], self.data[name]
        if "pad" in self.rhs[name]:
            total = sum(int(d.tokens[i, j]) * self.m[(name, i, j)] for (_, i, j) in self.cells(name))
            self._limit(name, "pad", total, int(self.rhs[name]["pad"]), int(d.tokens.max()) * g.size)

    def _add_cost_limit(self, name):
        budget = self.limits[name].get("cost")
        if budget is None:
            return
        d, oh = self.data[name], self.cfg.cost_model.batch_overhead_cost
        scale = SCALE / max(budget, 1.0)
        total = sum(math.ceil(d.per_request[i, j] * scale) * self.m[c] + math.ceil(oh * scale) * self.k[c]
                    for c in self.cells(name) for (_, i, j) in [c])
        self._limit(name, "cost", total, math.floor(budget * scale), 1000 * math.floor(budget * scale))

    def _add_sequential_limit(self, name):
        limit = self.limits[name].get("sequential_time_ms")
        if limit is None:
            return
        d = self.data[name]
        total = sum(math.ceil(d.latency[c[1], c[2]] * 1000) * self.k[c] for c in self.cells(name))
        worst = math.ceil(float(d.latency.max()) * 1000) * self.groups[name].size
        self._limit(name, "sequential_time_ms", total, math.floor(limit * 1000), worst)

    def _limit(self, name: str, key: str, expr, rhs: int, worst: int):
        """expr <= rhs + slack; slack priced in _add_objective."""
        slack = self.model.new_int_var(0, max(int(worst), 1), f"slack[{name},{key}]")
        self.slack[(name, key)] = slack
        self.limit_rhs[(name, key)] = max(int(rhs), 1)
        self.model.add(expr <= int(rhs) + slack)

    def _add_objective(self):
        w = self.weights
        wc, wp, ws = (w.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
        oh = self.cfg.cost_model.batch_overhead_cost
        terms = []
        compile_cost = self.costs.compile(self.shapes.astype(np.float64))
        terms += [math.floor(wc * compile_cost[i] * self.scale) * self.use[i] for i in range(len(self.shapes))]
        self.constant = 0.0
        for name in self.groups:
            d = self.data[name]
            self.constant -= wp * self.groups[name].real_tokens
            for c in self.cells(name):
                _, i, j = c
                if isinstance(self.m[c], int):
                    continue
                cm = wc * d.per_request[i, j] + wp * d.tokens[i, j]
                ck = wc * oh + ws * d.latency[i, j]
                terms.append(math.floor(cm * self.scale) * self.m[c])
                terms.append(math.floor(ck * self.scale) * self.k[c])
        for key, slack in self.slack.items():
            # exceeding a limit by its own size costs 100x the reference plan's objective
            terms.append(max(1, math.ceil(100 * SCALE / self.limit_rhs[key])) * slack)
        self.model.minimize(sum(terms))

    def to_real(self, scaled: float) -> float:
        """Scaled objective -> objective units (a lower estimate: coefficients were floored)."""
        return scaled / self.scale + self.constant

    # --- hints and solving ----------------------------------------------------------------
    def add_hint(self, counts: dict):
        """Hint from a plan given per bucket as ClassCounts (see solver.postprocess.plan_to_classes)."""
        self.model.clear_hints()
        use = np.any([c.use for c in counts.values()], axis=0)
        for i, var in enumerate(self.use):
            self.model.add_hint(var, bool(use[i]))
        for name, g in self.groups.items():
            c = counts[name]
            u = np.cumsum(g.counts - c.v, axis=0)
            f = np.cumsum(c.v - c.m, axis=1)
            for (_, i, j) in self.cells(name):
                for store, values in ((self.u, u), (self.v, c.v), (self.f, f), (self.m, c.m), (self.k, c.k)):
                    var = store[(name, i, j)]
                    if not isinstance(var, int):
                        self.model.add_hint(var, int(values[i, j]))

    def solve(self, time_limit_s: float, workers: int, seed: int, progress: bool = True) -> ModelSolution:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = float(time_limit_s)
        solver.parameters.num_workers = int(workers) or 8   # a portfolio with LNS helps even on 2 cores
        solver.parameters.random_seed = int(seed)
        solver.parameters.relative_gap_limit = 1e-5
        solver.parameters.linearization_level = 2
        solver.parameters.catch_sigint_signal = True
        callback = Progress(self.to_real, progress)
        solver.best_bound_callback = callback.on_bound
        start = time.monotonic()
        status = solver.solve(self.model, callback)
        elapsed = time.monotonic() - start
        name = solver.status_name(status)
        interrupted = elapsed < 0.95 * time_limit_s and name == "FEASIBLE"
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = self.to_real(solver.best_objective_bound) if status != cp_model.INFEASIBLE else math.inf
            return ModelSolution(name, None, bound, elapsed, interrupted=interrupted)
        sol = ModelSolution(name, self.to_real(solver.objective_value), self.to_real(solver.best_objective_bound),
                            elapsed, interrupted=interrupted)
        sol.use = np.array([solver.value(x) for x in self.use], dtype=bool)
        for name_b, g in self.groups.items():
            shape = (len(self.shapes), len(g.caps))
            for store, out in ((self.v, sol.v), (self.m, sol.m), (self.k, sol.k)):
                arr = np.zeros(shape, dtype=np.int64)
                for (_, i, j) in self.cells(name_b):
                    var = store[(name_b, i, j)]
                    arr[i, j] = var if isinstance(var, int) else solver.value(var)
                out[name_b] = arr
        return sol
