#!/usr/bin/env python
"""Thin wrapper: see solver.commands.cli.export_main."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.commands.cli import export_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(export_main())
