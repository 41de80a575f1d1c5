"""solver/postprocess.py on its own: the optimizer-side plan figures against the spec recomputation
(tests.helpers.recompute), on plans where percentiles, pad ratio and compile terms are told apart."""
import numpy as np
import pytest

from models.plan import BucketPlan
from models.requests import Requests
from solver.postprocess import plan_figures
from tests.helpers import recompute
from tests.test_verify_semantics import config


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
