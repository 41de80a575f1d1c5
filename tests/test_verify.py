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


# --- mutation-testing survivors of solver/verify.py (bench/mutation_verify.md) -----------------------

LIMIT_KEYS = ("p95_latency_ms", "p99_latency_ms", "max_latency_ms", "pad_ratio", "pad_tokens", "cost",
              "sequential_time_ms")


def plan_200(cfg):
    """200 requests (so p99 differs from the max), 7 batches, one batch index left empty."""
    rng = np.random.default_rng(7)
    req = Requests.from_arrays("a", rng.integers(1, 250, 200), rng.integers(1, 60, 200))
    batch_of = rng.integers(0, 8, 200)
    batch_of[batch_of == 3] = 4                              # batch 3 has no member
    batch_of[batch_of == 7] = 6
    batch_of[0], req.gen[0] = 7, 500                         # one slowest request alone: p99 below the max
    return req, BucketPlan(batch_of, np.full(8, 256))


def test_limits_hold_at_equality_and_break_just_above(small):
    cfg, _ = small
    req, plan = plan_200(cfg)
    ref = recompute(cfg, req, plan.batch_of, plan.seq_align)
    at = bucket_metrics(cfg, req, plan, {k: ref[k] for k in LIMIT_KEYS})
    assert all(at.limits.values()), at.limits
    below = bucket_metrics(cfg, req, plan, {k: ref[k] * (1 - 1e-9) for k in LIMIT_KEYS})
    assert not any(below.limits.values()), below.limits
    assert limit_excess(at, {k: ref[k] for k in LIMIT_KEYS}) == {}
    excess = limit_excess(below, {"cost": ref["cost"] * (1 - 1e-9), "pad_tokens": 0})
    assert excess["cost"] == pytest.approx(1e-9 / (1 - 1e-9), rel=1e-3)
    assert excess["pad_tokens"] == pytest.approx(ref["pad_tokens"] / 1e-9)     # a zero limit: excess over 1e-9


def test_counts_percentiles_and_empty_batches(small):
    cfg, _ = small
    req, plan = plan_200(cfg)
    m, ref = bucket_metrics(cfg, req, plan), recompute(cfg, req, plan.batch_of, plan.seq_align)
    assert m.num_batches == ref["num_batches"] == 7 and m.num_requests == 200
    assert m.real_tokens == int(req.prompt.sum() + req.gen.sum())
    assert m.p99_latency_ms == pytest.approx(ref["p99_latency_ms"]) and m.p99_latency_ms < m.max_latency_ms
    one = Requests.from_arrays("a", [100], [5])
    single = bucket_metrics(cfg, one, BucketPlan(np.array([0]), np.array([128])))
    assert single.p95_latency_ms == single.max_latency_ms == pytest.approx(
        recompute(cfg, one, [0], [128])["max_latency_ms"])


def test_objective_weights_each_metric(small):
    cfg, req = small
    plan = BucketPlan(np.array([0, 0, 1, 0, 1]), np.array([128, 256]))
    m, ref = bucket_metrics(cfg, req, plan), recompute(cfg, req, plan.batch_of, plan.seq_align)
    compile_cost = q(cfg.cost_model.compile_cost, 128) + q(cfg.cost_model.compile_cost, 256)
    _, total, objective = plan_objective(cfg, {"a": m}, {"sequential_time_ms": 3.0, "pad_tokens": 7.0})
    assert total == pytest.approx(ref["batch_cost"] + compile_cost)
    assert objective == pytest.approx(3.0 * ref["sequential_time_ms"] + 7.0 * ref["pad_tokens"])
    _, _, both = plan_objective(cfg, {"a": m}, {"cost": 2.0, "pad_tokens": 1.0})
    assert both == pytest.approx(2.0 * total + ref["pad_tokens"])


def test_first_use_without_ids_or_order_goes_to_the_first_batch_and_line():
    """Default ids (bucket-0000, ...) and arrival order: per shape, the lowest-numbered batch's first member."""
    from solver.verify import first_use_members

    req = Requests.from_arrays("a", [10, 10, 10, 100], [5, 5, 5, 5])
    plan = BucketPlan(np.array([1, 0, 0, 2]), np.array([64, 64, 128]))
    assert first_use_members(req, plan).tolist() == [1, 3]
