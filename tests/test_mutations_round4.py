"""Tests added by the fourth mutation round (grouped-query attention, QK-norm, RoPE scaling, the
thread pool and blocks, the agreement check, capture, the explorer page, heatmaps and tables,
the rounded carry, the decimal-comma hint, LaTeX, slips, the docs harness): each one fails under a
plausible mistake in this round's code that the rest of the suite let through, and passes on the
real code. The mutation each test guards is named in its docstring."""

import json
import math
import os
import re

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.compute import blocks
from attncli.compute.attention import attend
from attncli.document.agreement import Agreement, check_claim, compare
from attncli.document.reading import build_problem
from attncli.problem import groups, qk_norm, rope_scaling
from attncli.render.explain import explain
from tests.conftest import SCOOTER

# --- groups.py --------------------------------------------------------------------------------------

def test_the_kv_heads_hint_needs_a_whole_fraction_of_qs_columns():
    """Mutation: `hint` drops `q % k == 0`, so a K of 3 columns beside a Q of 4 (no kv_heads can
    explain that) is told to give kv_heads."""
    assert "kv_heads" in groups.hint("K", np.zeros((2, 4)), np.zeros((2, 2)))
    assert groups.hint("K", np.zeros((2, 4)), np.zeros((2, 3))) == ""
    with pytest.raises(InputError) as error:
        build_problem({"Q": np.ones((2, 4)).tolist(), "K": np.ones((3, 3)).tolist(), "V": np.ones((3, 2)).tolist()})
    assert "kv_heads" not in error.value.message


# --- qk_norm.py and norm_steps.py ------------------------------------------------------------------

def test_the_default_eps_are_the_libraries():
    """Mutation: RMSNorm's default eps 1e-5 rather than transformers' rms_norm_eps 1e-6 (LayerNorm's
    1e-5 is torch.nn.LayerNorm's)."""
    assert qk_norm.read({"weight": [1.0, 1.0]}, "q_norm", 2, 1).eps == 1e-6
    assert qk_norm.read({"type": "layer", "weight": [1.0, 1.0]}, "q_norm", 2, 1).eps == 1e-5


def test_k_norm_over_all_reads_the_key_rows_from_x_kv():
    """Mutation: `whole_rows` projects X for K too, so one head's K_normed over "all" (as marking
    computes it) takes its statistics from the query rows in cross-attention."""
    rng = np.random.default_rng(4)
    doc = {"X": rng.normal(size=(2, 4)).tolist(), "X_kv": rng.normal(size=(3, 4)).tolist(),
           "W_Q": rng.normal(size=(4, 4)).tolist(), "W_K": rng.normal(size=(4, 4)).tolist(),
           "W_V": rng.normal(size=(4, 2)).tolist(), "heads": 2,
           "k_norm": {"weight": rng.normal(size=4).tolist(), "over": "all"}}
    problem = build_problem(doc)
    rows = qk_norm.whole_rows(problem, "K")
    np.testing.assert_allclose(rows, np.array(doc["X_kv"]) @ np.array(doc["W_K"]), rtol=1e-12)


def _explain_problem(over: str, offset: int = 0) -> dict:
    """Four query heads over two kv heads, both norms (tests/test_qk_norm.py's shape)."""
    rng = np.random.default_rng(1)
    doc = {"Q": rng.normal(size=(4, 3, 3)).tolist(), "K": rng.normal(size=(2, 3, 3)).tolist(),
           "V": rng.normal(size=(2, 3, 2)).tolist()}
    for name, n in (("q_norm", 4), ("k_norm", 2)):
        width = 3 * (n if over == "all" else 1)
        doc[name] = {"weight": rng.normal(size=width).tolist(), "over": over, "weight_offset": offset}
    return doc


def _printed(lines: list[str], name: str) -> list[list[float]]:
    return [json.loads(line.split(" = ", 1)[1]) for line in lines if line.strip().startswith(f"{name} = [")]


@pytest.mark.parametrize("head", range(4))
def test_explain_prints_each_query_heads_own_kv_heads_k_normed(head):
    """Mutation: norm_steps' `_part` takes kv head `head % kv_heads` rather than `head // group`, so
    query head 2's keys are normalised with kv head 0's part of a k_norm over "all"."""
    trace = attend(build_problem(_explain_problem("all")))
    lines = explain(trace, [1], heads=[head], carry="rounded")  # from the printed operands
    shown = _printed(lines, "k_normed")
    assert len(shown) == 3
    np.testing.assert_allclose(shown, trace.K_normed[head], rtol=0, atol=2e-3)


def test_explain_multiplies_by_one_plus_the_weight_with_weight_offset():
    """Mutation: norm_steps drops `+ norm.offset`: a Gemma norm's hand step multiplies by the weight
    rather than 1 + weight."""
    trace = attend(build_problem(_explain_problem("head", offset=1)))
    lines = explain(trace, [2], heads=[1], carry="rounded")  # from the printed operands
    np.testing.assert_allclose(_printed(lines, "q_normed")[0], trace.Q_normed[1, 2], rtol=0, atol=2e-3)
    np.testing.assert_allclose(_printed(lines, "k_normed"), trace.K_normed[1], rtol=0, atol=2e-3)


# --- rope_scaling.py -------------------------------------------------------------------------------

def test_a_beta_of_zero_is_the_default():
    """Mutation: beta_fast and beta_slow must be > 0, although 0 (as transformers' `or`) means the
    default."""
    base = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    zero = rope_scaling.read(base | {"beta_fast": 0, "beta_slow": 0}, 10000.0, 8)
    np.testing.assert_array_equal(zero.compute(10000.0, 8)[0], rope_scaling.read(base, 10000.0, 8).compute(10000.0, 8)[0])


def test_yarn_clamps_the_ramps_end_to_dims_minus_1():
    """Mutation: find_correction_range's upper end clamped to dims rather than dims − 1. With beta
    fast enough that the ramp starts at dim 0 and beta_slow's dim past 7, transformers' ramp is i/7
    (transformers 5.24's ROPE_INIT_FUNCTIONS["yarn"] gives these θ to 1e-7)."""
    s = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 10**9, "beta_fast": 1e9,
         "beta_slow": 1.0}
    theta, factor = rope_scaling.read(s, 10000.0, 8).compute(10000.0, 8)
    plain = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    ramp = np.arange(4) / 7
    np.testing.assert_allclose(theta, plain / 4 * ramp + plain * (1 - ramp), rtol=1e-12)
    np.testing.assert_allclose(theta, [1.0, 8.92857e-02, 7.85714e-03, 6.78571e-04], rtol=1e-5)
    assert factor == pytest.approx(0.1 * math.log(4) + 1)


# --- blocks.py -------------------------------------------------------------------------------------

def _long(lq: int, **keys):
    return build_problem({"Q": np.ones((lq, 1)).tolist(), "K": np.ones((lq, 1)).tolist(),
                          "V": np.ones((lq, 1)).tolist(), **keys})


def test_a_causal_block_holds_at_most_masked_rows():
    """Mutation: `narrowed` drops `min(step, MASKED_ROWS)`: a causal problem's blocks of 1000 rows
    become half the middle block's band rather than 256."""
    assert blocks.narrowed(_long(4000, mask="causal"), 1000) == blocks.MASKED_ROWS == 256
    assert blocks.narrowed(_long(4000), 1000) == 1000  # no mask rules: as given


def test_a_window_narrows_blocks_to_half_its_band():
    """Mutation: a quarter of the window's band rather than a half (at least MIN_ROWS)."""
    assert blocks.narrowed(_long(4000, window=[399, 0]), 1000) == 399 // 2
    assert blocks.narrowed(_long(4000, window=[99, 0]), 1000) == blocks.MIN_ROWS


def test_a_block_at_most_min_rows_is_never_widened():
    """Mutation: `narrowed` drops its early return for steps of at most MIN_ROWS: a narrow window's
    `max(MIN_ROWS, band // 2)` then turns the 60 rows asked for into 64."""
    assert blocks.narrowed(_long(4000, window=[99, 0]), 60) == 60


def test_before_numpy_leaves_the_environment_alone_once_numpy_is_loaded(monkeypatch):
    """Mutation: `before_numpy` drops its `numpy in sys.modules` return: with numpy loaded (BLAS
    has read its thread count already) it still writes the variables, which then reach every
    child process."""
    from attncli.compute import threads

    for variable in threads.BLAS_THREADS:
        monkeypatch.delenv(variable, raising=False)
    threads.before_numpy()  # numpy is loaded in the test process
    assert [v for v in threads.BLAS_THREADS if v in os.environ] == []


# --- agreement.py ----------------------------------------------------------------------------------

def _captured(dtype, shifts):
    """The scooter problem with its own results as the reference, cells moved by `shifts`
    ({(stage, *index): shift}); `dtype` None leaves the reference's dtype out."""
    trace = attend(build_problem(SCOOTER))
    reference = {"weights": trace.stage("weights").copy(), "output": trace.final.copy()}
    for (stage, *index), shift in shifts.items():
        reference[stage][tuple(index)] += shift
    reference = {k: v.tolist() for k, v in reference.items()} | ({} if dtype is None else {"dtype": dtype})
    return dict(SCOOTER, reference=reference, model={"name": "m", "layer": 0}), trace


def test_float32_means_a_relative_1e_5():
    """Mutation: float32's tolerance 1e-3 rather than 1e-5 (the suite's test reads the constant, so
    it moves with it): a float32 reference 1e-4 off is a different model."""
    assert not compare(*_captured("float32", {("weights", 0, 0, 1): 1e-4})).agrees
    assert compare(*_captured("float32", {("weights", 0, 0, 1): 5e-6})).agrees


def test_a_reference_without_dtype_is_float32():
    """Mutation: a reference without `dtype` read as float64: 1e-7 off (float32 rounding) would
    differ."""
    found = compare(*_captured(None, {("output", 0, 0): 1e-7}))
    assert found.agrees and found.dtype == "float32"


def test_the_first_difference_is_the_weights_before_the_output():
    """Mutation: every stage's first differing cell overwrites the one found before, so the line
    names the output when the weights differ too."""
    found = compare(*_captured("float64", {("weights", 0, 0, 2): 0.1, ("output", 0, 1): 0.1}))
    assert found.first["stage"] == "weights" and (found.first["head"], found.first["row"], found.first["column"]) \
        == (0, 0, 2)


def test_a_written_agreement_must_say_what_the_recomputation_says():
    """Mutation: `check_claim` checks only that the agreement is an object, so a document that
    says it agrees with a model it differs from is read without a word."""
    differs = Agreement("m", 0, "float32", 0.5, {"stage": "weights", "head": 0, "row": 0, "column": 0,
                                                  "attncli": 0.5, "model": 1.0})
    with pytest.raises(InputError, match="the recomputation says: differs from m layer 0"):
        check_claim({"agrees": True}, differs)
    agrees = differs._replace(first=None, difference=1e-8)
    check_claim({"agrees": True}, agrees)
    with pytest.raises(InputError):
        check_claim({"agrees": False}, agrees)


# --- capture_families.py (attribute reading alone: no torch) --------------------------------------

def test_dynamic_scaling_takes_the_configs_max_position_embeddings():
    """Mutation: `rope` no longer adds the config's max_position_embeddings to a dynamic (or
    longrope) scaling, which transformers reads beside rope_parameters: attncli would refuse the
    captured layer (dynamic needs it) or grow the base at another length."""
    from types import SimpleNamespace

    from attncli.capture.families import FAMILIES
    from attncli.capture.reading import rope

    for kind, extra in (("dynamic", {"factor": 2.0}),
                        ("longrope", {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                                      "original_max_position_embeddings": 16})):
        config = SimpleNamespace(model_type="llama", max_position_embeddings=64,
                                 rope_parameters={"rope_type": kind, "rope_theta": 10000.0, **extra})
        found = rope(FAMILIES["llama"], config, 0, 8)
        assert found["scaling"]["max_position_embeddings"] == 64
        build_problem({"Q": np.ones((2, 8)).tolist(), "K": np.ones((2, 8)).tolist(), "V": np.ones((2, 2)).tolist(),
                       "rope": found})


def test_the_scale_is_the_modules_inv_norm_factor():
    """Mutation: `scale` reads `scaling` alone, not BLOOM's `inv_norm_factor` (equal to 1/√d in
    BLOOM itself, so the captured models cannot tell)."""
    from types import SimpleNamespace

    from attncli.capture.reading import scale

    assert scale(SimpleNamespace(inv_norm_factor=0.3), 4) == 0.3
    assert scale(SimpleNamespace(scaling=0.2, inv_norm_factor=0.3), 4) == 0.2
    assert scale(SimpleNamespace(), 4) == 0.5


# --- tables and LaTeX ------------------------------------------------------------------------------

def test_a_table_exactly_as_wide_as_the_terminal_is_not_split():
    """Mutation: `column_chunks` splits when a run would reach the width (`>=`), not pass it: a
    table that fits exactly is cut into two ranges."""
    from attncli.render.tables import column_chunks

    # the label column takes 2 + 4 characters, each column its width + 3: 6 + 8 + 8 = 22
    assert column_chunks([5, 5], 2, 22) == [[0, 1]]
    assert column_chunks([5, 5], 2, 21) == [[0], [1]]


def test_a_hash_in_a_label_is_escaped_for_latex():
    """Mutation: `#` dropped from the LaTeX escapes: a label `#1` would be a macro parameter."""
    from attncli.render.export import latex, tex

    assert tex("#1 & 50%") == r"\#1 \& 50\%"
    trace = attend(build_problem(dict(SCOOTER, key_labels=["#1", "b", "c"])))
    text = latex(trace, ["weights"], 2, [], None)
    assert r"\#1" in text and "#1" not in text.replace(r"\#1", "")


# --- the explorer page -----------------------------------------------------------------------------

CAUSAL_DO = {"Q": [[1, 0], [0, 1], [1, 1], [0.5, -1]], "K": [[1, 0], [0, 1], [1, 1], [0.5, -1]],
             "V": [[1, 0], [0, 1], [1, 1], [2, -1]], "mask": "causal", "dO": [[1, 0], [0, 1], [1, 1], [0.5, -1]]}
CELL = re.compile(r'<td(?: class="([a-z0-9]+)")? data-stage="([^"]*)" data-head="[^"]*" data-row="(\d+)" '
                  r'data-col="(\d+)"[^>]*>([^<]*)</td>')


def _page(run, tmp_path, doc) -> list[tuple[str, str, int, int, str]]:
    """The value cells of `doc`'s page: (class, stage, row, column, text)."""
    source, target = tmp_path / "p.json", tmp_path / "p.html"
    source.write_text(json.dumps(doc), encoding="utf-8")
    result = run("compute", source, "-o", target)
    assert result.exit_code == 0, result.stderr
    return [(c, s, int(i), int(j), t) for c, s, i, j, t in CELL.findall(target.read_text(encoding="utf-8"))]


def test_the_gradients_of_hidden_keys_are_marked_masked_on_the_page(run, tmp_path):
    """Mutation: the masked mark only on the stages from `masked` on, not the gradients: d_weights
    and d_scores of a hidden key (0) show as an ordinary 0."""
    cells = _page(run, tmp_path, CAUSAL_DO)
    for stage in ("weights", "d_weights", "d_scores"):
        marked = {(i, j) for c, s, i, j, _ in cells if s == stage and c == "x"}
        assert marked == {(i, j) for i in range(4) for j in range(4) if j > i}, stage


def test_negative_cells_take_the_second_colour(run, tmp_path):
    """Mutation: the heat class's sign test flipped (`finite > 0` for the `n` classes), so positive
    numbers are coloured as negative ones."""
    cells = _page(run, tmp_path, CAUSAL_DO)
    coloured = [(c, float(t.replace("−", "-"))) for c, s, _, _, t in cells if c and c != "x"]
    assert any(v < 0 for _, v in coloured) and any(v > 0 for _, v in coloured)
    assert all(c.startswith("n") == (v < 0) for c, v in coloured)


def test_a_row_without_a_final_section_has_no_final_span():
    """Mutation: `cut` finds a final section whenever there are more starts than heads, which the
    end-of-lines sentinel always gives: a one-head problem's row gets an empty final span."""
    from attncli.render.page_derive import cut

    trace = attend(build_problem(SCOOTER))
    lines = explain(trace, [0], None, 4, "exact")
    assert cut(trace, lines)["final"] is None
    rng = np.random.default_rng(0)
    two = {"Q": rng.normal(size=(2, 2, 2)).tolist(), "K": rng.normal(size=(2, 2, 2)).tolist(),
           "V": rng.normal(size=(2, 2, 2)).tolist(), "W_O": rng.normal(size=(4, 3)).tolist()}
    trace = attend(build_problem(two))
    lines = explain(trace, [0], None, 4, "exact")
    start, end = cut(trace, lines)["final"]
    assert start < end == len(lines)


def test_the_first_row_is_derived_even_past_the_budget(monkeypatch):
    """Mutation: the budget check drops `and found["rows"]`, so a problem whose one row costs more
    than the budget gets no derivation at all rather than its first."""
    from attncli.render import page_derive

    trace = attend(build_problem(SCOOTER))
    monkeypatch.setattr(page_derive, "BUDGET", page_derive.row_cost(trace) - 1)
    found = page_derive.derivations(trace, [0], 4)
    assert list(found["rows"]) == ["0"] and found["missing"] == []


# --- find-the-slip: slip.py ------------------------------------------------------

def test_a_two_stage_slip_is_right_at_either_stage():
    """Mutation: the stage must be the mistake's first (`==` rather than `in (stage, *also)`): RoPE
    left out shows in Q_rope and K_rope alike, and naming K_rope is as right."""
    from attncli.marking.slip import mark_slip

    trace = attend(build_problem(dict(SCOOTER, rope={"style": "half"})))
    key = {"stage": "Q_rope", "mistake": "rope_skipped"}
    for stage in ("Q_rope", "K_rope"):
        assert mark_slip(trace, {"stage": stage, "mistake": "rope_skipped"}, key).cells.tolist() == \
            [["correct", "correct"]]
    assert mark_slip(trace, {"stage": "scores", "mistake": "rope_skipped"}, key).cells.tolist() == \
        [["wrong", "correct"]]
