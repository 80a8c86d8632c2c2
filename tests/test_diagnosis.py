"""Every common slip is named, on the textbook example and on a masked multi-head problem (issue 29),
and a diagnosis always wins over precision advice. The slips are made here by hand, with numpy,
not with attncli's own mistakes table."""

import json
import math

import numpy as np
import pytest

from tests.conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"
S_Q = np.array([[0.0, 4.0]])
S_K = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
S_V = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, -1.0]])

# A masked multi-head problem: attncli's multihead sample with a fourth word, causal.
X = np.array([[1, 0, 1, 0], [0, 2, 0, 1], [1, 1, 1, 1], [2, 0, 0, 1]], float)
W_Q = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1]], float)
W_K = np.array([[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1], [1, 0, 1, 0]], float)
W_V = np.eye(4)
W_O = np.array([[0.5, 0, 0, 0.5], [0, 0.5, 0.5, 0], [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
MULTI = {"X": X.tolist(), "W_Q": W_Q.tolist(), "W_K": W_K.tolist(), "W_V": W_V.tolist(), "W_O": W_O.tolist(),
         "heads": 2, "mask": "causal"}
CAUSAL = np.tril(np.ones((4, 4), bool))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def head_stages(Q, K, V, visible=None):
    """One head's stages by the textbook: scores, scaled, (masked), weights, output."""
    scores = Q @ K.T
    scaled = scores / math.sqrt(Q.shape[1])
    out = {"scores": scores, "scaled": scaled}
    logits = scaled
    if visible is not None:
        logits = out["masked"] = np.where(visible, scaled, -np.inf)
    out["weights"] = softmax(logits)
    out["output"] = out["weights"] @ V
    return out


def multi_heads(visible=CAUSAL):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return [head_stages(Q[:, 2 * h:2 * h + 2], K[:, 2 * h:2 * h + 2], V[:, 2 * h:2 * h + 2], visible)
            for h in range(2)], (Q, K, V)


def written(values, decimals=4):
    """As a learner writes a matrix: fixed decimals as strings, −∞ as "-inf"."""
    return [["-inf" if np.isneginf(x) else f"{x:.{decimals}f}" for x in row] for row in np.atleast_2d(values)]


def marked(run, problem_file, problem, answers, *options):
    path = problem_file(problem if isinstance(problem, dict) else json.loads(problem.read_text()), "problem.json")
    answers_path = problem_file(answers, "answers.json")
    result = run("check", answers_path, "--problem", path, "--format", "json", *options)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"]


TEXTBOOK = head_stages(S_Q, S_K, S_V)


# --- each slip on the textbook example -------------------------------------------------------

def test_exponentials_given_as_the_weights_are_not_normalised(run, problem_file):
    stages = marked(run, problem_file, SCOOTER, {"weights": written(np.exp(TEXTBOOK["scaled"]))})
    assert stages["weights"]["diagnosis"] == ["not_normalised"]


def test_the_plain_sum_of_the_values_is_an_unweighted_sum(run, problem_file):
    stages = marked(run, problem_file, SCOOTER, {"output": written(S_V.sum(axis=0))})
    assert "unweighted_sum" in stages["output"]["diagnosis"]


def test_the_keys_in_place_of_the_values(run, problem_file):
    stages = marked(run, problem_file, SCOOTER, {"weights": written(TEXTBOOK["weights"]),
                                                 "output": written(TEXTBOOK["weights"] @ S_K)})
    assert stages["output"]["diagnosis"] == ["keys_as_values"]


def test_max_subtracted_logits_are_an_equivalent_form(run, problem_file):
    shifted = TEXTBOOK["scaled"] - TEXTBOOK["scaled"].max()
    stages = marked(run, problem_file, SCOOTER, {"scaled": written(shifted), "weights": written(TEXTBOOK["weights"])})
    assert stages["scaled"]["cells"] == [["carried"] * 3] and stages["scaled"]["diagnosis"] == []
    assert stages["scaled"]["notes"][0].startswith("max_subtracted:")
    assert stages["scaled"]["points"] == 3 and stages["weights"]["cells"] == [["correct"] * 3]


@pytest.mark.parametrize("weights, mistake", [
    ("0,1,0", "argmax"),  # each also the exact weight rounded to 0 decimals
    ("0,0.6667,0.3333", "no_exp"),
    ("1,1,1", "softmax_wrong_axis"),
])
def test_a_diagnosis_wins_over_precision_advice(run, weights, mistake):
    doc = json.loads(run("check", SCOOTER, "--weights", weights, "-f", "json").stdout)["stages"]["weights"]
    assert doc["diagnosis"] == [mistake] and doc["imprecise"] == 0
    assert not any(note.startswith("imprecise") for note in doc["notes"])


def test_a_scale_by_d_k_is_not_imprecise(run):
    doc = json.loads(run("check", SCOOTER, "--scaled", "0,2,1", "-f", "json").stdout)["stages"]["scaled"]
    assert doc["diagnosis"] == ["scale_by_dk"] and doc["cells"] == [["correct", "wrong", "wrong"]]


def test_a_forgotten_scale_written_minus_one_is_no_scale(run, problem_file):
    problem = {"Q": [[1, 0]], "K": [[-1, 0], [2, 0], [0, 1]], "V": [[1], [2], [3]]}  # scaled −0.7071, 1.4142, 0
    doc = marked(run, problem_file, problem, {"scaled": [[-1, 2, 0]]})["scaled"]
    assert doc["diagnosis"] == ["no_scale"] and doc["imprecise"] == 0


def test_imprecise_when_no_mistake_explains_it(run):
    doc = json.loads(run("check", SCOOTER, "--weights", "0.0,0.8,0.2", "-f", "json").stdout)["stages"]["weights"]
    assert doc["imprecise"] == 3 and doc["diagnosis"] == [] and (doc["points"], doc["worth"]) == (2, 3)


# --- each slip on a masked multi-head problem --------------------------------------------------

def multi_answers(heads, final=None, stages=("scores", "scaled", "masked", "weights", "output")):
    doc = {"heads": [{name: written(h[name]) for name in stages} for h in heads]}
    if final is not None:
        doc["output"] = written(final)
    return doc


def test_every_slip_on_a_masked_multi_head_problem(run, problem_file):
    heads, (Q, K, V) = multi_heads()
    slips = {
        "not_normalised": ("weights", lambda h: np.where(CAUSAL, np.exp(h["masked"]), 0.0)),
        "unweighted_sum": ("output", lambda h: CAUSAL.astype(float) @ V[:, :2]),
        "keys_as_values": ("output", lambda h: h["weights"] @ K[:, :2]),
        "mask_ignored": ("masked", lambda h: h["scaled"]),
    }
    for mistake, (stage, made) in slips.items():
        wrong = [dict(h) for h in heads]
        wrong[0][stage] = made(heads[0])
        if stage == "masked":  # what follows, from the learner's own masked
            wrong[0]["weights"] = softmax(wrong[0]["masked"])
            wrong[0]["output"] = wrong[0]["weights"] @ V[:, :2]
        marks = marked(run, problem_file, MULTI, multi_answers(wrong))
        assert mistake in marks[f"heads[0].{stage}"]["diagnosis"], (mistake, marks[f"heads[0].{stage}"])
        assert marks["heads[1].weights"]["diagnosis"] == []


def test_max_subtracted_masked_logits_on_a_multi_head_problem(run, problem_file):
    heads, _ = multi_heads()
    shifted = [dict(h) for h in heads]
    for h in shifted:
        for name in ("scaled", "masked"):
            finite = np.where(np.isfinite(h[name]), h[name], -np.inf)
            h[name] = h[name] - finite.max(axis=1, keepdims=True)
    marks = marked(run, problem_file, MULTI, multi_answers(shifted))
    for h in range(2):
        assert marks[f"heads[{h}].masked"]["right"] == 16 and marks[f"heads[{h}].masked"]["diagnosis"] == []
        assert marks[f"heads[{h}].weights"]["correct"] == 16


WINDOW = json.loads((SAMPLES / "window.json").read_text())


def window_heads(problem, visible):
    Q, K, V = (np.array(problem[k], float) for k in "QKV")
    return head_stages(Q, K, V, visible)


def test_a_window_ignored_is_named_not_off_by_one(run, problem_file):
    causal = np.tril(np.ones((6, 6), bool))
    exact = window_heads(WINDOW, causal & ~np.tril(np.ones((6, 6), bool), -3))
    ignored = dict(exact, masked=np.where(causal, exact["scaled"], -np.inf))
    marks = marked(run, problem_file, WINDOW, {"masked": written(ignored["masked"])})
    assert marks["masked"]["diagnosis"] == ["window_ignored"], marks["masked"]["notes"]


def test_a_window_ignored_on_a_multi_head_problem(run, problem_file):
    problem = MULTI | {"window": [1, 0]}
    band = CAUSAL & ~np.tril(np.ones((4, 4), bool), -2)
    heads, _ = multi_heads(band)
    wrong = [dict(h) for h in heads]
    wrong[1]["masked"] = np.where(CAUSAL, heads[1]["scaled"], -np.inf)
    marks = marked(run, problem_file, problem, multi_answers(wrong, stages=("masked",)))
    assert marks["heads[1].masked"]["diagnosis"] == ["window_ignored"]
    assert marks["heads[0].masked"]["right"] == 16


def test_an_imprecise_cell_a_mistake_gives_only_at_its_few_decimals_stays_imprecise():
    from attncli.marking.diagnosis import diagnose
    from attncli.marking.grading import Answer, Rule

    # written 0.2 and 0.5 (one decimal) for 0.21 and 0.8; the mistake gives 0.17 and 0.5: its 0.2 at one
    # decimal is 0.17, not 0.20, at two, so that cell is as much the exact value rounded (imprecise)
    answer = Answer(values=np.array([[0.2, 0.5]]), decimals=np.array([[1, 1]]))
    cells = np.array([["imprecise", "wrong"]])
    found = diagnose(answer, cells, np.array([[0.21, 0.8]]), [("x", "x: a slip", np.array([[0.17, 0.5]]))], Rule())
    assert found.ids == ("x",) and found.flipped is None and found.cause == "x"
    given = diagnose(answer, cells, np.array([[0.21, 0.8]]), [("x", "x: a slip", np.array([[0.2, 0.5]]))], Rule())
    assert given.flipped.tolist() == [[True, False]]  # the mistake gives 0.20 itself: the cell is its
