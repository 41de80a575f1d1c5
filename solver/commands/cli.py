"""Command-line entry points (the scripts/ files are thin wrappers over these)."""
from __future__ import annotations

import argparse
import functools
import logging
import math
import sys
from pathlib import Path

from models.config import load_config
from models.errors import InputError
from solver.explain import explain_infeasible
from solver.pipeline import METHODS, solve
from solver import stop
from solver.commands.output import SwapError, add_files, check_out_dir, protected_paths, write_outputs
from solver.commands.engine_import import load_baselines
from solver.commands.report import build_report, summary_table


class Parser(argparse.ArgumentParser):
    """A usage error is bad input: one message and exit 1 (argparse's own default is 2, the code for
    limits that cannot be met)."""

    def error(self, message):
        raise InputError(f"{self.prog}: {message} (see {self.prog} --help)")


def command(main):
    """Every command: bad input is one line and exit 1; Ctrl-C outside the search is exit 130."""
    @functools.wraps(main)
    def run(argv=None) -> int:
        try:
            return main(argv)
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    return run


def seconds(text: str) -> float:
    """A --time-limit value: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds > 0")
    return value


def count(text: str) -> int:
    """A --jobs value: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 4096")
    return value


def setup_logging(quiet: bool = False) -> None:
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(message)s", stream=sys.stderr)


@command
def solve_main(argv=None) -> int:
    p = Parser(prog="solve.py", description="Plan static shapes and batches for LLM traces.")
    p.add_argument("config")
    p.add_argument("--method", default="cpsat", choices=list(METHODS) + ["all"])
    p.add_argument("--time-limit", type=seconds, default=None, help="overrides solver.time_limit_s")
    p.add_argument("--out", default=None, help="overrides output.dir")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")
    p.add_argument("--export", default=None, metavar="FORMATS",
                   help="also export the lead plan (vllm-gaudi, neuron, jetstream, maxtext-offline, json, csv, "
                        "a comma list or all)")
    p.add_argument("--baseline-from", action="append", default=[], metavar="FORMAT:FILE",
                   help="evaluate the buckets an engine runs today as method current:FORMAT (vllm-gaudi, neuron, "
                        "jetstream, maxtext-offline, json; repeatable)")
    p.add_argument("--backend", default=None, choices=["local", "ray"],
                   help="overrides solver.backend: where the shape-set LNS evaluates neighbours")
    p.add_argument("--address", default=None, help="overrides solver.address (a Ray cluster; needs backend ray)")
    p.add_argument("--deterministic-time", type=seconds, default=None, metavar="S",
                   help="overrides solver.deterministic_time: a work limit instead of wall time (same plan anywhere)")
    args = p.parse_args(argv)
    setup_logging(args.quiet)
    stop.install()
    try:
        return solve_run(args)
    finally:
        stop.uninstall()


def solve_run(args) -> int:
    writing = False
    try:
        if args.export:
            from solver.commands.export import parse_formats
            parse_formats(args.export)
        cfg = load_config(args.config, solver_overrides(args))
        out = check_out_dir(Path(args.out) if args.out else cfg.output.dir, protected_paths(cfg))
        methods = METHODS if args.method == "all" else (args.method,)
        baselines = load_baselines(args.baseline_from, cfg) if args.baseline_from else None
        res = solve(cfg, methods, args.time_limit, baselines=baselines)
        report = build_report(res)
        lead = res.lead
        if not lead.feasible:
            report["infeasibility"] = explain_infeasible(res.config, res.requests, lead)
        writing = True
        write_outputs(res, out, report)
    except SwapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if writing and getattr(exc, "kept_old", True):
            print(f"interrupted while writing: {out} keeps its previous set", file=sys.stderr)
        elif writing:
            print(f"interrupted while writing: {out} is half swapped; the next run into it restores the "
                  "previous set", file=sys.stderr)
        else:
            print("interrupted before any plan was ready: nothing written", file=sys.stderr)
        return 130
    exported = []
    if stop.requested():
        print("note: pictures and exports skipped (stopped)", file=sys.stderr)
    else:
        if not args.no_plots:
            add_files(out, lambda folder: write_pictures(res, lead.method, folder), "pictures")
        if args.export:
            add_files(out, lambda folder: export_lead(res, lead, args.export, folder, exported), "exports")
    print(summary_table(res))
    print(f"\nplans and report written to {out}")
    for fmt, path, note in exported:
        print(f"exported {fmt}: {out / path.relative_to(path.parents[1])}\n  {note}")
    if lead.solver.get("interrupted"):
        print("note: the search was stopped early; the plan is the best found so far (verified)")
    if not lead.feasible:
        print("\nthe limits cannot all be met:", file=sys.stderr)
        for line in report["infeasibility"]:
            print(f"  {line}", file=sys.stderr)
        return 2
    return 0


def solver_overrides(args) -> dict:
    """solver.* keys given on the command line (validated with the config)."""
    given = {"solver.backend": args.backend, "solver.address": args.address,
             "solver.deterministic_time": args.deterministic_time}
    return {key: value for key, value in given.items() if value is not None}


def export_lead(res, lead, formats: str, out: Path, done: list) -> list[Path]:
    """Export the lead plan into `out/export`; (format, path, note) appended to `done`; the paths."""
    from solver.commands.export import export, parse_formats

    paths = []
    for fmt in parse_formats(formats):
        path, note = export(res.config, res.requests, lead.plans, fmt, out / "export")
        done.append((fmt, Path(path), note))
        paths.append(Path(path))
    return paths


def write_pictures(res, method: str, out: Path) -> list[Path]:
    """Next to the report: the lead method's layout per bucket, and the method comparison."""
    from solver.commands.plots import bucket_layout, method_comparison

    r = res.results[method]
    made = []
    for name, plan in r.plans.items():
        made.append(out / f"{name}.png")
        bucket_layout(f"{name} ({method})", res.requests[name], plan, made[-1])
    if len(res.results) > 1:
        made.append(out / "methods.png")
        method_comparison(res.results, made[-1])
    return made


@command
def sweep_main(argv=None) -> int:
    from solver.commands.sweep import Interrupted, parse_sets, run_sweep, write_plots

    p = Parser(prog="sweep.py", description="Re-solve over a grid of config values.")
    p.add_argument("config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="dotted config key and its values (repeatable: the grid is every combination)")
    p.add_argument("--method", default="cpsat", choices=list(METHODS))
    p.add_argument("--time-limit", type=seconds, default=None, help="per point, overrides solver.time_limit_s")
    p.add_argument("--jobs", type=count, default=0,
                   help="points solved at once (default: one per core; ray: what the cluster holds)")
    p.add_argument("--workers", type=count, default=0,
                   help="CP-SAT workers per point (default: max(4, cores // jobs) of this machine, both backends)")
    p.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="local process pool, or one Ray task per point")
    p.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray instance)")
    p.add_argument("--max-retries", type=count, default=2, help="tries again of a point whose worker died")
    p.add_argument("--resume", action="store_true", help="skip the points already in OUT/sweep.csv")
    p.add_argument("--deterministic-time", type=seconds, default=None, metavar="S",
                   help="every point under solver.deterministic_time S: a work limit instead of wall time, so "
                        "rows are the same on any backend and load")
    p.add_argument("--out", default=None, help="folder for sweep.csv and PNGs (default output.dir/sweep)")
    args = p.parse_args(argv)
    if args.address and args.backend != "ray":
        raise InputError("sweep.py: --address needs --backend ray")
    setup_logging()
    try:
        grid = parse_sets(args.set)
        cfg = load_config(args.config)
        out = Path(args.out) if args.out else cfg.output.dir / "sweep"
        frame = run_sweep(args.config, grid, args.method, args.time_limit, args.jobs, backend=args.backend,
                          address=args.address, out=out, resume=args.resume, max_retries=args.max_retries,
                          workers=args.workers or None, deterministic_time=args.deterministic_time)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        where = f" in {exc.path}" if exc.path and exc.path.exists() else ""
        print(f"interrupted: {exc.done} of {exc.total} points done{where}; rerun with --resume to finish",
              file=sys.stderr)
        return 130
    written = [out / "sweep.csv"] + write_plots(frame, list(grid), out)
    shown = list(grid) + ["total_cost", "pad_ratio", "num_batches", "sequential_time_ms", "limits_hold", "gap"]
    with pd_options():
        print(frame[shown].to_string(index=False))
    failed = int((frame["status"].astype(str) == "FAILED").sum())
    if failed:
        print(f"{failed} point(s) failed: see the error column of {out / 'sweep.csv'}", file=sys.stderr)
    print("\nwrote " + ", ".join(str(w) for w in written))
    return 0


def pd_options():
    import pandas as pd

    return pd.option_context("display.float_format", "{:.4g}".format, "display.width", 160)


@command
def export_main(argv=None) -> int:
    from solver.commands.export import FORMATS, parse_formats, write_exports
    from solver.pipeline import load_all
    from solver.verify import verify_dir

    p = Parser(prog="export.py", description="Export a verified plan to serving-engine formats.")
    p.add_argument("plan_dir", help="a method folder (out/x/cpsat) or an output folder (its cpsat plans)")
    p.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}, a comma list, or all")
    p.add_argument("--config", default=None, help="the config the plan was made for (default: from report.json)")
    p.add_argument("--out", default=None, help="folder for the exported files (default PLAN_DIR/export)")
    args = p.parse_args(argv)
    try:
        formats = parse_formats(args.format)
        plan_dir = resolve_plan_dir(Path(args.plan_dir))
        cfg = load_config(args.config or config_from_report(plan_dir))
        reqs = load_all(cfg)
        plans, errors = verify_dir(cfg, reqs, plan_dir)
        if errors:
            raise InputError(f"{plan_dir}: the plan is not valid, nothing exported: {errors[0]}")
        written = write_exports(cfg, reqs, plans, formats, Path(args.out) if args.out else plan_dir / "export",
                                plan_dir)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for fmt, path, note in written:
        print(f"{fmt}: {path}\n  {note}")
    return 0


def resolve_plan_dir(path: Path) -> Path:
    if not path.is_dir():
        raise InputError(f"{path}: no such plan folder")
    if not list(path.glob("*.plan.jsonl")) and (path / "cpsat").is_dir():
        return (path / "cpsat").resolve()
    return path.resolve()


def config_from_report(plan_dir: Path) -> str:
    for report in (plan_dir / "report.json", plan_dir.parent / "report.json"):
        if report.exists():
            import json

            from models.files import read_text

            try:
                config = json.loads(read_text(report, "report"))["config"]
            except (ValueError, KeyError, TypeError, RecursionError):
                raise InputError(f"{report}: not a shapeplan report (no 'config' key naming the config); "
                                 "pass --config") from None
            if not isinstance(config, str):
                raise InputError(f"{report}: config={config!r} must name the config file; pass --config")
            return config
    raise InputError(f"{plan_dir}: no report.json beside the plans to name the config; pass --config")


@command
def calibrate_main(argv=None) -> int:
    from solver.commands.calibrate import calibrate, write_fit, yaml_block

    p = Parser(prog="calibrate.py", description="Fit the cost model to measured timings.")
    p.add_argument("profile", help="CSV with columns phase, seq_len and ms and/or cost")
    p.add_argument("--out", default=None, help="folder for cost_model.yaml and residuals.png "
                   "(default out/calibrate/<profile name>)")
    args = p.parse_args(argv)
    profile = Path(args.profile)
    try:
        fits = calibrate(profile)
        out = write_fit(fits, profile, Path(args.out) if args.out else Path("out") / "calibrate" / profile.stem)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for f in fits:
        print(f"{f.key:<22} {len(f.x):>4} points  R² {f.r2:.5f}  coefficients {f.coeffs}")
    print("\n" + yaml_block(fits))
    print(f"wrote {out / 'cost_model.yaml'} and {out / 'residuals.png'}")
    return 0


@command
def verify_main(argv=None) -> int:
    from solver.pipeline import evaluate, load_all
    from models.instance import Instance
    from solver.verify import verify_dir

    p = Parser(prog="verify.py", description="Re-check plans written earlier against a config.")
    p.add_argument("config")
    p.add_argument("plan_dir")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        reqs = load_all(cfg)
        plans, errors = verify_dir(cfg, reqs, Path(args.plan_dir))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if errors:
        for e in errors:
            print(f"INVALID: {e}")
        return 1
    r = evaluate(Instance(cfg, reqs), Path(args.plan_dir).name, plans, 0.0, place=False)
    for name, m in r.metrics.items():
        print(f"{name}: cost {m.cost:.6g}  pad_ratio {m.pad_ratio:.4f}  pad_tokens {m.pad_tokens}  "
              f"p95 {m.p95_latency_ms:.1f} ms  p99 {m.p99_latency_ms:.1f} ms  seq {m.sequential_time_ms:.6g} ms  "
              f"batches {m.num_batches} ({m.single_request_batches} of a single request)  shapes {m.shapes}")
        for k, ok in m.limits.items():
            print(f"  {k}: {getattr(m, k):.6g} {'<=' if ok else '>'} {r.limits_of[name][k]:.6g}  "
                  f"{'holds' if ok else 'BROKEN'}")
    print(f"total_cost {r.total_cost:.6g}  num_shapes {len(r.shapes)}  valid")
    return 0 if r.feasible else 2


@command
def analyze_main(argv=None) -> int:
    from models.instance import Instance
    from solver.commands.analyze import analyze, write_histograms
    from solver.pipeline import load_all

    p = Parser(prog="analyze.py", description="Profile traces and print pre-search bounds.")
    p.add_argument("config")
    p.add_argument("--out", default=None, help="folder for histogram PNGs (default output.dir/analysis)")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        inst = Instance(cfg, load_all(cfg))
        out = write_histograms(inst, Path(args.out) if args.out else cfg.output.dir / "analysis")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(analyze(inst, out)))
    return 0
