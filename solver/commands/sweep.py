"""Re-solve a config over a grid of values and tabulate the trade-offs (spec section 7).

Points run through `solver.parallel.map_tasks`: a local process pool or Ray tasks. The traces are
loaded once here and shipped once to the workers. Every finished point is written into
`sweep.csv` at once (the whole file replaced atomically, rows in grid order), so an interrupted
sweep leaves a valid CSV and `resume=True` skips the points already in it. A point that fails for
good is a row with `status` FAILED and its `error`; the others go on.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import logging
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from models.config import load_config, parse_value
from models.errors import InputError
from models.files import read_text
from solver.commands.output import add_files, open_folder, protected_paths, replace_set
from solver.parallel import Shared, check_backend, map_tasks

log = logging.getLogger(__name__)
TRADE_OFFS = ("total_cost", "compile_cost", "pad_ratio", "num_batches", "sequential_time_ms", "gap")
ROW_COLUMNS = ("method", "objective", "total_cost", "compile_cost", "num_shapes", "shapes", "pad_tokens",
               "pad_ratio", "num_batches", "sequential_time_ms", "p95_latency_ms", "limits_hold", "broken",
               "best_bound", "gap", "status")
BUCKET_COLUMNS = ("cost", "pad_ratio", "p95_latency_ms", "sequential_time_ms", "num_batches")
FAILED = "FAILED"
CSV = "sweep.csv"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: the finished rows are in `path`."""

    def __init__(self, done: int, total: int, path: Path | None):
        super().__init__(f"{done} of {total} points done")
        self.done, self.total, self.path = done, total, path


def parse_sets(items: list[str]) -> dict[str, list]:
    """`key=v1,v2,...` strings -> {key: [values]}, in the order given."""
    grid = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise InputError(f"--set {item!r} must look like key=v1,v2,... (e.g. shapes.max_unique=4,8)")
        grid[key.strip()] = [parse_value(v.strip()) for v in values.split(",")]
    if not grid:
        raise InputError("give at least one --set key=v1,v2,...")
    return grid


def grid_points(grid: dict[str, list]) -> list[dict]:
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


# --- one point ----------------------------------------------------------------------------------------

def solve_point(cfg, point: dict, method: str, time_limit: float | None, requests: dict) -> dict:
    """Solve one grid point (in a worker) on already loaded traces and flatten its figures into a row."""
    from solver.pipeline import solve

    logging.getLogger().setLevel(logging.WARNING)
    res = solve(cfg, (method,), time_limit, requests={n: fresh(r) for n, r in requests.items()})
    return result_row(point, method, res.results[method])


def fresh(req):
    """A private copy of a bucket's arrays: the solve may set fields, and Ray's arrays are read-only."""
    arrays = {f.name: getattr(req, f.name) for f in dataclasses.fields(req)}
    return dataclasses.replace(req, **{k: v.copy() for k, v in arrays.items() if isinstance(v, np.ndarray)})


def result_row(point: dict, method: str, r) -> dict:
    real = sum(m.real_tokens for m in r.metrics.values())
    row = dict(point)
    row.update({"method": method, "objective": r.objective, "total_cost": r.total_cost,
                "compile_cost": r.total_cost - sum(m.batch_cost for m in r.metrics.values()),
                "num_shapes": len(r.shapes), "shapes": " ".join(map(str, r.shapes)),
                "pad_tokens": sum(m.pad_tokens for m in r.metrics.values()),
                "pad_ratio": sum(m.pad_tokens for m in r.metrics.values()) / real,
                "num_batches": sum(m.num_batches for m in r.metrics.values()),
                "sequential_time_ms": sum(m.sequential_time_ms for m in r.metrics.values()),
                "p95_latency_ms": max(m.p95_latency_ms for m in r.metrics.values()),
                "limits_hold": r.feasible,
                "broken": " ".join(f"{b}.{k}" for b, m in r.metrics.items() for k in m.broken()),
                "best_bound": r.solver.get("best_bound"), "gap": r.solver.get("gap"),
                "status": r.solver.get("status", "")})
    for b, m in r.metrics.items():
        row.update({f"{b}.cost": m.cost, f"{b}.pad_ratio": m.pad_ratio, f"{b}.p95_latency_ms": m.p95_latency_ms,
                    f"{b}.sequential_time_ms": m.sequential_time_ms, f"{b}.num_batches": m.num_batches})
    return row


def failed_row(point: dict, method: str, error: str) -> dict:
    return dict(point, method=method, status=FAILED, error=error)


# --- the grid's configs and traces -------------------------------------------------------------------

def point_configs(config: str, points: list[dict], workers: int, deterministic_time: float | None = None) -> list:
    """Every point's config, each valid before anything runs (one clear error, nothing written). The points
    are the parallel tasks: each point's own LNS runs in its worker (solver.backend local)."""
    fixed = {"solver.workers": workers, "solver.log_progress": False, "solver.backend": "local",
             "solver.address": None}
    if deterministic_time is not None:
        fixed["solver.deterministic_time"] = deterministic_time
    cfgs = []
    for point in points:
        try:
            cfgs.append(load_config(config, dict(point, **fixed)))
        except InputError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in point.items())
            raise InputError(f"sweep point {shown}: {exc}") from None
    return cfgs


def check_points(config: str, points: list[dict]) -> None:
    point_configs(config, points, 1)


def trace_key(cfg) -> str:
    return repr([(b.name, str(b.requests), b.columns) for b in cfg.buckets])


def load_traces(cfgs: list) -> dict[str, dict]:
    """The traces of every distinct set of bucket files among the points, each loaded once."""
    from solver.pipeline import load_all

    traces = {}
    for cfg in cfgs:
        key = trace_key(cfg)
        if key not in traces:
            traces[key] = load_all(cfg)
    return traces


def default_workers(jobs: int, points: int) -> int:
    """CP-SAT workers per point: this machine's cores shared by the points solved at once (at least 4:
    a single CP-SAT worker has no LNS and rarely moves off the hint)."""
    cores = os.cpu_count() or 1
    return max(4, cores // min(jobs or cores, max(points, 1)))


# --- the CSV ------------------------------------------------------------------------------------------

def cell(value) -> str:
    """One CSV cell, the same text whichever process made the value."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    return str(value)


def point_id(point: dict, keys: list[str]) -> str:
    return repr(tuple(point[k] for k in keys))


class SweepTable:
    """The rows so far, written to `folder`/sweep.csv (when given) after every new row: grid order, swapped in
    atomically (the caller holds the folder: see sweep_folder)."""

    def __init__(self, keys: list[str], buckets: list[str], points: list[dict], folder: Path | None):
        self.keys, self.folder = keys, folder
        self.path = folder / CSV if folder is not None else None
        self.columns = keys + list(ROW_COLUMNS) + [f"{b}.{c}" for b in buckets for c in BUCKET_COLUMNS] + ["error"]
        self.index = {point_id(p, keys): i for i, p in enumerate(points)}
        self.rows: dict[int, dict] = {}
        self.extra: list[dict] = []

    def resume(self) -> int:
        """Take the finished rows of an earlier run from `path`; returns how many points they cover."""
        if self.path is None or not self.path.exists():
            return 0
        reader = csv.DictReader(io.StringIO(read_text(self.path, "sweep table"), newline=""))
        missing = [k for k in self.keys if k not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{self.path}: no column {missing[0]!r}: --resume needs the --set keys of the "
                             "run that wrote it")
        try:
            for row in reader:
                self.take(row)
        except (csv.Error, yaml.YAMLError, TypeError) as exc:
            raise InputError(f"{self.path}:{reader.line_num}: not a sweep table row ({exc}); move the file away "
                             "or run without --resume") from None
        return len(self.rows)

    def take(self, row: dict) -> None:
        if row.get("error") or row.get("status") == FAILED:
            return                                   # failed points run again
        i = self.index.get(point_id({k: parse_value(row[k]) for k in self.keys}, self.keys))
        if i is None:
            self.extra.append(row)                   # a point of another grid: kept, after the grid's
        else:
            self.rows[i] = row

    def add(self, i: int, row: dict) -> None:
        self.rows[i] = row
        if self.folder is not None:
            replace_set(self.folder, {CSV: self.text().encode()}, keep_others=True)

    def text(self) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, self.columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in [self.rows[i] for i in sorted(self.rows)] + self.extra:
            writer.writerow({c: cell(row.get(c)) for c in self.columns})
        return buf.getvalue()

    def frame(self) -> pd.DataFrame:
        return pd.read_csv(io.StringIO(self.text()))


class Progress:
    """One stderr line per finished point: done / running / failed, elapsed, ETA."""

    def __init__(self, total: int, done: int, stream=None):
        self.total, self.done, self.failed, self.running, self.new = total, done, 0, 0, 0
        self.start, self.stream = None, stream or sys.stderr

    def started(self, _index=None) -> None:
        """A point handed to a worker; the clock starts at the first (not counting a cluster's start-up)."""
        self.start = self.start or time.monotonic()
        self.running += 1

    def finished(self, ok: bool) -> None:
        self.running -= 1
        self.new += 1
        if ok:
            self.done += 1
        else:
            self.failed += 1
        print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        elapsed = time.monotonic() - (self.start or time.monotonic())
        left = self.total - self.done - self.failed
        eta = f"{elapsed / self.new * left:.0f} s" if self.new else "?"
        return (f"sweep: {self.done}/{self.total} done, {self.running} running, {self.failed} failed, "
                f"{elapsed:.0f} s elapsed, ETA {eta}")


# --- the sweep ----------------------------------------------------------------------------------------

def run_sweep(config: str, grid: dict[str, list], method: str = "cpsat", time_limit: float | None = None,
              jobs: int = 0, backend: str = "local", address: str | None = None, out: Path | None = None,
              resume: bool = False, max_retries: int = 2, workers: int | None = None,
              point_fn=solve_point, deterministic_time: float | None = None) -> pd.DataFrame:
    """One row per grid point, in grid order. Points run on `backend` ("local": a process pool of
    `jobs`; "ray": Ray tasks on the cluster at `address`, or a local Ray), with `workers` CP-SAT
    workers each (default `default_workers`; Ray reserves that many CPUs, at most a node's). With
    `out`, `out/sweep.csv` is rewritten after every finished point; `resume` skips its finished rows.
    Ctrl-C cancels the outstanding points and raises `Interrupted` (the finished rows are kept).
    `deterministic_time` sets solver.deterministic_time on every point: rows then do not depend on load."""
    check_backend(backend)
    if resume and out is None:
        raise InputError("resume needs the output folder holding sweep.csv")
    points = grid_points(grid)
    workers = workers or default_workers(jobs, len(points))
    cfgs = point_configs(config, points, workers, deterministic_time)
    buckets = list(dict.fromkeys(b.name for cfg in cfgs for b in cfg.buckets))
    with sweep_folder(out, cfgs) as folder:
        table = SweepTable(list(grid), buckets, points, folder)
        done = table.resume() if resume else 0
        todo = [i for i in range(len(points)) if i not in table.rows]
        traces = load_traces([cfgs[i] for i in todo])
        log.info("sweep: %d points (%d already done), backend %s, %d CP-SAT workers each",
                 len(points), done, backend, workers)
        items = [(cfgs[i], points[i], method, time_limit, Shared(trace_key(cfgs[i]))) for i in todo]
        progress = Progress(len(points), done)
        try:
            for d in map_tasks(point_fn, items, backend, address, jobs=jobs, num_cpus=workers,
                               max_retries=max_retries, shared=traces, on_start=progress.started):
                i = todo[d.index]
                if d.error is not None:
                    log.warning("sweep point %s failed: %s", points[i], d.error)
                progress.finished(d.error is None)        # first: a Ctrl-C held while the row is written
                table.add(i, d.value if d.error is None else failed_row(points[i], method, d.error))
        except KeyboardInterrupt:
            raise Interrupted(progress.done, len(points), table.path) from None
        return table.frame()


@contextmanager
def sweep_folder(out: Path | None, cfgs: list):
    """The output folder held for the whole sweep (checked, locked, sweep.csv ours or free), or None."""
    if out is None:
        yield None
        return
    inputs = [p for cfg in cfgs for p in protected_paths(cfg)]
    with open_folder(Path(out), inputs, [CSV]) as folder:
        yield folder


def write_plots(frame: pd.DataFrame, keys: list[str], out: Path) -> list[Path]:
    """One PNG of the trade-offs per swept key, from the points that did not fail, added to the folder's
    files (a failure is a warning: sweep.csv is complete)."""
    from solver.commands.plots import sweep_plots

    ok = frame[frame["status"].astype(str) != FAILED] if "status" in frame else frame
    if ok.empty:
        return []

    def produce(folder: Path) -> list[Path]:
        written = []
        for key in keys:
            order = [key] + [k for k in keys if k != key]
            name = key.replace("*", "all").replace(".", "_")
            written.append(sweep_plots(ok, order, [m for m in TRADE_OFFS if ok[m].notna().any()],
                                       folder / f"sweep_{name}.png"))
        return written
    return add_files(Path(out), produce, "sweep plots")


def write_sweep(frame: pd.DataFrame, keys: list[str], out: Path) -> list[Path]:
    """sweep.csv (atomic, into a folder of its own: see open_folder) and the plots, for a frame from
    `run_sweep` without `out`."""
    with open_folder(Path(out), [], [CSV]) as folder:
        replace_set(folder, {CSV: frame.to_csv(index=False).encode()}, keep_others=True)
    return [folder / CSV] + write_plots(frame, keys, folder)
