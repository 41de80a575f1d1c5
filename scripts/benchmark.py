#!/usr/bin/env python
"""Thin wrapper: see solver.commands.benchmark (suite, size sweep, bench/results.csv)."""
from _launch import launch

if __name__ == "__main__":
    launch("solver.commands.benchmark", "main")
