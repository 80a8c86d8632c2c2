"""`--explain`: the textbook's hand calculation, digit for digit."""

import json

from attncli.attention import attend
from attncli.problem import build_problem
from attncli.render.explain import explain
from tests.conftest import SAMPLES, SCOOTER

# The textbook's digits; the two notes say which printed operands were rounded.
TEXTBOOK = """\
Query "it" (row 0): q = [0.0, 4.0]
Step 1: raw scores, q · k
  mechanic: (0.0)(1.0) + (4.0)(0.0) = 0.0000
  scooter:  (0.0)(0.0) + (4.0)(1.0) = 4.0000
  petrol:   (0.0)(0.5) + (4.0)(0.5) = 2.0000
Step 2: scale by 1/√d_k, d_k = 2, √2 ≈ 1.4142
  mechanic: 0.0000 / 1.4142 = 0.0000
  scooter:  4.0000 / 1.4142 = 2.8284  (1.41421… unrounded)
  petrol:   2.0000 / 1.4142 = 1.4142
Step 3: softmax
  e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321  (2.82842…, 1.41421… unrounded)
  mechanic = 1.0000 / 22.0321 = 0.0454 (4.5%)
  scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)
  petrol   = 4.1133 / 22.0321 = 0.1867 (18.7%)
Step 4: weighted sum of values
  0.0454 × [2.0, 0.0] = [0.0908, 0.0000]
  0.7679 × [0.0, 2.0] = [0.0000, 1.5358]
  0.1867 × [1.0, -1.0] = [0.1867, -0.1867]
  sum = [0.2775, 1.3491]"""


def test_scooter_explanation_is_the_textbooks(run):
    result = run("compute", SAMPLES / "scooter.json", "--explain")
    assert result.exit_code == 0
    assert TEXTBOOK in result.stdout
    assert "Step 1" not in result.stdout.split(TEXTBOOK)[1]  # explained once


def test_explain_in_json(run):
    doc = run.json("compute", SAMPLES / "scooter.json", "--explain")
    assert "\n".join(doc["explanation"]) == TEXTBOOK


def test_masked_keys_and_bias_are_shown():
    doc = dict(SCOOTER, bias=[0.5, None, 0], key_labels=["mechanic", "scooter", "petrol"])
    lines = "\n".join(explain(attend(build_problem(doc))))
    assert "Step 3: add the bias (masked keys become −∞ and are excluded)" in lines
    assert "  mechanic: 0.0000 + 0.5000 = 0.5000" in lines
    assert "  scooter:  masked → −∞, excluded" in lines
    assert "scooter  = e^−∞ / " in lines and "= 0 (masked)" in lines
    assert "(masked keys have weight 0 and add nothing)" in lines


def test_overflowing_exponentials_subtract_the_row_max():
    doc = {"Q": [100, 100], "K": [[10, 0], [0, 11]], "V": [[1], [2]]}
    lines = "\n".join(explain(attend(build_problem(doc))))
    assert "the largest score is 777.8175: e^777.8175 overflows float64, so subtract it first" in lines
    assert "e^(707.1068 − 777.8175) = 0.0000   e^(777.8175 − 777.8175) = 1.0000" in lines


def test_given_scale_and_fully_masked_row():
    lines = "\n".join(explain(attend(build_problem(dict(SCOOTER, scale=0.5, mask=[False] * 3)))))
    assert "Step 2: scale by 0.5000 (given)" in lines and "4.0000 × 0.5000 = 2.0000" in lines
    assert "every key is masked: its weights are all 0" in lines


def test_rows_heads_and_long_rows_are_chosen_and_elided(run):
    doc = {"Q": [[float(i), 1.0] * 4 for i in range(5)], "K": [[1.0, float(j)] * 4 for j in range(12)],
           "V": [[float(j)] * 8 for j in range(12)], "heads": 2,
           "query_labels": list("abcde"), "key_labels": [f"k{j}" for j in range(12)]}
    default = explain(attend(build_problem(doc)))
    assert default[0].startswith("(showing query 0 of 5; pick others with --row")
    result = run("compute", "-", "--explain", "--row", "c", "--row", "4", "--head", "1", input=json.dumps(doc))
    out = result.stdout
    assert 'Head 1, query "c" (row 2)' in out and 'Head 1, query "e" (row 4)' in out and "Head 0" not in out
    assert "  … 5 more keys …" in out
    assert "+ … +" not in out  # d_k = 4 per head: dot products written out in full
    wide = {"Q": [[1.0] * 8], "K": [[2.0] * 8], "V": [[3.0] * 8]}
    lines = explain(attend(build_problem(wide)))
    assert "  0: (1.0)(2.0) + (1.0)(2.0) + (1.0)(2.0) + … + (1.0)(2.0) (8 terms) = 16.0000" in lines
    assert "  1.0000 × [3.0, 3.0, 3.0, …, 3.0, 3.0] = [3.0000, 3.0000, 3.0000, …, 3.0000, 3.0000]" in lines
    assert run("compute", "-", "--explain", "--row", "z", input=json.dumps(doc)).stderr.startswith(
        'error: --row: no query "z"; the queries are a, b, c, d, e')
    assert "this problem has heads 0 to 1" in run("compute", "-", "--explain", "--head", "2",
                                                  input=json.dumps(doc)).stderr
