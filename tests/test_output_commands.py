"""analyze.py, sweep.py and calibrate.py write like solve.py (issue 18): only files listed in the folder's
manifest are replaced, swapped in atomically under the lock; a failure leaves the folder as it was."""
from __future__ import annotations

import csv
import io
import json
import os

import pytest

from solver.commands import output
from solver.commands.cli import analyze_main, calibrate_main, solve_main, sweep_main
from solver.commands.sweep import parse_sets, run_sweep, solve_point
from tests.helpers import lock_held_elsewhere
from tests.hostile_cases import GOOD_PROFILE
from tests.test_hostile import seed_folder, snapshot

MANIFEST = ".shapeplan-manifest.json"
SWEEP = ["--set", "shapes.max_unique=1,2", "--method", "greedy", "--jobs", "1", "--workers", "1"]


@pytest.fixture
def folder(tmp_path):
    return seed_folder(tmp_path)


def listed(out) -> list[str]:
    return json.loads((out / MANIFEST).read_text())["files"]


def test_sweep_csv_is_in_the_manifest_after_every_point(folder):
    """When the second point runs, sweep.csv already holds the first row, listed and complete (no work left)."""
    out, seen = folder / "sweep", []

    def watching(cfg, point, method, time_limit, requests):
        if point["shapes.max_unique"] == 2:
            rows = list(csv.DictReader(io.StringIO((out / "sweep.csv").read_text())))
            manifest = json.loads((out / MANIFEST).read_text())
            seen.append(([r["shapes.max_unique"] for r in rows], manifest["files"], manifest["work"]))
        return solve_point(cfg, point, method, time_limit, requests)

    run_sweep(str(folder / "config.yaml"), parse_sets(["shapes.max_unique=1,2"]), "greedy", jobs=1, workers=1,
              out=out, point_fn=watching)
    assert seen == [(["1"], ["sweep.csv"], [])]
    rows = list(csv.DictReader(io.StringIO((out / "sweep.csv").read_text())))
    assert [r["shapes.max_unique"] for r in rows] == ["1", "2"]


def test_sweep_plots_listed_and_user_files_kept(folder, capsys):
    out = folder / "sweep"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out)]) == 0
    assert listed(out) == ["sweep.csv", "sweep_shapes_max_unique.png"]
    assert (out / "notes.txt").read_text() == "mine"
    before = (out / "sweep.csv").read_text()
    assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out), "--resume"]) == 0
    assert (out / "sweep.csv").read_text() == before                 # every point was done: rows kept
    assert "Traceback" not in capsys.readouterr().err


def test_sweep_write_failure_keeps_the_previous_table(folder, monkeypatch, capsys):
    out = folder / "sweep"
    assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out)]) == 0
    old = snapshot(out)
    capsys.readouterr()

    def full(path, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(output, "write_file", full)
    code = sweep_main([str(folder / "config.yaml"), "--set", "shapes.max_unique=1,3", "--method", "greedy",
                       "--jobs", "1", "--workers", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "No space left on device" in err and "Traceback" not in err
    assert snapshot(out) == old


def test_resume_reads_a_broken_table_as_one_error(folder, capsys):
    out = folder / "sweep"
    assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out)]) == 0
    (out / "sweep.csv").write_text("shapes.max_unique,method\n1,greedy\n[1,greedy\n")      # not a YAML value
    old = snapshot(out)
    capsys.readouterr()
    assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "sweep.csv:3: not a sweep table row" in err and "--resume" in err and "Traceback" not in err
    assert snapshot(out) == old


def test_sweep_waits_then_stops_on_the_lock(folder, monkeypatch, capsys):
    out = folder / "sweep"
    monkeypatch.setattr(output, "LOCK_WAIT_S", 0.3)
    with lock_held_elsewhere(out):
        assert sweep_main([str(folder / "config.yaml"), *SWEEP, "--out", str(out)]) == 1
    assert "another shapeplan run is writing this output folder" in capsys.readouterr().err
    assert not (out / "sweep.csv").exists()


def test_analyze_shares_the_solve_folder_and_replaces_only_its_own(folder, capsys):
    out = folder / "out"
    plans = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.plan.jsonl")}
    assert analyze_main([str(folder / "config.yaml"), "--out", str(out)]) == 0
    assert "t.hist.png" in listed(out) and "report.json" in listed(out)
    first = (out / "t.hist.png").stat().st_ino
    assert analyze_main([str(folder / "config.yaml"), "--out", str(out)]) == 0
    assert (out / "t.hist.png").stat().st_ino != first                # replaced by a new file (swap)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*.plan.jsonl")} == plans
    assert solve_main([str(folder / "config.yaml"), "--quiet", "--no-plots", "--method", "greedy"]) == 0
    assert "histogram" in capsys.readouterr().out


def test_calibrate_failure_keeps_the_previous_fit(tmp_path, monkeypatch, capsys):
    (tmp_path / "p.csv").write_text(GOOD_PROFILE)
    out = tmp_path / "fit"
    assert calibrate_main([str(tmp_path / "p.csv"), "--out", str(out)]) == 0
    assert listed(out) == ["cost_model.yaml", "residuals.png"]
    old = snapshot(out)
    (tmp_path / "p.csv").write_text(GOOD_PROFILE.replace("1.64", "9.0"))
    real, calls = os.replace, []

    def failing(a, b):
        calls.append(a)
        if len(calls) == 3:                                           # in the middle of the swap
            raise OSError(5, "Input/output error")
        return real(a, b)
    monkeypatch.setattr(os, "replace", failing)
    capsys.readouterr()
    assert calibrate_main([str(tmp_path / "p.csv"), "--out", str(out)]) == 1
    monkeypatch.setattr(os, "replace", real)
    err = capsys.readouterr().err
    assert "Input/output error" in err and "previous" in err and err.count("\n") == 1
    assert snapshot(out) == old
