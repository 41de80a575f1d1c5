"""Ctrl-C and SIGTERM during a run (spec section 7): stop the search, keep the best verified plan.

`install()` (the solve command does it) replaces the SIGINT and SIGTERM handlers:
- before any plan exists, a signal raises KeyboardInterrupt (the command exits 130, nothing written);
- once a verified plan exists (`plan_ready()`), a signal only sets the stop flag: the pipeline
  ends the search at its next step and the command writes the best plan, marked interrupted;
- inside `interruptible()` (the polish) a signal raises KeyboardInterrupt, which the caller catches;
- a second signal outside the swap raises KeyboardInterrupt (stop at once: exit 130);
- inside `deferred()` (the output swap) a signal is only recorded, never raised.

CP-SAT catches SIGINT itself while it searches (`catch_sigint_signal`; it stops on the first and
exits on the third), and Python runs its own handlers only between bytecodes. So a watcher thread
sees every signal Python caught (through `signal.set_wakeup_fd`): one that came while CP-SAT
searches (a SIGTERM, or a SIGINT just before CP-SAT took over) is passed on to CP-SAT as a SIGINT
to the main thread, at most twice per search, to stop it at once.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    installed = False
    requested = False
    signum = None
    plan = False
    deferring = 0
    raising = 0
    searching = False
    pokes = 0
    previous: dict = {}
    wakeup = None               # (read fd, write fd, previous wakeup fd)


S = _State()


def main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum, frame):
    again = S.requested
    S.requested = True
    S.signum = S.signum or signum
    if S.deferring:
        return
    if not S.plan or S.raising or (again and not S.searching):     # a second signal stops at once
        raise KeyboardInterrupt              # (while CP-SAT starts, its own handler is not in place yet: the
                                             # watcher's repeat SIGINT must only stop the search)


def install() -> None:
    """Take over SIGINT and SIGTERM for one command run (main thread only; else a no-op)."""
    if S.installed or not main_thread():
        return
    reset()
    S.previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    r, w = os.pipe()
    os.set_blocking(w, False)
    S.wakeup = (r, w, signal.set_wakeup_fd(w, warn_on_full_buffer=False))
    threading.Thread(target=_watch, args=(r,), daemon=True, name="shapeplan-signals").start()
    S.installed = True


def uninstall() -> None:
    """Give the previous handlers back and clear the state."""
    if not S.installed:
        return
    for sig, handler in S.previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    r, w, prev = S.wakeup
    signal.set_wakeup_fd(prev)
    os.close(w)                         # the watcher reads EOF and ends (it closes r)
    S.installed = False
    reset()


def reset() -> None:
    S.requested, S.signum, S.plan, S.deferring, S.raising, S.searching = False, None, False, 0, 0, False


def _watch(r: int) -> None:
    try:
        while True:
            data = os.read(r, 64)
            if not data:
                break
            if S.searching and (signal.SIGINT in data or signal.SIGTERM in data):
                poke()
    finally:
        os.close(r)


def poke() -> None:
    """SIGINT to the main thread, where CP-SAT's handler stops the search; again once if it still runs."""
    while S.searching and S.pokes < 2:
        S.pokes += 1
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.5)


def requested() -> bool:
    return S.requested


def request() -> None:
    """Mark the run stopped (e.g. CP-SAT reports it stopped early on a Ctrl-C it caught itself)."""
    S.requested = True


def plan_ready() -> None:
    """A verified plan exists: from now on a signal stops the search instead of the run."""
    S.plan = True


@contextmanager
def searching():
    """Around the CP-SAT search: a SIGTERM becomes the SIGINT CP-SAT stops on; its handler is
    replaced by ours again afterwards (CP-SAT leaves its own in place)."""
    S.searching, S.pokes = True, 0
    try:
        yield
    finally:
        S.searching = False
        if main_thread():
            for sig in SIGNALS:
                if S.installed:
                    signal.signal(sig, _on_signal)
                elif sig == signal.SIGINT:
                    handler = signal.getsignal(sig)
                    signal.signal(sig, handler if handler is not None else signal.default_int_handler)


@contextmanager
def interruptible():
    """A signal inside raises KeyboardInterrupt (when installed) for the caller to catch."""
    S.raising += 1
    try:
        yield
    finally:
        S.raising -= 1


@contextmanager
def deferred():
    """A signal inside is only recorded. Without `install()` (the Python API) SIGINT is held here and
    raised as KeyboardInterrupt on the way out, after the block finished."""
    own = not S.installed and main_thread()
    held = []
    previous = signal.signal(signal.SIGINT, lambda s, f: held.append(s)) if own else None
    S.deferring += 1
    try:
        yield
    finally:
        S.deferring -= 1
        if own:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def time_left(seconds: float) -> float:
    """The search time to give CP-SAT: next to none once a stop was requested."""
    return 0.01 if S.requested else seconds
