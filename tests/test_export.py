import bisect
import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from models.plan import BucketPlan
from solver.commands.cli import export_main, solve_main
from solver.verify import verify_plans
from tests.helpers import load, make_config, rows_from


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(3)
    rows = rows_from(rng.integers(1, 900, 60), rng.integers(1, 200, 60))
    cfg_path = make_config(tmp, {"a": rows[:30], "b": rows[30:]}, shapes={"max_unique": 4, "granularity": 64},
                           batching={"max_batch_size": 8}, solver={"time_limit_s": 3, "workers": 2,
                                                                   "log_progress": False})
    out = tmp / "out"
    assert solve_main([str(cfg_path), "--out", str(out), "--quiet", "--no-plots", "--export", "all"]) == 0
    cfg = load(cfg_path)
    from solver.pipeline import load_all
    from solver.verify import verify_dir
    reqs = load_all(cfg)
    plans, errors = verify_dir(cfg, reqs, out / "cpsat")
    assert errors == []
    return cfg, reqs, plans, out / "export"


def planned(reqs, plans):
    """(seq_align per request, seq_align + batch gen cap per request) over every bucket."""
    seqs, totals = [], []
    for name, p in plans.items():
        gmax = np.zeros(p.num_batches, dtype=np.int64)
        np.maximum.at(gmax, p.batch_of, reqs[name].gen)
        seqs += p.seq_align[p.batch_of].tolist()
        totals += (p.seq_align + gmax)[p.batch_of].tolist()
    return seqs, totals


def test_neuron_buckets(solved):
    cfg, reqs, plans, out = solved
    conf = json.loads((out / "neuron_config.json").read_text())
    ce, tg = conf["context_encoding_buckets"], conf["token_generation_buckets"]
    assert conf["enable_bucketing"] is True
    assert ce == sorted(set(ce)) and tg == sorted(set(tg)) and all(isinstance(x, int) for x in ce + tg)
    assert conf["max_context_length"] == ce[-1] and conf["seq_len"] == tg[-1]
    assert all(x % cfg.shapes.granularity == 0 for x in ce + tg)
    seqs, totals = planned(reqs, plans)
    assert set(ce) == set(seqs)                                  # exactly the planned prompt shapes
    assert all(any(t <= b for b in tg) for t in totals)          # every batch's full length has a TG bucket
    assert conf["batch_size"] >= max(np.bincount(p.batch_of).max() for p in plans.values())


def test_jetstream_prefill_lengths(solved):
    cfg, reqs, plans, out = solved
    conf = yaml.safe_load((out / "jetstream.yaml").read_text())
    lengths = conf["prefill_lengths"]
    assert lengths == sorted(lengths) and conf["max_prefill_predict_length"] == lengths[-1]
    seqs, totals = planned(reqs, plans)
    prompts = np.concatenate([reqs[n].prompt for n in plans])
    for p, s in zip(prompts, seqs):
        # JetStream's take_nearest_length: the first length >= the prompt
        nearest = lengths[bisect.bisect_left(lengths, p)]
        assert p <= nearest <= s
    assert conf["max_target_length"] >= max(totals)


def test_vllm_gaudi_bucket_file_and_ranges(solved):
    cfg, reqs, plans, out = solved
    text = (out / "vllm_gaudi_buckets.txt").read_text()
    buckets = [tuple(int(v) for v in m) for m in re.findall(r"^\((\d+), (\d+), (\d+)\)$", text, re.M)]
    seqs, _ = planned(reqs, plans)
    assert {s for _, s, _ in buckets} == set(seqs)
    assert all(1 <= b <= cfg.batching.max_batch_size for b, _, _ in buckets)
    env = dict(re.findall(r"^# export (VLLM_\w+)=(\S+)$", text, re.M))
    lo, step, hi = (int(env[f"VLLM_PROMPT_SEQ_BUCKET_{k}"]) for k in ("MIN", "STEP", "MAX"))
    assert all(lo <= s <= hi and (s - lo) % step == 0 for s in set(seqs))
    assert int(env["VLLM_PROMPT_BS_BUCKET_MAX"]) == cfg.batching.max_batch_size


def test_json_list_and_csv_plan(solved):
    cfg, reqs, plans, out = solved
    seqs, _ = planned(reqs, plans)
    assert json.loads((out / "shapes.json").read_text()) == sorted(set(seqs))
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


def test_export_script_and_bad_format(solved, tmp_path, capsys):
    cfg, reqs, plans, out = solved
    assert export_main([str(out.parent), "--format", "json", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "shapes.json").read_text()) == json.loads((out / "shapes.json").read_text())
    assert export_main([str(out.parent), "--format", "onnx", "--out", str(tmp_path / "x")]) == 1
    assert "--format 'onnx' must be one of" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_export_refuses_an_invalid_plan(solved, tmp_path, capsys):
    cfg, reqs, plans, out = solved
    import shutil
    bad = tmp_path / "cpsat"
    shutil.copytree(out.parent / "cpsat", bad)
    shutil.copy(out.parent / "report.json", tmp_path / "report.json")
    lines = (bad / "a.plan.jsonl").read_text().splitlines()
    (bad / "a.plan.jsonl").write_text("\n".join(lines[1:]) + "\n")       # drop a request
    assert export_main([str(bad), "--format", "json", "--out", str(tmp_path / "e")]) == 1
    assert "not valid, nothing exported" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
