"""Every case in tests/fixtures/torch_reference.json, computed by PyTorch, agrees to 1e-12.

The fixtures were made by tests/fixtures/make_fixtures.py (torch is needed only to regenerate).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "torch_reference.json").read_text())
CASES = FIXTURES["cases"]

def test_fixtures_cover_every_convention():
    names = {case["name"] for case in CASES}
    assert {"scooter", "bool_mask", "fully_masked_row", "causal_top_left_3x5", "causal_lower_right_3x5",
            "additive_bias", "scale_override", "gqa_4q_2kv", "mha_self_2_heads", "mha_bool_mask_blocked",
            "mha_cross_kdim"} <= names
    assert FIXTURES["torch_version"].startswith("2.13")

@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_agrees_with_pytorch(case):
    trace = attend(build_problem(case["input"], invert_mask=case["invert_mask"]))
    expected_weights = np.array(case["expected"]["weights"], dtype=float)
    np.testing.assert_allclose(trace.weights, expected_weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.final, np.array(case["expected"]["output"]), rtol=0, atol=1e-12)

def test_scooter_fixture_has_the_textbook_digits():
    scooter = next(case for case in CASES if case["name"] == "scooter")
    assert np.round(scooter["expected"]["weights"], 4).tolist() == [[[0.0454, 0.7679, 0.1867]]]
    assert np.round(scooter["expected"]["output"], 4).tolist() == [[0.2775, 1.3491]]
