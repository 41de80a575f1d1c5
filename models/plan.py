"""Plans as data: which batch each request joins and each batch's seq_align (spec section 5)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from models.errors import InputError
from models.files import read_text


@dataclass
class BucketPlan:
    """One bucket's batches: request i is in batch `batch_of[i]`, of shape `seq_align[batch_of[i]]`."""

    batch_of: np.ndarray = field(metadata={"description": "batch index per request (arrival order)"})
    seq_align: np.ndarray = field(metadata={"description": "seq_align per batch"})
    batch_ids: np.ndarray | None = field(default=None, metadata={"description": "batch id strings, if read"})
    order: np.ndarray | None = field(default=None, metadata={
        "description": "plan-file line order (request indices); None = arrival order"})

    @property
    def num_batches(self) -> int:
        return len(self.seq_align)

    def batch_max(self, values: np.ndarray) -> np.ndarray:
        """Per batch, the largest of a per-request value (0 for an empty batch)."""
        out = np.zeros(self.num_batches, dtype=np.asarray(values).dtype)
        np.maximum.at(out, self.batch_of, values)
        return out

    @classmethod
    def from_chunks(cls, n: int, order: np.ndarray, sizes: np.ndarray, shapes: np.ndarray) -> "BucketPlan":
        """Batches as consecutive runs of `order` with the given sizes and shapes."""
        batch_of = np.full(n, -1, dtype=np.int64)
        batch_of[np.asarray(order, dtype=np.int64)] = np.repeat(np.arange(len(sizes)), sizes)
        if (batch_of < 0).any():
            raise AssertionError("chunks do not cover every request")
        return cls(batch_of, np.asarray(shapes, dtype=np.int64))


Plan = dict  # bucket name -> BucketPlan


def batch_id_strings(bucket: str, count: int) -> np.ndarray:
    return np.array([f"{bucket}-{i:04d}" for i in range(count)], dtype=object)


def plan_lines(bucket: str, ids: np.ndarray, plan: BucketPlan, heads: int, hidden: int) -> str:
    """The plan file text, one JSON object a line, built vectorized."""
    bids = plan.batch_ids if plan.batch_ids is not None else batch_id_strings(bucket, plan.num_batches)
    order = plan.order if plan.order is not None else np.arange(len(ids))
    id_json = pd.Series(np.asarray(ids, dtype=object)[order]).map(json.dumps).reset_index(drop=True)
    bid_json = pd.Series(bids).map(json.dumps).to_numpy()[plan.batch_of[order]]
    seq = pd.Series(plan.seq_align[plan.batch_of[order]]).astype(str)
    tail = f', "heads_align": {heads}, "hidden_align": {hidden}}}}}'
    text = '{"request_id": ' + id_json + ', "batch_id": ' + pd.Series(bid_json) + \
        ', "shape": {"seq_align": ' + seq + tail
    return "\n".join(text.tolist()) + "\n"


@dataclass
class PlanRows:
    """A plan file as read: one row per line, before any validity check."""

    request_id: np.ndarray
    batch_id: np.ndarray
    seq_align: np.ndarray
    heads_align: np.ndarray
    hidden_align: np.ndarray
    lines: np.ndarray


PLAN_KEYS = ("request_id", "batch_id", "shape")
SHAPE_KEYS = ("seq_align", "heads_align", "hidden_align")
MAX_SEQ_ALIGN = 2 ** 42          # above any aligned prompt (prompt_len <= 2**40, granularity <= 2**40)


def plan_record(path: Path, line: int, text: str) -> tuple:
    """One plan line, checked: exactly the spec's keys, string ids, plain integer shape fields."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{path}:{line}: malformed plan line ({getattr(exc, 'msg', 'nested too deeply')})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}:{line}: a plan line must be a JSON object, not {type(obj).__name__}")
    for key in obj:
        if key not in PLAN_KEYS:
            raise InputError(f"{path}:{line}: unknown field {key!r} (fields are {', '.join(PLAN_KEYS)})")
    for key in PLAN_KEYS:
        if key not in obj:
            raise InputError(f"{path}:{line}: missing field {key!r}")
    for key in ("request_id", "batch_id"):
        if not isinstance(obj[key], str) or not obj[key]:
            raise InputError(f"{path}:{line}: {key}={obj[key]!r} must be a non-empty string")
    shape = obj["shape"]
    if not isinstance(shape, dict):
        raise InputError(f"{path}:{line}: shape={shape!r} must be an object with {', '.join(SHAPE_KEYS)}")
    for key in shape:
        if key not in SHAPE_KEYS:
            raise InputError(f"{path}:{line}: unknown field shape.{key} (fields are {', '.join(SHAPE_KEYS)})")
    if "seq_align" not in shape:
        raise InputError(f"{path}:{line}: missing field shape.seq_align")
    for key in SHAPE_KEYS:
        value = shape.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEQ_ALIGN:
            raise InputError(f"{path}:{line}: shape.{key}={value!r} must be an integer between 0 and 2**42")
    return obj["request_id"], obj["batch_id"], shape["seq_align"], shape.get("heads_align"), shape.get("hidden_align")


def read_plan_file(path: Path) -> PlanRows:
    """Parse a plan JSONL; the first malformed line raises InputError naming the line and the field."""
    text = read_text(path, "plan file")
    all_lines = text.split("\n")
    keep = [i for i, line in enumerate(all_lines) if line.strip()]
    lines = np.asarray(keep, dtype=np.int64) + 1
    if not keep:
        return PlanRows(*(np.array([], dtype=object) for _ in range(5)), lines)
    records = [plan_record(path, i + 1, all_lines[i]) for i in keep]
    cols = list(zip(*records))
    return PlanRows(*(np.array(c, dtype=object) for c in cols), lines)
