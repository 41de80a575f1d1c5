"""The YAML config (spec section 3) as validated pydantic objects.

`load_config(path)` reads the file, resolves paths relative to it and returns one root
`Config`. Every problem raises `InputError` naming the file, the key path and, where
known, the line of the offending key.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, Optional, Union

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from models.engine import Engine
from models.errors import InputError
from models.files import read_text
from models.strict import Strict

METRICS = ("cost", "sequential_time_ms", "pad_tokens")
AUTO_POLISH_SHARE = 0.5   # solver.polish_share when null and no long run shortens it (solver/stages.py)
Metric = Literal["cost", "sequential_time_ms", "pad_tokens"]


def _non_negative(name: str, value):
    if value is not None and value < 0:
        raise ValueError(f"{name}={value!r} must be >= 0")
    return value


class Limits(Strict):
    """Per-bucket hard limits; every one is optional (null = no limit)."""

    p95_latency_ms: Optional[float] = Field(None, description="95th percentile latency (nearest rank) at most this")
    p99_latency_ms: Optional[float] = Field(None, description="99th percentile latency (nearest rank) at most this")
    max_latency_ms: Optional[float] = Field(None, description="latency of every request at most this")
    pad_ratio: Optional[float] = Field(None, description="pad tokens / real tokens at most this")
    pad_tokens: Optional[float] = Field(None, description="pad tokens at most this absolute count")
    cost: Optional[float] = Field(None, description="sum of this bucket's batch costs at most this")
    sequential_time_ms: Optional[float] = Field(None, description="sum of this bucket's batch latencies at most this")

    @model_validator(mode="after")
    def _check(self):
        for key, value in self.items():
            _non_negative(key, value)
        return self

    def items(self):
        """(name, value) of every limit that is set."""
        return [(k, v) for k, v in self.__dict__.items() if v is not None]


class Columns(Strict):
    """CSV column names mapped to the request fields."""

    prompt_len: str = Field("prompt_len", description="column holding the prompt length")
    gen_len: str = Field("gen_len", description="column holding the generated length")
    request_id: Optional[str] = Field(None, description="column holding the id (row numbers when absent)")


class Bucket(Strict):
    """One traffic bucket: a request file and its limits."""

    name: str = Field(..., min_length=1, description="bucket name, used in file names and batch ids")
    requests: Path = Field(..., description="JSONL or CSV request file, relative to the config")
    columns: Optional[Columns] = Field(None, description="CSV column mapping when not the default layouts")
    limits: Limits = Field(default_factory=Limits, description="hard limits of this bucket")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"name={value!r} must use only letters, digits, '_', '-', '.'")
        return value


class Shapes(Strict):
    """The compiled shape set."""

    max_unique: int = Field(8, ge=1, le=10_000, description="distinct shapes at most, across all buckets")
    granularity: int = Field(64, ge=1, le=2 ** 40, description="seq_align is a positive multiple of this")
    candidates: Union[Literal["auto"], list[int]] = Field("auto", description="'auto' or explicit seq_align values")
    heads_align: int = Field(32, ge=1, le=2 ** 31, description="heads alignment written into every shape")
    hidden_align: int = Field(4096, ge=1, le=2 ** 31, description="hidden alignment written into every shape")

    @model_validator(mode="after")
    def _check_candidates(self):
        if isinstance(self.candidates, list):
            if not self.candidates:
                raise ValueError("candidates=[] must list at least one seq_align")
            for value in self.candidates:
                if value < 1 or value % self.granularity:
                    raise ValueError(
                        f"candidates value {value!r} must be a positive multiple of granularity={self.granularity}")
        return self


class Batching(Strict):
    """Limits on one batch."""

    max_batch_size: int = Field(64, ge=1, le=1_000_000, description="requests per batch at most")
    max_batch_tokens: Optional[int] = Field(None, ge=1, le=2 ** 50, description="n * (seq_align + max gen_len) at most this")


Quadratic = tuple[float, float, float]


class CostModel(Strict):
    """Every phase is a quadratic c0 + c1*x + c2*x^2 (spec section 4)."""

    prefill_cost: Quadratic = Field((0, 4096, 1), description="per request, x = seq_align")
    decode_step_cost: Quadratic = Field((0, 4096, 1), description="per request per generated token, x = context")
    compile_cost: Quadratic = Field((5.0e8, 0, 1000), description="per distinct shape, x = seq_align")
    prefill_ms: Quadratic = Field((1.0, 0.05, 1.0e-5), description="batch prefill latency, x = seq_align")
    decode_step_ms: Quadratic = Field((15.0, 0.002, 0), description="batch decode step latency, x = context")
    batch_overhead_cost: float = Field(1.0e7, ge=0, description="cost added once per batch")
    batch_overhead_ms: float = Field(2.0, ge=0, description="latency added once per batch")
    # --- semantics (spec section 4b); the defaults are section 4 exactly ---
    prefill_length: Literal["shape", "request"] = Field(
        "shape", description="prefill of a member runs at seq_align (shape) or its own aligned prompt (request)")
    decode_context: Literal["shape", "batch"] = Field(
        "shape", description="decode starts from seq_align (shape) or the batch's longest aligned prompt (batch)")
    prompt_pad: Literal["shape", "request"] = Field(
        "shape", description="a member's prompt padding is seq_align - p (shape) or a(p) - p (request)")
    first_use_ms: float = Field(0.0, ge=0, description="warm-up latency of each shape's first use in a bucket's plan")
    compile_in_bucket_cost: bool = Field(
        False, description="a bucket's cost also carries the compile cost of every shape its plan uses")

    @model_validator(mode="after")
    def _check_quadratics(self):
        for name in ("prefill_cost", "decode_step_cost", "compile_cost", "prefill_ms", "decode_step_ms"):
            coeffs = getattr(self, name)
            if any(not math.isfinite(c) for c in coeffs):
                raise ValueError(f"{name}={list(coeffs)!r} must be finite numbers")
            if any(c < 0 for c in coeffs):
                raise ValueError(f"{name}={list(coeffs)!r} must have coefficients >= 0 (a cost may not be negative"
                                 " or fall as x grows)")
        for name in ("batch_overhead_cost", "batch_overhead_ms", "first_use_ms"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a finite number")
        return self

    @property
    def section4(self) -> bool:
        """True when every semantics key has its default (spec section 4 exactly)."""
        return (self.prefill_length, self.decode_context, self.prompt_pad, self.first_use_ms,
                self.compile_in_bucket_cost) == ("shape", "shape", "shape", 0.0, False)


class Objective(Strict):
    """What to minimize: one metric, or a weighted sum."""

    minimize: Metric = Field("cost", description="cost | sequential_time_ms | pad_tokens")
    weights: Optional[dict[Metric, float]] = Field(None, description="weighted sum of metrics; overrides minimize")

    @model_validator(mode="after")
    def _check_weights(self):
        if self.weights is not None:
            if not self.weights or all(w == 0 for w in self.weights.values()):
                raise ValueError("weights must give at least one metric a weight > 0")
            for key, value in self.weights.items():
                _non_negative(f"weights.{key}", value)
        return self

    def weight_map(self) -> dict[str, float]:
        """Metric -> weight, with `minimize` as weight 1 when no weights are given."""
        if self.weights:
            return {k: float(v) for k, v in self.weights.items() if v}
        return {self.minimize: 1.0}


class Solver(Strict):
    """CP-SAT settings."""

    time_limit_s: float = Field(60, gt=0, le=1.0e7, description="wall time for the CP-SAT search and the polish after it")
    workers: int = Field(0, ge=0, le=1024, description="search workers, 0 = all cores")
    seed: int = Field(0, ge=0, le=2 ** 31 - 1, description="random seed")
    gen_caps: int = Field(48, ge=2, le=2000, description="gen-length caps per bucket in the model (exact when the "
                                                         "trace has at most this many distinct gen lengths)")
    max_candidates: int = Field(64, ge=1, le=100_000, description="candidate shapes in the model at most (pruned beyond)")
    log_progress: bool = Field(True, description="stream incumbent, bound and gap while searching")
    polish_share: Optional[float] = Field(None, ge=0, lt=1, description="share of time_limit_s for the pair-MIP "
                                          "polish of the best plan's assignment after CP-SAT (0 = off; null = auto: "
                                          "0.5, or 0.3 from a 300 s time limit on when bound_share is auto, outside "
                                          "spec 4b context mode)")
    lns_share: Optional[float] = Field(None, ge=0, lt=1, description="share of time_limit_s for the large-"
                                       "neighbourhood search over shape sets before CP-SAT, whose best plan hints "
                                       "CP-SAT (0 = off; null = auto: 0.2 in spec 4b context mode, else none "
                                       "before CP-SAT); time the later stages leave goes back to it")
    bound_share: Optional[float] = Field(None, ge=0, lt=1, description="share of time_limit_s for the global "
                                         "pair-LP bound (column generation, gen caps rounded down) before the search "
                                         "(0 = off; null = auto: 0.2 in spec 4b context mode, else 0.4 from a "
                                         "30 s time limit on, 0.65 from 300 s on and off below, never leaving CP-SAT "
                                         "under 0.05; time it leaves goes to the later stages)")
    bound_caps: Optional[int] = Field(None, ge=2, le=2000, description="gen caps per bucket in the pair-LP bound "
                                      "(null = auto: every distinct gen up to 2000 in context mode, else 48; outside "
                                      "context mode a 12-cap LP runs first and the finer one only if it converged)")
    lns_sets: Optional[int] = Field(None, ge=1, le=10_000_000, description="shape sets the LNS evaluates at most "
                                    "over all its stages (null = as many as its time allows; under "
                                    "deterministic_time 40)")
    backend: str = Field("local", description="where the LNS evaluates neighbour shape sets: local (this process) "
                                              "or ray (one Ray task per bucket plan, on the cluster at address)")
    address: Optional[str] = Field(None, description="Ray cluster address (host:port) for backend ray; null = a "
                                                     "local Ray instance started for the run")
    deterministic_time: Optional[float] = Field(None, gt=0, le=1.0e7, description="a work limit instead of wall "
                                                "time, for runs that give the same plan on any machine and backend: "
                                                "CP-SAT's max_deterministic_time (time_limit_s no longer bounds it), "
                                                "the LNS for lns_sets sets before CP-SAT, no polish or pair-LP bound "
                                                "(null = wall time)")

    @field_validator("backend", mode="before")
    @classmethod
    def _backend(cls, value):
        if value not in ("local", "ray"):
            raise ValueError(f"backend={value!r} must be 'local' or 'ray'")
        return value

    @field_validator("deterministic_time", mode="before")
    @classmethod
    def _work_limit(cls, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise ValueError(f"deterministic_time={value!r} must be > 0 (seconds of CP-SAT deterministic time) "
                             "or null")
        return value

    @field_validator("address", mode="before")
    @classmethod
    def _address(cls, value):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"address={value!r} must be a Ray address such as 'host:6379' (or null)")
        return value

    @model_validator(mode="after")
    def _shares(self):
        polish = AUTO_POLISH_SHARE if self.polish_share is None else self.polish_share   # the largest auto share
        total = polish + (self.lns_share or 0.0) + (self.bound_share or 0.0)
        if total >= 1:
            raise ValueError(f"polish_share + lns_share + bound_share = {total:g} must be below 1 "
                             "(the rest is CP-SAT's)")
        return self

    @model_validator(mode="after")
    def _address_needs_ray(self):
        if self.address is not None and self.backend != "ray":
            raise ValueError(f"address={self.address!r} needs backend: ray (backend is {self.backend!r})")
        return self


class Output(Strict):
    """Where plans and the report go."""

    dir: Path = Field(Path("out"), description="output folder, relative to the config")


class Config(Strict):
    """The root config object."""

    name: str = Field("shapeplan", description="scenario name")
    buckets: list[Bucket] = Field(..., min_length=1, description="traffic buckets")
    shapes: Shapes = Field(default_factory=Shapes)
    batching: Batching = Field(default_factory=Batching)
    cost_model: CostModel = Field(default_factory=CostModel)
    objective: Objective = Field(default_factory=Objective)
    solver: Solver = Field(default_factory=Solver)
    output: Output = Field(default_factory=Output)
    engine: Engine = Field(default_factory=Engine, description="serving engine profile whose fit rule the plan "
                                                              "follows (models/engine.py): a name or a mapping")
    source: Optional[Path] = Field(None, description="the YAML file this was read from (set by load_config)")

    @model_validator(mode="after")
    def _unique_bucket_names(self):
        names = [b.name for b in self.buckets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"bucket names {dupes!r} must be unique")
        return self


# --- YAML reading ---------------------------------------------------------------------------

class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int, first: int):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line, self.first = key, line, first


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e7 / 1.0e7 / 5e-3 as floats (YAML 1.1 needs a dot and a sign) and refuses
    a key given twice in one mapping (plain YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = getattr(key_node, "value", None)
            if not isinstance(key, str) or key == "<<":
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(key, line, seen[key])
            seen[key] = line
        return super().construct_mapping(node, deep)


_FLOAT = re.compile(r"^[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
# keep plain integers as ints
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?\d+$"), list("-+0123456789"))


def _line_map(node, path=(), out=None) -> dict[tuple, int]:
    """Key path -> 1-based line, from the YAML node tree."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = path + (key_node.value,)
            out[key_path] = key_node.start_mark.line + 1
            _line_map(value_node, key_path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (i,)] = item.start_mark.line + 1
            _line_map(item, path + (i,), out)
    return out


def _read_yaml(path: Path) -> tuple[dict, dict]:
    text = read_text(path, "config", 64 << 20)
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except DuplicateKey as exc:
        raise InputError(f"{path}:{exc.line}: duplicate key {exc.key!r} (first at line {exc.first})") from None
    except RecursionError:
        raise InputError(f"{path}: config nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{path}{where}: YAML syntax error: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: config must be a YAML mapping with at least 'buckets'")
    return data, _line_map(node)


def _describe(error: dict, lines: dict, path: Path) -> str:
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # pydantic puts tuple/union member markers into loc; drop the ones not in the YAML
    key_path = []
    for part in loc:
        if tuple(key_path + [part]) in lines or not key_path or isinstance(part, int):
            key_path.append(part)
    msg = error["msg"].removeprefix("Value error, ")
    head = re.match(r"[A-Za-z_]+", msg)
    if head and tuple(key_path + [head.group(0)]) in lines:
        key_path.append(head.group(0))      # a model-level check naming one of its keys
    line = None
    for cut in range(len(key_path), 0, -1):
        line = lines.get(tuple(key_path[:cut]))
        if line:
            break
    dotted = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in key_path).replace(".[", "[")
    if error["type"] == "extra_forbidden":
        msg = f"unknown key {key_path[-1]!r}"
    where = f"{path}:{line}" if line else str(path)
    return f"{where}: {dotted or 'config'}: {msg}"


def load_config(path: str | Path, overrides: dict[str, object] | None = None) -> Config:
    """Read and validate a YAML config; `overrides` are dotted keys applied before validation.

    Paths inside become absolute (relative to the config file)."""
    path = Path(path)
    data, lines = _read_yaml(path)
    for key, value in (overrides or {}).items():
        set_by_path(data, key, value)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise InputError(_describe(exc.errors()[0], lines, path)) from None
    base = path.resolve().parent
    for i, bucket in enumerate(cfg.buckets):
        bucket.requests = _resolve(base / bucket.requests, path, lines, ("buckets", i, "requests"))
    cfg.output.dir = _resolve(base / cfg.output.dir, path, lines, ("output", "dir"))
    cfg.source = path.resolve()
    return cfg


def _resolve(target: Path, path: Path, lines: dict, key: tuple) -> Path:
    """An absolute path; a symlink loop is an error naming the key."""
    try:
        return target.resolve()
    except (OSError, RuntimeError) as exc:
        dotted = ".".join(f"[{k}]" if isinstance(k, int) else k for k in key).replace(".[", "[")
        raise InputError(f"{path}:{lines.get(key, 1)}: {dotted}={str(target)!r} cannot be resolved ({exc})") from None


def list_items(items: list, part: str) -> list:
    if part == "*":
        return items
    named = [x for x in items if isinstance(x, dict) and x.get("name") == part]
    return named or [items[int(part)]]


def set_by_path(data: dict, dotted: str, value) -> None:
    """Set `a.b.c` in a raw config dict; list items by index, by name or `*` (`buckets.*.limits.cost`,
    `buckets.bucket_1.limits.pad_ratio`)."""
    parts = dotted.split(".")
    targets = [data]
    try:
        for part in parts[:-1]:
            nxt = []
            for t in targets:
                if isinstance(t, list):
                    nxt.extend(list_items(t, part))
                else:
                    if not isinstance(t.get(part), (dict, list)):
                        t[part] = {}
                    nxt.append(t[part])
            targets = nxt
        for t in targets:
            if not isinstance(t, dict):
                raise TypeError
            t[parts[-1]] = value
    except (ValueError, IndexError, TypeError, AttributeError):
        raise InputError(f"--set {dotted}: no such key in the config") from None


def parse_value(text: str):
    """A --set value as YAML reads it (numbers, null, lists)."""
    return yaml.load(text, Loader=_Loader)
