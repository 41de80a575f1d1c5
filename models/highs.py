"""One live HiGHS model (highspy) without its start-up banner: what the column generations grow round by round."""
from __future__ import annotations

import os


def quiet_highs():
    """A silent Highs instance (its banner goes to the process's stdout, so stdout is pointed away meanwhile)."""
    import highspy

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
