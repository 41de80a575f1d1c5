import numpy as np
import pytest

from models.instance import Instance, group_bucket
from models.pair_model import PairModel
from tests.helpers import brute_force
from tests.test_cpsat_model import CASES, tiny


def model_for(cfg, reqs, shapes):
    inst = Instance(cfg, reqs)
    classes = {n: group_bucket(r, np.asarray(shapes), 48) for n, r in reqs.items()}
    return inst, PairModel(cfg, inst.costs, shapes, reqs, cfg.objective.weight_map(), classes, 1e9)


def write_all_pairs(model):
    for b in model.buckets.values():
        g, c = np.meshgrid(np.arange(len(b.n)), np.arange(b.num_classes), indexing="ij")
        ok = (b.ci[c] >= b.gi[g]) & (b.cj[c] >= b.gj[g])
        b.add_pairs(g[ok], c[ok])


def requests_of(cfg):
    from solver.pipeline import load_all
    return load_all(cfg)


@pytest.mark.parametrize("prompts,gens,limits", CASES)
def test_mip_over_every_pair_equals_brute_force(tmp_path, prompts, gens, limits):
    """With every candidate shape and every pair written, the pair MIP is the exact joint problem."""
    cfg = tiny(tmp_path, prompts, gens, limits)
    reqs = requests_of(cfg)
    inst, model = model_for(cfg, reqs, Instance(cfg, reqs).all_shapes)
    write_all_pairs(model)
    res, _, _ = model.solve(30, integral=True)
    assert res.status == 0
    assert model.value(res) == pytest.approx(brute_force(cfg, reqs), rel=1e-6)


@pytest.mark.parametrize("prompts,gens,limits", CASES)
def test_column_generation_reaches_the_full_lp(tmp_path, prompts, gens, limits):
    """Pricing in from a few neighbours ends at the LP optimum over every pair."""
    cfg = tiny(tmp_path, prompts, gens, limits)
    reqs = requests_of(cfg)
    shapes = Instance(cfg, reqs).all_shapes
    _, full = model_for(cfg, reqs, shapes)
    write_all_pairs(full)
    res, _, _ = full.solve(30)
    _, cg = model_for(cfg, reqs, shapes)
    for b in cg.buckets.values():
        b.add_neighbours(span_i=0, span_j=0)
    priced = cg.price_in(30)
    assert priced.converged
    assert priced.columns <= sum(len(b.pg) for b in full.buckets.values())
    assert priced.lp_value == pytest.approx(full.value(res), rel=1e-7)
    assert priced.lp_value <= brute_force(cfg, reqs) * (1 + 1e-9)
