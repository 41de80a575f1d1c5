"""Export a verified plan to the forms serving engines take, as they are.

Formats (each writes one file and returns how to apply it, with the settings the engine needs):
- `vllm-gaudi` (`vllm_gaudi_buckets.txt`): a `VLLM_BUCKETING_FROM_FILE` bucket file with prompt lines
  `(batch_size, query_length, 0)` and decode lines `(batch_size, 1, num_blocks)` (in file mode decode
  buckets come only from the file), and the settings without which lines are dropped or fail:
  `VLLM_PROMPT_BS_BUCKET_MAX`, `--max-num-batched-tokens`, `--max-model-len`, `--max-num-seqs`,
  `--block-size`, `VLLM_CONTIGUOUS_PA=false`.
- `neuron` (`nxd_neuron_config_overrides.json`): NxD Inference `NeuronConfig` overrides (not NxD's own
  `neuron_config.json`, a whole InferenceConfig): `enable_bucketing`, `context_encoding_buckets`,
  `token_generation_buckets`, `max_context_length`, `seq_len`, `batch_size`.
- `jetstream` (`jetstream_server_overrides.txt`): the MaxText config overrides the JetStream server honours
  (`max_prefill_predict_length`, one of its power-of-two lengths, and `max_target_length`); where the plan's
  shapes are not what the server runs, a warning says so.
- `maxtext-offline` (`maxtext_offline.py`): MaxText overrides plus `OfflineEngine(prefill_lengths=...)`.
- `json` (`shapes.json`): the plain sorted list of `seq_align` values.
- `csv` (`batch_plan.csv`): the batch plan, one row per request.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from models.config import Config
from models.engine import JETSTREAM_LENGTHS
from models.errors import InputError
from models.plan import BucketPlan, batch_id_strings
from models.requests import Requests
from solver.commands.output import open_folder, protected_paths, replace_set

log = logging.getLogger(__name__)

FORMATS = ("vllm-gaudi", "neuron", "jetstream", "maxtext-offline", "json", "csv")
FILE_NAMES = {"vllm-gaudi": "vllm_gaudi_buckets.txt", "neuron": "nxd_neuron_config_overrides.json",
              "jetstream": "jetstream_server_overrides.txt", "maxtext-offline": "maxtext_offline.py",
              "json": "shapes.json", "csv": "batch_plan.csv"}


@dataclass
class PlanShapes:
    """What every engine format needs from a plan."""

    seq_aligns: list[int]                 # compiled prompt shapes, ascending
    batch_max: dict[int, int]             # per shape: its largest batch
    gen_max: dict[int, int]               # per shape: the longest gen cap of its batches
    prompts: np.ndarray                   # every request's prompt_len (all buckets)
    planned: np.ndarray                   # every request's seq_align in the plan
    granularity: int

    @property
    def max_batch(self) -> int:
        return max(self.batch_max.values())

    @property
    def max_gen(self) -> int:
        return max(self.gen_max.values())

    def total(self, s: int) -> int:
        """seq_align + its longest gen, aligned up to the granularity."""
        return -(-(s + self.gen_max[s]) // self.granularity) * self.granularity


def plan_shapes(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan]) -> PlanShapes:
    batch_max: dict[int, int] = {}
    gen_max: dict[int, int] = {}
    prompts, planned = [], []
    for name, plan in plans.items():
        size = np.bincount(plan.batch_of, minlength=plan.num_batches)
        gmax = np.zeros(plan.num_batches, dtype=np.int64)
        np.maximum.at(gmax, plan.batch_of, requests[name].gen)
        for s, n, g in zip(plan.seq_align[size > 0].tolist(), size[size > 0].tolist(), gmax[size > 0].tolist()):
            batch_max[s] = max(batch_max.get(s, 0), n)
            gen_max[s] = max(gen_max.get(s, 0), g)
        prompts.append(requests[name].prompt)
        planned.append(plan.seq_align[plan.batch_of])
    return PlanShapes(sorted(batch_max), batch_max, gen_max, np.concatenate(prompts), np.concatenate(planned),
                      cfg.shapes.granularity)


def warned(note: str, warnings: list[str]) -> str:
    for w in warnings:
        log.warning("export: %s", w)
    return "\n  ".join([note] + [f"WARNING: {w}" for w in warnings])


# --- vllm-gaudi -----------------------------------------------------------------------------

def prompt_batch_sizes(largest: int) -> list[int]:
    """Powers of two below the plan's largest batch, and that batch."""
    return sorted({1 << i for i in range(largest.bit_length()) if 1 << i < largest} | {largest})


def vllm_lines(shapes: PlanShapes, block: int) -> tuple[list[tuple], list[tuple]]:
    """Prompt lines: every shape at one shared batch-size ladder. The engine scans its sorted buckets for
    the first one at or above (batch, query) in every dimension, so a ladder per shape could send a
    batch to another shape's line with a larger query; a shared ladder gives the next batch size up and,
    within it, the next query length up. Decode lines: per shape, its largest batch and the blocks of
    seq_align + its longest gen for each member."""
    ladder = prompt_batch_sizes(shapes.max_batch)
    prompt = [(b, s, 0) for b in ladder for s in shapes.seq_aligns]
    decode = [(shapes.batch_max[s], 1, shapes.batch_max[s] * -(-(s + shapes.gen_max[s]) // block))
              for s in shapes.seq_aligns]
    return prompt, sorted(set(decode))


def vllm_requirements(shapes: PlanShapes, prompt: list[tuple], block: int) -> dict[str, int | str]:
    return {"VLLM_PROMPT_BS_BUCKET_MAX": max(b for b, _, _ in prompt),
            "VLLM_CONTIGUOUS_PA": "false",
            "--block-size": block,
            "--max-num-batched-tokens": max(b * q for b, q, _ in prompt),
            "--max-model-len": max(s + shapes.gen_max[s] for s in shapes.seq_aligns),
            "--max-num-seqs": shapes.max_batch}


def vllm_gaudi(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    block = cfg.engine.kv_block_size or 128
    prompt, decode = vllm_lines(shapes, block)
    req = vllm_requirements(shapes, prompt, block)
    env = " ".join(f"{k}={v}" for k, v in req.items() if k.startswith("VLLM"))
    flags = " ".join(f"{k} {v}" for k, v in req.items() if k.startswith("--"))
    lines = ["# vLLM on Gaudi (vllm-project/vllm-gaudi plugin) bucket file from shapeplan.",
             "# Apply: export VLLM_BUCKETING_FROM_FILE=<this file>; prompt and decode buckets then come only from it.",
             "# Requirements (else lines are dropped at warm-up, or prefill batches > 1 fail):",
             f"#   export {env}",
             f"#   vllm serve MODEL {flags}",
             "# Contiguous PA off: decode num_blocks then counts the batch's KV blocks, as the decode lines do.",
             f"# prompt buckets (batch_size, query_length, 0): {len(prompt)}"]
    lines += [f"({b}, {q}, {k})" for b, q, k in prompt]
    lines += [f"# decode buckets (batch_size, 1, num_blocks), per shape its largest batch x "
              f"ceil((seq_align + longest gen) / {block}) blocks: {len(decode)}"]
    lines += [f"({b}, 1, {k})" for b, _, k in decode]
    warnings = [f"shape {s} is not a whole number of {block}-token KV blocks (plan with engine: vllm-gaudi)"
                for s in shapes.seq_aligns if s % block]
    note = (f"vLLM Gaudi: export VLLM_BUCKETING_FROM_FILE=<this file> {env}; vllm serve MODEL {flags} "
            "(the vllm-gaudi plugin, not the HabanaAI vllm-fork)")
    return "\n".join(lines) + "\n", warned(note, warnings)


# --- neuron ---------------------------------------------------------------------------------

def neuron_overrides(cfg: Config, shapes: PlanShapes) -> dict:
    ce = shapes.seq_aligns
    tg = sorted({shapes.total(s) for s in ce})
    return {"enable_bucketing": True, "context_encoding_buckets": ce, "token_generation_buckets": tg,
            "max_context_length": ce[-1], "seq_len": tg[-1], "batch_size": shapes.max_batch}


def neuron(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    conf = neuron_overrides(cfg, shapes)
    spill = int(((shapes.prompts >= shapes.planned) & (shapes.prompts != conf["max_context_length"])).sum())
    warnings = [f"{spill} requests have prompt_len equal to their planned bucket: NxD takes the next bucket "
                "(required_len < bucket); plan with engine: neuron"] if spill else []
    small = [s for s in shapes.seq_aligns if shapes.batch_max[s] < conf["batch_size"]]
    if small:
        warnings.append(f"NxD pads every batch to batch_size={conf['batch_size']}: shapes {small} have smaller "
                        "batches in the plan, which run padded")
    note = ("NxD Inference: NeuronConfig(**json.load(open(<this file>)), tp_degree=...), then "
            "InferenceConfig(neuron_config, load_config=...); NxD writes its own neuron_config.json when compiling")
    return json.dumps(conf, indent=2) + "\n", warned(note, warnings)


# --- jetstream and maxtext ------------------------------------------------------------------

def bos_tokens(cfg: Config) -> int:
    return int(cfg.engine.add_bos)


def server_lengths(top: int) -> list[int]:
    return [s for s in JETSTREAM_LENGTHS if s <= top]


def jetstream_settings(cfg: Config, shapes: PlanShapes) -> tuple[dict, list[str]]:
    top_need = max(shapes.seq_aligns[-1], int(shapes.prompts.max()) + bos_tokens(cfg))
    fits = [s for s in JETSTREAM_LENGTHS if s >= top_need]
    if not fits:
        raise InputError(f"jetstream: the plan needs prefill length {top_need}, above the server's longest "
                         f"{JETSTREAM_LENGTHS[-1]}")
    top = fits[0]
    settings = {"max_prefill_predict_length": top, "max_target_length": top + shapes.max_gen}
    warnings = []
    off = [s for s in shapes.seq_aligns if s not in JETSTREAM_LENGTHS]
    if off:
        warnings.append(f"the server cannot run shapes {off}: it pads to its power-of-two lengths only "
                        "(plan with engine: jetstream, or use maxtext-offline)")
    lengths = np.array(server_lengths(top))
    served = lengths[np.searchsorted(lengths, shapes.prompts + bos_tokens(cfg))]
    longer = int((served > shapes.planned).sum())
    if longer:
        warnings.append(f"{longer} requests are padded to a longer length than planned (prompt + BOS up to the "
                        "next power of two)")
    used = sorted(set(served.tolist()))
    if set(used) != set(shapes.seq_aligns):
        warnings.append(f"the server pads each prompt to the next of {lengths.tolist()}: this trace would use "
                        f"{used}, not the planned {shapes.seq_aligns}")
    return settings, warnings


def jetstream(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    settings, warnings = jetstream_settings(cfg, shapes)
    args = " ".join(f"{k}={v}" for k, v in settings.items())
    lines = ["# JetStream server (MaxText engine) settings from shapeplan: MaxText config overrides.",
             "# The server pads prompt + BOS to its power-of-two lengths up to max_prefill_predict_length;",
             "# it reads no custom length list (prefill_lengths is not a setting of the server or of MaxText).",
             f"# Apply: python -m maxtext.inference.maxengine.maxengine_server CONFIG.yml {args} ..."]
    lines += [f"# WARNING: {w}" for w in warnings]
    lines += [f"{k}={v}" for k, v in settings.items()]
    note = f"JetStream/MaxText server: pass {args} as MaxText config overrides"
    return "\n".join(lines) + "\n", warned(note, warnings)


def maxtext_settings(cfg: Config, shapes: PlanShapes) -> tuple[list[int], dict]:
    lengths = shapes.seq_aligns
    return lengths, {"max_prefill_predict_length": lengths[-1], "max_target_length": lengths[-1] + shapes.max_gen}


def maxtext_offline(cfg: Config, shapes: PlanShapes) -> tuple[str, str]:
    lengths, settings = maxtext_settings(cfg, shapes)
    overrides = [f"{k}={v}" for k, v in settings.items()]
    bos = "one BOS token added to each prompt" if cfg.engine.add_bos else "prompt lengths already count BOS"
    text = (f'"""MaxText OfflineEngine settings from shapeplan ({bos}).\n\n'
            "MaxText config overrides, on the command line or in pyconfig.initialize:\n"
            f"    {' '.join(overrides)}\n"
            '"""\n'
            f"MAXTEXT_OVERRIDES = {json.dumps(overrides)}\n\n\n"
            "def make_engine(config):\n"
            '    """config: pyconfig.initialize([argv0, "src/maxtext/configs/base.yml", *MAXTEXT_OVERRIDES, ...])"""\n'
            "    from maxtext.inference.offline_engine import OfflineEngine\n\n"
            f"    return OfflineEngine(config, prefill_lengths={json.dumps(lengths)})\n")
    warnings = []
    if cfg.engine.name != "maxtext-offline":
        need = int((shapes.prompts + bos_tokens(cfg) > shapes.planned).sum())
        if need:
            warnings.append(f"{need} requests need one more token than planned when the tokenizer adds BOS "
                            "(plan with engine: maxtext-offline)")
    note = f"MaxText: overrides {' '.join(overrides)}; OfflineEngine(config, prefill_lengths={lengths})"
    return text, warned(note, warnings)


# --- plain forms ----------------------------------------------------------------------------

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


WRITERS = {"vllm-gaudi": vllm_gaudi, "neuron": neuron, "jetstream": jetstream, "maxtext-offline": maxtext_offline,
           "json": json_list}


def export(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan], fmt: str,
           out_dir: Path) -> tuple[Path, str]:
    """Write one format into out_dir (atomically); returns the path and how to apply it."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} must be one of {', '.join(FORMATS)}")
    if fmt == "csv":
        text, note = plan_csv(cfg, requests, plans), "the batch plan, one row per request"
    else:
        text, note = WRITERS[fmt](cfg, plan_shapes(cfg, requests, plans))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE_NAMES[fmt]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, note


def write_exports(cfg: Config, requests: dict[str, Requests], plans: dict[str, BucketPlan], formats: list[str],
                  out_dir: Path, plan_dir: Path) -> list[tuple[str, Path, str]]:
    """Every format into `out_dir`, swapped in atomically beside the folder's other files (only files
    shapeplan wrote are replaced; never in a folder holding the plans, the config or a trace);
    (format, path, how to apply it) each."""
    notes = {}

    def produce(stage: Path) -> list[Path]:
        made = []
        for fmt in formats:
            path, notes[fmt] = export(cfg, requests, plans, fmt, stage)
            made.append(path)
        return made

    inputs = protected_paths(cfg) + sorted(plan_dir.glob("*.plan.jsonl"))
    with open_folder(out_dir, inputs, [FILE_NAMES[f] for f in formats]) as out:
        replace_set(out, {}, produce, keep_others=True)
    return [(fmt, out / FILE_NAMES[fmt], notes[fmt]) for fmt in formats]


def parse_formats(text: str) -> list[str]:
    formats = [f.strip() for f in text.split(",") if f.strip()]
    formats = list(FORMATS) if formats == ["all"] else formats
    for f in formats:
        if f not in FORMATS:
            raise InputError(f"--format {f!r} must be one of {', '.join(FORMATS)} (or all)")
    return formats
