import pytest

from models.config import load_config
from models.errors import InputError
from tests.helpers import ROOT


def test_default_config_loads_with_floats():
    cfg = load_config(ROOT / "configs" / "default.yaml")
    assert isinstance(cfg.cost_model.batch_overhead_cost, float) and cfg.cost_model.batch_overhead_cost == 1e7
    assert cfg.buckets[0].limits.sequential_time_ms == 1.8e5
    assert cfg.buckets[0].requests.is_absolute() and cfg.buckets[0].requests.exists()


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


BASE = "buckets:\n  - name: a\n    requests: a.jsonl\n"


@pytest.mark.parametrize("extra,where,what", [
    ("shapes:\n  max_uniq: 3\n", ":5", "unknown key 'max_uniq'"),
    ("shapes:\n  max_unique: 0\n", ":5", "shapes.max_unique"),
    ("shapes:\n  granularity: 64\n  candidates: [100]\n", ":6", "multiple of granularity"),
    ("cost_model:\n  prefill_ms: [1, -2, 0]\n", ":5", "prefill_ms"),
    ("batching:\n  max_batch_size: abc\n", ":5", "max_batch_size"),
    ("objective:\n  minimize: speed\n", ":5", "minimize"),
])
def test_bad_config_names_key_and_line(tmp_path, extra, where, what):
    p = write(tmp_path, BASE + extra)
    with pytest.raises(InputError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and where in msg and what in msg


def test_negative_limit(tmp_path):
    p = write(tmp_path, BASE + "    limits:\n      cost: -1\n")
    with pytest.raises(InputError, match="buckets\\[0\\].limits"):
        load_config(p)


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, BASE + "shapes: [\n")
    with pytest.raises(InputError, match="YAML syntax error"):
        load_config(p)


def test_overrides(tmp_path):
    p = write(tmp_path, BASE)
    cfg = load_config(p, {"shapes.max_unique": 3, "buckets.*.limits.cost": 5.0})
    assert cfg.shapes.max_unique == 3 and cfg.buckets[0].limits.cost == 5.0
