"""The precision lab (issue 31; attncli/compute/precision.py, attncli/problem/recipes.py): a low dtype's
stages as stored and their errors, where the first inf or NaN is born and why, what a mask fill
does, and every bad setting refused with one error line. PyTorch's numbers: test_precision_fixtures.py."""

import json

import numpy as np
import pytest

from attncli.base.arrays import plain
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from tests.conftest import SCOOTER, assert_error

# TransformerLens #385: query 0's one visible score is −20000; query 1 sees no key at all.
BELOW = {"Q": [[100, 0], [1, 0]], "K": [[-200, 0], [1, 0], [0, 1]], "V": [[1, 0], [0, 1], [2, 2]],
         "mask": [[True, False, False], [False, False, False]], "scale": 1}


def compute(run, problem_file, doc, *options):
    result = run("compute", problem_file(doc), "--format", "json", *options)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("dtype, scaled, weights", [
    ("bfloat16", [0.0, 2.828125, 1.4140625], [0.04541015625, 0.76953125, 0.1865234375]),
    ("float16", [0.0, 2.828125, 1.4140625], [0.04541015625, 0.76806640625, 0.186767578125]),
])
def test_the_scooter_in_a_low_dtype_stores_each_stage_rounded(run, problem_file, dtype, scaled, weights):
    doc, _ = compute(run, problem_file, SCOOTER, "--dtype", dtype)
    head = doc["heads"][0]
    assert head["scaled"] == [scaled] and head["weights"] == [weights]
    assert doc["recipe"].startswith("each stage computed in float32") and doc["accumulate"] == "float32"


def test_error_gives_each_stage_against_float64_in_ulps(run, problem_file):
    doc, _ = compute(run, problem_file, SCOOTER, "--dtype", "bfloat16", "--error")
    errors = doc["heads"][0]["errors"]
    assert set(errors) == {"scores", "scaled", "weights", "output"}
    scaled = errors["scaled"]
    assert scaled["abs"][0][1] == pytest.approx(4 / 2 ** 0.5 - 2.828125)
    assert scaled["ulps"][0][1] == pytest.approx((4 / 2 ** 0.5 - 2.828125) / 2 ** -6)  # ulp at 2.8: 2^(1 − 7)
    assert scaled["rel"][0][1] == pytest.approx(scaled["abs"][0][1] / (4 / 2 ** 0.5))
    without, _ = compute(run, problem_file, SCOOTER, "--dtype", "bfloat16")
    assert "errors" not in without["heads"][0]


def test_the_store_output_recipe_keeps_stages_in_float32(run, problem_file):
    doc, _ = compute(run, problem_file, SCOOTER, "--dtype", "bfloat16", "--store", "output")
    assert doc["heads"][0]["scaled"][0][1] == pytest.approx(float(np.float32(4) * np.float32(2 ** -0.5)), abs=0)


def test_a_float16_score_past_65504_is_named_where_it_is_born(run, problem_file):
    doc, stderr = compute(run, problem_file, {"Q": [[300, 0], [1, 1]], "K": [[300, 0], [1, 1]],
                                              "V": [[1, 2], [3, 4]], "scale": 1}, "--dtype", "float16")
    assert doc["nonfinite"] == {"stage": "scores", "head": 0, "query": 0, "key": 0, "value": "inf",
                                "cause": "scores = 90000 overflows float16 (max 65504)"}
    assert doc["heads"][0]["scores"][0][0] == "inf" and doc["heads"][0]["weights"][0] == ["nan", "nan"]
    assert "the first non-finite value is scores[0, 0, 0]: scores = 90000 overflows float16" in stderr
    float32, _ = compute(run, problem_file, {"Q": [[300, 0]], "K": [[300, 0]], "V": [[1]], "scale": 1},
                         "--dtype", "bfloat16")
    assert "nonfinite" not in float32  # bfloat16 has float32's range


def test_a_float32_logit_near_89_overflows_only_without_the_max_subtracted(run, problem_file):
    near = {"Q": [[89, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    doc, stderr = compute(run, problem_file, near, "--dtype", "float32", "--no-max-subtraction")
    assert doc["max_subtraction"] is False
    assert doc["nonfinite"]["stage"] == "weights" and doc["nonfinite"]["key"] == 0
    assert doc["nonfinite"]["cause"].startswith("e^89 overflows float32 (max 3.4028e+38) without subtracting the max")
    stable, _ = compute(run, problem_file, near, "--dtype", "float32")
    assert "nonfinite" not in stable and stable["heads"][0]["weights"][0][0] == 1.0
    table = run("compute", problem_file(near), "--dtype", "float32", "--no-max-subtraction", "-f", "table")
    assert "softmax: e^x without subtracting each row's max" in table.stdout


@pytest.mark.parametrize("policy, stored", [("zero", 0.0), ("uniform", 1 / 3)])
@pytest.mark.parametrize("subtract", [True, False])
def test_a_fully_masked_row_names_its_0_over_0_under_every_policy(run, problem_file, policy, stored, subtract):
    options = ("--dtype", "bfloat16", "--masked-rows", policy) + (() if subtract else ("--no-max-subtraction",))
    doc, _ = compute(run, problem_file, BELOW if subtract else dict(BELOW, Q=[[0.1, 0], [1, 0]]), *options)
    assert doc["nonfinite"]["stage"] == "weights" and (doc["nonfinite"]["query"], doc["nonfinite"]["value"]) == (1, "nan")
    assert doc["nonfinite"]["cause"].startswith("0/0 in a fully masked row")
    assert doc["heads"][0]["weights"][1] == [stored] * 3 or policy == "uniform"
    error = run("compute", problem_file(BELOW), "--dtype", "bfloat16", "--masked-rows", "error", "-f", "json")
    assert_error(error, "every key is masked", "weights[0, 1, 0]: 0/0 in a fully masked row", "--masked-rows")


@pytest.mark.parametrize("fill, row0, warned", [
    ("-inf", [1.0, 0.0, 0.0], None),
    ("min", [1.0, 0.0, 0.0], "is finite: masked key 0 of query 1"),
    ("-1e4", [0.0, 0.5, 0.5], "a real score is below the mask fill −10000: scaled[0, 0, 0] = -19968"),
    ("-1e9", [1.0, 0.0, 0.0], "is finite: masked key 0 of query 1"),
])
def test_each_mask_fill_shows_what_it_lets_through(run, problem_file, fill, row0, warned):
    doc, stderr = compute(run, problem_file, BELOW, "--mask-fill", fill, "--dtype", "bfloat16")
    assert doc["heads"][0]["weights"][0] == row0
    if fill == "-inf":
        assert "mask_fill" not in doc and doc["heads"][0]["weights"][1] == [0.0] * 3
    else:  # a finite fill: the fully masked row is uniform, and no policy applies
        assert doc["heads"][0]["weights"][1] == [0.333984375] * 3 and "nonfinite" not in doc
        assert warned in stderr and doc["mask_fill"] == (fill if fill == "min" else float(fill))


def test_a_fill_past_float16s_range_is_minus_infinity_and_says_so(run, problem_file):
    doc, stderr = compute(run, problem_file, BELOW, "--mask-fill", "-1e9", "--dtype", "float16")
    assert doc["heads"][0]["masked"][0][1] is None  # −∞, as JSON writes it
    assert "the mask fill −1e+09 is −∞ in float16" in stderr


def test_a_row_whose_every_e_x_underflows_is_0_over_0_without_the_max_subtracted(run, problem_file):
    doc, _ = compute(run, problem_file, BELOW, "--dtype", "bfloat16", "--no-max-subtraction")
    assert (doc["nonfinite"]["query"], doc["nonfinite"]["key"]) == (0, 0)
    assert doc["nonfinite"]["cause"] == ("0/0: every e^x of the row underflows to 0 in float32 without subtracting the "
                                         "max (the largest is e^−19968)")


def test_a_lab_run_reads_back_its_own_json(run, problem_file):
    doc, _ = compute(run, problem_file, BELOW, "--mask-fill", "min", "--dtype", "float16", "--error")
    again, _ = compute(run, problem_file, doc)
    assert again["heads"][0]["weights"] == doc["heads"][0]["weights"]
    assert again["mask_fill"] == "min" and again["recipe"] == doc["recipe"]
    big = {"Q": [[300, 0], [1, 1]], "K": [[300, 0], [1, 1]], "V": [[1, 2], [3, 4]], "scale": 1}
    inf, _ = compute(run, problem_file, big, "--dtype", "float16", "--error")  # "inf", "nan" and nonfinite
    back, _ = compute(run, problem_file, inf)
    assert back["nonfinite"] == inf["nonfinite"] and back["heads"][0]["weights"][0] == ["nan", "nan"]
    changed = dict(inf, nonfinite=dict(inf["nonfinite"], query=1))
    assert_error(run("compute", problem_file(changed), "-f", "json"), "nonfinite")


@pytest.mark.parametrize("options, fragments", [
    (("--mask-fill", "lots"), ['"lots" is not a mask fill', "--mask-fill"]),
    (("--accumulate", "same"), ["--accumulate", "but dtype is float64"]),
    (("--dtype", "float16", "--accumulate", "same", "--store", "output"), ["store is output, but accumulate is same"]),
    (("--dtype", "bfloat16", "--error", "-f", "markdown"), ["--error", "not markdown"]),
    (("--mask-fill", "min", "--tiles", "1,1"), ["--tiles", "have no tiles"]),
])
def test_bad_settings_are_one_error_line(run, problem_file, options, fragments):
    assert_error(run("compute", problem_file(SCOOTER), *options), *fragments)


@pytest.mark.parametrize("doc, fragment", [
    (dict(SCOOTER, mask_fill="lots"), 'mask_fill is the string "lots"'),
    (dict(SCOOTER, max_subtraction=1), "max_subtraction is the number 1; expected true or false"),
    (dict(SCOOTER, dtype="float16", rope=True), "this problem has the stage Q_rope"),
    (dict(SCOOTER, dtype="bfloat16", W_O=[[1], [1]]), "this problem has W_O"),
])
def test_bad_documents_are_one_error_line(run, problem_file, doc, fragment):
    assert_error(run("compute", problem_file(doc), "-f", "json"), fragment)


def test_explain_shows_each_rounding_the_recipe_does(run, problem_file):
    eager = run("compute", problem_file(SCOOTER), "--dtype", "bfloat16", "--explain").stdout
    assert "scaled: scaled[1] = 2.828427 → 2.828125; scaled[2] = 1.4142135 → 1.4140625" in eager
    assert "weights[1] = 0.76788574 → 0.76953125" in eager and "e^x" not in eager.split("Roundings")[1]
    same = run("compute", problem_file(SCOOTER), "--dtype", "bfloat16", "--accumulate", "same",
               "--no-max-subtraction", "--explain").stdout
    assert "e^x: e^2.828125 = 16.913717 → 16.875; e^1.4140625 = 4.112629 → 4.125" in same
    fused = run("compute", problem_file(SCOOTER), "--dtype", "float16", "--store", "output", "--explain").stdout
    assert "scaled: kept in float32, not stored in float16" in fused
    wide = run("compute", problem_file(SCOOTER), "--mask-fill", "min", "--explain").stdout
    assert "Roundings: none beyond float64 itself" in wide


def test_the_page_outlines_the_first_non_finite_cell_and_explain_refuses_its_row(run, problem_file):
    big = {"Q": [[300, 0], [1, 1]], "K": [[300, 0], [1, 1]], "V": [[1, 2], [3, 4]], "scale": 1}
    page = run("compute", problem_file(big), "--dtype", "float16", "-f", "html").stdout
    assert ('<td class="nf" title="scores = 90000 overflows float16 (max 65504)" data-stage="scores" '
            'data-head="0" data-row="0" data-col="0"') in page
    assert page.count(' nf"') + page.count('"nf"') == 1 and "the first non-finite value is scores[0, 0, 0]" in page
    assert_error(run("compute", problem_file(big), "--dtype", "float16", "--explain", "--row", "0"),
                 "--row", "query row 0 holds an inf or a NaN", "scores = 90000 overflows float16")
    assert "Roundings to float16" in run("compute", problem_file(big), "--dtype", "float16", "--explain",
                                         "--row", "1").stdout


def test_plain_writes_inf_and_nan_as_strings_and_minus_inf_as_null():
    assert plain(np.array([1.5, -np.inf, np.inf, np.nan])) == [1.5, None, "inf", "nan"]


def test_cost_counts_two_bytes_a_number_in_a_low_dtype(run, problem_file):
    wide, _ = compute(run, problem_file, SCOOTER, "--cost", "--dtype", "float32")
    low, _ = compute(run, problem_file, SCOOTER, "--cost", "--dtype", "bfloat16")
    assert low["cost"]["itemsize"] * 2 == wide["cost"]["itemsize"] == 4


def test_the_python_api_takes_numpys_float16_and_ml_dtypes_bfloat16():
    import ml_dtypes

    from attncli.api import attend as api_attend

    for dtype, name in ((np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16")):
        trace = api_attend(Q=[[0, 4]], K=[[1, 0], [0, 1], [0.5, 0.5]], V=[[2, 0], [0, 2], [1, -1]], dtype=dtype)
        assert trace.problem.dtype == name and trace.precision.recipe.store == "stages"


def test_the_float64_path_is_not_the_lab():
    trace = attend(build_problem(SCOOTER))
    assert trace.precision is None
    lab = attend(build_problem(dict(SCOOTER, dtype="float16")))
    assert lab.precision is not None and lab.precision.recipe.accumulate == "float32"
