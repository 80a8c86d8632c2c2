"""ALiBi, softcap and sinks against the libraries that define them (tests/fixtures/variants_reference.json,
made with torch 2.13.0 and transformers 5.24.0): BLOOM's `_get_alibi_slopes` for 1…16, 24 and 32
heads (to 4e-15; attncli's are correctly rounded), SDPA with the ALiBi bias, Gemma 2's softcap and gpt-oss's sinks (weights and
outputs to 1e-9 in float64), in the full trace and the output-only path."""

from decimal import Decimal, getcontext

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.problem.variants import paper_slopes
from tests.fixtures.variants import cases

SLOPES = cases("alibi_slopes")
CASES = cases("alibi") + cases("softcap") + cases("sinks")
TOL = dict(rtol=0, atol=1e-9)


def test_the_slope_cases_cover_the_head_counts():
    assert sorted(case["inputs"]["heads"] for case in SLOPES) == list(range(1, 17)) + [24, 32]


@pytest.mark.parametrize("case", SLOPES, ids=[case["name"] for case in SLOPES])
def test_paper_slopes_are_blooms(case):
    """BLOOM's slopes are torch.pow(rounded base, k): a few units in the last place from 2^(−8k/n)."""
    n = case["inputs"]["heads"]
    np.testing.assert_allclose(paper_slopes(n), case["expected"]["alibi_slopes"], rtol=4e-15, atol=0)
    problem = build_problem({"Q": np.ones((n, 1, 2)), "K": np.ones((n, 1, 2)), "V": np.ones((n, 1, 2)), "alibi": True})
    np.testing.assert_array_equal(problem.alibi_slopes, paper_slopes(n))


@pytest.mark.parametrize("n", list(range(1, 17)) + [24, 32])
def test_paper_slopes_are_correctly_rounded(n):
    """Each slope is 2^(−8k/n) (or 2^(−8k/2n)) rounded once, checked with 60-digit decimals."""
    getcontext().prec = 60
    low = 2 ** (n.bit_length() - 1)
    exponents = [Decimal(-8 * k) / low for k in range(1, low + 1)]
    exponents += [Decimal(-8 * k) / (2 * low) for k in range(1, 2 * (n - low), 2)]
    assert paper_slopes(n) == [float(Decimal(2) ** e) for e in exponents]


def test_sinks_rows_sum_to_less_than_one_and_a_fully_masked_row_is_zero():
    case = next(case for case in CASES if case["name"] == "sinks_fully_masked_row")
    trace = attend(build_problem({**case["inputs"], "masked_rows": "error"}))  # no policy applies
    sums = trace.weights.sum(axis=-1)  # (H, Lq)
    dead = [(h, i) for h, i in trace.fully_masked]
    assert dead and all(sums[h, i] == 0 and not trace.output[h, i].any() for h, i in dead)
    assert ((sums < 1) | (sums == 0)).all()
    assert all("the sink takes the whole row" in warning for warning in trace.warnings)
