"""Every row of tests/hostile_cases.py: one message, the right exit code, no traceback; exit 1 leaves the
output folder byte-identical, exit 0/2 leave a set that verify.py passes and the report agrees with."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from solver.commands.cli import analyze_main, calibrate_main, export_main, solve_main, sweep_main, verify_main
from tests.helpers import make_config, rows_from
from tests.hostile_cases import CASES, GENS, GOOD_PROFILE, PROMPTS


def seed_folder(base: Path) -> Path:
    """config.yaml + t.jsonl, and out/ holding a good greedy plan from an earlier run."""
    cfg = make_config(base, {"t": rows_from(PROMPTS, GENS)}, shapes={"max_unique": 2}, batching={"max_batch_size": 4},
                      solver={"time_limit_s": 1, "workers": 2, "log_progress": False})
    assert solve_main([str(cfg), "--method", "greedy", "--quiet", "--no-plots"]) == 0
    return base


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    return seed_folder(tmp_path_factory.mktemp("seed"))


def snapshot(folder: Path) -> dict:
    """Every entry under folder (hidden ones too): file bytes, link targets, folders."""
    if not folder.exists():
        return {}
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        out[rel] = ("link", str(p.readlink())) if p.is_symlink() else ("dir",) if p.is_dir() else p.read_bytes()
    return out


def plan_facts(plan_path: Path, trace: dict) -> tuple[int, int]:
    """(batches, pad tokens) of a plan file, straight from its lines and the trace (spec 4: s - p + G - g)."""
    batches = {}
    for line in plan_path.read_text().splitlines():
        o = json.loads(line)
        batches.setdefault(o["batch_id"], []).append((o["shape"]["seq_align"], *trace[o["request_id"]]))
    pad = 0
    for members in batches.values():
        G = max(g for _, _, g in members)
        pad += sum(s - p + G - g for s, p, g in members)
    return len(batches), pad


def trace_of(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "t.jsonl").read_text().splitlines() if line.strip()]
    return {r["request_id"]: (r["prompt_len"], r["gen_len"]) for r in rows}


def check_consistent_set(folder: Path, out: Path):
    """The report names its plans, each verifies, and its batch and pad counts are the plans' own."""
    report = json.loads((out / "report.json").read_text())
    trace = trace_of(folder)
    for method, info in report["methods"].items():
        assert verify_main([str(folder / "config.yaml"), str(out / method)]) in (0, 2), method
        (bucket, numbers), = info["buckets"].items()               # one bucket, its trace t.jsonl
        batches, pad = plan_facts(out / method / f"{bucket}.plan.jsonl", trace)
        assert numbers["num_batches"] == batches
        assert numbers["pad_tokens"] == pad
    manifest = json.loads((out / ".shapeplan-manifest.json").read_text())
    assert not manifest["swap"] and not manifest["work"]
    assert not list(out.glob(".staging-*")) and not list(out.glob(".old-*"))


def argv_for(case, folder: Path, extra: list) -> tuple:
    cfg, out = str(folder / "config.yaml"), folder / "out"
    if case.command == "analyze":
        return analyze_main, [cfg, "--out", str(out)] + extra
    if case.command == "sweep":
        return sweep_main, [cfg, "--set", "shapes.max_unique=1,2", "--method", "greedy", "--jobs", "1", "--workers",
                            "1", "--out", str(out)] + extra
    if case.command == "calibrate":
        if not (folder / "p.csv").exists():
            (folder / "p.csv").write_text(GOOD_PROFILE)
        if extra and not extra[0].startswith("--"):
            return calibrate_main, extra + ["--out", str(out)]
        return calibrate_main, [str(folder / "p.csv"), "--out", str(out)] + extra
    if case.command == "verify":
        return verify_main, [cfg, str(out / "greedy")]
    if case.command == "verify-missing":
        return verify_main, [cfg, str(out / "nothing")]
    if case.command == "export":
        return export_main, [str(out / "greedy"), "--format", "json"] + extra
    if "argv" in case.tags:
        return solve_main, extra
    method = "all" if "method-all" in case.tags else "cpsat" if "cpsat" in case.tags else "greedy"
    return solve_main, [cfg, "--quiet", "--no-plots", "--time-limit", "1", "--method", method] + extra


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(case, seeded, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "case"
    shutil.copytree(seeded, folder, symlinks=True)
    monkeypatch.chdir(folder)
    extra = case.edit(folder)
    extra = extra if isinstance(extra, list) else []
    before = snapshot(folder / "out")
    main, argv = argv_for(case, folder, extra)
    start = time.monotonic()
    code = main(argv)
    wall = time.monotonic() - start
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    assert code == case.code if case.code >= 0 else code in (0, 2), (code, cap.err)
    if case.needle:
        assert case.needle in cap.err + cap.out, cap.err
    if code == 1:
        assert cap.err.startswith("error: ") and cap.err.count("\n") == 1, cap.err
        assert snapshot(folder / "out") == before
    elif case.command == "solve":
        assert wall < 30, wall                     # bounded by the time limit (1 s) plus heuristics
        check_consistent_set(folder, folder / "out")
    if case.check:
        case.check(folder)
