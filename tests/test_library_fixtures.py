"""attncli against the libraries that define each variant (tests/fixtures/variants_reference.json,
made by make_variant_fixtures.py with torch 2.13.0 and transformers 5.24.0): RoPE (Llama, GPT-J,
GPT-NeoX), ALiBi (BLOOM's slopes, SDPA), Hugging Face's sliding-window and padding masks, KV-cache
decoding steps, gpt-oss's sinks and Gemma 2's softcap. Every stage the library computed is held to
1e-9 in float64, in the full trace and in the output-only path at several block sizes."""

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from attncli.problem.masks import visible
from tests.fixtures.variants import KINDS, cases

CASES = [case for kind in KINDS if kind != "alibi_slopes" for case in cases(kind)]
TOL = dict(rtol=0, atol=1e-9)
STAGES = ("Q_rope", "K_rope", "weights")  # per-head stages the libraries give, (H, L, ·)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_attncli_gives_the_libraries_numbers(case):
    problem = build_problem(case["inputs"])
    trace, expected = attend(problem), case["expected"]
    for name in STAGES:
        if name in expected:
            np.testing.assert_allclose(trace.stage(name), expected[name].reshape(trace.stage(name).shape), **TOL)
    np.testing.assert_allclose(trace.output, expected["head_output"].reshape(trace.output.shape), **TOL)
    np.testing.assert_allclose(trace.final, expected["output"], **TOL)
    for block in (1, 2, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, expected["output"], **TOL)
    if "visible" in expected:
        seen = np.broadcast_to(visible(problem), trace.weights.shape)
        np.testing.assert_array_equal(seen, np.broadcast_to(expected["visible"], seen.shape))
    if "alibi_slopes" in expected:
        np.testing.assert_allclose(problem.alibi_slopes, expected["alibi_slopes"], rtol=4e-15, atol=0)


def test_every_attention_case_is_compared():
    assert {case["kind"] for case in CASES} == set(KINDS) - {"alibi_slopes"}
    assert len(CASES) == 32
