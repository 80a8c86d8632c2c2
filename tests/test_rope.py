"""RoPE (attncli/problem/rope.py and the Q_rope, K_rope stages) against transformers' own
apply_rotary_pos_emb (Llama rotate_half, GPT-J rotate_every_two, GPT-NeoX partial rotary) in
tests/fixtures/variants_reference.json; its invariants; its input errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attncli.base.errors import InputError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from attncli.problem.rope import Rope, rotate
from tests.conftest import assert_error
from tests.fixtures.variants import cases

CASES = cases("rope")
TOL = dict(rtol=0, atol=1e-9)


def test_the_fixtures_cover_both_styles_partial_rotary_and_positions():
    styles = {case["inputs"]["rope"]["style"] for case in CASES}
    assert styles == {"half", "interleaved"}
    assert any(case["inputs"]["rope"]["dims"] < np.array(case["inputs"]["Q"]).shape[-1] for case in CASES)
    assert any(case["inputs"]["q_positions"][0] > 0 for case in CASES)


def test_the_two_styles_pair_different_dims():
    x = np.arange(1.0, 9.0).reshape(1, 1, 8)
    half = rotate(x, np.array([1]), Rope("half", 10000.0, 8))
    interleaved = rotate(x, np.array([1]), Rope("interleaved", 10000.0, 8))
    c, s = np.cos(1.0), np.sin(1.0)  # pair 0 turns by position · θ_0 = 1 radian
    assert half[0, 0, 0] == pytest.approx(1 * c - 5 * s) and half[0, 0, 4] == pytest.approx(5 * c + 1 * s)
    assert interleaved[0, 0, 0] == pytest.approx(1 * c - 2 * s) and interleaved[0, 0, 1] == pytest.approx(2 * c + 1 * s)


def test_partial_rotary_leaves_the_other_dims_alone():
    x = np.random.default_rng(0).normal(size=(2, 3, 8))
    for style in ("half", "interleaved"):
        out = rotate(x, np.array([3, 4, 5]), Rope(style, 10000.0, 4))
        np.testing.assert_array_equal(out[..., 4:], x[..., 4:])
        assert not np.allclose(out[..., :4], x[..., :4])


arrays = st.lists(st.floats(-3, 3, allow_nan=False), min_size=12, max_size=12)


@given(q=arrays, k=arrays, shift=st.integers(-50, 50), style=st.sampled_from(["half", "interleaved"]),
       dims=st.sampled_from([2, 4]))
def test_scores_depend_only_on_relative_positions(q, k, shift, style, dims):
    Q, K = np.array(q).reshape(3, 4), np.array(k).reshape(3, 4)
    doc = {"Q": Q.tolist(), "K": K.tolist(), "V": K.tolist(), "rope": {"style": style, "dims": dims}}
    base = attend(build_problem({**doc, "q_positions": [0, 2, 5], "k_positions": [1, 2, 3]}))
    moved = attend(build_problem({**doc, "q_positions": [shift, 2 + shift, 5 + shift],
                                  "k_positions": [1 + shift, 2 + shift, 3 + shift]}))
    np.testing.assert_allclose(moved.scores, base.scores, rtol=0, atol=1e-12)


@given(q=arrays, style=st.sampled_from(["half", "interleaved"]))
def test_position_zero_is_the_identity(q, style):
    x = np.array(q).reshape(1, 3, 4)
    np.testing.assert_array_equal(rotate(x, np.zeros(3, np.int64), Rope(style, 10000.0, 4)), x)


def test_gqa_rotates_each_kv_head_by_the_key_positions():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(4, 3, 4)), rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 2))
    trace = attend(build_problem({"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "rope": True}))
    rotated = rotate(K, np.arange(3), Rope("half", 10000.0, 4))
    np.testing.assert_allclose(trace.K_rope, np.repeat(rotated, 2, axis=0), rtol=0, atol=1e-15)
    np.testing.assert_allclose(trace.scores, trace.Q_rope @ trace.K_rope.transpose(0, 2, 1), rtol=0, atol=1e-15)


def test_rope_false_is_no_rope():
    trace = attend(build_problem({"Q": [[1, 2]], "K": [[3, 4]], "V": [[1]], "rope": False}))
    assert trace.Q_rope is None and "Q_rope" not in trace.stages


@pytest.mark.parametrize("rope, fragments", [
    ({"dims": 3}, ["rope.dims is the number 3", "odd", "even"]),
    ({"dims": 6}, ["rope.dims is the number 6", "outside 2 … d_k = 4"]),
    ({"dims": 0}, ["rope.dims", "outside"]),
    ({"dims": 2.5}, ["rope.dims is the number 2.5", "whole even number"]),
    ({"base": 0}, ["rope.base is the number 0", "finite number > 0"]),
    ({"base": -1}, ["rope.base", "> 0"]),
    ({"base": "10000"}, ["rope.base is the string", "finite number"]),
    ({"style": "interleave"}, ['rope.style is the string "interleave"', 'did you mean "interleaved"']),
    ({"style": "neox"}, ["rope.style", "half", "interleaved"]),
    ({"theta": 10000}, ['rope has an unknown key "theta"', "style, base, dims"]),
    ({"bsae": 10000}, ['did you mean "base"']),
    ("yes", ["rope is the string", "expected true or an object"]),
])
def test_rope_errors_name_the_field(rope, fragments):
    with pytest.raises(InputError) as error:
        build_problem({"Q": [[1, 2, 3, 4]], "K": [[1, 0, 0, 1]], "V": [[1]], "rope": rope})
    for fragment in fragments:
        assert fragment in error.value.message


def test_the_api_takes_rope_as_a_keyword():
    import attncli

    trace = attncli.attend([[1, 2, 3, 4]], [[1, 0, 0, 1]], [[1]], rope={"style": "interleaved"}, q_positions=[3])
    np.testing.assert_allclose(trace.Q_rope, rotate(np.array([[[1.0, 2, 3, 4]]]), np.array([3]),
                                                    Rope("interleaved", 10000.0, 4)), rtol=0, atol=1e-15)
    with pytest.raises(InputError) as error:
        attncli.attend([[1, 2]], [[1, 0]], [[1]], rope={"dims": 4})
    assert error.value.field == "rope.dims"


def test_near_overflow_blocks_are_checked_with_the_rotated_q_and_k():
    # ‖q‖ ‖k‖ near the largest float: the output-only path checks these rows' scores first.
    doc = {"Q": [[1e154, 0], [0, 1e154]], "K": [[1e154, 0], [0, -1e154]], "V": [[1], [2]], "rope": True,
           "q_positions": [1, 2]}
    problem = build_problem(doc)
    np.testing.assert_allclose(attend_output(problem, block=1).final, attend(problem).final, rtol=1e-12, atol=0)
    huge = build_problem(dict(doc, Q=[[1e308, 1e308]], K=[[1e308, 1e308]], V=[[1]], q_positions=[1]))
    for run in (attend, attend_output):
        with pytest.raises(Exception, match="scores = Q_rope K_ropeᵀ overflows float64"):
            run(huge)


def test_rope_angles_at_far_positions_warn(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): RoPE
    angles at far positions warn."""
    args = ["compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "2;1", "--rope", "--format", "json"]
    assert run(*args, "--q-positions", "4000000000").stderr == ""
    far = run(*args, "--q-positions", "9007199254740992")
    assert far.exit_code == 0 and far.stderr.startswith("warning: RoPE angles position · θ_i are float64, and "
                                                         "at position 9,007,199,254,740,992 they may be off")


def test_an_overflowing_rope_angle_names_rope_base(run, tmp_path):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): an angle
    beyond float64 names rope.base, not "scale the inputs down"."""
    np.save(tmp_path / "q.npy", np.ones((1, 200)))
    np.save(tmp_path / "k.npy", np.ones((2, 200)))
    result = run("compute", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--v", "1;2",
                 "--rope-base", "1e-300", "--q-positions", "9007199254740992")
    assert_error(result, "rope.base is 1e-300: at position 9,007,199,254,740,992 the angle position · θ_98",
                 "is beyond float64; expected a base of at least 1")
    assert "scale the inputs down" not in result.stderr
