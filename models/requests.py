"""Request traces (spec section 2): JSONL or CSV in, validated numpy arrays out.

Every bad row raises `InputError` naming the file, the 1-based line and the field.
Loading is vectorized (pandas), so a million-row trace loads in seconds.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from models.errors import InputError
from models.files import read_text

INT64_MAX = 2 ** 63 - 1
MAX_TOKENS = 2 ** 40            # per prompt or gen: sums over a million requests stay within int64

FIELDS = ("request_id", "prompt_len", "gen_len")
AZURE_COLUMNS = {"prompt_len": "ContextTokens", "gen_len": "GeneratedTokens", "request_id": None}


@dataclass
class Requests:
    """One bucket's requests in arrival (file) order."""

    bucket: str = field(metadata={"description": "bucket name"})
    ids: np.ndarray = field(metadata={"description": "request ids (str, unique)"})
    prompt: np.ndarray = field(metadata={"description": "prompt lengths (int64 >= 1)"})
    gen: np.ndarray = field(metadata={"description": "generated lengths (int64 >= 1)"})
    lines: np.ndarray = field(metadata={"description": "1-based line of each request in its file"})
    path: Optional[Path] = field(default=None, metadata={"description": "source file"})
    fit: Optional[np.ndarray] = field(default=None, metadata={
        "description": "least seq_align each request fits (default: its prompt_len; an engine's fit rule may "
                       "raise it, e.g. +1 for a BOS token); set in __post_init__"})

    def __post_init__(self):
        if self.fit is None:
            self.fit = self.prompt

    def __len__(self) -> int:
        return len(self.prompt)

    @property
    def real_tokens(self) -> int:
        return int(self.prompt.sum() + self.gen.sum())

    @classmethod
    def from_arrays(cls, bucket: str, prompt, gen, ids=None) -> "Requests":
        """Build from plain sequences (tests, the Python API); ids default to r-000000..."""
        prompt = np.asarray(prompt, dtype=np.int64)
        gen = np.asarray(gen, dtype=np.int64)
        if ids is None:
            ids = np.array([f"r-{i:06d}" for i in range(len(prompt))], dtype=object)
        return cls(bucket, np.asarray(ids, dtype=object), prompt, gen, np.arange(1, len(prompt) + 1))


def load_requests(path: str | Path, bucket: str = "bucket", columns=None) -> Requests:
    """Load a JSONL or CSV trace; `columns` maps fields to CSV column names."""
    path = Path(path)
    text = read_text(path, "request file")
    if not text.strip():
        raise InputError(f"{path}: no requests (the file is empty)")
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{"):
        frame, lines = _read_jsonl(path, text)
    else:
        frame, lines = _read_csv(path, text, columns)
    return _validate(path, bucket, frame, lines)


def _read_jsonl(path: Path, text: str) -> tuple[pd.DataFrame, np.ndarray]:
    all_lines = text.split("\n")
    keep = [i for i, line in enumerate(all_lines) if line.strip()]
    body = "\n".join(all_lines[i] for i in keep)
    lines = np.asarray(keep, dtype=np.int64) + 1
    try:
        frame = pd.read_json(io.StringIO(body), lines=True, dtype=False)
    except (ValueError, TypeError, OverflowError, RecursionError):
        _find_bad_json(path, all_lines)
        for name in FIELDS[1:]:
            _find_bad_field(path, all_lines, name)
        raise InputError(f"{path}: malformed JSONL") from None
    if len(frame) != len(lines) or any(not isinstance(c, str) for c in frame.columns):
        _find_bad_json(path, all_lines)
        raise InputError(f"{path}: malformed JSONL")
    extra = [c for c in frame.columns if c not in FIELDS]
    if extra:
        row = int(np.flatnonzero(frame[extra[0]].notna().to_numpy())[0])
        raise InputError(f"{path}:{lines[row]}: unknown field {extra[0]!r} (fields are {', '.join(FIELDS)})")
    for name in FIELDS:
        if name not in frame.columns or frame[name].isna().any() or \
                (name != "request_id" and frame[name].dtype.kind != "i"):
            _find_bad_field(path, all_lines, name)
            raise InputError(f"{path}: field {name!r} could not be read as {'text' if name == 'request_id' else 'integers'}")
    return frame, lines


def _line_object(path: Path, number: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{number}: malformed JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(f"{path}:{number}: malformed JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}:{number}: each line must be a JSON object, not {type(obj).__name__}")
    return obj


def _find_bad_field(path: Path, all_lines: list[str], name: str) -> None:
    """Error path only: the first line whose `name` is missing, not an integer or out of int64."""
    for number, line in enumerate(all_lines, start=1):
        if not line.strip():
            continue
        obj = _line_object(path, number, line)
        if name not in obj or obj[name] is None:
            raise InputError(f"{path}:{number}: missing field {name!r}")
        value = obj[name]
        if name != "request_id" and (not isinstance(value, int) or isinstance(value, bool)):
            raise InputError(f"{path}:{number}: field {name!r} {value!r} is not an integer")
        if name != "request_id" and not -INT64_MAX <= value <= INT64_MAX:
            raise InputError(f"{path}:{number}: field {name!r}={value} is out of range (at most 2**63-1)")


def _find_bad_json(path: Path, all_lines: list[str]) -> None:
    for number, line in enumerate(all_lines, start=1):
        if line.strip():
            _line_object(path, number, line)


def _csv_columns(path: Path, header: list[str], columns) -> dict[str, Optional[str]]:
    if columns is not None:
        mapping = {"prompt_len": columns.prompt_len, "gen_len": columns.gen_len, "request_id": columns.request_id}
    elif all(c in header for c in AZURE_COLUMNS.values() if c):
        mapping = dict(AZURE_COLUMNS)
    elif "prompt_len" in header and "gen_len" in header:
        mapping = {f: (f if f in header else None) for f in FIELDS}
    else:
        raise InputError(
            f"{path}:1: unknown CSV layout (columns {header}); expected prompt_len,gen_len[,request_id], "
            "the Azure layout TIMESTAMP,ContextTokens,GeneratedTokens, or a 'columns:' mapping in the config")
    for name, column in mapping.items():
        if column is not None and column not in header:
            raise InputError(f"{path}:1: column {column!r} for {name} not in the header {header}")
    return mapping


def _read_csv(path: Path, text: str, columns) -> tuple[pd.DataFrame, np.ndarray]:
    try:
        table = pd.read_csv(io.StringIO(text), header=None, dtype=str, keep_default_na=False,
                            skip_blank_lines=False)
    except pd.errors.ParserError as exc:
        raise InputError(f"{path}: malformed CSV ({str(exc).strip()})") from None
    header = [str(c).strip() for c in table.iloc[0]]
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise InputError(f"{path}:1: duplicate column name {dupes[0]!r} in the header {header}")
    table = table.iloc[1:].reset_index(drop=True)
    table.columns = header
    mapping = _csv_columns(path, header, columns)
    blank = (table == "").all(axis=1).to_numpy()
    table = table[~blank]
    lines = np.flatnonzero(~blank).astype(np.int64) + 2
    frame = pd.DataFrame({name: table[col].str.strip() for name, col in mapping.items() if col is not None})
    if len(frame) == 0:
        raise InputError(f"{path}: no requests (only a header)")
    if mapping["request_id"] is None:
        frame["request_id"] = pd.Series(lines - 1).map("r-{:06d}".format).to_numpy()
    for name in ("prompt_len", "gen_len"):
        bad = ~frame[name].str.fullmatch(r"\+?\d+").to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = frame[name].iloc[row]
            what = "missing" if value == "" else f"{value!r} is not an integer"
            raise InputError(f"{path}:{lines[row]}: field {name!r} {what}")
        digits = frame[name].str.lstrip("+").str.lstrip("0")
        big = np.flatnonzero((digits.str.len() > 19) | ((digits.str.len() == 19) & (digits > str(INT64_MAX))))
        if len(big):
            value = frame[name].iloc[int(big[0])]
            raise InputError(f"{path}:{lines[big[0]]}: field {name!r}={value} is out of range (at most 2**63-1)")
        frame[name] = frame[name].astype(np.int64)
    return frame, lines


def _int_column(path: Path, frame: pd.DataFrame, lines: np.ndarray, name: str) -> np.ndarray:
    col = frame[name]
    if col.dtype.kind == "i":
        return col.to_numpy(dtype=np.int64)
    bad = ~col.map(lambda v: isinstance(v, int) and not isinstance(v, bool)).to_numpy()
    row = int(np.flatnonzero(bad)[0])
    value = col.iloc[row]
    what = "missing" if value is None or (isinstance(value, float) and np.isnan(value)) else \
        f"{value!r} is not an integer"
    raise InputError(f"{path}:{lines[row]}: field {name!r} {what}")


def _validate(path: Path, bucket: str, frame: pd.DataFrame, lines: np.ndarray) -> Requests:
    prompt = _int_column(path, frame, lines, "prompt_len")
    gen = _int_column(path, frame, lines, "gen_len")
    for name, values in (("prompt_len", prompt), ("gen_len", gen)):
        bad = np.flatnonzero(values < 1)
        if len(bad):
            raise InputError(f"{path}:{lines[bad[0]]}: field {name!r}={int(values[bad[0]])} must be >= 1")
        bad = np.flatnonzero(values > MAX_TOKENS)
        if len(bad):
            raise InputError(f"{path}:{lines[bad[0]]}: field {name!r}={int(values[bad[0]])} is out of range "
                             f"(at most 2**40 = {MAX_TOKENS})")
    ids = frame["request_id"]
    good = ids.map(lambda v: isinstance(v, str) and v.strip() != "").to_numpy()
    if not good.all():
        row = int(np.flatnonzero(~good)[0])
        raise InputError(f"{path}:{lines[row]}: field 'request_id'={ids.iloc[row]!r} must be a non-empty string")
    dup = ids.duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        first = int(np.flatnonzero((ids == ids.iloc[row]).to_numpy())[0])
        raise InputError(f"{path}:{lines[row]}: field 'request_id'={ids.iloc[row]!r} duplicates line {lines[first]}")
    return Requests(bucket, ids.to_numpy(dtype=object), prompt, gen, lines, path)
