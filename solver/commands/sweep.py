"""Re-solve a config over a grid of values and tabulate the trade-offs (spec section 7)."""
from __future__ import annotations

import itertools
import logging
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from models.config import load_config, parse_value
from models.errors import InputError

log = logging.getLogger(__name__)
TRADE_OFFS = ("total_cost", "compile_cost", "pad_ratio", "num_batches", "sequential_time_ms", "gap")


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


def point_row(config: str, point: dict, method: str, time_limit: float | None, workers: int) -> dict:
    """Solve one grid point (in a worker process) and flatten its figures into a row."""
    from solver.pipeline import solve

    logging.getLogger().setLevel(logging.WARNING)
    cfg = load_config(config, dict(point, **{"solver.workers": workers, "solver.log_progress": False}))
    res = solve(cfg, (method,), time_limit)
    r = res.results[method]
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


def check_points(config: str, points: list[dict]) -> None:
    """Every point must be a valid config before anything runs (one clear error, nothing written)."""
    for point in points:
        try:
            load_config(config, point)
        except InputError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in point.items())
            raise InputError(f"sweep point {shown}: {exc}") from None


def run_sweep(config: str, grid: dict[str, list], method: str = "cpsat", time_limit: float | None = None,
              jobs: int = 0) -> pd.DataFrame:
    """One row per grid point, points solved in parallel (CP-SAT threads shared among them)."""
    points = grid_points(grid)
    check_points(config, points)
    cores = os.cpu_count() or 1
    jobs = min(jobs or cores, len(points))
    workers = max(4, cores // jobs)   # a single CP-SAT worker has no LNS and rarely moves off the hint
    log.info("sweep: %d points, %d at a time, %d CP-SAT workers each", len(points), jobs, workers)
    if jobs == 1:
        rows = [point_row(config, p, method, time_limit, workers) for p in points]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            rows = list(pool.map(point_row, [config] * len(points), points, [method] * len(points),
                                 [time_limit] * len(points), [workers] * len(points)))
    return pd.DataFrame(rows)


def write_sweep(frame: pd.DataFrame, keys: list[str], out: Path) -> list[Path]:
    """sweep.csv and one PNG of the trade-offs per swept key (atomic writes)."""
    from solver.commands.plots import sweep_plots

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "sweep.csv.tmp"
    frame.to_csv(tmp, index=False)
    tmp.replace(out / "sweep.csv")
    written = [out / "sweep.csv"]
    for i, key in enumerate(keys):
        order = [key] + [k for k in keys if k != key]
        name = key.replace("*", "all").replace(".", "_")
        written.append(sweep_plots(frame, order, [m for m in TRADE_OFFS if frame[m].notna().any()],
                                   out / f"sweep_{name}.png"))
    return written
