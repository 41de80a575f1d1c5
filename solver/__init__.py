"""How it is decided: heuristics, the solve pipeline, the verifier, reports and plots.

    from models import load_config
    from solver import solve
    result = solve(load_config("configs/default.yaml"), methods=("cpsat", "dp"), time_limit=10)
"""
from __future__ import annotations

from pathlib import Path


def solve(config, methods=("cpsat",), time_limit: float | None = None, requests=None):
    """Solve a config (a Config or a path to its YAML) and return a SolveResult.

    `methods`: any of cpsat, dp, greedy, baseline, baseline_step128, baseline_exp, or "all"."""
    from models.config import Config, load_config
    from solver.pipeline import METHODS
    from solver.pipeline import solve as run

    cfg = config if isinstance(config, Config) else load_config(Path(config))
    chosen = METHODS if methods == "all" else tuple([methods] if isinstance(methods, str) else methods)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise ValueError(f"methods={unknown!r} must be among {', '.join(METHODS)} or 'all'")
    return run(cfg, chosen, time_limit, requests)


__all__ = ["solve"]
