"""Engine profiles (models/engine.py), the verifier's engine check and the bucket-settings importers."""
import json

import numpy as np
import pytest
import yaml

from models.config import load_config
from models.engine import JETSTREAM_LENGTHS, apply_engine
from models.errors import InputError
from models.plan import BucketPlan
from models.requests import Requests
from solver.commands.engine_import import (exponential_range, linear_range, load_baselines, parse_baseline_arg,
                                           read_baseline)
from solver.verify import verify_plans
from tests.helpers import make_config, rows_from


def config(tmp_path, prompts=(100, 256, 511), engine=None, **sections):
    sections.setdefault("shapes", {"max_unique": 4, "granularity": 64})
    if engine is not None:
        sections["engine"] = {"name": engine} if isinstance(engine, str) else engine
    path = make_config(tmp_path, {"a": rows_from(prompts, [5] * len(prompts))}, **sections)
    return load_config(path)


def reqs_of(prompts):
    return {"a": Requests.from_arrays("a", prompts, [5] * len(prompts))}


def one_batch_each(seq_aligns):
    n = len(seq_aligns)
    return {"a": BucketPlan(np.arange(n), np.asarray(seq_aligns, dtype=np.int64))}


# --- config key ---------------------------------------------------------------------------

def test_engine_key_plain_name_mapping_and_errors(tmp_path):
    assert config(tmp_path).engine.name == "generic"
    path = make_config(tmp_path, {"a": rows_from([10], [5])})
    data = yaml.safe_load(path.read_text())
    data["engine"] = "neuron"
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).engine.name == "neuron"
    data["engine"] = {"name": "vllm-gaudi", "block_size": 64}
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    assert (cfg.engine.name, cfg.engine.kv_block_size) == ("vllm-gaudi", 64)
    for bad, said in (("trtllm", "engine"), ({"name": "neuron", "blocks": 1}, "unknown key 'blocks'")):
        data["engine"] = bad
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(InputError, match=said):
            load_config(path)


# --- fit rules ------------------------------------------------------------------------------

@pytest.mark.parametrize("engine,extra", [("generic", 0), ("vllm-gaudi", 0), ("neuron", 1), ("jetstream", 1),
                                          ("maxtext-offline", 1), ({"name": "jetstream", "add_bos": False}, 0),
                                          ({"name": "maxtext-offline", "add_bos": False}, 0)])
def test_fit_per_engine(tmp_path, engine, extra):
    gran = {"shapes": {"granularity": 128}} if engine == "vllm-gaudi" else {}
    cfg = config(tmp_path, engine=engine, **gran)
    reqs = reqs_of([100, 256, 511])
    apply_engine(cfg, reqs)
    assert reqs["a"].fit.tolist() == [100 + extra, 256 + extra, 511 + extra]
    assert reqs["a"].prompt.tolist() == [100, 256, 511]            # the trace itself is untouched


def test_jetstream_candidates_are_the_servers_powers_of_two(tmp_path):
    cfg = config(tmp_path, engine="jetstream")
    reqs = reqs_of([100, 256, 511])
    apply_engine(cfg, reqs)
    assert cfg.shapes.candidates == [64, 128, 256, 512]             # 512 covers 511 + BOS; 16 and 32 are not x64
    cfg = config(tmp_path, engine="jetstream", prompts=(100, 512))
    reqs = reqs_of([100, 512])
    apply_engine(cfg, reqs)
    assert cfg.shapes.candidates[-1] == 1024                         # 512 + BOS needs 1024


def test_jetstream_rejects_lengths_it_cannot_run(tmp_path):
    cfg = config(tmp_path, engine="jetstream", shapes={"granularity": 64, "candidates": [128, 192, 256, 512]})
    with pytest.raises(InputError, match="candidates value 192 must be one of its prefill lengths"):
        apply_engine(cfg, reqs_of([100]))
    cfg = config(tmp_path, engine="jetstream", shapes={"granularity": 48})
    with pytest.raises(InputError, match="granularity=48 must divide one of its prefill lengths"):
        apply_engine(cfg, reqs_of([100]))
    cfg = config(tmp_path, engine="jetstream")
    with pytest.raises(InputError, match="more than its longest prefill length 32768"):
        apply_engine(cfg, reqs_of([32768]))


def test_block_size_alignment(tmp_path):
    cfg = config(tmp_path, engine="vllm-gaudi")                      # granularity 64, block 128
    with pytest.raises(InputError, match=r"granularity=64 must be a multiple of the KV block size 128"):
        apply_engine(cfg, reqs_of([100]))
    cfg = config(tmp_path, engine={"name": "neuron", "block_size": 32})
    apply_engine(cfg, reqs_of([100]))                                # 64 is a multiple of 32


def test_explicit_candidates_must_cover_the_fit(tmp_path):
    cfg = config(tmp_path, engine="neuron", shapes={"granularity": 64, "candidates": [128, 256, 512]})
    with pytest.raises(InputError, match="needs seq_align >= 513"):
        apply_engine(cfg, reqs_of([100, 512]))


# --- verifier -------------------------------------------------------------------------------

def test_verifier_checks_the_engine_rule_itself(tmp_path):
    reqs = reqs_of([128, 100, 200])
    neuron = config(tmp_path, engine="neuron", prompts=(128, 100, 200))
    generic = config(tmp_path, prompts=(128, 100, 200))
    plan = one_batch_each([128, 128, 256])
    assert verify_plans(generic, reqs, plan) == []
    errors = verify_plans(neuron, reqs, plan)                        # prompt 128 at 128: NxD spills (strict <)
    assert len(errors) == 1 and "prompt_len 128" in errors[0] and "prompt_len < bucket" in errors[0]
    assert verify_plans(neuron, reqs, one_batch_each([192, 128, 256])) == []
    jet = config(tmp_path, engine="jetstream", prompts=(128, 100, 200))
    errors = verify_plans(jet, reqs, one_batch_each([256, 128, 256]))
    assert errors == []
    errors = verify_plans(jet, reqs, one_batch_each([128, 128, 192]))
    assert any("BOS" in e and "prompt_len 128" in e for e in errors)
    assert any("192 is not one of the server's power-of-two" in e for e in errors)
    vllm = config(tmp_path, engine="vllm-gaudi", prompts=(128, 100, 200), shapes={"granularity": 64})
    errors = verify_plans(vllm, reqs, one_batch_each([128, 128, 320]))
    assert any("320 is not a multiple of the KV block size 128" in e for e in errors)


def test_verifier_ignores_req_fit(tmp_path):
    """The verifier recomputes the rule from prompt_len: a wrong req.fit does not hide a spill."""
    neuron = config(tmp_path, engine="neuron", prompts=(128,))
    reqs = reqs_of([128])
    reqs["a"].fit = reqs["a"].prompt                                 # as if apply_engine had not run
    assert verify_plans(neuron, reqs, one_batch_each([128]))


# --- importers: each engine's documented syntax -----------------------------------------------

def test_vllm_bucket_file_syntax(tmp_path):
    f = tmp_path / "buckets.txt"
    f.write_text("# sample\n(1, 2048, 0)\n(1, [256, 512], [0, 4, 8])\n\n(64, 1, 1024)\n(1, 1, range(256, 512, 128))\n"
                 "([1, 2], range(128, 385, 128), 0)  # trailing comment\n")
    cfg = config(tmp_path)
    assert read_baseline("vllm-gaudi", f, cfg) == [128, 256, 384, 512, 2048]      # decode lines (query 1) skipped
    f.write_text("(1, 2048)\n")
    with pytest.raises(InputError, match=r"buckets.txt:1: .* tuple of 3"):
        read_baseline("vllm-gaudi", f, cfg)


def test_vllm_env_linear_with_ramp_up_and_deprecated_names(tmp_path):
    f = tmp_path / "vllm.env"
    cfg = config(tmp_path)
    f.write_text("export VLLM_BUCKETING_STRATEGY=lin\nVLLM_PROMPT_QUERY_BUCKET_MIN=128\n"
                 "VLLM_PROMPT_QUERY_BUCKET_STEP=128\nVLLM_PROMPT_QUERY_BUCKET_MAX=512\n")
    assert read_baseline("vllm-gaudi", f, cfg) == [128, 256, 384, 512]              # the docs' example
    f.write_text("VLLM_EXPONENTIAL_BUCKETING=false\nVLLM_PROMPT_SEQ_BUCKET_MIN=32\n"
                 "VLLM_PROMPT_SEQ_BUCKET_STEP=128\nVLLM_PROMPT_SEQ_BUCKET_MAX=384\n")
    assert read_baseline("vllm-gaudi", f, cfg) == [32, 64, 128, 256, 384]           # ramp-up, then steps
    assert linear_range(2, 32, 64, f) == [2, 4, 8, 16, 32, 64]                      # the docs' ramp-up example
    (tmp_path / "b.txt").write_text("(1, 640, 0)\n")
    f.write_text("export VLLM_BUCKETING_FROM_FILE=b.txt\n")
    assert read_baseline("vllm-gaudi", f, cfg) == [640]


def test_vllm_env_exponential_needs_batched_tokens(tmp_path):
    f = tmp_path / "vllm.env"
    f.write_text("VLLM_BUCKETING_STRATEGY=exp\n")
    with pytest.raises(InputError, match="engine.max_num_batched_tokens"):
        read_baseline("vllm-gaudi", f, config(tmp_path))
    cfg = config(tmp_path, engine={"name": "vllm-gaudi", "max_num_batched_tokens": 4096}, shapes={"granularity": 128})
    got = read_baseline("vllm-gaudi", f, cfg)
    assert got[0] == 128 and got[-1] == 4096 and all(s % 128 == 0 for s in got) and len(got) <= 12
    gaps = np.diff(got)
    assert (gaps[1:] >= gaps[:-1]).all()                                            # spacing widens
    assert exponential_range(128, 128, 2048, 1) == [2048]
    f.write_text("VLLM_BUCKETING_STRATEGY=pad\n")
    with pytest.raises(InputError, match="must be exp or lin"):
        read_baseline("vllm-gaudi", f, cfg)


def test_neuron_json_forms(tmp_path):
    f = tmp_path / "nxd.json"
    cfg = config(tmp_path)
    f.write_text(json.dumps({"context_encoding_buckets": [512, 128, 1024], "batch_size": 4}))
    assert read_baseline("neuron", f, cfg) == [128, 512, 1024]
    f.write_text(json.dumps({"neuron_config": {"context_encoding_buckets": [256, 2048]}, "hidden_size": 8}))
    assert read_baseline("neuron", f, cfg) == [256, 2048]                           # a whole InferenceConfig
    f.write_text(json.dumps({"enable_bucketing": True, "max_context_length": 2048}))
    assert read_baseline("neuron", f, cfg) == [128, 256, 512, 1024, 2048]           # automatic powers of two
    f.write_text(json.dumps({"max_context_length": 1000}))
    assert read_baseline("neuron", f, cfg) == [1000]                                # no bucketing: one shape
    f.write_text("{oops")
    with pytest.raises(InputError, match="nxd.json:1: JSON syntax error"):
        read_baseline("neuron", f, cfg)


def test_jetstream_and_maxtext_forms(tmp_path):
    f = tmp_path / "settings.txt"
    cfg = config(tmp_path)
    f.write_text("max_prefill_predict_length=1024\nmax_target_length=2048\n")
    assert read_baseline("jetstream", f, cfg) == [s for s in JETSTREAM_LENGTHS if s <= 1024]
    f.write_text("max_prefill_predict_length: 1000\n")
    with pytest.raises(InputError, match="must be one of the JetStream server's prefill lengths"):
        read_baseline("jetstream", f, cfg)
    f.write_text("prefill_lengths: '128,512, 256'\n")
    assert read_baseline("maxtext-offline", f, cfg) == [128, 256, 512]
    f.write_text("max_prefill_predict_length=1000\n")
    assert read_baseline("maxtext-offline", f, cfg) == [64, 128, 256, 512, 1024]    # OfflineEngine "auto"


def test_baseline_arg_and_names(tmp_path):
    with pytest.raises(InputError, match="must be FORMAT:FILE"):
        parse_baseline_arg("neuron")
    with pytest.raises(InputError, match="format='onnx' must be one of"):
        parse_baseline_arg("onnx:x.json")
    (tmp_path / "a.json").write_text("[128, 256]")
    (tmp_path / "b.json").write_text("[512]")
    got = load_baselines([f"json:{tmp_path / 'a.json'}", f"json:{tmp_path / 'b.json'}"], config(tmp_path))
    assert got == {"current:json": [128, 256], "current:json:b": [512]}
    with pytest.raises(InputError, match="cannot read bucket settings"):
        load_baselines([f"json:{tmp_path / 'missing.json'}"], config(tmp_path))


# --- every method plans under the rule --------------------------------------------------------

@pytest.mark.parametrize("engine", ["neuron", "jetstream", "maxtext-offline"])
def test_methods_plan_under_the_engine_rule(tmp_path, engine):
    from solver.pipeline import solve

    rng = np.random.default_rng(5)
    prompts = np.concatenate([rng.integers(1, 600, 30), [128, 256, 512, 512]])
    cfg = config(tmp_path, prompts=prompts, engine=engine, batching={"max_batch_size": 4},
                 solver={"time_limit_s": 1, "workers": 1, "log_progress": False})
    res = solve(cfg, ("dp", "greedy", "baseline"))                  # evaluate() re-verifies: invalid plans raise
    for r in res.results.values():
        for name, plan in r.plans.items():
            req = res.requests[name]
            assert (plan.seq_align[plan.batch_of] >= req.prompt + 1).all()
