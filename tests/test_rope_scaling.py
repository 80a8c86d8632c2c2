"""RoPE scaling (`rope.scaling`, attncli/problem/rope_scaling.py) against transformers' own
ROPE_INIT_FUNCTIONS and LlamaRotaryEmbedding in tests/fixtures/rope_scaling_reference.json (made by
make_rope_scaling_fixtures.py; reading it needs numpy only), to 1e-13; a rope without scaling
unchanged bit for bit; every path with scaling (output-only, tiles, backward, --explain, check,
JSON and .npz round trips, the header); its input errors."""

import json
import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.base.errors import InputError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.problem import rope_scaling
from attncli.problem.rope import Rope, length, rotate
from attncli.problem.rope_scaling import TYPES
from attncli.render.explain import explain
from tests.conftest import assert_error
from tests.fixtures.variants import cases as variant_cases
from tests.test_backward import finite_differences
from tests.test_explain import EXACT, NOTE, NUM, check_equations, holds

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "rope_scaling_reference.json").read_text())
CASES = FIXTURE["cases"]
TOL = 1e-13


def scaling_of(case) -> dict:
    return case["inputs"]["rope"]["scaling"]


def test_the_fixture_covers_every_type_far_positions_both_regimes_and_partial_rotary():
    assert {scaling_of(case)["rope_type"] for case in CASES} == set(TYPES)
    past = {}  # per type: whether the largest position + 1 is past the pre-training length
    for case in CASES:
        s = scaling_of(case)
        if s["rope_type"] != "linear":
            trained = s.get("original_max_position_embeddings", s.get("max_position_embeddings"))
            past.setdefault(s["rope_type"], set()).add(max(case["inputs"]["q_positions"]) + 1 > trained)
    assert past == {"dynamic": {True, False}, "llama3": {True}, "yarn": {True}, "longrope": {True, False}}
    assert any(c["inputs"]["rope"]["dims"] < len(c["inputs"]["Q"][0][0]) for c in CASES)  # partial rotary
    assert {scaling_of(c)["rope_type"] for c in CASES if c["expected"]["attention_scaling"] != 1} == {"yarn", "longrope"}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_frequencies_attention_factor_and_rotation_agree_with_transformers(case):
    problem = build_problem(case["inputs"])
    trace, expected = attend(problem), case["expected"]
    theta = problem.rope.frequencies(length(problem))
    np.testing.assert_allclose(theta, expected["inv_freq"], rtol=TOL, atol=0)
    assert math.isclose(problem.rope.attention_factor, expected["attention_scaling"], rel_tol=TOL)
    np.testing.assert_allclose(trace.Q_rope, expected["Q_rope"], rtol=0, atol=TOL)
    np.testing.assert_allclose(trace.K_rope, expected["K_rope"], rtol=0, atol=TOL)
    if case["name"] != "dynamic_within_max_positions":  # the scaling changed something
        assert not np.allclose(theta, problem.rope.theta()) or problem.rope.attention_factor != 1
    # the output-only path and the tiles rotate the same way, block by block
    np.testing.assert_allclose(attend_output(problem, block=1).final, trace.final, rtol=0, atol=1e-12)
    np.testing.assert_allclose(attend_tiles(problem, 2, 2).output, trace.output, rtol=0, atol=1e-12)


def _rotate_before_scaling(x, positions, rope):
    """rope.rotate as it was before RoPE scaling, verbatim."""
    angle = positions.astype(np.float64)[:, None] * rope.theta()[None, :]
    cos, sin = np.cos(angle).astype(x.dtype), np.sin(angle).astype(x.dtype)
    first, second = zip(*rope.pairs())
    a, b = x[..., list(first)], x[..., list(second)]
    out = x.copy()
    out[..., list(first)] = a * cos - b * sin
    out[..., list(second)] = b * cos + a * sin
    return out


def test_a_rope_without_scaling_is_unchanged_bit_for_bit():
    for case in variant_cases("rope"):
        problem = build_problem(case["inputs"])
        trace = attend(problem)
        np.testing.assert_array_equal(trace.Q_rope, _rotate_before_scaling(trace.Q, problem.q_positions, problem.rope))
        np.testing.assert_array_equal(trace.K_rope, _rotate_before_scaling(trace.K, problem.k_positions, problem.rope))
        null = build_problem({**case["inputs"], "rope": {**case["inputs"]["rope"], "scaling": None}})
        np.testing.assert_array_equal(attend(null).final, trace.final)
        assert problem.rope.scaling is None and "scaling" not in problem.rope.to_json()
    assert Rope("half", 10000.0, 4).describe(4) == (
        "half (Hugging Face Llama rotate_half: dim i pairs with i + dims/2); θ_i = 10000^(−2i/4); "
        "angle = position · θ_i; rotates every dim of each head's Q and K")


DOC = {"Q": [[1, 0, 0.5, 1], [0, 1, 1, -0.5]], "K": [[1, 0, 0, 1], [0, 1, 0.5, 0], [1, 1, 0, -1]],
       "V": [[1, 0], [0, 1], [1, 1]], "q_positions": [5, 6], "k_positions": [4, 5, 6]}
YARN = {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4}
LONGROPE = {"rope_type": "longrope", "short_factor": [1, 1.5], "long_factor": [2, 8],
            "original_max_position_embeddings": 4, "factor": 4}


def scaled(scaling, **more):
    return {**DOC, "rope": {"scaling": scaling}, **more}


def test_the_length_is_the_largest_position_of_queries_and_keys_together():
    dynamic = {"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 8}
    short = build_problem(scaled(dynamic, q_positions=[0, 1], k_positions=[0, 1, 2]))
    far_key = build_problem(scaled(dynamic, q_positions=[0, 1], k_positions=[0, 1, 20]))
    assert (length(short), length(far_key)) == (3, 21)
    np.testing.assert_array_equal(short.rope.frequencies(3), short.rope.theta())  # within: unchanged
    base = 10000 * (2 * 21 / 8 - 1) ** (4 / 2)  # base grows with the far key
    np.testing.assert_allclose(attend(far_key).Q_rope, rotate(far_key.inputs["Q"][None], np.array([0, 1]),
                                                              Rope("half", base, 4)), rtol=0, atol=1e-15)


def test_dynamic_takes_the_pre_training_length_by_either_name():
    by_config = {"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 4}
    by_rope = {"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 4}
    np.testing.assert_array_equal(attend(build_problem(scaled(by_config))).Q_rope,
                                  attend(build_problem(scaled(by_rope))).Q_rope)
    build_problem(scaled({**by_config, "original_max_position_embeddings": 4}))  # the same length twice
    with pytest.raises(InputError, match="dynamic has max_position_embeddings 4 and original_max_position_embeddings 8"):
        build_problem(scaled({**by_config, "original_max_position_embeddings": 8}))


@settings(max_examples=25, deadline=None)
@given(q=st.lists(st.floats(-3, 3, allow_nan=False), min_size=8, max_size=8), shift=st.integers(-40, 40),
       scaling=st.sampled_from([{"rope_type": "linear", "factor": 3}, YARN,
                                {"rope_type": "llama3", "factor": 4, "low_freq_factor": 1, "high_freq_factor": 2,
                                 "original_max_position_embeddings": 8}]))
def test_scaled_scores_still_depend_only_on_relative_positions(q, shift, scaling):
    """For the types whose θ' does not depend on the length, a shift of every position changes no score."""
    doc = {"Q": [q[:4], q[4:]], "K": [q[4:], q[:4]], "V": [[1], [2]], "rope": {"scaling": scaling}}
    base = attend(build_problem({**doc, "q_positions": [0, 3], "k_positions": [1, 2]}))
    moved = attend(build_problem({**doc, "q_positions": [shift, 3 + shift], "k_positions": [1 + shift, 2 + shift]}))
    np.testing.assert_allclose(moved.scores, base.scores, rtol=0, atol=1e-11)


@pytest.mark.parametrize("far, factors", [(3, [1, 1.5]), (4, [2, 8])])
def test_longrope_takes_long_factor_only_past_original_max_position_embeddings(far, factors):
    problem = build_problem(scaled(LONGROPE, q_positions=[0, far], k_positions=[0, 1, far]))
    np.testing.assert_allclose(problem.rope.frequencies(length(problem)), problem.rope.theta() / factors, rtol=1e-15)
    assert problem.rope.attention_factor == math.sqrt(1 + math.log(4) / math.log(4))  # both regimes


def test_interleaved_pairs_turn_by_the_same_scaled_frequencies():
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    positions = np.array([1, 5, 9])
    half = build_problem(scaled(YARN)).rope
    inter = Rope("interleaved", half.base, half.dims, half.scaling)
    order = [0, 2, 1, 3]  # interleaved pair i (2i, 2i+1) is half's pair i (i, i + 2)
    np.testing.assert_allclose(rotate(x[..., order], positions, inter)[..., order], rotate(x, positions, half),
                               rtol=0, atol=1e-15)
    assert half.attention_factor == pytest.approx(0.1 * math.log(4) + 1)


def test_the_attention_factor_scales_only_the_rotated_dims():
    x = np.ones((1, 1, 6))
    rope = build_problem({**scaled(YARN), "Q": [[1] * 6], "K": [[1] * 6], "V": [[1]], "q_positions": [0],
                          "k_positions": [0], "rope": {"dims": 4, "scaling": YARN}}).rope
    out = rotate(x, np.array([0]), rope)
    np.testing.assert_allclose(out[0, 0], [rope.attention_factor] * 4 + [1, 1], rtol=1e-15)


@pytest.mark.parametrize("scaling", [YARN, LONGROPE], ids=["yarn", "longrope"])
def test_gradients_include_the_attention_factor(scaling):
    rng = np.random.default_rng(3)
    doc = {**scaled(scaling), "Q": rng.normal(size=(2, 4)), "K": rng.normal(size=(3, 4)),
           "V": rng.normal(size=(3, 2)), "dO": rng.normal(size=(2, 2))}
    grads = attend(build_problem(doc)).gradients.grads
    for name in ("Q", "K", "V"):
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)


AF_PAIR = re.compile(rf"\s+dims (\d+), (\d+):   angle = (-?\d+) × ({NUM}) = ({NUM})   af·cos = ({NUM})   "
                     rf"af·sin = ({NUM})   \(({NUM})\)\(({NUM})\) − \(({NUM})\)\(({NUM})\) = ({NUM})   "
                     rf"\(({NUM})\)\(({NUM})\) \+ \(({NUM})\)\(({NUM})\) = ({NUM})")


def test_explain_shows_theta_before_and_after_and_the_attention_factor():
    lines = explain(attend(build_problem(scaled(YARN))), [0])
    assert lines[1].endswith("θ_i = 10000^(−2i/4), scaled by yarn)")
    assert lines[2] == "  θ  = [1.0000, 0.0100]   before scaling"
    assert lines[3].startswith("  θ' = [1.0000, 0.0025]   yarn: θ'_i = θ_i for dims turning more than beta_fast")
    assert lines[4] == "  af = 1.1386   attention factor (yarn): cos and sin are multiplied by it"
    assert lines[6].startswith("    dims 0, 2:   angle = 5 × 1.0000 = 5.0000   af·cos = 0.3230   af·sin = -1.0919   ")
    dynamic = explain(attend(build_problem(scaled({"rope_type": "dynamic", "factor": 2,
                                                   "max_position_embeddings": 4}))), [0])
    assert dynamic[3].startswith("  θ' = [1.0000, 0.0040]   dynamic: length 7 > max_position_embeddings 4: "
                                 "base' = 10000 · (2 · 7/4 − 1)^(4/2) = 62500")
    assert not any(line.startswith("  af = ") for line in dynamic)  # dynamic has no attention factor
    assert any(line.startswith("    dims 0, 2:   angle = 5 × 1.0000 = 5.0000   cos = ") for line in dynamic)


@pytest.mark.parametrize("precision", [2, 4])
def test_with_carry_rounded_every_scaled_rotation_holds(precision):
    trace = attend(build_problem(scaled(LONGROPE)))
    rounded = explain(trace, [0, 1], precision=precision, carry="rounded")
    pairs = [m for m in (AF_PAIR.fullmatch(NOTE.sub("", line)) for line in rounded) if m]
    af = Decimal([line for line in rounded if line.startswith("  af = ")][0].split()[2])
    assert len(pairs) == 2 * (1 + 3) * 2
    for m in pairs:
        angle = Decimal(m[5])
        c, s = EXACT.multiply(af, Decimal(math.cos(float(angle)))), EXACT.multiply(af, Decimal(math.sin(float(angle))))
        first = EXACT.subtract(EXACT.multiply(Decimal(m[8]), Decimal(m[6])), EXACT.multiply(Decimal(m[10]), Decimal(m[7])))
        assert holds(m[5], EXACT.multiply(Decimal(m[3]), Decimal(m[4])))
        assert holds(m[6], c) and holds(m[7], s) and holds(m[12], first), m[0]
    results, _ = check_equations(rounded)
    # rounded carry keeps only a key's logit unrounded (from q·k to e^x): no rotation line says so
    assert [line for line, ok in results if not ok and "unrounded" not in line] == []
    assert not any("unrounded" in line for line in rounded if not line.lstrip().startswith(("e^", "Rounded carry")))


def test_backward_explanation_rotates_back_with_the_attention_factor(run, problem_file):
    result = run("compute", problem_file(scaled(YARN)), "--explain", "--do", "ones", "--carry", "rounded")
    assert result.exit_code == 0, result.stderr
    assert "rotated back by the query's angle (af·cos and af·sin, as forward), pair by pair:" in result.stdout


def test_json_and_npz_read_back_as_the_same_problem(run, problem_file, tmp_path):
    path = problem_file(scaled(LONGROPE))
    first = run("compute", path, "--format", "json").stdout
    doc = json.loads(first)
    assert doc["rope"]["scaling"] == {"rope_type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 8.0],
                                      "original_max_position_embeddings": 4, "factor": 4.0}
    assert "scaled by longrope (short_factor [2 numbers], long_factor [2 numbers], original_max_position_embeddings" \
           " 4, factor 4): θ'_i = θ_i / short_factor_i" in doc["rope_rule"]
    assert "; attention factor 1.41421 multiplies cos and sin; angle = position · θ'_i;" in doc["rope_rule"]
    assert run("compute", problem_file(first, "out.json"), "--format", "json").stdout == first
    assert run("compute", path, "-o", tmp_path / "a.npz").exit_code == 0
    again = run.json("compute", tmp_path / "a.npz", "--format", "json")
    assert again["rope"] == doc["rope"] and again["output"] == doc["output"]
    table = run("compute", path, "--format", "table").stdout
    assert "\nrope: half (Hugging Face Llama rotate_half: dim i pairs with i + dims/2); θ_i = 10000^(−2i/4); " \
           "scaled by longrope" in table


def test_check_marks_scaled_rotations(run, tmp_path):
    trace = attend(build_problem(scaled(YARN)))
    (tmp_path / "p.json").write_text(json.dumps(scaled(YARN)))
    answers = {"Q_rope": np.round(trace.Q_rope[0], 6).tolist(), "K_rope": np.round(trace.K_rope[0], 6).tolist()}
    (tmp_path / "a.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "a.json", tmp_path / "p.json", "--format", "json")
    assert result.exit_code == 0, result.stdout
    unscaled = attend(build_problem({**DOC, "rope": True}))
    (tmp_path / "a.json").write_text(json.dumps({"Q_rope": np.round(unscaled.Q_rope[0], 6).tolist()}))
    assert run("check", tmp_path / "a.json", tmp_path / "p.json", "--format", "json").exit_code == 1


@pytest.mark.parametrize("scaling, field, fragments", [
    ({"rope_type": "yarm", "factor": 4}, "rope.scaling.rope_type",
     ['rope.scaling.rope_type is the string "yarm" (did you mean "yarn"?)', "linear, dynamic, llama3, yarn, longrope"]),
    ({"factor": 4}, "rope.scaling.rope_type", ["rope.scaling has no rope_type"]),
    ({"rope_type": "default"}, "rope.scaling.rope_type", ["RoPE without scaling (leave scaling out)"]),
    ({"rope_type": "linear", "factr": 4}, "rope.scaling.factr",
     ['rope.scaling has an unknown key "factr" (did you mean "factor"?); linear takes factor']),
    ({"rope_type": "linear"}, "rope.scaling.factor", ["rope.scaling: linear needs factor"]),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "original_max_position_embeddings": 8192},
     "rope.scaling.high_freq_factor", ["rope.scaling: llama3 needs high_freq_factor (4 in Llama 3.1)"]),
    ({"rope_type": "yarn", "factor": 4}, "rope.scaling.original_max_position_embeddings",
     ["yarn needs original_max_position_embeddings", "give that as max_position_embeddings"]),
    ({"rope_type": "dynamic", "factor": 2}, "rope.scaling.max_position_embeddings",
     ["dynamic needs max_position_embeddings"]),
    ({"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 8, "low_freq_factor": 1},
     "rope.scaling.low_freq_factor",
     ['dynamic has no parameter "low_freq_factor"; it takes factor, max_position_embeddings, '
      "original_max_position_embeddings"]),
    ({"rope_type": "linear", "factor": 2, "original_max_position_embeddings": 8},
     "rope.scaling.original_max_position_embeddings",
     ['linear has no parameter "original_max_position_embeddings"; it takes factor']),
    ({"rope_type": "linear", "factor": 2, "rope_theta": 500000}, "rope.scaling.rope_theta",
     ["attncli takes it as rope.base, not under scaling"]),
    ({"rope_type": "linear", "factor": 0}, "rope.scaling.factor", ["rope.scaling.factor is the number 0",
                                                                   "a finite number > 0"]),
    ({"rope_type": "linear", "factor": "2"}, "rope.scaling.factor", ["rope.scaling.factor is the string"]),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4.5},
     "rope.scaling.original_max_position_embeddings", ["is the number 4.5", "a whole number ≥ 1"]),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4, "truncate": 1},
     "rope.scaling.truncate", ["rope.scaling.truncate is the number 1; expected true or false"]),
    ({**LONGROPE, "short_factor": [1, 2, 3]}, "rope.scaling.short_factor",
     ["rope.scaling.short_factor has 3 numbers; expected one per rotated pair: rope.dims/2 = 2"]),
    ({**LONGROPE, "long_factor": [1, -2]}, "rope.scaling.long_factor", ["rope.scaling.long_factor[1] is the number -2"]),
    ({**LONGROPE, "factor": None}, "rope.scaling.factor", ["longrope needs factor, attention_factor or "
                                                           "max_position_embeddings"]),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
      "original_max_position_embeddings": 8}, "rope.scaling.high_freq_factor", ["not above low_freq_factor 4"]),
    ("yarn", "rope.scaling", ["rope.scaling is the string", "an object with rope_type"]),
    ({"rope_type": ["yarn"]}, "rope.scaling.rope_type", ["rope.scaling.rope_type is a list of 1; expected one of"]),
])
def test_errors_name_the_field_the_type_and_the_parameter(scaling, field, fragments):
    with pytest.raises(InputError) as error:
        build_problem(scaled(scaling))
    assert error.value.field == field
    for fragment in fragments:
        assert fragment in error.value.message, error.value.message


def test_the_model_keys_page_says_longrope_needs_one_of_three():
    """docs/reference/model-keys.md listed longrope's factor as optional (issue 24 item 19): one of
    factor, attention_factor and max_position_embeddings is required, as the reader refuses above."""
    page = (Path(__file__).parent.parent / "docs" / "reference" / "model-keys.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `longrope` |"))
    needs = row.split(" | ")[1]
    assert "one of `factor`, `attention_factor`, `max_position_embeddings`" in needs, row


def test_numbers_the_type_cannot_compute_are_refused():
    with pytest.raises(InputError, match="dynamic raises the base to dims/"):
        build_problem({**scaled({"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 4}),
                       "rope": {"dims": 2, "scaling": {"rope_type": "dynamic", "factor": 2,
                                                       "max_position_embeddings": 4}}})
    with pytest.raises(InputError, match="yarn cannot be computed with these parameters and rope.base 1"):
        build_problem({**DOC, "rope": {"base": 1, "scaling": YARN}})


def test_an_error_reaches_the_command_line_as_one_line(run, problem_file):
    result = run("compute", problem_file(scaled({"rope_type": "lineer", "factor": 2})))
    assert_error(result, 'rope.scaling.rope_type is the string "lineer" (did you mean "linear"?)')


def test_a_rope_type_added_to_the_table_reaches_every_path(monkeypatch, run, problem_file):
    """rope_scaling.TYPES is the one table: a throwaway type is read, computed, described, explained
    and written back with nothing else changed."""
    from attncli.problem import rope_scaling

    halved = rope_scaling.RopeType(("factor",), (), lambda s, base, dims, length: (
        rope_scaling._inv_freq(base, dims) / 2, s["factor"]), "θ'_i = θ_i / 2")
    monkeypatch.setitem(rope_scaling.TYPES, "halved", halved)
    doc = scaled({"rope_type": "halved", "factor": 3})
    trace = attend(build_problem(doc))
    halfway = rotate(trace.Q, np.array([2.5, 3.0]), Rope("half", 10000.0, 4))  # θ_i / 2: half the angle
    np.testing.assert_allclose(trace.Q_rope, 3 * halfway, rtol=0, atol=1e-14)
    lines = explain(trace, [0])
    assert lines[3].startswith("  θ' = [0.5000, 0.0050]   halved: θ'_i = θ_i / 2") and lines[4].startswith("  af = 3.0")
    written = run.json("compute", problem_file(doc))
    assert written["rope"]["scaling"] == {"rope_type": "halved", "factor": 3.0}
    assert "scaled by halved (factor 3): θ'_i = θ_i / 2; attention factor 3 multiplies cos and sin" in written["rope_rule"]


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


# docs/reference/model-keys.md listed longrope's `factor` as optional, where one of factor,
# attention_factor and max_position_embeddings is required. The table's "needs" column, read as
# written, is enough for every type; without its "one of" it is not.
SAMPLE_VALUES = {"factor": 4, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8,
                 "max_position_embeddings": 16, "attention_factor": 1.2, "short_factor": [1, 1.5],
                 "long_factor": [2, 8]}
TABLE_ROW = re.compile(r"^\| `(\w+)` \|([^|]*)\|([^|]*)\|", re.M)


def documented_types() -> dict[str, tuple[list[str], list[str]]]:
    """{rope_type: (the names it needs, one of which it needs)} as model-keys.md's table says."""
    text = (Path(__file__).parent.parent / "docs" / "reference" / "model-keys.md").read_text(encoding="utf-8")
    found = {}
    for name, needs, _ in TABLE_ROW.findall(text):
        if name in TYPES:
            plain, _, choice = re.sub(r"\([^)]*\)", "", needs).partition("one of")
            found[name] = (re.findall(r"`(\w+)`", plain), re.findall(r"`(\w+)`", choice))
    return found


def test_the_model_keys_table_says_what_each_rope_type_needs():
    documented = documented_types()
    assert sorted(documented) == sorted(TYPES)
    for name, (needs, one_of) in documented.items():
        assert (sorted(needs), sorted(one_of)) == (sorted(TYPES[name].required), sorted(TYPES[name].one_of)), name
        given = {"rope_type": name, **{key: SAMPLE_VALUES[key] for key in needs + one_of[:1]}}
        build_problem(scaled(given))  # what the table says is needed is enough
        if one_of:
            with pytest.raises(InputError, match=f"{name} needs " + ", ".join(one_of[:-1]) + f" or {one_of[-1]}"):
                build_problem(scaled({key: value for key, value in given.items() if key != one_of[0]}))
