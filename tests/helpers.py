"""Factory helpers: small instances, configs on disk, and an independent metric recomputation."""
from __future__ import annotations

import itertools
import json
import math
import threading
from contextlib import contextmanager
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


# --- independent recomputation of spec sections 4 and 4b, plain Python ------------------------------

def q(c, x):
    return c[0] + c[1] * x + c[2] * x * x


def Q(c, s, G):
    """Decode sum step by step (no closed form)."""
    return sum(q(c, s + t) for t in range(G))


def batch_numbers(cm, s, members):
    """(cost, latency) of one batch under spec section 4; members are (prompt, gen) pairs."""
    G = max(g for _, g in members)
    cost = len(members) * (q(cm.prefill_cost, s) + Q(cm.decode_step_cost, s, G)) + cm.batch_overhead_cost
    lat = q(cm.prefill_ms, s) + Q(cm.decode_step_ms, s, G) + cm.batch_overhead_ms
    return cost, lat


def spec_batch(cfg: Config, s: int, members):
    """Spec 4b, per member: (batch cost, [member latency], [member pad tokens]) of one batch of shape s;
    members are (prompt, gen) pairs; first-use latency not included."""
    cm, gran = cfg.cost_model, cfg.shapes.granularity
    a = [-(-p // gran) * gran for p, _ in members]
    G = max(g for _, g in members)
    C = s if cm.decode_context == "shape" else max(a)
    cost, lats, pads = cm.batch_overhead_cost, [], []
    for (p, g), ap in zip(members, a):
        L = s if cm.prefill_length == "shape" else ap
        cost += q(cm.prefill_cost, L) + Q(cm.decode_step_cost, C, G)
        lats.append(q(cm.prefill_ms, L) + Q(cm.decode_step_ms, C, G) + cm.batch_overhead_ms)
        pads.append(((s if cm.prompt_pad == "shape" else ap) - p) + (G - g))
    return cost, lats, pads


def recompute(cfg: Config, req: Requests, batch_of, seq_align, batch_ids=None, order=None) -> dict:
    """Metrics of one bucket plan from the spec text (sections 4 and 4b). `order`: the plan file's line
    order (request indices; default arrival order); `batch_ids`: per batch (default bucket-0000, ...)."""
    order = list(range(len(req))) if order is None else [int(r) for r in order]
    ids = batch_ids if batch_ids is not None else [f"{req.bucket}-{b:04d}" for b in range(len(seq_align))]
    batches = {}
    for r in order:                                   # members in plan-file order
        batches.setdefault(int(batch_of[r]), []).append(r)
    lat_of, batch_cost, pad, seq = {}, 0.0, 0, 0.0
    for b, members in batches.items():
        s = int(seq_align[b])
        cost, lats, pads = spec_batch(cfg, s, [(int(req.prompt[r]), int(req.gen[r])) for r in members])
        batch_cost += cost
        pad += sum(pads)
        lat_of.update(zip(members, lats))
    shapes = sorted({int(seq_align[b]) for b in batches})
    for s in shapes:                                  # first use: first line of the first batch (by id)
        first = min((b for b in batches if int(seq_align[b]) == s), key=lambda b: str(ids[b]))
        lat_of[batches[first][0]] += cfg.cost_model.first_use_ms
    seq = sum(max(lat_of[r] for r in members) for members in batches.values())
    compile_own = sum(q(cfg.cost_model.compile_cost, s) for s in shapes)
    cost = batch_cost + (compile_own if cfg.cost_model.compile_in_bucket_cost else 0.0)
    lats = sorted(lat_of.values())
    rank = lambda pct: lats[max(math.ceil(pct / 100 * len(lats)) - 1, 0)]
    real = int(sum(req.prompt) + sum(req.gen))
    return {"cost": cost, "batch_cost": batch_cost, "sequential_time_ms": seq, "pad_tokens": pad,
            "pad_ratio": pad / real, "p95_latency_ms": rank(95), "p99_latency_ms": rank(99),
            "max_latency_ms": lats[-1], "num_batches": len(batches), "shapes": shapes,
            "single_request_batches": sum(len(m) == 1 for m in batches.values())}


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


def checked(inst, method: str, plans):
    """Evaluate a plan set after checking it is valid and every bucket's metrics equal the spec recomputation
    of the plan as written (batch ids and line order included); the MethodResult."""
    import pytest

    from solver.pipeline import evaluate
    from solver.verify import verify_plans

    assert verify_plans(inst.cfg, inst.requests, plans) == []
    r = evaluate(inst, method, plans, 0.0)
    for name, m in r.metrics.items():
        p = r.plans[name]
        ids = None if p.batch_ids is None else list(p.batch_ids)
        ref = recompute(inst.cfg, inst.requests[name], p.batch_of, p.seq_align, ids, p.order)
        assert m.cost == pytest.approx(ref["cost"], rel=1e-12)
        assert m.sequential_time_ms == pytest.approx(ref["sequential_time_ms"], rel=1e-12)
        assert m.pad_tokens == ref["pad_tokens"]
    assert len(r.shapes) <= inst.cfg.shapes.max_unique
    return r


@contextmanager
def lock_held_elsewhere(folder: Path):
    """Another run (a thread here) holds the output folder's lock while the body runs."""
    from solver.commands import output
    held, release = threading.Event(), threading.Event()

    def holder():
        with output.folder_lock(folder):
            held.set()
            release.wait(10)
    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    try:
        yield
    finally:
        release.set()
        t.join()
