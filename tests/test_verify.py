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


# --- second round of solver/verify.py survivors: every message names its batch, request, file and line;
# --- each check lists at most 20 offenders; the engine fit rules at their boundaries -------------------

from models.config import Config  # noqa: E402


def cfg_of(engine="generic", gran=64, candidates="auto", size=3, tokens=None, max_unique=4, first_use=0.0,
           buckets=("a",)) -> Config:
    batching = {"max_batch_size": size}
    if tokens:
        batching["max_batch_tokens"] = tokens
    return Config.model_validate({
        "buckets": [{"name": n, "requests": f"{n}.jsonl"} for n in buckets], "engine": engine,
        "shapes": {"granularity": gran, "candidates": candidates, "max_unique": max_unique}, "batching": batching,
        "cost_model": {"prefill_length": "request", "first_use_ms": first_use}})


def reqs(prompts, gens=None, bucket="a"):
    gens = gens if gens is not None else [10] * len(prompts)
    return Requests.from_arrays(bucket, prompts, gens, [f"r-{i}" for i in range(len(prompts))])


def test_structure_errors_name_each_batch_and_request():
    """One message per problem, in check order, naming the batch by its id (or #index without ids)."""
    from solver.verify import structure_errors

    cfg = cfg_of(candidates=[64, 128, 256], size=3, tokens=290)
    req = reqs([100, 30, 30, 30, 30, 200], [10, 10, 10, 10, 10, 50])
    batch_of, seq = np.array([0, 1, 1, 1, 1, 2]), np.array([100, 64, 192])
    # batch 1: 4 * (64 + 10) = 296 tokens > 290, though 4 * 64 = 256 and 4 * (64 - 10) are not
    expected = ["a: batch {0} seq_align 100 is not a positive multiple of 64",
                "a: batch {0} seq_align 100 is not among shapes.candidates",
                "a: batch {2} seq_align 192 is not among shapes.candidates",
                "a: request r-5 (prompt_len 200) does not fit seq_align 192 of batch {2}",
                "a: batch {1} has 4 requests > max_batch_size 3",
                "a: batch {1} uses 296 tokens > max_batch_tokens 290"]
    named = BucketPlan(batch_of, seq, np.array(["x-0", "x-1", "x-2"], dtype=object))
    assert structure_errors(cfg, req, named, "a") == [e.format("x-0", "x-1", "x-2") for e in expected]
    assert structure_errors(cfg, req, BucketPlan(batch_of, seq), "a") == [e.format("#0", "#1", "#2") for e in expected]
    assert verify_plans(cfg, {"a": req}, {"a": named}) == [e.format("x-0", "x-1", "x-2") for e in expected]


def test_limits_of_the_structure_checks_at_their_boundaries():
    """seq_align 1 with granularity 1 is valid; max_batch_tokens holds at equality; an empty last batch
    index is ignored."""
    from solver.verify import structure_errors

    req = reqs([1, 1], [9, 9])
    assert structure_errors(cfg_of(gran=1, tokens=20), req, BucketPlan(np.array([0, 0]), np.array([1, 7])), "a") == []
    assert structure_errors(cfg_of(gran=1, tokens=19), req, BucketPlan(np.array([0, 0]), np.array([1, 7])), "a") == \
        ["a: batch #0 uses 20 tokens > max_batch_tokens 19"]
    two = BucketPlan(np.array([0, 1]), np.array([1, 1, 7]))               # batches 0 and 1, then an empty one
    assert structure_errors(cfg_of(gran=1, tokens=10), req, two, "a") == []
    assert structure_errors(cfg_of(gran=1, tokens=9), req, two, "a") == \
        ["a: batch #0 uses 10 tokens > max_batch_tokens 9", "a: batch #1 uses 10 tokens > max_batch_tokens 9"]


@pytest.mark.parametrize("engine,kinds", [
    ("generic", ()),
    ("vllm-gaudi", ("is not a multiple of the KV block size 128",)),
    ("jetstream", ("power-of-two prefill lengths", "(BOS + prompt_len <= seq_align)")),
    ("neuron", ("(prompt_len < bucket)",)),
    ("maxtext-offline", ("(BOS + prompt_len <= seq_align)",)),
])
def test_each_check_lists_at_most_20_offenders(engine, kinds):
    """25 batches of two requests, each breaking every check: 20 messages per check (50 short requests too)."""
    cfg = cfg_of(engine, candidates=[64, 128], size=1, tokens=100)
    req = reqs([101] * 50)
    plan = BucketPlan(np.repeat(np.arange(25), 2), np.full(25, 100))
    errors = verify_plans(cfg, {"a": req}, {"a": plan})
    for what in ("is not a positive multiple of 64", "is not among shapes.candidates", "of batch #",
                 "requests > max_batch_size 1", "tokens > max_batch_tokens 100") + kinds:
        assert sum(what in e for e in errors) == 20, what
    assert len(errors) == 20 * (5 + len(kinds))


def test_engine_fit_rules_at_their_boundaries():
    from solver.verify import structure_errors

    # vllm-gaudi: whole 128-token blocks, no token added (prompt 128 fits 128); an empty batch is not checked
    req = reqs([128, 100])
    plan = BucketPlan(np.array([0, 1]), np.array([128, 192, 64]))
    assert structure_errors(cfg_of("vllm-gaudi"), req, plan, "a") == \
        ["a: engine vllm-gaudi: seq_align 192 is not a multiple of the KV block size 128"]
    # generic with a block size set checks blocks too
    req = reqs([40])
    assert structure_errors(cfg_of({"name": "generic", "block_size": 32}, gran=16), req,
                            BucketPlan(np.array([0]), np.array([48])), "a") == \
        ["a: engine generic: seq_align 48 is not a multiple of the KV block size 32"]
    # jetstream: powers of two 16..32768 only, BOS added; with a block size its block errors come first
    req = reqs([5, 15, 100, 20, 64])
    plan = BucketPlan(np.arange(5), np.array([8, 16, 32768, 24, 64]))
    assert structure_errors(cfg_of({"name": "jetstream", "block_size": 16}, gran=8), req, plan, "a") == [
        "a: engine jetstream: seq_align 8 is not a multiple of the KV block size 16",
        "a: engine jetstream: seq_align 24 is not a multiple of the KV block size 16",
        "a: engine jetstream: seq_align 8 is not one of the server's power-of-two prefill lengths",
        "a: engine jetstream: seq_align 24 is not one of the server's power-of-two prefill lengths",
        "a: engine jetstream: request r-4 (prompt_len 64) does not fit seq_align 64 (BOS + prompt_len <= seq_align)"]
    assert structure_errors(cfg_of({"name": "jetstream", "add_bos": False}, gran=8), req, plan, "a") == [
        "a: engine jetstream: seq_align 8 is not one of the server's power-of-two prefill lengths",
        "a: engine jetstream: seq_align 24 is not one of the server's power-of-two prefill lengths"]
    # neuron: prompt_len < bucket (127 fits 128, 128 does not)
    req = reqs([127, 128])
    plan = BucketPlan(np.array([0, 1]), np.array([128, 128]))
    assert structure_errors(cfg_of("neuron"), req, plan, "a") == \
        ["a: engine neuron: request r-1 (prompt_len 128) does not fit seq_align 128 (prompt_len < bucket)"]
    # maxtext-offline adds BOS unless add_bos is false
    assert structure_errors(cfg_of("maxtext-offline"), req, plan, "a") == \
        ["a: engine maxtext-offline: request r-1 (prompt_len 128) does not fit seq_align 128 "
         "(BOS + prompt_len <= seq_align)"]
    assert structure_errors(cfg_of({"name": "maxtext-offline", "add_bos": False}), req, plan, "a") == []


def test_shape_count_is_over_every_bucket_and_used_batches_only():
    cfg = cfg_of(max_unique=1, buckets=("a", "b"))
    requests = {"a": reqs([10], bucket="a"), "b": reqs([10], bucket="b")}
    plans = {"a": BucketPlan(np.array([0]), np.array([64, 128])),      # batch 1 empty: shape 128 unused
             "b": BucketPlan(np.array([0]), np.array([64]))}
    assert verify_plans(cfg, requests, plans) == []
    plans["b"] = BucketPlan(np.array([0]), np.array([128]))
    assert verify_plans(cfg, requests, plans) == ["2 distinct shapes [64, 128] > shapes.max_unique 1"]
    plans = {"a": BucketPlan(np.array([0]), np.array([32])), "b": BucketPlan(np.array([0]), np.array([96]))}
    assert verify_plans(cfg_of(buckets=("a", "b")), requests, plans) == [
        "a: batch #0 seq_align 32 is not a positive multiple of 64",
        "b: batch #0 seq_align 96 is not a positive multiple of 64"]


def plan_line(rid, bid, s, heads=32, hidden=4096):
    return ('{"request_id": "%s", "batch_id": "%s", "shape": {"seq_align": %d, "heads_align": %d, '
            '"hidden_align": %d}}' % (rid, bid, s, heads, hidden))


def write_plan(d, bucket, lines):
    d.mkdir(exist_ok=True)
    (d / f"{bucket}.plan.jsonl").write_text("\n".join(lines) + "\n")
    return d / f"{bucket}.plan.jsonl"


def test_plan_file_messages_name_line_and_first_line(tmp_path):
    cfg, d = cfg_of(), tmp_path / "plans"
    req = reqs([10, 10])
    p = write_plan(d, "a", [plan_line("r-0", "a-0", 64), plan_line("r-1", "a-0", 64), plan_line("r-0", "a-1", 64)])
    assert verify_dir(cfg, {"a": req}, d)[1] == [f"{p}:3: request_id 'r-0' appears again (first at line 1)"]
    p = write_plan(d, "a", [plan_line("r-0", "a-0", 64), plan_line("r-1", "a-0", 128, heads=16)])
    assert verify_dir(cfg, {"a": req}, d)[1] == [
        f"{p}:2: shape heads/hidden (16, 4096) differ from the config (32, 4096)",
        f"{p}:2: batch a-0 has seq_align 128 but 64 at line 1 (one shape per batch)"]


@pytest.mark.parametrize("missing", [20, 21, 25])
def test_missing_requests_listed_up_to_20(tmp_path, missing):
    cfg, d = cfg_of(), tmp_path / "plans"
    req = reqs([10] * (missing + 1))
    p = write_plan(d, "a", [plan_line("r-0", "a-0", 64)])
    errors = verify_dir(cfg, {"a": req}, d)[1]
    assert errors[:20] == [f"{p}: request_id 'r-{i}' is missing from the plan" for i in range(1, 21)]
    assert errors[20:] == ([] if missing == 20 else [f"{p}: ... and {missing - 20} more missing requests"])


def test_plan_file_line_order_and_batch_ids_place_the_first_use(tmp_path):
    """First use goes to the first line (in the file) of the batch whose id sorts first: here request r-1,
    though r-0 comes first in arrival order and batch b-z comes first in the file."""
    cfg, d = cfg_of(first_use=1500.0), tmp_path / "plans"
    req = reqs([10, 100, 10, 100], [50, 50, 5, 5])
    write_plan(d, "a", [plan_line("r-3", "b-z", 128), plan_line("r-2", "b-z", 128), plan_line("r-1", "b-a", 128),
                        plan_line("r-0", "b-a", 128)])
    plans, errors = verify_dir(cfg, {"a": req}, d)
    assert errors == []
    m = bucket_metrics(cfg, req, plans["a"])
    ref = recompute(cfg, req, [1, 1, 0, 0], [128, 128], ["b-z", "b-a"], [3, 2, 1, 0])
    for key in ("max_latency_ms", "sequential_time_ms", "p95_latency_ms", "cost"):
        assert getattr(m, key) == pytest.approx(ref[key], rel=1e-12), key
    no_first_use = recompute(cfg_of(), req, [1, 1, 0, 0], [128, 128])
    assert ref["max_latency_ms"] == pytest.approx(no_first_use["max_latency_ms"] + 1500.0)


def test_verify_dir_collects_every_bucket(tmp_path):
    cfg, d = cfg_of(buckets=("a", "b"), max_unique=1), tmp_path / "plans"
    requests = {"a": reqs([10], bucket="a"), "b": reqs([10], bucket="b")}
    d.mkdir()
    pb = write_plan(d, "b", [plan_line("r-0", "b-0", 32)])
    assert verify_dir(cfg, requests, d)[1] == [f"{d / 'a.plan.jsonl'}: plan file for bucket 'a' not found",
                                               f"{pb}: batch b-0 seq_align 32 is not a positive multiple of 64"]
    pa = write_plan(d, "a", [plan_line("r-0", "a-0", 96)])
    write_plan(d, "b", [plan_line("r-0", "b-0", 64)])
    assert verify_dir(cfg, requests, d)[1] == [f"{pa}: batch a-0 seq_align 96 is not a positive multiple of 64"]
    write_plan(d, "a", [plan_line("r-0", "a-0", 128)])
    plans, errors = verify_dir(cfg, requests, d)
    assert errors == ["2 distinct shapes [64, 128] > shapes.max_unique 1"] and set(plans) == {"a", "b"}


def test_first_use_with_default_ids_in_the_metrics():
    """A plan without ids or line order: first use on the first request of batch 0 (bucket-0000)."""
    cfg = cfg_of(first_use=1500.0)
    req = reqs([10, 100, 10], [50, 50, 5])
    plan = BucketPlan(np.array([0, 0, 1]), np.array([128, 128]))
    m, ref = bucket_metrics(cfg, req, plan), recompute(cfg, req, plan.batch_of, plan.seq_align)
    assert m.max_latency_ms == pytest.approx(ref["max_latency_ms"], rel=1e-12)
    assert m.sequential_time_ms == pytest.approx(ref["sequential_time_ms"], rel=1e-12)


def test_zero_limits_met_by_a_plan_without_padding():
    cfg = cfg_of()
    req = reqs([64, 128], [5, 5])
    m = bucket_metrics(cfg, req, BucketPlan(np.array([0, 1]), np.array([64, 128])), {"pad_tokens": 0, "pad_ratio": 0})
    assert m.pad_tokens == 0 and m.limits == {"pad_tokens": True, "pad_ratio": True}
    assert limit_excess(m, {"pad_tokens": 0, "pad_ratio": 0}) == {}


def test_percentiles_of_200_distinct_latencies():
    """One request per batch, distinct gens: p95 is the 190th and p99 the 198th smallest latency."""
    cfg = cfg_of(size=1)
    req = reqs([10] * 200, list(range(1, 201)))
    plan = BucketPlan(np.arange(200), np.full(200, 64))
    m, ref = bucket_metrics(cfg, req, plan), recompute(cfg, req, plan.batch_of, plan.seq_align)
    lats = sorted(recompute(cfg, reqs([10], [g]), [0], [64])["max_latency_ms"] for g in range(1, 201))
    assert m.p95_latency_ms == pytest.approx(ref["p95_latency_ms"]) == pytest.approx(lats[189])
    assert m.p99_latency_ms == pytest.approx(ref["p99_latency_ms"]) == pytest.approx(lats[197])


def test_first_use_skips_an_empty_batch_index():
    """Batch 0 is empty (in-memory plans may leave an index unused): the shape's first use goes to the
    first request of batch 1, the first batch that exists."""
    cfg = cfg_of(first_use=1500.0)
    req = reqs([10, 100], [5, 5])
    plan = BucketPlan(np.array([1, 1]), np.array([128, 128]))
    m = bucket_metrics(cfg, req, plan)
    ref = recompute(cfg, req, plan.batch_of, plan.seq_align)
    assert m.max_latency_ms == pytest.approx(ref["max_latency_ms"], rel=1e-12)
    short_alone = recompute(cfg_of(), reqs([10], [5]), [0], [128])["max_latency_ms"]    # request 0, no first use
    assert m.max_latency_ms == pytest.approx(short_alone + 1500.0, rel=1e-12)
