"""One live HiGHS model (highspy) without its start-up banner: what the column generations grow round by round."""
from __future__ import annotations

import os

import numpy as np

_LAST_PID = None          # the process that last made a Highs here (a forked child inherits the parent's value)


def quiet_highs():
    """A silent Highs instance (its banner goes to the process's stdout, so stdout is pointed away meanwhile). In a
    process forked after its parent used HiGHS, HiGHS's global thread scheduler is reset first: the child inherits the
    parent's scheduler without its threads, and a MIP there would wait on them forever (measured: a 30-variable MIP
    that takes 0.02 s was still running after 20 s)."""
    import highspy

    global _LAST_PID
    if _LAST_PID is not None and _LAST_PID != os.getpid():
        _LAST_PID = os.getpid()
        for _ in range(2):   # a reset can raise RuntimeError (ESRCH: seen in the sweep's pool workers); one more try
            try:
                highspy.Highs.resetGlobalScheduler(True)
                break
            except RuntimeError:
                continue
    _LAST_PID = os.getpid()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def add_linked_columns(h, cost: np.ndarray, upper: np.ndarray, rows: list, vals: list, y_cols: np.ndarray) -> np.ndarray:
    """Append pair columns x in [0, upper] with objective `cost` and their entries (rows[k][i]: the row of column i's
    k-th entry, -1 for none; vals[k][i]: its value), each with its link row x - upper * y <= 0 to column y_cols[i].
    Returns the new columns' indices."""
    import highspy

    n, first = len(cost), h.getNumCol()
    R, V = np.stack(rows, axis=1), np.stack(vals, axis=1)
    keep = R >= 0
    starts = np.r_[0, np.cumsum(keep.sum(axis=1))[:-1]].astype(np.int32)
    h.addCols(n, cost, np.zeros(n), upper, int(keep.sum()), starts, R[keep].astype(np.int32),
              V[keep].astype(np.float64))
    cols = np.arange(first, first + n)
    link_cols = np.stack([cols, y_cols], axis=1).ravel().astype(np.int32)
    link_vals = np.stack([np.ones(n), -upper], axis=1).ravel()
    h.addRows(n, np.full(n, -highspy.kHighsInf), np.zeros(n), 2 * n, np.arange(0, 2 * n, 2, dtype=np.int32),
              link_cols, link_vals)
    return cols
