"""Engine profiles: how a serving engine decides that a request fits a compiled shape.

The config key `engine:` (a plain name or a mapping) selects one profile. Each profile states
its fit rule as data (`Profile`) and `apply_engine(cfg, requests)` turns it into the plan's own
constraints before any method runs:

- `req.fit`, the least `seq_align` each request fits (every method and the model use it);
- `shapes.candidates`, when the engine only runs some lengths (JetStream's server);
- a check that `shapes.granularity` is a multiple of the engine's KV block size.

Rules and the engine file implementing each (paths in the engines' repositories):

- `generic`: `seq_align >= prompt_len` (spec section 1).
- `vllm-gaudi` (vllm-project/vllm-gaudi): a prompt batch takes the first bucket whose query
  length is `>=` its longest prompt (`vllm_gaudi/extension/bucketing/common.py`,
  `find_equal_or_closest_greater_config`); no token is added. The generated strategies step
  query buckets by the KV block size (`vllm_gaudi/extension/bucketing/linear.py`,
  `exponential.py`: query min and step = block_size), so shapes must be whole blocks.
- `neuron` (aws-neuron/neuronx-distributed-inference): a context-encoding bucket is taken when
  `required_len < bucket`, with equality allowed only for the largest bucket
  (`src/neuronx_distributed_inference/models/model_wrapper.py`, `_get_seq_bucket`). shapeplan
  uses `prompt_len + 1 <= seq_align` for every bucket: the same rule without the exception for
  the largest, so conservative and valid for the largest bucket too.
- `jetstream` (AI-Hypercomputer/JetStream): the server prepends BOS unless the request has it
  (`jetstream/core/orchestrator.py`, `_process_prefill_content`) and pads to the first of its
  built-in power-of-two lengths 16..32768 at or above the length, cut at
  `max_prefill_predict_length`, which must be one of them (`jetstream/engine/token_utils.py`,
  `DEFAULT_PREFILL_BUCKETS`, `pad_tokens`, `take_nearest_length`). So `fit = prompt_len + 1` and
  the candidates are those powers of two.
- `maxtext-offline` (AI-Hypercomputer/maxtext): `OfflineEngine(prefill_lengths=...)` pads each
  input to the first length `>=` its true length (`src/maxtext/inference/offline_engine.py`,
  `pad_data`); the tokenizer adds BOS (`encode(..., is_bos=True)`), so `fit = prompt_len + 1`.
  Any list of lengths is accepted.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from models.errors import InputError
from models.strict import Strict

if TYPE_CHECKING:
    from models.config import Config
    from models.requests import Requests

log = logging.getLogger(__name__)

EngineName = Literal["generic", "vllm-gaudi", "neuron", "jetstream", "maxtext-offline"]
ENGINES = ("generic", "vllm-gaudi", "neuron", "jetstream", "maxtext-offline")
JETSTREAM_LENGTHS = tuple(2 ** i for i in range(4, 16))          # 16 .. 32768, token_utils.DEFAULT_PREFILL_BUCKETS


class Engine(Strict):
    """The `engine:` config key: `engine: neuron` or `engine: {name: vllm-gaudi, block_size: 128}`. Its numbers
    are checked like every config number (plain integers of range, no booleans), unknown keys refused."""

    name: EngineName = Field("generic", description="engine profile: generic | vllm-gaudi | neuron | jetstream | "
                                                    "maxtext-offline")
    block_size: Optional[int] = Field(None, ge=1, le=2 ** 40,
                                      description="KV cache block size (vllm-gaudi --block-size, default 128; "
                                                  "neuron pa_block_size when paged attention is on): "
                                                  "shapes.granularity must be a multiple of it")
    add_bos: bool = Field(True, description="jetstream and maxtext-offline: a BOS token is added before the prompt "
                                            "(set false when the trace's prompt_len already counts it)")
    max_num_batched_tokens: Optional[int] = Field(None, ge=1, le=2 ** 50, description="vllm-gaudi: the server's "
                                                  "--max-num-batched-tokens, only for importing the default "
                                                  "exponential bucket settings (--baseline-from)")

    @model_validator(mode="before")
    @classmethod
    def _plain_name(cls, data):
        if isinstance(data, str):
            return {"name": data}
        if not isinstance(data, (dict, Engine)):
            raise ValueError(f"engine={data!r} must be an engine name ({', '.join(ENGINES)}) or a mapping with "
                             "its name and settings")
        return data

    @field_validator("add_bos", mode="before")
    @classmethod
    def _strict_bool(cls, value):
        if not isinstance(value, bool):
            raise ValueError(f"add_bos={value!r} must be true or false")
        return value

    @field_validator("block_size", "max_num_batched_tokens", mode="before")
    @classmethod
    def _whole(cls, value, info):
        if isinstance(value, float):
            raise ValueError(f"{info.field_name}={value!r} must be a whole number (an integer)")
        return value

    @property
    def kv_block_size(self) -> Optional[int]:
        """The block size shapes must be multiples of (vllm-gaudi defaults to 128), or None."""
        if self.block_size is None and self.name == "vllm-gaudi":
            return 128
        return self.block_size

    @property
    def profile(self) -> "Profile":
        return PROFILES[self.name]


@dataclass(frozen=True)
class Profile:
    """One engine's fit rule as data."""

    name: str
    extra_tokens: int            # tokens added to prompt_len before the fit (BOS, or 1 for a strict `<`)
    bos: bool                    # extra_tokens is a BOS token (dropped with add_bos: false)
    lengths: tuple | None        # the only prefill lengths the engine runs (None: any)
    source: str                  # engine repository and the file implementing the rule
    rule: str                    # the rule in words


PROFILES = {
    "generic": Profile("generic", 0, False, None, "spec section 1", "seq_align >= prompt_len"),
    "vllm-gaudi": Profile("vllm-gaudi", 0, False, None,
                          "vllm-project/vllm-gaudi vllm_gaudi/extension/bucketing/common.py",
                          "first bucket with query >= prompt_len; shapes are whole KV blocks"),
    "neuron": Profile("neuron", 1, False, None,
                      "aws-neuron/neuronx-distributed-inference src/neuronx_distributed_inference/models/"
                      "model_wrapper.py (_get_seq_bucket)",
                      "context bucket taken when prompt_len < bucket (equality only for the largest; shapeplan "
                      "uses prompt_len + 1 <= seq_align for all, conservative)"),
    "jetstream": Profile("jetstream", 1, True, JETSTREAM_LENGTHS,
                         "AI-Hypercomputer/JetStream jetstream/engine/token_utils.py (pad_tokens, "
                         "DEFAULT_PREFILL_BUCKETS), jetstream/core/orchestrator.py (BOS)",
                         "BOS + prompt_len <= seq_align, seq_align a power of two in 16..32768"),
    "maxtext-offline": Profile("maxtext-offline", 1, True, None,
                               "AI-Hypercomputer/maxtext src/maxtext/inference/offline_engine.py (pad_data)",
                               "BOS + prompt_len <= seq_align, any prefill_lengths list"),
}


def fit_of(engine: Engine, prompt: np.ndarray) -> np.ndarray:
    """The least seq_align each prompt fits under the engine's rule."""
    prof = engine.profile
    extra = 0 if (prof.bos and not engine.add_bos) else prof.extra_tokens
    return np.asarray(prompt, dtype=np.int64) + extra


def allowed_lengths(engine: Engine, granularity: int) -> list[int] | None:
    """The seq_align values the engine can run that are multiples of granularity (None: any)."""
    lengths = engine.profile.lengths
    return None if lengths is None else [s for s in lengths if s % granularity == 0]


def check_alignment(cfg: "Config") -> None:
    block = cfg.engine.kv_block_size
    if block and cfg.shapes.granularity % block:
        raise InputError(f"engine {cfg.engine.name}: shapes.granularity={cfg.shapes.granularity!r} must be a "
                         f"multiple of the KV block size {block} (engine.block_size)")


def restrict_candidates(cfg: "Config", top_fit: int) -> None:
    """Engines running only some lengths: shapes.candidates become (or must be within) those lengths."""
    lengths = allowed_lengths(cfg.engine, cfg.shapes.granularity)
    if lengths is None:
        return
    where = f"engine {cfg.engine.name}"
    if not lengths:
        raise InputError(f"{where}: shapes.granularity={cfg.shapes.granularity!r} must divide one of its prefill "
                         f"lengths {list(cfg.engine.profile.lengths)}")
    if isinstance(cfg.shapes.candidates, list):
        bad = sorted(set(cfg.shapes.candidates) - set(lengths))
        if bad:
            raise InputError(f"{where}: shapes.candidates value {bad[0]!r} must be one of its prefill lengths "
                             f"{lengths}")
        return
    if top_fit > lengths[-1]:
        raise InputError(f"{where}: a request needs {top_fit} tokens (prompt_len + BOS), more than its longest "
                         f"prefill length {lengths[-1]}")
    cfg.shapes.candidates = lengths[: next(i for i, s in enumerate(lengths) if s >= top_fit) + 1]
    log.info("engine %s: shapes.candidates = %s", cfg.engine.name, cfg.shapes.candidates)


def apply_engine(cfg: "Config", requests: dict[str, "Requests"]) -> None:
    """Put the engine's fit rule into the plan: req.fit, candidate lengths, block alignment."""
    check_alignment(cfg)
    for req in requests.values():
        req.fit = fit_of(cfg.engine, req.prompt)
    top = max((int(r.fit.max()) for r in requests.values() if len(r)), default=0)
    restrict_candidates(cfg, top)
    if isinstance(cfg.shapes.candidates, list) and top > max(cfg.shapes.candidates):
        raise InputError(f"engine {cfg.engine.name}: a request needs seq_align >= {top} ({cfg.engine.profile.rule}),"
                         f" more than the largest shapes.candidates value {max(cfg.shapes.candidates)}")
