#!/usr/bin/env python
"""Sweep wall time against CPU count, local process pool vs a local Ray instance (README: Sweeps on a
Ray cluster). CPU heavy: every CPU count runs the whole sweep twice.

    python scripts/sweep_scaling.py configs/default.yaml --set shapes.max_unique=4,6,8,10 \
        --set batching.max_batch_size=32,64 --time-limit 2 --cpus 1,2 --out docs/sweep_scaling.png
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib                                   # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt                    # noqa: E402

from solver.commands.sweep import parse_sets, run_sweep   # noqa: E402


def timed(**kw) -> float:
    start = time.monotonic()
    run_sweep(**kw)
    return time.monotonic() - start


def measure(args, grid, cpus: int, work: Path) -> dict:
    import ray

    common = dict(config=args.config, grid=grid, time_limit=args.time_limit, workers=args.workers)
    local = timed(jobs=cpus, out=work / f"local_{cpus}", **common)
    start = time.monotonic()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    init = time.monotonic() - start
    try:
        remote = timed(backend="ray", out=work / f"ray_{cpus}", **common)
    finally:
        ray.shutdown()
    same = (work / f"local_{cpus}/sweep.csv").read_bytes() == (work / f"ray_{cpus}/sweep.csv").read_bytes()
    return {"cpus": cpus, "local_s": local, "ray_s": remote, "ray_init_s": init, "same_csv": same}


def plot(results: list[dict], points: int, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    cpus = [r["cpus"] for r in results]
    ax.plot(cpus, [r["local_s"] for r in results], "o-", label="local process pool (--jobs N)")
    ax.plot(cpus, [r["ray_s"] for r in results], "s-", label="Ray tasks (cluster running)")
    ax.plot(cpus, [r["ray_s"] + r["ray_init_s"] for r in results], "s:", label="Ray incl. starting a local Ray")
    ax.set_xticks(cpus)
    ax.set_xlabel("CPUs (points solved at once)")
    ax.set_ylabel("sweep wall time, s")
    ax.set_title(f"{points}-point sweep, 1 CP-SAT worker per point")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--set", action="append", required=True)
    p.add_argument("--time-limit", type=float, default=2)
    p.add_argument("--workers", type=int, default=1, help="CP-SAT workers per point (the same for every run)")
    p.add_argument("--cpus", default="1,2")
    p.add_argument("--out", default="docs/sweep_scaling.png")
    p.add_argument("--work", default="out/sweep_scaling")
    args = p.parse_args()
    grid = parse_sets(args.set)
    points = len(list(__import__("itertools").product(*grid.values())))
    results = [measure(args, grid, int(c), Path(args.work)) for c in args.cpus.split(",")]
    for r in results:
        r["overhead_per_point_s"] = (r["ray_s"] - r["local_s"]) * r["cpus"] / points
    print(json.dumps(results, indent=1))
    plot(results, points, Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
