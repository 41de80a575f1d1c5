import csv
import subprocess
from pathlib import Path

import pytest

from models.config import load_config
from models.requests import load_requests
from solver.commands.benchmark import main, size_config
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
