"""Exports per engine, checked against each engine's documented acceptance rules (re-implemented here from
the engines' docs, not their code), and round trips export -> --baseline-from import -> the same shapes."""
import bisect
import json
import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from models.plan import BucketPlan, plan_lines
from solver.batching import plan_from_shape_choice, round_up
from solver.commands.cli import export_main, solve_main
from solver.commands.engine_import import read_baseline
from solver.pipeline import load_all
from solver.verify import verify_dir, verify_plans
from tests.helpers import load, make_config, rows_from

JETSTREAM_DOC_LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]


# --- plans under an engine's rule, written as plan files ----------------------------------------

def trace(seed=3):
    """Random prompts plus prompts exactly at shape boundaries (the spill and BOS cases)."""
    rng = np.random.default_rng(seed)
    prompts = np.concatenate([rng.integers(1, 900, 40), [128, 256, 512, 512, 256, 384]])
    gens = rng.integers(1, 200, len(prompts))
    return rows_from(prompts, gens)


def planned_dir(tmp, engine, shapes, gran=64, max_batch=8):
    """Config + plan files (each request at the smallest of `shapes` its engine fit allows, arrival batches)."""
    rows = trace()
    cfg_path = make_config(tmp, {"a": rows[:23], "b": rows[23:]}, shapes={"max_unique": 8, "granularity": gran},
                           batching={"max_batch_size": max_batch}, engine=engine,
                           solver={"time_limit_s": 1, "workers": 1, "log_progress": False})
    cfg = load(cfg_path)
    reqs = load_all(cfg)
    plans = {n: plan_from_shape_choice(cfg, r.gen, round_up(r.fit, shapes), "arrival") for n, r in reqs.items()}
    assert verify_plans(cfg, reqs, plans) == []
    plan_dir = tmp / "out" / "rule"
    plan_dir.mkdir(parents=True)
    for n, p in plans.items():
        (plan_dir / f"{n}.plan.jsonl").write_text(plan_lines(n, reqs[n].ids, p, cfg.shapes.heads_align,
                                                             cfg.shapes.hidden_align))
    (tmp / "out" / "report.json").write_text(json.dumps({"config": str(cfg_path)}))
    return cfg, reqs, plan_dir


def exported(plan_dir, fmt, out):
    assert export_main([str(plan_dir), "--format", fmt, "--out", str(out)]) == 0
    return out


def batches(cfg, reqs, plan_dir):
    """(members, seq_align, longest gen, longest prompt) of every batch of the verified plan files."""
    plans, errors = verify_dir(cfg, reqs, plan_dir)
    assert errors == []
    out = []
    for name, p in plans.items():
        for b in range(p.num_batches):
            members = np.flatnonzero(p.batch_of == b)
            if len(members):
                out.append((len(members), int(p.seq_align[b]), int(reqs[name].gen[members].max()),
                            int(reqs[name].prompt[members].max())))
    return out


def all_prompts_and_shapes(reqs, plan_dir, cfg):
    plans, _ = verify_dir(cfg, reqs, plan_dir)
    prompts = np.concatenate([reqs[n].prompt for n in plans])
    shapes = np.concatenate([plans[n].seq_align[plans[n].batch_of] for n in plans])
    return prompts, shapes


# --- vLLM Gaudi: docs/features/bucketing_mechanism.md ------------------------------------------

def vllm_buckets(text):
    lines = [tuple(int(v) for v in m) for m in re.findall(r"^\((\d+), (\d+), (\d+)\)$", text, re.M)]
    return sorted(b for b in lines if b[1] != 1), sorted(b for b in lines if b[1] == 1)


def vllm_settings(text):
    env = dict(re.findall(r"\b(VLLM_\w+)=(\S+)", text))
    flags = {k: int(v) for k, v in re.findall(r"(--[a-z-]+) (\d+)", text)}
    return env, flags


def vllm_pick(buckets, target):
    """The smallest prepared bucket at or above the target in every dimension (None: not prepared)."""
    return next((b for b in buckets if all(x >= t for x, t in zip(b, target))), None)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    cfg, reqs, plan_dir = planned_dir(tmp, {"name": "vllm-gaudi", "block_size": 128}, [256, 512, 640, 1024],
                                      gran=128)
    return cfg, reqs, plan_dir, exported(plan_dir, "vllm-gaudi", tmp / "export")


def test_vllm_gaudi_file_prompt_and_decode_lines(vllm):
    cfg, reqs, plan_dir, out = vllm
    text = (out / "vllm_gaudi_buckets.txt").read_text()
    prompt, decode = vllm_buckets(text)
    code = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert len(code) == len(prompt) + len(decode)                  # nothing but bucket lines outside comments
    assert prompt and decode and all(k == 0 for _, _, k in prompt)
    env, flags = vllm_settings(text)
    assert "VLLM_PROMPT_SEQ_BUCKET_MIN" not in text and "VLLM_EXPONENTIAL_BUCKETING" not in text
    block = flags["--block-size"]
    assert block == 128 and env["VLLM_CONTIGUOUS_PA"] == "false"
    # warm-up keeps a file line only within the server's limits: none may be dropped
    bs_max = int(env["VLLM_PROMPT_BS_BUCKET_MAX"])
    assert all(b * q <= flags["--max-num-batched-tokens"] and q <= flags["--max-model-len"] and b <= bs_max
               for b, q, _ in prompt)
    assert all(b <= k and b <= flags["--max-num-seqs"] for b, _, k in decode)
    for n, s, g, top in batches(cfg, reqs, plan_dir):
        got = vllm_pick(prompt, (n, top, 0))
        assert got is not None and got[1] <= s                      # prefill runs at (at most) the planned shape
        assert vllm_pick(decode, (n, 1, n * math.ceil((s + g) / block))) is not None
        assert s + g <= flags["--max-model-len"]
    assert {q for _, q, _ in prompt} == set(all_prompts_and_shapes(reqs, plan_dir, cfg)[1].tolist())


def test_vllm_gaudi_round_trip(vllm, tmp_path):
    cfg, reqs, plan_dir, out = vllm
    shapes = sorted(set(all_prompts_and_shapes(reqs, plan_dir, cfg)[1].tolist()))
    assert read_baseline("vllm-gaudi", out / "vllm_gaudi_buckets.txt", cfg) == shapes
    env = tmp_path / "vllm.env"
    env.write_text(f"export VLLM_BUCKETING_FROM_FILE={out / 'vllm_gaudi_buckets.txt'}\n")
    assert read_baseline("vllm-gaudi", env, cfg) == shapes


# --- NxD Inference: context-encoding buckets, strict < but for the largest ------------------------

def nxd_pick(buckets, length):
    """NxD's documented selection: the first bucket larger than the length; the largest also when equal."""
    for b in buckets:
        if length < b:
            return b
    return buckets[-1] if length == buckets[-1] else None


@pytest.fixture(scope="module")
def nxd(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nxd")
    cfg, reqs, plan_dir = planned_dir(tmp, {"name": "neuron"}, [256, 448, 576, 960])
    return cfg, reqs, plan_dir, exported(plan_dir, "neuron", tmp / "export")


def test_neuron_overrides_fit_nxd_selection(nxd):
    cfg, reqs, plan_dir, out = nxd
    assert not (out / "neuron_config.json").exists()                 # never NxD's own file name
    conf = json.loads((out / "nxd_neuron_config_overrides.json").read_text())
    assert set(conf) == {"enable_bucketing", "context_encoding_buckets", "token_generation_buckets",
                         "max_context_length", "seq_len", "batch_size"}
    ce, tg = conf["context_encoding_buckets"], conf["token_generation_buckets"]
    assert conf["enable_bucketing"] is True
    assert ce == sorted(set(ce)) and tg == sorted(set(tg)) and all(type(x) is int for x in ce + tg)
    assert ce[-1] <= conf["max_context_length"] and tg[-1] <= conf["seq_len"]   # NeuronConfig's own checks
    assert conf["batch_size"] >= max(n for n, *_ in batches(cfg, reqs, plan_dir))
    for n, s, g, top in batches(cfg, reqs, plan_dir):
        got = nxd_pick(ce, top)
        assert got is not None and got <= s                          # no spill past the planned shape
        assert nxd_pick(tg, s + g - 1) is not None                   # the last decode position has a bucket


def test_neuron_spill_rule_in_the_plan(nxd):
    cfg, reqs, plan_dir, out = nxd
    prompts, shapes = all_prompts_and_shapes(reqs, plan_dir, cfg)
    assert (prompts < shapes).all()                                  # prompt 256 is at 448, never at 256
    assert 256 in prompts.tolist() and 256 in shapes.tolist()


def test_neuron_round_trip_and_spill_warning(nxd, tmp_path, capsys):
    cfg, reqs, plan_dir, out = nxd
    path = out / "nxd_neuron_config_overrides.json"
    assert read_baseline("neuron", path, cfg) == sorted(set(all_prompts_and_shapes(reqs, plan_dir, cfg)[1].tolist()))
    # a generic plan with prompts exactly at a bucket: the export says NxD will spill them
    gen_cfg, gen_reqs, gen_dir = planned_dir(tmp_path, {"name": "generic"}, [256, 448, 576, 960])
    exported(gen_dir, "neuron", tmp_path / "export")
    assert re.search(r"WARNING: \d+ requests have prompt_len equal to their planned bucket", capsys.readouterr().out)


# --- JetStream server: power-of-two lengths, BOS -------------------------------------------------

def jetstream_server(max_prefill):
    assert max_prefill in JETSTREAM_DOC_LENGTHS                        # else the server fails at start
    return JETSTREAM_DOC_LENGTHS[: JETSTREAM_DOC_LENGTHS.index(max_prefill) + 1]


def key_values(text):
    return {k: int(v) for k, v in re.findall(r"^(\w+)=(\d+)$", text, re.M)}


@pytest.fixture(scope="module")
def jet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jet")
    cfg, reqs, plan_dir = planned_dir(tmp, {"name": "jetstream"}, [64, 128, 256, 512, 1024])
    return cfg, reqs, plan_dir, exported(plan_dir, "jetstream", tmp / "export")


def test_jetstream_server_values_and_bos(jet):
    cfg, reqs, plan_dir, out = jet
    text = (out / "jetstream_server_overrides.txt").read_text()
    conf = key_values(text)
    assert set(conf) == {"max_prefill_predict_length", "max_target_length"}   # nothing the server ignores
    assert "prefill_lengths=" not in text
    lengths = jetstream_server(conf["max_prefill_predict_length"])
    prompts, shapes = all_prompts_and_shapes(reqs, plan_dir, cfg)
    for p, s in zip(prompts.tolist(), shapes.tolist()):
        padded = lengths[bisect.bisect_left(lengths, p + 1)]          # BOS first, then the next length
        assert padded <= s
    assert 512 in prompts.tolist() and shapes[prompts == 512].min() == 1024    # 512 + BOS needs 1024
    gens = np.concatenate([r.gen for r in reqs.values()])
    assert conf["max_target_length"] >= conf["max_prefill_predict_length"] + gens.max()


def test_jetstream_warns_where_the_server_cannot_follow(tmp_path, capsys):
    cfg, reqs, plan_dir = planned_dir(tmp_path, {"name": "generic"}, [256, 448, 576, 960])
    out = exported(plan_dir, "jetstream", tmp_path / "export")
    conf = key_values((out / "jetstream_server_overrides.txt").read_text())
    assert conf["max_prefill_predict_length"] == 1024                 # the next server length above 960
    said = capsys.readouterr().out
    assert "WARNING: the server cannot run shapes [448, 576, 960]" in said


def test_jetstream_round_trip(jet):
    cfg, reqs, plan_dir, out = jet
    got = read_baseline("jetstream", out / "jetstream_server_overrides.txt", cfg)
    assert got == jetstream_server(key_values((out / "jetstream_server_overrides.txt").read_text())
                                   ["max_prefill_predict_length"])
    assert set(all_prompts_and_shapes(reqs, plan_dir, cfg)[1].tolist()) <= set(got)


# --- MaxText OfflineEngine ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def maxtext(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("maxtext")
    cfg, reqs, plan_dir = planned_dir(tmp, {"name": "maxtext-offline"}, [192, 320, 576, 960])
    return cfg, reqs, plan_dir, exported(plan_dir, "maxtext-offline", tmp / "export")


def test_maxtext_offline_snippet(maxtext):
    cfg, reqs, plan_dir, out = maxtext
    text = (out / "maxtext_offline.py").read_text()
    compile(text, "maxtext_offline.py", "exec")                       # valid Python
    scope = {}
    exec(text, scope)
    overrides = dict(o.split("=") for o in scope["MAXTEXT_OVERRIDES"])
    assert set(overrides) == {"max_prefill_predict_length", "max_target_length"}
    lengths = json.loads(re.search(r"prefill_lengths=(\[[^\]]*\])", text)[1])
    assert lengths == sorted(set(lengths)) and lengths[-1] == int(overrides["max_prefill_predict_length"])
    prompts, shapes = all_prompts_and_shapes(reqs, plan_dir, cfg)
    for p, s in zip(prompts.tolist(), shapes.tolist()):
        padded = next((l for l in lengths if l >= p + 1), None)       # BOS counted in the true length
        assert padded is not None and padded <= s
    gens = np.concatenate([r.gen for r in reqs.values()])
    assert int(overrides["max_target_length"]) - int(overrides["max_prefill_predict_length"]) >= gens.max()
    assert read_baseline("maxtext-offline", out / "maxtext_offline.py", cfg) == lengths


# --- solve.py --export, json/csv, --baseline-from ------------------------------------------------

@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(3)
    rows = rows_from(rng.integers(1, 900, 60), rng.integers(1, 200, 60))
    cfg_path = make_config(tmp, {"a": rows[:30], "b": rows[30:]}, shapes={"max_unique": 4, "granularity": 64},
                           batching={"max_batch_size": 8}, solver={"time_limit_s": 1, "workers": 1,
                                                                   "log_progress": False})
    out = tmp / "out"
    assert solve_main([str(cfg_path), "--method", "dp", "--out", str(out), "--quiet", "--no-plots",
                       "--export", "all"]) == 0
    cfg = load(cfg_path)
    reqs = load_all(cfg)
    plans, errors = verify_dir(cfg, reqs, out / "dp")
    assert errors == []
    return cfg_path, cfg, reqs, plans, out / "export"


def test_every_format_written(solved):
    *_, out = solved
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["vllm_gaudi_buckets.txt", "nxd_neuron_config_overrides.json", "jetstream_server_overrides.txt",
         "maxtext_offline.py", "shapes.json", "batch_plan.csv"])


def test_json_list_and_csv_plan(solved):
    cfg_path, cfg, reqs, plans, out = solved
    seqs = sorted({int(s) for p in plans.values() for s in p.seq_align[p.batch_of]})
    assert json.loads((out / "shapes.json").read_text()) == seqs
    assert read_baseline("json", out / "shapes.json", cfg) == seqs
    frame = pd.read_csv(out / "batch_plan.csv")
    assert len(frame) == sum(len(r) for r in reqs.values())
    rebuilt = {}
    for name, sub in frame.groupby("bucket"):
        order = pd.Series(range(len(reqs[name])), index=reqs[name].ids)[sub["request_id"]].to_numpy()
        codes, uniq = pd.factorize(sub["batch_id"])
        batch_of = np.empty(len(reqs[name]), dtype=np.int64)
        batch_of[order] = codes
        seq = sub.groupby(codes)["seq_align"].first().to_numpy()
        rebuilt[name] = BucketPlan(batch_of, seq)
    assert verify_plans(cfg, reqs, rebuilt) == []


def test_baseline_from_shows_what_runs_now(solved, tmp_path, capsys):
    cfg_path, cfg, reqs, plans, out = solved
    nxd = tmp_path / "nxd.json"
    nxd.write_text(json.dumps({"neuron_config": {"enable_bucketing": True, "max_context_length": 1024}}))
    run = tmp_path / "run"
    assert solve_main([str(cfg_path), "--method", "dp", "--out", str(run), "--quiet", "--no-plots",
                       "--baseline-from", f"neuron:{nxd}", "--baseline-from", f"json:{out / 'shapes.json'}"]) == 0
    table = capsys.readouterr().out
    assert "current:neuron" in table and "current:json" in table
    report = json.loads((run / "report.json").read_text())
    cur = report["methods"]["current:neuron"]
    assert cur["imported_shapes"] == [128, 256, 512, 1024] and cur["limits_hold"] is True
    assert set(cur["shapes"]) <= {128, 256, 512, 1024}
    same = report["methods"]["current:json"]                         # the plan's own shapes, rule batching
    assert same["shapes"] == report["methods"]["dp"]["shapes"]
    assert same["total_cost"] >= report["methods"]["dp"]["total_cost"] * (1 - 1e-9)
    assert verify_dir(cfg, reqs, run / "current:neuron")[1] == []      # written like any method's plans


def test_baseline_from_errors(solved, tmp_path, capsys):
    cfg_path, *_ = solved
    small = tmp_path / "small.json"
    small.write_text("[128, 256]")
    assert solve_main([str(cfg_path), "--method", "dp", "--out", str(tmp_path / "x"), "--quiet", "--no-plots",
                       "--baseline-from", f"json:{small}"]) == 1
    assert "above the largest imported shape 256" in capsys.readouterr().err
    assert solve_main([str(cfg_path), "--method", "dp", "--out", str(tmp_path / "y"), "--quiet", "--no-plots",
                       "--baseline-from", "tgi:x.json"]) == 1
    assert "format='tgi' must be one of" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_export_script_and_bad_format(solved, tmp_path, capsys):
    cfg_path, cfg, reqs, plans, out = solved
    assert export_main([str(out.parent / "dp"), "--format", "json", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "shapes.json").read_text()) == json.loads((out / "shapes.json").read_text())
    assert export_main([str(out.parent / "dp"), "--format", "onnx", "--out", str(tmp_path / "x")]) == 1
    assert "--format 'onnx' must be one of" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_export_refuses_an_invalid_plan(solved, tmp_path, capsys):
    cfg_path, cfg, reqs, plans, out = solved
    bad = tmp_path / "dp"
    shutil.copytree(out.parent / "dp", bad)
    shutil.copy(out.parent / "report.json", tmp_path / "report.json")
    lines = (bad / "a.plan.jsonl").read_text().splitlines()
    (bad / "a.plan.jsonl").write_text("\n".join(lines[1:]) + "\n")       # drop a request
    assert export_main([str(bad), "--format", "json", "--out", str(tmp_path / "e")]) == 1
    assert "not valid, nothing exported" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
