"""The one start-up path of the thin scripts: import the command from the project, then run it.
Ctrl-C while importing exits 130 with no traceback; once the command has returned, its exit code stands
(a late Ctrl-C, e.g. the last of several pressed to stop a search, is ignored)."""
import importlib
import signal
import sys
from pathlib import Path


def launch(module: str, function: str) -> None:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        main = getattr(importlib.import_module(module), function)
        importlib.import_module("solver.stop").ignore_after_run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    code = main()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
