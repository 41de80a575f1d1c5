"""The CP-SAT model: shape selection and request-to-class assignment, jointly.

Classes are (shape level i, gen cap level j). Requests of a group (i0, j0) reach a class
(i >= i0, j >= j0) through two monotone flows, first up the shapes, then up the gen caps, so
the model has O(shapes x caps) variables per bucket whatever the number of requests:

    counts[i, j] + u[i-1, j] = v[i, j] + u[i, j]      (prompt direction, gen level j)
    v[i, j]      + f[i, j-1] = m[i, j] + f[i, j]      (gen direction, at shape i)

Every assignment decomposes into such paths and every flow into assignments, so the flows
are exact. Linking to the shape booleans is written per cell (tight, see MODEL_NOTES).

In context mode (spec 4b: decode from the batch's longest aligned prompt, prefill and prompt padding
per request) the levels are decode contexts instead of shapes; a bucket's batches of context c need a
shape the bucket uses at or above c (`has[b, c] <= sum ub[b, i >= cover(c)]`, `ub[b, i] <= use[i]`).

Integers: every row and the objective are scaled so that no sum of |coefficient| x bound passes
2**62 (the model is validated before solving); limit rows round coefficients down and right-hand sides
up, so they relax the real limits and the bound stays a bound.
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
from models.instance import BucketGroups, Space, aligned, as_space, limit_rhs

log = logging.getLogger(__name__)
SCALE = 1.0e12          # the scaled objective of the reference plan is about this, when it fits
ROW_BUDGET = 2 ** 60    # sum of |coefficient| x bound of one limit row at most
OBJ_BUDGET = 2 ** 60    # the same for the objective's plan terms, and again for its slack terms
REACH_FLOOR = 1e-4      # the scale's reference objective is at least this share of the plan terms' reach
assert SCALE / REACH_FLOOR <= OBJ_BUDGET   # so the plan terms always fit their budget
SLACK_STEPS = 10 ** 6   # a limit's slack counts its excess in at most this many steps
ROW_RESOLUTION = 2 ** 30  # a real-valued limit's right-hand side in at most about this many steps: finer
                          # coefficients (1e15) made CP-SAT's presolve lose a feasible plan and claim OPTIMAL
VALID_STATUSES = ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN")
LATENCY_LIMITS = ("p95_latency_ms", "p99_latency_ms", "max_latency_ms")


@dataclass
class ClassData:
    """Per bucket, per class (level i, gen cap j): what one member or one batch adds."""

    per_request: np.ndarray = field(metadata={"description": "cost of one member (its own prefill excluded "
                                                             "when that is per request: see cost_const)"})
    latency: np.ndarray = field(metadata={"description": "latency of the slowest member of a batch (ms)"})
    tokens: np.ndarray = field(metadata={"description": "pad tokens per member, less its part in pad_const"})
    capacity: np.ndarray = field(metadata={"description": "members per batch at most (0 = class unusable)"})
    reach: np.ndarray = field(metadata={"description": "requests that may join this class"})
    up: np.ndarray = field(metadata={"description": "requests of gen level j with level <= i"})
    cost_const: float = field(default=0.0, metadata={"description": "cost no decision changes (prefill per request)"})
    pad_const: float = field(default=0.0, metadata={"description": "pad tokens no decision changes"})


def class_data(cfg: Config, costs: Costs, space: Space | np.ndarray, g: BucketGroups, limits: dict,
               req=None) -> ClassData:
    """Per class (level i, gen cap level j) of one bucket: member cost, batch latency, pad, capacity.
    Shape mode: a member's prefill and padding at seq_align or its own a(p) (per prefill_length and
    prompt_pad), decode from seq_align (decode_context: batch is then charged from seq_align, an upper
    estimate). Context mode: decode from the level, prefill and padding per request."""
    space = as_space(cfg, space)
    cm = cfg.cost_model
    lv = np.asarray(space.levels)[:, None].astype(np.float64)
    c = g.caps[None, :].astype(np.float64)
    own_prefill = space.context_mode or cm.prefill_length == "request"
    own_pad = space.context_mode or cm.prompt_pad == "request"
    per = costs.member_cost(0.0 if own_prefill else lv, lv, c) - (cm.prefill_cost[0] if own_prefill else 0.0)
    lat = costs.member_latency(lv, lv, c)          # the slowest member: prefill at most the level
    tokens = (0 if own_pad else lv) + c
    cap = np.full(lat.shape, cfg.batching.max_batch_size, dtype=np.int64)
    if cfg.batching.max_batch_tokens:
        cap = np.minimum(cap, cfg.batching.max_batch_tokens // (np.asarray(space.levels)[:, None] + g.caps[None, :]))
    if limits.get("max_latency_ms") is not None:
        cap = np.where(lat > limits["max_latency_ms"], 0, cap)
    up = np.cumsum(g.counts, axis=0)
    reach = np.cumsum(up, axis=1)
    cost_const, pad_const = 0.0, -float(g.real_tokens)
    if req is not None:
        a = aligned(req.prompt, cfg.shapes.granularity).astype(np.float64)
        if own_prefill:
            cost_const = float(costs.member_cost(a, 0.0, 0).sum())
        if own_pad:
            pad_const = float((a - req.prompt).sum() - req.gen.sum())
    return ClassData(np.broadcast_to(per, lat.shape).copy(), lat, np.broadcast_to(tokens, lat.shape).astype(np.int64),
                     cap, reach, up, cost_const, pad_const)


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
    bucket_use: dict[str, np.ndarray] = field(default_factory=dict)
    wo: dict[str, np.ndarray] = field(default_factory=dict)   # [o, c, j] per origin bucket
    lead: dict[str, np.ndarray] = field(default_factory=dict)  # first-use leads: [o, c, j] (origin) or [i, j]
    slack: dict[tuple[str, str], int] = field(default_factory=dict)
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

    def __init__(self, cfg: Config, shapes, groups: dict[str, BucketGroups], weights: dict[str, float],
                 scale_ref: float, requests: dict | None = None):
        self.cfg, self.costs = cfg, Costs(cfg.cost_model)
        self.space = as_space(cfg, shapes)
        self.shapes = np.asarray(self.space.shapes, dtype=np.int64)
        self.levels = np.asarray(self.space.levels, dtype=np.int64)
        self.groups = groups
        self.weights = weights
        self.limits = {b.name: dict(b.limits.items()) for b in cfg.buckets}
        requests = requests or {}
        # origin[b]: bucket b's flow keeps each request's own level up to its class, so latency limits judge
        # every member by its own latency (context mode: members of one batch differ by their own prefill)
        # leads[b]: where each shape's first-use latency lands matters to a limit or the objective of bucket b,
        # so the model places it (e[...] below) exactly as the plan writer will
        self.leads = {name: self.first_use_matters(name) for name in groups}
        self.origin = {name: self.space.context_mode and (self.leads[name] or
                                                          any(k in self.limits[name] for k in LATENCY_LIMITS))
                       for name in groups}
        self.data = {name: class_data(cfg, self.costs, self.space, g, self.class_limits(name), requests.get(name))
                     for name, g in groups.items()}
        # rhs[bucket][limit]: each limit as a sum over members or batches (see limit_rhs)
        self.rhs = {name: limit_rhs(self.limits[name], g, self.data[name].pad_const) for name, g in groups.items()}
        self.scale_ref = max(abs(scale_ref), 1e-9)
        self.model = cp_model.CpModel()
        # rows[(bucket, limit)]: (terms [(coefficient, variable, bound)], right-hand side, integral), scaled
        # and given a slack in _add_objective; slack priced far above any plan, so it is 0 whenever the
        # limits can be met, and the bound stays valid for the hard-limit problem
        self.rows: dict[tuple[str, str], tuple[list, float, bool]] = {}
        self.slack: dict[tuple[str, str], cp_model.IntVar] = {}
        self.slack_rows: dict[tuple[str, str], tuple] = {}      # key: (scaled terms, rhs, unit, slack top), for the hint
        self.hinted: dict[int, int] = {}                         # variable index: hinted value
        self._make_variables()
        self._add_shape_count()
        for name in groups:
            if self.origin[name]:
                self._add_origin_flow(name)
            else:
                self._add_prompt_flow(name)
                self._add_gen_flow(name)
            self._add_batches(name)
            self._add_bucket_shapes(name)
            self._add_first_use(name)
            self._add_latency_limits(name)
            self._add_pad_limits(name)
            self._add_cost_limit(name)
            self._add_sequential_limit(name)
        self._add_objective()
        problem = self.model.validate()
        if problem:
            raise RuntimeError(f"CP-SAT model invalid (a bug in the model builder): {problem}")

    def first_use_matters(self, name: str) -> bool:
        """A shape's warm-up (first_use_ms) changes a limit of bucket `name` or the objective."""
        if not self.cfg.cost_model.first_use_ms:
            return False
        return self.weights.get("sequential_time_ms", 0.0) > 0 or \
            any(k in self.limits[name] for k in LATENCY_LIMITS + ("sequential_time_ms",))

    def class_limits(self, name: str) -> dict:
        """The limits class_data applies per class: an origin bucket's max latency is judged per member."""
        limits = dict(self.limits[name])
        if self.origin[name]:
            limits.pop("max_latency_ms", None)
        return limits

    def member_latency(self, name: str) -> np.ndarray:
        """lat[o, c, j]: latency of a member of own level o in class (level c, cap j), first use left out."""
        lv = self.levels.astype(np.float64)
        caps = self.groups[name].caps.astype(np.float64)
        return self.costs.member_latency(lv[:, None, None], lv[None, :, None], caps[None, None, :])

    # --- variables ------------------------------------------------------------------------
    def _int(self, ub: int, name: str):
        return self.model.new_int_var(0, int(ub), name) if ub > 0 else 0

    @property
    def needs_bucket_shapes(self) -> bool:
        cm = self.cfg.cost_model
        return self.space.context_mode or cm.first_use_ms > 0 or cm.compile_in_bucket_cost

    def _make_variables(self):
        P = len(self.levels)
        # use[s]: shape s is compiled
        self.use = [self.model.new_bool_var(f"use[{s}]") for s in self.shapes]
        self.u, self.v, self.f, self.m, self.k = {}, {}, {}, {}, {}
        self.gf, self.n, self.w = {}, {}, {}
        self.ub, self.has = {}, {}
        self.e, self.lead_info = {}, {}
        for name, g in self.groups.items():
            d, L = self.data[name], len(g.caps)
            if self.needs_bucket_shapes:
                for i, s in enumerate(self.shapes):
                    # ub[b, i]: bucket b's plan uses shape i
                    self.ub[(name, i)] = self.model.new_bool_var(f"ub[{name},{s}]")
            if self.origin[name]:
                self._make_origin_variables(name)
            for i in range(P):
                if self.space.context_mode:
                    # has[b, i]: bucket b has a batch whose longest aligned prompt is level i
                    self.has[(name, i)] = self.model.new_bool_var(f"has[{name},{i}]")
                for j in range(L):
                    if self.origin[name]:
                        self._make_class_variables(name, i, j)
                        continue
                    key = (name, i, j)
                    # u[b, i, j]: requests of gen level j passing level i upward (not stopping)
                    self.u[key] = self._int(d.up[i, j] if i < P - 1 else 0, f"u{key}")
                    # v[b, i, j]: requests of gen level j that stop at level i
                    self.v[key] = self._int(d.up[i, j], f"v{key}")
                    # f[b, i, j]: requests at level i passing gen cap j upward
                    self.f[key] = self._int(d.reach[i, j] if j < L - 1 else 0, f"f{key}")
                    usable = d.capacity[i, j] > 0
                    # m[b, i, j]: members of class (level i, gen cap j)
                    self.m[key] = self._int(d.reach[i, j] if usable else 0, f"m{key}")
                    # k[b, i, j]: batches of class (level i, gen cap j)
                    self.k[key] = self._int(d.reach[i, j] if usable else 0, f"k{key}")
            if self.leads[name]:
                self._make_lead_variables(name)

    def _make_class_variables(self, name: str, i: int, j: int):
        d, key = self.data[name], (name, i, j)
        usable = d.capacity[i, j] > 0
        self.m[key] = self._int(d.reach[i, j] if usable else 0, f"m{key}")
        self.k[key] = self._int(d.reach[i, j] if usable else 0, f"k{key}")

    def _make_origin_variables(self, name: str):
        g, P, L = self.groups[name], len(self.levels), len(self.groups[name].caps)
        own = np.cumsum(g.counts, axis=1)           # requests of own level o with gen level <= j
        limit = self.limits[name].get("max_latency_ms")
        lat = self.member_latency(name)
        for o in range(P):
            for j in range(L):
                # gf[b, o, j]: requests of own level o passing gen cap j upward
                self.gf[(name, o, j)] = self._int(own[o, j] if j < L - 1 else 0, f"gf{(name, o, j)}")
                # n[b, o, j]: requests of own level o whose batch has gen cap j
                self.n[(name, o, j)] = self._int(own[o, j], f"n{(name, o, j)}")
                for c in range(o, P):
                    fits = limit is None or lat[o, c, j] <= limit
                    # w[b, o, c, j]: requests of own level o in class (level c, gen cap j)
                    self.w[(name, o, c, j)] = self._int(own[o, j] if fits else 0, f"w{(name, o, c, j)}")

    def _make_lead_variables(self, name: str):
        """e[...]: first-use leads, each with what it does (self.lead_info: raise of its batch's slowest latency,
        its member's latency without the warm-up, the own levels it may take). Shape mode e[b, i, j]: shape i's
        first use lands in a batch of class (i, j): every member at the class latency, so it raises that batch
        by the whole warm-up (exact unless prefill is per request, then above). Context mode e[b, c, j, g]:
        leads on members of class (c, j) whose own level is in band g, a run of own levels on which the raise
        (the warm-up less the head room to the batch's slowest member, lat[c, c, j]) and the crossing of every
        latency limit are the same, so the band is exact. A lead the warm-up pushes over max_latency_ms is none."""
        limit = self.limits[name].get("max_latency_ms")
        fu, S = self.cfg.cost_model.first_use_ms, len(self.shapes)
        if not self.origin[name]:
            lat = self.data[name].latency
            for (b, i, j), k in self.k.items():
                if b == name and not isinstance(k, int) and (limit is None or lat[i, j] + fu <= limit):
                    self.e[(b, i, j)] = self.model.new_bool_var(f"e{(b, i, j)}")
                    self.lead_info[(b, i, j)] = (fu, float(lat[i, j]), None)
            return
        lat, top = self.member_latency(name), self.data[name].latency
        bands: dict[tuple, list[int]] = {}
        for (b, o, c, j), w in self.w.items():
            if b != name or isinstance(w, int) or (limit is not None and lat[o, c, j] + fu > limit):
                continue
            rise = max(0.0, lat[o, c, j] + fu - top[c, j])
            crossed = tuple(lat[o, c, j] <= x < lat[o, c, j] + fu for x in self.percentile_limits(name))
            bands.setdefault((c, j, rise if rise > 0 else 0.0, crossed), []).append(o)
        count: dict[tuple, int] = {}
        for (c, j, rise, _), levels in bands.items():
            g = count[(c, j)] = count.get((c, j), -1) + 1
            key = (name, c, j, g)
            self.e[key] = self.model.new_int_var(0, S, f"e{key}")
            self.lead_info[key] = (rise, float(lat[levels[0], c, j]), levels)

    def percentile_limits(self, name: str) -> list[float]:
        return [self.limits[name][k] for k in ("p95_latency_ms", "p99_latency_ms") if k in self.limits[name]]

    def lead_raise(self, name: str) -> dict:
        """Per lead variable of bucket `name`, how much it raises its batch's slowest latency."""
        return {key: info[0] for key, info in self.lead_info.items() if key[0] == name}

    def lead_latency(self, name: str) -> dict:
        """Per lead variable of bucket `name`, the latency of its member without the warm-up."""
        return {key: info[1] for key, info in self.lead_info.items() if key[0] == name}

    def cells(self, name: str):
        return [(name, i, j) for i in range(len(self.levels)) for j in range(len(self.groups[name].caps))]

    # --- constraints ----------------------------------------------------------------------
    def _add_shape_count(self):
        self.model.add(sum(self.use) <= self.cfg.shapes.max_unique)

    def _add_prompt_flow(self, name):
        g, d = self.groups[name], self.data[name]
        for (_, i, j) in self.cells(name):
            below = self.u[(name, i - 1, j)] if i else 0
            self.model.add(int(g.counts[i, j]) + below == self.v[(name, i, j)] + self.u[(name, i, j)])
            if d.up[i, j] > 0:
                gate = self.has[(name, i)] if self.space.context_mode else self.use[i]
                self.model.add(self.v[(name, i, j)] <= int(d.up[i, j]) * gate)

    def _add_gen_flow(self, name):
        d = self.data[name]
        for (_, i, j) in self.cells(name):
            below = self.f[(name, i, j - 1)] if j else 0
            self.model.add(self.v[(name, i, j)] + below == self.m[(name, i, j)] + self.f[(name, i, j)])
            if d.reach[i, j] > 0 and d.capacity[i, j] > 0:
                gate = self.has[(name, i)] if self.space.context_mode else self.use[i]
                self.model.add(self.m[(name, i, j)] <= int(d.reach[i, j]) * gate)
                if self.ub and not self.space.context_mode:
                    self.model.add(self.m[(name, i, j)] <= int(d.reach[i, j]) * self.ub[(name, i)])

    def _add_origin_flow(self, name):
        """Up the gen caps at each request's own level, then from own level o to class level c >= o:
        counts[o, j] + gf[o, j-1] = n[o, j] + gf[o, j];  sum_c w[o, c, j] = n[o, j];  m[c, j] = sum_o w[o, c, j]."""
        g, d, P = self.groups[name], self.data[name], len(self.levels)
        for (_, o, j) in self.cells(name):
            below = self.gf[(name, o, j - 1)] if j else 0
            self.model.add(int(g.counts[o, j]) + below == self.n[(name, o, j)] + self.gf[(name, o, j)])
            self.model.add(sum(self.w[(name, o, c, j)] for c in range(o, P)) == self.n[(name, o, j)])
        for (_, c, j) in self.cells(name):
            self.model.add(self.m[(name, c, j)] == sum(self.w[(name, o, c, j)] for o in range(c + 1)))
            if d.reach[c, j] > 0 and d.capacity[c, j] > 0:
                self.model.add(self.m[(name, c, j)] <= int(d.reach[c, j]) * self.has[(name, c)])

    def _add_batches(self, name):
        d = self.data[name]
        for key in self.cells(name):
            _, i, j = key
            if d.capacity[i, j] > 0 and d.reach[i, j] > 0:
                self.model.add(self.m[key] <= int(d.capacity[i, j]) * self.k[key])
                self.model.add(self.k[key] <= self.m[key])

    def _add_bucket_shapes(self, name):
        """ub[b, i] <= use[i]; in context mode every level the bucket has is covered by a shape it uses."""
        if not self.ub:
            return
        for i in range(len(self.shapes)):
            self.model.add(self.ub[(name, i)] <= self.use[i])
        if self.space.context_mode:
            for i in range(len(self.levels)):
                covering = [self.ub[(name, t)] for t in range(int(self.space.cover[i]), len(self.shapes))]
                self.model.add(sum(covering) >= self.has[(name, i)])

    def _add_first_use(self, name):
        """One lead per shape the bucket uses, each in a batch of its own that can take that shape. Shape mode:
        shape i's lead is in a class (i, j) with a batch. Context mode: leads are members (e <= w), at most one
        per batch (sum_o e[o, c, j] <= k[c, j]), and the used shapes can be matched to leads at levels they
        cover: for every t, the leads at levels covered by some shape <= t are at least the used shapes <= t
        (Hall's condition for these nested sets; the writer moves each lead's batch onto its shape)."""
        if not self.leads[name]:
            return
        S, P = len(self.shapes), len(self.levels)
        mine = {key: x for key, x in self.e.items() if key[0] == name}
        if not self.origin[name]:
            per_shape = [[] for _ in range(S)]
            for (b, i, j), x in mine.items():
                self.model.add(x <= self.k[(b, i, j)])
                per_shape[i].append(x)
            for i in range(S):
                self.model.add(sum(per_shape[i]) == self.ub[(name, i)])
            return
        at_level, per_class = [[] for _ in range(P)], {}
        for (b, c, j, g), x in mine.items():
            self.model.add(x <= sum(self.w[(b, o, c, j)] for o in self.lead_info[(b, c, j, g)][2]))
            at_level[c].append(x)
            per_class.setdefault((b, c, j), []).append(x)
        for key, xs in per_class.items():
            self.model.add(sum(xs) <= self.k[key])
        cover = np.asarray(self.space.cover)
        for t in range(S):
            leads = [x for c in range(P) if cover[c] <= t for x in at_level[c]]
            self.model.add(sum(leads) >= sum(self.ub[(name, i)] for i in range(t + 1)))
        self.model.add(sum(mine.values()) == sum(self.ub[(name, i)] for i in range(S)))

    def _add_latency_limits(self, name):
        d = self.data[name]
        lat = self.member_latency(name) if self.origin[name] else None
        for key in ("p95_latency_ms", "p99_latency_ms"):     # rhs: the slow requests allowed (limit_rhs)
            limit = self.limits[name].get(key)
            if limit is None:
                continue
            if self.origin[name]:       # every member at its own latency
                slow = [(1, x, int(self.groups[name].counts[o].sum())) for (b, o, c, j), x in self.w.items()
                        if b == name and lat[o, c, j] > limit]
            else:
                slow = [(1, self.m[c], d.reach[c[1], c[2]]) for c in self.cells(name)
                        if d.latency[c[1], c[2]] > limit]
            fu = self.cfg.cost_model.first_use_ms
            if self.leads[name]:        # a lead the warm-up pushes over the limit
                slow += [(1, self.e[k], len(self.shapes)) for k, x in self.lead_latency(name).items()
                         if x <= limit < x + fu]
            self.rows[(name, key)] = (slow, self.rhs[name][key], True)

    def _add_pad_limits(self, name):
        d = self.data[name]
        if "pad" in self.rhs[name]:
            terms = [(int(d.tokens[i, j]), self.m[c], d.reach[i, j]) for c in self.cells(name) for (_, i, j) in [c]]
            self.rows[(name, "pad")] = (terms, self.rhs[name]["pad"], True)

    def _add_cost_limit(self, name):
        budget = self.limits[name].get("cost")
        if budget is None:
            return
        d, oh = self.data[name], self.cfg.cost_model.batch_overhead_cost
        terms = []
        for c in self.cells(name):
            _, i, j = c
            terms += [(d.per_request[i, j], self.m[c], d.reach[i, j]), (oh, self.k[c], d.reach[i, j])]
        if self.cfg.cost_model.compile_in_bucket_cost:
            comp = self.costs.compile(self.shapes.astype(np.float64))
            terms += [(comp[i], self.ub[(name, i)], 1) for i in range(len(self.shapes))]
        self.rows[(name, "cost")] = (terms, budget - d.cost_const, False)

    def _add_sequential_limit(self, name):
        limit = self.limits[name].get("sequential_time_ms")
        if limit is None:
            return
        d, fu = self.data[name], self.cfg.cost_model.first_use_ms
        terms = [(d.latency[c[1], c[2]], self.k[c], d.reach[c[1], c[2]]) for c in self.cells(name)]
        if fu:      # each lead raises its batch's slowest latency by what the warm-up passes it
            terms += [(r, self.e[key], len(self.shapes)) for key, r in self.lead_raise(name).items()]
        self.rows[(name, "sequential_time_ms")] = (terms, limit, False)

    def _scaled_row(self, terms, rhs: float, integral: bool):
        """(integer terms, integer rhs, row scale): a relaxation of sum(coef x var) <= rhs within ROW_BUDGET."""
        terms = [(float(a), x, int(ub)) for a, x, ub in terms if not isinstance(x, int) and a != 0]
        total = sum(abs(a) * ub for a, _, ub in terms) + abs(rhs)
        if integral and total <= ROW_BUDGET:
            return [(int(a), x, ub) for a, x, ub in terms], math.floor(rhs + 1e-9), 1.0
        f = ROW_BUDGET / max(total, 1.0)
        if integral:
            f = min(f, 1.0)
        else:
            f = min(f, ROW_RESOLUTION / max(abs(rhs), 1e-30), 1e30)
        return [(math.floor(a * f), x, ub) for a, x, ub in terms], math.ceil(rhs * f), f

    def _add_objective(self):
        w = self.weights
        wc, wp, ws = (w.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
        oh, fu = self.cfg.cost_model.batch_overhead_cost, self.cfg.cost_model.first_use_ms
        compile_cost = self.costs.compile(self.shapes.astype(np.float64))
        plan_terms = [(wc * compile_cost[i], self.use[i], 1) for i in range(len(self.shapes))]
        self.constant = 0.0
        for name in self.groups:
            d = self.data[name]
            self.constant += wc * d.cost_const + wp * d.pad_const
            for c in self.cells(name):
                _, i, j = c
                reach = d.reach[i, j]
                plan_terms.append((wc * d.per_request[i, j] + wp * d.tokens[i, j], self.m[c], reach))
                plan_terms.append((wc * oh + ws * d.latency[i, j], self.k[c], reach))
            if fu and ws:
                plan_terms += [(ws * r, self.e[key], len(self.shapes)) for key, r in self.lead_raise(name).items()]
        plan_terms = [(a, x, ub) for a, x, ub in plan_terms if not isinstance(x, int) and a > 0]
        reach = sum(a * ub for a, _, ub in plan_terms)           # the most the plan terms can sum to
        # the reference is floored at REACH_FLOOR x reach, so the plan terms sum to at most SCALE / REACH_FLOOR
        # (1e16, within OBJ_BUDGET): a reference far below any plan (1 when there is no heuristic plan) would
        # otherwise give them the whole budget and leave the slacks no room to outweigh them
        self.scale = SCALE / max(self.scale_ref, REACH_FLOOR * reach)
        objective = [math.floor(a * self.scale) * x for a, x, _ in plan_terms]
        objective += self._slack_terms(max(self.scale_ref, reach) * self.scale)
        self.model.minimize(sum(objective))

    def _slack_terms(self, reference: float) -> list:
        """Each limit row as `row <= rhs + unit x slack`. Exceeding a limit by its own size costs 100x
        `reference` (scaled: the most the plan terms can sum to, at least the reference plan's objective): the
        rate per unit of excess; only where that rate times the largest possible excess would pass OBJ_BUDGET
        is the rate lowered to fit. Either way, breaking a limit costs far more than any difference in plan
        cost, however far the reference objective is from the optimum."""
        out = []
        budget = OBJ_BUDGET / max(len(self.rows), 1)
        for key, (terms, rhs, integral) in self.rows.items():
            scaled, srhs, f = self._scaled_row(terms, rhs, integral)
            excess = max(sum(abs(a) * ub for a, _, ub in scaled) - srhs, 1)
            rate = min(100.0 * reference / max(abs(srhs), 1.0), budget / excess)
            unit = max(1, math.ceil(excess / SLACK_STEPS))
            top = max(1, math.ceil(excess / unit))
            slack = self.model.new_int_var(0, top, f"slack[{key[0]},{key[1]}]")
            self.slack[key] = slack
            self.slack_rows[key] = (scaled, srhs, unit, top)
            self.model.add(sum(a * x for a, x, _ in scaled) <= srhs + unit * slack)
            out.append(max(1, math.floor(min(rate * unit, budget / top))) * slack)
        return out

    def to_real(self, scaled: float) -> float:
        """Scaled objective -> objective units (a lower estimate: coefficients were floored)."""
        return scaled / self.scale + self.constant

    # --- hints and solving ----------------------------------------------------------------
    def add_hint(self, counts: dict):
        """Hint from a plan given per bucket as ClassCounts (see solver.postprocess.plan_to_classes)."""
        self.model.clear_hints()
        self.hinted = {}
        use = np.any([c.use for c in counts.values()], axis=0)
        for i, var in enumerate(self.use):
            self._hint(var, bool(use[i]))
        for name, g in self.groups.items():
            c = counts[name]
            for i in range(len(self.shapes)):
                if (name, i) in self.ub:
                    self._hint(self.ub[(name, i)], bool(c.use[i]))
            for i in range(len(self.levels)):
                if (name, i) in self.has:
                    self._hint(self.has[(name, i)], bool(c.v[i].sum() > 0))
            if self.leads[name]:
                self._hint_leads(name, c.lead_origin if self.origin[name] else c.lead)
            if self.origin[name]:
                self._hint_origin(name, c)
                continue
            u = np.cumsum(g.counts - c.v, axis=0)
            f = np.cumsum(c.v - c.m, axis=1)
            for (_, i, j) in self.cells(name):
                for store, values in ((self.u, u), (self.v, c.v), (self.f, f), (self.m, c.m), (self.k, c.k)):
                    var = store[(name, i, j)]
                    if not isinstance(var, int):
                        self._hint(var, int(values[i, j]))
        self._hint_slacks()

    def _hint(self, var, value: int):
        self.model.add_hint(var, value)
        self.hinted[var.index] = int(value)

    def _hint_slacks(self):
        """Each limit's slack at what the hinted plan needs (0 when it meets the row), so the hint is complete."""
        for key, (scaled, srhs, unit, top) in self.slack_rows.items():
            lhs = sum(a * self.hinted.get(x.index, 0) for a, x, _ in scaled)
            self.model.add_hint(self.slack[key], min(max(0, -(-(lhs - srhs) // unit)), top))

    def _hint_origin(self, name: str, c):
        g = self.groups[name]
        n = c.wo.sum(axis=1)                          # [o, j]
        gf = np.cumsum(g.counts - n, axis=1)
        for (b, o, j), var in self.n.items():
            if b == name and not isinstance(var, int):
                self._hint(var, int(n[o, j]))
        for (b, o, j), var in self.gf.items():
            if b == name and not isinstance(var, int):
                self._hint(var, int(gf[o, j]))
        for (b, o, cc, j), var in self.w.items():
            if b == name and not isinstance(var, int):
                self._hint(var, int(c.wo[o, cc, j]))
        for (_, i, j) in self.cells(name):
            for store, values in ((self.m, c.m), (self.k, c.k)):
                var = store[(name, i, j)]
                if not isinstance(var, int):
                    self._hint(var, int(values[i, j]))

    def lead_counts(self, solver, name: str) -> np.ndarray:
        """The solution's leads of one bucket as an array: [i, j] (shape mode) or [o, c, j], each band's leads
        handed to own levels of the band that have members, in band order)."""
        P, L = len(self.levels), len(self.groups[name].caps)
        if not self.origin[name]:
            out = np.zeros((P, L), dtype=np.int64)
            for key, x in self.e.items():
                if key[0] == name:
                    out[key[1:]] = solver.value(x)
            return out
        out = np.zeros((P, P, L), dtype=np.int64)
        for (b, c, j, g), x in self.e.items():
            left = solver.value(x) if b == name else 0
            for o in self.lead_info[(b, c, j, g)][2] if left else ():
                take = min(left, solver.value(self.w[(b, o, c, j)]))
                out[o, c, j] += take
                left -= take
        return out

    def _hint_leads(self, name: str, lead: np.ndarray | None):
        if lead is None:
            return
        for key, x in self.e.items():
            if key[0] != name:
                continue
            if self.origin[name]:
                _, c, j, _ = key
                value = sum(int(lead[o, c, j]) for o in self.lead_info[key][2])
            else:
                value = int(lead[key[1:]])
            self._hint(x, value)

    def solve(self, time_limit_s: float, workers: int, seed: int, progress: bool = True,
              deterministic_time: float | None = None) -> ModelSolution:
        """`deterministic_time`: CP-SAT's work limit (max_deterministic_time); its workers then interleave
        (interleave_search), so the answer depends on the inputs alone while the wall limit does not bind."""
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = float(time_limit_s)
        solver.parameters.num_workers = int(workers) or 8   # a portfolio with LNS helps even on 2 cores
        if deterministic_time is not None:
            solver.parameters.max_deterministic_time = float(deterministic_time)
            solver.parameters.interleave_search = solver.parameters.num_workers > 1
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
        if name not in VALID_STATUSES:
            log.error("cpsat: the solver answered %s: a bug in the model (%s)", name, solver.solution_info())
        work = solver.response_proto.deterministic_time
        interrupted = elapsed < 0.95 * time_limit_s and name == "FEASIBLE" and \
            (deterministic_time is None or work < 0.95 * deterministic_time)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = self.to_real(solver.best_objective_bound) if status == cp_model.UNKNOWN else -math.inf
            return ModelSolution(name, None, bound, elapsed, interrupted=interrupted)
        sol = ModelSolution(name, self.to_real(solver.objective_value), self.to_real(solver.best_objective_bound),
                            elapsed, interrupted=interrupted)
        sol.use = np.array([solver.value(x) for x in self.use], dtype=bool)
        sol.slack = {key: int(solver.value(x)) for key, x in self.slack.items()}
        for name_b, g in self.groups.items():
            if self.ub:
                sol.bucket_use[name_b] = np.array([solver.value(self.ub[(name_b, i)]) for i in range(len(self.shapes))],
                                                  dtype=bool)
            shape = (len(self.levels), len(g.caps))
            for store, out in ((self.v, sol.v), (self.m, sol.m), (self.k, sol.k)):
                if store is self.v and self.origin[name_b]:
                    continue
                arr = np.zeros(shape, dtype=np.int64)
                for (_, i, j) in self.cells(name_b):
                    var = store[(name_b, i, j)]
                    arr[i, j] = var if isinstance(var, int) else solver.value(var)
                out[name_b] = arr
            if self.leads[name_b]:
                sol.lead[name_b] = self.lead_counts(solver, name_b)
            if self.origin[name_b]:
                wo = np.zeros((len(self.levels), len(self.levels), len(g.caps)), dtype=np.int64)
                for (b, o, c, j), var in self.w.items():
                    if b == name_b:
                        wo[o, c, j] = var if isinstance(var, int) else solver.value(var)
                sol.wo[name_b] = wo
        return sol
