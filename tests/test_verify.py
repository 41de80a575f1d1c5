import numpy as np
import pytest

from models.instance import Instance
from models.plan import BucketPlan
from models.requests import Requests
from solver.verify import bucket_metrics, limit_excess, plan_objective, rank, verify_dir, verify_plans
from tests.helpers import load, make_config, q, recompute, rows_from


@pytest.fixture
def small(tmp_path):
    prompts, gens = [40, 100, 130, 60, 250], [10, 12, 30, 10, 5]
    path = make_config(tmp_path, {"a": rows_from(prompts, gens)}, shapes={"max_unique": 2, "granularity": 64},
                       batching={"max_batch_size": 3})
    cfg = load(path)
    req = Requests.from_arrays("a", prompts, gens, [f"r-{i}" for i in range(5)])
    return cfg, req


def test_metrics_match_independent_recomputation(small):
    cfg, req = small
    plan = BucketPlan(np.array([0, 0, 1, 0, 1]), np.array([128, 256]))
    m = bucket_metrics(cfg, req, plan)
    ref = recompute(cfg, req, plan.batch_of, plan.seq_align)
    assert m.cost == pytest.approx(ref["cost"], rel=1e-12)
    assert m.sequential_time_ms == pytest.approx(ref["sequential_time_ms"], rel=1e-12)
    assert m.pad_tokens == ref["pad_tokens"] and m.num_batches == 2 and m.shapes == [128, 256]
    assert m.p95_latency_ms == pytest.approx(ref["p95_latency_ms"])


@pytest.mark.parametrize("batch_of,seq,what", [
    ([0, 0, 0, 0, 1], [256, 256], "max_batch_size"),
    ([0, 0, 1, 0, 1], [128, 200], "multiple of 64"),
    ([0, 0, 1, 0, 1], [64, 256], "does not fit"),
    ([0, 1, 2, 0, 2], [64, 128, 256], "max_unique"),
])
def test_in_memory_violations(small, batch_of, seq, what):
    cfg, req = small
    errors = verify_plans(cfg, {"a": req}, {"a": BucketPlan(np.array(batch_of), np.array(seq))})
    assert any(what in e for e in errors)


GOOD = ['{"request_id": "r-%d", "batch_id": "a-%d", "shape": {"seq_align": %d, "heads_align": 32, '
        '"hidden_align": 4096}}' % (r, b, s) for r, b, s in [(0, 0, 128), (1, 0, 128), (2, 1, 256), (3, 0, 128),
                                                              (4, 1, 256)]]


@pytest.mark.parametrize("edit,what", [
    (lambda ls: ls[:-1], "missing"),
    (lambda ls: ls + [ls[0]], "appears again"),
    (lambda ls: ls + [ls[0].replace("r-0", "zz")], "unknown request_id"),
    (lambda ls: [ls[0].replace('"seq_align": 128', '"seq_align": 256')] + ls[1:], "one shape per batch"),
    (lambda ls: [l.replace("256", "192") for l in ls], "does not fit"),
    (lambda ls: [ls[0].replace("a-0", "a-9")] + ls[1:] + [], None),
    (lambda ls: [ls[0][:20]] + ls[1:], "malformed"),
])
def test_file_violations(small, tmp_path, edit, what):
    cfg, req = small
    d = tmp_path / "plans"
    d.mkdir()
    (d / "a.plan.jsonl").write_text("\n".join(edit(list(GOOD))) + "\n")
    if what == "malformed":
        from models.errors import InputError
        with pytest.raises(InputError, match="malformed"):
            verify_dir(cfg, {"a": req}, d)
        return
    plans, errors = verify_dir(cfg, {"a": req}, d)
    if what is None:
        assert errors == [] and plans["a"].num_batches == 3
    else:
        assert any(what in e for e in errors), errors


def test_good_file_is_valid(small, tmp_path):
    cfg, req = small
    d = tmp_path / "plans"
    d.mkdir()
    (d / "a.plan.jsonl").write_text("\n".join(GOOD) + "\n")
    plans, errors = verify_dir(cfg, {"a": req}, d)
    assert errors == []
    assert recompute(cfg, req, plans["a"].batch_of, plans["a"].seq_align)["num_batches"] == 2


def test_limit_excess_rank_and_objective(small):
    """Limit excess is relative and only for broken limits; ranking puts plans meeting limits first."""
    cfg, req = small
    tight = BucketPlan(np.array([0, 1, 2, 3, 4]), np.array([64, 128, 192, 64, 256]))
    loose = BucketPlan(np.array([0, 0, 1, 0, 1]), np.array([128, 256]))
    mt, ml = bucket_metrics(cfg, req, tight), bucket_metrics(cfg, req, loose)
    limit = (mt.sequential_time_ms + ml.sequential_time_ms) / 2          # loose meets it, tight does not
    limits = {"a": {"sequential_time_ms": limit, "pad_ratio": 10.0}}
    assert limit_excess(ml, limits["a"]) == {}
    assert limit_excess(mt, limits["a"]) == {"sequential_time_ms": pytest.approx((mt.sequential_time_ms - limit) / limit)}
    shapes, total, objective = plan_objective(cfg, {"a": mt}, {"cost": 1.0})
    ref = recompute(cfg, req, tight.batch_of, tight.seq_align)
    assert shapes == [64, 128, 192, 256]
    assert total == pytest.approx(ref["cost"] + sum(q(cfg.cost_model.compile_cost, x) for x in shapes), rel=1e-12)
    assert objective == total
    key_t = rank({"a": mt}, limits, objective)
    key_l = rank({"a": ml}, limits, plan_objective(cfg, {"a": ml}, {"cost": 1.0})[2])
    assert key_l < key_t and key_t[0] and not key_l[0]
