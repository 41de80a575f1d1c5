"""Read the bucket settings an engine runs today, as a list of prompt shapes (`--baseline-from`).

Formats (`FORMAT:FILE`):
- `vllm-gaudi`: a bucket file (`VLLM_BUCKETING_FROM_FILE` syntax: one `(bs, query, blocks)` tuple a line,
  each element an int, a list or `range(a, b[, step])`; prompt buckets are those with query != 1), or an
  env file (`[export ]VLLM_...=value` lines): `VLLM_BUCKETING_FROM_FILE` is followed; else the query
  range of `VLLM_BUCKETING_STRATEGY` `lin` (`VLLM_PROMPT_QUERY_BUCKET_{MIN,STEP,MAX}`, deprecated
  `VLLM_PROMPT_SEQ_BUCKET_*` as fallback) or `exp` (the default) is expanded as vllm-gaudi's
  docs/features/bucketing_mechanism.md describes.
- `neuron`: NxD Inference JSON: `context_encoding_buckets` at the top or under `neuron_config`
  (a full InferenceConfig), or a plain list; with `enable_bucketing` and no list, the automatic
  powers of two from 128 up to `max_context_length`; without bucketing, `[max_context_length]`.
- `jetstream`: `max_prefill_predict_length` (`key=value`, YAML or Python text): the server's
  powers of two 16..32768 up to it (it must be one of them).
- `maxtext-offline`: `prefill_lengths` (a list, or a comma string) and/or
  `max_prefill_predict_length`: without a list, OfflineEngine's automatic powers of two from 64.
- `json`: a plain JSON list of lengths.
"""
from __future__ import annotations

import ast
import json
import logging
import math
import re
from pathlib import Path

from models.config import Config
from models.engine import JETSTREAM_LENGTHS
from models.errors import InputError

log = logging.getLogger(__name__)

IMPORT_FORMATS = ("vllm-gaudi", "neuron", "jetstream", "maxtext-offline", "json")
_RANGE = re.compile(r"range\(\s*(-?\d+)\s*,\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?\)")


def parse_baseline_arg(text: str) -> tuple[str, Path]:
    """`FORMAT:FILE` -> (format, path)."""
    fmt, sep, path = text.partition(":")
    if not sep or not path:
        raise InputError(f"--baseline-from={text!r} must be FORMAT:FILE with FORMAT one of {', '.join(IMPORT_FORMATS)}")
    if fmt not in IMPORT_FORMATS:
        raise InputError(f"--baseline-from format={fmt!r} must be one of {', '.join(IMPORT_FORMATS)}")
    return fmt, Path(path)


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read bucket settings ({exc.strerror or exc})") from None


def positive_sorted(values, where: str) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"{where}: lengths={values!r} must be a list of integers")
    out = sorted(set(values))
    if not out or out[0] < 1:
        raise InputError(f"{where}: lengths={out!r} must be at least one positive integer")
    return out


def load_baselines(args: list[str], cfg: Config) -> dict[str, list[int]]:
    """Every `FORMAT:FILE` as a method name `current:<format>` (`current:<format>:<file stem>` on repeats)."""
    out: dict[str, list[int]] = {}
    for text in args:
        fmt, path = parse_baseline_arg(text)
        name = f"current:{fmt}"
        if name in out:
            name = f"{name}:{path.stem}"
        out[name] = read_baseline(fmt, path, cfg)
        log.info("%s: %d shapes from %s: %s", name, len(out[name]), path, out[name])
    return out


def read_baseline(fmt: str, path: Path, cfg: Config) -> list[int]:
    text = read_text(path)
    reader = {"vllm-gaudi": vllm_gaudi, "neuron": neuron, "jetstream": jetstream,
              "maxtext-offline": maxtext_offline, "json": json_list}[fmt]
    return positive_sorted(reader(text, path, cfg), str(path))


# --- vllm-gaudi -----------------------------------------------------------------------------

def code_lines(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            yield number, line


def expand(value, where: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"{where}: bucket element {value!r} must be an integer, a list or a range")
    return values


def bucket_tuples(text: str, path: Path) -> list[tuple[int, int, int]]:
    """Every bucket of a vllm-gaudi bucket file (the Cartesian product of each line's elements)."""
    out = []
    for number, line in code_lines(text):
        where = f"{path}:{number}"
        listed = _RANGE.sub(lambda m: repr(list(range(int(m[1]), int(m[2]), int(m[3] or 1)))), line)
        try:
            value = ast.literal_eval(listed)
        except (ValueError, SyntaxError):
            raise InputError(f"{where}: bucket line {line!r} must be a tuple (batch_size, query_length, "
                             "num_blocks)") from None
        if not isinstance(value, tuple) or len(value) != 3:
            raise InputError(f"{where}: bucket line {line!r} must be a tuple of 3 elements")
        bs, query, blocks = (expand(v, where) for v in value)
        out += [(b, q, k) for b in bs for q in query for k in blocks]
    return out


def env_values(text: str) -> dict[str, str]:
    """`[export ]KEY=VALUE` lines (quotes stripped)."""
    env = {}
    for _, line in code_lines(text):
        m = re.fullmatch(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)", line)
        if m:
            env[m[1]] = m[2].strip().strip("'\"")
    return env


def env_int(env: dict, key: str, default, path: Path):
    if key not in env:
        return default
    try:
        return int(env[key])
    except ValueError:
        raise InputError(f"{path}: {key}={env[key]!r} must be an integer") from None


def vllm_gaudi(text: str, path: Path, cfg: Config) -> list[int]:
    if any(line.startswith("(") for _, line in code_lines(text)):
        prompts = [q for _, q, _ in bucket_tuples(text, path) if q != 1]
        if not prompts:
            raise InputError(f"{path}: no prompt bucket (query_length != 1) in the bucket file")
        return prompts
    env = env_values(text)
    if env.get("VLLM_BUCKETING_FROM_FILE"):
        target = (path.parent / env["VLLM_BUCKETING_FROM_FILE"]).resolve()
        return vllm_gaudi(read_text(target), target, cfg)
    return query_range(env, path, cfg)


def strategy_of(env: dict, path: Path) -> str:
    old = env.get("VLLM_EXPONENTIAL_BUCKETING")
    if old is not None:                       # deprecated, still overrides VLLM_BUCKETING_STRATEGY
        return "exp" if old.lower() in ("1", "true", "yes", "on") else "lin"
    strategy = env.get("VLLM_BUCKETING_STRATEGY", "exp")
    if strategy not in ("exp", "lin"):
        raise InputError(f"{path}: VLLM_BUCKETING_STRATEGY={strategy!r} must be exp or lin to import (or give the "
                         "bucket file)")
    return strategy


def query_range(env: dict, path: Path, cfg: Config) -> list[int]:
    """Prompt query lengths the generated strategies warm up (from vllm-gaudi's bucketing docs)."""
    block = cfg.engine.kv_block_size or 128
    strategy = strategy_of(env, path)
    def setting(p, default):
        seq = env_int(env, f"VLLM_PROMPT_SEQ_BUCKET_{p}", default, path)        # deprecated fallback
        return env_int(env, f"VLLM_PROMPT_QUERY_BUCKET_{p}", seq, path)
    tokens = cfg.engine.max_num_batched_tokens
    if strategy == "lin":
        lo, step, hi = setting("MIN", block), setting("STEP", block), setting("MAX", tokens)
        if hi is None:
            raise InputError(f"{path}: VLLM_PROMPT_QUERY_BUCKET_MAX is not set: set it, or engine."
                             "max_num_batched_tokens (its default)")
        return linear_range(lo, step, hi, path)
    if tokens is None:
        raise InputError(f"{path}: the exponential strategy (VLLM_BUCKETING_STRATEGY=exp, the default) spans "
                         "block_size .. --max-num-batched-tokens: set engine.max_num_batched_tokens in the config")
    return exponential_range(1 if env_int(env, "VLLM_PROMPT_QUERY_BUCKET_MIN", None, path) == 1 else block,
                             block, tokens, math.ceil(math.log2(tokens)))


def linear_range(lo: int, step: int, hi: int, path: Path) -> list[int]:
    """min doubled while below step (the ramp-up), then every multiple of step up to max."""
    if not 0 <= lo <= hi or step < 1:
        raise InputError(f"{path}: VLLM_PROMPT_QUERY_BUCKET_MIN/STEP/MAX=({lo}, {step}, {hi}) must have "
                         "0 <= MIN <= MAX and STEP >= 1")
    ramp, v = [], max(lo, 1)
    while v < step and v <= hi:
        ramp.append(v)
        v *= 2
    return [x for x in ramp + list(range(step, hi + 1, step)) if x >= lo and x > 0]


def exponential_range(lo: int, step: int, hi: int, count: int) -> list[int]:
    """`count` exponentially spaced values from min to max, each rounded up to a multiple of step."""
    if lo in (0, 1):
        lo = step
    if count <= 1:
        return [hi]
    raw = [lo * (hi / lo) ** (i / (count - 1)) for i in range(count)]
    return sorted({min(math.ceil(x / step - 1e-9) * step, hi) for x in raw})


# --- neuron, jetstream, maxtext, json --------------------------------------------------------

def load_json(text: str, path: Path):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: JSON syntax error: {exc.msg}") from None


def neuron(text: str, path: Path, cfg: Config) -> list[int]:
    data = load_json(text, path)
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise InputError(f"{path}: must be a JSON object (NeuronConfig fields or an InferenceConfig) or a list")
    conf = data.get("neuron_config", data)
    if conf.get("context_encoding_buckets"):
        return conf["context_encoding_buckets"]
    top = conf.get("max_context_length", conf.get("seq_len", 128))
    if not conf.get("enable_bucketing"):
        return [top]
    # NxD's automatic buckets: powers of two from 128 below max_context_length, and max_context_length
    return [top] if top <= 128 else [2 ** i for i in range(7, round(math.log2(top)))] + [top]


def setting_of(text: str, key: str, path: Path):
    """`key=value`, `key: value`, `key: "1,2"` or `key=[...]` anywhere in the text (YAML, CLI overrides,
    Python); the integers, or None when the key is absent or not numeric (e.g. `auto`)."""
    m = re.search(rf"\b{key}\b[\"']?\s*[:=]\s*[\"']?(\[[^\]]*\]|\d+(?:\s*,\s*\d+)*)", text)
    if not m:
        return None
    try:
        value = ast.literal_eval(m[1]) if m[1].startswith("[") else [int(v) for v in m[1].split(",")]
    except (ValueError, SyntaxError):
        raise InputError(f"{path}: {key}={m[1]!r} must be an integer or a list of integers") from None
    return value if isinstance(value, list) else [value]


def jetstream(text: str, path: Path, cfg: Config) -> list[int]:
    top = setting_of(text, "max_prefill_predict_length", path)
    if top is None:
        raise InputError(f"{path}: max_prefill_predict_length is not set")
    if len(top) != 1 or top[0] not in JETSTREAM_LENGTHS:
        raise InputError(f"{path}: max_prefill_predict_length={top[0]!r} must be one of the JetStream server's "
                         f"prefill lengths {list(JETSTREAM_LENGTHS)}")
    return [s for s in JETSTREAM_LENGTHS if s <= top[0]]


def maxtext_offline(text: str, path: Path, cfg: Config) -> list[int]:
    lengths = setting_of(text, "prefill_lengths", path)
    if lengths:
        return lengths
    top = setting_of(text, "max_prefill_predict_length", path)
    if top is None:
        raise InputError(f"{path}: neither prefill_lengths nor max_prefill_predict_length is set")
    # OfflineEngine(prefill_lengths="auto"): powers of two from 64 up to the one covering the maximum
    return [2 ** i for i in range(6, max(6, (top[0] - 1).bit_length()) + 1)]


def json_list(text: str, path: Path, cfg: Config) -> list[int]:
    data = load_json(text, path)
    if not isinstance(data, list):
        raise InputError(f"{path}: must be a JSON list of lengths")
    return data
