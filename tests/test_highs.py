"""models/highs.py: a HiGHS model made in a forked child after the parent used HiGHS still solves its MIP."""
import multiprocessing as mp

import numpy as np
import pytest

highspy = pytest.importorskip("highspy")

from models.highs import quiet_highs  # noqa: E402


def knapsack() -> float:
    """max sum (j+1) x_j, sum w_j x_j <= 7.5, x_j in {0..3}: a small MIP that HiGHS solves in milliseconds."""
    h, n = quiet_highs(), 30
    w = np.arange(1, n + 1, dtype=np.float64) % 7 + 1
    h.addRows(1, np.array([-highspy.kHighsInf]), np.array([7.5]), 0, np.zeros(0, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    h.addCols(n, -np.arange(1, n + 1, dtype=np.float64), np.zeros(n), np.full(n, 3.0), n,
              np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int32), w)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
    h.setOptionValue("time_limit", 10.0)
    h.run()
    return h.getInfo().objective_function_value


def child(queue):
    queue.put(knapsack())


def test_a_forked_child_solves_a_mip_after_its_parent_did():
    expected = knapsack()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    proc.join(30)
    alive = proc.is_alive()
    if alive:
        proc.kill()
    assert not alive and queue.get(timeout=5) == pytest.approx(expected)
