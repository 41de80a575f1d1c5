"""The pair (facility-location) form of the assignment, for a fixed set of candidate shapes.

The CP-SAT model counts requests per class through flows; its LP lets a class hold a fraction
of a batch, so under a sequential-time limit its search has little to go on. Here every pair
(request group g, class c) has its own count x[g, c] <= n_g * y[c], y[c] meaning "class c holds
a batch" (y[c] <= z[shape], y[c] <= k[c], its batch count). Groups are as fine as the gens allow
(every distinct gen when there are at most `group_caps` of them), so n_g is small and the LP is
nearly integral once the shapes are fixed.

All pairs would be too many, so they are priced in (column generation): the LP over the pairs of
a starting plan and a few neighbours is solved, every other pair's reduced cost comes from the
duals, the most negative ones are added, and so on. A MIP over the pairs written then gives the
plan. Classes are charged at their gen cap, so a plan costs at most what the model says; limits
are soft (priced far above any plan), so the model always has a solution.

Variables per bucket: x[g, c] (pairs written), y[c] in {0, 1}, k[c] >= 0, one slack per limit, and under
`compile_in_bucket_cost` with a bucket cost limit u[i] in {0, 1} (the bucket uses shape i: its compile cost
enters that limit); global: z[i] in {0, 1} per shape. In spec 4b context mode (decode from the batch's longest aligned prompt,
prefill and prompt padding per request) a class level is that decode context, groups are by own aligned
prompt, and a class's batches take the smallest chosen shape covering its level (y[c] <= sum of those z); latency
limits count a class's members at its slowest member's latency and the first-use latency is left out
(the plan is judged exactly afterwards). HiGHS (highspy) solves the LPs, in one live model grown round by round
(LiveLP), and the MIP (solve_mip, started from the plan polished); PairModel.solve, the same model assembled afresh
through scipy, is the reference the tests hold both to.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from models.config import Config
from models.cost import Costs
from models.cpsat_model import class_data
from models.highs import add_linked_columns, quiet_highs
from models.instance import BucketGroups, Space, as_space, batch_classes, group_bucket, limit_rhs
from models.plan import BucketPlan
from models.requests import Requests

log = logging.getLogger(__name__)


@dataclass
class PricingResult:
    """What the column generation did."""

    lp_value: float = field(metadata={"description": "objective of the last LP (over the pairs written)"})
    converged: bool = field(metadata={"description": "no pair with negative reduced cost was left"})
    rounds: int = field(metadata={"description": "LP solves"})
    columns: int = field(metadata={"description": "pairs written"})
    time_s: float = field(metadata={"description": "wall time"})


class BucketPairs:
    """One bucket's classes (shape level, gen cap level), fine groups, and the pairs written so far."""

    def __init__(self, cfg: Config, costs: Costs, shapes: Space | np.ndarray, req: Requests, limits: dict,
                 weights: dict[str, float], cls: BucketGroups, group_caps: int):
        self.space = as_space(cfg, shapes)
        self.req, self.shapes, self.caps = req, np.asarray(self.space.shapes), cls.caps
        self.levels = np.asarray(self.space.levels)
        grp = group_bucket(req, self.levels, group_caps, keep_caps=cls.caps, keep_all=True,
                           level=self.space.level_of(req))
        d = class_data(cfg, costs, self.space, cls, limits, req)
        self.ci, self.cj = np.nonzero(d.capacity > 0)
        self.link = np.asarray(self.space.cover)[self.ci]                # per class, the shape its batches take
        self.gi, gj = np.nonzero(grp.counts)
        self.group_caps = grp.caps
        self.n = grp.counts[self.gi, gj].astype(np.float64)           # requests per group
        self.gj = np.searchsorted(cls.caps, grp.caps[gj])              # class gen level of each group
        ci, cj = self.ci, self.cj
        self.cost, self.lat = d.per_request[ci, cj], d.latency[ci, cj]
        self.tok, self.cap = d.tokens[ci, cj].astype(np.float64), d.capacity[ci, cj].astype(np.float64)
        wc, wp, ws = (weights.get(k, 0.0) for k in ("cost", "pad_tokens", "sequential_time_ms"))
        self.oh = cfg.cost_model.batch_overhead_cost
        self.obj_x = wc * self.cost + wp * self.tok                     # per member of a class
        self.obj_k = wc * self.oh + ws * self.lat                       # per batch of a class
        self.constant = wc * d.cost_const + wp * d.pad_const
        self.rhs = limit_rhs(limits, cls, d.pad_const)
        if "cost" in self.rhs:
            self.rhs["cost"] -= d.cost_const
        # per limit: (family summed, coefficient per class); family x = members, k = batches
        self.rows: dict[str, tuple[str, np.ndarray]] = {}
        if "sequential_time_ms" in self.rhs:
            self.rows["sequential_time_ms"] = ("k", self.lat)
        if "pad" in self.rhs:
            self.rows["pad"] = ("x", self.tok)
        for key in ("p95_latency_ms", "p99_latency_ms"):
            if key in self.rhs:
                self.rows[key] = ("x", (self.lat > limits[key]).astype(np.float64))
        if "cost" in self.rhs:
            self.rows["cost"] = ("xk", self.cost)
        self.class_index = {(int(i), int(j)): c for c, (i, j) in enumerate(zip(ci, cj))}
        self.group_of = {(int(i), int(g)): t for t, (i, g) in enumerate(zip(self.gi, grp.caps[gj]))}
        self.pg = np.zeros(0, dtype=np.int64)                           # pair -> group
        self.pc = np.zeros(0, dtype=np.int64)                           # pair -> class

    @property
    def num_classes(self) -> int:
        return len(self.ci)

    def request_groups(self) -> np.ndarray:
        """The fine group of every request."""
        gi = self.space.level_of(self.req)
        gen = self.group_caps[np.searchsorted(self.group_caps, self.req.gen)]
        return np.array([self.group_of[(a, b)] for a, b in zip(gi.tolist(), gen.tolist())], dtype=np.int64)

    def add_plan(self, plan: BucketPlan) -> None:
        """Write the pairs a plan uses, so the model holds that plan: each batch at the smallest
        candidate holding its members, its cap level the one of its longest gen."""
        bi, bj = batch_classes(self.req, plan, self.shapes, self.caps, self.space)
        groups = self.request_groups()
        pairs = set(zip(groups.tolist(), bi[plan.batch_of].tolist(), bj[plan.batch_of].tolist()))
        new = [(g, self.class_index[(i, j)]) for g, i, j in pairs if (i, j) in self.class_index]
        self.add_pairs(np.array([p[0] for p in new], dtype=np.int64), np.array([p[1] for p in new], dtype=np.int64))

    def plan_counts(self, plan: BucketPlan):
        """(pair keys group * classes + class, requests per pair, batches per class) of a plan, each batch in the
        class add_plan gives it; None when a batch has no class here."""
        bi, bj = batch_classes(self.req, plan, self.shapes, self.caps, self.space)
        cls = np.array([self.class_index.get((int(i), int(j)), -1) for i, j in zip(bi, bj)], dtype=np.int64)
        members = np.bincount(plan.batch_of, minlength=len(bi)) > 0
        if np.any(cls[members] < 0):
            return None
        batches = np.bincount(cls[members], minlength=self.num_classes).astype(np.float64)
        keys = self.request_groups() * self.num_classes + cls[plan.batch_of]
        pairs, x = np.unique(keys, return_counts=True)
        return pairs, x.astype(np.float64), batches

    def add_neighbours(self, span_i: int = 1, span_j: int = 3) -> None:
        """Write each group's pairs with the classes a few shape and cap levels above its own, and
        with the top class (largest shape, longest cap), which every group may join: so the LP
        has a solution whatever else is written."""
        di, dj = np.meshgrid(np.arange(span_i + 1), np.arange(span_j + 1), indexing="ij")
        ti = (self.gi[:, None] + di.ravel()[None, :]).ravel()
        tj = (self.gj[:, None] + dj.ravel()[None, :]).ravel()
        gs = np.repeat(np.arange(len(self.n)), di.size)
        lookup = np.full((len(self.levels) + span_i + 1, len(self.caps) + span_j + 1), -1, dtype=np.int64)
        lookup[self.ci, self.cj] = np.arange(self.num_classes)
        cs = lookup[ti, tj]
        top = lookup[self.ci.max(), self.cj[self.ci == self.ci.max()].max()]
        self.add_pairs(np.r_[gs[cs >= 0], np.arange(len(self.n))], np.r_[cs[cs >= 0], np.full(len(self.n), top)])

    def shape_link(self, yo: int) -> tuple[list, list, list]:
        """(rows, columns, values) of y[c] <= z[shape of c] (shape mode) or y[c] <= sum of z[t] over the shapes t
        covering c's level (context mode: a batch may take any chosen shape at or above its cover)."""
        C, P = self.num_classes, len(self.shapes)
        if not self.space.context_mode:
            cls = np.arange(C)
            return [cls, cls], [yo + cls, self.link], [np.ones(C), -np.ones(C)]
        covering = np.arange(P)[None, :] >= self.link[:, None]
        rows, shapes = np.nonzero(covering)
        return [np.arange(C), rows], [yo + np.arange(C), shapes], [np.ones(C), -np.ones(len(rows))]

    def add_pairs(self, new_g: np.ndarray, new_c: np.ndarray) -> None:
        keys = np.unique(np.concatenate([self.pg * self.num_classes + self.pc, new_g * self.num_classes + new_c]))
        self.pg, self.pc = keys // self.num_classes, keys % self.num_classes

    def price(self, pi: np.ndarray, u_cap: np.ndarray, u_lim: dict[str, float], per_group: int,
              chunk: int = 2_000_000) -> tuple[np.ndarray, np.ndarray]:
        """Pairs not yet written with negative reduced cost (the most negative per_group of each group)."""
        base = self.obj_x - u_cap
        for key, (family, coef) in self.rows.items():
            if "x" in family:
                base = base - u_lim.get(key, 0.0) * coef
        tol = 1e-9 * np.maximum(np.abs(self.obj_x), 1.0)
        new_g, new_c = [], []
        step = max(1, chunk // max(self.num_classes, 1))
        for lo in range(0, len(self.n), step):
            gs = np.arange(lo, min(lo + step, len(self.n)))
            elig = (self.ci[None, :] >= self.gi[gs][:, None]) & (self.cj[None, :] >= self.gj[gs][:, None])
            written = (self.pg >= gs[0]) & (self.pg <= gs[-1])
            elig[self.pg[written] - gs[0], self.pc[written]] = False      # written pairs: priced by the LP
            rc = np.where(elig, base[None, :] - pi[gs][:, None], np.inf)
            order = np.argsort(rc, axis=1)[:, :per_group]
            take = np.take_along_axis(rc < -tol[None, :], order, axis=1) & \
                np.take_along_axis(elig, order, axis=1)
            new_g.append(np.broadcast_to(gs[:, None], order.shape)[take])
            new_c.append(order[take])
        return np.concatenate(new_g), np.concatenate(new_c)


class PairModel:
    """Assembles the model over the pairs written so far and solves it (LP or MIP) with HiGHS."""

    def __init__(self, cfg: Config, costs: Costs, shapes: Space | np.ndarray, requests: dict[str, Requests],
                 weights: dict[str, float], classes: dict[str, BucketGroups], reference: float,
                 group_caps: int = 2000):
        self.shapes = np.asarray(as_space(cfg, shapes).shapes, dtype=np.int64)
        self.max_unique = cfg.shapes.max_unique
        limits = {b.name: dict(b.limits.items()) for b in cfg.buckets}
        self.buckets = {n: BucketPairs(cfg, costs, shapes, r, limits[n], weights, classes[n], group_caps)
                        for n, r in requests.items()}
        self.compile = weights.get("cost", 0.0) * costs.compile(self.shapes.astype(np.float64))
        # a bucket cost limit carries the compile cost of the shapes the bucket uses (spec 4b compile_in_bucket_cost)
        self.bucket_compile = costs.compile(self.shapes.astype(np.float64)) \
            if cfg.cost_model.compile_in_bucket_cost else None
        self.reference = max(abs(reference), 1.0)      # objective scale: HiGHS works on objective / reference

    def _assemble(self):
        P = len(self.shapes)
        obj, lo, hi = [self.compile], [np.zeros(P)], [np.ones(P)]
        ub, eq = Rows(), Rows()
        ub.add([np.zeros(P, dtype=np.int64)], [np.arange(P)], [np.ones(P)], [float(self.max_unique)])
        layout, off = {}, P
        for name, b in self.buckets.items():
            X, C, keys = len(b.pg), b.num_classes, list(b.rows)
            xo, yo, ko, so = off, off + X, off + X + C, off + X + 2 * C
            uses = self.bucket_compile is not None and "cost" in b.rows     # its shapes enter its cost limit
            off = so + len(keys) + (P if uses else 0)
            # where the bucket's variables start, its limits, and its first demand and inequality blocks
            layout[name] = (xo, yo, ko, so, keys, len(eq.blocks), len(ub.blocks))
            penalty = [100.0 * self.reference / max(b.rhs[k], 1.0) for k in keys]
            obj += [b.obj_x[b.pc], np.zeros(C), b.obj_k, np.array(penalty)] + [np.zeros(P)] * uses
            lo += [np.zeros(X), np.zeros(C), np.zeros(C), np.zeros(len(keys))] + [np.zeros(P)] * uses
            hi += [b.n[b.pg], np.ones(C), np.full(C, np.inf), np.full(len(keys), np.inf)] + [np.ones(P)] * uses
            r, cls = np.arange(X), np.arange(C)
            eq.add([b.pg], [xo + r], [np.ones(X)], b.n)                                       # demand
            ub.add([r, r], [xo + r, yo + b.pc], [np.ones(X), -b.n[b.pg]], np.zeros(X))        # x <= n_g y
            ub.add([b.pc, cls], [xo + r, ko + cls], [np.ones(X), -b.cap], np.zeros(C))        # capacity
            ub.add([cls, cls], [yo + cls, ko + cls], [np.ones(C), -np.ones(C)], np.zeros(C))  # y <= k
            ub.add(*b.shape_link(yo), np.zeros(C))          # y <= z (context mode: y <= sum of z covering)
            for t, key in enumerate(keys):
                family, coef = b.rows[key]
                zeros_x, zeros_c = np.zeros(X, dtype=np.int64), np.zeros(C, dtype=np.int64)
                rows, cols, vals = [np.zeros(1, dtype=np.int64)], [np.array([so + t])], [np.array([-1.0])]
                if "x" in family:
                    rows.append(zeros_x); cols.append(xo + r); vals.append(coef[b.pc])
                if "k" in family:
                    rows.append(zeros_c); cols.append(ko + cls)
                    vals.append(coef if family == "k" else np.full(C, b.oh))
                if key == "cost" and uses:
                    rows.append(np.zeros(P, dtype=np.int64)); cols.append(so + len(keys) + np.arange(P))
                    vals.append(self.bucket_compile)
                ub.add(rows, cols, vals, [b.rhs[key]])
            if uses:
                self._add_bucket_shapes(ub, b, yo, so + len(keys))
        return np.concatenate(obj), np.concatenate(lo), np.concatenate(hi), ub, eq, layout, off

    def _add_bucket_shapes(self, ub: Rows, b: BucketPairs, yo: int, uo: int) -> None:
        """u[t] (columns from uo): the bucket uses shape t; y[c] <= u[shape of c] (context mode: y[c] <= the sum of
        u over the shapes covering c's level, which the plan writer may not pick exactly), and u[t] <= z[t]."""
        rows, cols, vals = b.shape_link(yo)
        ub.add(rows, [cols[0], uo + cols[1]], vals, np.zeros(b.num_classes))
        P = len(self.shapes)
        ub.add([np.arange(P), np.arange(P)], [uo + np.arange(P), np.arange(P)], [np.ones(P), -np.ones(P)], np.zeros(P))

    def solve(self, time_left: float, integral: bool = False):
        """(scipy result, rows, layout); objective values in real units via value(). The model assembled afresh and
        solved through scipy: the reference the tests hold the live LP and solve_mip to (the search uses those)."""
        c, lo, hi, ub, eq, layout, n = self._assemble()
        integrality = None
        if integral:
            integrality = np.ones(n)
            for xo, yo, ko, so, keys, _, _ in layout.values():
                integrality[so:so + len(keys)] = 0
        res = linprog(c / self.reference, A_ub=ub.matrix(n), b_ub=ub.rhs(), A_eq=eq.matrix(n), b_eq=eq.rhs(),
                      bounds=np.stack([lo, hi], axis=1), method="highs", integrality=integrality,
                      options={"time_limit": max(time_left, 1.0), "presolve": True})
        return res, (ub, eq), layout

    def start_values(self, plans: dict[str, BucketPlan], layout: dict, n: int) -> np.ndarray | None:
        """Every integer column's value in `plans` (pairs, batches per class, shapes; slacks 0: the solver fills
        them), or None when a plan has a batch of no class here or a pair not written."""
        v = np.zeros(n)
        used = np.zeros(len(self.shapes), dtype=bool)
        for name, b in self.buckets.items():
            xo, yo, ko, so, keys, _, _ = layout[name]
            counts = b.plan_counts(plans[name])
            if counts is None:
                return None
            pairs, x, batches = counts
            written = b.pg * b.num_classes + b.pc
            at = np.searchsorted(written, pairs)
            if np.any(at >= len(written)) or np.any(written[np.minimum(at, len(written) - 1)] != pairs):
                return None
            v[xo + at] = x
            v[ko:ko + b.num_classes] = batches
            v[yo:yo + b.num_classes] = batches > 0
            shapes = np.searchsorted(self.shapes, plans[name].seq_align)
            mine = np.zeros(len(self.shapes), dtype=bool)
            mine[shapes[shapes < len(self.shapes)]] = True
            mine[b.link[batches > 0]] |= not b.space.context_mode
            used |= mine
            if self.bucket_compile is not None and "cost" in b.rows:
                v[so + len(keys):so + len(keys) + len(self.shapes)] = mine
        v[:len(self.shapes)] = used
        return v

    def value(self, res) -> float:
        return float(res.fun) * self.reference + sum(b.constant for b in self.buckets.values())

    def price_in(self, time_limit_s: float, per_group: int = 12, max_rounds: int = 40) -> PricingResult:
        """Column generation: LP, price, add, until nothing prices in or time runs out. The LP lives in one HiGHS
        model (LiveLP): each round appends the new pairs and re-solves from the last basis."""
        start = time.monotonic()
        value, rounds, converged, live = math.inf, 0, False, None
        while rounds < max_rounds and time_limit_s - (time.monotonic() - start) > 0.5:
            live = live or LiveLP(self)
            answer = live.solve(time_limit_s - (time.monotonic() - start))
            rounds += 1
            if answer is None:
                break
            value, duals = answer
            added = 0
            for name, b in self.buckets.items():
                new_g, new_c = b.price(*duals[name], per_group)
                live.add_pairs(name, new_g, new_c)
                b.add_pairs(new_g, new_c)
                added += len(new_g)
            log.debug("pair model: round %d, LP %.6g, %d pairs priced in", rounds, value, added)
            if added == 0:
                converged = True
                break
        columns = sum(len(b.pg) for b in self.buckets.values())
        return PricingResult(value, converged, rounds, columns, time.monotonic() - start)


def load_highs(model: PairModel):
    """(a HiGHS model holding `model` over the pairs written, its inequality and equality rows as assembled, the
    layout, the column count): the inequality rows first, then the equalities."""
    import highspy

    cost, lo, hi, ub, eq, layout, n = model._assemble()
    inf = highspy.kHighsInf
    h = quiet_highs()
    A = sp.vstack([ub.matrix(n), eq.matrix(n)]).tocsc()
    h.addRows(ub.count + eq.count, np.r_[np.full(ub.count, -inf), eq.rhs()], np.r_[ub.rhs(), eq.rhs()], 0,
              np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
    h.addCols(n, cost / model.reference, lo, np.where(np.isfinite(hi), hi, inf), A.nnz,
              A.indptr[:-1].astype(np.int32), A.indices.astype(np.int32), A.data.astype(np.float64))
    return h, ub, eq, layout, n


def solve_mip(model: PairModel, time_left: float, plans: dict[str, BucketPlan] | None = None):
    """The pair MIP over the pairs written, by HiGHS: (column values or None when it found no solution, its
    objective in real units, the layout). With `plans` (each bucket's plan, its pairs written) those plans are its first incumbent: the MIP
    answers with them or better (in the model's objective)."""
    import highspy

    h, _, _, layout, n = load_highs(model)
    integer = np.ones(n, dtype=bool)
    for _, _, _, so, keys, _, _ in layout.values():
        integer[so:so + len(keys)] = False                      # the limit slacks stay continuous
    cols = np.flatnonzero(integer).astype(np.int32)
    h.changeColsIntegrality(len(cols), cols, np.full(len(cols), highspy.HighsVarType.kInteger))
    start = model.start_values(plans, layout, n) if plans else None
    if start is not None:
        h.setSolution(len(cols), cols, start[cols])               # HiGHS completes the slacks
    h.setOptionValue("time_limit", max(time_left, 1.0))
    h.run()
    highspy.Highs.resetGlobalScheduler(True)    # its worker threads end here: a process forked later finds none waiting
    if h.getInfo().primal_solution_status != 2:                # 2: a feasible solution
        log.info("pair model: no MIP solution (%s)", h.modelStatusToString(h.getModelStatus()))
        return None, math.inf, layout
    value = h.getInfo().objective_function_value * model.reference + sum(b.constant for b in model.buckets.values())
    return np.asarray(h.getSolution().col_value), value, layout


class LiveLP:
    """price_in's restricted LP in one live HiGHS model: assembled once from the pairs written when it starts, then
    grown by the pairs each round prices in (a column with its demand, capacity and limit entries, and its link row
    x <= n_g y) and re-solved from the previous basis by the dual simplex."""

    def __init__(self, model: PairModel):
        import highspy

        self.model = model
        self.optimal = highspy.HighsModelStatus.kOptimal
        self.h, ub, eq, layout, _ = load_highs(model)
        self.h.setOptionValue("simplex_strategy", 1)
        # per bucket: first y column, demand rows (per group), capacity rows (per class), limit rows (per key)
        self.rows = {}
        for name, (_, yo, _, _, keys, eq_block, first) in layout.items():
            self.rows[name] = (yo, ub.count + np.arange(*eq.blocks[eq_block]), np.arange(*ub.blocks[first + 1]),
                               {key: ub.blocks[first + 4 + t][0] for t, key in enumerate(keys)})

    def solve(self, time_left: float):
        """(LP value, {bucket: (demand duals, capacity duals, {limit: dual})} in real units), or None when HiGHS
        stopped short of the optimum."""
        self.h.setOptionValue("time_limit", self.h.getRunTime() + max(time_left, 1.0))  # HiGHS counts its whole run
        self.h.run()
        if self.h.getModelStatus() != self.optimal:
            log.info("pair model: LP stopped (%s)", self.h.modelStatusToString(self.h.getModelStatus()))
            return None
        ref = self.model.reference
        value = self.h.getInfo().objective_function_value * ref + sum(b.constant for b in self.model.buckets.values())
        dual = np.asarray(self.h.getSolution().row_dual) * ref
        return value, {name: (dual[demand], dual[capacity], {key: float(dual[r]) for key, r in limits.items()})
                       for name, (_, demand, capacity, limits) in self.rows.items()}

    def add_pairs(self, name: str, gs: np.ndarray, cs: np.ndarray) -> None:
        """Columns x[g, c] of bucket `name` (pairs not yet written) with their entries and link rows."""
        if len(gs) == 0:
            return
        b, (yo, demand, capacity, limits) = self.model.buckets[name], self.rows[name]
        rows, vals = [demand[gs], capacity[cs]], [np.ones(len(gs)), np.ones(len(gs))]
        for key, (family, coef) in b.rows.items():
            if "x" in family:
                rows.append(np.where(coef[cs] != 0, limits[key], -1))
                vals.append(coef[cs])
        add_linked_columns(self.h, b.obj_x[cs] / self.model.reference, b.n[gs], rows, vals, yo + cs)


class Rows:
    """A sparse constraint matrix built block by block."""

    def __init__(self):
        self.r, self.c, self.v, self.b, self.blocks, self.count = [], [], [], [], [], 0

    def add(self, rows, cols, vals, rhs):
        rhs = np.asarray(rhs, dtype=np.float64)
        for rr, cc, vv in zip(rows, cols, vals):
            self.r.append(np.asarray(rr, dtype=np.int64) + self.count)
            self.c.append(np.asarray(cc, dtype=np.int64))
            self.v.append(np.asarray(vv, dtype=np.float64))
        self.blocks.append((self.count, self.count + len(rhs)))
        self.b.append(rhs)
        self.count += len(rhs)

    def matrix(self, n: int):
        return sp.csr_matrix((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                             shape=(self.count, n))

    def rhs(self):
        return np.concatenate(self.b)
