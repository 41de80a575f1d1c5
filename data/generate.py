#!/usr/bin/env python
"""Reproducible synthetic traces shaped like a typical serving mix.

    python data/generate.py                      # the shipped buckets (800 requests each)
    python data/generate.py --n 1000000 --out data/generated/big.csv --kind bucket_1 --seed 7
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def bucket_1(n: int, rng: np.random.Generator):
    """Prompts 32-2048 (about two thirds under 700, long tail), gen 16-1024 (mean ~150, heavy tail)."""
    prompt = np.where(rng.random(n) < 0.68, rng.lognormal(np.log(280), 0.6, n), rng.uniform(700, 2048, n))
    gen = 16 + rng.pareto(2.0, n) * 150
    return np.clip(prompt, 32, 2048).astype(int), np.clip(gen, 16, 1024).astype(int)


def bucket_2(n: int, rng: np.random.Generator):
    """Short prompts 36-700, gen 16-1200 (mean ~60)."""
    prompt = rng.lognormal(np.log(160), 0.6, n)
    gen = 16 + rng.pareto(1.6, n) * 30
    return np.clip(prompt, 36, 700).astype(int), np.clip(gen, 16, 1200).astype(int)


def templated(prompt: np.ndarray, rng: np.random.Generator, share: float, gran: int = 64) -> np.ndarray:
    """A share of prompts just under a multiple of gran (templated requests cluster like that)."""
    snap = rng.random(len(prompt)) < share
    return np.where(snap, np.maximum(-(-prompt // gran) * gran - rng.integers(0, 6, len(prompt)), 1), prompt)


def task_1(n: int, rng: np.random.Generator):
    """Stand-in for the original task's bucket 1 (spec 4b): prompts 32-2038, median ~124, a long tail
    (95th percentile ~1800); gens 16-1021, median ~56."""
    long = rng.random(n) < 0.234
    prompt = np.where(long, rng.uniform(900, 2038, n), rng.lognormal(np.log(94), 0.7, n))
    gen = rng.lognormal(np.log(56), 1.35, n)
    return np.clip(templated(prompt.astype(int), rng, 0.12), 32, 2038), np.clip(gen, 16, 1021).astype(int)


def task_2(n: int, rng: np.random.Generator):
    """Stand-in for the original task's bucket 2 (spec 4b): prompts 36-677, median ~127; gens 16-1200,
    median ~20."""
    prompt = rng.lognormal(np.log(127), 0.75, n)
    gen = rng.lognormal(np.log(20), 1.2, n)
    return np.clip(templated(prompt.astype(int), rng, 0.08), 36, 677), np.clip(gen, 16, 1200).astype(int)


KINDS = {"bucket_1": bucket_1, "bucket_2": bucket_2, "task_1": task_1, "task_2": task_2}
SHIPPED = ("bucket_1", "bucket_2", "task_1", "task_2")


def write(path: Path, prompt, gen, prefix: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = [f"{prefix}-{i:07d}" for i in range(len(prompt))]
    if path.suffix == ".csv":
        lines = ["request_id,prompt_len,gen_len"] + [f"{r},{p},{g}" for r, p, g in zip(ids, prompt, gen)]
    else:
        lines = [json.dumps({"request_id": r, "prompt_len": int(p), "gen_len": int(g)})
                 for r, p, g in zip(ids, prompt, gen)]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=800)
    p.add_argument("--kind", choices=list(KINDS), default=None, help="one bucket kind (default: both shipped)")
    p.add_argument("--seed", type=int, default=2023)
    p.add_argument("--out", type=Path, default=None, help=".jsonl or .csv")
    args = p.parse_args()
    here = Path(__file__).resolve().parent
    kinds = [args.kind] if args.kind else list(SHIPPED)
    for kind in kinds:
        rng = np.random.default_rng(args.seed + SHIPPED.index(kind) % 2)
        prompt, gen = KINDS[kind](args.n, rng)
        out = args.out or here / f"requests_{kind}.jsonl"
        write(out, prompt, gen, kind.replace("bucket_", "b").replace("task_", "t"))
        print(f"{out}: {args.n} requests, prompt {prompt.min()}-{prompt.max()} (mean {prompt.mean():.0f}), "
              f"gen {gen.min()}-{gen.max()} (mean {gen.mean():.0f})")


if __name__ == "__main__":
    main()
