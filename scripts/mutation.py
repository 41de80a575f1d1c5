#!/usr/bin/env python
"""Mutation testing of the optimizer's core with mutmut 3, summarized in bench/mutation.md.

    python scripts/mutation.py [--files models/cost.py ...] [--tests tests/test_cost.py ...]
                               [--workers 1] [--max-minutes 20] [--worktree] [--out bench/mutation.md]

Runs on a snapshot of the repository in a temporary directory (HEAD by default, so the summary names
the commit it tested; --worktree copies the work tree as it is, uncommitted changes included), so
edits made meanwhile neither break the run nor get mutated. mutmut mutates each file, runs only
the selected tests that reach the mutated function (stopping at the first failure), and the summary
lists per file killed / survived / other and every survivor with its diff and, from
bench/mutation_notes.yaml (mutant name: why), why it survives (equivalent, or the test added since).
Logging calls are not mutated (LOG_CALL): their text changes no answer. With --keep DIR naming the
directory of an earlier run, mutmut keeps the verdicts of functions whose code did not change and
re-tests only the others plus the mutants named by --mutants (e.g. the survivors, after adding tests),
and the summary covers every mutant. Needs `pip install -e ".[mutation]"`. Not part of the pytest run:
a full run takes tens of minutes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("models/cost.py", "solver/verify.py", "models/cpsat_model.py", "models/pair_model.py",
         "solver/postprocess.py", "solver/polish.py")
# fast and independent: brute force, recomputation from the spec, hand-computed values
TESTS = ("tests/test_cost.py", "tests/test_models_alone.py", "tests/test_verify.py", "tests/test_verify_semantics.py",
         "tests/test_pair_model.py", "tests/test_polish.py", "tests/test_cpsat_model.py")
KILLED = {"killed", "caught by type check"}
LOG_CALL = r"^\s*log\.(debug|info|warning|error|exception)\("     # lines mutmut leaves alone
NOTES = ROOT / "bench" / "mutation_notes.yaml"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def snapshot(dest: Path, worktree: bool) -> dict:
    """Copy the repository into dest: HEAD (git archive) or the work tree's tracked and untracked files."""
    head = git("rev-parse", "HEAD").strip()
    dirty = bool(git("status", "--porcelain").strip())
    if worktree:
        names = git("ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
        for name in filter(None, names):
            src = ROOT / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return {"commit": head, "tree": "work tree (uncommitted changes included)" if worktree and dirty else "HEAD"}


def configure(dest: Path, files: list[str], tests: list[str], keyword: str | None = None) -> None:
    """The [tool.mutmut] table, appended to the snapshot's pyproject.toml (the repository's is untouched).
    `keyword`: a pytest -k expression; mutmut maps tests to functions from that selection only."""
    tests = list(tests) + (["-k", keyword] if keyword else [])
    table = {
        "source_paths": sorted({f.split("/")[0] for f in files}),
        "only_mutate": files,
        "also_copy": ["configs", "data", "scripts", "tests"],
        "pytest_add_cli_args": ["-p", "no:cacheprovider"],
        "pytest_add_cli_args_test_selection": tests,
        "use_git_change_detection": False,
        "do_not_mutate_patterns": [LOG_CALL],
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    with open(dest / "pyproject.toml", "a") as fh:
        fh.write("\n".join(lines) + "\n")


def run_mutmut(dest: Path, workers: int, max_minutes: float, log_path: Path, names=()) -> bool:
    """mutmut run in the snapshot (only the mutants matching `names`, when given); False when the time
    box ended it (finished mutants still count)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", "from mutmut.__main__ import cli; cli()", "run",
                                 "--max-children", str(workers), *names], cwd=dest, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            proc.wait(timeout=max_minutes * 60)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return False


def mutmut_cli(dest: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", "from mutmut.__main__ import cli; cli()", *args], cwd=dest,
                          capture_output=True, text=True).stdout


SHOW = """
import sys
from mutmut.__main__ import cli
for name in sys.stdin.read().split():
    print("\\0" + name, flush=True)
    try:
        cli.main(["show", name], standalone_mode=False)
    except BaseException as e:          # one broken diff must not lose the others
        print(f"(no diff: {e!r})")
"""


def show_all(dest: Path, names: list[str]) -> dict[str, str]:
    """{mutant: `mutmut show` text}, all from one process (one `mutmut show` each takes seconds)."""
    if not names:
        return {}
    out = subprocess.run([sys.executable, "-c", SHOW], cwd=dest, input="\n".join(names), capture_output=True,
                         text=True).stdout
    diffs = {}
    for chunk in out.split("\0")[1:]:
        name, _, text = chunk.partition("\n")
        diffs[name] = text
    return diffs


def file_of(mutant: str, files: list[str]) -> str:
    """models.cost.x_quad__mutmut_3 -> models/cost.py"""
    for f in files:
        if mutant.startswith(f[:-3].replace("/", ".") + "."):
            return f
    return "?"


def collect(dest: Path, files: list[str]) -> dict[str, dict[str, str]]:
    """{file: {mutant: status}} from `mutmut results --all true`."""
    out = {f: {} for f in files}
    for line in mutmut_cli(dest, "results", "--all", "true").splitlines():
        m = re.match(r"\s+(\S+): (.+)$", line)
        if m:
            out.setdefault(file_of(m.group(1), files), {})[m.group(1)] = m.group(2).strip()
    return out


def load_notes(path: Path) -> dict[str, dict]:
    """{mutant name: {"why": ..., "line": the mutated line}} from the reviewed notes file (missing file: none).
    A note is the reason alone, or a mapping with `why` and `line`: the added line of the mutant's diff it was
    written for, so a note whose mutant number now names another mutation (its function changed) is not used."""
    if not path.is_file():
        return {}
    import yaml

    out = {}
    for k, v in (yaml.safe_load(path.read_text()) or {}).items():
        out[str(k)] = {"why": str(v["why"]).strip(), "line": v.get("line")} if isinstance(v, dict) else \
            {"why": str(v).strip(), "line": None}
    return out


def why(name: str, notes: dict[str, dict], diff: str) -> str:
    """The reason noted for this mutant: its own note if written for this very mutation, else the note of a
    mutant of the same function with the same mutated line (mutant numbers shift when a function changes)."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    note = notes.get(name)
    if note is not None and (note["line"] is None or str(note["line"]).strip() in added):
        return note["why"]
    function = name.rsplit("__mutmut_", 1)[0]
    for other, n in notes.items():
        if other.rsplit("__mutmut_", 1)[0] == function and n["line"] is not None and str(n["line"]).strip() in added:
            return n["why"]
    if note is not None:
        return "not reviewed yet (the note for this name was written for another mutation: its function changed)."
    return "not reviewed yet."


def summary(stamp: dict, files: list[str], tests: list[str], workers: int, results: dict, diffs: dict,
            finished: bool, minutes: float, notes: dict[str, dict] | None = None, keyword: str | None = None,
            reused: bool = False) -> str:
    notes = notes or {}
    cmd = "python scripts/mutation.py --files " + " ".join(files) + f" --workers {workers}" + \
        (" --tests " + " ".join(tests) if tests != list(TESTS) else "") + (f" --keyword '{keyword}'" if keyword else "")
    lines = ["# Mutation testing (mutmut)", "",
             f"Commit `{stamp['commit']}` ({stamp['tree']}), {datetime.date.today().isoformat()}, "
             f"{minutes:.1f} min with {workers} worker(s){'' if finished else ', stopped by the time box'}" +
             (" (an incremental run: the verdicts of earlier runs in the same --keep directory stand for every "
              "function whose code did not change)" if reused else "") + ".", "",
             f"Command: `{cmd}`", "", "Tests: " + ", ".join(f"`{t}`" for t in tests) +
             (f", only those matching `-k '{keyword}'`" if keyword else ""), "",
             f"Not mutated: logging calls (lines matching `{LOG_CALL}`).", "",
             "| file | killed | survived | timeout | no tests | not checked | other | total | score |",
             "|---|---|---|---|---|---|---|---|---|"]
    for f in files:
        st = list(results.get(f, {}).values())
        killed = sum(s in KILLED for s in st)
        counts = {k: sum(s == k for s in st) for k in ("survived", "timeout", "no tests", "not checked")}
        other = len(st) - killed - sum(counts.values())
        checked = killed + counts["survived"] + counts["timeout"]
        score = f"{100 * (killed + counts['timeout']) / checked:.1f}%" if checked else "-"
        lines.append(f"| {f} | {killed} | {counts['survived']} | {counts['timeout']} | {counts['no tests']} | "
                     f"{counts['not checked']} | {other} | {len(st)} | {score} |")
    lines += ["", "Score = (killed + timeout) / (killed + survived + timeout). \"no tests\": no selected test "
              "reaches the mutated function.", "", "## Survivors", "",
              f"Each with why it survives, from `{NOTES.relative_to(ROOT)}`.", ""]
    survivors = [(f, m) for f in files for m, s in results.get(f, {}).items() if s == "survived"]
    if not survivors:
        lines.append("None.")
    for f, m in survivors:
        lines += [f"### `{m}`", "", "Why: " + why(m, notes, diffs.get(m, "")), "", "```diff",
                  diffs.get(m, "").strip(), "```", ""]
    others = [(m, s) for f in files for m, s in results.get(f, {}).items()
              if s not in KILLED and s not in ("survived", "not checked")]
    if others:
        lines += ["## Other outcomes", ""] + [f"- `{m}`: {s}" for m, s in others] + [""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mutation.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", nargs="+", default=list(FILES), help="files to mutate (default: the optimizer's core)")
    p.add_argument("--tests", nargs="+", default=list(TESTS), help="test files or node ids to run")
    p.add_argument("--keyword", "-k", default=None, help="pytest -k expression narrowing --tests (e.g. to leave "
                   "out slow tests)")
    p.add_argument("--workers", type=int, default=1, help="mutants tested in parallel (default 1)")
    p.add_argument("--max-minutes", type=float, default=120.0, help="time box; finished mutants are summarized")
    p.add_argument("--worktree", action="store_true", help="test the work tree as it is instead of HEAD")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "mutation.md", help="summary file")
    p.add_argument("--mutants", nargs="+", default=(), help="only these mutant names or globs, e.g. "
                   "'models.cost.x_quad*' (the summary then covers only them, or with --keep every mutant "
                   "tested in that directory)")
    p.add_argument("--keep", type=Path, default=None, help="run in this directory and keep it (default: a temp dir); "
                   "an earlier run's directory keeps the verdicts of unchanged functions")
    p.add_argument("--notes", type=Path, default=NOTES, help="YAML {mutant: why it survives} (default %(default)s)")
    p.add_argument("--summary-only", action="store_true", help="with --keep: rewrite the summary from that "
                   "directory's last run (e.g. after editing the notes), testing nothing")
    args = p.parse_args(argv)
    if args.summary_only and not args.keep:
        sys.exit("error: --summary-only needs --keep DIR (the directory of an earlier run)")
    try:
        import mutmut as _  # noqa: F401
    except ImportError:
        sys.exit('error: mutmut is not installed: pip install -e ".[mutation]"')
    for f in args.files:
        if not (ROOT / f).is_file():
            sys.exit(f"error: --files {f}: no such file in the repository")
    dest = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="shapeplan-mutation-"))
    dest.mkdir(parents=True, exist_ok=True)
    reused = (dest / "mutants").is_dir()
    start = time.monotonic()
    try:
        log_path = dest / "mutmut.log"
        if args.summary_only:
            stamp = json.loads((dest / "run.json").read_text())
            finished, reused = stamp["finished"], stamp["reused"]
        else:
            stamp = snapshot(dest, args.worktree)
            configure(dest, args.files, args.tests, args.keyword)
            print(f"[mutation] {stamp['commit'][:12]} ({stamp['tree']}) in {dest}; log {log_path}", flush=True)
            finished = run_mutmut(dest, args.workers, args.max_minutes, log_path, args.mutants)
            stamp.update(finished=finished, reused=reused, minutes=(time.monotonic() - start) / 60)
            (dest / "run.json").write_text(json.dumps(stamp))
        results = collect(dest, args.files)
        log_text = log_path.read_text(errors="replace")
        if args.mutants:                                   # the others were never tried
            results = {f: {m: s for m, s in r.items() if s != "not checked"} for f, r in results.items()}
        checked = [s for f in results.values() for s in f.values() if s != "not checked"]
        if "Failed to run clean test" in log_text or not checked:
            sys.stderr.write(log_text[-3000:])
            sys.exit("error: mutmut checked no mutant (the unmutated tests must pass first; see the log above)")
        diffs = show_all(dest, [m for f in results.values() for m, s in f.items() if s == "survived"])
        text = summary(stamp, args.files, args.tests, args.workers, results, diffs, finished,
                       stamp["minutes"], load_notes(args.notes), args.keyword, reused)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        print(text.split("## Survivors")[0])
        print(f"[mutation] wrote {args.out}")
    finally:
        if not args.keep:
            shutil.rmtree(dest, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
