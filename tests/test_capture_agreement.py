"""attncli/document/agreement.py without torch: a document's `reference` against the recomputation, at the
reference's precision, and the line `attn compute` prints."""

import json

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.agreement import TOLERANCE, Agreement, check_claim, compare
from attncli.document.reading import build_problem
from tests.conftest import SCOOTER


def captured(dtype="float64", shift=0.0, where=("weights", 0, 0, 1)):
    """The scooter problem with its own results as the reference, one cell moved by `shift`."""
    trace = attend(build_problem(SCOOTER))
    reference = {"weights": trace.stage("weights").tolist(), "output": trace.final.tolist(), "dtype": dtype}
    stage, *index = where
    cell = reference[stage]
    for i in index[:-1]:
        cell = cell[i]
    cell[index[-1]] += shift
    return dict(SCOOTER, reference=reference, model={"name": "m", "class": "C", "layer": 3}), trace


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_a_difference_just_past_the_precision_is_named(dtype):
    tolerance = TOLERANCE[dtype] * 2  # the output's largest |value| is 1.35: the bound is tolerance · 1.35
    doc, trace = captured(dtype, tolerance * 1.2, ("output", 0, 1))
    found = compare(doc, trace)
    assert not found.agrees and found.first == {"stage": "output", "row": 0, "column": 1,
                                                "attncli": trace.final[0, 1], "model": trace.final[0, 1] + tolerance * 1.2}
    doc, trace = captured(dtype, TOLERANCE[dtype] * 0.9, ("weights", 0, 0, 2))
    assert compare(doc, trace).agrees


def test_the_lines():
    doc, trace = captured("float32", 3e-7)
    assert compare(doc, trace).line() == "agrees with m layer 3 to 3e-07 (the model computes in float32)"
    doc, trace = captured("float64", 0.25, ("weights", 0, 0, 1))
    assert compare(doc, trace).line() == ("differs from m layer 3: weights, head 0, row 0, column 1: attncli 0.767918, "
                                          "the model 1.01792 (largest difference 2e-01; the model ran in float64); no "
                                          "convention guess (RoPE pairing, sliding window, scale, ALiBi, causal mask) "
                                          "reproduces the model")
    del doc["model"]
    assert compare(doc, trace).line().startswith("differs from the model: weights")


def test_no_reference_no_agreement():
    assert compare(SCOOTER, attend(build_problem(SCOOTER))) is None


@pytest.mark.parametrize("reference, message", [
    ([1, 2], "reference is a list of 2; expected {\"weights\": [...], \"output\": [...], \"dtype\": ...} as attn capture"),
    ({"weights": [[[1]]], "logits": [1]}, "reference has an unknown key 'logits'; expected weights, output and dtype"),
    ({"output": [[1, 2]], "dtype": "float8"}, "reference.dtype is the string \"float8\"; expected one of float64, float32"),
    ({"output": [[1, 2, 3]]}, "reference.output has shape (1, 3), but attncli's output has (1, 2): the document's "
                              "problem is not the model's"),
])
def test_a_malformed_reference_is_refused(reference, message):
    doc = dict(SCOOTER, reference=reference)
    with pytest.raises(InputError) as error:
        compare(doc, attend(build_problem(doc)))
    assert str(error.value).startswith(message), str(error.value)


def test_compute_names_the_difference_and_exits_1(run, tmp_path):
    doc, _ = captured("float64", 0.01, ("weights", 0, 0, 0))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    table = run("compute", path, "--stages", "weights", "--format", "table")
    assert table.exit_code == 1 and table.stdout.strip().splitlines()[-1].startswith(
        "differs from m layer 3: weights, head 0, row 0, column 0: attncli 0.0453884, the model 0.0553884")
    as_json = run("compute", path, "--format", "json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["agreement"]["first"]["column"] == 0
    assert np.isclose(json.loads(as_json.stdout)["agreement"]["difference"], 0.01)


def test_with_output_the_line_goes_to_stderr_and_the_file_holds_the_key(run, tmp_path):
    doc, _ = captured("float32", 2e-7)
    path, written = tmp_path / "p.json", tmp_path / "out.json"
    path.write_text(json.dumps(doc))
    result = run("compute", path, "--output", written)
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == "agrees with m layer 3 to 2e-07 (the model computes in float32)\n"
    assert json.loads(written.read_text())["agreement"]["agrees"] is True


def _captured(dtype, shifts):
    """The scooter problem with its own results as the reference, cells moved by `shifts`
    ({(stage, *index): shift}); `dtype` None leaves the reference's dtype out."""
    trace = attend(build_problem(SCOOTER))
    reference = {"weights": trace.stage("weights").copy(), "output": trace.final.copy()}
    for (stage, *index), shift in shifts.items():
        reference[stage][tuple(index)] += shift
    reference = {k: v.tolist() for k, v in reference.items()} | ({} if dtype is None else {"dtype": dtype})
    return dict(SCOOTER, reference=reference, model={"name": "m", "layer": 0}), trace


def test_float32_means_a_relative_1e_5():
    """Mutation: float32's tolerance 1e-3 rather than 1e-5 (the suite's test reads the constant, so
    it moves with it): a float32 reference 1e-4 off is a different model."""
    assert not compare(*_captured("float32", {("weights", 0, 0, 1): 1e-4})).agrees
    assert compare(*_captured("float32", {("weights", 0, 0, 1): 5e-6})).agrees


def test_a_reference_without_dtype_is_float32():
    """Mutation: a reference without `dtype` read as float64: 1e-7 off (float32 rounding) would
    differ."""
    found = compare(*_captured(None, {("output", 0, 0): 1e-7}))
    assert found.agrees and found.dtype == "float32"


def test_the_first_difference_is_the_weights_before_the_output():
    """Mutation: every stage's first differing cell overwrites the one found before, so the line
    names the output when the weights differ too."""
    found = compare(*_captured("float64", {("weights", 0, 0, 2): 0.1, ("output", 0, 1): 0.1}))
    assert found.first["stage"] == "weights" and (found.first["head"], found.first["row"], found.first["column"]) \
        == (0, 0, 2)


def test_a_written_agreement_must_say_what_the_recomputation_says():
    """Mutation: `check_claim` checks only that the agreement is an object, so a document that
    says it agrees with a model it differs from is read without a word."""
    differs = Agreement("m", 0, "float32", 0.5, {"stage": "weights", "head": 0, "row": 0, "column": 0,
                                                  "attncli": 0.5, "model": 1.0})
    with pytest.raises(InputError, match="the recomputation says: differs from m layer 0"):
        check_claim({"agrees": True}, differs)
    agrees = differs._replace(first=None, difference=1e-8)
    check_claim({"agrees": True}, agrees)
    with pytest.raises(InputError):
        check_claim({"agrees": False}, agrees)


def reference_doc(shift=0.0):
    trace = attend(build_problem(SCOOTER))
    output = trace.final.copy()
    output[0, 1] += shift
    reference = {"weights": trace.stage("weights").tolist(), "output": output.tolist(), "dtype": "float64"}
    return dict(SCOOTER, reference=reference, model={"name": "m", "class": "C", "layer": 0}), trace


def test_a_difference_below_six_digits_is_shown_with_the_digits_that_tell_it():
    """Found by an engineer's trial of captured layers (no torch): the agreement line tells two differing
    numbers apart, with the digits that tell them."""
    doc, trace = reference_doc(1e-7)
    line = compare(doc, trace).line()
    mine, theirs = f"{trace.final[0, 1]:.9g}", f"{trace.final[0, 1] + 1e-7:.9g}"
    assert mine != theirs and f"attncli {mine}, the model {theirs} " in line


def test_the_json_says_the_output_alone_was_compared():
    """Found by an engineer's trial of captured layers (no torch): the agreement's JSON (and line) says
    which stages were compared (--stages output computes no weights)."""
    doc, _ = reference_doc()
    doc["reference"]["weights"][0][0][0] += 0.5  # a weight the output-only path never sees
    problem = build_problem(doc)
    found = compare(doc, attend_output(problem, threads=1))
    assert found.agrees and found.to_json()["compared"] == ["output"]
    assert found.line().endswith(" in the output (weights not computed here, so not "
                                 "compared; the model ran in float64)")  # the line says so too
    assert "in the output" not in compare(reference_doc()[0], attend(problem)).line()
    assert compare(doc, attend(problem)).to_json()["compared"] == ["weights", "output"]
    assert not compare(doc, attend(problem)).agrees


def test_the_model_name_reaches_the_terminal_as_text(run, problem_file):
    """The agreement line names the document's model: a name from someone else's file has its
    controls escaped on stdout (the tables) and stderr (beside a document), as labels are."""
    doc, _ = reference_doc()
    doc["model"]["name"] = "\x1b]0;owned\x07m\u202e"
    path = problem_file(doc)
    for args, stream in ((("--format", "table"), "stdout"), (("--format", "json"), "stderr")):
        result = run("compute", path, *args)
        assert result.exit_code == 0, result.stderr
        text = getattr(result, stream)
        assert "agrees with \\u001b]0;owned\\u0007m\\u202e layer 0" in text
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text


# --- the most likely reason of a difference (attncli/document/guesses.py) -----------------------

def _layer(**keys) -> dict:
    """A causal layer of 2 heads over 6 tokens, with RoPE: X and projections from a fixed seed."""
    rng = np.random.default_rng(3)
    doc = {"X": rng.normal(size=(6, 8)).tolist(), "W_Q": rng.normal(size=(8, 8)).tolist(),
           "W_K": rng.normal(size=(8, 8)).tolist(), "W_V": rng.normal(size=(8, 8)).tolist(), "heads": 2,
           "causal": True, "rope": {"style": "half"}, "model": {"name": "m", "class": "C", "layer": 0}}
    return {**doc, **keys}


def _modelled(doc: dict, **model) -> dict:
    """`doc` with a reference computed by attncli under the model's convention (`model`: the keys that differ)."""
    truth = {k: v for k, v in {**doc, **model}.items() if v is not None}
    trace = attend(build_problem(truth))
    return dict(doc, reference={"weights": trace.stage("weights").tolist(), "output": trace.final.tolist(),
                                "dtype": "float64"})


@pytest.mark.parametrize("document, model, reason", [
    (_layer(), {"rope": {"style": "interleaved"}}, "the RoPE pairing: the model's is interleaved (rotate_every_two: "
                                                   "dims 2i, 2i + 1), the document's half (rotate_half"),
    (_layer(window=[2, 0]), {"window": [3, 0]}, "the sliding window off by one: the model's window is [3, 0], the "
                                                "document's [2, 0]"),
    (_layer(), {"window": [2, 0]}, "a sliding window the document lacks: the model sees 3 keys, the query's own "
                                   "among them (sliding_window 3, attncli's window [2, 0])"),
    (_layer(window=[2, 0]), {"window": None}, "a window the model does not have (the document's [2, 0])"),
    (_layer(scale=0.5), {"scale": 1.0}, "the scale: the model multiplies Q Kᵀ by 1 (as T5), the document by 0.5"),
    (_layer(rope=None), {"alibi": True}, "ALiBi missing: the model adds −slope · |i − j| (the paper's slopes)"),
    (_layer(), {"causal": None}, "the causal mask: the model is bidirectional"),
])
def test_a_difference_names_the_convention_that_reproduces_the_model(document, model, reason):
    """Each guess: the document says one convention, the model (here attncli under the other) another;
    the line names the one that reproduces the model, in `attn compute`'s JSON too."""
    doc = _modelled({k: v for k, v in document.items() if v is not None}, **model)
    found = compare(doc, attend(build_problem(doc)))
    assert not found.agrees
    assert found.reason.startswith(reason), found.reason
    assert found.line().endswith(": recomputed with the model's, attncli agrees")
    assert found.to_json()["reason"] == found.reason


def test_a_difference_no_guess_explains_says_so(run, problem_file):
    doc = _modelled(_layer())
    doc["reference"]["output"][2][3] += 0.5  # the model's o_proj read wrong, say: no convention reproduces it
    found = compare(doc, attend(build_problem(doc)))
    assert found.reason is None and found.line().endswith(
        "; no convention guess (RoPE pairing, sliding window, scale, ALiBi, causal mask) reproduces the model")
    written = run("compute", problem_file(doc), "--format", "json")
    assert written.exit_code == 1 and json.loads(written.stdout)["agreement"]["reason"] is None
    assert "no convention guess" in written.stderr
    agreed = _modelled(_layer())
    assert compare(agreed, attend(build_problem(agreed))).reason is None  # agreeing: no reason sought
