"""attn compute --tiles BQ,BK: the tiled online softmax equals the plain attention; its numbers,
tables, JSON, explanation, skipped blocks, masked rows, errors and memory guard."""

import json
import re
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.compute import limits
from attncli.compute.attention import attend
from attncli.compute.tiles import attend_tiles, max_difference
from attncli.document.reading import build_problem
from tests.conftest import SAMPLES, SCOOTER, assert_error
from tests.test_blocks import rules

TINY = SAMPLES / "tiny_tiles.json"
E = np.e


@settings(max_examples=25, deadline=None)  # the slow run has 300
@given(st.data(), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_tiles_of_every_size_equal_the_plain_output_and_lse(data, lq, lk, seed):
    """Every BQ in 1 … Lq and BK in 1 … Lk, with random mask rules, a random matrix mask and a
    bias: the tiled output and lse equal the plain ones within 1e-12 in float64."""
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(2, lq, 3)) * 2, "K": rng.normal(size=(lk, 3)) * 2, "V": rng.normal(size=(lk, 2))}
    doc |= data.draw(rules(lq, lk))
    if data.draw(st.booleans()) and "mask" not in doc:
        doc["mask"] = rng.random((2, lq, lk)) > 0.3
    if data.draw(st.booleans()):
        doc["bias"] = np.where(rng.random((lq, lk)) > 0.2, rng.normal(size=(lq, lk)), -np.inf)
    doc["masked_rows"] = data.draw(st.sampled_from(["zero", "uniform"]))
    problem = build_problem(doc)
    plain = attend(problem)
    for bq in range(1, lq + 1):
        for bk in range(1, lk + 1):
            tiled = attend_tiles(problem, bq, bk)
            np.testing.assert_allclose(tiled.output, plain.output, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(np.isneginf(tiled.lse), np.isneginf(plain.lse))
            np.testing.assert_allclose(tiled.lse, plain.lse, rtol=0, atol=1e-12)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_tiles_of_every_size_equal_the_plain_output_and_lse_long(data, lq, lk, seed):
    test_tiles_of_every_size_equal_the_plain_output_and_lse.hypothesis.inner_test(data, lq, lk, seed)


def test_the_tiny_example_by_hand(run):
    """Query a: logits [1, 0 | 2, 1], its max rises in tile 2, so alpha = e^(1 − 2); query b:
    [0, 1 | 0, 1], its max stays 1, alpha = 1."""
    doc = run.json("compute", TINY, "--tiles", "2,2")
    assert doc["tile_size"] == [2, 2] and doc["tiled_max_difference"] < 1e-15
    first, second = doc["heads"][0]["tiles"]
    assert (first["q_block"], first["k_block"], second["k_block"]) == ([0, 2], [0, 2], [2, 4])
    assert first["S"] == [[1, 0], [0, 1]] and first["m_old"] == [None, None] and first["m"] == [1, 1]
    assert first["alpha"] == [0, 0]
    np.testing.assert_allclose(first["l"], [1 + 1 / E, 1 + 1 / E], rtol=1e-15)
    np.testing.assert_allclose(first["O"], [[1, 1 / E], [1 / E, 1]], rtol=1e-15)
    assert second["m_old"] == [1, 1] and second["m"] == [2, 1]
    np.testing.assert_allclose(second["alpha"], [1 / E, 1], rtol=1e-15)
    l_a = (1 + 1 / E) / E + 1 + 1 / E
    np.testing.assert_allclose(second["l"], [l_a, 2 * (1 + 1 / E)], rtol=1e-15)
    O_a = np.array([1, 1 / E]) / E + np.array([1, 1]) + np.array([2, 0]) / E
    np.testing.assert_allclose(second["O"][0], O_a, rtol=1e-15)
    np.testing.assert_allclose(doc["heads"][0]["tiled_output"][0], O_a / l_a, rtol=1e-15)
    np.testing.assert_allclose(doc["heads"][0]["tiled_lse"], [2 + np.log(l_a), 1 + np.log(2 + 2 / E)], rtol=1e-15)
    np.testing.assert_allclose(doc["heads"][0]["tiled_output"], doc["output"], rtol=0, atol=1e-15)
    assert set(doc["heads"][0]) == {"output", "lse", "tiles", "tiled_output", "tiled_lse"}  # --stages output


def test_tables_show_each_tile_and_the_difference(run):
    result = run("compute", TINY, "--tiles", "2,2", "-f", "table")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "S = logits tile · tile 1: queries a–b [0, 2) × keys k0–k1 [0, 2)" in text
    assert "│   │     k2 │     k3 │ rowmax │  m_old │      m │  alpha │" in text
    assert "│ a │ 2.0000 │ 1.0000 │ 2.0000 │ 1.0000 │ 2.0000 │ 0.3679 │" in text
    assert "│ a │ 1.0000 │ 0.3679 │ 1.3679 │ 1.8711 │" in text  # P, rowsum, l of tile 2
    assert "│ a │ 1.1243 │ 0.6068 │ 2.6265 │" in text  # O / l and lse
    assert "max |tiled output − plain output| = 0" in text
    assert "output = weights V" in text  # the plain output to compare with


def test_fully_masked_key_blocks_are_skipped_and_say_so(run, problem_file):
    path = problem_file({"Q": [[1, 0], [0, 1], [1, 1], [0, 0]], "K": [[1, 0], [0, 1], [1, 1], [2, 0]],
                         "V": [[1, 0], [0, 1], [1, 1], [2, 0]], "mask": "causal"})
    doc = run.json("compute", path, "--tiles", "2,2")
    skipped = [(t["q_block"], t["k_block"]) for t in doc["heads"][0]["tiles"] if t["skipped"]]
    assert skipped == [([0, 2], [2, 4])]  # causal: the upper-right block
    assert set(doc["heads"][0]["tiles"][1]) == {"q_block", "k_block", "skipped"}
    text = run("compute", path, "--tiles", "2,2", "-f", "table").stdout
    assert "tile 2: queries 0–1 [0, 2) × keys 2–3 [2, 4): skipped, every key of the block is masked" in text


@pytest.mark.parametrize("policy, row", [("zero", [0.0, 0.0]), ("uniform", [1.0, 0.5])])
def test_rows_with_every_key_masked_follow_the_policy(run, problem_file, policy, row):
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [1, 1]],
                         "mask": [[True, True], [False, False]], "masked_rows": policy})
    result = run("compute", path, "--tiles", "1,1", "-f", "json")
    assert result.exit_code == 0 and "every key is masked for query 1" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["heads"][0]["tiled_output"][1] == row and doc["heads"][0]["tiled_lse"][1] is None
    assert [t["skipped"] for t in doc["heads"][0]["tiles"]] == [False, False, True, True]


def test_masked_rows_error_refuses(run, problem_file):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0]], "V": [[1]], "mask": [[False]], "masked_rows": "error"})
    assert_error(run("compute", path, "--tiles", "1,1"), "every key is masked for query 0")


@pytest.mark.parametrize("value", ["0,2", "2,0", "-1,2", "1.5,2", "2", "a,b", "2,2,2", "", "²,2"])
def test_bad_tile_sizes_are_one_line_naming_tiles(run, value):
    assert_error(run("compute", TINY, "--tiles", value), "--tiles", "expected two whole numbers BQ,BK")


def test_tiles_are_tables_or_json_only(run, tmp_path):
    assert_error(run("compute", TINY, "--tiles", "2,2", "-f", "markdown"), "--tiles", "use --format table, json or html")
    assert_error(run("compute", TINY, "--tiles", "2,2", "-o", tmp_path / "o.npz"), "--tiles")
    assert run("compute", TINY, "--tiles", "2,2", "-o", tmp_path / "o.json").exit_code == 0


def test_a_tile_trace_too_big_is_refused(run, problem_file, monkeypatch):
    n = 200
    rng = np.random.default_rng(0)
    path = problem_file({"Q": rng.normal(size=(n, 2)).tolist(), "K": rng.normal(size=(n, 2)).tolist(),
                         "V": rng.normal(size=(n, 2)).tolist()})
    problem = build_problem({"Q": np.ones((n, 2)), "K": np.ones((n, 2)), "V": np.ones((n, 2))})
    tiles = sum(limits.tile_bytes(problem, 1, 1, view="json").values())
    assert tiles >= 2 * 8 * n * n  # S and P
    monkeypatch.setattr(limits, "available_bytes", lambda: tiles // 2)
    assert run("compute", path, "-f", "json").exit_code == 0  # without tiles it fits
    assert_error(run("compute", path, "--tiles", "1,1", "-f", "json"), "this problem would need",
                 "the tile trace")


def test_tiles_follow_float32(run):
    doc = run.json("compute", TINY, "--tiles", "2,2", "--dtype", "float32")
    assert doc["tiled_max_difference"] < 1e-6


_LINE = re.compile(r"^  l = (\S+) · (\S+) \+ (.+) = (\S+)$")


def test_explain_tiles_arithmetic_adds_up_at_the_printed_decimals(run):
    rng = np.random.default_rng(3)
    doc = {"Q": rng.normal(size=(3, 2)).round(2).tolist(), "K": rng.normal(size=(5, 2)).round(2).tolist(),
           "V": rng.normal(size=(5, 2)).round(2).tolist(), "mask": [[True] * 5, [True, False, True, True, False],
                                                                   [True] * 5]}
    for places in (2, 4, 6):
        result = run("compute", "-", "--tiles", "2,2", "--explain", "--row", "1", "--precision", places,
                     input=json.dumps(doc))
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        checked = 0
        unit = Decimal(1).scaleb(-places)
        for line in lines:
            if match := _LINE.match(line):
                alpha, old, terms, new = match.groups()
                total = Decimal(alpha) * Decimal(old) + sum(Decimal(t) for t in terms.split(" + "))
                assert total.quantize(unit) == Decimal(new), line
                checked += 1
            if line.startswith("  O = "):
                left, right = line[6:].rsplit(" = ", 1)
                alpha, rest = left.split(" · ", 1)
                parts = re.findall(r"(\S+) · \[([^]]*)\]", " + " + rest.split("] + ", 1)[1]) if "] + " in rest else []
                old = [Decimal(x) for x in rest[1:rest.index("]")].split(", ")]
                total = [Decimal(alpha) * o for o in old]
                for p, v in parts:
                    total = [t + Decimal(p) * Decimal(x) for t, x in zip(total, v.split(", "))]
                assert [t.quantize(unit) for t in total] == [Decimal(x) for x in right[1:-1].split(", ")], line
                checked += 1
            if line.startswith("output = O / l = "):
                o, l, out = re.match(r"output = O / l = \[(.*)\] / (\S+) = \[(.*)\]", line).groups()
                assert [(Decimal(x) / Decimal(l)).quantize(unit) for x in o.split(", ")] == \
                       [Decimal(x) for x in out.split(", ")], line
                checked += 1
        assert checked == 7  # three key tiles' l and O, and the division


def test_explain_tiles_tiny_example(run):
    text = run("compute", TINY, "--tiles", "2,2", "--explain").stdout
    assert "  m = max(1.0000, 2.0000) = 2.0000" in text
    assert "  alpha = e^(1.0000 − 2.0000) = 0.3679" in text
    assert "  l = 0.3679 · 1.3679 + 1.0000 + 0.3679 = 1.8712" in text
    assert "lse = m + ln l = 2.0000 + ln 1.8712 = 2.6266" in text
    assert "exact: output = [1.1243, 0.6068], lse = 2.6265" in text
    assert_error(run("compute", TINY, "--tiles", "2,2", "--explain", "--carry", "exact"), "--carry")


def test_tile_view_escapes_labels(run, problem_file):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
                         "query_labels": ["[bold]q\x1b[31m"], "key_labels": ["k\u202e", "[red]x"]})
    text = run("compute", path, "--tiles", "1,1", "-f", "table").stdout
    assert "[bold]q\\u001b[31m" in text and "k\\u202e" in text and "[red]x" in text and "\x1b" not in text


def test_max_difference_is_the_largest_absolute_difference():
    problem = build_problem({"Q": [[1.0, 0.0]], "K": [[1.0, 0.0], [0.0, 1.0]], "V": [[1.0], [3.0]]})
    tiled = attend_tiles(problem, 1, 1)
    assert max_difference(tiled, tiled.output + np.array([[[0.5]]])) == 0.5


@pytest.mark.parametrize("sample", ["multihead", "cross", "causal", "random_4x8"])
def test_samples_tile_to_the_plain_output_and_read_back(run, sample):
    doc = run.json("compute", SAMPLES / f"{sample}.json", "--tiles", "2,3", "--stages", "weights,output")
    assert doc["tiled_max_difference"] < 1e-14 and len(doc["heads"][0]["tiles"]) > 1
    for head in doc["heads"]:
        np.testing.assert_allclose(head["tiled_lse"], head["lse"], rtol=0, atol=1e-13)
    again = run("compute", "-", "--stages", "output", "-f", "json", input=json.dumps(doc))
    assert again.exit_code == 0, again.stderr  # the JSON with tiles reads back as input


def test_head_option_picks_the_tiles_shown(run):
    text = run("compute", SAMPLES / "multihead.json", "--tiles", "1,2", "--head", "1", "-f", "table").stdout
    assert "· head 1" in text and "· head 0" not in text.split("max |tiled")[0]


@settings(max_examples=20, deadline=None)  # the slow run has 200
@given(st.data(), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_tiles_with_rope_equal_the_plain_output(data, lq, lk, seed):
    """RoPE's Q_rope and K_rope are stages of the table: each tile rotates its own rows and keys."""
    rope_tiles_property(data, lq, lk, seed)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_tiles_with_rope_equal_the_plain_output_long(data, lq, lk, seed):
    rope_tiles_property(data, lq, lk, seed)


def rope_tiles_property(data, lq, lk, seed):
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(2, lq, 4)), "K": rng.normal(size=(lk, 4)), "V": rng.normal(size=(lk, 2)),
           "rope": data.draw(st.sampled_from([True, {"style": "interleaved"}, {"dims": 2}]))}
    doc |= data.draw(rules(lq, lk))
    problem = build_problem(doc)
    plain = attend(problem)
    for bq in range(1, lq + 1):
        for bk in range(1, lk + 1):
            tiled = attend_tiles(problem, bq, bk)
            np.testing.assert_allclose(tiled.output, plain.output, rtol=0, atol=1e-12)
            np.testing.assert_allclose(tiled.lse, plain.lse, rtol=0, atol=1e-12)


@settings(max_examples=30, deadline=None)  # the slow run has 300
@given(st.data(), st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_tiles_with_softcap_alibi_and_sinks_equal_the_plain_output_and_lse(data, lq, lk, seed):
    """The variants are in the logits (softcap, ALiBi) or start the running max and sum (the sink):
    every tile size still gives the plain output and lse within 1e-12."""
    variant_tiles_property(data, lq, lk, seed)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_tiles_with_softcap_alibi_and_sinks_equal_the_plain_output_and_lse_long(data, lq, lk, seed):
    variant_tiles_property(data, lq, lk, seed)


def variant_tiles_property(data, lq, lk, seed):
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(2, lq, 3)) * 3, "K": rng.normal(size=(lk, 3)) * 3, "V": rng.normal(size=(lk, 2))}
    doc |= data.draw(rules(lq, lk))
    if data.draw(st.booleans()):
        doc["softcap"] = data.draw(st.sampled_from([0.5, 2.0, 30.0]))
    if data.draw(st.booleans()):
        doc["alibi"] = True
    if data.draw(st.booleans()):
        doc["sinks"] = rng.normal(size=2).tolist()
    problem = build_problem(doc)
    plain = attend(problem)
    for bq in range(1, lq + 1):
        for bk in range(1, lk + 1):
            tiled = attend_tiles(problem, bq, bk)
            np.testing.assert_allclose(tiled.output, plain.output, rtol=0, atol=1e-12)
            np.testing.assert_allclose(tiled.lse, plain.lse, rtol=0, atol=1e-12)


def test_sinks_start_the_running_max_and_sum(run, problem_file):
    """A sink of 3 over logits 1, 0 | 2, 1 (query a of the tiny example): m starts at 3, l at 1,
    the max never rises, so alpha is 1; a fully masked row keeps m = 3, l = 1, O = 0: output 0,
    lse = 3."""
    doc = json.loads(TINY.read_text()) | {"sinks": 3.0, "mask": [[True] * 4, [False] * 4]}
    path = problem_file(doc)
    out = run.json("compute", path, "--tiles", "2,2")
    first = out["heads"][0]["tiles"][0]
    assert first["m_old"] == [3.0, 3.0] and first["m"] == [3.0, 3.0] and first["alpha"] == [1.0, 1.0]
    np.testing.assert_allclose(first["l"], [1 + np.exp(-2) + np.exp(-3), 1.0], rtol=1e-15)
    head = out["heads"][0]
    assert head["tiled_output"][1] == [0.0, 0.0] and head["tiled_lse"][1] == 3.0 and head["lse"][1] == 3.0
    lse_a = np.log(np.exp(3) + np.exp(1) + 1 + np.exp(2) + np.exp(1))
    np.testing.assert_allclose(head["tiled_lse"][0], lse_a, rtol=1e-15)
    text = run("compute", path, "--tiles", "2,2", "--explain").stdout
    assert "start: m = sink = 3.0000, l = e^(sink − m) = 1.0000, O = 0" in text
    assert "  alpha = e^(3.0000 − 3.0000) = 1.0000" in text
    answers = problem_file(out, "answers.json")  # compute's JSON with sinks is a correct answer
    result = run("check", answers, path, "-f", "json")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_a_tile_trace_too_long_to_show_is_refused_before_it_is_computed(run, problem_file):
    rng = np.random.default_rng(0)
    big = problem_file({name: rng.normal(size=(400, 2)).tolist() for name in "QKV"})
    assert_error(run("compute", big, "--tiles", "1,1", "-f", "json"), "--tiles", "160,000 tiles",
                 "1 head × 400 query blocks × 400 key blocks", "at most 100,000", "--tiles 2,2")
    assert_error(run("compute", big, "--tiles", "8,8", "-f", "table"), "2,500 tiles", "tables show at most 1,000")
    assert run("compute", big, "--tiles", "8,8", "-f", "json").exit_code == 0


def test_tiles_larger_than_the_problem_are_one_tile(run):
    doc = run.json("compute", SAMPLES / "tiny_tiles.json", "--tiles", "9999999999999999999999,2")
    assert [tile["q_block"] for tile in doc["heads"][0]["tiles"]] == [[0, 2], [0, 2]]


def test_do_adds_the_backward_pass_to_the_chosen_stages_and_to_the_tiles(run, problem_file):
    doc = run.json("compute", SAMPLES / "tiny_tiles.json", "--do", "ones", "--stages", "weights,output")
    assert {"weights", "d_Q", "d_K", "d_V"} <= set(doc["heads"][0]) and "grads" in doc
    doc = run.json("compute", SAMPLES / "tiny_tiles.json", "--do", "ones", "--tiles", "2,2")
    assert "tiles" in doc["heads"][0] and "grads" in doc and "d_Q" in doc["heads"][0]
    given = json.loads((SAMPLES / "tiny_tiles.json").read_text()) | {"dO": "ones"}
    from_file = run.json("compute", problem_file(given), "--tiles", "2,2")  # a file's dO acts as --do (issue 17)
    assert from_file["grads"] == doc["grads"] and from_file["heads"][0]["tiles"] == doc["heads"][0]["tiles"]


def test_explain_tiles_with_huge_numbers_uses_e_notation(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): --explain
    --tiles with huge numbers uses e-notation, as plain --explain does."""
    result = run("compute", "--q", "1,0", "--k", "1,0;0,1", "--v", "1e40;2", "--explain", "--tiles", "1,1")
    assert result.exit_code == 0, result.stderr
    assert "O = 0.0000 · [0.0000] + 1.0000 · [1.0000e+40] = [1.0000e+40]" in result.stdout
    assert "output = O / l = [1.0000e+40] / 1.4931 = [6.6975e+39]" in result.stdout


def test_a_files_do_with_tiles_adds_the_gradients(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): a file's
    dO with --tiles adds the gradients, as --do does."""
    from_file = run.json("compute", "--tiles", "1,2", input=json.dumps(SCOOTER | {"dO": "ones"}))
    from_option = run.json("compute", "--tiles", "1,2", "--do", "ones", input=json.dumps(SCOOTER))
    assert "d_Q" in from_file["heads"][0] and "grads" in from_file
    assert from_file["grads"] == from_option["grads"] and from_file["heads"][0]["tiles"] == from_option["heads"][0]["tiles"]
