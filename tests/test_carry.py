"""The carry (attncli/hand/carry.py): what `--carry rounded` means, a learner with a calculator
who re-types each step's printed numbers, except a key's logit and √d_k; exact carry by contrast."""

import re
from decimal import Decimal

import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.hand.carry import Writer, held, root
from attncli.render.explain import explain
from tests.conftest import SAMPLES, SCOOTER

ROUNDED_TEXTBOOK = """\
Step 2: scale by 1/√d_k, d_k = 2, √2 ≈ 1.4142 (used unrounded, as a calculator's √ key gives it)
  mechanic: 0.0000 / √2 = 0.0000
  scooter:  4.0000 / √2 = 2.8284
  petrol:   2.0000 / √2 = 1.4142
Step 3: softmax
  e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321  (2.82842…, 1.41421… unrounded)
  mechanic = 1.0000 / 22.0321 = 0.0454 (4.5%)
  scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)
  petrol   = 4.1133 / 22.0321 = 0.1867 (18.7%)
Step 4: weighted sum of values
  0.0454 × [2.0, 0.0] = [0.0908, 0.0000]
  0.7679 × [0.0, 2.0] = [0.0000, 1.5358]
  0.1867 × [1.0, -1.0] = [0.1867, -0.1867]
  sum = [0.2775, 1.3491]
  with exact arithmetic: [0.2775, 1.3491] (the same)"""


def test_rounded_carry_gives_the_textbooks_digits_at_4_decimals(run):
    """Issue 19's leftovers from earlier trials: --carry rounded gives the textbook's digits at 4 decimals
    (√2 used unrounded, a logit not re-typed)."""
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded").stdout
    assert ROUNDED_TEXTBOOK in out
    # not 4 / 1.4142 = 2.8285 (a printed √2), nor e^2.8284 = 16.9184 (a re-typed logit)
    assert "2.8285" not in out and "16.9184" not in out and "22.0333" not in out


def test_rounded_carry_says_what_it_carries_in_the_output_and_in_help(run):
    """Issue 19's leftovers from earlier trials: --carry rounded says what it carries, in the output and in
    --help."""
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded").stdout
    assert ("Rounded carry: 4 decimals, as a learner with a calculator: each step re-types the numbers printed "
            "before it, except a key's logit, which stays on the display unrounded from its dot product to e^x "
            "(÷ √d_k, softcap, + bias); √d_k itself is not rounded.") in out
    help_text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", run("compute", "--help", env={"COLUMNS": "200"}).stdout).split())
    assert "rounded (a learner carrying --precision decimals on a calculator: each step re-types the numbers " \
           "printed before it, except a key's logit, unrounded on the display from its dot product to e^x; " \
           "√d_k is not rounded;" in help_text


def test_the_logit_stays_unrounded_through_the_bias_and_the_softcap_and_says_so():
    """Issue 19's leftovers from earlier trials: under rounded carry a key's logit stays unrounded through
    the bias and the softcap, and the line says so."""
    # 4/√2 + 0.5 = 3.32842…: e^3.32842… = 27.8944, where a re-typed 3.3284 would give 27.8932.
    doc = {**SCOOTER, "bias": [[0, 0.5, 0]]}
    lines = explain(attend(build_problem(doc)), carry="rounded")
    assert "  1: 4.0000 / √2 = 2.8284" in lines and "  1: 2.8284 + 0.5 = 3.3284" in lines
    assert "  e^0.0000 = 1.0000   e^3.3284 = 27.8944   e^1.4142 = 4.1133   sum = 33.0077  " \
           "(3.32842…, 1.41421… unrounded)" in lines
    capped = explain(attend(build_problem({**doc, "softcap": 2.0})), carry="rounded")
    # 2 tanh(2.82842… / 2) = 1.77677…; + 0.5 = 2.27677…: e^2.27677… = 9.7452 (e^2.2768 = 9.7454)
    assert "  1: 2 · tanh(2.8284 / 2) = 1.7768" in capped and "  1: 1.7768 + 0.5 = 2.2768" in capped
    assert "  e^0.0000 = 1.0000   e^2.2768 = 9.7452   e^1.2177 = 3.3795   sum = 14.1247  " \
           "(2.27677…, 1.21771… unrounded)" in capped


def test_a_whole_root_and_a_given_scale_are_written_as_numbers():
    """Issue 19's leftovers from earlier trials: a whole root (√4 = 2) and a given scale are written as
    numbers."""
    four = {"Q": [[1, 1, 1, 1]], "K": [[1, 0, 0, 0], [0, 1, 0, 0]], "V": [[1], [2]]}
    lines = explain(attend(build_problem(four)), carry="rounded")
    assert "Step 2: scale by 1/√d_k, d_k = 4, √4 = 2.0000" in lines and "  0: 1.0000 / 2.0000 = 0.5000" in lines
    given = explain(attend(build_problem({**SCOOTER, "scale": 0.5})), carry="rounded")
    assert "  1: 4.0000 × 0.5 = 2.0000" in given


def test_the_root_and_the_held_number():
    """Issue 19's leftovers from earlier trials: carry.root and the held number: rounded carry keeps √d_k
    and a logit unrounded, and arithmetic re-types a printed number."""
    true, used, symbol = root(2, 4, "rounded")
    assert symbol == "√2" and str(used).startswith("1.41421356237309504880") and true == 2 ** 0.5
    assert root(2, 4, "exact")[1:] == (Decimal("1.4142"), None)  # the textbook divides by a printed √2
    assert root(9, 2, "rounded")[1:] == (Decimal("3.00"), None)
    w = Writer(4, "rounded")
    shown = w.result(("x", 0), w.onward(held(Decimal("2.8284"), Decimal("2.828427"))) * 2, 5.656854)
    assert str(shown) == "5.6569" and w.onward(shown) == Decimal("5.656854")
    assert shown * 1 == Decimal("5.6569")  # arithmetic re-types the printed number
    exact = Writer(4, "exact").result(("x", 0), Decimal("5.656854"), 5.656854)
    assert Writer(4, "exact").onward(exact) is exact


@pytest.mark.parametrize("precision", [2, 4, 6])
def test_rounded_carry_of_the_textbook_example_matches_exact_arithmetic_at_4_decimals_and_more(run, precision):
    """Issue 19's leftovers from earlier trials: the rounded carry's scaled scores are the exact ones at
    any precision."""
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision",
              str(precision)).stdout
    assert f"/ √2 = {4 / 2 ** 0.5:.{precision}f}" in out
