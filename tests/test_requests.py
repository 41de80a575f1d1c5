import numpy as np
import pytest

from models.errors import InputError
from models.requests import load_requests
from tests.helpers import ROOT, rows_from, write_jsonl


def test_jsonl_loads_in_order(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", rows_from([5, 7], [3, 9]))
    r = load_requests(path, "a")
    assert r.ids.tolist() == ["r-0", "r-1"]
    assert r.prompt.tolist() == [5, 7] and r.gen.tolist() == [3, 9]
    assert r.real_tokens == 24


def test_azure_csv_layout_recognized():
    r = load_requests(ROOT / "data" / "azure_llm_inference_2023_code.csv", "azure")
    assert len(r) == 8819
    assert r.prompt.max() == 7437 and r.gen.max() == 1899
    assert r.ids[0] == "r-000001" and r.lines[0] == 2


def test_csv_with_mapped_columns(tmp_path):
    from models.config import Columns
    p = tmp_path / "t.csv"
    p.write_text("id,ctx,out\na,3,4\nb,5,6\n")
    r = load_requests(p, "t", Columns(prompt_len="ctx", gen_len="out", request_id="id"))
    assert r.ids.tolist() == ["a", "b"] and r.gen.tolist() == [4, 6]


BAD_JSONL = [
    ('{"request_id": "a", "prompt_len": 3, "gen_len": 4}\n{"request_id": "b", "prompt_len": 3\n', ":2:", "JSON"),
    ('{"request_id": "a", "prompt_len": 3, "gen_len": 4}\n{"request_id": "b", "prompt_len": 0, "gen_len": 4}\n',
     ":2:", "prompt_len"),
    ('{"request_id": "a", "prompt_len": 3, "gen_len": -1}\n', ":1:", "gen_len"),
    ('{"request_id": "a", "prompt_len": 3.5, "gen_len": 4}\n', ":1:", "prompt_len"),
    ('{"request_id": "a", "prompt_len": "3", "gen_len": 4}\n', ":1:", "prompt_len"),
    ('{"request_id": "a", "prompt_len": 3, "gen_len": 4}\n{"request_id": "a", "prompt_len": 3, "gen_len": 4}\n',
     ":2:", "duplicates line 1"),
    ('{"request_id": "", "prompt_len": 3, "gen_len": 4}\n', ":1:", "request_id"),
    ('{"request_id": "a", "prompt_len": 3, "gen_len": 4, "extra": 1}\n', ":1:", "extra"),
    ('{"request_id": "a", "prompt_len": 3}\n', ":1:", "gen_len"),
    ('{"request_id": "a", "prompt_len": 3, "gen_len": 4}\n{"request_id": "b", "gen_len": 4}\n', ":2:", "prompt_len"),
    ("", "", "empty"),
]


@pytest.mark.parametrize("text,where,what", BAD_JSONL)
def test_bad_jsonl_names_line_and_field(tmp_path, text, where, what):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_requests(p)
    assert str(p) in str(e.value) and where in str(e.value) and what in str(e.value)


@pytest.mark.parametrize("text,where,what", [
    ("prompt_len,gen_len\n3,4\nx,5\n", ":3:", "prompt_len"),
    ("prompt_len,gen_len\n3,4\n5,\n", ":3:", "gen_len"),
    ("a,b\n3,4\n", ":1:", "unknown CSV layout"),
    ("prompt_len,gen_len\n", "", "only a header"),
    ("prompt_len,gen_len\n3,4,5,6\n", "", "malformed CSV"),
])
def test_bad_csv(tmp_path, text, where, what):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_requests(p)
    assert where in str(e.value) and what in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_requests(tmp_path / "nope.jsonl")


def test_large_csv_is_vectorized(tmp_path):
    n = 200_000
    p = tmp_path / "big.csv"
    rng = np.random.default_rng(0)
    body = "\n".join(f"{a},{b}" for a, b in zip(rng.integers(1, 2000, n), rng.integers(1, 500, n)))
    p.write_text("prompt_len,gen_len\n" + body + "\n")
    r = load_requests(p)
    assert len(r) == n and r.prompt.min() >= 1
