"""The verifier's metrics under every combination of the five cost-semantics keys (spec 4b) equal a
term-by-term recomputation from the spec text (tests.helpers.recompute), on random plans."""
import itertools

import numpy as np
import pytest

from models.config import Config
from models.plan import BucketPlan
from models.requests import Requests
from solver import verify
from solver.verify import bucket_metrics, first_use_members
from solver.postprocess import plan_figures
from tests.helpers import q, recompute

KEYS = list(itertools.product(["shape", "request"], ["shape", "batch"], ["shape", "request"], [0.0, 1500.0],
                              [False, True]))
TASK = {"prefill_cost": [0, 4096, 2], "decode_step_cost": [0, 2048, 1], "compile_cost": [0, 8192, 500],
        "prefill_ms": [0, 6.144, 0.002], "decode_step_ms": [0, 2.4576, 0.0012], "batch_overhead_cost": 1.0e7,
        "batch_overhead_ms": 8}


def config(prefill, decode, pad, first_use, in_bucket) -> Config:
    cm = dict(TASK, prefill_length=prefill, decode_context=decode, prompt_pad=pad, first_use_ms=first_use,
              compile_in_bucket_cost=in_bucket)
    return Config.model_validate({"buckets": [{"name": "a", "requests": "x.jsonl"}], "cost_model": cm,
                                  "shapes": {"granularity": 64}})


def random_plan(rng, n=40):
    prompt = rng.integers(1, 700, n)
    gen = rng.integers(1, 90, n)
    req = Requests.from_arrays("a", prompt, gen)
    nb = int(rng.integers(1, 9))
    batch_of = rng.integers(0, nb, n)
    batch_of[:nb] = np.arange(nb)                        # every batch non-empty
    need = np.zeros(nb, dtype=np.int64)
    np.maximum.at(need, batch_of, prompt)
    seq = (-(-need // 64) + rng.integers(0, 3, nb)) * 64  # some batches padded above their longest prompt
    ids = np.array([f"b{rng.integers(0, 10**6)}-{b}" for b in range(nb)], dtype=object)
    order = rng.permutation(n)
    return req, BucketPlan(batch_of, seq, ids, order)


@pytest.mark.parametrize("keys", KEYS, ids=["-".join(map(str, k)) for k in KEYS])
def test_metrics_equal_spec_recomputation(keys):
    cfg = config(*keys)
    rng = np.random.default_rng(KEYS.index(keys))
    for _ in range(3):
        req, plan = random_plan(rng)
        m = bucket_metrics(cfg, req, plan)
        ref = recompute(cfg, req, plan.batch_of, plan.seq_align, list(plan.batch_ids), plan.order)
        for key in ("cost", "batch_cost", "sequential_time_ms", "p95_latency_ms", "p99_latency_ms",
                    "max_latency_ms", "pad_ratio"):
            assert getattr(m, key) == pytest.approx(ref[key], rel=1e-11), key
        assert m.pad_tokens == ref["pad_tokens"]
        assert m.num_batches == ref["num_batches"] and m.shapes == ref["shapes"]
        assert m.single_request_batches == ref["single_request_batches"]


def test_first_use_is_one_request_per_shape():
    """Exactly one request per distinct shape carries the warm-up: the first line of the shape's batch whose
    id sorts first as a string ('b-10' < 'b-9')."""
    req = Requests.from_arrays("a", [10, 10, 10, 100, 100], [5, 5, 5, 5, 5])
    plan = BucketPlan(np.array([0, 1, 1, 2, 2]), np.array([64, 64, 128]),
                      np.array(["b-9", "b-10", "b-11"], dtype=object), np.array([4, 3, 0, 2, 1]))
    assert sorted(first_use_members(req, plan).tolist()) == [2, 4]   # batch b-10's first line is request 2
    cfg = config("request", "batch", "request", 1500.0, False)
    base = config("request", "batch", "request", 0.0, False)
    lat = bucket_metrics(cfg, req, plan).max_latency_ms - bucket_metrics(base, req, plan).max_latency_ms
    assert lat == pytest.approx(1500.0)


def test_step_sums_agree_with_the_closed_form(monkeypatch):
    """The verifier adds decode steps one by one; its closed-form fallback (for astronomically long gens)
    gives the same numbers."""
    rng = np.random.default_rng(3)
    cfg = config("request", "batch", "request", 0.0, True)
    req, plan = random_plan(rng, 60)
    stepwise = bucket_metrics(cfg, req, plan)
    monkeypatch.setattr(verify, "STEP_SUM_MAX", 0)
    closed = bucket_metrics(cfg, req, plan)
    assert closed.cost == pytest.approx(stepwise.cost, rel=1e-12)
    assert closed.sequential_time_ms == pytest.approx(stepwise.sequential_time_ms, rel=1e-12)


def test_compile_in_bucket_cost_counts_own_shapes_only():
    req = Requests.from_arrays("a", [10, 100], [3, 3])
    plan = BucketPlan(np.array([0, 1]), np.array([64, 128]))
    on, off = config("shape", "shape", "shape", 0.0, True), config("shape", "shape", "shape", 0.0, False)
    extra = bucket_metrics(on, req, plan).cost - bucket_metrics(off, req, plan).cost
    assert extra == pytest.approx(q(TASK["compile_cost"], 64) + q(TASK["compile_cost"], 128))


@pytest.mark.parametrize("keys", KEYS[::3], ids=["-".join(map(str, k)) for k in KEYS[::3]])
def test_optimizer_figures_equal_the_spec_on_the_written_plan(keys):
    """The optimizer's own figures (closed forms, first use placed as the writer places it) equal the spec
    recomputation of the plan the writer produces."""
    from solver.postprocess import place_first_use, plan_figures

    cfg = config(*keys)
    rng = np.random.default_rng(100 + KEYS.index(keys))
    req, plan = random_plan(rng)
    plan = BucketPlan(plan.batch_of, plan.seq_align)
    written = place_first_use(cfg, req, plan)
    ref = recompute(cfg, req, written.batch_of, written.seq_align,
                    None if written.batch_ids is None else list(written.batch_ids), written.order)
    fig = plan_figures(cfg, req, plan)
    for key in ("cost", "batch_cost", "sequential_time_ms", "p95_latency_ms", "p99_latency_ms", "max_latency_ms"):
        assert getattr(fig, key) == pytest.approx(ref[key], rel=1e-9), key
    assert fig.pad_tokens == ref["pad_tokens"]


def test_small_chunks_and_closed_form_with_constant_terms(monkeypatch):
    """Decode sums split over many chunks, and the closed-form fallback with c0 != 0, equal the spec."""
    cm = dict(TASK, decode_step_cost=[3.0, 2048, 1], decode_step_ms=[0.5, 2.4576, 0.0012])
    cfg = Config.model_validate({"buckets": [{"name": "a", "requests": "x.jsonl"}], "cost_model": cm,
                                 "shapes": {"granularity": 64}})
    req, plan = random_plan(np.random.default_rng(11), 60)
    ref = recompute(cfg, req, plan.batch_of, plan.seq_align, list(plan.batch_ids), plan.order)
    for chunk, step_max in ((37, verify.STEP_SUM_MAX), (verify.CHUNK, 0)):
        monkeypatch.setattr(verify, "CHUNK", chunk)
        monkeypatch.setattr(verify, "STEP_SUM_MAX", step_max)
        m = bucket_metrics(cfg, req, plan)
        assert m.cost == pytest.approx(ref["cost"], rel=1e-11)
        assert m.sequential_time_ms == pytest.approx(ref["sequential_time_ms"], rel=1e-11)


# --- the optimizer-side figures (solver/postprocess.py plan_figures) where percentiles, pad ratio and compile
# --- terms are told apart (mutation survivors of solver/postprocess.py)


@pytest.mark.parametrize("in_bucket", [False, True])
def test_plan_figures_on_200_distinct_latencies(in_bucket):
    """One request per batch and 200 distinct gens: p95 is the 190th and p99 the 198th latency; pad ratio
    over the real tokens; the bucket cost with or without the compile cost of its own shapes."""
    cfg = config("shape", "shape", "shape", 0.0, in_bucket)
    rng = np.random.default_rng(5)
    req = Requests.from_arrays("a", rng.integers(1, 300, 200), np.arange(1, 201))
    plan = BucketPlan(np.arange(200), (-(-req.prompt // 64) * 64).astype(np.int64))
    fig, ref = plan_figures(cfg, req, plan), recompute(cfg, req, plan.batch_of, plan.seq_align)
    for key in ("cost", "batch_cost", "sequential_time_ms", "p95_latency_ms", "p99_latency_ms", "max_latency_ms",
                "pad_ratio"):
        assert getattr(fig, key) == pytest.approx(ref[key], rel=1e-13), key
    assert fig.pad_tokens == ref["pad_tokens"]


def test_plan_figures_of_a_single_request():
    cfg = config("request", "batch", "request", 0.0, False)
    req = Requests.from_arrays("a", [100], [7])
    plan = BucketPlan(np.array([0]), np.array([128]))
    fig, ref = plan_figures(cfg, req, plan), recompute(cfg, req, [0], [128])
    assert fig.p95_latency_ms == fig.p99_latency_ms == fig.max_latency_ms == pytest.approx(ref["max_latency_ms"])
    assert fig.pad_ratio == pytest.approx(ref["pad_ratio"], rel=1e-13)
