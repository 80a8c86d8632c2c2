"""`--explain` with RoPE: the explained query's and every key's rotation, pair by pair; with
--carry rounded every printed equation holds, with exact carry a line that does not says why."""

import math
import re
from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render.explain import explain
from tests.test_explain import EXACT, NOTE, NUM, assert_rounded_carry, check_equations, holds

PROBLEM = {"Q": [[1, 0, 2, 1], [0, 1, 1, 0], [1, 1, 0, 2]], "K": [[1, 2, 0, 1], [0, 1, 1, 1], [2, 0, 1, 0]],
           "V": [[1, 0], [0, 1], [1, 1]], "mask": "causal", "rope": True}
PAIR = re.compile(rf"\s+dims (\d+), (\d+):   angle = (-?\d+) × ({NUM}) = ({NUM})   cos = ({NUM})   sin = ({NUM})   "
                  rf"\(({NUM})\)\(({NUM})\) − \(({NUM})\)\(({NUM})\) = ({NUM})   "
                  rf"\(({NUM})\)\(({NUM})\) \+ \(({NUM})\)\(({NUM})\) = ({NUM})")


def pair_lines(lines):
    """(line, holds) for every rotated pair: angle = position × θ, cos and sin of the printed
    angle, and both rotated numbers from the printed ones (math.cos of a ≤ 17-digit angle is
    within 1e-16, far inside half a unit of any shown last place)."""
    results = []
    for raw in lines:
        m = PAIR.fullmatch(NOTE.sub("", raw))
        if not m:
            continue
        angle = EXACT.multiply(Decimal(m[3]), Decimal(m[4]))
        c, s = Decimal(m[6]), Decimal(m[7])
        xa, xb = Decimal(m[8]), Decimal(m[10])
        assert (m[9], m[11], m[13], m[14], m[15], m[16]) == (m[6], m[7], m[10], m[6], m[8], m[7])  # the same numbers
        first = EXACT.subtract(EXACT.multiply(xa, c), EXACT.multiply(xb, s))
        second = EXACT.add(EXACT.multiply(xb, c), EXACT.multiply(xa, s))
        results.append((raw, all([holds(m[5], angle), holds(m[6], Decimal(math.cos(float(Decimal(m[5]))))),
                                  holds(m[7], Decimal(math.sin(float(Decimal(m[5]))))),
                                  holds(m[12], first), holds(m[17], second)])))
    return results


def test_the_rotation_is_shown_pair_by_pair(run, tmp_path):
    lines = explain(attend(build_problem(PROBLEM)), [1])
    text = "\n".join(lines)
    assert "Step 1: rotate q and every k by its position (RoPE half, Hugging Face Llama rotate_half" in text
    assert "  θ = [1.0000, 0.0100]" in lines
    assert "  q at position 1:" in lines
    assert ("    dims 0, 2:   angle = 1 × 1.0000 = 1.0000   cos = 0.5403   sin = 0.8415   "
            "(0.0)(0.5403) − (1.0)(0.8415) = -0.8415   (1.0)(0.5403) + (0.0)(0.8415) = 0.5403") in lines
    assert "    q_rope = [-0.8415, 1.0000, 0.5403, 0.0100]" in lines
    assert "  2: k at position 2:" in lines
    assert "Step 2: raw scores, q_rope · k_rope" in lines
    assert "  0: (-0.8415)(1.0) + (1.0)(2.0) + (0.5403)(0.0) + (0.01)(1.0) = 1.1684" in text
    assert len(pair_lines(lines)) == 2 * 4  # q and 3 keys, 2 pairs each


def test_interleaved_and_partial_rotary_say_so():
    doc = dict(PROBLEM, Q=[[1, 0, 2, 1, 5, 6]], K=[[1, 2, 0, 1, 7, 8]], V=[[1]], mask=None,
               rope={"style": "interleaved", "dims": 4}, q_positions=[3], k_positions=[1])
    lines = explain(attend(build_problem(doc)))
    assert "(RoPE interleaved, GPT-J rotate_every_two: dim 2i pairs with 2i+1; θ_i = 10000^(−2i/4); " \
           "dims 4–5 are not rotated (partial rotary))" in lines[1]
    assert any(line.startswith("    dims 0, 1:   angle = 3 × 1.0000 = 3.0000") for line in lines)
    assert any(line.startswith("    dims 2, 3:   angle = 3 × 0.0100 = 0.0300") for line in lines)
    assert "    q_rope = [" in "\n".join(lines) and ", 5.0000, 6.0000]" in "\n".join(lines)


def test_the_explanation_comes_through_the_cli(run, tmp_path):
    import json

    (tmp_path / "p.json").write_text(json.dumps(PROBLEM))
    result = run("compute", tmp_path / "p.json", "--explain", "--row", "2", "--carry", "rounded")
    assert result.exit_code == 0, result.stderr
    assert "  q at position 2:" in result.stdout and "raw scores, q_rope · k_rope" in result.stdout


value = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5]), st.integers(-300, 300).map(lambda i: i / 100))


@st.composite
def rope_problems(draw):
    lq, lk, d = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.sampled_from([2, 4]))
    matrix = lambda r, c: draw(st.lists(st.lists(value, min_size=c, max_size=c), min_size=r, max_size=r))  # noqa: E731
    return {"Q": matrix(lq, d), "K": matrix(lk, d), "V": matrix(lk, 2),
            "rope": {"style": draw(st.sampled_from(["half", "interleaved"])), "base": draw(st.sampled_from([10000, 100, 2.5]))},
            "q_positions": draw(st.lists(st.integers(0, 40), min_size=lq, max_size=lq)),
            "k_positions": draw(st.lists(st.integers(0, 40), min_size=lk, max_size=lk))}


@settings(max_examples=40, deadline=None)
@given(doc=rope_problems(), precision=st.integers(1, 6))
@example(doc=PROBLEM, precision=2)
def test_every_rounded_carry_rotation_holds_and_exact_lines_say_why(doc, precision):
    trace = attend(build_problem(doc))
    rows = list(range(trace.problem.lq))
    rounded = explain(trace, rows, precision=precision, carry="rounded")
    pairs = pair_lines(rounded)
    assert len(pairs) == len(rows) * (1 + trace.problem.lk) * trace.d_k // 2
    assert [line for line, ok in pairs if not ok] == []
    results, kinds = check_equations(rounded)
    assert kinds["dot"] >= len(rows) * trace.problem.lk
    assert_rounded_carry(rounded, results)  # notes on the logits' lines only, never on a rotation
    exact = explain(trace, rows, precision=precision)
    assert [line for line, ok in pair_lines(exact) + check_equations(exact)[0]
            if not ok and "unrounded" not in line] == []
