"""`attn check` on positions and windows: window_off_by_one, window_one_short and causal_misaligned
at the masked stage, and the window and decode exercises' keys round-tripping through check."""

import json

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.marking.exercise import Options, build
from attncli.marking.mistakes import step
from tests.conftest import assert_error


def key(run, kind: str, keys: int = 6, seed: int = 3) -> dict:
    result = run("exercise", "--seed", seed, "--kind", kind, "--keys", keys, "--answers")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def problem_of(key_doc: dict) -> dict:
    """The key's problem: its inputs and rules, without the answers."""
    return {k: v for k, v in key_doc.items()
            if k in ("Q", "K", "V", "mask", "causal", "window", "q_positions", "k_positions", "query_labels",
                     "key_labels")}


def written(x) -> list:
    """A stage as a learner writes it: 4 decimals, −∞ as null."""
    return [[None if v == -np.inf else f"{v:.4f}" for v in row] for row in np.asarray(x)]


def learner(doc: dict, **changed) -> dict:
    """The weights and output a learner gets from the problem with their rules `changed`."""
    trace = attend(build_problem(problem_of(doc) | changed))
    return {"weights": written(trace.weights[0]), "output": written(trace.output[0])}


def marked(run, tmp_path, answers: dict, key_doc: dict) -> dict:
    (tmp_path / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    (tmp_path / "key.json").write_text(json.dumps(key_doc), encoding="utf-8")
    result = run("check", tmp_path / "answers.json", tmp_path / "key.json", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", ["window", "decode"])
def test_the_key_of_a_window_or_decode_exercise_marks_itself_all_correct(run, kind):
    result = run("check", "-", input=json.dumps(key(run, kind)))
    assert result.exit_code == 0, result.stdout


@pytest.mark.parametrize("left, mistake", [(3, "window_off_by_one"), (1, "window_one_short")])
def test_a_window_one_off_is_diagnosed(run, tmp_path, left, mistake):
    doc = key(run, "window")
    assert doc["window"] == [2, 0]  # six words: sliding_window = 3
    result = marked(run, tmp_path, learner(doc, window=[left, 0]), doc)
    assert result["stages"]["weights"]["diagnosis"] == [mistake]
    output = result["stages"]["output"]  # one slip costs one stage: the output follows from it
    assert output["wrong"] == 0 and output["carried"] > 0
    assert "(bounds inclusive)" in result["stages"]["weights"]["notes"][-1]


def test_a_decoding_step_aligned_top_left_is_diagnosed(run, tmp_path):
    doc = key(run, "decode")
    assert doc["q_positions"] == [5]
    result = marked(run, tmp_path, learner(doc, q_positions=[0]), doc)  # the query at row 0 saw key 0 only
    weights = result["stages"]["weights"]
    assert weights["diagnosis"] == ["causal_misaligned"] and weights["right"] == 0
    assert "KV-cache step" in weights["notes"][-1]


def test_a_top_left_problem_aligned_bottom_right_is_diagnosed(run, tmp_path):
    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1], [2, -1]], "V": [[1, 0], [0, 1], [1, 1], [2, -1]],
           "mask": "causal"}  # two queries at positions 0, 1 over four keys: top-left
    wrong = learner(doc, mask="causal_lower_right")  # they saw keys 0 … 2 and 0 … 3
    result = marked(run, tmp_path, {"weights": wrong["weights"]}, doc)
    assert result["stages"]["weights"]["diagnosis"] == ["causal_misaligned"]


def test_a_causal_lower_right_problem_marked_top_left_is_diagnosed(run, tmp_path):
    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1], [2, -1]], "V": [[1, 0], [0, 1], [1, 1], [2, -1]],
           "mask": "causal_lower_right"}
    wrong = learner(doc, mask="causal")
    result = marked(run, tmp_path, {"weights": wrong["weights"]}, doc)
    assert result["stages"]["weights"]["diagnosis"] == ["causal_misaligned"]


def test_the_mistakes_apply_only_where_they_can_be_made():
    square = attend(build_problem({"Q": np.eye(3), "K": np.eye(3), "V": np.eye(3), "mask": "causal"}))
    scaled = square.stage("scaled")[0]
    assert step(square, 0, "masked", scaled, "causal_misaligned") is None  # Lq = Lk: one corner
    assert step(square, 0, "masked", scaled, "window_off_by_one") is None  # no window
    only_itself = attend(build_problem({"Q": np.eye(3), "K": np.eye(3), "V": np.eye(3), "window": [0, 0]}))
    assert step(only_itself, 0, "masked", only_itself.stage("scaled")[0], "window_one_short") is None


def test_window_off_by_one_moves_each_bound_of_one_or_more():
    trace = attend(build_problem({"Q": np.eye(5), "K": np.eye(5), "V": np.eye(5), "window": [1, 2]}))
    masked = step(trace, 0, "masked", trace.stage("scaled")[0], "window_off_by_one")
    i, j = np.indices((5, 5))
    np.testing.assert_array_equal(np.isfinite(masked), (j >= i - 2) & (j <= i + 3))
    short = step(trace, 0, "masked", trace.stage("scaled")[0], "window_one_short")
    np.testing.assert_array_equal(np.isfinite(short), (j >= i) & (j <= i + 1))
    ends_at_query = attend(build_problem({"Q": np.eye(5), "K": np.eye(5), "V": np.eye(5), "window": [2, 0]}))
    masked = step(ends_at_query, 0, "masked", ends_at_query.stage("scaled")[0], "window_off_by_one")
    np.testing.assert_array_equal(np.isfinite(masked), (j >= i - 3) & (j <= i))  # a right bound of 0 stays


def test_the_decode_exercise_is_one_step_of_full_causal_attention():
    step_doc = build(Options(8, "decode", keys=5)).doc
    assert step_doc["q_positions"] == [4] and step_doc["query_labels"] == step_doc["key_labels"][-1:]
    full = attend(build_problem(step_doc | {"Q": np.tile(step_doc["Q"], (5, 1)), "mask": "causal",
                                            "q_positions": list(range(5)), "query_labels": step_doc["key_labels"]}))
    np.testing.assert_allclose(attend(build_problem(step_doc)).output[0, 0], full.output[0, 4], rtol=0, atol=1e-15)


def test_the_window_exercise_window_grows_with_the_sentence():
    assert [build(Options(1, "window", keys=k)).doc["window"] for k in (3, 4, 5, 8)] == [[1, 0], [1, 0], [2, 0], [3, 0]]
    doc = build(Options(1, "window", keys=5)).doc
    assert doc["mask"] == "causal" and "Hugging Face sliding_window = 3" in doc["description"]
    with_random = build(Options(1, "window", keys=5, mask="random")).doc
    assert with_random["causal"] is True and with_random["window"] == [2, 0]
    assert len(with_random["mask"]) == 5


@pytest.mark.parametrize("args, fragments", [
    (("--kind", "decode", "--queries", "2"), ("--queries", "one query", "1")),
    (("--kind", "window", "--keys", "2"), ("--keys", "3 or more keys")),
])
def test_exercise_options_that_cannot_make_the_kind(run, args, fragments):
    assert_error(run("exercise", "--seed", "1", *args), *fragments)


def test_a_decode_worksheet_says_where_the_query_is(run):
    sheet = run("exercise", "--seed", "2", "--kind", "decode", "--keys", "4", "--format", "markdown").stdout
    assert "- positions: q_positions [3]" in sheet and "is at position 3" in sheet


def test_the_window_sample_is_hugging_face_sliding_window_3(run):
    from tests.conftest import SAMPLES

    doc = json.loads((SAMPLES / "window.json").read_text(encoding="utf-8"))
    weights = np.array(run.json("compute", SAMPLES / "window.json")["heads"][0]["weights"])  # (6, 6)
    q, k = np.indices(weights.shape)
    sliding_window = 3  # transformers.masking_utils: kv_idx > q_idx - W, and causal kv_idx <= q_idx
    hf = (k > q - sliding_window) & (k <= q)
    assert doc["window"] == [sliding_window - 1, 0]
    np.testing.assert_array_equal(weights > 0, hf)
    assert "sliding_window = 3" in doc["description"] and "window" in run("example").stdout


@pytest.mark.parametrize("kind", ["window", "decode"])
def test_the_reproduce_line_of_a_window_or_decode_key_gives_the_same_problem(run, kind):
    doc = key(run, kind, keys=5, seed=11)
    command = doc["reproduce"]
    assert f"--kind {kind}" in command and ("--queries 1" in command) == (kind == "decode")
    again = json.loads(run(*command.split()[1:], "--answers").stdout)
    assert again == doc
