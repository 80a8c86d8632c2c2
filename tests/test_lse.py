"""lse = ln Σ_j e^(logit_ij): against mpmath, torch.logsumexp fixtures, and on both paths."""

import json
from pathlib import Path

import mpmath
import numpy as np
import pytest

from attncli.base.softmax import softmax
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from tests.conftest import SAMPLES

FIXTURES = json.loads(Path(__file__).parent.joinpath("fixtures", "lse_reference.json").read_text())["cases"]
KNOWN_KEYS = {"Q", "K", "V", "mask", "bias", "scale", "softcap", "sinks"}  # every key the fixtures use


def log_sum_exp(x, sinks=None):
    """The lse every path keeps: written by the softmax from its own sums."""
    lse = np.empty(x.shape[:-1])
    softmax(x, sinks=sinks, lse=lse)
    return lse


def _expected(rows):
    return np.array([[-np.inf if x is None else x for x in row] for row in rows])


def _mp_lse(row) -> float:
    return float(mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(x)) for x in row if x != -np.inf)))


def test_log_sum_exp_matches_mpmath_also_where_e_to_the_logit_overflows():
    x = np.array([[0.0, 2.0, -1.5], [800.0, 799.0, -np.inf], [-1000.0, -1001.0, -1002.0]])
    expected = [_mp_lse(row) for row in x]
    np.testing.assert_allclose(log_sum_exp(x), expected, rtol=1e-15)


def test_log_sum_exp_is_minus_infinity_for_a_row_of_minus_infinity():
    assert log_sum_exp(np.array([[-np.inf, -np.inf], [0.0, -np.inf]])).tolist() == [-np.inf, 0.0]


@pytest.mark.parametrize("case", FIXTURES, ids=[c["name"] for c in FIXTURES])
def test_lse_equals_torch_logsumexp_on_both_paths(case):
    if not set(case["inputs"]) <= KNOWN_KEYS:
        pytest.skip("needs a variant that has not landed")
    problem = build_problem(case["inputs"])
    expected = _expected(case["expected"]["lse"])
    for trace in (attend(problem), attend_output(problem, block=1)):
        np.testing.assert_array_equal(np.isneginf(trace.lse), np.isneginf(expected))
        np.testing.assert_allclose(trace.lse, expected, rtol=1e-14, atol=0)


def test_json_lse_is_null_for_a_fully_masked_row(run, problem_file):
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
                         "mask": [[True, False], [False, False]]})
    for stages in ("scores,weights,output", "output"):  # the full trace and the output-only path
        doc = run.json("compute", path, "--stages", stages)
        assert doc["heads"][0]["lse"] == [pytest.approx(1 / np.sqrt(2), rel=1e-15), None]


def test_lse_is_the_logit_minus_the_log_of_its_weight(run):
    """weight_ij = e^(logit_ij − lse_i): the identity a kernel's backward pass relies on."""
    doc = run.json("compute", SAMPLES / "random_4x8.json")
    for head in doc["heads"]:
        logits = np.array(head.get("masked", head["scaled"]), dtype=float)
        np.testing.assert_allclose(np.exp(logits - np.array(head["lse"])[:, None]), head["weights"],
                                   rtol=1e-13, atol=1e-300)


def test_lse_is_beside_the_weights_in_the_tables(run):
    table = run("compute", SAMPLES / "scooter.json", "--stages", "weights", "-f", "table").stdout
    assert "│    sum │    lse │" in table and "│ 1.0000 │ 3.0925 │" in table  # ln(1 + e^2.8284 + e^1.4142)


@pytest.mark.parametrize("sample", ["alibi", "softcap", "sinks", "rope", "window"])
def test_lse_of_each_variant_sample_is_the_log_of_its_softmax_sum(run, sample):
    """ln(e^sink + Σ_j e^logit_j) over the stage the softmax reads (capped, or masked with ALiBi),
    in mpmath; weights = e^(logit − lse) on both paths."""
    doc = run.json("compute", SAMPLES / f"{sample}.json")
    blocked = run.json("compute", SAMPLES / f"{sample}.json", "--stages", "output")
    sinks = doc.get("sinks")
    for h, head in enumerate(doc["heads"]):
        logits = head.get("masked", head.get("capped", head["scaled"]))
        sink = None if sinks is None else (sinks[h] if isinstance(sinks, list) else sinks)
        expected = [_mp_lse([-np.inf if x is None else x for x in row] + ([sink] if sink is not None else []))
                    for row in logits]
        np.testing.assert_allclose(head["lse"], expected, rtol=1e-14)
        np.testing.assert_allclose(blocked["heads"][h]["lse"], expected, rtol=1e-14)
        logits = np.array([[-np.inf if x is None else x for x in row] for row in logits])
        np.testing.assert_allclose(np.exp(logits - np.array(head["lse"])[:, None]), head["weights"], atol=1e-14)


def test_log_sum_exp_with_sinks_adds_each_heads_sink_to_every_row():
    """Mutation: the softmax's lse forgets the sink's e^sink in its sum: with sinks it must be
    ln(e^sink + Σ e^x), and a row with every key masked has lse = its sink."""
    x = np.array([[[0.0, 2.0, -1.5], [-np.inf, -np.inf, -np.inf]],
                  [[800.0, 799.0, -np.inf], [1.0, 1.0, 1.0]]])  # (2 heads, 2 rows, 3 keys)
    sinks = np.array([0.5, 800.5])[:, None, None]
    expected = [[float(np.logaddexp.reduce(np.append(row[np.isfinite(row)], s))) for row in head]
                for head, s in zip(x, (0.5, 800.5))]
    lse = np.empty(x.shape[:-1])
    softmax(x, sinks=sinks, lse=lse)  # the trace's lse, from the softmax's own sums
    np.testing.assert_allclose(lse, expected, rtol=1e-15)
    assert lse[0, 1] == 0.5
