"""ALiBi, softcap and sinks: where each sits among the stages, its sign and numbers, the options and
their errors, the header, JSON read back, and `attn check` with follow-through and diagnoses."""

import json
import math

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from attncli.problem import masks
from attncli.problem.variants import VARIANTS
from attncli.stages.table import names, previous, softmax
from tests.conftest import SAMPLES, assert_error

RNG = np.random.default_rng(10)
Q, K, V = RNG.normal(size=(2, 4, 3)), RNG.normal(size=(2, 5, 3)), RNG.normal(size=(2, 5, 2))
BASE = {"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist()}


def trace_of(**keys):
    return attend(build_problem({**BASE, **keys}))


def test_the_trace_holds_each_variants_stage_in_the_tables_order_and_the_softcap_comes_before_the_mask():
    trace = trace_of(softcap=2.0, alibi=True, sinks=0.5, mask="causal", relative_bias={
        "buckets": 4, "max_distance": 8, "bidirectional": False, "embedding": [[0.5, -1], [1, 2], [0, 0.25], [3, 1]]})
    assert list(trace.stages) == [name for name in names() if name in trace.stages]
    assert {variant.stage for variant in VARIANTS} <= set(trace.stages)  # each brings or joins its stage
    # Gemma 2: the softcap caps the scaled scores, and the bias, ALiBi and the mask come after it.
    assert previous(trace.problem, "capped") == "scaled" and previous(trace.problem, "biased") == "capped"
    assert previous(trace.problem, "masked") == "biased"  # T5's relative bias, then ALiBi and the mask


def test_softcap_is_c_tanh_of_scaled_and_comes_before_bias_and_masks():
    bias = RNG.normal(size=(4, 5))
    trace = trace_of(softcap=1.5, bias=bias.tolist(), mask="causal")
    np.testing.assert_allclose(trace.capped, 1.5 * np.tanh(trace.scaled / 1.5), rtol=0, atol=1e-15)
    assert np.abs(trace.capped).max() < 1.5
    causal = np.tril(np.ones((4, 5), bool))
    np.testing.assert_array_equal(trace.masked, np.where(causal, trace.capped + bias, -np.inf))


def test_alibi_subtracts_slope_times_distance_after_softcap_per_head():
    trace = trace_of(alibi=[0.5, 0.25], softcap=3.0, q_positions=[3, 4, 5, 6])
    distance = np.abs(np.array([3, 4, 5, 6])[:, None] - np.arange(5)[None, :])
    expected = trace.capped - np.array([0.5, 0.25])[:, None, None] * distance
    np.testing.assert_allclose(trace.masked, expected, rtol=0, atol=1e-15)


def test_paper_slopes_follow_the_query_heads_under_gqa():
    problem = build_problem({"Q": np.ones((8, 2, 2)), "K": np.ones((2, 2, 2)), "V": np.ones((2, 2, 2)), "alibi": True})
    np.testing.assert_array_equal(problem.alibi_slopes, 2.0 ** -np.arange(1, 9))


def test_alibi_with_a_bias_adds_both():
    bias = RNG.normal(size=(4, 5))
    trace = trace_of(alibi=[1.0, 2.0], bias=bias.tolist())
    distance = np.abs(np.arange(4)[:, None] - np.arange(5)[None, :])
    np.testing.assert_allclose(trace.masked, trace.scaled + bias - np.array([1.0, 2.0])[:, None, None] * distance,
                               rtol=0, atol=1e-14)


def test_sinks_are_one_more_logit_in_the_sum():
    trace = trace_of(sinks=[0.5, -1.0])
    for h, sink in enumerate((0.5, -1.0)):
        e = np.exp(trace.scaled[h])
        np.testing.assert_allclose(trace.weights[h], e / (math.exp(sink) + e.sum(axis=1, keepdims=True)),
                                   rtol=1e-14, atol=0)
    assert (trace.weights.sum(axis=-1) < 1).all()


def test_one_sink_number_is_every_heads():
    assert build_problem({**BASE, "sinks": 0.5}).sinks.tolist() == [0.5, 0.5]


@pytest.mark.parametrize("sink, score, row_sum", [(1000.0, 0.0, 0.0), (0.0, 1000.0, 1.0), (1000.0, 1000.0, 0.5)])
def test_sinks_are_stable_for_huge_logits(sink, score, row_sum):
    x = np.array([[[score, -np.inf]]])
    weights, _ = softmax(x, sinks=np.array([[[sink]]]))
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(), row_sum, rtol=0, atol=1e-15)
    doc = {"Q": [[1.0]], "K": [[1.0], [0.0]], "V": [[2.0], [3.0]], "scale": score, "sinks": sink,
           "mask": [[True, False]]}
    for trace in (attend(build_problem(doc)), attend_output(build_problem(doc))):
        np.testing.assert_allclose(trace.final, [[2.0 * row_sum]], rtol=0, atol=1e-12)


def test_sinks_fully_masked_rows_are_zero_whatever_the_policy():
    mask = np.ones((4, 5), bool)
    mask[1] = False
    for policy in ("zero", "uniform", "error"):
        doc = {**BASE, "sinks": 0.5, "mask": mask.tolist(), "masked_rows": policy}
        for trace in (attend(build_problem(doc)), attend_output(build_problem(doc), block=1)):
            assert not trace.output[:, 1].any()
            assert trace.fully_masked == ((0, 1), (1, 1))
            assert len(trace.warnings) == 2 and "the sink takes the whole row" in trace.warnings[0]


def test_float32_variants_are_close_to_float64():
    keys = dict(alibi=True, softcap=2.0, sinks=[0.5, 1.0], mask="causal")
    np.testing.assert_allclose(trace_of(dtype="float32", **keys).final, trace_of(**keys).final, rtol=0, atol=1e-5)


def test_header_states_each_variant(run, problem_file):
    path = problem_file({**BASE, "mask": "causal", "heads": 2})
    text = run("compute", path, "--format", "table", "--alibi", "--softcap", "30", "--sinks", "0.5,-1").stdout
    assert "softcap 30: capped = 30 · tanh(scaled / 30), after scaling, before bias, ALiBi and masks (Gemma 2)" in text
    assert "ALiBi: −slope · |q_pos − k_pos| added to the logits of each head, with any bias; the paper's " \
           "slopes for 2 heads: 0.0625, 0.00390625" in text
    assert "sinks: one extra logit per head in each row's softmax, then dropped (gpt-oss): rows sum to less " \
           "than 1" in text
    assert "capped = 30 · tanh(scaled / 30) · head 0" in text
    assert "masked = capped + ALiBi, −∞ where the mask blocks · head 0" in text
    assert "weights = softmax(masked) over keys and the head's sink logit (then dropped: rows sum to less than 1)" \
           in text
    assert "rows with every key masked" not in text


def test_header_says_how_slopes_for_three_heads_are_made(run, problem_file):
    path = problem_file({"Q": np.ones((3, 1, 2)).tolist(), "K": np.ones((3, 1, 2)).tolist(),
                         "V": np.ones((3, 1, 2)).tolist(), "alibi": True})
    text = run("compute", path, "--format", "table").stdout
    assert "the paper's slopes for 3 heads (not a power of two: the lower power's slopes, then every other one " \
           "of twice that, as BLOOM): 0.0625, 0.00390625, 0.25" in text


def test_json_has_alibi_slopes_and_reads_back(run, problem_file):
    path = problem_file({**BASE, "alibi": True, "softcap": 2.0, "sinks": [0.5, -1.0], "mask": "causal"})
    doc = run.json("compute", path)
    assert doc["alibi"] is True and doc["alibi_slopes"] == [0.0625, 0.00390625]
    assert doc["softcap"] == 2.0 and doc["sinks"] == [0.5, -1.0]
    assert all("capped" in head for head in doc["heads"])
    again = run.json("compute", problem_file(doc, "again.json"))
    assert again["output"] == doc["output"] and again["heads"] == doc["heads"]
    given = run.json("compute", path, "--alibi-slopes", "0.5,0.25")
    assert given["alibi"] == [0.5, 0.25] == given["alibi_slopes"]


def test_output_only_path_through_the_cli_equals_the_trace(run, problem_file):
    path = problem_file({**BASE, "alibi": True, "softcap": 2.0, "sinks": 0.5, "mask": "causal"})
    full = run.json("compute", path)["output"]
    np.testing.assert_allclose(run.json("compute", path, "--stages", "output")["output"], full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("args, fragments", [
    (["--softcap", "0"], ["--softcap: softcap is the number 0; expected a number > 0"]),
    (["--softcap", "inf"], ["--softcap: softcap is", "expected a number > 0"]),
    (["--softcap", "1,2"], ["--softcap: softcap is a list"]),
    (["--sinks", "1,2,3"], ["--sinks: sinks has 3 entries; expected 2, one per query head"]),
    (["--sinks", "1,x"], ["--sinks: sinks[1] is", "expected a finite number"]),
    (["--alibi-slopes", "0.5"], ["--alibi-slopes: alibi has 1 entry; expected 2, one per query head"]),
    (["--alibi-slopes", "0.5,1e9"], ["--alibi-slopes: alibi[1] is", "expected a slope from -1e+06 to 1e+06"]),
    (["--alibi", "--alibi-slopes", "1,2"], ["--alibi-slopes", "give one of them"]),
])
def test_option_errors(run, problem_file, args, fragments):
    assert_error(run("compute", problem_file(BASE), *args), *fragments)


@pytest.mark.parametrize("doc, fragments", [
    ({"alibi": "yes"}, ['alibi is the string "yes"', "expected true (the paper's slopes) or a list of 2 slopes"]),
    ({"sinks": None, "softcap": True}, ["softcap is", "expected a number > 0"]),
    ({"sinks": [[1, 2], [3, 4]]}, ["sinks[0] is", "expected a finite number"]),
])
def test_file_errors(run, problem_file, doc, fragments):
    assert_error(run("compute", problem_file({**BASE, **doc})), "p.json: ", *fragments)


# ---- attn check ---------------------------------------------------------------------------------

ONE = {"Q": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "K": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
       "V": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "mask": "causal"}


def check(run, tmp_path, answers, problem):
    (tmp_path / "problem.json").write_text(json.dumps(problem))
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"]


def r4(x):
    return [[None if v == -np.inf else v for v in row] for row in np.round(x, 4).tolist()]


def test_check_diagnoses_alibi_sign(run, tmp_path):
    problem = {**ONE, "alibi": [0.5]}
    trace = attend(build_problem(problem))
    distance = np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
    wrong = trace.masked[0] + 2 * 0.5 * distance  # +slope·|i − j|
    marks = check(run, tmp_path, {"masked": r4(wrong), "weights": r4(softmax(wrong[None])[0][0])}, problem)
    assert marks["masked"]["diagnosis"] == ["alibi_sign"]
    assert marks["weights"]["wrong"] == 0 and marks["weights"]["carried"] > 0


def test_check_carries_a_learners_capped_into_masked(run, tmp_path):
    problem = {**ONE, "softcap": 1.0, "alibi": [0.5]}
    trace = attend(build_problem(problem))
    capped = trace.capped[0].copy()
    capped[2, 0] += 0.3  # one slip in capped
    distance = np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
    masked = np.where(np.tril(np.ones((3, 3), bool)), capped - 0.5 * distance, -np.inf)
    marks = check(run, tmp_path, {"capped": r4(capped), "masked": r4(masked)}, problem)
    assert marks["capped"]["wrong"] == 1
    assert marks["masked"]["wrong"] == 0 and marks["masked"]["carried"] == 1


def test_check_diagnoses_a_sink_left_out(run, tmp_path):
    problem = {**ONE, "sinks": 0.5}
    trace = attend(build_problem(problem))
    marks = check(run, tmp_path, {"weights": r4(softmax(trace.masked)[0][0])}, problem)
    assert marks["weights"]["diagnosis"] == ["sink_left_out"]
    right = check(run, tmp_path, {"weights": r4(trace.weights[0])}, problem)
    assert right["weights"]["wrong"] == 0


def test_check_capped_answer_for_a_problem_without_softcap_is_an_error(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(ONE))
    (tmp_path / "answers.json").write_text(json.dumps({"capped": [[0, 0, 0]] * 3}))
    assert_error(run("check", tmp_path / "answers.json", tmp_path / "problem.json"),
                 "capped is given, but this problem has no softcap")


@pytest.mark.parametrize("keys", [{"alibi": True, "softcap": 3.0, "sinks": 0.5}, {"alibi": [0.5, 0.25], "sinks": [1, 2]}])
def test_npz_keeps_the_variants_and_reads_back(run, problem_file, tmp_path, keys):
    path = problem_file({**BASE, "mask": "causal", **keys})
    out = tmp_path / "v.npz"
    assert run("compute", path, "-o", out).exit_code == 0
    np.testing.assert_array_equal(run.json("compute", out)["output"], run.json("compute", path)["output"])


def test_the_samples_give_the_readmes_numbers(run):
    softcap = run.json("compute", SAMPLES / "softcap.json", "--round", "4")
    assert softcap["heads"][0]["capped"] == [[0.0, 1.7768, 1.2177]]
    alibi = run.json("compute", SAMPLES / "alibi.json")
    assert alibi["alibi_slopes"] == [0.5, 0.125] and len(alibi["heads"]) == 2
    sinks = run("compute", SAMPLES / "sinks.json", "--format", "json")
    doc = json.loads(sinks.stdout)
    assert [head["weights"][0] for head in doc["heads"]] == [[0.0, 0.0, 0.0]] * 2
    assert sinks.stderr.count("the sink takes the whole row") == 2
    scooter = run.json("compute", "--q", "0,4", "--k", "1,0; 0,1; .5,.5", "--v", "2,0; 0,2; 1,-1", "--sinks", "0.5",
                       "--round", "4")
    assert scooter["heads"][0]["weights"] == [[0.0422, 0.7145, 0.1737]]


@pytest.mark.parametrize("dtype, big", [("float64", 1.7e308), ("float32", 3.4e38)])
def test_alibi_beside_the_largest_logits_never_overflows(dtype, big):
    """|slope| ≤ 1e6 keeps ALiBi's term below half a unit in the last place of such logits."""
    doc = {"Q": [[big], [-big]], "K": [[1.0], [1.0]], "V": [[1.0], [2.0]], "scale": 1, "dtype": dtype,
           "alibi": [1e6], "k_positions": [0, 2**53]}
    for trace in (attend(build_problem(doc)), attend_output(build_problem(doc))):
        assert np.isfinite(trace.final).all()
    assert np.isfinite(attend(build_problem(doc)).masked).all()


def test_check_names_percent_weights_of_a_sinks_problem(run, tmp_path):
    problem = {**ONE, "sinks": 0.5}
    trace = attend(build_problem(problem))
    marks = check(run, tmp_path, {"weights": np.round(trace.weights[0] * 100, 2).tolist()}, problem)
    assert marks["weights"]["diagnosis"] == ["percent"]


ALIBI = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "alibi": [0.5]}


@pytest.mark.parametrize("carry", ["exact", "rounded"])
def test_the_alibi_step_subtracts_the_slope_times_the_distance(run, problem_file, carry):
    """Mutation: the masked stage's hand step adds +slope·|q_pos − k_pos| instead of −. Under
    exact carry the line then fails and is excused by a rounding note; under rounded carry it
    holds on its own printed numbers and is simply wrong. Each line must subtract, with no note
    (0.5·|1 − 0| is exact), and give the trace's value."""
    result = run("compute", problem_file(ALIBI), "--explain", "--row", "1", "--carry", carry)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    step = lines.index(next(line for line in lines if line.startswith("Step 3: add ALiBi")))
    assert lines[step + 1:step + 4] == ["  0: 0.0000 − 0.5·|1 − 0| = 0.0000 − 0.5000 = -0.5000",
                                        "  1: 0.7071 − 0.5·|1 − 1| = 0.7071 − 0.0000 = 0.7071",
                                        "  2: 0.7071 − 0.5·|1 − 2| = 0.7071 − 0.5000 = 0.2071"]


QKV_OPTIONS = ["--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2"]


def test_alibi_distances_are_rounded_once_into_float32():
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): ALiBi
    distances are exact whole numbers rounded once into float32."""
    # 2^53 + 2^29 + 1: float64 rounds it to a float32 tie (2^53 + 2^29), which float32 rounds down.
    problem = build_problem({"Q": [[1.0]], "K": [[1.0]], "V": [[1.0]], "alibi": [1], "dtype": "float32",
                             "q_positions": [2**53], "k_positions": [-(2**29 + 1)]})
    assert int(masks.bias(problem)[0, 0, 0]) == -(2**53 + 2**30)


def test_alibi_past_float32_whole_numbers_warns(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): ALiBi
    distances past float32's whole numbers warn."""
    args = ["compute", "--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1", "--alibi-slopes", "1e6",
            "--q-positions", "9007199254740992", "--dtype", "float32", "--format", "json"]
    result = run(*args)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "warning: ALiBi distances |q_pos − k_pos| reach 9,007,199,254,740,992, past 2^24 = 16,777,216, beyond "
        "which float32 does not hold every whole number: distances are rounded (to a multiple of up to "
        "1,073,741,824), so keys at different distances may get the same ALiBi penalty (float64 holds them up "
        "to 2^53: use --dtype float64)"]
    assert run(*args[:-4], "--format", "json").stderr == ""  # float64 holds them: no warning
    assert run(*args[:-6], "--q-positions", str(2**24), "--dtype", "float32", "--format", "json").stderr == ""


@pytest.mark.parametrize("option, value, fragment", [
    ("--sinks", "1e39", "--sinks: sinks[0] is 1e+39, beyond float32's largest finite value 3.4e+38"),
    ("--softcap", "1e39", "--softcap: softcap is 1e+39, which is ∞ in float32"),
    ("--softcap", "1e-50", "--softcap: softcap is 1e-50, which is 0 in float32")])
def test_float32_variants_out_of_range_are_named(run, option, value, fragment):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): a float32
    softcap or sink that the dtype cannot hold is named, not "output overflows"; no numpy
    RuntimeWarning beside the error line."""
    assert_error(run("compute", *QKV_OPTIONS, "--dtype", "float32", option, value), fragment, "or use --dtype float64")


# `"alibi_slopes": false` beside `"alibi"` was a TypeError in the reader: slopes are a list.
@pytest.mark.parametrize("alibi", [True, [0.5, 0.125], None])
@pytest.mark.parametrize("slopes", [False, True, 0, 0.5, "x", {"a": 1}])
def test_alibi_slopes_that_are_no_list_are_refused(run, alibi, slopes):
    doc = json.loads((SAMPLES / "alibi.json").read_text()) | {"alibi_slopes": slopes}
    if alibi is None:
        del doc["alibi"]
    else:
        doc["alibi"] = alibi
    assert_error(run("compute", "-", input=json.dumps(doc)),
                 "<stdin>: alibi_slopes is ", "; expected a list of 2 slopes, one per query head")
    with pytest.raises(InputError, match="alibi_slopes is .*expected a list of 2 slopes") as error:
        build_problem({k: v for k, v in doc.items() if k not in ("title", "description")})
    assert error.value.field == "alibi_slopes"
