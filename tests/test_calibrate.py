import numpy as np
import pytest
import yaml

from models.config import load_config
from solver.commands.calibrate import calibrate, nonneg_lstsq
from solver.commands.cli import calibrate_main
from tests.helpers import ROOT


def write_profile(path, rows):
    path.write_text("phase,seq_len,ms,cost\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_exact_quadratics_are_recovered(tmp_path):
    xs = [64, 128, 512, 1024, 2048]
    rows = [("prefill", x, 1 + 0.05 * x + 1e-5 * x * x, 4096 * x + x * x) for x in xs]
    rows += [("decode_step", x, 15 + 0.002 * x, "") for x in xs]
    fits = {f.key: f for f in calibrate(write_profile(tmp_path / "p.csv", rows))}
    assert fits["prefill_ms"].coeffs == pytest.approx([1, 0.05, 1e-5], rel=1e-6)
    assert fits["prefill_cost"].coeffs == pytest.approx([0, 4096, 1], abs=1e-6)
    assert fits["decode_step_ms"].coeffs == pytest.approx([15, 0.002, 0], abs=1e-9)
    assert "decode_step_cost" not in fits
    assert all(f.r2 == pytest.approx(1.0) for f in fits.values())


def test_fit_is_never_negative():
    x = np.linspace(0, 1, 20)
    A = np.stack([np.ones_like(x), x, x * x], axis=1)
    y = 5 - 3 * x + 0.1 * x * x                   # a falling curve: the best allowed fit is flat
    c = nonneg_lstsq(A, y)
    assert (c >= 0).all()
    free, *_ = np.linalg.lstsq(A, y, rcond=None)
    assert np.sum((A @ c - y) ** 2) >= np.sum((A @ free - y) ** 2)
    for trial in np.random.default_rng(1).random((30, 3)):         # no non-negative point does better
        assert np.sum((A @ trial - y) ** 2) >= np.sum((A @ c - y) ** 2) - 1e-9


def test_example_profile_block_pastes_into_a_config(tmp_path, capsys):
    assert calibrate_main([str(ROOT / "data" / "example_profile.csv"), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "R²" in text and "cost_model:" in text
    block = yaml.safe_load((tmp_path / "cost_model.yaml").read_text())["cost_model"]
    assert (tmp_path / "residuals.png").stat().st_size > 1000
    overrides = {f"cost_model.{k}": v for k, v in block.items()}
    cfg = load_config(ROOT / "configs" / "default.yaml", overrides)
    assert cfg.cost_model.prefill_ms[1] == pytest.approx(0.05, rel=0.1)       # example data: 3% noise
    assert cfg.cost_model.decode_step_cost[1] == pytest.approx(4096, rel=0.05)


@pytest.mark.parametrize("text,what", [
    ("phase,seq_len,ms\nprefill,64,1\nprefill,x,2\n", "p.csv:3: seq_len='x' must be a finite number"),
    ("phase,seq_len,ms\nwarmup,64,1\n", "p.csv:2: phase 'warmup' must be one of"),
    ("phase,len,ms\nprefill,64,1\n", "needs columns phase, seq_len"),
    ("phase,seq_len,ms\nprefill,64,1\nprefill,128,2\n", "3 or more distinct seq_len"),
    ("phase,seq_len,ms\n# note\nprefill,64,-1\n", "p.csv:3: ms='-1' must be"),
])
def test_bad_profile_is_one_clear_error(tmp_path, capsys, text, what):
    (tmp_path / "p.csv").write_text(text)
    assert calibrate_main([str(tmp_path / "p.csv"), "--out", str(tmp_path / "o")]) == 1
    assert what in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
