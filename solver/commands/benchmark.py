"""The benchmark: a fixed suite (default config, Azure trace, 1M synthetic trace) and a trace-size sweep.

Every entry runs in its own process, so each peak-memory figure is that entry's alone. Results go to
bench/results.csv (one row per entry and method), bench/results.md (the Markdown table the README
quotes) and bench/size_sweep.png (time and memory against trace size). Both results files name the
commit they ran on (`git rev-parse HEAD`) and whether the work tree had changes (`git status`).
Generated traces, configs and plans go under --work-dir (default: the repository's data/generated
and out/bench).

`--ray` (opt-in, and then only that) measures the Ray sweep backend against the local one (issue 21): a
16-point sweep of the default config under a CP-SAT work limit (`--deterministic-time`, so the rows
depend on the inputs alone), `--workers 1`, once with `--jobs 2` and once on a local Ray instance,
each run by scripts/sweep.py in a child process; the two sweep.csv must be equal byte for byte (it
has no wall-time column) and the overhead per point is (Ray wall - local wall) / 16. `--ray-cluster`
adds a run on a head plus a second node of 1 CPU each, started here with `ray start` on 127.0.0.1
and stopped by PID afterwards. Results: bench/ray.md.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solver import stop

ROOT = Path(__file__).resolve().parents[2]
SUITE = {
    "default": "configs/default.yaml",
    "azure": "configs/azure_code.yaml",
    "1m": "configs/synthetic_1m.yaml",
    "static_graph": "configs/static_graph.yaml",
}
SIZES = (1_000, 10_000, 100_000, 1_000_000)
LONG = ("default",)          # suite entries run again with cpsat alone at --long-time-limit (issue 16's 600 s gap)
# issue 16's targets: entry -> (cost at most, gap at most at the suite's limit, gap at most at the long limit,
# wall s at most); None where the issue sets none
TARGETS = {"default": (1.058e12, 0.05, 0.01, None), "azure": (None, 0.005, None, None),
           "1m": (None, 0.001, None, 88.0)}
STAGES = ("load", "bounds", "heuristics", "cpsat", "polish", "postprocess", "verify")
COLUMNS = ("commit", "dirty", "run", "entry", "requests", "time_limit", "method", "objective", "total_cost", "best_bound", "gap",
           "bound_global", "vs_cpsat", "limits_hold", "margins", "status", "method_s") + tuple(f"{s}_s" for s in STAGES) + ("wall_s", "peak_mem_mib")
RAY_GRID = ("shapes.max_unique=4,6,8,12", "batching.max_batch_size=32,48,64,96")
RAY_POINTS = 16
# two Ray nodes on this machine: no token auth (a CLI head turns it on, the second node has no token); the
# driver stays on 127.0.0.1 (Ray's "no cluster" mode, which the second node's `ray start` refuses)
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
RAY_CLI = ("from ray._private import services; services.resolve_ip_for_localhost = lambda host: host; "
           "from ray.scripts.scripts import main; main()")
log = logging.getLogger(__name__)


def synthetic_trace(n: int, path: Path, seed: int) -> Path:
    """A bucket_1-like trace of n requests from data/generate.py (made once, then reused)."""
    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "data" / "generate.py"), "--n", str(n), "--kind", "bucket_1",
                        "--seed", str(seed), "--out", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


def git_stamp(root: Path = ROOT) -> dict:
    """{"commit": HEAD's hash, "dirty": the work tree has changes (tracked or untracked)}; "unknown"
    and None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": head, "dirty": bool(status.strip())}


def size_config(n: int, work: Path = ROOT) -> dict:
    """The 1M config scaled to n requests (sequential-time limit proportional to n); its trace and
    output dir under `work` (data/generated, out/bench)."""
    import yaml

    cfg = yaml.safe_load((ROOT / SUITE["1m"]).read_text())
    cfg["name"] = f"size_{n}"
    trace = synthetic_trace(n, work / "data" / "generated" / f"synthetic_{n}.csv", seed=11)
    cfg["buckets"][0]["requests"] = str(trace)
    limits = cfg["buckets"][0]["limits"]
    limits["sequential_time_ms"] = float(limits["sequential_time_ms"]) * n / 1_000_000
    cfg["output"]["dir"] = str(work / "out" / "bench" / f"size_{n}")
    return cfg


def run_entry(config: str, methods: str, time_limit: float, out: str) -> dict:
    """In the child process: solve, write the verified plans, return the figures."""
    from models.config import load_config
    from solver.pipeline import METHODS, solve
    from solver.commands.output import write_outputs
    from solver.commands.report import build_report

    start = time.monotonic()
    cfg = load_config(config)
    res = solve(cfg, METHODS if methods == "all" else (methods,), time_limit)
    report = build_report(res)
    write_outputs(res, Path(out), report)
    stage = dict(res.stage_s)
    stage["verify"] = stage.get("verify", 0.0)
    rows = []
    for name, r in res.results.items():
        info = report["methods"][name]
        rows.append({"method": name, "objective": r.objective, "total_cost": r.total_cost,
                     "best_bound": info.get("best_bound"), "gap": info.get("gap"),
                     "vs_cpsat": report.get("vs_cpsat", {}).get(name, 0.0 if name == "cpsat" else None),
                     "limits_hold": r.feasible, "status": info.get("status", ""), "method_s": r.time_s,
                     "bound_global": info.get("bound_global"), "margins": margins(info)})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0    # KiB on Linux
    requests = sum(len(q) for q in res.requests.values())
    return {"rows": rows, "stages": stage, "wall_s": time.monotonic() - start, "peak_mem_mib": peak,
            "requests": requests}


def margins(info: dict) -> str:
    """Each limit's margin, (limit - value) / limit, e.g. `bucket_1.cost 34.1%` (negative: broken)."""
    parts = []
    for name, bucket in info["buckets"].items():
        for key, lim in bucket["limits"].items():
            margin = (lim["limit"] - lim["value"]) / lim["limit"] if lim["limit"] else 0.0
            parts.append(f"{name}.{key} {100 * margin:.1f}%")
    return "; ".join(parts)


def child(config: Path, methods: str, time_limit: float, out: Path) -> dict:
    cmd = [sys.executable, "-m", "solver.commands.benchmark", "--child", str(config), "--methods", methods,
           "--time-limit", str(time_limit), "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark entry {config} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def flatten(run: str, entry: str, result: dict, time_limit: float) -> list[dict]:
    rows = []
    for r in result["rows"]:
        row = {"run": run, "entry": entry, "requests": result["requests"], "time_limit": time_limit, **r,
               "wall_s": result["wall_s"], "peak_mem_mib": result["peak_mem_mib"]}
        row.update({f"{s}_s": result["stages"].get(s, 0.0) for s in STAGES})
        rows.append(row)
    return rows


def fmt(value, spec: str) -> str:
    if value is None or value == "":
        return "-"
    return format(value, spec)


def stamp_line(stamp: dict) -> str:
    tree = {True: "work tree with uncommitted changes", False: "clean work tree", None: "work tree unknown"}
    return f"Run on commit `{stamp['commit']}` ({tree[stamp['dirty']]})."


def pct(gap) -> str:
    return fmt(100 * gap, ".2f") + "%" if gap is not None else "-"


def markdown(rows: list[dict], stamp: dict | None = None, limits: tuple = (60.0, 600.0)) -> str:
    """The commit line, then the tables: per entry (stage times, memory, CP-SAT's proof, its gap at the suite's
    and at the long time limit), issue 16's targets met or not, each limit's margin, every method against CP-SAT."""
    head = [stamp_line(stamp or git_stamp()), ""]
    short, long = (f"{t:g} s" for t in limits)
    heads = ["entry", "requests", "time limit s", "load s", "bounds s", "heuristics s", "cpsat s", "polish s",
             "postprocess s", "verify s", "wall s", "peak MiB", "cpsat cost", "bound", "gap", "bound scope",
             f"gap at {short}", f"gap at {long}", "status"]
    lines = head + ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    gaps = {(r["run"], r["entry"]): r["gap"] for r in rows if r["method"] == "cpsat"}
    for r in (r for r in rows if r["method"] == "cpsat"):
        suite = r["run"] != "size"           # the size sweep runs at its own limit: no 60 s / 600 s gap
        cells = [r["entry"] + (" (long)" if r["run"] == "long" else ""), f"{r['requests']:,}",
                 fmt(r.get("time_limit"), "g")] + [fmt(r[f"{s}_s"], ".1f") for s in STAGES] + [
            f"{r['wall_s']:.1f}", f"{r['peak_mem_mib']:.0f}", f"{r['total_cost']:.4g}",
            fmt(r["best_bound"], ".4g"), pct(r["gap"]), {True: "global", False: "narrower", None: "-"}[r.get("bound_global")],
            pct(gaps.get(("suite", r["entry"])) if suite else None),
            pct(gaps.get(("long", r["entry"])) if suite else None), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += targets(rows, limits)
    lines += ["", "| entry | cpsat margin on each limit, (limit - value) / limit |", "|---|---|"]
    lines += [f"| {r['entry']} | {r['margins'] or '(no limits)'} |" for r in rows
              if r["method"] == "cpsat" and r["run"] == "suite"]
    lines += ["", "| entry | method | cost | vs cpsat | limits | time s |", "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["run"] == "suite"):
        vs = fmt(100 * r["vs_cpsat"], "+.1f") + "%" if r["vs_cpsat"] is not None else "-"
        lines.append(f"| {r['entry']} | {r['method']} | {r['total_cost']:.4g} | {vs} | "
                     f"{'held' if r['limits_hold'] else 'broken'} | {r['method_s']:.1f} |")
    return "\n".join(lines)


def targets(rows: list[dict], limits: tuple) -> list[str]:
    """Issue 16's targets, each met or not, from the suite's and the long runs' cpsat rows."""
    got = {(r["run"], r["entry"]): r for r in rows if r["method"] == "cpsat"}
    lines = []
    for entry, (cost, gap, long_gap, wall) in TARGETS.items():
        suite, long = got.get(("suite", entry)), got.get(("long", entry))
        checks = []
        if suite and cost is not None:
            checks.append((f"cost {suite['total_cost']:.4g} <= {cost:.4g}", suite["total_cost"] <= cost * (1 + 1e-9)))
        if suite and gap is not None:
            checks.append((f"gap {pct(suite['gap'])} <= {pct(gap)} at {limits[0]:g} s",
                           suite["gap"] is not None and suite["gap"] <= gap and suite.get("bound_global") is True))
        if long and long_gap is not None:
            checks.append((f"gap {pct(long['gap'])} <= {pct(long_gap)} at {limits[1]:g} s",
                           long["gap"] is not None and long["gap"] <= long_gap and long.get("bound_global") is True))
        if suite and wall is not None:
            checks.append((f"wall {suite['wall_s']:.1f} s <= {wall:g} s", suite["wall_s"] <= wall))
        lines += [f"- {entry}: " + "; ".join(f"{text} {'met' if ok else 'NOT met'}" for text, ok in checks)] if checks else []
    return ["", "Issue 16's targets (a gap counts only with a global bound):", ""] + lines if lines else []


def write_csv(rows: list[dict], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def size_plot(rows: list[dict], path: Path) -> None:
    from solver.commands.plots import size_sweep

    pts = [r for r in rows if r["run"] == "size" and r["method"] == "cpsat"]
    if pts:
        size_sweep([r["requests"] for r in pts], [r["wall_s"] for r in pts],
                   [r["peak_mem_mib"] for r in pts], {s: [r[f"{s}_s"] for r in pts] for s in STAGES}, path)


# --- the Ray sweep backend against the local one (--ray) ----------------------------------------------

def sweep_run(name: str, flags: list[str], args, env: dict | None = None) -> dict:
    """The 16-point sweep by scripts/sweep.py with `flags`, in a child process, into
    work-dir/out/bench/ray/<name>: its wall time, the first-to-last-point time of its last progress line
    and the Ray layout it logged."""
    out = args.work_dir / "out" / "bench" / "ray" / name
    cmd = [sys.executable, str(ROOT / "scripts" / "sweep.py"), str(ROOT / SUITE["default"]),
           *[a for s in RAY_GRID for a in ("--set", s)], "--deterministic-time", str(args.ray_deterministic_time),
           "--workers", "1", "--out", str(out), *flags]
    print(f"[bench] ray: {name}: sweep.py ... {' '.join(flags)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | (env or {})
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"sweep {name} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    elapsed = re.findall(r"sweep: \d+/\d+ done.*?, (\d+) s elapsed", done.stderr)
    layout = re.findall(r"ray: (\d+ tasks on .*)", done.stderr)
    return {"run": name, "flags": " ".join(flags), "wall_s": wall, "elapsed_s": float(elapsed[-1]) if elapsed else None,
            "layout": layout[-1] if layout else "", "csv": out / "sweep.csv"}


def compare_csv(ref: Path, other: Path) -> str:
    """`byte-identical`, or how many data rows differ (sweep.csv has no wall-time column: every cell must match)."""
    a, b = ref.read_bytes(), other.read_bytes()
    if a == b:
        return "byte-identical"
    ra, rb = a.decode().splitlines(), b.decode().splitlines()
    if ra[:1] != rb[:1]:
        return "different columns"
    differ = sum(x != y for x, y in zip(ra[1:], rb[1:])) + abs(len(ra) - len(rb))
    return f"{differ} of {max(len(ra), len(rb)) - 1} rows differ"


def ray_markdown(runs: list[dict], stamp: dict, deterministic_time: float, load: tuple) -> str:
    """bench/ray.md: every run against the first (local), with the issue's targets checked."""
    ref = runs[0]
    lines = [stamp_line(stamp), "",
             f"{RAY_POINTS}-point sweep of `{SUITE['default']}` (`{' x '.join(RAY_GRID)}`), "
             f"`--deterministic-time {deterministic_time:g} --workers 1`; load average {load[0]:.1f} "
             f"{load[1]:.1f} {load[2]:.1f} at the start, {os.cpu_count()} cores.", "",
             "| run | sweep.py flags | wall s | first to last point s | sweep.csv | overhead per point s | Ray layout |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        same = "reference" if r is ref else r["same"]
        over = "-" if r is ref else f"{r['overhead_s']:+.2f}"
        lines.append(f"| {r['run']} | `{r['flags']}` | {r['wall_s']:.1f} | {fmt(r['elapsed_s'], '.0f')} | {same} | "
                     f"{over} | {r['layout'] or '-'} |")
    lines.append("")
    for r in runs[1:]:
        ok = r["same"] == "byte-identical" and r["overhead_s"] <= 1.0
        lines.append(f"- {r['run']}: same CSV {'yes' if r['same'] == 'byte-identical' else 'NO'}, overhead "
                     f"{r['overhead_s']:+.2f} s per point (target at most 1 s, Ray's start included): "
                     f"{'met' if ok else 'NOT met'}.")
    return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(args: list[str], temp: str) -> None:
    """`ray start ...` through Ray's CLI with 127.0.0.1 kept as given (the CLI would swap in the routable address)."""
    subprocess.run([sys.executable, "-c", RAY_CLI, "start", *args, "--node-ip-address", "127.0.0.1",
                    "--temp-dir", temp], check=True, capture_output=True,
                   env=os.environ | {"RAY_AUTH_MODE": "disabled"})


def ray_pids(temp: str) -> list[int]:
    """The processes of the Ray instance under `temp`: those naming it on their command line (gcs, raylets)
    and their descendants (agents and workers, which rename themselves `ray::...`)."""
    mine, parent = set(), {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                parent[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if temp.encode() in (proc / "cmdline").read_bytes():
                    mine.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    while True:
        more = {pid for pid, ppid in parent.items() if ppid in mine} - mine
        if not more:
            return sorted(mine)
        mine |= more


def stop_pids(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3)


def cluster_run(args) -> dict:
    """The sweep on a head plus a second node of 1 CPU each, both started here on 127.0.0.1 (own temp dir)
    and stopped by PID afterwards, whatever else runs Ray on this machine."""
    temp, port = tempfile.mkdtemp(prefix="rb", dir="/tmp"), free_port()
    address = f"127.0.0.1:{port}"
    try:
        ray_cli(["--head", "--num-cpus", "1", "--port", str(port), "--include-dashboard", "false"], temp)
        ray_cli(["--address", address, "--num-cpus", "1"], temp)
        return sweep_run("cluster", ["--backend", "ray", "--address", address], args, RAY_ENV)
    finally:
        stop_pids(ray_pids(temp))


def run_ray(args) -> str:
    """Local `--jobs 2`, a local Ray instance and (with --ray-cluster) two Ray nodes: bench/ray.md."""
    stamp, load = git_stamp(), os.getloadavg()        # the commit the runs start on
    runs = [sweep_run("local", ["--jobs", "2"], args), sweep_run("ray", ["--backend", "ray"], args)]
    if args.ray_cluster:
        runs.append(cluster_run(args))
    for r in runs[1:]:
        r["same"] = compare_csv(runs[0]["csv"], r["csv"])
        r["overhead_s"] = (r["wall_s"] - runs[0]["wall_s"]) / RAY_POINTS
    return ray_markdown(runs, stamp, args.ray_deterministic_time, load)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="benchmark.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SUITE), help=f"suite entries to run, from {','.join(SUITE)} "
                   "(empty string: none)")
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                   help="trace sizes for the growth sweep (empty string: skip the sweep)")
    p.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT time limit per suite entry")
    p.add_argument("--long", default=",".join(LONG), help="suite entries (of those --only runs) run again, "
                   "cpsat alone, at --long-time-limit for the long-run gap column (empty string: none)")
    p.add_argument("--long-time-limit", type=float, default=600.0, help="time limit of the long runs")
    p.add_argument("--size-time-limit", type=float, default=20.0, help="CP-SAT time limit per sweep size")
    p.add_argument("--out", type=Path, default=ROOT / "bench", help="where results.csv/.md/.png go")
    p.add_argument("--work-dir", type=Path, default=ROOT, help="where generated traces (data/generated) and "
                   "configs and plans (out/bench) go")
    p.add_argument("--ray", action="store_true", help="only the Ray sweep backend against the local one: "
                   "bench/ray.md (see above; about 15 min on 2 cores)")
    p.add_argument("--ray-cluster", action="store_true", help="with --ray: also a head plus a second node "
                   "started with `ray start` on this machine")
    p.add_argument("--ray-deterministic-time", type=float, default=1.0, help="CP-SAT work limit per sweep point")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--methods", default="all", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_suite(args) -> list[dict]:
    rows = []
    for entry in [e for e in args.only.split(",") if e]:
        if entry not in SUITE:
            raise SystemExit(f"error: --only {entry!r} must be one of {', '.join(SUITE)}")
        if entry == "1m":
            synthetic_trace(1_000_000, args.work_dir / "data" / "generated" / "synthetic_1m.csv", seed=11)
        print(f"[bench] {entry}: {SUITE[entry]} (every method, CP-SAT {args.time_limit:g} s)", flush=True)
        result = child(ROOT / SUITE[entry], "all", args.time_limit, args.work_dir / "out" / "bench" / entry)
        rows += flatten("suite", entry, result, args.time_limit)
    for entry in [e for e in args.long.split(",") if e]:
        if entry not in SUITE:
            raise SystemExit(f"error: --long {entry!r} must be one of {', '.join(SUITE)}")
        if entry not in args.only.split(","):          # a long run goes with its suite entry
            continue
        print(f"[bench] {entry} (long): {SUITE[entry]} (cpsat, {args.long_time_limit:g} s)", flush=True)
        result = child(ROOT / SUITE[entry], "cpsat", args.long_time_limit, args.work_dir / "out" / "bench" / f"{entry}_long")
        rows += flatten("long", entry, result, args.long_time_limit)
    return rows


def run_sizes(args) -> list[dict]:
    import yaml

    rows = []
    for n in [int(float(s)) for s in args.sizes.split(",") if s]:
        cfg = size_config(n, args.work_dir)
        path = args.work_dir / "out" / "bench" / f"size_{n}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg))
        print(f"[bench] size {n:,}: cpsat, {args.size_time_limit:g} s", flush=True)
        rows += flatten("size", f"size_{n}", child(path, "cpsat", args.size_time_limit, Path(cfg["output"]["dir"])),
                        args.size_time_limit)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        logging.basicConfig(level=logging.WARNING)
        stop.install()          # as the solve command: CP-SAT ending early on its own is then no Ctrl-C
        try:
            print(json.dumps(run_entry(args.child, args.methods, args.time_limit, args.out)))
        finally:
            stop.uninstall()
        return 0
    if args.ray or args.ray_cluster:
        table = run_ray(args)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ray.md").write_text(table + "\n")
        print(table + f"\n\nwrote {args.out / 'ray.md'}")
        return 0
    stamp = git_stamp()
    rows = [dict(stamp, **row) for row in run_suite(args) + run_sizes(args)]
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "results.csv")
    table = markdown(rows, stamp, (args.time_limit, args.long_time_limit))
    (args.out / "results.md").write_text(table + "\n")
    size_plot(rows, args.out / "size_sweep.png")
    print(table)
    print(f"\nwrote {args.out / 'results.csv'}, {args.out / 'results.md'}"
          + (f", {args.out / 'size_sweep.png'}" if any(r["run"] == "size" for r in rows) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
