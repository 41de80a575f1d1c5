import csv
import subprocess
from pathlib import Path

import pytest

from models.config import load_config
from models.requests import load_requests
from solver.commands import benchmark
from solver.commands.benchmark import compare_csv, main, size_config
from solver.verify import verify_dir
from tests.helpers import ROOT, recompute


def test_size_sweep_writes_csv_table_png_and_verified_plans(tmp_path, capsys):
    work = tmp_path / "work"
    assert main(["--only", "", "--sizes", "300", "--size-time-limit", "2", "--out", str(tmp_path),
                 "--work-dir", str(work)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(rows) == 1
    row = rows[0]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert len(head) == 40 and row["commit"] == head and row["dirty"] in ("True", "False")
    assert f"commit `{head}`" in (tmp_path / "results.md").read_text()
    assert row["entry"] == "size_300" and int(row["requests"]) == 300 and row["method"] == "cpsat"
    assert float(row["peak_mem_mib"]) > 10 and float(row["wall_s"]) > 0
    if row["best_bound"]:                   # a bound is claimed only beside a plan meeting every limit
        assert row["limits_hold"] == "True" and float(row["best_bound"]) <= float(row["total_cost"]) * (1 + 1e-9)
    else:
        assert row["limits_hold"] == "False"
    assert (tmp_path / "size_sweep.png").stat().st_size > 1000
    assert "size_300" in (tmp_path / "results.md").read_text()
    # the plan the benchmark wrote passes the verifier, and its cost is recomputed independently
    out = Path(size_config(300, work)["output"]["dir"])
    assert out == work / "out" / "bench" / "size_300"               # nothing written into the repository
    cfg = load_config(work / "out" / "bench" / "size_300.yaml")
    assert Path(cfg.buckets[0].requests) == work / "data" / "generated" / "synthetic_300.csv"
    reqs = {"big": load_requests(cfg.buckets[0].requests, "big")}
    plans, errors = verify_dir(cfg, reqs, out / "cpsat")
    assert errors == []
    ref = recompute(cfg, reqs["big"], plans["big"].batch_of, plans["big"].seq_align)
    compile_cost = sum(cfg.cost_model.compile_cost[0] + cfg.cost_model.compile_cost[1] * s
                       + cfg.cost_model.compile_cost[2] * s * s for s in set(plans["big"].seq_align.tolist()))
    assert float(row["total_cost"]) == pytest.approx(ref["cost"] + compile_cost, rel=1e-9)


def test_unknown_entry_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="--only 'nope' must be one of default, azure, 1m"):
        main(["--only", "nope", "--sizes", "", "--out", str(tmp_path)])


def test_ray_entry_compares_the_csvs_and_reports_overhead_per_point(tmp_path, monkeypatch):
    """--ray without a real sweep: every run against the local one, the targets checked, bench/ray.md written."""
    rows = "shapes.max_unique,total_cost\n4,1.0\n8,2.0\n"
    walls = {"local": 100.0, "ray": 116.0, "cluster": 84.0}

    def fake_run(name, flags, args, env=None):
        path = tmp_path / name / "sweep.csv"
        path.parent.mkdir()
        path.write_text(rows.replace("2.0", "2.5") if name == "cluster" else rows)
        return {"run": name, "flags": " ".join(flags), "wall_s": walls[name], "elapsed_s": 90.0,
                "layout": "" if name == "local" else "16 tasks on 2 node(s) (1+1 CPUs)", "csv": path}

    monkeypatch.setattr(benchmark, "sweep_run", fake_run)
    monkeypatch.setattr(benchmark, "cluster_run", lambda args: fake_run("cluster", ["--address", "A"], args))
    assert main(["--ray", "--ray-cluster", "--out", str(tmp_path / "bench")]) == 0
    md = (tmp_path / "bench" / "ray.md").read_text()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert f"commit `{head}`" in md and "16-point sweep of `configs/default.yaml`" in md
    assert "| local | `--jobs 2` | 100.0 | 90 | reference | - | - |" in md
    assert "| ray | `--backend ray` | 116.0 | 90 | byte-identical | +1.00 | 16 tasks on 2 node(s) (1+1 CPUs) |" in md
    assert "- ray: same CSV yes, overhead +1.00 s per point" in md and md.count(": met.") == 1
    assert "| cluster | `--address A` | 84.0 | 90 | 1 of 2 rows differ | -1.00 |" in md
    assert "- cluster: same CSV NO, overhead -1.00 s per point" in md and "NOT met." in md
    assert not (tmp_path / "bench" / "results.md").exists()        # --ray runs the Ray entry alone


def test_compare_csv_counts_rows_and_columns(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("k,v\n1,2\n3,4\n")
    b.write_text("k,v\n1,2\n3,4\n")
    assert compare_csv(a, b) == "byte-identical"
    b.write_text("k,v\n1,2\n")
    assert compare_csv(a, b) == "1 of 2 rows differ"
    b.write_text("k,w\n1,2\n3,4\n")
    assert compare_csv(a, b) == "different columns"


def test_default_run_does_not_touch_ray(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmark, "run_ray", lambda args: pytest.fail("the Ray entry ran by default"))
    assert main(["--only", "", "--sizes", "", "--out", str(tmp_path), "--work-dir", str(tmp_path)]) == 0
    assert (tmp_path / "results.md").exists() and not (tmp_path / "ray.md").exists()


def bench_row(run, entry, gap, cost=1.0e12, wall=50.0, bound_global=True):
    row = {"run": run, "entry": entry, "requests": 10, "time_limit": 60.0 if run == "suite" else 600.0,
           "method": "cpsat", "total_cost": cost, "best_bound": cost * (1 - gap), "gap": gap,
           "bound_global": bound_global, "status": "FEASIBLE", "wall_s": wall, "peak_mem_mib": 100.0,
           "margins": "", "limits_hold": True, "vs_cpsat": 0.0, "method_s": 1.0}
    return row | {f"{s}_s": 0.0 for s in benchmark.STAGES}


def test_table_shows_the_gap_at_both_time_limits_and_checks_issue_16s_targets():
    rows = [bench_row("suite", "default", 0.04), bench_row("long", "default", 0.02),
            bench_row("suite", "azure", 0.004, bound_global=False), bench_row("suite", "1m", 0.0005, wall=90.0),
            bench_row("size", "size_1000", 0.3)]
    md = benchmark.markdown(rows, {"commit": "abc", "dirty": False}, (60.0, 600.0))
    head = next(line for line in md.splitlines() if line.startswith("| entry | requests"))
    assert "| gap at 60 s | gap at 600 s |" in head
    default = next(line for line in md.splitlines() if line.startswith("| default |"))
    assert "| 4.00% | global | 4.00% | 2.00% |" in default      # its own gap and scope, then at 60 s and 600 s
    assert "| 2.00% | global | 4.00% | 2.00% |" in next(line for line in md.splitlines() if line.startswith("| default (long) |"))
    assert "| 30.00% | global | - | - |" in next(line for line in md.splitlines() if line.startswith("| size_1000 |"))
    assert "- default: cost 1e+12 <= 1.058e+12 met; gap 4.00% <= 5.00% at 60 s met; gap 2.00% <= 1.00% at 600 s NOT met" in md
    assert "- azure: gap 0.40% <= 0.50% at 60 s NOT met" in md      # not a global bound: no target met
    assert "- 1m: gap 0.05% <= 0.10% at 60 s met; wall 90.0 s <= 88 s NOT met" in md


def test_long_runs_only_with_their_suite_entry(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(benchmark, "child", lambda config, methods, limit, out: calls.append(
        (Path(config).name, methods, limit)) or {"rows": [], "requests": 0, "stages": {}, "wall_s": 0.0, "peak_mem_mib": 0.0})
    benchmark.run_suite(benchmark.parse_args(["--only", "azure", "--out", str(tmp_path)]))
    assert calls == [("azure_code.yaml", "all", 60.0)]
    calls.clear()
    benchmark.run_suite(benchmark.parse_args(["--only", "default", "--long-time-limit", "7", "--out", str(tmp_path)]))
    assert calls == [("default.yaml", "all", 60.0), ("default.yaml", "cpsat", 7.0)]


def test_an_entry_runs_under_the_stop_guard_so_an_early_cpsat_end_is_not_a_ctrl_c(tmp_path, monkeypatch, capsys):
    from solver import stop
    seen = []

    def entry(config, methods, time_limit, out):
        seen.append(stop.S.installed)
        return {}

    monkeypatch.setattr(benchmark, "run_entry", entry)
    assert main(["--child", "configs/default.yaml", "--out", str(tmp_path)]) == 0
    assert seen == [True] and not stop.S.installed
