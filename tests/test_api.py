import re

import pandas as pd
import pytest

from models import load_config
from solver import solve
from solver.verify import verify_dir
from tests.helpers import ROOT, recompute


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    code = readme_example().replace('"configs/tiny.yaml"', repr(str(ROOT / "configs" / "tiny.yaml")))
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    out = capsys.readouterr().out
    assert "cpsat" in out and ("OPTIMAL" in out or "FEASIBLE" in out)
    info = scope["info"]
    assert info["status"] in ("OPTIMAL", "FEASIBLE") and f"{info['status']} {info['objective']}" in out
    result, cfg = scope["result"], scope["cfg"]
    plans, errors = verify_dir(cfg, result.requests, tmp_path / "out" / "api_example" / "cpsat")
    assert errors == []
    frame = scope["plan"]
    assert len(frame) == len(result.requests["tiny"]) and frame["request_id"].is_unique
    ref = recompute(cfg, result.requests["tiny"], plans["tiny"].batch_of, plans["tiny"].seq_align)
    summary = result.summary()
    row = summary[(summary.method == "cpsat") & (summary.bucket == "tiny")].iloc[0]
    assert row["cost"] == pytest.approx(ref["cost"], rel=1e-12)


def test_solve_takes_a_path_and_all_methods():
    result = solve(ROOT / "configs" / "tiny.yaml", methods="all", time_limit=3)
    assert set(result.results) == {"cpsat", "dp", "greedy", "baseline", "baseline_step128", "baseline_exp"}
    assert isinstance(result.summary(), pd.DataFrame)
    best = result.results["cpsat"].objective
    assert all(r.objective >= best * (1 - 1e-9) for r in result.results.values())


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ValueError, match=r"methods=\['nope'\] must be among"):
        solve(load_config(ROOT / "configs" / "tiny.yaml"), methods=("nope",))


def test_a_plan_proven_before_the_search_is_the_answer_at_once(tmp_path):
    """Identical requests: dp's plan (full batches at the one shape) is optimal and the pre-search bound proves it;
    the run says so instead of searching, and its plan equals the exhaustive optimum; a limit the bound cannot
    settle makes CP-SAT run."""
    from tests.brute import brute_force
    from tests.test_models_alone import config
    cfg, reqs = config(tmp_path / "same", {"a": ([100] * 6, [20] * 6)}, {"a": {}}, k=2, batch=3)
    best = brute_force(cfg, reqs)
    info = solve(cfg, methods=("cpsat",), requests=reqs).results["cpsat"].solver
    assert info["status"] == "OPTIMAL" and "search_note" in info and info["num_variables"] == 0
    assert info["objective"] == pytest.approx(best.objective, rel=1e-9)
    assert info["best_bound"] <= best.objective * (1 + 1e-9)
    cfg, reqs = config(tmp_path / "mixed", {"a": ([40, 100, 130, 60, 250, 190], [10, 12, 30, 10, 5, 40])},
                       {"a": {"sequential_time_ms": 900}}, k=2, batch=3)
    info = solve(cfg, methods=("cpsat",), requests=reqs).results["cpsat"].solver
    assert "search_note" not in info and info["num_variables"] > 0
