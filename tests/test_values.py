"""A JSON value or a written number to a checked number or array (attncli/base/values.py): a list
where a number belongs, integers too long to convert, the decimals a number is written with."""

import pytest

from attncli.base.values import MAX_DECIMALS, Typed
from tests.conftest import SAMPLES, assert_error

QKV = {"Q": [[1, 2]], "K": [[1, 2], [3, 4]], "V": [[1], [2]]}


DIGITS_5000 = "9" * 5000  # more digits than Python's int() reads by default (4300)


def test_a_list_where_a_number_belongs_is_named(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a list where a
    number belongs (only the first row's leaves are checked by shape) is named."""
    assert_error(run("compute", "--q", "[[1,2],[[3],4]]", "--k", "1,2", "--v", "1"),
                 "--q: Q[1][0] is a list of 1; expected a number")
    path = problem_file(dict(QKV, K=[[1, 2], [[3, 4], 5]]))
    assert_error(run("compute", path), "K[1][0] is a list of 2; expected a number")
    path = problem_file({"Q": [[[1, 2], [3, 4]], [[5, 6], [[7], 8]]], "K": [[[1, 2]], [[1, 2]]],
                         "V": [[[1]], [[1]]]})
    assert_error(run("compute", path), "Q[1][1][0] is a list of 1; expected a number")


@pytest.mark.parametrize("key, fragment", [
    ("scale", "scale is a 401-digit integer, too large for float64"),
    ("heads", "heads is a 401-digit number; expected a whole number from 1 to 1,000,000"),
])
def test_401_digit_settings(run, problem_file, key, fragment):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: huge integers
    are measured by their digits, never converted (no OverflowError, no int() advice)."""
    path = problem_file(dict(QKV, **{key: 10**400}))
    assert_error(run("compute", path), f"{path}: {fragment}")


def test_a_huge_float_heads_is_refused_before_it_becomes_an_integer(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a huge float
    heads is refused before it becomes an integer."""
    assert_error(run("compute", problem_file(dict(QKV, heads=1e300))), "heads is the number 1e+300")
    assert_error(run("compute", "--q", "1,2", "--k", "1,2", "--v", "1", "--heads", str(10**400)),
                 "--heads: heads is a 401-digit number")


@pytest.mark.parametrize("text, fragment", [
    ('{"Q": [[1, %s]], "K": [[1, 2]], "V": [[1]]}', "Q[0][1] is a 5000-digit integer, too large for float64"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "scale": -%s}', "scale is a 5000-digit integer"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "heads": %s}', "heads is a 5000-digit number"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": %s}', "title is a 5000-digit number; expected a string"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "mask": [[%s]]}', "mask[0][0] is a 5000-digit number"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "bias": [[%s]]}', "bias[0][0] is a 5000-digit integer"),
    ('{"Q": [[1, %s.5]], "K": [[1, 2]], "V": [[1]]}', "the number 99999999999999999999…999.5 (5002 characters) "
                                                     "overflows float64"),
])
def test_5000_digit_numbers_in_json(run, problem_file, text, fragment):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: 5000-digit
    numbers in JSON (more digits than int() reads by default) are named, not converted."""
    result = run("compute", problem_file(text % DIGITS_5000))
    assert_error(result, fragment)
    assert "set_int_max_str_digits" not in result.stderr and len(result.stderr) < 300


def test_5000_digit_numbers_inline_and_in_answers(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: 5000-digit
    numbers inline and in answers are named, not converted."""
    result = run("compute", "--q", DIGITS_5000, "--k", "1", "--v", "1")
    assert_error(result, '--q: row 1, column 1: "99999999999999999999…99999" (5000 characters) is not a finite number')
    assert len(result.stderr) < 300
    answers = problem_file('{"weights": [[%s, 0, 0]]}' % DIGITS_5000, "answers.json")
    result = run("check", answers, SAMPLES / "scooter.json")
    assert_error(result, "weights[0][0] is a 5000-digit integer")
    assert "set_int_max_str_digits" not in result.stderr


@pytest.mark.parametrize("token, decimals", [("0.0454", 4), ("4.54e-2", 4), ("3", 0), ("1e5", 0),
                                             ("0e-99999999999999999999", MAX_DECIMALS),
                                             ("1e+" + DIGITS_5000, 0), ("1." + "0" * 1000, MAX_DECIMALS)])
def test_written_decimals_are_capped(token, decimals):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: the decimals
    of a written number are capped (absurd exponents, 1000 zeros)."""
    assert Typed.parse(token).decimals == decimals
