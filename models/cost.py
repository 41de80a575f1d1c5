"""The cost model of spec section 4, vectorized; the one implementation everything uses."""
from __future__ import annotations

import numpy as np

from models.config import CostModel


def quad(c, x):
    """q(c, x) = c0 + c1*x + c2*x^2, elementwise."""
    x = np.asarray(x, dtype=np.float64)
    return c[0] + c[1] * x + c[2] * x * x


def quad_sum(c, s, steps):
    """Q(c, s, G) = sum_{t=0}^{G-1} q(c, s + t), by the closed form."""
    s = np.asarray(s, dtype=np.float64)
    g = np.asarray(steps, dtype=np.float64)
    t1 = g * (g - 1) / 2.0                      # sum of t
    t2 = (g - 1) * g * (2 * g - 1) / 6.0        # sum of t^2
    return c[0] * g + c[1] * (g * s + t1) + c[2] * (g * s * s + 2 * s * t1 + t2)


class Costs:
    """Cost and latency of batches and shapes under one `CostModel`."""

    def __init__(self, model: CostModel):
        self.model = model

    def per_request(self, seq_align, gen_cap):
        """Cost one request adds to a batch of shape seq_align and max gen gen_cap."""
        m = self.model
        return quad(m.prefill_cost, seq_align) + quad_sum(m.decode_step_cost, seq_align, gen_cap)

    def batch_cost(self, seq_align, gen_cap, size):
        """cost(b) = n * (prefill + decode) + batch overhead."""
        return np.asarray(size, dtype=np.float64) * self.per_request(seq_align, gen_cap) + \
            self.model.batch_overhead_cost

    def latency(self, seq_align, gen_cap):
        """Latency of every request in a batch (shape seq_align, max gen gen_cap)."""
        m = self.model
        return quad(m.prefill_ms, seq_align) + quad_sum(m.decode_step_ms, seq_align, gen_cap) + m.batch_overhead_ms

    def compile(self, seq_align):
        """Compile cost of one shape."""
        return quad(self.model.compile_cost, seq_align)

    # --- spec 4b: member terms with prefill length L, decode context C and longest gen G -----------
    def member_cost(self, length, context, gen_cap):
        """q(prefill_cost, L) + Q(decode_step_cost, C, G)."""
        m = self.model
        return quad(m.prefill_cost, length) + quad_sum(m.decode_step_cost, context, gen_cap)

    def member_latency(self, length, context, gen_cap):
        """q(prefill_ms, L) + Q(decode_step_ms, C, G) + batch overhead (first-use latency not included)."""
        m = self.model
        return quad(m.prefill_ms, length) + quad_sum(m.decode_step_ms, context, gen_cap) + m.batch_overhead_ms

    @property
    def context_mode(self) -> bool:
        """Spec 4b where a batch's numbers depend on its longest aligned prompt, not on its shape: the
        shape only has to cover that prompt (decode from the batch, prefill and padding per request)."""
        m = self.model
        return (m.decode_context, m.prefill_length, m.prompt_pad) == ("batch", "request", "request")


def percentile_nearest_rank(values: np.ndarray, pct: float) -> float:
    """pXX by nearest rank: sorted values, index ceil(XX/100 * n) - 1."""
    values = np.sort(np.asarray(values, dtype=np.float64))
    n = len(values)
    if n == 0:
        return 0.0
    index = max(int(np.ceil(round(pct / 100.0 * n, 9))) - 1, 0)
    return float(values[index])


def allowed_over(n: int, pct: float) -> int:
    """How many of n requests may exceed the pXX limit: n - ceil(pct/100 * n)."""
    return n - int(np.ceil(round(pct / 100.0 * n, 9)))
