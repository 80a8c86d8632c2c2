"""One rounding for every view (`document.round_finite`): a finite number stays finite, and float32
rounds in its own precision (`--round 4` writes 0.7679, not 0.7678999900817871)."""

import json
import warnings

import numpy as np
import pytest
from conftest import SAMPLES
from hypothesis import example, given
from hypothesis import strategies as st

from attncli.base.arrays import EXACT_INTEGERS, plain, round_finite

HUGE = json.dumps({"Q": [[1, 0]], "K": [[1, 0]], "V": [[1e306, 2]]})
# (format options, the text written for 1e306 rounded to 3 decimals, for float32's 0.7679)
FORMATS = {
    "csv": (["--format", "csv", "--round", "3"], "1e+306", "0.7679"),
    "json": (["--format", "json", "--round", "3"], "1e+306", "0.7679"),
    "markdown": (["--format", "markdown", "--precision", "3"], "1.000e+306", "0.7679"),
    "latex": (["--format", "latex", "--precision", "3"], "1.000e+306", "0.7679"),
}


@pytest.mark.parametrize("view", sorted(FORMATS))
def test_a_huge_finite_number_stays_finite_with_no_warning(run, view):
    options, written, _ = FORMATS[view]
    result = run("compute", "-", "--stages", "output", *options, input=HUGE)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""  # no numpy RuntimeWarning
    assert written in result.stdout
    assert "inf" not in result.stdout.lower().replace("\\infty", "")


@pytest.mark.parametrize("view", sorted(FORMATS))
def test_float32_rounds_in_its_own_precision(run, view):
    options, _, written = FORMATS[view]
    options = [("4" if o in ("3",) else o) for o in options]
    result = run("compute", SAMPLES / "scooter.json", "--dtype", "float32", "--stages", "weights", *options)
    assert result.exit_code == 0, result.stderr
    assert written in result.stdout
    assert "0.76789999" not in result.stdout


def test_float32_json_weights_are_the_decimals():
    from attncli import attend
    from attncli.render.json import document

    trace = attend(Q=[[0, 4]], K=[[1, 0], [0, 1], [.5, .5]], V=[[2, 0], [0, 2], [1, -1]], dtype="float32")
    doc = json.loads(document(trace, ("weights",), 4))
    assert doc["heads"][0]["weights"] == [[0.0454, 0.7679, 0.1867]]


def test_round_finite():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert round_finite(np.array([1e306, 2.00049]), 3).tolist() == [1e306, 2.0]
        assert round_finite(np.array([-1e308, 2.0**53 + 2]), 5).tolist() == [-1e308, 2.0**53 + 2]
    rounded = round_finite(np.array([0.7679], dtype=np.float32), 4)
    assert rounded.dtype == np.float64 and rounded.tolist() == [0.7679]
    assert round_finite(np.array([-np.inf, 0.12345]), 2).tolist() == [-np.inf, 0.12]


HUGE_ROUNDED = {"Q": [[0] * 12, [0] * 10 + [1e154, 0]], "K": [[0] * 10 + [1e154, 0]], "V": [[0, 0, 0]], "heads": 3}


def test_round_keeps_huge_finite_values(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: rounding never
    turns a finite number into infinity (--round 3 on 1e308)."""
    doc = run.json("compute", problem_file(HUGE_ROUNDED), "--round", "3")
    assert doc["heads"][2]["scores"] == [[0.0], [1e308]]
    assert doc["heads"][2]["scaled"] == [[0.0], [5e307]]


@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 17))
@example(1e308, 3)
@example(-1.7976931348623157e308, 17)
@example(2.0**52 - 0.5, 0)
@example(123.456789, 2)
def test_plain_rounds_without_overflow(x, decimals):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: document
    rounding (plain) never overflows, whatever the number and the decimals."""
    (value,) = plain(np.array([x]), decimals)
    assert np.isfinite(value)
    if abs(x) >= EXACT_INTEGERS:
        assert value == x  # already a whole number: nothing to round
    else:
        assert value == np.round(x, decimals)


def test_plain_keeps_minus_infinity_as_null_when_rounding():
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: document
    rounding keeps −∞ as null."""
    assert plain(np.array([-np.inf, 1e300, 0.12345]), 2) == [None, 1e300, 0.12]
