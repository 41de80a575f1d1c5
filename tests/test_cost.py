import numpy as np
from hypothesis import given, strategies as st

from models.config import CostModel
from models.cost import Costs, allowed_over, percentile_nearest_rank, quad, quad_sum
from tests.helpers import Q, batch_numbers


@given(st.tuples(*(st.floats(0, 1e4) for _ in range(3))), st.integers(1, 3000), st.integers(1, 400))
def test_closed_form_equals_loop(c, s, g):
    assert np.isclose(quad_sum(c, s, g), Q(c, s, g), rtol=1e-9, atol=1e-6)


def test_hand_computed_batch():
    cm = CostModel()
    costs = Costs(cm)
    # s = 64, G = 2: prefill q = 4096*64 + 64^2 = 266240; decode q(64) + q(65) = 266240 + 270465
    per = 266240 + 266240 + 270465
    assert costs.per_request(64, 2) == per
    assert costs.batch_cost(64, 2, 3) == 3 * per + 1e7
    lat = (1 + 0.05 * 64 + 1e-5 * 64 ** 2) + (15 + 0.002 * 64) + (15 + 0.002 * 65) + 2
    assert np.isclose(costs.latency(64, 2), lat)
    assert np.allclose(batch_numbers(cm, 64, [(10, 2), (64, 1), (5, 2)]), (3 * per + 1e7, lat))


def test_compile_and_quad():
    assert Costs(CostModel()).compile(128) == 5e8 + 1000 * 128 ** 2
    assert quad((1, 2, 3), 2) == 17


def test_nearest_rank():
    v = np.arange(1, 21)
    assert percentile_nearest_rank(v, 95) == 19 and percentile_nearest_rank(v, 99) == 20
    assert allowed_over(20, 95) == 1 and allowed_over(100, 99) == 1 and allowed_over(5, 95) == 0


def test_nearest_rank_is_ceiled_not_rounded():
    """Hand-computed ranks where ceil, round and a wrong divisor disagree (spec 4: index ceil(XX/100 n) - 1)."""
    assert percentile_nearest_rank(np.array([7.0]), 95) == 7.0            # n = 1: the only value
    assert percentile_nearest_rank(np.array([]), 95) == 0.0
    v = np.arange(30, 0, -1)                                              # unsorted input, 30 values
    assert percentile_nearest_rank(v, 95) == 29                           # ceil(28.5) = 29, round would give 28
    assert allowed_over(30, 95) == 1
    v = np.arange(1, 201)
    assert percentile_nearest_rank(v, 95) == 190 and percentile_nearest_rank(v, 99) == 198
    assert allowed_over(200, 95) == 10 and allowed_over(200, 99) == 2
