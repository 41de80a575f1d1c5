"""Usage errors are bad input for every script (spec section 7): exit 1, one message, no traceback."""
import pytest

from solver.commands import cli
from tests.helpers import ROOT

TINY = str(ROOT / "configs" / "tiny.yaml")
CASES = [
    ("solve_main", []), ("solve_main", [TINY, "--bogus"]), ("solve_main", [TINY, "--method", "nonsense"]),
    ("solve_main", [TINY, "--time-limit", "nan"]),
    ("verify_main", []), ("verify_main", [TINY]), ("verify_main", [TINY, "x", "--bogus"]),
    ("analyze_main", []), ("analyze_main", [TINY, "--bogus"]),
    ("sweep_main", []), ("sweep_main", [TINY, "--time-limit", "inf"]), ("sweep_main", [TINY, "--jobs", "-1"]),
    ("sweep_main", [TINY, "--jobs", "abc"]), ("sweep_main", [TINY, "--method", "all"]),
    ("export_main", []), ("export_main", ["x"]), ("export_main", ["x", "--format"]),
    ("calibrate_main", []), ("calibrate_main", ["p.csv", "--bogus"]),
]


@pytest.mark.parametrize("name,argv", CASES, ids=[f"{n}:{' '.join(a)[-30:]}" for n, a in CASES])
def test_usage_error_exit_1_one_message(name, argv, capsys):
    assert getattr(cli, name)(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "--help" in err
