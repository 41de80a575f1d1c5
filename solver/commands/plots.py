"""PNG pictures: trace histograms, padding per shape and batch layout, method comparison, sweeps."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=90, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path


def histograms(name: str, prompt: np.ndarray, gen: np.ndarray, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, values, label in ((axes[0], prompt, "prompt_len"), (axes[1], gen, "gen_len")):
        ax.hist(values, bins=60, color="#4477aa")
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        ax.set_title(f"{name}: {label} (p50 {np.percentile(values, 50):.0f}, p99 {np.percentile(values, 99):.0f})")
    return save(fig, path)


def bucket_layout(name: str, req, plan, path: Path) -> Path:
    """Left: pad tokens per shape (prompt and gen). Right: batches as shape vs gen cap, sized by requests."""
    nb = plan.num_batches
    size = np.bincount(plan.batch_of, minlength=nb)
    gmax = np.zeros(nb, dtype=np.int64)
    np.maximum.at(gmax, plan.batch_of, req.gen)
    shape_of_req = plan.seq_align[plan.batch_of]
    shapes = np.unique(plan.seq_align[size > 0])
    prompt_pad = [int((shape_of_req - req.prompt)[shape_of_req == s].sum()) for s in shapes]
    gen_pad = [int((gmax[plan.batch_of] - req.gen)[shape_of_req == s].sum()) for s in shapes]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(shapes))
    axes[0].bar(x, prompt_pad, label="prompt padding")
    axes[0].bar(x, gen_pad, bottom=prompt_pad, label="gen padding")
    axes[0].set_xticks(x, [str(s) for s in shapes], rotation=45)
    axes[0].set_xlabel("seq_align")
    axes[0].set_ylabel("pad tokens")
    axes[0].legend()
    axes[0].set_title(f"{name}: padding per shape")
    used = size > 0
    axes[1].scatter(plan.seq_align[used], gmax[used], s=8 + 4 * size[used], alpha=0.5)
    axes[1].set_xlabel("seq_align")
    axes[1].set_ylabel("batch gen cap (longest gen)")
    axes[1].set_title(f"{name}: {int(used.sum())} batches (size = requests)")
    return save(fig, path)


def method_comparison(results: dict, path: Path) -> Path:
    names = list(results)
    cost = [results[m].total_cost for m in names]
    colors = ["#228833" if results[m].feasible else "#cc3311" for m in names]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(names, cost, color=colors)
    ax.set_ylabel("total cost")
    ax.set_title("methods (green: every limit met, red: some broken)")
    ax.tick_params(axis="x", rotation=30)
    return save(fig, path)


def sweep_plots(frame, keys: list[str], metrics: list[str], path: Path) -> Path:
    """One panel per metric against keys[0]; one line per combination of the other keys.
    Hollow markers: some limit broken at that point."""
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    key, others = keys[0], keys[1:]
    values = list(dict.fromkeys(frame[key].astype(str)))
    groups = frame.groupby([frame[o].astype(str) for o in others]) if others else [(None, frame)]
    for ax, metric in zip(axes.flat, metrics):
        for label, sub in groups:
            x = [values.index(v) for v in sub[key].astype(str)]
            text = None if label is None else ", ".join(f"{o.split('.')[-1]}={v}" for o, v in zip(others, label))
            line, = ax.plot(x, sub[metric], marker="o", label=text)
            bad = ~sub["limits_hold"].astype(bool)
            ax.scatter([xi for xi, b in zip(x, bad) if b], sub[metric][bad], s=60, facecolors="white",
                       edgecolors=line.get_color(), zorder=3)
        ax.set_xticks(range(len(values)), values)
        ax.set_xlabel(key)
        ax.set_title(metric)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
                   bbox_to_anchor=(0.5, -0.04))
    fig.suptitle("sweep (hollow: some limit broken)")
    fig.tight_layout()
    return save(fig, path)


def size_sweep(sizes, wall, memory, stages: dict, path: Path) -> Path:
    """Wall time per stage and peak memory against trace size (log-log)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].loglog(sizes, wall, "o-", color="black", label="total")
    for name, values in stages.items():
        if any(v > 0 for v in values):
            axes[0].loglog(sizes, [max(v, 1e-3) for v in values], ".--", label=name)
    axes[0].set_xlabel("requests")
    axes[0].set_ylabel("seconds")
    axes[0].set_title("wall time per stage")
    axes[0].legend(fontsize=8)
    axes[1].semilogx(sizes, memory, "o-", color="#aa3377")
    axes[1].set_xlabel("requests")
    axes[1].set_ylabel("peak memory (MiB)")
    axes[1].set_title("peak resident memory")
    return save(fig, path)
