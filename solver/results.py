"""What a run produced: each method's verified plans and exact metrics, and the stage timings."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from models.config import Config
from models.plan import BucketPlan
from models.requests import Requests
from solver.verify import BucketMetrics, rank


@dataclass
class MethodResult:
    """One method's plans and their exact metrics."""

    method: str
    plans: dict[str, BucketPlan]
    metrics: dict[str, BucketMetrics]
    shapes: list[int]
    total_cost: float
    objective: float
    time_s: float
    solver: dict = field(default_factory=dict)      # cpsat only: status, best_bound, gap, ...

    @property
    def feasible(self) -> bool:
        return all(not m.broken() for m in self.metrics.values())

    limits_of: dict = field(default_factory=dict)

    def rank(self) -> tuple:
        """Plans meeting every limit first, then least violation, then objective."""
        return rank(self.metrics, self.limits_of, self.objective)


@dataclass
class SolveResult:
    """Everything a run produced, for the report, the CLI and the Python API."""

    config: Config
    requests: dict[str, Requests]
    results: dict[str, MethodResult]
    stage_s: dict[str, float]

    @property
    def lead(self) -> MethodResult:
        """The cpsat result when it ran, else the first method's."""
        return self.results.get("cpsat") or next(iter(self.results.values()))

    def summary(self):
        """One row per method and bucket: the metrics of spec section 4 and whether the limits hold."""
        import pandas as pd

        rows = []
        for method, r in self.results.items():
            for name, m in r.metrics.items():
                rows.append({"method": method, "bucket": name, "cost": m.cost, "pad_ratio": m.pad_ratio,
                             "pad_tokens": m.pad_tokens, "p95_latency_ms": m.p95_latency_ms,
                             "p99_latency_ms": m.p99_latency_ms, "sequential_time_ms": m.sequential_time_ms,
                             "num_batches": m.num_batches, "limits_hold": not m.broken(),
                             "total_cost": r.total_cost, "shapes": r.shapes})
        return pd.DataFrame(rows)

    def plan(self, method: str, bucket: str):
        """The plan of one method and bucket, one row per request."""
        import pandas as pd

        from models.plan import batch_id_strings

        p, req = self.results[method].plans[bucket], self.requests[bucket]
        bids = p.batch_ids if p.batch_ids is not None else batch_id_strings(bucket, p.num_batches)
        return pd.DataFrame({"request_id": req.ids, "batch_id": bids[p.batch_of],
                             "seq_align": p.seq_align[p.batch_of], "prompt_len": req.prompt, "gen_len": req.gen})

    def report(self) -> dict:
        """The report.json content (spec section 6)."""
        from solver.commands.report import build_report   # the commands use results, not the other way round
        return build_report(self)

    def write(self, out_dir) -> dict:
        """Write the verified plans and the report atomically; returns the report."""
        from solver.commands.output import write_outputs
        report = self.report()
        write_outputs(self, Path(out_dir), report)
        return report


class Stages(dict):
    """Wall time per pipeline stage (load, bounds, heuristics, cpsat, postprocess, verify), in seconds."""

    @contextmanager
    def timed(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.monotonic() - start


