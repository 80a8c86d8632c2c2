"""attncli's mask rules against the libraries that define them (tests/fixtures/variants_reference.json,
made with torch 2.13.0 and transformers' masking_utils): Hugging Face's sliding windows (causal
and bidirectional, with offsets), padding masks (left and right), and KV-cache decoding steps."""

import numpy as np

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from tests.fixtures.variants import cases

CASES = cases("window") + cases("key_mask") + cases("decode")
TOL = dict(rtol=0, atol=1e-9)


def test_each_decoding_step_is_the_libraries_row_of_full_causal_attention():
    full = next(case for case in CASES if case["name"] == "decode_full")["expected"]["output"]
    steps = [case for case in CASES if case["name"].startswith("decode_step_")]
    assert len(steps) >= 5
    for case in steps:
        t = case["inputs"]["q_positions"][0]
        np.testing.assert_allclose(attend(build_problem(case["inputs"])).final[0], full[t], **TOL)
