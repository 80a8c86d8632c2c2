"""The newer keys (positions, window, key_mask, alibi, rope, softcap, sinks, dO) for the fuzzers:
`variant_keys` draws some of them for a problem of a given size (tests/test_fuzz.py mixes them,
sometimes odd, into its structured problems); on valid problems, the full trace, the output-only
path (in blocks) and the tiles agree, and the JSON written (with and without tiles) reads back as
the same document (attncli/document/readback.py checks every result on the way in).
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attncli.base.errors import AttnError
from attncli.cli import app
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem

SHORT = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
RUNNER = CliRunner()


def invoke(args, input=None):
    return RUNNER.invoke(app, args, input=input)


ODD = st.sampled_from(["", None, "none", -1, 0, 1e300, [], {}, [None], "causal", True, 2**63])
positions = st.one_of(st.integers(-5, 12), st.sampled_from([2**24 + 1, -(2**40), 2**53, 9007199254740993]))


@st.composite
def variant_keys(draw, heads, lq, lk, d, jitter=lambda n: n, odd=False):
    """Some of the positions, window, key_mask, alibi, rope, softcap, sinks and dO keys for a
    problem of this size; with `odd`, some values are of the wrong kind or size."""
    def value(good):
        return draw(st.one_of(good, ODD)) if odd and draw(st.integers(0, 5)) == 0 else draw(good)

    found = {}
    n = {"q": jitter(lq), "k": jitter(lk), "mask": jitter(lk), "h": jitter(heads)}
    choices = {
        "q_positions": lambda: value(st.lists(positions, min_size=n["q"], max_size=n["q"])),
        "k_positions": lambda: value(st.lists(positions, min_size=n["k"], max_size=n["k"])),
        "window": lambda: value(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=2, max_size=2)),
        "key_mask": lambda: value(st.lists(st.booleans(), min_size=n["mask"], max_size=n["mask"])),
        "alibi": lambda: value(st.one_of(st.just(True), st.lists(
            st.floats(-2, 2, allow_nan=False), min_size=n["h"], max_size=n["h"]))),
        "rope": lambda: value(st.one_of(st.just(True), st.fixed_dictionaries({}, optional={
            "style": st.sampled_from(["half", "interleaved"]), "base": st.sampled_from([10000, 500000, 2.5]),
            "dims": st.just(2 * (d // 2) or 2)}))),
        "softcap": lambda: value(st.floats(0.1, 50)),
        "sinks": lambda: value(st.one_of(st.floats(-3, 3), st.lists(st.floats(-3, 3), min_size=n["h"],
                                                                       max_size=n["h"]))),
        "dO": lambda: value(st.one_of(st.just("ones"), st.just(None))),
    }
    for key in draw(st.lists(st.sampled_from(sorted(choices)), max_size=4, unique=True)):
        found[key] = choices[key]()
    if found.get("dO", 0) is None:
        del found["dO"]
    return found


# The newer keys on valid problems: the full trace, the output-only path (in blocks) and the tiles
# agree; the JSON written reads back as the same document (attncli/document/readback.py checks every result).
@st.composite
def variant_problems(draw):
    heads, lq, lk = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    d, dv = draw(st.sampled_from([2, 4])), draw(st.integers(1, 2))
    small = st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 3))
    matrix = lambda rows, cols: [[draw(small) for _ in range(cols)] for _ in range(rows)]  # noqa: E731
    doc = {"Q": matrix(lq, d * heads), "K": matrix(lk, d * heads), "V": matrix(lk, dv * heads), "heads": heads}
    if draw(st.booleans()):
        doc["mask"] = draw(st.sampled_from(["causal", "causal_lower_right"]))
    doc.update(draw(variant_keys(heads, lq, lk, d)))
    if doc.get("mask") == "causal_lower_right":
        doc.pop("q_positions", None)  # it sets them
    doc["masked_rows"] = draw(st.sampled_from(["zero", "uniform"]))
    doc["dtype"] = draw(st.sampled_from(["float64", "float64", "float32"]))
    return doc


def three_paths_and_read_back(doc, bq, bk):
    result = invoke(["compute", "-", "--format", "json"], input=json.dumps(doc))
    assert "internal error" not in result.stderr, result.stderr
    if result.exit_code != 0:  # refused with one line (keys after every query, an overflow): nothing to compare
        assert result.exit_code == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
        return
    json.loads(result.stdout)
    try:
        problem = build_problem(doc)
        full, blocked, tiled = attend(problem), attend_output(problem, block=2), attend_tiles(problem, bq, bk)
    except AttnError as error:
        raise AssertionError(f"the CLI computed it, the API refused: {error}") from None
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if doc["dtype"] == "float32" else {"rtol": 1e-9, "atol": 1e-12}
    np.testing.assert_allclose(blocked.final, full.final, **tolerance)
    np.testing.assert_allclose(tiled.output, full.stage("output"), **tolerance)
    again = invoke(["compute", "-", "--format", "json"], input=result.stdout)
    assert again.exit_code == 0 and again.stdout == result.stdout, again.stderr
    tiles = invoke(["compute", "-", "--format", "json", "--tiles", f"{bq},{bk}"], input=json.dumps(doc))
    assert tiles.exit_code == 0, tiles.stderr
    back = invoke(["compute", "-", "--format", "json", "--tiles", f"{bq},{bk}"], input=tiles.stdout)
    assert back.exit_code == 0 and back.stdout == tiles.stdout, back.stderr


@SHORT  # the slow run has 500
@given(variant_problems(), st.integers(1, 3), st.integers(1, 3))
def test_variants_three_paths_and_read_back(doc, bq, bk):
    three_paths_and_read_back(doc, bq, bk)


@pytest.mark.slow
@LONG
@given(variant_problems(), st.integers(1, 3), st.integers(1, 3))
def test_variants_three_paths_and_read_back_long(doc, bq, bk):
    three_paths_and_read_back(doc, bq, bk)
