"""The report (spec section 6) and the summary table; writing the output set is solver/commands/output.py."""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:                       # no run-time import: the search never depends on its commands
    from solver.results import MethodResult, SolveResult

METRIC_KEYS = ("cost", "pad_ratio", "pad_tokens", "p95_latency_ms", "p99_latency_ms", "max_latency_ms",
               "sequential_time_ms", "num_batches", "single_request_batches")


def method_report(r: MethodResult) -> dict:
    buckets = {}
    for name, m in r.metrics.items():
        d = asdict(m)
        buckets[name] = {k: d[k] for k in METRIC_KEYS} | {
            "num_requests": m.num_requests, "real_tokens": m.real_tokens, "shapes": m.shapes,
            "limits": {k: {"limit": r.limits_of[name][k], "value": getattr(m, k), "holds": ok}
                       for k, ok in m.limits.items()}}
    out = {"buckets": buckets, "total_cost": r.total_cost, "num_shapes": len(r.shapes), "shapes": r.shapes,
           "objective": r.objective, "limits_hold": r.feasible, "time_s": r.time_s}
    out.update(r.solver)
    return out


def build_report(res: SolveResult) -> dict:
    methods = {m: method_report(r) for m, r in res.results.items()}
    report = {"name": res.config.name, "config": str(res.config.source), "methods": methods,
              "stage_time_s": res.stage_s}
    if "cpsat" in res.results:
        best = res.results["cpsat"].objective
        report["vs_cpsat"] = {m: (r.objective - best) / abs(best) if best else None
                              for m, r in res.results.items() if m != "cpsat"}
    return report


def summary_table(res: SolveResult) -> str:
    w = max([17] + [len(m) + 2 for m in res.results])           # current:<format> names are long
    head = f"{'method':<{w}}{'bucket':<12}{'cost':>11}{'pad%':>7}{'p95 ms':>9}{'p99 ms':>9}{'seq ms':>11}" \
           f"{'batches':>8}{'1-req':>6}{'shapes':>7}  limits"
    rows = [head, "-" * len(head)]
    for method, r in res.results.items():
        for name, m in r.metrics.items():
            broken = m.broken()
            held = "all held" if not broken else "BROKEN: " + ", ".join(broken)
            if not m.limits:
                held = "(none set)"
            rows.append(f"{method:<{w}}{name:<12}{m.cost:>11.4g}{100 * m.pad_ratio:>7.1f}{m.p95_latency_ms:>9.0f}"
                        f"{m.p99_latency_ms:>9.0f}{m.sequential_time_ms:>11.4g}{m.num_batches:>8d}"
                        f"{m.single_request_batches:>6d}"
                        f"{len(r.shapes):>7d}  {held}")
        extra = ""
        if r.solver:
            gap = r.solver.get("gap")
            extra = f"  status {r.solver['status']}, bound {r.solver['best_bound']:.6g}, " \
                    f"gap {100 * gap:.3f}%" if gap is not None else f"  status {r.solver['status']}"
        rows.append(f"{method:<{w}}{'TOTAL':<12}{r.total_cost:>11.4g}   shapes {r.shapes}{extra}")
    return "\n".join(rows)
