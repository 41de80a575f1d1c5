#!/usr/bin/env python
"""Thin wrapper: see solver.commands.benchmark (suite, size sweep, bench/results.csv)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.commands.benchmark import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
