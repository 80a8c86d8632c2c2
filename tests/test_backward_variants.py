"""The backward pass through the variants (softcap, RoPE, sinks): explain, check and JSON."""

import json
import re
from decimal import Decimal

import numpy as np

from attncli.compute.attention import attend
from attncli.compute.backward import to_inputs
from attncli.document.reading import build_problem
from tests.conftest import SAMPLES
from tests.test_explain_backward import check_lines_add_up

NUMBER = r"(-?\d+\.\d+)"


def explain(run, *args):
    result = run("compute", *args, "--explain", "-f", "table")
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_rope_explain_rotates_d_q_back_pair_by_pair(run):
    out = explain(run, SAMPLES / "rope.json", "--do", "ones", "--row", "0")
    assert "Step B4: d_q_rope = Σ_j d_scores_j k_rope_j" in out
    assert "rotated back by the query's angle, pair by pair:" in out
    assert check_lines_add_up(out) >= 6
    carried = re.search(r"  d_q = \[(.*)\]\n  with exact arithmetic: \[(.*)\] \((.*)\)", out)
    assert carried and carried.group(3) == "the same"
    for line in out.splitlines():  # a × cos + b × sin = r   b × cos − a × sin = r′
        m = re.match(rf"  \(\d+, \d+\): {NUMBER} × \(?{NUMBER}\)? \+ \(?{NUMBER}\)? × \(?{NUMBER}\)? = {NUMBER}", line)
        if m:
            a, cos, b, sin, r = map(Decimal, m.groups())
            assert abs(a * cos + b * sin - r) <= Decimal("0.00005"), line


def test_rope_marking_carries_a_learners_d_scores_into_d_q(run, tmp_path):
    doc = json.loads((SAMPLES / "rope.json").read_text()) | {"dO": "ones"}
    trace = attend(build_problem(doc))
    g = trace.gradients.heads
    head = 0
    d_scores = g["d_scores"][head].copy()
    d_scores[0, 0] += 0.3
    d_Q = to_inputs(trace, trace.scale * d_scores[None], head)[0][0]
    answers = {"d_scores": np.round(d_scores, 4).tolist(), "d_Q": np.round(d_Q, 4).tolist()}  # one head
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "a.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "a.json", tmp_path / "p.json", "--format", "json")
    marks = json.loads(result.stdout)["stages"]
    assert marks["d_Q"]["wrong"] == 0 and marks["d_Q"]["carried"] >= 1


def test_softcap_explain_multiplies_by_one_minus_tanh_squared(run):
    out = explain(run, SAMPLES / "softcap.json", "--do", "ones", "--row", "0")
    assert "Step B3: d_capped = weight × (d_weights − D)" in out
    assert "Step B3′: through the softcap, d_scores = d_capped × (1 − tanh²(scaled / c))" in out
    section = out[out.index("Step B3′"):out.index("Step B4")]
    products = re.findall(rf"{NUMBER} × {NUMBER} = {NUMBER}", section)
    assert products
    for a, b, c in products:
        assert abs(Decimal(a) * Decimal(b) - Decimal(c)) <= Decimal("0.00005")
    assert check_lines_add_up(out) >= 6


def test_sinks_get_a_gradient_per_head(run):
    doc = run.json("compute", SAMPLES / "sinks.json", "--do", "ones")
    assert len(doc["grads"]["sinks"]) == len(doc["heads"])


def test_softcap_marking_carries_a_learners_d_weights_into_d_scores(run, tmp_path):
    doc = json.loads((SAMPLES / "softcap.json").read_text()) | {"dO": "ones"}
    trace = attend(build_problem(doc))
    g = trace.gradients.heads
    d_weights = g["d_weights"][0].copy()
    d_weights[0, 1] += 0.5
    cap = trace.problem.softcap
    tanh = trace.stage("capped")[0] / cap
    d_scores = trace.weights[0] * (d_weights - g["D"][0][:, None]) * (1 - tanh ** 2)
    answers = {"d_weights": np.round(d_weights, 4).tolist(), "d_scores": np.round(d_scores, 4).tolist()}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "a.json").write_text(json.dumps(answers))
    marks = json.loads(run("check", tmp_path / "a.json", tmp_path / "p.json", "--format", "json").stdout)["stages"]
    assert marks["d_weights"]["wrong"] == 1
    assert marks["d_scores"]["wrong"] == 0 and marks["d_scores"]["carried"] >= 1
