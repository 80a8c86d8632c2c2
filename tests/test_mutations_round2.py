"""Tests added by the second mutation round (the stage table refactor): each one fails under a
plausible mistake in the new code that the rest of the suite let through, and passes on the real
code. The mutation each test guards is named in its docstring."""

import json

import numpy as np
import pytest

from attncli.compute import backward, limits
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.stages import table as stages
from attncli.stages import vjps
from tests.conftest import peak_bytes


def test_weights_vjp_is_zero_on_a_row_whose_every_key_is_masked_under_uniform():
    """Mutation: the weights vjp no longer zeroes dead rows. Under masked_rows "uniform" a dead
    row's weights are 1/Lk whatever its logits, so their gradient by the logits is 0; P ∘ (dP − D)
    alone is (dP − mean dP) / Lk there. (Through the whole backward pass the masked stage's vjp
    zeroes these cells again, so only the vjp by itself shows it.)"""
    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "masked_rows": "uniform",
                             "mask": [[False, False, False], [True, True, False]]})
    x = np.array([[[-np.inf, -np.inf, -np.inf], [0.5, -0.25, -np.inf]]])  # (1, 2, 3): row 0 dead
    y, dead = stages.softmax(x, "uniform")
    assert dead.tolist() == [[True, False]] and np.allclose(y[0, 0], 1 / 3)
    d = np.array([[[1.0, -2.0, 4.0], [0.5, 1.5, -1.0]]])
    block = stages.Block(problem, np.zeros((1, 2, 2)), np.zeros((1, 3, 2)), np.zeros((1, 3, 2)), 1.0)
    found = vjps.weights(block, x, y, d)
    np.testing.assert_array_equal(found[stages.PREVIOUS][0, 0], 0.0)
    live = y[0, 1] * (d[0, 1] - (d[0, 1] * y[0, 1]).sum())
    np.testing.assert_allclose(found[stages.PREVIOUS][0, 1], live)


def test_log_sum_exp_with_sinks_adds_each_heads_sink_to_every_row():
    """Mutation: the softmax's lse forgets the sink's e^sink in its sum: with sinks it must be
    ln(e^sink + Σ e^x), and a row with every key masked has lse = its sink."""
    x = np.array([[[0.0, 2.0, -1.5], [-np.inf, -np.inf, -np.inf]],
                  [[800.0, 799.0, -np.inf], [1.0, 1.0, 1.0]]])  # (2 heads, 2 rows, 3 keys)
    sinks = np.array([0.5, 800.5])[:, None, None]
    expected = [[float(np.logaddexp.reduce(np.append(row[np.isfinite(row)], s))) for row in head]
                for head, s in zip(x, (0.5, 800.5))]
    lse = np.empty(x.shape[:-1])
    stages.softmax(x, sinks=sinks, lse=lse)  # the trace's lse, from the softmax's own sums
    np.testing.assert_allclose(lse, expected, rtol=1e-15)
    assert lse[0, 1] == 0.5


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_backward_count_holds_the_backward_pass_alone(dtype):
    """Mutation: `limits.score_arrays(backward=True)` one too low (`+ 1` for the two at work). The
    existing test measures attend as a whole against forward + backward counts, whose forward
    temporaries (freed before the backward pass) leave room for a backward count one short. Here
    the backward pass is measured alone, on a finished trace: it peaks at a little over 3
    (H × Lq × Lk) arrays with a mask and a softcap (3.3 in float32), within the count of 4."""
    heads, n, d = 2, 256, 4
    rng = np.random.default_rng(0)
    base = {"Q": rng.normal(size=(n, heads * d)), "K": rng.normal(size=(n, heads * d)),
            "V": rng.normal(size=(n, heads * d)), "heads": heads, "dtype": dtype, "dO": "ones"}
    one = heads * n * n * np.dtype(dtype).itemsize
    for extra in ({}, {"mask": "causal"}, {"mask": "causal", "softcap": 2.0},
                  {"mask": "causal", "softcap": 2.0, "rope": {"style": "half"}, "sinks": [0.5, -1.0]}):
        problem = build_problem(base | extra)
        trace = attend(problem)
        peak = peak_bytes(backward.backward, trace)
        assert peak / one <= limits.score_arrays(problem, backward=True) + 0.2, (extra, peak / one)


def test_scaled_scores_that_overflow_are_refused_on_the_output_only_path():
    """Mutation: `arrays.cannot_overflow` leaves the scale out of its bound (‖q‖ ‖k‖ instead of
    ‖q‖ ‖k‖ · max(1, |scale|)), so a query whose scores are finite but whose scaled scores
    overflow skips the check on the output-only path. q = k = [1e153, 0] with scale 1000: the
    score 1e306 is finite, scaled = 1e309 overflows; the output-only path must name it, as the
    full trace does."""
    from attncli.base.arrays import cannot_overflow
    from attncli.base.errors import NumericError
    from attncli.compute.blocks import attend_output

    Q = np.array([[[1e153, 0.0], [1.0, 0.0]]])  # (1 head, 2 rows, d 2)
    K = np.array([[[1e153, 0.0], [0.0, 1.0]]])
    with np.errstate(over="ignore"):  # 1e306 · 1000 is inf: the bound says "may overflow"
        assert cannot_overflow(Q, K, 1000.0).tolist() == [False, True]
    problem = build_problem({"Q": Q[0].tolist(), "K": K[0].tolist(), "V": [[1.0, 2.0], [3.0, 4.0]], "scale": 1000.0})
    for path in (attend, attend_output):
        with pytest.raises(NumericError, match=r"scaled = scores · scale overflows float64 at head 0, query 0, key 0"):
            path(problem)


@pytest.mark.parametrize("mask", ["causal", "causal_lower_right"])
def test_the_causal_header_words_say_the_inclusive_rule_the_mask_applies(mask):
    """Mutation: `Causal.line` (the table header and JSON's mask_rule) says k_pos[j] < q_pos[i]
    while the rule, and its per-row `condition` in --explain, let a query see its own position.
    The words are checked against the mask itself: the key at the query's own position is seen."""
    from attncli.problem import masks, visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": mask})
    seen = masks.visible(problem)[0]
    for i, q in enumerate(problem.q_positions):
        assert seen[i, list(problem.k_positions).index(q)]  # a query sees the key at its own position
    assert "query i may attend key j when k_pos[j] ≤ q_pos[i]" in masks.rule_lines(problem)[0]
    last = int(problem.q_positions[-1])
    assert visibility.row_rule(problem, len(problem.q_positions) - 1) == f"k_pos ≤ {last} (causal)"


def test_results_written_with_no_decimals_read_back(run):
    """Mutation: readback's `_disagree` tries 1 to 17 decimals but not 0, so `--round 0` output
    (weights 0, 1, 0 for 0.045, 0.768, 0.187) no longer reads back, though it is what the tool
    wrote: every key the tool writes must read back."""
    from tests.conftest import SCOOTER

    text = run("compute", "-", "--format", "json", "--round", "0", input=json.dumps(SCOOTER)).stdout
    assert json.loads(text)["heads"][0]["weights"] == [[0, 1, 0]]
    result = run("compute", "-", "--format", "json", input=text)
    assert result.exit_code == 0, result.stderr


def test_the_carry_choices_are_offered_in_the_order_the_readme_and_help_say_them():
    """Mutation: choices.CARRIES reordered ("rounded", "exact"). The default is written out as
    "exact" where it is used, so only the order the choices are offered in changes; the README
    (`--carry exact|rounded`) and the option's help ("exact (default; …) or rounded") say exact
    first, as the default (the README's text is now docs/reference/explain.md)."""
    from pathlib import Path

    from attncli.base import choices
    from attncli.commands import compute

    readme = Path(__file__).parent.parent.joinpath("docs", "reference", "explain.md").read_text(encoding="utf-8")
    assert f"--carry {'|'.join(choices.CARRIES)}" in readme
    assert tuple(member.value for member in compute.Carry) == choices.CARRIES
    assert choices.CARRIES[0] == "exact"  # the default the help and the README name


def test_why_a_key_is_hidden_reads_each_heads_own_mask_plane():
    """Mutation: `Matrix.why` reads head 0's plane for every head. With a per-head mask, head 1's
    reasons must be where head 1's plane is false (--explain --head 1 names them per masked key)."""
    from attncli.problem import visibility

    mask = [[[True, True, False], [True, True, True]],   # head 0
            [[False, True, True], [True, False, True]]]  # head 1
    problem = build_problem({"Q": [[1.0, 0.0, 0.5, 1.0], [0.0, 1.0, 1.0, 0.0]],
                             "K": [[1.0, 2.0, 0.0, 1.0], [0.5, 0.0, 1.0, 1.0], [2.0, 1.0, 1.0, 0.5]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "heads": 2, "mask": mask})
    for head in (0, 1):
        for row in (0, 1):
            why = visibility.hidden_because(problem, head, row)
            assert [w is not None for w in why] == [not seen for seen in mask[head][row]], (head, row, why)


def test_a_query_is_never_told_the_key_at_its_own_position_is_hidden_by_the_causal_rule():
    """Mutation: `Causal.why` says k_pos ≥ q_pos hides a key (the rule is k_pos > q_pos). Seen only
    where another rule hides that key: with a key_mask hiding key 1, query 1's line for it must
    give the key_mask as the reason, and the causal rule only for the keys after it."""
    from attncli.problem import visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": "causal",
                             "key_mask": [True, False, True]})
    assert visibility.hidden_because(problem, 0, 1) == [None, "key_mask false: padding", "causal: k_pos 2 > q_pos 1"]
    assert visibility.hidden_because(problem, 0, 2) == [None, "key_mask false: padding", None]


ALIBI = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "alibi": [0.5]}


@pytest.mark.parametrize("carry", ["exact", "rounded"])
def test_the_alibi_step_subtracts_the_slope_times_the_distance(run, problem_file, carry):
    """Mutation: the masked stage's hand step adds +slope·|q_pos − k_pos| instead of −. Under
    exact carry the line then fails and is excused by a rounding note; under rounded carry it
    holds on its own printed numbers and is simply wrong. Each line must subtract, with no note
    (0.5·|1 − 0| is exact), and give the trace's value."""
    result = run("compute", problem_file(ALIBI), "--explain", "--row", "1", "--carry", carry)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    step = lines.index(next(line for line in lines if line.startswith("Step 3: add ALiBi")))
    assert lines[step + 1:step + 4] == ["  0: 0.0000 − 0.5·|1 − 0| = 0.0000 − 0.5000 = -0.5000",
                                        "  1: 0.7071 − 0.5·|1 − 1| = 0.7071 − 0.0000 = 0.7071",
                                        "  2: 0.7071 − 0.5·|1 − 2| = 0.7071 − 0.5000 = 0.2071"]


def test_a_dead_rows_uniform_output_is_the_mean_of_v_under_rounded_carry(run, problem_file):
    """Mutation: the output hand step sums every key's contribution, masked ones included. On a
    live row masked keys add 0, but on a row whose every key is masked under masked_rows
    uniform it would sum 0.3333 × v (1.9998) instead of writing the mean of V, 2."""
    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]],
           "mask": [[False, False, False], [True, True, False]], "masked_rows": "uniform"}
    result = run("compute", problem_file(doc), "--explain", "--row", "0", "--carry", "rounded")
    assert result.exit_code == 0, result.stderr
    assert "  output = [2.0000]" in result.stdout.splitlines()


def test_a_csv_of_a_stage_the_problem_lacks_suggests_the_stage_just_before_it(run, problem_file):
    """Mutation: `stages.stand_in` gives the first present stage before the missing one (scores)
    rather than the last (capped): the CSV error must point at the stage shown in its place."""

    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "softcap": 2.0}
    assert stages.stand_in(build_problem(doc), "masked") == "capped"
    result = run("compute", problem_file(doc), "--format", "csv", "--stages", "masked")
    assert result.exit_code == 2 and "use --stages capped" in result.stderr, result.stderr


def test_the_window_names_only_the_keys_beyond_its_inclusive_bounds():
    """Mutation: `Window.why` says k_pos ≥ q_pos + right hides a key (the bound is inclusive: only
    k_pos > q_pos + right is hidden). Seen where another rule hides the key at the bound: with a
    key_mask hiding key 2, query 1 under window [1, 1] is told key 2 is padding, nothing more."""
    from attncli.problem import visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0], [1.0, 1.0]],
                             "V": [[1.0], [0.0], [3.0], [2.0]], "window": [1, 1], "key_mask": [True, True, False, True]})
    assert visibility.hidden_because(problem, 0, 1) == [None, None, "key_mask false: padding",
                                                        "window [1, 1]: k_pos 3 > 1 + 1"]


def test_the_memory_count_for_float32_alibi_is_close_to_what_attend_allocates():
    """Found while mutating `_bias_arrays` (dropping its float32-copy term went unnoticed, because
    the count is already high): for float32 with ALiBi alone the count is ~3 arrays above the peak
    tracemalloc measures, so the memory guard refuses problems that would fit in about 60% of
    the memory it asks for. (In float64 every combination of the variants counts within 0.9 of
    its measured peak; in float32 the ALiBi ones are 2.9 above it.)"""
    heads, n, d = 4, 256, 4
    rng = np.random.default_rng(0)
    problem = build_problem({"Q": rng.normal(size=(n, heads * d)), "K": rng.normal(size=(n, heads * d)),
                             "V": rng.normal(size=(n, heads * d)), "heads": heads, "dtype": "float32",
                             "alibi": True})
    one = heads * n * n * 4
    peak = peak_bytes(attend, problem)
    assert limits.score_arrays(problem) - peak / one < 1, (limits.score_arrays(problem), peak / one)
