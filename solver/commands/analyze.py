"""Trace profiles and the bounds that hold before any search."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from models.instance import Instance
from solver.bounds import all_bounds, total_cost_bound
from solver.commands.output import open_folder, protected_paths, replace_set

PCTS = (50, 90, 95, 99, 100)


def profile(values: np.ndarray) -> str:
    return "  ".join(f"p{p} {np.percentile(values, p):.0f}" for p in PCTS) + f"  mean {values.mean():.1f}"


def outliers(values: np.ndarray) -> int:
    q1, q3 = np.percentile(values, [25, 75])
    return int((values > q3 + 3 * (q3 - q1)).sum())


def text_histogram(values: np.ndarray, bins: int = 12, width: int = 40) -> list[str]:
    counts, edges = np.histogram(values, bins=bins)
    top = max(counts.max(), 1)
    return [f"  {edges[i]:>7.0f}-{edges[i + 1]:<7.0f} {'#' * int(width * c / top):<{width}} {c}"
            for i, c in enumerate(counts)]


def pad_budget(limits: dict, real_tokens: int) -> int | None:
    """The padding a bucket may have, in tokens: floor(min(pad_tokens, pad_ratio x real tokens))."""
    budgets = [limits["pad_tokens"]] if "pad_tokens" in limits else []
    if "pad_ratio" in limits:
        budgets.append(limits["pad_ratio"] * real_tokens)
    return math.floor(min(budgets) + 1e-9) if budgets else None


def analyze(inst: Instance, png_dir: Path | None = None) -> list[str]:
    cfg = inst.cfg
    k = cfg.shapes.max_unique
    lines = []
    bounds = all_bounds(inst)
    for name, req in inst.requests.items():
        b = bounds[name]
        lines += [f"== {name}: {len(req)} requests, {req.real_tokens} real tokens",
                  f"prompt_len: {profile(req.prompt)}  outliers(>Q3+3IQR) {outliers(req.prompt)}",
                  *text_histogram(req.prompt),
                  f"gen_len:    {profile(req.gen)}  outliers(>Q3+3IQR) {outliers(req.gen)}",
                  *text_histogram(req.gen),
                  "bounds (each alone, before any search):",
                  f"  least pad tokens with {k} shapes (exact DP): {b.pad_tokens} (pad_ratio {b.pad_ratio:.4f}) "
                  f"with shapes {b.pad_shapes}",
                  f"  least number of batches: {b.num_batches}",
                  f"  cost >= {b.cost:.6g}",
                  f"  p95 latency >= {b.p95_latency_ms:.1f} ms, p99 >= {b.p99_latency_ms:.1f} ms, "
                  f"max >= {b.max_latency_ms:.1f} ms",
                  f"  sequential time >= {b.sequential_time_ms:.6g} ms"]
        limits = dict(cfg.buckets[[x.name for x in cfg.buckets].index(name)].limits.items())
        budget = pad_budget(limits, req.real_tokens)
        if budget is not None:
            lines.append(f"  pad budget {budget:,} tokens (of {req.real_tokens:,} real tokens)")
        for key, limit in limits.items():
            least = getattr(b, key)
            verdict = "reachable alone" if least <= limit * (1 + 1e-12) else "CANNOT be met"
            lines.append(f"  limit {key} {limit:.6g}: least reachable {least:.6g}: {verdict}")
        if png_dir is not None:
            lines.append(f"  histogram: {png_dir / hist_name(name)}")
    lines.append(f"== total cost >= {total_cost_bound(inst):.6g} (exact shape DP, every request at its own gen, "
                 f"least batch overhead, compile cost)")
    return lines


def hist_name(bucket: str) -> str:
    return f"{bucket}.hist.png"


def write_histograms(inst: Instance, out_dir: Path) -> Path:
    """One histogram PNG per bucket into `out_dir`, swapped in atomically beside the folder's other files
    (only files shapeplan wrote are replaced); the resolved folder."""
    from solver.commands.plots import histograms

    def produce(stage: Path) -> list[Path]:
        return [histograms(name, req.prompt, req.gen, stage / hist_name(name)) for name, req in inst.requests.items()]

    with open_folder(out_dir, protected_paths(inst.cfg), [hist_name(n) for n in inst.requests]) as out:
        replace_set(out, {}, produce, keep_others=True)
    return out
