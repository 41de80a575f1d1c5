"""Ctrl-C and SIGTERM during a run (spec section 7): stop the search, keep the best verified plan.

`install()` (the solve command does it) replaces the SIGINT and SIGTERM handlers:
- before any plan exists, a signal raises KeyboardInterrupt once (the command exits 130, nothing written);
- once a verified plan exists (`plan_ready()`), a signal, and any number of them after it, only sets the
  stop flag: each stage ends at its next step and the command writes the best plan, marked interrupted;
- inside `interruptible()` (the polish, the LNS) the first signal raises KeyboardInterrupt, which the
  caller catches;
- inside `deferred()` (the output swap) a signal is only recorded, never raised.

CP-SAT (`catch_sigint_signal`) puts its own SIGINT handler in place while it searches: it stops the
search on the first SIGINT and ends the process (exit 1) on the third, from a thread other than the
searching one it aborts (its handler is per thread), and the end of its solve wrapper sets SIGINT back
to the default action (end the process). So `searching()` keeps SIGINT ours (Linux with glibc):
- a guard thread puts Python's handler back as soon as CP-SAT's appears (within GUARD_POLL_S of the
  search's start): every signal then reaches Python and the watcher thread (`signal.set_wakeup_fd`);
- a profile hook in the main thread takes the CpSolver that searches, which the guard stops with
  `stop_search()` once a stop is requested, and keeps its solve wrapper alive until `uninstall()`, so
  SIGINT is never at the default action while the run goes on.
Left open: a signal in the first half millisecond of the search reaches CP-SAT's own handler (it stops
the search, and the run goes on to the polish, where the next signal stops it: under the guard an early end
of CP-SAT is not taken for a stop, see `search_was_guarded`). Elsewhere the watcher passes a signal on to
CP-SAT as a SIGINT to the main thread, at most twice per search.
"""
from __future__ import annotations

import ctypes
import logging
import os
import platform
import signal
import sys
import threading
import time
from contextlib import contextmanager

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGINT, signal.SIGTERM)
GUARD_POLL_S = 0.0005          # until CP-SAT's handler has been replaced
GUARD_IDLE_S = 0.1
STOP_EVERY_S = 0.05


class _State:
    installed = False
    requested = False
    signum = None
    plan = False
    deferring = 0
    raising = 0
    raised = False
    aborting = False
    searching = False
    guarded = False             # the last search ran under the guard: a signal in it set `requested`
    pokes = 0
    previous: dict = {}
    wakeup = None               # (read fd, write fd, previous wakeup fd)
    solver = None               # the CpSolver searching now (guarded searches)
    kept: list = []             # CP-SAT solve wrappers held until uninstall (their end resets SIGINT)
    ignore_after = False        # a script: SIGINT ignored once the run is over
    wake = threading.Event()    # the watcher saw a signal during the search: the guard acts at once


S = _State()


def main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum, frame):
    S.requested = True
    S.signum = S.signum or signum
    if S.deferring:
        return
    if not S.plan and not S.aborting:       # once: the run is already on its way out after the first
        S.aborting = True
        raise KeyboardInterrupt
    if S.raising and not S.raised:
        S.raised = True
        raise KeyboardInterrupt


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
    if S.ignore_after:                  # a script ends next: the OS frees them (no default action at exit)
        for wrapper in S.kept:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(wrapper))
    S.kept.clear()                      # each sets SIGINT to the default action as it goes: handlers below
    r, w, prev = S.wakeup
    signal.set_wakeup_fd(prev)
    os.close(w)                         # the watcher reads EOF and ends (it closes r)
    S.installed = False
    for sig, handler in S.previous.items():
        if sig == signal.SIGINT and S.ignore_after:
            handler = signal.SIG_IGN        # a signal still pending is dropped, not raised after the run
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    reset()


def ignore_after_run() -> None:
    """For a script: once the run is over (`uninstall`), SIGINT is ignored, so a late Ctrl-C (the last of
    several pressed to stop a search) does not turn the run's exit code into 130; CP-SAT's solve wrappers
    are then left to the OS (destroying one puts SIGINT back to the default action: end the process)."""
    S.ignore_after = True


def reset() -> None:
    S.requested, S.signum, S.plan, S.deferring, S.raising, S.raised, S.aborting, S.searching = \
        False, None, False, 0, 0, False, False, False


def _watch(r: int) -> None:
    try:
        while True:
            data = os.read(r, 64)
            if not data:
                break
            if S.searching and (signal.SIGINT in data or signal.SIGTERM in data):
                S.requested = True      # Python's own handler runs only once the search returns
                S.wake.set()
                if not GUARD.usable:
                    poke()
    finally:
        os.close(r)


def poke() -> None:
    """Without the guard: SIGINT to the main thread, where CP-SAT's handler stops the search; again once."""
    while S.searching and S.pokes < 2:
        S.pokes += 1
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.5)


def requested() -> bool:
    return S.requested


def search_was_guarded() -> bool:
    """The last search ran under the guard, so every signal in it (but one in its first half millisecond)
    set the stop flag: CP-SAT ending before its time limit is then no sign of a Ctrl-C."""
    return S.guarded


def request() -> None:
    """Mark the run stopped (e.g. CP-SAT reports it stopped early on a Ctrl-C it caught itself)."""
    S.requested = True


def plan_ready() -> None:
    """A verified plan exists: from now on a signal stops the search instead of the run."""
    S.plan = True


@contextmanager
def searching():
    """Around the CP-SAT search: every signal reaches our handler and a stop ends the search (see the module
    doc); our handlers are in place again afterwards."""
    S.searching, S.pokes, S.solver = True, 0, None
    S.wake.clear()
    guard = GUARD.start() if S.installed and main_thread() else None
    S.guarded = guard is not None
    if guard is not None:
        sys.setprofile(_capture)
    try:
        yield
    finally:
        S.searching = False
        if guard is not None:
            sys.setprofile(None)
            S.wake.set()
            guard.join()
        S.solver = None
        if main_thread():
            for sig in SIGNALS:
                if S.installed:
                    signal.signal(sig, _on_signal)
                elif sig == signal.SIGINT:
                    handler = signal.getsignal(sig)
                    signal.signal(sig, handler if handler is not None else signal.default_int_handler)


def _capture(frame, event, arg) -> None:
    """Profile hook in the main thread while searching: the CpSolver entering `solve`, and, once its C++
    search returns, the solve wrapper it holds (kept, see the module doc); then our SIGINT handler again."""
    if frame.f_code.co_name != "solve" or type(frame.f_locals.get("self")).__name__ != "CpSolver":
        return
    if event == "call":
        S.solver = frame.f_locals["self"]
    elif event == "c_return" and S.solver is not None:
        wrapper = getattr(S.solver, "_CpSolver__solve_wrapper", None)      # ortools' own name for it
        if wrapper is not None:
            S.kept.append(wrapper)
        signal.signal(signal.SIGINT, _on_signal)
        sys.setprofile(None)


@contextmanager
def interruptible():
    """The first signal inside raises KeyboardInterrupt (when installed) for the caller to catch."""
    S.raising += 1
    try:
        yield
    finally:
        S.raising -= 1
        S.raised = False


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


# --- the guard: SIGINT stays ours while CP-SAT searches ----------------------------------------------

class _SigAction(ctypes.Structure):
    """glibc's struct sigaction (Linux): handler, mask of 1024 signals, flags, restorer."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


class _Guard:
    """Keeps Python's SIGINT handler in place during the search and stops CP-SAT when asked."""

    def __init__(self):
        self.usable = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
        self.libc = ctypes.CDLL(None, use_errno=True) if self.usable else None

    def action(self) -> _SigAction:
        act = _SigAction()
        if self.libc.sigaction(signal.SIGINT, None, ctypes.byref(act)) != 0:
            raise OSError(ctypes.get_errno(), "sigaction")
        return act

    def set_action(self, act: _SigAction) -> None:
        if self.libc.sigaction(signal.SIGINT, ctypes.byref(act), None) != 0:
            raise OSError(ctypes.get_errno(), "sigaction")

    def start(self) -> threading.Thread | None:
        if not self.usable:
            return None
        thread = threading.Thread(target=self.run, args=(self.action(),), daemon=True,
                                  name="shapeplan-sigint-guard")
        thread.start()
        return thread

    def run(self, ours: _SigAction) -> None:
        """Until the search ends: our SIGINT handler back whenever another is in place (looking every
        GUARD_POLL_S until CP-SAT's has come and gone, then every GUARD_IDLE_S); once a stop is requested,
        CP-SAT asked to stop (again every STOP_EVERY_S, in case it was not searching yet)."""
        asked, swapped = 0.0, False
        while S.searching:
            if self.action().handler != ours.handler:
                self.set_action(ours)
                swapped = True
            solver = S.solver
            if S.requested and solver is not None and time.monotonic() - asked > STOP_EVERY_S:
                solver.stop_search()
                asked = time.monotonic()
            S.wake.wait(GUARD_POLL_S if not swapped else STOP_EVERY_S if S.requested else GUARD_IDLE_S)
            S.wake.clear()


GUARD = _Guard()
