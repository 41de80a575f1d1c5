#!/usr/bin/env python
"""Thin wrapper: see solver.commands.cli.export_main."""
import sys

try:                                     # Ctrl-C while starting up: no traceback
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from solver.commands.cli import export_main
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(export_main())
