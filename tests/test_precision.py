"""The precision lab (issue 31; attncli/compute/precision.py, attncli/problem/recipes.py): a low dtype's
stages as stored and their errors, where the first inf or NaN is born and why, what a mask fill
does, and every bad setting refused with one error line. PyTorch's numbers: test_precision_fixtures.py."""

import json

import numpy as np
import pytest

from attncli.base.arrays import plain
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from tests.conftest import SAMPLES, SCOOTER, assert_error

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


def test_the_inputs_are_rounded_to_the_dtype_first(run, problem_file):
    """A mutation trial: not rounding Q, K and V to the dtype went unnoticed (every other test's
    inputs are exact in float16). 0.1 and 0.3 are not; 70000 is past float16's range."""
    doc, stderr = compute(run, problem_file, {"Q": [[0.1, 0.3]], "K": [[0.1, 0.3], [0.7, -0.2]],
                                              "V": [[70000, 1], [0.3, 0.9]]}, "--dtype", "float16")
    assert doc["heads"][0]["Q"] == [[0.0999755859375, 0.300048828125]]
    assert doc["heads"][0]["V"][0][0] == "inf"
    assert doc["nonfinite"]["stage"] == "V" and "70000 overflows float16 (max 65504)" in doc["nonfinite"]["cause"]


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


def test_a_softmax_sum_past_the_range_is_named_not_silent_zeros(run, problem_file):
    # e^88.5 fits float32 (2.7e38) but two of them do not: the sum is inf and every weight e^x/inf is 0
    near = {"Q": [[88.5, 88.5]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    doc, stderr = compute(run, problem_file, near, "--dtype", "float32", "--no-max-subtraction")
    assert doc["heads"][0]["weights"] == [[0.0, 0.0]]
    born = doc["nonfinite"]
    assert (born["stage"], born["head"], born["query"], born["key"]) == ("weights", 0, 0, 1)
    assert (born["value"], born["sum"]) == (0.0, "inf")
    assert born["cause"].startswith("the softmax's sum Σe^x = 5.4")
    assert "overflows float32 (max 3.4028e+38)" in born["cause"] and "e^x/inf = 0" in born["cause"]
    assert "the first non-finite value is weights[0, 0, 1]: the softmax's sum" in stderr
    page = run("compute", problem_file(near), "--dtype", "float32", "--no-max-subtraction", "-f", "html").stdout
    assert 'class="note">the first non-finite value is weights[0, 0, 1]: the softmax&#x27;s sum' in page
    assert '<td class="nf" title="the softmax&#x27;s sum' in page
    half = {"Q": [[10.5, 10.5]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    doc, _ = compute(run, problem_file, half, "--dtype", "float16", "--accumulate", "same", "--no-max-subtraction")
    assert "overflows float16 (max 65504)" in doc["nonfinite"]["cause"]
    explained = run("compute", problem_file(half), "--dtype", "float16", "--accumulate", "same",
                    "--no-max-subtraction", "--explain")
    assert "  sum: Σe^x = 72640 → inf in float16 (past its range: every weight of the row is e^x/inf = 0)" in explained.stdout


@pytest.mark.parametrize("policy, stored", [("zero", 0.0), ("uniform", 1 / 3)])
@pytest.mark.parametrize("subtract", [True, False])
def test_a_fully_masked_row_names_its_0_over_0_under_every_policy(run, problem_file, policy, stored, subtract):
    options = ("--dtype", "bfloat16", "--masked-rows", policy) + (() if subtract else ("--no-max-subtraction",))
    doc, _ = compute(run, problem_file, BELOW if subtract else dict(BELOW, Q=[[0.1, 0], [1, 0]]), *options)
    # the JSON says what is stored there (a user trial: it said nan for a cell stored 0), and that it was computed NaN
    assert doc["nonfinite"]["stage"] == "weights" and doc["nonfinite"]["query"] == 1
    assert (doc["nonfinite"]["value"], doc["nonfinite"]["computed"]) == (doc["heads"][0]["weights"][1][0], "nan")
    assert doc["nonfinite"]["value"] == (0.0 if policy == "zero" else 0.333984375)  # 1/3 in bfloat16
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


@pytest.mark.parametrize("dtype, fill, header, title", [
    ("float16", "-65519", "mask fill: −65519 (a masked score becomes this, not −∞; float16 stores it as −65504)",
     "masked = scaled, −65504 where the mask blocks"),
    ("float16", "-65520", "mask fill: −65520, past float16's range: a masked score becomes −∞",
     "masked = scaled, −∞ where the mask blocks"),
    ("bfloat16", "-1e4", "mask fill: −10000 (a masked score becomes this, not −∞; bfloat16 stores it as −9984)",
     "masked = scaled, −9984 where the mask blocks"),
    ("bfloat16", "-1e9", "bfloat16 stores it as −998244352)", "masked = scaled, −998244352 where the mask blocks"),
])
def test_the_header_and_title_give_the_fill_the_dtype_stores(run, problem_file, dtype, fill, header, title):
    result = run("compute", problem_file(BELOW), "--dtype", dtype, f"--mask-fill={fill}", "--stages", "masked",
                 "-f", "table")
    assert header in result.stdout and title in result.stdout


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
    (("--accumulate", "same"), ['--accumulate: given as the string "same", but --dtype is float64', "drop --accumulate, "
                                "or set --dtype"]),
    (("--mask-fill=-1e400",), ['--mask-fill: "-1e400" reads as -inf (past float64\'s range), not a finite number; '
                               "expected -inf, min"]),
    (("--mask-fill=nan",), ['--mask-fill: "nan" reads as nan, not a finite number']),
    (("--dtype", "float16", "--accumulate", "same", "--store", "output"), ["--store: given as output, but --accumulate is same",
                                                                           "use --accumulate float32, or --store stages"]),
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


def test_the_page_outlines_the_first_non_finite_cell_and_explains_its_row_up_to_it(run, problem_file):
    """A user trial: explaining a row that holds an inf was refused naming --row, which was never
    given, and the page's advice repeated the failing command. The row is explained up to its birth."""
    big = {"Q": [[300, 0], [1, 1]], "K": [[300, 0], [1, 1]], "V": [[1, 2], [3, 4]], "scale": 1}
    page = run("compute", problem_file(big), "--dtype", "float16", "-f", "html").stdout
    assert ('<td class="nf" title="scores = 90000 overflows float16 (max 65504)" data-stage="scores" '
            'data-head="0" data-row="0" data-col="0"') in page
    assert page.count(' nf"') + page.count('"nf"') == 1 and "the first non-finite value is scores[0, 0, 0]" in page
    assert '"command":"attn compute ' in page and ' --dtype float16"' in page  # its clicks explain the float16 run
    assert "The hand calculation stops here" in page  # row 0 is derived on the page too
    explained = run("compute", problem_file(big), "--dtype", "float16", "--explain")
    assert explained.exit_code == 0, explained.stderr
    row0 = explained.stdout.split("Query 1")[0]
    assert "0: (300.0)(300.0) + (0.0)(0.0) = 90000.0000 → inf in float16" in row0
    assert ("The hand calculation stops here: this row's first non-finite value is scores[0, 0, 0]: scores = 90000 "
            "overflows float16 (max 65504)") in row0 and "Step 2" not in row0
    assert "Step 4: weighted sum of values" in explained.stdout.split("Query 1")[1]  # row 1 is finite: every step


def test_explain_shows_where_e_x_overflows_without_the_max(run, problem_file):
    near = {"Q": [[89, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    text = run("compute", problem_file(near), "--dtype", "float32", "--no-max-subtraction", "--explain").stdout
    assert "e^89.0000 = 4.4896e+38 → inf in float32   e^0.0000 = 1.0000   sum = inf" in text
    assert "0 = inf / inf = nan\n" in text and "stops here: this row's first non-finite value is weights[0, 0, 0]" in text


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


# --- --explain in a low dtype: every line an equation that holds, then the rounding (a user trial) ---

def explained(run, problem_file, doc, *options) -> str:
    result = run("compute", problem_file(doc), "--explain", *options)
    assert result.exit_code == 0, result.stderr
    return result.stdout


PAST_2048 = {"Q": [[64, 1]], "K": [[32, 4], [32, 7], [32, 6]], "V": [[2, 0], [3, -2], [-3, 0]], "scale": 1,
             "key_labels": ["sea", "mat", "sang"]}  # attn exercise --kind precision --seed 1


@pytest.mark.parametrize("doc, options, line", [
    # scores' dot product: the exact sum, then float16's even number (main printed "= 2056.0000 (from the unrounded terms)")
    (PAST_2048, ("--dtype", "float16"), "  mat:  (64.0)(32.0) + (1.0)(7.0) = 2055.0000 → 2056 in float16\n"),
    # the scale
    (SCOOTER, ("--dtype", "bfloat16"), "  1: 4.0000 / 1.4142 = 2.8284 → 2.828125 in bfloat16  (1.41421… unrounded)\n"),
    # the max the run subtracts
    (SCOOTER, ("--dtype", "bfloat16"), "  the run subtracts the largest score, 2.8281, first (a constant shift"),
    # the quotient: exact, then stored (main printed 0.7695 as if 16.9137 / 22.0263 gave it)
    (SCOOTER, ("--dtype", "bfloat16"), "  1 = 1.0000 / 1.3023 = 0.7679 (76.8%) → 0.76953125 in bfloat16\n"),
    # the weighted sum
    (SCOOTER, ("--dtype", "bfloat16"), "  sum = [0.2773, 1.3525] → [0.27734375, 1.3515625] in bfloat16  (from the "
                                       "unrounded terms)\n"),
    # recipe same: each e^x and the running sum rounded as made
    (SCOOTER, ("--dtype", "bfloat16", "--accumulate", "same"),
     "  e^(0.0000 − 2.8281) = 0.0591 → 0.05908203125 in bfloat16   e^(2.8281 − 2.8281) = 1.0000   e^(1.4141 − 2.8281) "
     "= 0.2432 → 0.2431640625 in bfloat16   sum = 1.3022 → 1.3046875 in bfloat16"),
    # recipe same: a product rounded (0.765625 × 0.30078125 is not a bfloat16)
    (dict(SCOOTER, V=[[2, 0], [0, 0.3], [1, -1]]), ("--dtype", "bfloat16", "--accumulate", "same"),
     "  0.7656 × [0.0, 0.3008] = [0.0000, 0.2303] → [0, 0.23046875] in bfloat16\n"),
    # the naive softmax's e^x, as the example
    (SCOOTER, ("--dtype", "bfloat16", "--accumulate", "same", "--no-max-subtraction"),
     "  e^0.0000 = 1.0000   e^2.8281 = 16.9137 → 16.875 in bfloat16   e^1.4141 = 4.1126 → 4.125 in bfloat16"),
])
def test_explain_in_a_low_dtype_writes_exact_arithmetic_then_the_rounding(run, problem_file, doc, options, line):
    assert line in explained(run, problem_file, doc, *options)


@pytest.mark.parametrize("doc, line", [
    # the softmax's sum: 1.0099 rounds to 1.0078125, but the run rounded each partial sum and kept 1
    ({"Q": [[1]], "K": [[6], [0], [0], [0], [0]], "V": [[1], [0], [0], [0], [0]], "scale": 1},
     "sum = 1.0099, added as the run adds: 1 + 0.002471923828125 = 1.002471923828125 → 1; "),
    # a dot product: 258 is a bfloat16, but 256 + 1 + 1 rounded after each addition stays 256
    ({"Q": [[1, 1, 1]], "K": [[256, 1, 1], [1, 0, 0]], "V": [[1, 0], [0, 1]], "scale": 1},
     "  0: (1.0)(256.0) + (1.0)(1.0) + (1.0)(1.0) = 258.0000, added as the run adds: 256 + 1 = 257 → 256; "
     "256 + 1 = 257 → 256 in bfloat16\n"),
    # a weighted sum's column: 256 + 1 + 1 = 258 is a bfloat16, but the run rounded each partial sum and kept 256
    ({"Q": [[0]], "K": [[0], [0], [0]], "V": [[768, 1], [3, 0], [3, 0]], "scale": 1},
     "  sum = [258.0000, 0.3340] → [256, 0.333984375] in bfloat16\n"
     "  column 0, added as the run adds: 256 + 1 = 257 → 256; 256 + 1 = 257 → 256 in bfloat16\n"),
    # the same in the last column (a range short by one wrote none)
    ({"Q": [[0]], "K": [[0], [0], [0]], "V": [[1, 768], [0, 3], [0, 3]], "scale": 1},
     "  sum = [0.3340, 258.0000] → [0.333984375, 256] in bfloat16\n"
     "  column 1, added as the run adds: 256 + 1 = 257 → 256; 256 + 1 = 257 → 256 in bfloat16\n"),
    # 1.00390628 rounds once to 1.0078125, but through float32 (1.00390625, a tie) to 1: the run's 1 must
    # be compared with the one rounding (a user trial: no line, and "every number is exact")
    ({"Q": [[0]], "K": [[0], [0], [0]], "V": [[3], [0.01171875], [1e-7]], "scale": 1},
     "  column 0, added as the run adds: 1 + 0.00390625 = 1.00390625 → 1; 1 + 3.3527612686157227e-08 = "
     "1.0000000335276126861572265625 → 1 in bfloat16\n"),  # the sum exact, every digit
])
def test_recipe_same_writes_the_partial_sums_it_rounded(run, problem_file, doc, line):
    text = explained(run, problem_file, doc, "--dtype", "bfloat16", "--accumulate", "same")
    assert line in text and "→ 1 in bfloat16" not in text.split("Roundings")[0].split("sum = 1.0099")[-1][:20]
    assert "258.0000 → 256" not in text


def test_a_stage_stored_exactly_after_rounded_additions_is_not_called_exact(run, problem_file):
    doc = {"Q": [[0]], "K": [[0], [0], [0]], "V": [[3], [0.01171875], [1e-7]], "scale": 1}
    text = explained(run, problem_file, doc, "--dtype", "bfloat16", "--accumulate", "same")
    assert "  output: stored exactly in bfloat16, but the additions before it rounded as they went (the lines " \
           "above)\n" in text


def test_recipe_same_shows_products_past_the_range_meeting_as_nan(run, problem_file):
    doc = {"Q": [[300, 300]], "K": [[300, -300], [1, 1]], "V": [[1], [2]], "scale": 1}
    text = explained(run, problem_file, doc, "--dtype", "float16", "--accumulate", "same")
    assert ("  0: (300.0)(300.0) + (300.0)(-300.0) = 0.0000, added as the run adds: q[0]·k[0] = 90000 → inf; "
            "q[1]·k[1] = -90000 → -inf; inf + -inf = nan in float16\n") in text
    assert "= 0.0000 → nan" not in text and "scores: every number is exact" not in text
    cause = "a product overflows float16 (max 65504): q[0]·k[0] = 90000 → inf, q[1]·k[1] = −90000 → −inf; inf + (−inf) is NaN"
    assert f"  scores: scores[0] = nan: {cause}" in text
    doc_json, _ = compute(run, problem_file, doc, "--dtype", "float16", "--accumulate", "same")
    assert doc_json["nonfinite"]["cause"] == cause


@pytest.mark.parametrize("policy, line", [
    ("zero", "  weights: every one is 0/0 = NaN (every key masked); the masked-rows policy zero replaced each with 0\n"),
    ("uniform", "  weights: every one is 0/0 = NaN (every key masked); the masked-rows policy uniform replaced each "
                "with 1/3 → 0.333984375 in bfloat16\n"),
])
def test_the_roundings_say_a_masked_rows_policy_replaced_the_nan(run, problem_file, policy, line):
    text = explained(run, problem_file, BELOW, "--dtype", "bfloat16", "--masked-rows", policy, "--row", "1")
    assert line in text and "NaN →" not in text


def test_the_summary_names_an_e_x_past_float32_and_a_tiny_e_x_shows_its_digits(run, problem_file):
    past = explained(run, problem_file, {"Q": [[89]], "K": [[1], [0]], "V": [[1], [0]], "scale": 1}, "--dtype",
                     "bfloat16", "--accumulate", "same", "--no-max-subtraction")
    assert "  e^x: e^89.0 = 4.4896e+38 (past float32's range) → inf" in past and "every e^x is exact" not in past
    tiny = explained(run, problem_file, {"Q": [[12]], "K": [[1], [0]], "V": [[1], [0]], "scale": 1}, "--dtype",
                     "bfloat16", "--accumulate", "same")
    assert "e^(0.0000 − 12.0000) = 6.144e-06 → 6.139278411865234e-06 in bfloat16" in tiny and "= 0.0000 →" not in tiny


def test_every_equation_explain_writes_in_a_low_dtype_holds(run, problem_file):
    """Each dot product line's result is its given operands' exact sum, and each `a / b = c` line's c
    what its printed operands give (to the printed decimals) unless its note names the unrounded
    operands: the → part is the rounding, apart (main wrote 2056 "from the unrounded terms")."""
    import re
    from decimal import Decimal

    for options in (("--dtype", "float16"), ("--dtype", "bfloat16", "--accumulate", "same")):
        for line in explained(run, problem_file, PAST_2048, *options).splitlines():
            quotient = re.search(r"= (-?[\d.]+) / (-?[\d.]+) = (-?[\d.]+)", line)
            if quotient and "… unrounded" not in line:
                a, b, c = (Decimal(x) for x in quotient.groups())
                assert abs(a / b - c) <= Decimal("0.00005"), line
            dot = re.search(r": ((?:\(-?[\d.]+\)\(-?[\d.]+\)(?: \+ )?)+) = (-?[\d.]+)", line)
            if dot:
                pairs = re.findall(r"\((-?[\d.]+)\)\((-?[\d.]+)\)", dot.group(1))
                assert sum(Decimal(x) * Decimal(y) for x, y in pairs) == Decimal(dot.group(2)), line


def test_no_max_subtraction_explains_the_naive_softmax(run, problem_file):
    """A user trial: --no-max-subtraction --explain still subtracted the max (the row's e^40 is large)."""
    large = {"Q": [[40, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    text = explained(run, problem_file, large, "--no-max-subtraction")
    assert "the naive softmax, e^x / Σ e^x: the run does not subtract the largest score first" in text
    assert "e^40.0000 = 2.3539e+17   e^0.0000 = 1.0000   sum = 2.3539e+17" in text and "subtract it first" not in text
    assert "subtract it first" in explained(run, problem_file, large)  # with the max: as before


def test_rounded_carry_is_refused_in_a_low_dtype(run, problem_file):
    assert_error(run("compute", problem_file(SCOOTER), "--dtype", "bfloat16", "--explain", "--carry", "rounded"),
                 "--carry", "writes exact arithmetic and each rounding to bfloat16")


def test_a_finite_fill_is_the_masked_step_and_the_title(run, problem_file):
    """A user trial: the masked stage's title said −∞ under --mask-fill -1e4, and the explanation
    printed a masked key's scaled score as if it were visible."""
    table = run("compute", problem_file(BELOW), "--mask-fill", "-1e4", "--stages", "masked", "-f", "table").stdout
    assert "masked = scaled, −10000 where the mask blocks" in table
    past = run("compute", problem_file(BELOW), "--mask-fill", "-1e9", "--dtype", "float16", "--stages", "masked",
               "-f", "table").stdout
    assert "masked = scaled, −∞ where the mask blocks" in past and "past float16's range" in past
    text = explained(run, problem_file, BELOW, "--mask-fill", "-1e4", "--row", "1")
    assert "Step 3: apply the mask (masked keys become the fill, -10000.0000, not −∞: they stay in the softmax)" in text
    assert "  0: masked → -10000.0000, the fill (the mask matrix is false)" in text
    assert "e^(-10000.0000 − (-10000.0000)) = 1.0000" in text and "0 = 1.0000 / 3.0000 = 0.3333 (33.3%)" in text


@pytest.mark.parametrize("options", [("--dtype", "float16"), ("--dtype", "float32", "--no-max-subtraction"), ()])
def test_a_fully_masked_row_is_named_by_its_label_in_every_dtype(run, problem_file, options):
    doc = dict(BELOW, query_labels=["a", "b"])
    result = run("compute", problem_file(doc), "--masked-rows", "zero", "-f", "json", *options)
    assert 'head 0: every key is masked for query "b"; weights and output 0' in result.stderr
    assert "head 0 query 1" not in result.stderr


def test_the_masked_rows_error_names_the_option_that_gave_the_mask(run, problem_file):
    for options in ((), ("--dtype", "float16")):
        assert_error(run("compute", problem_file(SCOOTER), "--mask", "[[false, false, false]]", "--masked-rows",
                         "error", *options), "--mask: head 0: every key is masked for query 0")
        assert_error(run("compute", problem_file(SCOOTER), "--key-mask", "0,0,0", "--masked-rows", "error", *options),
                     "--key-mask: head 0")


def test_error_is_shown_with_explain_and_for_float32_and_refused_for_float64(run, problem_file):
    """A user trial: --error was dropped silently with --explain, and with float32 and float64."""
    text = explained(run, problem_file, SCOOTER, "--dtype", "bfloat16", "--error")
    assert "Error against float64 (absolute, and in ulps of bfloat16):" in text
    assert "  weights: 0 2.18e-05 (0.0893 ulps); 1 0.00161 (0.413 ulps); 2 0.00017 (0.174 ulps)" in text
    float32, _ = compute(run, problem_file, SCOOTER, "--dtype", "float32", "--error")
    assert float32["heads"][0]["errors"]["weights"]["ulps"][0] == pytest.approx([1.1041, 0.0849, 1.1865], abs=1e-4)
    table = run("compute", problem_file(SCOOTER), "--dtype", "float32", "--error", "--stages", "weights", "-f", "table")
    assert "weights: error against float64 in ulps of float32" in table.stdout
    assert "Error against float64" in explained(run, problem_file, SCOOTER, "--dtype", "float32", "--error")
    assert_error(run("compute", problem_file(SCOOTER), "--error"), "--error", "this run is float64, so every error is 0")
    assert_error(run("compute", problem_file(SCOOTER), "--dtype", "float32", "--error", "--rope", "-f", "json"),
                 "--error", "this problem has the stage Q_rope")


def test_the_overflow_policy_is_stated_in_help_readme_and_the_doc(run):
    """A user trial: overflow was an error in float32/64 and a warning in 16-bit, said nowhere."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    help_text = " ".join(run("compute", "--help").stdout.split())
    assert "An overflow is an error in float64 and float32; bfloat16 and float16" in help_text.replace("│ ", "")
    assert "float64 and float32 refuse it" in " ".join((root / "README.md").read_text().split())
    assert "float64 and float32 refuse an overflow" in " ".join(
        (root / "docs/explanations/precision.md").read_text().split())


ROUNDING = __import__("re").compile(r" → (?:\[[^\]]*\]|\S+) in \w+")  # "→ 2056 in float16", "→ [a, b] in bfloat16"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("recipe", [(), ("--store", "output"), ("--accumulate", "same")])
@pytest.mark.parametrize("doc", [PAST_2048, dict(BELOW, mask=[[True, True, False], [True, False, True]]),
                                 {"Q": [[0.3, -1.7, 2.2], [1.1, 0.4, -0.6]], "K": [[0.9, 0.2, -1.3], [1.7, -0.4, 0.8],
                                  [-2.1, 1.5, 0.3], [0.05, 0.6, 1.9]], "V": [[0.7, -0.3], [1.9, 2.2], [-0.8, 0.4],
                                  [0.33, 1.01]]}])
def test_every_equation_of_a_low_dtype_explanation_holds_before_its_rounding(run, problem_file, dtype, recipe, doc):
    """tests/test_explain.py's checker over a low-precision run, each `→ … in dtype` taken off: a line that
    does not hold names its rounded operands."""
    from tests.test_explain import NOTE, check_equations

    text = explained(run, problem_file, doc, "--dtype", dtype, *recipe, "--masked-rows", "zero")
    steps = __import__("re").sub(r"\nRoundings[^\n]*(\n[^\n]+)*", "", text)  # the summaries after each row: not equations
    # recipe same's sums (the e^x line's, the weighted sum's) add the terms as kept (after their →), which the
    # checker cannot read: those lines' own tests are above
    same = "same" in recipe
    lines = [ROUNDING.sub("", line) for line in steps.splitlines()
             if not (same and line.startswith(("  e^", "  sum = [")))]
    results, kinds = check_equations(lines)
    assert {"dot", "weight", "product"} <= set(kinds) and ({"exp", "sum"} <= set(kinds) or same)
    assert [line for line, ok in results if not ok and not NOTE.search(line)] == []


def test_an_error_at_a_subnormal_reference_is_counted_in_the_subnormals_ulp():
    """float16's subnormals share the smallest normal's ulp, 2^-24 (not 2^(⌊log₂|x|⌋ − 10))."""
    from attncli.compute.precision import errors

    reference = np.array([1e-6, -1e-6, 0.0, 2.0 ** -14])
    stored = reference + np.array([2.0 ** -24, 2 * 2.0 ** -24, 3 * 2.0 ** -24, 2.0 ** -24])
    found = errors({"weights": stored}, {"weights": reference}, "float16")["weights"]
    assert found["ulps"].tolist() == pytest.approx([1.0, 2.0, 3.0, 1.0], rel=1e-12)


def test_explain_lists_no_rounding_of_a_nan_to_itself(run, problem_file):
    """A weight computed NaN (e^89 overflows float32 without the max) is stored NaN: no rounding to list."""
    near = {"Q": [[89, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "scale": 1}
    result = run("compute", problem_file(near), "--dtype", "float16", "--no-max-subtraction", "--explain")
    assert result.exit_code == 0, result.stderr
    roundings = result.stdout.split("Roundings")[1]
    assert "  weights: " in roundings
    assert "nan → nan" not in roundings.lower()


def test_explain_names_the_labs_settings_only_when_given(run, problem_file):
    plain_run = run("compute", problem_file(SCOOTER), "--dtype", "float32", "--error", "--explain")
    assert plain_run.exit_code == 0, plain_run.stderr
    assert "Roundings: none beyond float32 itself (every operation in float32)\n" in plain_run.stdout
    assert "precision lab's settings" not in plain_run.stdout
    lab = run("compute", problem_file(SCOOTER), "--dtype", "float32", "--mask-fill", "min", "--explain").stdout
    assert "(every operation in float32; the precision lab's settings change the fill or the softmax" in lab


@pytest.mark.parametrize("sample, name", [("alibi.json", "alibi"), ("sinks.json", "sinks")])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_variant_the_lab_cannot_compute_is_refused_by_name(run, sample, name, dtype):
    """Two user trials: ALiBi in bfloat16 was an internal error, then (once the distance note was mended)
    silently left out of the logits, as sinks were of the softmax: the lab computes neither."""
    assert_error(run("compute", SAMPLES / sample, "--dtype", dtype, "-f", "json"),
                 f"the precision lab computes attention from Q, K and V with a mask; this problem has {name}, "
                 f"which it cannot compute in {dtype}")


def test_a_wide_v_writes_the_first_columns_additions_and_counts_the_rest(run, problem_file):
    """A user trial: 512 columns wrote 310 column lines in a row."""
    doc = {"Q": [[0]], "K": [[0], [0], [0]], "V": [[768.0] * 40, [3.0] * 40, [3.0] * 40], "scale": 1}
    text = explained(run, problem_file, doc, "--dtype", "bfloat16", "--accumulate", "same")
    assert text.count(", added as the run adds: 256 + 1 = 257 → 256;") == 7
    assert "  column 6, added as" in text and "  … and 33 more columns whose additions rounded as they went\n" in text


def test_a_fully_masked_rows_uniform_output_writes_the_additions_the_run_made(run, problem_file):
    """A user trial: the mean of V (258) kept as 256 by rounded additions was written `output = [256.0000, …]`
    with no word of why."""
    doc = {"Q": [[0], [0]], "K": [[0], [0], [0]], "V": [[768, 1], [3, 0], [3, 0]], "scale": 1,
           "mask": [[True, True, True], [False, False, False]], "masked_rows": "uniform"}
    text = explained(run, problem_file, doc, "--dtype", "bfloat16", "--accumulate", "same", "--row", "1")
    assert "  output = [256.0000, 0.3340]\n  column 0, added as the run adds: 256 + 1 = 257 → 256; 256 + 1 = 257 → " \
           "256 in bfloat16\n" in text
