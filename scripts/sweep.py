#!/usr/bin/env python
"""Thin wrapper: see solver.commands.cli.sweep_main."""
from _launch import launch

if __name__ == "__main__":
    launch("solver.commands.cli", "sweep_main")
