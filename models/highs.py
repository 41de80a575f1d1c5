"""One live HiGHS model (highspy) without its start-up banner: what the column generations grow round by round."""
from __future__ import annotations

import os


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
