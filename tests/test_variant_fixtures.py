"""Sanity of tests/fixtures/variants_reference.json (torch and transformers' numbers), with no
attncli variant code: the documented conventions, written here in a few lines of numpy, give the
libraries' numbers to 1e-12. This pins the README's mappings (HF sliding_window W = [W−1, 0],
bidirectional W = [W, W], attention_mask polarity, rotate_half vs rotate_every_two, ALiBi slopes
and sign, sinks) against the libraries themselves.
"""

import json

import numpy as np
import pytest

from tests.fixtures.variants import KINDS, PATH, cases, document

ALL = cases()
ATTENTION = [case for case in ALL if "weights" in case["expected"]]
TOL = dict(rtol=0, atol=1e-12)


def ids(items):
    return [case["name"] for case in items]


# ---- the conventions, as the README states them ----------------------------------------------

def positions(inputs, lq, lk):
    q_pos = np.array(inputs.get("q_positions", range(lq)))
    return q_pos, np.array(inputs.get("k_positions", range(lk)))


def visible(inputs, lq, lk):
    """(Lq, Lk) true = may attend: every given rule ANDed."""
    q_pos, k_pos = positions(inputs, lq, lk)
    delta = k_pos[None, :] - q_pos[:, None]  # k_pos − q_pos
    allowed = np.ones((lq, lk), dtype=bool)
    mask = inputs.get("mask")
    if mask == "causal":
        allowed &= delta <= 0
    elif mask is not None:
        allowed &= np.array(mask, dtype=bool)
    if "window" in inputs:
        left, right = inputs["window"]
        allowed &= (left is None or -delta <= left) & (right is None or delta <= right)  # q−left ≤ k ≤ q+right
    if "key_mask" in inputs:
        allowed &= np.array(inputs["key_mask"], dtype=bool)[None, :]
    return allowed


def paper_slopes(n):
    """Press et al.'s get_slopes: 2^(−8k/n) for a power of two; else the closest lower power of
    two's slopes, then every other slope of twice that."""
    power = 2 ** int(np.floor(np.log2(n)))
    slopes = [2.0 ** (-8.0 * k / power) for k in range(1, power + 1)]
    return slopes + [2.0 ** (-8.0 * k / (2 * power)) for k in range(1, 2 * power + 1, 2)][: n - power]


def rotate(x, positions_, style, base, dims):
    """x (H, L, d): RoPE on the first dims dims; half pairs i with i + dims/2, interleaved 2i with 2i+1."""
    theta = base ** (-np.arange(0, dims, 2) / dims)  # (dims/2,)
    angle = positions_[:, None] * theta  # (L, dims/2)
    cos, sin = np.cos(angle), np.sin(angle)
    head, rest = x[..., :dims], x[..., dims:]
    if style == "half":
        a, b = head[..., : dims // 2], head[..., dims // 2:]
        rotated = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    else:
        a, b = head[..., 0::2], head[..., 1::2]
        rotated = np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(head.shape)
    return np.concatenate([rotated, rest], axis=-1)


def attention(case):
    """The whole variant pipeline in numpy: (weights (H, Lq, Lk), head_output (H, Lq, d_v))."""
    inputs, arrays = case["inputs"], case["arrays"]
    q, k, v = arrays["Q"], arrays["K"], arrays["V"]
    h, lq, d = q.shape
    lk = k.shape[1]
    q_pos, k_pos = positions(inputs, lq, lk)
    if "rope" in inputs:
        rope = inputs["rope"]
        q, k = (rotate(x, p, rope["style"], rope["base"], rope["dims"]) for x, p in ((q, q_pos), (k, k_pos)))
    group = h // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # query head i uses kv head i // group
    scaled = q @ k.transpose(0, 2, 1) * inputs.get("scale", d ** -0.5)
    if "softcap" in inputs:
        scaled = inputs["softcap"] * np.tanh(scaled / inputs["softcap"])
    if "alibi" in inputs:
        slopes = np.array(paper_slopes(h) if inputs["alibi"] is True else inputs["alibi"])
        scaled = scaled - slopes[:, None, None] * np.abs(q_pos[:, None] - k_pos[None, :])
    masked = np.where(visible(inputs, lq, lk), scaled, -np.inf)
    sinks = np.array(inputs.get("sinks", [-np.inf] * h))[:, None, None]
    top = np.maximum(masked.max(axis=-1, keepdims=True), sinks)
    exp = np.exp(masked - top)
    weights = exp / (exp.sum(axis=-1, keepdims=True) + np.exp(sinks - top))
    return weights, weights @ v


# ---- the file ----------------------------------------------------------------------------------

def test_the_file_is_strict_small_and_names_its_versions():
    text = PATH.read_text()
    assert len(text.encode()) < 300_000
    json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard JSON token {token}"))
    assert document()["torch_version"].startswith("2.13.0")
    assert document()["transformers_version"] == "5.24.0"
    assert len(set(ids(ALL))) == len(ALL)
    assert {case["kind"] for case in ALL} == set(KINDS)


@pytest.mark.parametrize("case", ALL, ids=ids(ALL))
def test_every_case_names_the_library_function_and_version(case):
    assert set(case) >= {"name", "kind", "library", "inputs", "expected", "arrays"}
    assert "torch 2.13.0" in case["library"] or "transformers 5.24.0" in case["library"]


INPUT_KEYS = {"Q", "K", "V", "heads", "mask", "scale", "q_positions", "k_positions", "window", "key_mask",
              "alibi", "rope", "softcap", "sinks"}


@pytest.mark.parametrize("case", ALL, ids=ids(ALL))
def test_inputs_use_only_attncli_input_keys(case):
    assert set(case["inputs"]) <= INPUT_KEYS


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown fixture kind 'ropes'"):
        cases("ropes")


def test_cases_of_one_kind_and_arrays_are_numpy():
    ropes = cases("rope")
    assert ropes and all(case["kind"] == "rope" for case in ropes)
    case = ropes[0]
    assert case["arrays"]["Q"].dtype == np.float64 and case["expected"]["Q_rope"].dtype == np.float64
    assert cases("window")[0]["expected"]["visible"].dtype == bool


# ---- invariants --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ATTENTION, ids=ids(ATTENTION))
def test_rows_sum_to_one_or_less_with_sinks(case):
    sums = case["expected"]["weights"].sum(axis=-1)
    if case["kind"] == "sinks":
        assert (sums < 1).all() and (sums > 0).any()
    else:
        np.testing.assert_allclose(sums, 1.0, **TOL)


@pytest.mark.parametrize("case", ATTENTION, ids=ids(ATTENTION))
def test_output_is_the_heads_side_by_side(case):
    head_output, output = case["expected"]["head_output"], case["expected"]["output"]
    h, lq, d_v = head_output.shape
    np.testing.assert_array_equal(output, head_output.transpose(1, 0, 2).reshape(lq, h * d_v))


@pytest.mark.parametrize("case", ATTENTION, ids=ids(ATTENTION))
def test_the_documented_conventions_give_the_libraries_numbers(case):
    weights, head_output = attention(case)
    np.testing.assert_allclose(weights, case["expected"]["weights"], **TOL)
    np.testing.assert_allclose(head_output, case["expected"]["head_output"], **TOL)


VISIBLE = [case for case in ALL if "visible" in case["expected"]]


@pytest.mark.parametrize("case", VISIBLE, ids=ids(VISIBLE))
def test_library_masks_match_the_documented_rules(case):
    """HF's mask functions (with their offsets) equal q_pos − left ≤ k_pos ≤ q_pos + right, the
    key_mask polarity (true = real key) and the causal rule on the recorded positions."""
    expected = case["expected"]["visible"]
    np.testing.assert_array_equal(visible(case["inputs"], *expected.shape), expected)
    assert (case["expected"]["weights"][:, ~expected] == 0).all()


def test_hf_sliding_window_w_is_w_keys_up_to_the_query():
    case = next(case for case in ALL if case["name"] == "window_causal_w3")
    assert case["inputs"]["window"] == [2, 0]
    assert case["expected"]["visible"].sum(axis=1).tolist() == [1, 2, 3, 3, 3, 3]


def test_a_fully_masked_row_with_sinks_has_all_zero_weights():
    case = next(case for case in ALL if case["name"] == "sinks_fully_masked_row")
    assert not case["expected"]["visible"][2].any()
    assert (case["expected"]["weights"][:, 2] == 0).all() and (case["expected"]["head_output"][:, 2] == 0).all()


# ---- ALiBi slopes, RoPE, decode ----------------------------------------------------------------

SLOPES = cases("alibi_slopes")


@pytest.mark.parametrize("case", SLOPES, ids=ids(SLOPES))
def test_alibi_slopes_are_the_papers(case):
    # BLOOM takes powers of 2^(−8/n) by torch.pow, the formula here 2^(−8k/n): a few ulps apart
    np.testing.assert_allclose(case["expected"]["alibi_slopes"], paper_slopes(case["inputs"]["heads"]), rtol=1e-14)


def test_alibi_slopes_cover_the_issue_head_counts_and_eight_is_powers_of_a_half():
    assert sorted(case["inputs"]["heads"] for case in SLOPES) == [*range(1, 17), 24, 32]
    eight = next(case for case in SLOPES if case["inputs"]["heads"] == 8)
    assert eight["expected"]["alibi_slopes"].tolist() == [2.0 ** -k for k in range(1, 9)]


ROPE = cases("rope")


@pytest.mark.parametrize("case", ROPE, ids=ids(ROPE))
def test_rope_rotation_is_the_documented_pairing(case):
    rope, arrays = case["inputs"]["rope"], case["arrays"]
    q_pos, k_pos = positions(case["inputs"], arrays["Q"].shape[1], arrays["K"].shape[1])
    for name, x, p in (("Q_rope", arrays["Q"], q_pos), ("K_rope", arrays["K"], k_pos)):
        rotated = rotate(x, p, rope["style"], rope["base"], rope["dims"])
        np.testing.assert_allclose(rotated, case["expected"][name], **TOL)


def test_rope_half_full_is_numpy_rotate_half():
    case = next(case for case in ROPE if case["name"] == "rope_half_full")
    q, d = case["arrays"]["Q"], case["arrays"]["Q"].shape[-1]
    assert case["inputs"]["rope"]["dims"] == d
    angle = np.arange(q.shape[1])[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    cos, sin = np.tile(np.cos(angle), 2), np.tile(np.sin(angle), 2)  # Llama: cat((freqs, freqs))
    rotate_half = np.concatenate([-q[..., d // 2:], q[..., : d // 2]], axis=-1)
    np.testing.assert_allclose(q * cos + rotate_half * sin, case["expected"]["Q_rope"], **TOL)


def test_half_and_interleaved_differ_so_a_wrong_pairing_is_caught():
    case = next(case for case in ROPE if case["name"] == "rope_interleaved_full")
    rope, q = case["inputs"]["rope"], case["arrays"]["Q"]
    wrong = rotate(q, np.arange(q.shape[1]), "half", rope["base"], rope["dims"])
    assert np.abs(wrong - case["expected"]["Q_rope"]).max() > 1e-3


def test_partial_rope_leaves_the_trailing_dims_alone():
    for case in (case for case in ROPE if "partial" in case["name"]):
        dims = case["inputs"]["rope"]["dims"]
        np.testing.assert_array_equal(case["expected"]["Q_rope"][..., dims:], case["arrays"]["Q"][..., dims:])


def test_each_kv_cache_step_is_the_matching_row_of_full_causal_attention():
    decode = {case["name"]: case for case in cases("decode")}
    full = decode.pop("decode_full")["expected"]["head_output"]
    assert len(decode) == full.shape[1]
    for name, step in decode.items():
        t = step["inputs"]["q_positions"][0]
        assert name == f"decode_step_{t}"
        np.testing.assert_allclose(step["expected"]["head_output"][:, 0], full[:, t], **TOL)
