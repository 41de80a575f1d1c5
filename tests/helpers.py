"""Factory helpers: small instances, configs on disk, and an independent metric recomputation."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import yaml

from models.config import Config, load_config
from models.requests import Requests

ROOT = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows_from(prompts, gens, prefix="r"):
    return [{"request_id": f"{prefix}-{i}", "prompt_len": int(p), "gen_len": int(g)}
            for i, (p, g) in enumerate(zip(prompts, gens))]


def make_config(tmp: Path, buckets: dict[str, list[dict]], limits=None, **sections) -> Path:
    """Write request files and a config into tmp; returns the config path."""
    limits = limits or {}
    conf = {"name": "test", "buckets": [], "output": {"dir": "out"}, "solver": {"time_limit_s": 10, "workers": 2}}
    for name, rows in buckets.items():
        write_jsonl(tmp / f"{name}.jsonl", rows)
        conf["buckets"].append({"name": name, "requests": f"{name}.jsonl", "limits": limits.get(name, {})})
    for key, value in sections.items():
        conf.setdefault(key, {}).update(value)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path


def load(path: Path) -> Config:
    return load_config(path)


# --- independent recomputation of spec section 4, plain Python ----------------------------------

def q(c, x):
    return c[0] + c[1] * x + c[2] * x * x


def Q(c, s, G):
    return sum(q(c, s + t) for t in range(G))


def batch_numbers(cm, s, members):
    """(cost, latency) of one batch; members are (prompt, gen) pairs."""
    G = max(g for _, g in members)
    cost = len(members) * (q(cm.prefill_cost, s) + Q(cm.decode_step_cost, s, G)) + cm.batch_overhead_cost
    lat = q(cm.prefill_ms, s) + Q(cm.decode_step_ms, s, G) + cm.batch_overhead_ms
    return cost, lat


def recompute(cfg: Config, req: Requests, batch_of, seq_align) -> dict:
    """Metrics of one bucket plan from first principles."""
    batches = {}
    for r in range(len(req)):
        batches.setdefault(int(batch_of[r]), []).append(r)
    cost = seq = pad = 0
    lats = []
    for b, members in batches.items():
        s = int(seq_align[b])
        pairs = [(int(req.prompt[r]), int(req.gen[r])) for r in members]
        c, lat = batch_numbers(cfg.cost_model, s, pairs)
        G = max(g for _, g in pairs)
        cost += c
        seq += lat
        pad += sum(s - p + G - g for p, g in pairs)
        lats += [lat] * len(members)
    lats.sort()
    rank = lambda pct: lats[max(math.ceil(pct / 100 * len(lats)) - 1, 0)]
    return {"cost": cost, "sequential_time_ms": seq, "pad_tokens": pad, "p95_latency_ms": rank(95),
            "p99_latency_ms": rank(99), "num_batches": len(batches),
            "shapes": sorted({int(seq_align[b]) for b in batches})}


def set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def brute_force(cfg: Config, reqs: dict[str, Requests]) -> float:
    """Least cost over every partition and shape set (one bucket), meeting its limits; inf if none."""
    (name, req), = reqs.items()
    gran, cm, B = cfg.shapes.granularity, cfg.cost_model, cfg.batching.max_batch_size
    lim = dict(cfg.buckets[0].limits.items())
    aligned = sorted({-(-int(p) // gran) * gran for p in req.prompt})
    best = math.inf
    comp = lambda s: q(cm.compile_cost, s)
    items = list(range(len(req)))
    for k in range(1, cfg.shapes.max_unique + 1):
        for shapes in itertools.combinations(aligned, k):
            if shapes[-1] < aligned[-1]:
                continue
            for part in set_partitions(items):
                if any(len(b) > B for b in part):
                    continue
                total, seq, lats, pad, used = 0.0, 0.0, [], 0, set()
                for b in part:
                    pairs = [(int(req.prompt[r]), int(req.gen[r])) for r in b]
                    s = min(x for x in shapes if x >= max(p for p, _ in pairs))
                    used.add(s)
                    c, lat = batch_numbers(cm, s, pairs)
                    G = max(g for _, g in pairs)
                    if cfg.batching.max_batch_tokens and len(b) * (s + G) > cfg.batching.max_batch_tokens:
                        break
                    total += c
                    seq += lat
                    lats += [lat] * len(b)
                    pad += sum(s - p + G - g for p, g in pairs)
                else:
                    lats.sort()
                    rank = lambda pct: lats[max(math.ceil(pct / 100 * len(lats)) - 1, 0)]
                    metrics = {"sequential_time_ms": seq, "p95_latency_ms": rank(95), "p99_latency_ms": rank(99),
                               "max_latency_ms": lats[-1], "pad_tokens": pad, "cost": total,
                               "pad_ratio": pad / req.real_tokens}
                    if all(metrics[key] <= v * (1 + 1e-12) for key, v in lim.items()):
                        best = min(best, total + sum(comp(s) for s in used))
    return best
