"""T5's relative position bias (attncli/problem/relative.py), the `relative_bias` variant and its `biased`
stage: the buckets and whole layers agree with transformers' own T5Attention (tests/fixtures/
relative_reference.json, made by make_relative_fixtures.py in float64; no torch here), and the
variant reaches every path: the reader and its errors, the header, the JSON and .npz round trips,
--explain in both carries, the backward pass, the tiles and the output-only path, --cost and attn check."""

import json
from pathlib import Path

import numpy as np
import pytest

from attncli.compute import cost
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.hand.carry import CARRIES
from attncli.problem.relative import RelativeBias
from attncli.stages import table as stages
from tests.conftest import assert_error
from tests.test_backward import finite_differences
from tests.test_explain import assert_rounded_carry, check_equations

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "relative_reference.json").read_text())
CASES = {case["name"]: case for case in REFERENCE["cases"]}
BUCKETS = [name for name, case in CASES.items() if case["kind"] == "buckets"]
LAYERS = [name for name, case in CASES.items() if case["kind"] == "layer"]


@pytest.mark.parametrize("name", BUCKETS)
def test_every_distance_lands_in_t5s_bucket(name):
    """From −400 to 400, T5's own bucket for each distance: its float32 logarithm's edges included."""
    given = CASES[name]["inputs"]
    bias = RelativeBias(given["buckets"], given["max_distance"], given["bidirectional"],
                        np.zeros((given["buckets"], 1)))
    found = bias.bucket(np.array(given["relative"])).tolist()
    assert found == CASES[name]["expected"]["buckets"]


@pytest.mark.parametrize("name", LAYERS)
def test_t5s_attention_layers_agree(name):
    """T5Attention with its relative_attention_bias, as an encoder and a decoder layer: its weights and its
    output after `o`, to float64's precision."""
    case = CASES[name]
    trace = attend(build_problem(case["inputs"]))
    np.testing.assert_allclose(trace.stage("weights"), case["expected"]["weights"], rtol=0, atol=1e-13)
    np.testing.assert_allclose(trace.final, case["expected"]["output"], rtol=0, atol=1e-12)
    assert [s.name for s in stages.present(trace.problem)][:3] == ["scores", "scaled", "biased"]


def _doc(**more) -> dict:
    """The decoder case, cut to 6 tokens: causal buckets, the causal mask, scale 1."""
    case = json.loads(json.dumps(CASES[LAYERS[1]]["inputs"]))
    case["X"] = case["X"][:6]
    return {**case, **more}


@pytest.mark.parametrize("change, message", [
    ({"relative_bias": 3}, "relative_bias is the number 3; expected {\"buckets\": 32"),
    ({"relative_bias": {"buckets": 8}}, "relative_bias has no max_distance"),
    ({"relative_bias": {"buckets": 8, "max_distance": 12, "bidirectional": False, "embedding": [[1, 2]],
                        "scale": 1}}, 'relative_bias has an unknown key "scale"'),
    ({"relative_bias": {"buckets": 8, "max_distance": 12, "bidirectional": "yes", "embedding": []}},
     'relative_bias.bidirectional is the string "yes"; expected true (T5\'s encoder) or false (its decoder)'),
    ({"relative_bias": {"buckets": 3, "max_distance": 12, "bidirectional": True, "embedding": []}},
     "relative_bias.buckets is the number 3; expected a whole number ≥ 4"),
    ({"relative_bias": {"buckets": 8, "max_distance": 4, "bidirectional": False, "embedding": []}},
     "relative_bias.max_distance is the number 4; expected a whole number ≥ 5"),
    ({"relative_bias": {"buckets": 8, "max_distance": 12, "bidirectional": False, "embedding": [[1, 2]]}},
     "relative_bias.embedding has shape (1 × 2); expected (8 × 2): one row per bucket, one number per query head"),
])
def test_a_malformed_relative_bias_is_refused_naming_its_field(run, problem_file, change, message):
    assert_error(run("compute", problem_file(_doc(**change))), message)


def test_a_float32_run_refuses_an_embedding_it_cannot_hold(run, problem_file):
    doc = _doc()
    doc["relative_bias"]["embedding"][2][1] = 1e39
    assert_error(run("compute", problem_file(dict(doc, dtype="float32"))),
                 "relative_bias.embedding[2][1] is 1e+39, beyond float32's largest finite value")


def test_the_header_and_the_tables_say_it(run, problem_file):
    shown = run("compute", problem_file(_doc()), "-f", "table", "--stages", "biased")
    assert shown.exit_code == 0, shown.stderr
    assert ("relative position bias (T5): + embedding[bucket(k_pos − q_pos)][head], 8 buckets, causal (every k after "
            "q in bucket 0); one bucket per distance below 4, then log-spaced up to max_distance 12") in shown.stdout
    assert "biased = scaled + relative bias (T5: bucket of k_pos − q_pos) · head 1" in shown.stdout


def test_the_json_and_the_npz_hold_it_and_read_back(run, problem_file, tmp_path):
    doc = _doc()
    written = run.json("compute", problem_file(doc))
    assert written["relative_bias"] == doc["relative_bias"] and "biased" in written["heads"][0]
    assert run.json("compute", problem_file(written, "again.json")) == written
    tampered = json.loads(json.dumps(written))
    tampered["heads"][1]["biased"][3][1] += 1
    assert_error(run("compute", problem_file(tampered, "tampered.json"), "-f", "json"), "biased")
    npz = tmp_path / "out.npz"
    assert run("compute", problem_file(doc), "-o", npz).exit_code == 0
    assert run.json("compute", npz) == written


def test_explain_writes_each_keys_distance_bucket_and_bias_in_both_carries(run, problem_file):
    doc = _doc()
    trace = attend(build_problem(doc))
    for carry in CARRIES:
        lines = run.json("compute", problem_file(doc), "--explain", "--carry", carry, "--head", "1",
                         "--row", "5")["explanation"]
        step = lines.index(next(line for line in lines if "add the relative position bias (T5)" in line))
        assert lines[step].startswith("Step 4:"), lines[step]  # after the projection, the scores and the scale of 1
        first = lines[step + 1]
        bucket = int(trace.problem.relative_bias.bucket(np.array([0 - 5]))[0])
        assert first.endswith(f"(k_pos − q_pos = -5: bucket {bucket})"), first
        results, _ = check_equations(lines)
        if carry == "rounded":
            assert_rounded_carry(lines, results)
        else:
            assert [line for line, ok in results if not ok and "unrounded" not in line] == []
    backward = run.json("compute", problem_file({**doc, "dO": "ones"}, "backward.json"), "--explain", "--row", "2",
                        "--head", "0")["explanation"]
    assert any("through biased, d_" in line and " = d_biased × 1 (the bias is a constant)" in line
               for line in backward), backward


def test_the_backward_pass_goes_through_it():
    rng = np.random.default_rng(2)
    doc = _doc(dO=rng.normal(size=(6, 8)).tolist())
    grads = attend(build_problem(doc)).gradients.grads
    for name in ("X", "W_Q", "W_K"):
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_output_only_path_the_tiles_and_the_cost_agree():
    problem = build_problem(_doc(X=CASES[LAYERS[0]]["inputs"]["X"][:7], causal=None))
    trace = attend(problem)
    for block in (1, 3, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, trace.final, rtol=1e-13, atol=1e-14)
    for bq, bk in ((1, 1), (2, 3), (7, 7)):
        np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, trace.output, rtol=0, atol=1e-12)
    counted = cost.cost(problem).naive
    assert counted["biased"].flops == 2 * problem.heads * problem.lq * problem.lk


def test_check_marks_the_stage_and_a_forgotten_bias(run, tmp_path):
    doc = _doc()
    (tmp_path / "problem.json").write_text(json.dumps(doc))
    trace = attend(build_problem(doc))
    present = [s.name for s in stages.present(trace.problem)]
    right = {"heads": [{name: np.where(np.isneginf(trace.stage(name)[h]), None, np.round(trace.stage(name)[h], 12))
                        .tolist() for name in present} for h in range(2)], "output": np.round(trace.final, 12).tolist()}
    (tmp_path / "answers.json").write_text(json.dumps(right))
    marked = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json")
    assert marked.exit_code == 0, marked.stdout[-500:]
    wrong = json.loads(json.dumps(right))
    for h, head in enumerate(wrong["heads"]):  # the bias forgotten: scaled's numbers under biased
        head["biased"] = np.round(trace.scaled[h], 12).tolist()
    (tmp_path / "answers.json").write_text(json.dumps(wrong))
    marks = json.loads(run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format",
                           "json").stdout)["stages"]
    assert marks["heads[0].biased"]["wrong"] > 0 and marks["heads[0].masked"]["right"] > 0
