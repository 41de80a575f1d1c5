"""The output set (issue 18): the swap under injected faults, the lock, stale work, pictures apart, strict JSON."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from solver.commands import output
from solver.commands.cli import solve_main, verify_main
from tests.helpers import lock_held_elsewhere
from tests.test_hostile import check_consistent_set, seed_folder, snapshot

GREEDY = ["--quiet", "--no-plots", "--method", "greedy"]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    return seed_folder(tmp_path_factory.mktemp("seed"))


def copy(seeded, tmp_path):
    folder = tmp_path / "case"
    shutil.copytree(seeded, folder)
    return folder


def new_run_args(folder, kind):
    """A second run whose set differs from the seeded greedy one: other contents, or other files."""
    if kind == "replace":
        cfg = folder / "config.yaml"
        cfg.write_text(cfg.read_text().replace("max_batch_size: 4", "max_batch_size: 3"))
        return [str(folder / "config.yaml")] + GREEDY
    return [str(folder / "config.yaml"), "--quiet", "--no-plots", "--method", "baseline"]


def count_replaces(seeded, tmp_path, kind, monkeypatch):
    folder = copy(seeded, tmp_path / "count")
    calls = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append((a, b)), real(a, b))[1])
    assert solve_main(new_run_args(folder, kind)) == 0
    monkeypatch.setattr(os, "replace", real)
    return len(calls)


@pytest.mark.parametrize("kind", ["replace", "other-files"])
@pytest.mark.parametrize("fault", [OSError, KeyboardInterrupt])
def test_swap_fault_at_every_step_leaves_old_or_new_set(seeded, tmp_path, monkeypatch, capsys, kind, fault):
    steps = count_replaces(seeded, tmp_path, kind, monkeypatch)
    assert steps >= 4                        # manifest, old report out, plans, new report in, manifest
    real = os.replace
    for step in range(1, steps + 1):
        folder = copy(seeded, tmp_path / f"s{step}")
        old = snapshot(folder / "out")
        argv = new_run_args(folder, kind)
        calls = []

        def faulty(a, b):
            calls.append(a)
            if len(calls) == step:
                raise fault(28, "No space left on device") if fault is OSError else fault()
            return real(a, b)
        monkeypatch.setattr(os, "replace", faulty)
        code = solve_main(argv)
        monkeypatch.setattr(os, "replace", real)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        now = snapshot(folder / "out")
        if now == old:                                      # the old complete set, byte for byte
            assert code in (1, 130), (step, code, err)
            assert "nothing written" not in err or "previous" in err
        else:                                               # or the new complete set
            assert code == 0, (step, code, err)
            output.recover(folder / "out")                  # a cleanup that failed last is the next run's
            report = json.loads((folder / "out" / "report.json").read_text())
            assert list(report["methods"]) == ["greedy" if kind == "replace" else "baseline"]
            check_consistent_set(folder, folder / "out")
            if kind == "other-files":
                assert not (folder / "out" / "greedy").exists()


def test_fault_that_persists_is_restored_by_the_next_run(seeded, tmp_path, monkeypatch, capsys):
    """os.replace fails from the 3rd call on (the undo fails too): the next run restores the old set first."""
    folder = copy(seeded, tmp_path)
    old = snapshot(folder / "out")
    old.pop(".shapeplan-manifest.json")
    real, calls = os.replace, []

    def broken(a, b):
        calls.append(a)
        if len(calls) >= 3:
            raise OSError(5, "Input/output error")
        return real(a, b)
    monkeypatch.setattr(os, "replace", broken)
    assert solve_main(new_run_args(folder, "other-files")) == 1
    assert "the next run" in capsys.readouterr().err
    monkeypatch.setattr(os, "replace", real)
    output.recover(folder / "out")                          # what the next run does under its lock
    now = snapshot(folder / "out")
    now.pop(".shapeplan-manifest.json")
    assert now == old
    assert solve_main(new_run_args(folder, "other-files")) == 0
    check_consistent_set(folder, folder / "out")


def test_disk_full_while_staging_writes_nothing(seeded, tmp_path, monkeypatch, capsys):
    folder = copy(seeded, tmp_path)
    old = snapshot(folder / "out")

    def full(path, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(output, "write_file", full)
    assert solve_main(new_run_args(folder, "replace")) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "previous" in err and err.count("\n") == 1
    assert snapshot(folder / "out") == old


def test_picture_failure_is_a_warning(seeded, tmp_path, monkeypatch, capsys):
    folder = copy(seeded, tmp_path)
    from solver.commands import plots

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(plots, "bucket_layout", full)
    assert solve_main([str(folder / "config.yaml"), "--quiet", "--method", "greedy"]) == 0
    err = capsys.readouterr().err
    assert "warning: pictures not written" in err and "Traceback" not in err
    check_consistent_set(folder, folder / "out")


def test_pictures_are_listed_and_replaced_only_when_ours(seeded, tmp_path, capsys):
    folder = copy(seeded, tmp_path)
    (folder / "out" / "t.png").write_bytes(b"a user's picture")
    assert solve_main([str(folder / "config.yaml"), "--quiet", "--method", "greedy"]) == 0
    assert "warning: pictures not written" in capsys.readouterr().err
    assert (folder / "out" / "t.png").read_bytes() == b"a user's picture"
    (folder / "out" / "t.png").unlink()
    assert solve_main([str(folder / "config.yaml"), "--quiet", "--method", "greedy"]) == 0
    manifest = json.loads((folder / "out" / ".shapeplan-manifest.json").read_text())
    assert "t.png" in manifest["files"] and (folder / "out" / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_second_run_waits_then_stops_on_the_lock(seeded, tmp_path, monkeypatch, capsys):
    folder = copy(seeded, tmp_path)
    old = snapshot(folder / "out")
    monkeypatch.setattr(output, "LOCK_WAIT_S", 0.3)
    with lock_held_elsewhere(folder / "out"):
        assert solve_main(new_run_args(folder, "replace")) == 1
    err = capsys.readouterr().err
    assert "another shapeplan run is writing this output folder" in err and err.count("\n") == 1
    assert snapshot(folder / "out") == old
    assert solve_main(new_run_args(folder, "replace")) == 0          # free again: the run goes through


def test_stale_work_folders_of_ours_are_removed_others_kept(seeded, tmp_path):
    folder = copy(seeded, tmp_path)
    out = folder / "out"
    manifest = json.loads((out / ".shapeplan-manifest.json").read_text())
    ours, theirs = out / ".staging-0123456789ab", out / ".staging-ffffffffffff"
    for d in (ours, theirs, out / ".old-0123456789ab"):
        d.mkdir()
        (d / "x").write_text("left by a crash")
    manifest["work"] = [ours.name, ".old-0123456789ab"]
    (out / ".shapeplan-manifest.json").write_text(json.dumps(manifest))
    assert solve_main(new_run_args(folder, "replace")) == 0
    assert not ours.exists() and not (out / ".old-0123456789ab").exists()
    assert (theirs / "x").read_text() == "left by a crash"


def test_manifest_entries_outside_the_folder_are_never_acted_on(seeded, tmp_path):
    folder = copy(seeded, tmp_path)
    victim = folder / "victim.txt"
    victim.write_text("keep me")
    out = folder / "out"
    manifest = json.loads((out / ".shapeplan-manifest.json").read_text())
    manifest["files"] += ["../victim.txt", "/etc/hostname", "greedy/../../victim.txt"]
    (out / ".shapeplan-manifest.json").write_text(json.dumps(manifest))
    assert solve_main(new_run_args(folder, "other-files")) == 0
    assert victim.read_text() == "keep me"


def test_report_is_strict_json_with_non_finite_as_null(tmp_path):
    text = output.strict_json({"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": -float("inf")}, "e": 2})
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict constant {name}"))
    assert data["a"] is None and data["b"] == [1.0, None] and data["c"]["d"] is None and data["e"] == 2
    assert data["non_finite_as_null"]["keys"] == ["a", "b[1]", "c.d"]
    assert "not finite" in data["non_finite_as_null"]["meaning"]


def test_written_report_parses_strictly(seeded, tmp_path):
    folder = copy(seeded, tmp_path)
    assert solve_main([str(folder / "config.yaml"), "--quiet", "--no-plots", "--method", "cpsat",
                       "--time-limit", "1"]) in (0, 2)
    json.loads((folder / "out" / "report.json").read_text(),
               parse_constant=lambda name: pytest.fail(f"non-strict constant {name}"))
    assert verify_main([str(folder / "config.yaml"), str(folder / "out" / "cpsat")]) in (0, 2)


def test_python_api_write_uses_the_same_swap(seeded, tmp_path):
    from models.config import load_config
    from solver import solve

    folder = copy(seeded, tmp_path)
    (folder / "out" / "greedy" / "notes.txt").write_text("mine")
    result = solve(load_config(folder / "config.yaml"), methods=("baseline",))
    result.write(folder / "out")
    assert (folder / "out" / "greedy" / "notes.txt").read_text() == "mine"
    assert not (folder / "out" / "greedy" / "t.plan.jsonl").exists()
    check_consistent_set(folder, folder / "out")
