"""attncli's backward pass against torch autograd (tests/fixtures/backward_reference.json, made by
tests/fixtures/make_backward_fixtures.py): every gradient to 1e-9 in float64."""

import json
from pathlib import Path

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem

PATH = Path(__file__).parent / "fixtures" / "backward_reference.json"
CASES = json.loads(PATH.read_text())["cases"]
TOL = dict(rtol=0, atol=1e-9)


def trace_of(case):
    return attend(build_problem(case["inputs"]))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_gradient_matches_autograd(case):
    trace = trace_of(case)
    np.testing.assert_allclose(trace.final, np.array(case["expected"]["output"]), **TOL)
    grads = trace.gradients.grads
    assert list(grads) == list(case["expected"]["grads"]) or set(grads) == set(case["expected"]["grads"])
    for name, expected in case["expected"]["grads"].items():
        expected = np.array(expected)
        assert grads[name].shape == expected.shape, name
        np.testing.assert_allclose(grads[name], expected, **TOL, err_msg=name)


def test_intermediate_stages_match_autograd():
    case = next(c for c in CASES if c["name"] == "stages")
    heads = trace_of(case).gradients.heads
    for name in ("d_output", "d_weights", "d_scores"):
        np.testing.assert_allclose(heads[name][0], np.array(case["expected"][name]), **TOL, err_msg=name)


def test_a_fully_masked_row_gets_zero_gradient():
    case = next(c for c in CASES if c["name"] == "mask_fully_masked_row")
    gradients = trace_of(case).gradients
    assert not gradients.heads["d_scores"][0, 1].any()
    assert not gradients.grads["Q"][1].any()  # query 1 sees no key: nothing flows back to it
    assert np.array(case["expected"]["grads"]["Q"])[1].tolist() == [0.0] * 4


def test_the_fixtures_cover_the_issue():
    names = {c["name"] for c in CASES}
    assert {"mask_fully_masked_row", "bias", "scale", "split_heads", "presplit_heads", "gqa",
            "mha_projections_biases", "cross_attention_w_o", "softcap", "rope_half", "rope_interleaved_partial",
            "sinks_gqa", "sinks_fully_masked_row"} <= names
