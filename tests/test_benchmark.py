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
