"""A global lower bound: the pair LP over every candidate shape, gen caps rounded down, by column generation.

The relaxation. A batch of shape s whose longest gen is G is in the class of the largest ladder cap at or
below G, and a request may join a class whose cap is at or above the ladder cap at or below its own gen.
The batch's overhead and latency are charged at that cap; each member's cost, pad tokens and latency (for
the percentile counts) at max(its own gen, the cap), since the batch's longest gen is at least both. So
a batch is never charged more than it costs. Every valid plan meeting the limits is then a solution of this
model at no more than its objective, so the model's LP value bounds every such plan from below
(bound_scope: global, when every occurring aligned prompt is a candidate shape).

The LP (per bucket b; z global):
    z[i] in [0, 1]: shape i compiled;            sum_i z[i] <= max_unique
    y[c] in [0, 1]: class c = (shape i, cap j) holds a batch;  y[c] <= z[i],  y[c] <= k[c]
    k[c] >= 0: batches of class c;               sum_g x[g, c] <= capacity[c] * k[c]
    x[g, c] in [0, n_g]: requests of group g (own shape level, own gen) in class c;  x[g, c] <= n_g y[c]
    sum_c x[g, c] = n_g;  every limit a row (hard: a slack priced far above any plan keeps it solvable)
Pairs x[g, c] are priced in (column generation) with one HiGHS model kept alive between rounds: new
columns and their link rows are appended and the LP re-solved from the previous basis. At every round
the Lagrangian (Farley) bound z_LP + sum_g n_g * min(0, min_c reduced cost[g, c]) is valid, so a time
limit always leaves a bound. The last LP solved then goes on with cuts (GlobalBound.add_cuts) where its
converged solution breaks them, their duals entering the pricing, so the Lagrangian bound stays valid.

Spec section 4 semantics and 4b context mode (decode from the batch's longest aligned prompt, prefill and
prompt padding per request) are covered. In context mode a class level is a decode context (every
occurring aligned prompt, none pruned), groups are by own aligned prompt, a class's batches may take any
shape covering its level (y[c] <= sum of those z), and what the relaxation leaves out keeps it a bound:
the percentile limits (members of one batch differ), the first-use latency and the compile cost in a
bucket's cost limit. Other 4b combinations: the pre-search bound serves.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from models.cpsat_model import class_data
from models.highs import add_linked_columns, quiet_highs
from solver.batch_bound import ASCENT_STEPS, ascend, lift_seconds
from models.instance import BucketGroups, Instance, Space, aligned, batch_classes, gen_ladder, limit_rhs, model_space

log = logging.getLogger(__name__)
INF = math.inf
LADDER = (12,)            # coarse gen caps per bucket solved before the configured count (see cap_ladder)
FINER_START = 4.0        # a finer LP starts only with at least this many times the previous LP's time left (see global_bound)
CUT_TOL = 1e-6           # a cut is added where the LP breaks it by more than this share of the largest group
PENALTY = 100.0          # a limit exceeded by its own size costs this many times the reference objective
GRACE_SHARE = 0.25       # an LP close to converging when its time is up goes on for this share of the stage's time more
GRACE_GAP = 0.02         # ... close: its last Lagrangian bound within this share of its LP value (see grace_s)


@dataclass
class BoundResult:
    """What the bound stage reached."""

    bound: float = field(metadata={"description": "valid lower bound on every plan meeting the limits"})
    lp_value: float = field(metadata={"description": "objective of the last restricted LP"})
    converged: bool = field(metadata={"description": "no pair with negative reduced cost was left"})
    rounds: int = field(metadata={"description": "LP solves"})
    columns: int = field(metadata={"description": "pairs written"})
    time_s: float = field(metadata={"description": "wall time"})
    caps: dict = field(default_factory=dict, metadata={"description": "gen caps per bucket (count)"})
    history: list = field(default_factory=list, metadata={"description": "(LP value, Lagrangian bound) per round"})
    ladder: list = field(default_factory=list, metadata={"description": "(caps, bound, converged, time s) per LP solved"})
    shape_use: dict = field(default_factory=dict, metadata={"description": "z of each candidate shape in the last LP "
                                                                             "solved to optimality"})
    cuts: int = field(default=0, metadata={"description": "cut rows (group, level) added (see GlobalBound.add_cuts)"})
    batch_bound: float | None = field(default=None, metadata={
        "description": "the whole-batch bound at the LP's last duals (solver/batch_bound.py), when it ran"})


def floor_caps(gen: np.ndarray, max_caps: int) -> np.ndarray:
    """A cap ladder for rounding down: every distinct gen when few, else the DP ladder plus the shortest gen."""
    caps, _ = gen_ladder(gen, max_caps)
    return np.unique(np.r_[caps, gen.min()]).astype(np.int64)


class BucketLP:
    """One bucket's classes, groups and pair bookkeeping for the bound LP."""

    def __init__(self, inst: Instance, name: str, space: Space, max_caps: int, weights: dict):
        cfg, req = inst.cfg, inst.requests[name]
        self.name, self.req, self.space = name, req, space
        limits = dict(inst.cfg_bucket(name).limits.items())
        if space.context_mode:              # members of a batch differ in latency: percentiles left out (relaxed)
            limits = {k: v for k, v in limits.items() if k not in ("p95_latency_ms", "p99_latency_ms")}
        caps = floor_caps(req.gen, max_caps)
        level = space.level_of(req)
        cap_level = np.searchsorted(caps, req.gen, side="right") - 1          # rounded down
        fine = level * (int(req.gen.max()) + 1) + req.gen                      # groups: (level, own gen)
        keys, self.request_group, self.n = np.unique(fine, return_inverse=True, return_counts=True)
        self.caps = caps
        self.gi = keys // (int(req.gen.max()) + 1)
        self.gj = np.searchsorted(caps, keys % (int(req.gen.max()) + 1), side="right") - 1
        counts = np.zeros((len(space.levels), len(caps)), dtype=np.int64)
        np.add.at(counts, (level, cap_level), 1)
        groups = BucketGroups(name, caps, counts, req.real_tokens, True)
        d = class_data(cfg, inst.costs, space, groups, limits, req)
        self.ci, self.cj = np.nonzero(d.capacity > 0)
        # level_covering[i]: the shapes a batch at level i may take (shape mode: its own; context mode: any covering)
        self.level_covering = [np.arange(int(space.cover[i]), len(space.shapes)) if space.context_mode
                               else np.array([i]) for i in range(len(space.levels))]
        self.covering = [self.level_covering[i] for i in self.ci]                  # the same per class
        ci, cj = self.ci, self.cj
        wc, wp, ws = (weights.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
        oh = cfg.cost_model.batch_overhead_cost
        self.overhead = oh
        self.member_weights = (wc, wp, ws)
        # members are charged at max(own gen, class cap): the batch's longest gen is at least both
        self.gg = keys % (int(req.gen.max()) + 1)                               # each group's own gen
        self.fine = np.unique(np.r_[req.gen, caps]).astype(np.int64)
        fine_counts = np.zeros((len(space.levels), len(self.fine)), dtype=np.int64)
        np.add.at(fine_counts, (level, np.searchsorted(self.fine, req.gen)), 1)
        f = class_data(cfg, inst.costs, space, BucketGroups(name, self.fine, fine_counts, req.real_tokens, True),
                       limits, req)
        self.member_per, self.member_tok, self.member_lat = f.per_request, f.tokens.astype(np.float64), f.latency
        self.member_cap = f.capacity                  # capacity of a batch at (level, fine gen): solver/batch_bound.py
        self.obj_scale = max(float(np.abs(wc * self.member_per + wp * self.member_tok).max()), 1.0)  # pricing tolerance
        self.obj_k = wc * oh + ws * d.latency[ci, cj]
        self.cap = d.capacity[ci, cj].astype(np.float64)
        self.constant = wc * d.cost_const + wp * d.pad_const
        rhs = limit_rhs(limits, groups, d.pad_const)
        if "cost" in rhs:
            rhs["cost"] -= d.cost_const
        lat = d.latency[ci, cj]
        self.lat_k = lat
        # limits: name -> (what each member adds: a member term or None, coefficient per batch of each class, rhs)
        C = len(ci)
        self.limits = {}
        if "sequential_time_ms" in rhs:
            self.limits["sequential_time_ms"] = ("latency", lat, rhs["sequential_time_ms"])
        if "pad" in rhs:
            self.limits["pad"] = ("tokens", np.zeros(C), rhs["pad"])
        for key in ("p95_latency_ms", "p99_latency_ms"):
            if key in rhs:
                self.limits[key] = (("slow", limits[key]), np.zeros(C), rhs[key])
        if "cost" in rhs:
            self.limits["cost"] = ("cost", np.full(C, oh), rhs["cost"])
        self.written = np.zeros((len(self.n), C), dtype=bool)
        self.cut_of = np.full((len(self.n), len(space.levels)), -1, dtype=np.int64)   # row of cut (g, level), -1
        self.col_of = np.full((len(self.n), C), -1, dtype=np.int64)      # LP column of each written pair
        self.link_of = np.full((len(self.n), C), -1, dtype=np.int64)     # its link row x[g, c] <= n_g y[c]

    @property
    def num_classes(self) -> int:
        return len(self.ci)

    def member(self, gs: np.ndarray, cs: np.ndarray) -> tuple[np.ndarray, dict]:
        """(objective, {limit: coefficient}) of one member of group gs in class cs (broadcast), its batch's
        longest gen taken as max(its own gen, the class cap): never above what any batch of that class costs."""
        fj = np.searchsorted(self.fine, np.maximum(self.gg[gs], self.caps[self.cj[cs]]))
        i = self.ci[cs]
        per, tok = self.member_per[i, fj], self.member_tok[i, fj]
        # a batch's latency is at least its cap's plus the mean over its members of what their own gen adds
        # (at most `capacity` members): that mean per member, beside the per-batch latency at the cap
        extra = (self.member_lat[i, fj] - self.lat_k[cs]) / self.cap[cs]
        terms = {"tokens": tok, "cost": per, "latency": extra}
        coef = {}
        for key, (term, _, _) in self.limits.items():
            if term is not None:
                coef[key] = (self.member_lat[i, fj] > term[1]).astype(np.float64) if term[0] == "slow" else terms[term]
        wc, wp, ws = self.member_weights
        return wc * per + wp * tok + ws * extra, coef

    def eligible(self, gs: np.ndarray) -> np.ndarray:
        return (self.ci[None, :] >= self.gi[gs][:, None]) & (self.cj[None, :] >= self.gj[gs][:, None])


class GlobalBound:
    """The bound LP in one live HiGHS model, grown column by column."""

    def __init__(self, inst: Instance, weights: dict, reference: float, max_caps: int = 160):
        import highspy

        self.inst = inst
        self.shapes = np.asarray(inst.all_shapes, dtype=np.int64)
        levels = len(np.unique(np.concatenate([aligned(r.prompt, inst.cfg.shapes.granularity)
                                               for r in inst.requests.values()])))
        self.space = model_space(inst.cfg, self.shapes, inst.requests, levels)       # no level pruned
        self.reference = max(abs(reference), 1.0)
        self.h = quiet_highs()
        # dual simplex (measured on the default config, one core, seeded with dp's plan: 12 caps converge in 16-17 s
        # against 20-22 s with the primal; 48 caps reach 9.62e11 in 240 s against the primal's 9.11e11)
        self.h.setOptionValue("simplex_strategy", 1)
        self.inf = highspy.kHighsInf
        self.optimal = highspy.HighsModelStatus.kOptimal
        self.weights = weights
        self.buckets: list[BucketLP] = []
        self.seeded = False
        # row duals of LPs no pair priced into (solver/batch_bound.py evaluates there): the first, before any cut,
        # and the last (with the cuts' duals, once cuts are in)
        self.first_priced_out: np.ndarray | None = None
        self.last_priced_out: np.ndarray | None = None
        self._build(max_caps)

    # --- assembly ---------------------------------------------------------------------------
    def _col(self, cost, lo, hi) -> int:
        self.h.addCol(float(cost) / self.reference, float(lo), float(hi) if math.isfinite(hi) else self.inf,
                      0, np.zeros(0, dtype=np.int32), np.zeros(0))
        return self.h.getNumCol() - 1

    def _row(self, lo, hi, cols, vals) -> int:
        cols = np.asarray(cols, dtype=np.int32)
        self.h.addRow(float(lo) if math.isfinite(lo) else -self.inf, float(hi) if math.isfinite(hi) else self.inf,
                      len(cols), cols, np.asarray(vals, dtype=np.float64))
        return self.h.getNumRow() - 1

    def _build(self, max_caps: int):
        inst, P = self.inst, len(self.shapes)
        compile_cost = self.weights.get("cost", 0.0) * inst.costs.compile(self.shapes.astype(np.float64))
        self.z = [self._col(compile_cost[i], 0, 1) for i in range(P)]
        self._row(-INF, inst.cfg.shapes.max_unique, self.z, np.ones(P))
        for name in inst.requests:
            b = BucketLP(inst, name, self.space, max_caps, self.weights)
            C = b.num_classes
            b.y = np.array([self._col(0.0, 0, 1) for _ in range(C)])
            b.k = np.array([self._col(b.obj_k[c], 0, INF) for c in range(C)])
            b.demand = np.array([self._row(n, n, [], []) for n in b.n])
            b.capacity = np.array([self._row(-INF, 0, [b.k[c]], [-b.cap[c]]) for c in range(C)])
            b.y_k, b.y_z = np.zeros(C, dtype=np.int64), np.zeros(C, dtype=np.int64)   # rows y <= k, y <= z per class
            for c in range(C):
                b.y_k[c] = self._row(-INF, 0, [b.y[c], b.k[c]], [1, -1])
                b.y_z[c] = self._row(-INF, 0, np.r_[b.y[c], np.asarray(self.z)[b.covering[c]]],   # covering shapes
                                     np.r_[1.0, -np.ones(len(b.covering[c]))])
            b.limit_rows = {}
            for key, (_, per_k, rhs) in b.limits.items():
                slack = self._col(PENALTY * self.reference / max(abs(rhs), 1.0), 0, INF)
                nz = np.flatnonzero(per_k)
                b.limit_rows[key] = self._row(-INF, rhs, np.r_[b.k[nz], slack], np.r_[per_k[nz], -1.0])
            self.buckets.append(b)

    def add_pairs(self, b: BucketLP, gs: np.ndarray, cs: np.ndarray) -> None:
        """Columns x[g, c] with their entries (demand, capacity, limits) and their link rows."""
        if len(gs) == 0:
            return
        b.written[gs, cs] = True
        rows = [b.demand[gs], b.capacity[cs]]
        vals = [np.ones(len(gs)), np.ones(len(gs))]
        obj, coef = b.member(gs, cs)
        for key, per_x in coef.items():
            rows.append(np.where(per_x != 0, b.limit_rows[key], -1))
            vals.append(per_x)
        rows.append(b.cut_of[gs, b.ci[cs]])
        vals.append(np.ones(len(gs)))
        upper = b.n[gs].astype(np.float64)
        first_row = self.h.getNumRow()
        b.col_of[gs, cs] = add_linked_columns(self.h, obj / self.reference, upper, rows, vals, b.y[cs])
        b.link_of[gs, cs] = np.arange(first_row, first_row + len(gs))        # its row x <= n_g y

    def add_cuts(self, b: BucketLP, x: np.ndarray, z: np.ndarray, most: int = 4000) -> int:
        """Rows sum over the classes c at level i of x[g, c] <= n_g * (z of the shapes covering i), for the pairs
        (group g, level i) the LP solution (`x` per column, `z` per shape) breaks most. Valid for every plan:
        with no covering shape compiled no batch is at level i, and a group has n_g requests. The link rows
        x[g, c] <= n_g y[c] <= n_g z allow n_g at each of a level's caps; a cut allows n_g over all of them."""
        gs, cs = np.nonzero(b.col_of >= 0)
        total = np.zeros(b.cut_of.shape)
        np.add.at(total, (gs, b.ci[cs]), x[b.col_of[gs, cs]])
        covering = b.level_covering
        excess = total - b.n[:, None] * np.array([z[c].sum() for c in covering])[None, :]
        excess[b.cut_of >= 0] = 0.0
        cand = np.flatnonzero(excess.ravel() > CUT_TOL * b.n.max())
        cand = cand[np.argsort(-excess.ravel()[cand])][:most]
        for g, i in zip(*np.unravel_index(cand, excess.shape)):
            at = np.flatnonzero((b.col_of[g] >= 0) & (b.ci == i))
            b.cut_of[g, i] = self._row(-INF, 0, np.r_[b.col_of[g, at], np.asarray(self.z)[covering[i]]],
                                       np.r_[np.ones(len(at)), np.full(len(covering[i]), -float(b.n[g]))])
        return len(cand)

    def seed_plan(self, plans: dict) -> None:
        """Write the pairs a plan uses (each batch at its class level as batch_classes gives it, its cap the ladder
        cap at or below its longest gen), so the first LP already holds that plan, limits met if the plan meets them."""
        for b in self.buckets:
            plan, req = plans[b.name], b.req
            bi = batch_classes(req, plan, self.shapes, b.caps, self.space)[0][plan.batch_of]
            bj = (np.searchsorted(b.caps, plan.batch_max(req.gen), side="right") - 1)[plan.batch_of]
            lookup = np.full((len(self.space.levels), len(b.caps)), -1, dtype=np.int64)
            lookup[b.ci, b.cj] = np.arange(b.num_classes)
            cs = lookup[bi, bj]
            gs = b.request_group
            pairs = np.unique(np.stack([gs[cs >= 0], cs[cs >= 0]], axis=1), axis=0)
            pairs = pairs[~b.written[pairs[:, 0], pairs[:, 1]]]
            self.add_pairs(b, pairs[:, 0], pairs[:, 1])

    def seed(self, per_group: int = 4) -> None:
        """Start from each group's own class, a few caps above it, and the top class (always feasible)."""
        for b in self.buckets:
            lookup = {(int(i), int(j)): c for c, (i, j) in enumerate(zip(b.ci, b.cj))}
            top = lookup[(int(b.ci.max()), int(b.cj[b.ci == b.ci.max()].max()))]
            gs, cs = [], []
            for g in range(len(b.n)):
                for dj in range(per_group):
                    c = lookup.get((int(b.gi[g]), int(b.gj[g]) + dj))
                    if c is not None:
                        gs.append(g), cs.append(c)
                gs.append(g), cs.append(top)
            pairs = np.unique(np.array([gs, cs]).T, axis=0)
            self.add_pairs(b, pairs[:, 0], pairs[:, 1])

    # --- solving ----------------------------------------------------------------------------
    def run(self, time_limit_s: float, per_group: int = 16, progress: bool = True, plans: dict | None = None,
            cuts: bool = False) -> BoundResult:
        """Column generation until no pair prices in (then, with `cuts`, until no cut is broken either) or the
        time is up. A second call goes on from where the first stopped."""
        start = time.monotonic()
        if not self.seeded:
            self.seed()
            if plans:
                self.seed_plan(plans)
            self.seeded = True
        rounds, bound, value, converged, history, shape_use = 0, -INF, INF, False, [], {}
        while time.monotonic() - start < time_limit_s:
            left = max(time_limit_s - (time.monotonic() - start), 0.5)
            self.h.setOptionValue("time_limit", self.h.getRunTime() + left)   # HiGHS counts its whole run time
            self.h.run()
            rounds += 1
            if self.h.getModelStatus() != self.optimal:
                log.info("bound: LP stopped (%s)", self.h.modelStatusToString(self.h.getModelStatus()))
                break
            value = self.h.getInfo().objective_function_value * self.reference + self.constant
            solution = self.h.getSolution()
            x = np.asarray(solution.col_value)
            z = x[self.z]
            shape_use = {int(s): float(v) for s, v in zip(self.shapes, z)}
            duals = np.asarray(solution.row_dual) * self.reference
            col_duals = np.asarray(solution.col_dual) * self.reference
            lagrange, added, cut_rows = 0.0, 0, 0
            for b in self.buckets:
                gap, gs, cs = self._price(b, duals, col_duals, per_group)
                lagrange += gap
                self.add_pairs(b, gs, cs)
                added += len(gs)
            bound = max(bound, value + lagrange)
            if added == 0:
                self.last_priced_out = duals
                self.first_priced_out = duals if self.first_priced_out is None else self.first_priced_out
            if added == 0 and cuts:
                cut_rows = sum(self.add_cuts(b, x, z) for b in self.buckets)
            history.append((value, value + lagrange))
            if progress:
                log.info("bound  LP %.6g  lagrangian bound %.6g  pairs +%d  cuts +%d  round %d  elapsed %.1fs",
                         value, bound, added, cut_rows, rounds, time.monotonic() - start)
            if added == 0 and cut_rows == 0:
                converged, bound = True, max(bound, value)
                break
        columns = int(sum(b.written.sum() for b in self.buckets))
        caps = {b.name: len(b.caps) for b in self.buckets}
        cut_total = int(sum((b.cut_of >= 0).sum() for b in self.buckets))
        return BoundResult(bound, value, converged, rounds, columns, time.monotonic() - start, caps, history,
                           shape_use=shape_use, cuts=cut_total)

    @property
    def constant(self) -> float:
        return sum(b.constant for b in self.buckets)

    def _price(self, b: BucketLP, duals: np.ndarray, col_duals: np.ndarray, per_group: int,
               chunk: int = 4_000_000):
        """(Lagrangian term, new groups, new classes). The term is sum_g n_g * min_c rc[g, c] less what the
        restricted LP already counts for written pairs at their upper bound, with rc of a written pair its
        LP reduced cost (link row included) and of an unwritten one c - A^T y (its link row's dual is 0):
        the demand rows kept, every other row dualized. New pairs: the most negative unwritten per group."""
        cap_dual = duals[b.capacity]
        pi = duals[b.demand]
        tol = 1e-9 * b.obj_scale
        term, new_g, new_c = 0.0, [], []
        step = max(1, chunk // max(b.num_classes, 1))
        has_cuts = bool((b.cut_of >= 0).any())                  # no cut yet: no cut duals to gather
        for lo in range(0, len(b.n), step):
            gs = np.arange(lo, min(lo + step, len(b.n)))
            obj, coef = b.member(gs[:, None], np.arange(b.num_classes)[None, :])
            base = obj - cap_dual[None, :]
            for key, per_x in coef.items():
                base = base - duals[b.limit_rows[key]] * per_x
            if has_cuts:
                cut = b.cut_of[gs][:, b.ci]
                base = base - np.where(cut >= 0, duals[np.maximum(cut, 0)], 0.0)
            fresh = np.where(b.eligible(gs), base - pi[gs][:, None], np.inf)
            cols = b.col_of[gs]
            written = cols >= 0
            lp_rc = np.where(written, col_duals[np.maximum(cols, 0)], 0.0)
            rc = np.where(written, lp_rc, fresh)
            term += float((b.n[gs] * rc.min(axis=1)).sum())
            term -= float((b.n[gs][:, None] * np.minimum(lp_rc, 0.0)).sum())
            fresh = np.where(written, np.inf, fresh)
            order = np.argsort(fresh, axis=1)[:, :per_group]
            take = np.take_along_axis(fresh, order, axis=1) < -tol
            new_g.append(np.broadcast_to(gs[:, None], order.shape)[take])
            new_c.append(order[take])
        return term, np.concatenate(new_g), np.concatenate(new_c)


def joined(before: BoundResult, after: BoundResult) -> BoundResult:
    """One LP's figures over two calls on its model (column generation, then more of it or with cuts)."""
    return BoundResult(max(before.bound, after.bound), after.lp_value, after.converged, before.rounds + after.rounds,
                       after.columns, before.time_s + after.time_s, after.caps, before.history + after.history,
                       shape_use=after.shape_use or before.shape_use, cuts=after.cuts)


def lift(model: GlobalBound, result: BoundResult, left_s: float) -> None:
    """Raise an LP's bound to the whole-batch bound (solver/batch_bound.py) at the duals of its LPs no pair priced
    into, its limit duals ascended, when that is higher. Unconverged duals are not tried: measured, they give far
    less than the LP."""
    duals = [d for d in (model.first_priced_out, model.last_priced_out) if d is not None]
    if len(duals) == 2 and duals[0] is duals[1]:
        duals = duals[:1]
    if not duals:
        return
    value = ascend(model, duals, model.reference, left_s)
    if value is None:
        return
    result.batch_bound = value
    log.info("bound: whole batches at the LP's duals: %.6g (LP bound %.6g)", result.batch_bound, result.bound)
    result.bound = max(result.bound, result.batch_bound)


def grace_s(result: BoundResult, stage_s: float, most_s: float = INF) -> float:
    """More time for an LP its time stopped close to converging: GRACE_SHARE of the stage's, at most `most_s`, when
    its last round's Lagrangian bound was within GRACE_GAP of its LP value; else 0. Measured on the default config: the 12-cap LP
    converges in 16-22 s from run to run on the same machine, and stopped short of it the stage keeps the Lagrangian
    bound of its last round (8.53e11 at 20.8 s, its LP 8.62e11) instead of the LP's 8.61e11 and the whole-batch
    bound's 9.4e11 at its converged duals. The time comes out of CP-SAT's share (the polish keeps its own), so the
    pipeline caps it (solver/stages.bound_overrun)."""
    if result.converged or not result.history or most_s <= 0:
        return 0.0
    value, lagrangian = result.history[-1]
    return min(GRACE_SHARE * stage_s, most_s) if value - lagrangian <= GRACE_GAP * abs(value) else 0.0


def cap_ladder(max_caps: int, context_mode: bool) -> list[int]:
    """Gen caps of each LP the bound solves in turn, coarse first. A coarse LP converges in seconds and its value
    is then a bound; a finer one is tighter but slower (default config, one core, seeded with dp's plan, to
    convergence: 12 caps 8.61e11 in 17 s, 24 caps 9.18e11 in 91 s, 48 caps 9.63e11 in 257 s). Context mode: one LP
    over every distinct gen, which converges in seconds."""
    if context_mode:
        return [max_caps]
    return [c for c in LADDER if c < max_caps] + [max_caps]


def global_bound(inst: Instance, reference: float, time_limit_s: float, max_caps: int = 160,
                 progress: bool = True, plans: dict | None = None, overrun_s: float = INF) -> BoundResult | None:
    """The bound, or None where it does not apply (spec 4b semantics other than section 4 and context mode, or
    highspy missing). The LPs of cap_ladder run in turn while the previous one converged and at least FINER_START
    times its time is left (with less, a finer LP stays below the coarse bound: on the default config, seeded with
    dp's plan, the 48-cap LP proves 5.1e11, 6.0e11, 7.1e11, 7.8e11, 8.4e11 after 1, 13, 50, 84, 119 s, beside the
    12-cap LP's 8.61e11 in 17 s; the time a finer LP does not take goes to CP-SAT). The last LP goes on with cuts
    in the time left (48 caps: 9.633e11 converged after 249 s, 9.713e11 89 s later). An LP stopped close to
    converging gets grace_s more, all graces together at most `overrun_s`. The answer is the best bound any
    reached, with the figures of the LP that reached it."""
    if not (inst.cfg.cost_model.section4 or inst.costs.context_mode) or \
            (inst.costs.context_mode and inst.cfg.batching.max_batch_tokens):
        return None
    try:
        import highspy  # noqa: F401
    except ImportError:
        log.warning("bound: highspy is not installed; only the pre-search bound is available")
        return None
    start, best, runs = time.monotonic(), None, []
    ladder = cap_ladder(max_caps, inst.costs.context_mode)
    for k, caps in enumerate(ladder):
        left = time_limit_s - (time.monotonic() - start)
        if left <= 0 or (runs and left < FINER_START * runs[-1].time_s):
            if runs:
                log.info("bound: %.1fs left, too few for a %d-cap LP after %.1fs for the last", max(left, 0), caps,
                         runs[-1].time_s)
            break
        model = GlobalBound(inst, inst.cfg.objective.weight_map(), reference, caps)
        reserve = lift_seconds(model)                  # the whole-batch bound's two starts, kept from the LP's time;
                                                       # its ascent's steps come from the time of the cuts
        result = model.run(max(left - reserve, 0.0), progress=progress, plans=plans)
        grace = grace_s(result, time_limit_s, overrun_s)
        if grace > 0:
            log.info("bound: the %d-cap LP is close to converging; %.1fs more", caps, grace)
            result, overrun_s = joined(result, model.run(grace, progress=progress)), overrun_s - grace
        left = time_limit_s - reserve - lift_seconds(model, ASCENT_STEPS) - (time.monotonic() - start)
        if result.converged and left > 0 and (k + 1 == len(ladder) or left < FINER_START * result.time_s):
            result = joined(result, model.run(left, progress=progress, cuts=True))   # the last LP: cuts
        lift(model, result, max(time_limit_s + overrun_s - (time.monotonic() - start), reserve))
        runs.append(result)
        log.info("bound: %d caps: %s %.6g in %.1fs", caps, "converged at" if result.converged else "stopped at",
                 result.bound, result.time_s)
        if best is None or result.bound > best.bound:
            best = result
        if not result.converged:
            break
    if best is None:
        return None
    best.ladder = [(max(r.caps.values()), r.bound, r.converged, r.time_s) for r in runs]
    best.time_s = time.monotonic() - start
    return best
