"""Writing a run's output set: only files this project wrote, swapped in atomically, under a lock.

The output folder keeps a manifest (`.shapeplan-manifest.json`) of the files shapeplan wrote
there. A run replaces or deletes only files the manifest lists; any other file in its way is an
error, never touched. The new set is written into `.staging-<id>/`, then swapped in: the old
report first (so no report stands beside half-moved plans), the old files into `.old-<id>/`,
the new files in, the new report last, then the manifest. The manifest carries a journal of
the swap, so a failure (or a crash) at any step is rolled back, in the run or by the next one:
the folder holds the old complete set or the new complete set. A lock file
(`.shapeplan.lock`) keeps two runs from writing one folder at once.
"""
from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import secrets
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from models.errors import InputError
from models.plan import plan_lines
from solver import stop

if TYPE_CHECKING:
    from solver.results import SolveResult

log = logging.getLogger(__name__)
MANIFEST = ".shapeplan-manifest.json"
LOCK = ".shapeplan.lock"
LOCK_WAIT_S = 10.0
WORK_NAME = re.compile(r"^\.(staging|old)-[0-9a-f]{12}$")
NULL_MEANING = "null stands for a number that is not finite (no bound proven, or infinite) or does not apply"


class SwapError(InputError):
    """The output set could not be written; `kept_old` tells whether the old set is intact."""

    def __init__(self, message: str, kept_old: bool = True):
        super().__init__(message)
        self.kept_old = kept_old


class Interrupted(KeyboardInterrupt):
    """Ctrl-C reached the swap (the Python API, or a fault): `kept_old` tells whether the old set is intact."""

    def __init__(self, kept_old: bool):
        super().__init__()
        self.kept_old = kept_old


# --- what a run writes ------------------------------------------------------------------------

def strict_json(report: dict) -> str:
    """The report as strict JSON: non-finite numbers become null and are listed with their meaning."""
    nulled: list[str] = []
    clean = finite_only(report, "", nulled)
    if nulled:
        clean["non_finite_as_null"] = {"keys": nulled, "meaning": NULL_MEANING}
    return json.dumps(clean, indent=2, allow_nan=False)


def finite_only(value, where: str, nulled: list[str]):
    if isinstance(value, dict):
        return {str(k): finite_only(v, f"{where}.{k}" if where else str(k), nulled) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(v, f"{where}[{i}]", nulled) for i, v in enumerate(value)]
    if hasattr(value, "tolist"):                       # numpy scalars and arrays
        return finite_only(value.tolist(), where, nulled)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        nulled.append(where)
        return None
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"{where}: not JSON serializable: {type(value).__name__}")


def output_files(res: SolveResult, report: dict) -> dict[str, bytes]:
    """Relative path -> content of every file of the set (plans per method, the report)."""
    cfg = res.config
    files = {}
    for method, r in res.results.items():
        for name, plan in r.plans.items():
            text = plan_lines(name, res.requests[name].ids, plan, cfg.shapes.heads_align, cfg.shapes.hidden_align)
            files[f"{method}/{name}.plan.jsonl"] = text.encode()
    files["report.json"] = strict_json(report).encode()
    return files


def protected_paths(cfg) -> list[Path]:
    """The config and every trace: no write or delete may reach them."""
    paths = [b.requests for b in cfg.buckets]
    return ([cfg.source] if cfg.source else []) + paths


def write_outputs(res: SolveResult, out_dir: Path, report: dict) -> None:
    """Write every plan and the report, then swap them in as one set (see the module doc)."""
    files = output_files(res, report)
    with open_folder(Path(out_dir), protected_paths(res.config), files) as out:
        replace_set(out, files)


@contextmanager
def open_folder(out_dir: Path, protected: list[Path], rels):
    """The checked output folder (not /, not a file, no input inside), held under its lock with an earlier
    half swap undone; InputError before anything is created when one of `rels` is in the way and not ours."""
    out = check_out_dir(Path(out_dir), protected)
    if out.is_dir() and not read_manifest(out)["swap"]:
        check_owned(out, rels, read_manifest(out))     # refuse before creating anything
    with folder_lock(out):
        check_owned(out, rels, recover(out))
        yield out


def replace_set(out: Path, files: dict[str, bytes], produce: Callable[[Path], list[Path]] | None = None,
                keep_others: bool = False) -> None:
    """Swap `files` (and what `produce(folder)` writes) in, under the lock of `open_folder`. The folder's
    other listed files go (a solve's set replaces the last one), or stay with `keep_others`."""
    swap_set(out, files, read_manifest(out), produce, keep_others)


# --- the output folder --------------------------------------------------------------------------

def check_out_dir(out: Path, protected: list[Path]) -> Path:
    """The resolved output folder, or InputError when it is / , not a folder, or holds an input."""
    try:
        out = out.resolve()
        inputs = [Path(p).resolve() for p in protected]
    except (OSError, RuntimeError) as exc:
        raise InputError(f"{out}: cannot resolve the output folder ({exc})") from None
    if out == Path(out.anchor):
        raise InputError(f"{out}: output dir may not be the root of the file system; choose a folder of its own")
    for part in [out, *out.parents]:
        if part.exists() and not part.is_dir():
            raise InputError(f"{part}: output dir is not a folder")
    for path in inputs:
        if out == path or out in path.parents:
            raise InputError(f"{out}: output dir contains the input {path}; a run never writes beside its inputs, "
                             "choose another folder")
    return out


def make_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out}: cannot create the output folder ({exc.strerror or exc}); nothing written") \
            from None


@contextmanager
def folder_lock(out: Path, wait_s: float | None = None):
    """Hold `<out>/.shapeplan.lock`; a second run waits up to LOCK_WAIT_S, then stops (InputError)."""
    make_dir(out)
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"{out}: cannot write into the output folder ({exc.strerror or exc}); nothing written") \
            from None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(f"{out}: another shapeplan run is writing this output folder (lock {LOCK} "
                                     f"held for {wait_s:g} s); wait for it or choose another --out") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)                                    # closing releases the lock


# --- the manifest ---------------------------------------------------------------------------------

def safe_rel(rel) -> bool:
    """A manifest entry we would act on: a plain relative path inside the folder."""
    if not isinstance(rel, str) or not rel or "\\" in rel:
        return False
    p = PurePosixPath(rel)
    return not p.is_absolute() and all(part not in ("", ".", "..") for part in p.parts) and \
        p.parts[0] not in (MANIFEST, LOCK)


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.exists():
        return {"files": legacy_files(out), "work": [], "swap": None}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable manifest ({exc}); move it away (the files it listed are then "
                         "treated as not written by shapeplan)") from None
    if not isinstance(data, dict):
        data = {}
    files = [f for f in data.get("files", []) if safe_rel(f)] if isinstance(data.get("files"), list) else []
    work = [w for w in data.get("work", []) if isinstance(w, str) and WORK_NAME.match(w)] \
        if isinstance(data.get("work"), list) else []
    swap = data.get("swap") if isinstance(data.get("swap"), dict) else None
    return {"files": sorted(set(files)), "work": work, "swap": swap}


def legacy_files(out: Path) -> list[str]:
    """A folder written before manifests existed: the files its shapeplan report.json names (the report,
    each method's plan per bucket, the pictures), where they exist. Nothing else is adopted."""
    try:
        report = json.loads((out / "report.json").read_text())
        methods = report["methods"]
        names = {m: list(info["buckets"]) for m, info in methods.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    rels = ["report.json", "methods.png"]
    for method, buckets in names.items():
        rels += [f"{method}/{b}.plan.jsonl" for b in buckets] + [f"{b}.png" for b in buckets]
    return sorted(r for r in set(rels) if safe_rel(r) and (out / r).is_file() and not (out / r).is_symlink())


def write_manifest(out: Path, manifest: dict) -> None:
    """Atomically (temporary file, then rename); deterministic, so an undone run leaves it byte-identical."""
    text = json.dumps({"shapeplan_manifest": 1, "files": sorted(set(manifest["files"])),
                       "work": manifest["work"], "swap": manifest["swap"]}, indent=1, sort_keys=True) + "\n"
    path = out / MANIFEST
    if path.exists() and path.read_text() == text:
        return
    tmp = out / (MANIFEST + ".tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_owned(out: Path, rels, manifest: dict) -> None:
    """Every target of the new set is free or ours; no folder on the way is a symlink or a file."""
    owned = set(manifest["files"])
    for rel in sorted(rels):
        target = out / rel
        for parent in list(PurePosixPath(rel).parents)[:-1]:
            d = out / parent
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                raise InputError(f"{d}: is in the way of {rel} and was not made by shapeplan; move it away or "
                                 "choose another output folder")
        if (target.exists() or target.is_symlink()) and rel not in owned:
            raise InputError(f"{target}: exists and was not written by shapeplan (not in {MANIFEST}); move it away "
                             "or choose another output folder")


# --- swap, roll back, recover ---------------------------------------------------------------------

def new_work(out: Path) -> tuple[Path, Path]:
    token = secrets.token_hex(6)
    return out / f".staging-{token}", out / f".old-{token}"


def write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)


def swap_set(out: Path, files: dict[str, bytes], manifest: dict,
             produce: Callable[[Path], list[Path]] | None = None, keep_others: bool = False) -> None:
    """Stage the new set, then swap it in with the journal in the manifest; undo on any failure."""
    stage, trash = new_work(out)
    listed = list(manifest["files"])
    with stop.deferred():
        rels = stage_files(out, files, produce, manifest, stage, trash)
        old = [r for r in listed if r in rels] if keep_others else listed
        after = sorted(set(listed) | set(rels)) if keep_others else rels
        journal = {"stage": stage.name, "trash": trash.name, "old": old, "new": rels, "listed": listed}
        try:
            write_manifest(out, {"files": listed, "work": [stage.name, trash.name], "swap": journal})
            move_in(out, journal)
            write_manifest(out, {"files": after, "work": [stage.name, trash.name], "swap": None})
        except BaseException as exc:
            undone = undo(out, journal, listed)
            if not isinstance(exc, OSError):
                raise Interrupted(undone) from None
            raise SwapError(f"{out}: swapping the new set in failed ({exc.strerror or exc}); " +
                            ("the folder keeps its previous set" if undone else
                             "the swap could not be undone: the next run into this folder restores the previous "
                             "set"), kept_old=undone) from None
        try:
            finish(out, after, [stage, trash], journal)
        except BaseException as exc:                   # the new set is in; the next run removes the rest
            log.warning("%s: the new set is in, but cleaning up failed (%r); the next run finishes it", out, exc)


def stage_files(out: Path, files: dict[str, bytes], produce, manifest: dict, stage: Path, trash: Path) -> list[str]:
    """Write the new set into the stage (`produce(stage)` adds its files); the sorted relative paths.
    On a failure the stage goes and the folder is as before: SwapError (a write), Interrupted, or the error."""
    try:
        write_manifest(out, dict(manifest, work=[stage.name, trash.name]))
        for rel, data in files.items():
            write_file(stage / rel, data)
        made = produce(stage) if produce else []
        rels = sorted(set(files) | {Path(p).relative_to(stage).as_posix() for p in made})
        check_owned(out, rels, manifest)
        return rels
    except OSError as exc:
        discard(out, manifest, stage, trash)
        raise SwapError(f"{out}: cannot write the output set ({exc.strerror or exc}); nothing written, "
                        "the folder keeps its previous files") from None
    except KeyboardInterrupt:
        discard(out, manifest, stage, trash)
        raise Interrupted(True) from None
    except BaseException:
        discard(out, manifest, stage, trash)
        raise


def move_in(out: Path, journal: dict) -> None:
    stage, trash = out / journal["stage"], out / journal["trash"]
    old, new = journal["old"], journal["new"]
    ordered_old = (["report.json"] if "report.json" in old else []) + [r for r in old if r != "report.json"]
    for rel in ordered_old:
        if (out / rel).exists() or (out / rel).is_symlink():
            move(out / rel, trash / rel)
    for rel in [r for r in new if r != "report.json"] + (["report.json"] if "report.json" in new else []):
        move(stage / rel, out / rel)


def undo(out: Path, journal: dict, old: list[str]) -> bool:
    """Put the old set back (new files back into the stage, old files out of the trash); True if done."""
    stage, trash = out / journal["stage"], out / journal["trash"]
    try:
        for rel in journal["new"]:
            if not (stage / rel).exists() and (out / rel).exists():
                move(out / rel, stage / rel)
        for rel in journal["old"]:
            if (trash / rel).exists() or (trash / rel).is_symlink():
                move(trash / rel, out / rel)
        prune_empty(out, set(journal["new"]) - set(journal["old"]))    # folders the new set made
        write_manifest(out, {"files": old, "work": [stage.name, trash.name], "swap": None})
    except BaseException as exc:                   # leave the journal: the next run finishes the undo
        log.warning("%s: could not undo the swap (%r); the next run into this folder restores the previous set",
                    out, exc)
        return False
    try:
        finish(out, old, [stage, trash], None)
    except BaseException as exc:                   # the old set is back; the work folders go next run
        log.warning("%s: the previous set is back, but cleaning up failed (%r)", out, exc)
    return True


def discard(out: Path, manifest: dict, stage: Path, trash: Path) -> None:
    try:
        finish(out, manifest["files"], [stage, trash], None)
    except BaseException as exc:
        log.warning("%s: could not remove %s (%s)", out, stage.name, exc)


def finish(out: Path, files: list[str], work: list[Path], journal: dict | None) -> None:
    """Remove the work folders (only ever ours) and empty folders the old set left; manifest without work."""
    for w in work:
        shutil.rmtree(w, ignore_errors=True)
    if journal:
        prune_empty(out, set(journal["old"]) - set(journal["new"]))
    write_manifest(out, {"files": files, "work": [], "swap": None})


def prune_empty(out: Path, gone: set[str]) -> None:
    for rel in sorted(gone):
        d = (out / rel).parent
        while d != out:
            try:
                d.rmdir()                              # only when empty: never removes a user's file
            except OSError:
                break
            d = d.parent


def recover(out: Path) -> dict:
    """Undo a swap an earlier run left half done and remove its work folders; the clean manifest."""
    if not (out / MANIFEST).exists():
        return read_manifest(out)
    manifest = read_manifest(out)
    journal = manifest["swap"]
    if journal and all(isinstance(journal.get(k), str) and WORK_NAME.match(journal[k]) for k in ("stage", "trash")):
        old, new = safe_list(journal, "old"), safe_list(journal, "new")
        listed = safe_list(journal, "listed") if "listed" in journal else old
        log.warning("%s: an earlier run stopped while swapping its output in; restoring the set before it", out)
        if not undo(out, {"stage": journal["stage"], "trash": journal["trash"], "old": old, "new": new}, listed):
            raise SwapError(f"{out}: cannot restore the set an earlier run left half swapped; see the warning above",
                            kept_old=False)
        return read_manifest(out)
    stale = [out / w for w in manifest["work"] if (out / w).is_dir() and not (out / w).is_symlink()]
    if stale:
        log.info("%s: removing %s left by an earlier run", out, ", ".join(w.name for w in stale))
    manifest = dict(manifest, swap=None)
    finish(out, manifest["files"], stale, None)
    return read_manifest(out)


# --- files added after the swap (pictures, exports) -------------------------------------------------

def safe_list(journal: dict, key: str) -> list[str]:
    items = journal.get(key)
    return [r for r in items if safe_rel(r)] if isinstance(items, list) else []


# --- files added after the swap (pictures, exports) -------------------------------------------------

def add_files(out: Path, produce: Callable[[Path], list[Path]], what: str) -> list[Path]:
    """`place_files` under the folder's lock. A failure is a warning (the plan set is already written)."""
    try:
        with folder_lock(out):
            return place_files(out, produce)
    except (Exception, KeyboardInterrupt) as exc:     # noqa: BLE001 - a picture never fails the run
        print(f"warning: {what} not written ({exc!r}); the files written before them are complete", file=sys.stderr)
    return []


def place_files(out: Path, produce: Callable[[Path], list[Path]]) -> list[Path]:
    """Let `produce(folder)` write files into a staging folder, then move each in if its place is free
    or ours, and list it in the manifest (the caller holds the lock); the paths placed."""
    placed = []
    with stop.deferred():
        manifest = read_manifest(out)
        stage, _ = new_work(out)
        write_manifest(out, dict(manifest, work=manifest["work"] + [stage.name]))
        try:
            made = produce(stage)
            rels = [p.relative_to(stage).as_posix() for p in made]
            check_owned(out, rels, manifest)
            for rel in rels:
                move(stage / rel, out / rel)
                placed.append(out / rel)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            files = manifest["files"] + [p.relative_to(out).as_posix() for p in placed]
            write_manifest(out, {"files": files, "work": manifest["work"], "swap": None})
    return placed
