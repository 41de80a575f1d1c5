"""Turning a request-to-shape assignment into concrete batches."""
from __future__ import annotations

import numpy as np

from models.config import Config
from models.plan import BucketPlan


def capacity(cfg: Config, seq_align, gen_cap):
    """Requests a batch of this shape and max gen may hold (max_batch_size and max_batch_tokens)."""
    cap = np.full(np.broadcast(np.asarray(seq_align), np.asarray(gen_cap)).shape, cfg.batching.max_batch_size,
                  dtype=np.int64)
    if cfg.batching.max_batch_tokens:
        cap = np.minimum(cap, cfg.batching.max_batch_tokens // (np.asarray(seq_align) + np.asarray(gen_cap)))
    return cap


def chunk_run(cfg: Config, seq_align: int, gens: np.ndarray) -> list[int]:
    """Sizes of chunks over gens sorted descending: each chunk as full as its first (largest) gen allows."""
    sizes, i, n = [], 0, len(gens)
    if not cfg.batching.max_batch_tokens:
        b = cfg.batching.max_batch_size
        return [b] * (n // b) + ([n % b] if n % b else [])
    while i < n:
        c = int(capacity(cfg, seq_align, gens[i]))
        if c < 1:
            raise ValueError(f"max_batch_tokens={cfg.batching.max_batch_tokens} cannot hold one request "
                             f"of gen_len {gens[i]} at seq_align {seq_align}")
        sizes.append(min(c, n - i))
        i += sizes[-1]
    return sizes


def arrival_sizes(cfg: Config, seq_align: int, gens: np.ndarray) -> list[int]:
    """Chunk sizes filling batches in arrival order (running max gen for the token limit)."""
    b = cfg.batching.max_batch_size
    n = len(gens)
    if not cfg.batching.max_batch_tokens:
        return [b] * (n // b) + ([n % b] if n % b else [])
    sizes, count, gmax = [], 0, 0
    for g in gens.tolist():
        new_max = max(gmax, g)
        if count and (count + 1 > b or (count + 1) * (seq_align + new_max) > cfg.batching.max_batch_tokens):
            sizes.append(count)
            count, new_max = 0, g
        count, gmax = count + 1, new_max
    sizes.append(count)
    return sizes


def plan_from_shape_choice(cfg: Config, gen: np.ndarray, shape_of: np.ndarray, order: str) -> BucketPlan:
    """Batches per shape: `arrival` order, or `gen` sorted (descending, tight caps)."""
    orders, sizes, shapes = [], [], []
    for s in np.unique(shape_of):
        idx = np.flatnonzero(shape_of == s)
        if order == "gen":
            idx = idx[np.argsort(-gen[idx], kind="stable")]
            chunk = chunk_run(cfg, int(s), gen[idx])
        else:
            chunk = arrival_sizes(cfg, int(s), gen[idx])
        orders.append(idx)
        sizes += chunk
        shapes += [int(s)] * len(chunk)
    return BucketPlan.from_chunks(len(gen), np.concatenate(orders), np.array(sizes), np.array(shapes))


def round_up(prompt: np.ndarray, shapes) -> np.ndarray:
    """Each prompt's smallest shape >= it (shapes sorted ascending, the last covering every prompt)."""
    shapes = np.asarray(sorted(shapes), dtype=np.int64)
    pos = np.searchsorted(shapes, prompt, side="left")
    if (pos >= len(shapes)).any():
        raise ValueError(f"shapes {shapes.tolist()} do not cover prompt_len {int(prompt.max())}")
    return shapes[pos]

