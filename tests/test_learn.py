"""`attn exercise`, `attn example`, `attn posenc`: reproducible problems and reference tables."""

import json
import math
import re

import numpy as np
import pytest

from attncli.marking.exercise import Options, build
from attncli.problem.posenc import positional_encoding
from tests.conftest import SAMPLES, assert_error


def test_the_same_seed_gives_the_same_problem_everywhere():
    # A golden copy: a change here breaks every teacher's seed, so it must be deliberate.
    assert build(Options(42)).doc == {
        "title": "Exercise",  # no seed on the students' sheet: they could regenerate the key
        "description": "Compute the attention weights and output for the query",
        "Q": [[-0.5, -1]], "K": [[-1.5, 2], [-1.5, 1], [-2, -2]], "V": [[-3, -2], [-2, 1], [1, -3]],
        "query_labels": ["home"], "key_labels": ["cat", "we", "bird"],
        "ask": ["scores", "scaled", "weights", "output"], "decimals": 2}  # what it asks (issue 16)
    assert build(Options(5, queries=2, keys=2, dim=1, heads=2, mask="random")).doc == build(Options(
        5, queries=2, keys=2, dim=1, heads=2, mask="random")).doc
    assert build(Options(1)).doc != build(Options(2)).doc


def test_exercise_numbers_are_doable_by_hand():
    doc = build(Options(9, queries=3, keys=4, dim=2, value_dim=3, heads=2, mask="random")).doc
    assert np.array(doc["Q"]).shape == (3, 4) and np.array(doc["V"]).shape == (4, 6) and doc["heads"] == 2
    values = np.concatenate([np.ravel(doc[k]) for k in "QKV"])
    assert (values * 2 == np.round(values * 2)).all() and np.abs(values).max() <= 3
    assert all(any(row) for row in doc["mask"])


def test_exercise_pipes_into_compute_and_check(run):
    problem = run("exercise", "--seed", "11", "--keys", "2", "--mask", "causal")
    assert problem.exit_code == 0
    computed = run("compute", "-", "--format", "json", input=problem.stdout)
    assert computed.exit_code == 0 and json.loads(computed.stdout)["mask"] == "causal"
    key = run("exercise", "--seed", "11", "--keys", "2", "--mask", "causal", "--answers").stdout
    assert run("check", "-", input=key).exit_code == 0
    assert json.loads(key)["heads"][0]["weights"]


def test_example_lists_and_prints_the_bundled_examples(run):
    listing = run("example").stdout
    assert re.search(r"^scooter +The mechanic fixed the scooter", listing, re.M) and "multihead" in listing
    printed = run("example", "scooter").stdout
    assert json.loads(printed) == json.loads((SAMPLES / "scooter.json").read_text())
    assert_error(run("example", "scoter"), 'no example "scoter" (did you mean "scooter"?)')


def test_positional_encoding_matches_the_formula():
    pe = positional_encoding(50, 6)
    for pos in (0, 1, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i] == math.sin(angle) and pe[pos, 2 * i + 1] == math.cos(angle)


def test_posenc_command(run):
    doc = json.loads(run("posenc", "--positions", "3", "--dim", "4").stdout)
    assert np.allclose(doc["encoding"][1], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    table = run("posenc", "--positions", "2", "--dim", "2", "--format", "table").stdout
    assert "│ 1 │ 0.8415 │ 0.5403 │" in table
    assert_error(run("posenc", "--dim", "5"), "--dim: dim is 5; the encoding pairs sin and cos columns")
    assert_error(run("posenc", "--positions", "0"), "'--positions'")


@pytest.mark.parametrize("base", ["1e309", "inf"])
def test_posenc_base_must_be_finite(run, base):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: options that
    typer reads as infinity (attn posenc --base 1e309) are refused."""
    assert_error(run("posenc", "--base", base, "--format", "json"), "--base: expected a finite number ≥ 1, found inf")
