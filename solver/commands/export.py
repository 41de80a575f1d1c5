"""Export a verified plan to the forms serving engines take.

Formats (each writes one file and prints how to apply it):
- `vllm-gaudi`: a bucket file for vLLM on Gaudi (`VLLM_BUCKETING_FROM_FILE`) and the
  `VLLM_{PROMPT,DECODE}_{BS,SEQ}_BUCKET_{MIN,STEP,MAX}` range settings that cover it.
- `neuron`: AWS Neuron NxD Inference `NeuronConfig` bucketing arguments
  (`enable_bucketing`, `context_encoding_buckets`, `token_generation_buckets`, ...).
- `jetstream`: JetStream/MaxText `prefill_lengths` (sorted; a prompt is padded to the nearest
  length at or above it) with `max_prefill_predict_length` and `max_target_length`.
- `json`: the plain sorted list of `seq_align` values.
- `csv`: the batch plan, one row per request.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from models.config import Config
from models.errors import InputError
from models.plan import BucketPlan, batch_id_strings
from models.requests import Requests

FORMATS = ("vllm-gaudi", "neuron", "jetstream", "json", "csv")


@dataclass
class PlanShapes:
    """What every engine format needs from a plan."""

    seq_aligns: list[int]                       # compiled prompt shapes, ascending
    total_lengths: list[int]                    # per shape: seq_align + longest gen cap, aligned up
    max_batch: int                              # largest batch in the plan
    granularity: int


def plan_shapes(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan]) -> PlanShapes:
    gran = cfg.shapes.granularity
    longest: dict[int, int] = {}
    biggest = 1
    for name, plan in plans.items():
        size = np.bincount(plan.batch_of, minlength=plan.num_batches)
        gmax = np.zeros(plan.num_batches, dtype=np.int64)
        np.maximum.at(gmax, plan.batch_of, requests[name].gen)
        biggest = max(biggest, int(size.max()))
        for s, g in zip(plan.seq_align[size > 0].tolist(), gmax[size > 0].tolist()):
            longest[s] = max(longest.get(s, 0), g)
    seqs = sorted(longest)
    totals = sorted({-(-(s + longest[s]) // gran) * gran for s in seqs})
    return PlanShapes(seqs, totals, biggest, gran)


def vllm_gaudi(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    seqs, bs = shapes.seq_aligns, cfg.batching.max_batch_size
    step = reduce(math.gcd, seqs) if len(seqs) > 1 else seqs[0]
    lines = ["# vLLM Gaudi bucket file from shapeplan: one bucket a line, (batch_size, query_length, num_blocks)",
             "# prompt buckets: every planned seq_align at every batch size the plan may use"]
    lines += [f"({b}, {s}, 0)" for s in seqs for b in batch_sizes(bs)]
    env = {"VLLM_EXPONENTIAL_BUCKETING": "false",
           "VLLM_PROMPT_SEQ_BUCKET_MIN": seqs[0], "VLLM_PROMPT_SEQ_BUCKET_STEP": step,
           "VLLM_PROMPT_SEQ_BUCKET_MAX": seqs[-1],
           "VLLM_PROMPT_BS_BUCKET_MIN": 1, "VLLM_PROMPT_BS_BUCKET_STEP": min(32, bs), "VLLM_PROMPT_BS_BUCKET_MAX": bs,
           "VLLM_DECODE_BS_BUCKET_MIN": 1, "VLLM_DECODE_BS_BUCKET_STEP": min(32, bs), "VLLM_DECODE_BS_BUCKET_MAX": bs}
    lines += ["", "# Range settings covering the same shapes (a superset when the steps are uneven):"]
    lines += [f"# export {k}={v}" for k, v in env.items()]
    note = ("vLLM Gaudi: export VLLM_BUCKETING_FROM_FILE=<this file> to warm exactly these prompt buckets; "
            "or use the VLLM_*_BUCKET_* range settings in its comments (they may add shapes between steps).")
    return "\n".join(lines) + "\n", note


def batch_sizes(max_batch: int) -> list[int]:
    """Powers of two up to max_batch, and max_batch itself."""
    out = [1 << i for i in range(max_batch.bit_length()) if 1 << i <= max_batch]
    return sorted(set(out + [max_batch]))


def neuron(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    conf = {"enable_bucketing": True,
            "context_encoding_buckets": shapes.seq_aligns,
            "token_generation_buckets": shapes.total_lengths,
            "max_context_length": shapes.seq_aligns[-1],
            "seq_len": shapes.total_lengths[-1],
            "batch_size": cfg.batching.max_batch_size}
    note = ("AWS Neuron NxD Inference: NeuronConfig(**json.load(open(<this file>)), tp_degree=...) ; "
            "context encoding pads prompts to these buckets, token generation to total lengths.")
    return json.dumps(conf, indent=2) + "\n", note


def jetstream(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    conf = {"prefill_lengths": shapes.seq_aligns,
            "max_prefill_predict_length": shapes.seq_aligns[-1],
            "max_target_length": shapes.total_lengths[-1]}
    text = "# JetStream / MaxText settings from shapeplan\n" + yaml.safe_dump(conf, default_flow_style=None,
                                                                             sort_keys=False)
    note = ("JetStream/MaxText: pass prefill_lengths to the engine (token_utils.take_nearest_length pads to "
            "them) and set max_prefill_predict_length / max_target_length in the MaxText config.")
    return text, note


def json_list(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    return json.dumps(shapes.seq_aligns) + "\n", "a plain JSON list of seq_align values, ascending"


def plan_csv(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan]) -> str:
    frames = []
    for name, plan in plans.items():
        req = requests[name]
        bids = plan.batch_ids if plan.batch_ids is not None else batch_id_strings(name, plan.num_batches)
        gmax = np.zeros(plan.num_batches, dtype=np.int64)
        np.maximum.at(gmax, plan.batch_of, req.gen)
        frames.append(pd.DataFrame({
            "bucket": name, "request_id": req.ids, "batch_id": np.asarray(bids)[plan.batch_of],
            "seq_align": plan.seq_align[plan.batch_of], "heads_align": cfg.shapes.heads_align,
            "hidden_align": cfg.shapes.hidden_align, "prompt_len": req.prompt, "gen_len": req.gen,
            "batch_gen_cap": gmax[plan.batch_of]}))
    return pd.concat(frames).to_csv(index=False)


FILE_NAMES = {"vllm-gaudi": "vllm_gaudi_buckets.txt", "neuron": "neuron_config.json",
              "jetstream": "jetstream.yaml", "json": "shapes.json", "csv": "batch_plan.csv"}


def export(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan], fmt: str,
           out_dir: Path) -> tuple[Path, str]:
    """Write one format into out_dir (atomically); returns the path and how to apply it."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} must be one of {', '.join(FORMATS)}")
    if fmt == "csv":
        text, note = plan_csv(cfg, requests, plans), "the batch plan, one row per request"
    else:
        writer = {"vllm-gaudi": vllm_gaudi, "neuron": neuron, "jetstream": jetstream, "json": json_list}[fmt]
        text, note = writer(cfg, plan_shapes(cfg, requests, plans))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE_NAMES[fmt]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, note


def parse_formats(text: str) -> list[str]:
    formats = [f.strip() for f in text.split(",") if f.strip()]
    formats = list(FORMATS) if formats == ["all"] else formats
    for f in formats:
        if f not in FORMATS:
            raise InputError(f"--format {f!r} must be one of {', '.join(FORMATS)} (or all)")
    return formats
