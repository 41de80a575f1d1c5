"""Exact segment DP over sorted levels: the shape set (and the gen-cap ladder) it picks."""
from __future__ import annotations

import numpy as np


def shape_dp(levels: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, fixed: np.ndarray, k: int):
    """Best <= k shapes from `levels` covering every level, when a request at level i served by
    shape v (v >= level) costs a_i + b_i*v + c_i*v^2 (sums per level) and a shape costs fixed[v].

    Returns (chosen level values, total). Exact: O(k m^2) over m levels."""
    per_count = shape_dp_counts(levels, a, b, c, fixed, k)
    return per_count[best_count(per_count)]


def best_count(per_count: dict[int, tuple[list[int], float]]) -> int:
    """The shape count of least total in a shape_dp_counts result."""
    return min(per_count, key=lambda n: per_count[n][1])


def shape_dp_counts(levels: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, fixed: np.ndarray,
                    k: int) -> dict[int, tuple[list[int], float]]:
    """The exact best set of exactly n shapes, for every n = 1..k that can be reached (same costs
    as shape_dp): {n: (chosen level values, total)}."""
    m = len(levels)
    pa, pb, pc = (np.concatenate([[0.0], np.cumsum(x)]) for x in (a, b, c))
    v = levels.astype(np.float64)
    i_idx = np.arange(m)[:, None]
    j_idx = np.arange(m)[None, :]
    seg = (pa[1:][None, :] - pa[:-1][:, None]) + v[None, :] * (pb[1:][None, :] - pb[:-1][:, None]) + \
        (v * v)[None, :] * (pc[1:][None, :] - pc[:-1][:, None]) + fixed[None, :]
    seg = np.where(i_idx <= j_idx, seg, np.inf)      # seg[i, j]: levels i..j served by levels[j]
    best = np.full(m + 1, np.inf)
    best[0] = 0.0
    backs, out = [], {}
    for n in range(1, min(k, m) + 1):
        total = best[:-1][:, None] + seg             # start i (prefix i covered), end j
        arg = np.argmin(total, axis=0)
        best = np.full(m + 1, np.inf)
        best[1:] = total[arg, np.arange(m)]
        backs.append(arg)
        if np.isfinite(best[m]):
            out[n] = (trace_back(levels, backs, m), float(best[m]))
    return out


def trace_back(levels: np.ndarray, backs: list[np.ndarray], m: int) -> list[int]:
    """The shapes of the DP path that covers all m levels in len(backs) segments."""
    chosen, end = [], m
    for r in range(len(backs) - 1, -1, -1):
        j = end - 1
        chosen.append(int(levels[j]))
        end = int(backs[r][j])
    return sorted(chosen)
