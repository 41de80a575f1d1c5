"""Command-line entry points (the scripts/ files are thin wrappers over these)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from models.config import load_config
from models.errors import InputError
from solver.explain import explain_infeasible
from solver.pipeline import METHODS, solve
from solver.commands.engine_import import load_baselines
from solver.commands.report import build_report, summary_table, write_outputs


def setup_logging(quiet: bool = False) -> None:
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(message)s", stream=sys.stderr)


def solve_main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="solve.py", description="Plan static shapes and batches for LLM traces.")
    p.add_argument("config")
    p.add_argument("--method", default="cpsat", choices=list(METHODS) + ["all"])
    p.add_argument("--time-limit", type=float, default=None, help="overrides solver.time_limit_s")
    p.add_argument("--out", default=None, help="overrides output.dir")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")
    p.add_argument("--export", default=None, metavar="FORMATS",
                   help="also export the lead plan (vllm-gaudi, neuron, jetstream, maxtext-offline, json, csv, "
                        "a comma list or all)")
    p.add_argument("--baseline-from", action="append", default=[], metavar="FORMAT:FILE",
                   help="evaluate the buckets an engine runs today as method current:FORMAT (vllm-gaudi, neuron, "
                        "jetstream, maxtext-offline, json; repeatable)")
    args = p.parse_args(argv)
    setup_logging(args.quiet)
    try:
        if args.time_limit is not None and args.time_limit <= 0:
            raise InputError(f"--time-limit={args.time_limit!r} must be > 0")
        if args.export:
            from solver.commands.export import parse_formats
            parse_formats(args.export)
        cfg = load_config(args.config)
        methods = METHODS if args.method == "all" else (args.method,)
        baselines = load_baselines(args.baseline_from, cfg) if args.baseline_from else None
        res = solve(cfg, methods, args.time_limit, baselines=baselines)
        out = Path(args.out).resolve() if args.out else cfg.output.dir
        report = build_report(res)
        lead = res.lead
        if not lead.feasible:
            report["infeasibility"] = explain_infeasible(res.config, res.requests, lead)
        write_outputs(res, out, report)
        if not args.no_plots:
            write_pictures(res, lead.method, out)
        exported = export_lead(res, lead, args.export, out) if args.export else []
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted before any plan was ready: nothing written", file=sys.stderr)
        return 1
    print(summary_table(res))
    print(f"\nplans and report written to {out}")
    for fmt, path, note in exported:
        print(f"exported {fmt}: {path}\n  {note}")
    if lead.solver.get("interrupted"):
        print("note: the search was stopped early; the plan is the best found so far (verified)")
    if not lead.feasible:
        print("\nthe limits cannot all be met:", file=sys.stderr)
        for line in report["infeasibility"]:
            print(f"  {line}", file=sys.stderr)
        return 2
    return 0


def export_lead(res, lead, formats: str, out: Path) -> list:
    from solver.commands.export import export, parse_formats

    done = []
    for fmt in parse_formats(formats):
        path, note = export(res.config, res.requests, lead.plans, fmt, out / "export")
        done.append((fmt, path, note))
    return done


def write_pictures(res, method: str, out: Path) -> None:
    """Next to the report: the lead method's layout per bucket, and the method comparison."""
    from solver.commands.plots import bucket_layout, method_comparison

    r = res.results[method]
    for name, plan in r.plans.items():
        bucket_layout(f"{name} ({method})", res.requests[name], plan, out / f"{name}.png")
    if len(res.results) > 1:
        method_comparison(res.results, out / "methods.png")


def sweep_main(argv=None) -> int:
    from solver.commands.sweep import parse_sets, run_sweep, write_sweep

    p = argparse.ArgumentParser(prog="sweep.py", description="Re-solve over a grid of config values.")
    p.add_argument("config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="dotted config key and its values (repeatable: the grid is every combination)")
    p.add_argument("--method", default="cpsat", choices=list(METHODS))
    p.add_argument("--time-limit", type=float, default=None, help="per point, overrides solver.time_limit_s")
    p.add_argument("--jobs", type=int, default=0, help="points solved at once (default: one per core)")
    p.add_argument("--out", default=None, help="folder for sweep.csv and PNGs (default output.dir/sweep)")
    args = p.parse_args(argv)
    setup_logging()
    try:
        grid = parse_sets(args.set)
        cfg = load_config(args.config)
        frame = run_sweep(args.config, grid, args.method, args.time_limit, args.jobs)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out).resolve() if args.out else cfg.output.dir / "sweep"
    written = write_sweep(frame, list(grid), out)
    shown = list(grid) + ["total_cost", "pad_ratio", "num_batches", "sequential_time_ms", "limits_hold", "gap"]
    with pd_options():
        print(frame[shown].to_string(index=False))
    print("\nwrote " + ", ".join(str(w) for w in written))
    return 0


def pd_options():
    import pandas as pd

    return pd.option_context("display.float_format", "{:.4g}".format, "display.width", 160)


def export_main(argv=None) -> int:
    from solver.commands.export import FORMATS, export, parse_formats
    from solver.pipeline import load_all
    from solver.verify import verify_dir

    p = argparse.ArgumentParser(prog="export.py", description="Export a verified plan to serving-engine formats.")
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
        out = Path(args.out).resolve() if args.out else plan_dir / "export"
        for fmt in formats:
            path, note = export(cfg, reqs, plans, fmt, out)
            print(f"{fmt}: {path}\n  {note}")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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

            return json.loads(report.read_text())["config"]
    raise InputError(f"{plan_dir}: no report.json beside the plans to name the config; pass --config")


def calibrate_main(argv=None) -> int:
    from solver.commands.calibrate import calibrate, residual_plot, yaml_block

    p = argparse.ArgumentParser(prog="calibrate.py", description="Fit the cost model to measured timings.")
    p.add_argument("profile", help="CSV with columns phase, seq_len and ms and/or cost")
    p.add_argument("--out", default=None, help="folder for cost_model.yaml and residuals.png "
                   "(default out/calibrate/<profile name>)")
    args = p.parse_args(argv)
    profile = Path(args.profile)
    try:
        fits = calibrate(profile)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else Path("out") / "calibrate" / profile.stem
    out.mkdir(parents=True, exist_ok=True)
    block = yaml_block(fits)
    tmp = out / "cost_model.yaml.tmp"
    tmp.write_text(block)
    tmp.replace(out / "cost_model.yaml")
    picture = residual_plot(fits, out / "residuals.png")
    for f in fits:
        print(f"{f.key:<22} {len(f.x):>4} points  R² {f.r2:.5f}  coefficients {f.coeffs}")
    print("\n" + block)
    print(f"wrote {out / 'cost_model.yaml'} and {picture}")
    return 0


def verify_main(argv=None) -> int:
    from solver.pipeline import evaluate, load_all
    from models.instance import Instance
    from solver.verify import verify_dir

    p = argparse.ArgumentParser(prog="verify.py", description="Re-check plans written earlier against a config.")
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
    r = evaluate(Instance(cfg, reqs), Path(args.plan_dir).name, plans, 0.0)
    for name, m in r.metrics.items():
        print(f"{name}: cost {m.cost:.6g}  pad_ratio {m.pad_ratio:.4f}  pad_tokens {m.pad_tokens}  "
              f"p95 {m.p95_latency_ms:.1f} ms  p99 {m.p99_latency_ms:.1f} ms  seq {m.sequential_time_ms:.6g} ms  "
              f"batches {m.num_batches}  shapes {m.shapes}")
        for k, ok in m.limits.items():
            print(f"  {k}: {getattr(m, k):.6g} {'<=' if ok else '>'} {r.limits_of[name][k]:.6g}  "
                  f"{'holds' if ok else 'BROKEN'}")
    print(f"total_cost {r.total_cost:.6g}  num_shapes {len(r.shapes)}  valid")
    return 0 if r.feasible else 2


def analyze_main(argv=None) -> int:
    from models.instance import Instance
    from solver.commands.analyze import analyze
    from solver.pipeline import load_all

    p = argparse.ArgumentParser(prog="analyze.py", description="Profile traces and print pre-search bounds.")
    p.add_argument("config")
    p.add_argument("--out", default=None, help="folder for histogram PNGs (default output.dir/analysis)")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        inst = Instance(cfg, load_all(cfg))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out).resolve() if args.out else cfg.output.dir / "analysis"
    print("\n".join(analyze(inst, out)))
    return 0
