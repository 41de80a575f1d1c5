"""Fit the cost model's quadratics to measured timings (non-negative least squares).

The profile is a CSV with a `phase` column (prefill, decode_step, compile, batch_overhead), a
`seq_len` column (x of spec section 4: seq_align for prefill and compile, the context length for
a decode step) and one or both of `ms` (latency) and `cost`. Lines starting with `#` are comments.
"""
from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from models.errors import InputError
from models.files import read_text
from solver.commands.output import open_folder, replace_set

PHASES = ("prefill", "decode_step", "compile", "batch_overhead")
MAX_VALUE = 1e15                            # a measured seq_len, ms or cost: squares stay far from overflow
UNITS = ("ms", "cost")


@dataclass
class Fit:
    """One fitted phase: key in cost_model, coefficients, and how well they explain the data."""

    key: str
    coeffs: list[float]
    r2: float                                   # nan for a constant (batch overhead)
    x: np.ndarray
    y: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        c = self.coeffs
        return c[0] + (c[1] * x + c[2] * x * x if len(c) == 3 else 0)


def read_profile(path: Path) -> pd.DataFrame:
    text = read_text(path, "profile")
    try:
        frame = pd.read_csv(io.StringIO(text), comment="#", skip_blank_lines=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise InputError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in ("phase", "seq_len") if c not in frame.columns]
    if missing or not any(u in frame.columns for u in UNITS):
        raise InputError(f"{path}: needs columns phase, seq_len and ms and/or cost (found {list(frame.columns)})")
    lines = data_lines(text)
    for col in ["seq_len"] + [u for u in UNITS if u in frame.columns]:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.isna() & frame[col].notna() | (values < 0) | (values.abs() > MAX_VALUE)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{path}:{lines[i]}: {col}={str(frame[col].iloc[i])!r} must be a finite number "
                             f"between 0 and {MAX_VALUE:g}")
        frame[col] = values
    unknown = ~frame["phase"].isin(PHASES)
    if unknown.any():
        i = int(np.flatnonzero(unknown.to_numpy())[0])
        raise InputError(f"{path}:{lines[i]}: phase {frame['phase'].iloc[i]!r} must be one of {', '.join(PHASES)}")
    return frame


def data_lines(text: str) -> list[int]:
    """File line number of each data row (after the header, skipping comments and blanks)."""
    numbers = [i for i, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    return numbers[1:]


def nonneg_lstsq(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0, exact by trying each support (3 columns at most)."""
    best, best_err = np.zeros(A.shape[1]), float(np.sum(y * y))
    for r in range(1, A.shape[1] + 1):
        for cols in itertools.combinations(range(A.shape[1]), r):
            sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            coef = np.zeros(A.shape[1])
            coef[list(cols)] = sol
            err = float(np.sum((A @ coef - y) ** 2))
            if err < best_err - 1e-12 * max(best_err, 1.0):
                best, best_err = coef, err
    return best


def fit_phase(frame: pd.DataFrame, phase: str, unit: str, path: Path) -> Fit | None:
    rows = frame[(frame["phase"] == phase) & frame[unit].notna()]
    if rows.empty:
        return None
    x, y = rows["seq_len"].to_numpy(float), rows[unit].to_numpy(float)
    key = f"batch_overhead_{unit}" if phase == "batch_overhead" else f"{phase}_{unit}"
    if phase == "batch_overhead":
        coeffs = [float(y.mean())]
    else:
        if len(np.unique(x)) < 3:
            raise InputError(f"{path}: phase {phase} ({unit}) needs measurements at 3 or more distinct seq_len "
                             f"values to fit a quadratic (found {len(np.unique(x))})")
        scale = max(float(x.max()), 1.0)                  # conditioning: fit in x / scale
        A = np.stack([np.ones_like(x), x / scale, (x / scale) ** 2], axis=1)
        c = nonneg_lstsq(A, y)
        coeffs = [float(c[0]), float(c[1] / scale), float(c[2] / scale ** 2)]
    fit = Fit(key, coeffs, 0.0, x, y)
    resid = y - fit.predict(x)
    total = float(np.sum((y - y.mean()) ** 2))
    fit.r2 = 1.0 - float(np.sum(resid ** 2)) / total if total > 0 and len(coeffs) == 3 else float("nan")
    return fit


def calibrate(path: Path) -> list[Fit]:
    frame = read_profile(path)
    fits = [fit_phase(frame, phase, unit, path) for phase in PHASES for unit in UNITS if unit in frame.columns]
    fits = [f for f in fits if f is not None and not (f.key == "compile_ms")]
    if not fits:
        raise InputError(f"{path}: no measurements to fit")
    return fits


def yaml_block(fits: list[Fit]) -> str:
    block = {f.key: (f.coeffs[0] if len(f.coeffs) == 1 else [float(f"{c:.6g}") for c in f.coeffs]) for f in fits}
    text = yaml.safe_dump({"cost_model": block}, default_flow_style=None, sort_keys=False)
    return "# fitted by scripts/calibrate.py; paste into your config\n" + text


def residual_plot(fits: list[Fit], path: Path) -> Path:
    from solver.commands.plots import plt, save

    quads = [f for f in fits if len(f.coeffs) == 3]
    fig, axes = plt.subplots(2, max(len(quads), 1), figsize=(4 * max(len(quads), 1), 6), squeeze=False)
    for col, f in enumerate(quads):
        order = np.argsort(f.x)
        axes[0, col].scatter(f.x, f.y, s=10, label="measured")
        axes[0, col].plot(f.x[order], f.predict(f.x[order]), color="black", label="fit")
        axes[0, col].set_title(f"{f.key}  R²={f.r2:.4f}")
        axes[0, col].legend(fontsize=7)
        axes[1, col].scatter(f.x, f.y - f.predict(f.x), s=10, color="#cc3311")
        axes[1, col].axhline(0, color="black", lw=0.8)
        axes[1, col].set_xlabel("seq_len")
        axes[1, col].set_ylabel("residual")
    return save(fig, path)


OUTPUTS = ("cost_model.yaml", "residuals.png")


def write_fit(fits: list[Fit], profile: Path, out_dir: Path) -> Path:
    """cost_model.yaml and residuals.png swapped into `out_dir` atomically, beside its other files (only
    files shapeplan wrote are replaced; never beside the profile); the resolved folder."""
    files = {"cost_model.yaml": yaml_block(fits).encode()}
    with open_folder(out_dir, [profile], OUTPUTS) as out:
        replace_set(out, files, lambda stage: [residual_plot(fits, stage / "residuals.png")], keep_others=True)
    return out
