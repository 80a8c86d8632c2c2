"""The stage table (attncli/stages.py) is the one place a stage is defined: a throwaway stage added
to it alone reaches the trace, the output-only path, the JSON, the tables, the exports and the
answer keys of `attn check`; records are frozen and their arrays read-only."""

import dataclasses
import json

import numpy as np
import pytest

from attncli import stages
from attncli.attention import attend
from attncli.blocks import attend_output
from attncli.mistakes import MISTAKES, step
from attncli.problem import build_problem
from tests.conftest import SCOOTER

CAUSAL = {"Q": [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
          "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": "causal"}

# A throwaway stage between scaled and masked: the entry and its compute function, nothing else.
DOUBLED = stages.Stage("doubled", "doubled = $previous · 2", "$previous · 2", r"\text{$previous} \cdot 2",
                       lambda block, x: x * 2)


@pytest.fixture
def doubled(monkeypatch):
    table = list(stages.STAGES)
    table.insert(stages.names().index("scaled") + 1, DOUBLED)
    monkeypatch.setattr(stages, "STAGES", tuple(table))


@pytest.mark.parametrize("doc", [SCOOTER, CAUSAL])
def test_an_added_stage_is_computed_in_the_trace_and_read_by_the_next(doubled, doc):
    trace = attend(build_problem(doc))
    np.testing.assert_array_equal(trace.stage("doubled"), 2 * trace.stage("scaled"))
    logits = trace.stage("masked") if "mask" in doc else trace.stage("doubled")
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(trace.stage("weights"), e / e.sum(axis=-1, keepdims=True), rtol=1e-15)
    blocked = attend_output(build_problem(doc), block=1)  # the output-only path runs it too
    np.testing.assert_allclose(blocked.final, trace.final, rtol=1e-14)


def test_an_added_stage_is_in_the_json_and_the_tables(doubled, run, problem_file):
    path = problem_file(CAUSAL)
    doc = run.json("compute", path)
    assert list(doc["heads"][0]) == ["Q", "K", "V", "scores", "scaled", "doubled", "masked", "weights", "output", "lse"]
    assert np.allclose(doc["heads"][0]["doubled"], 2 * np.array(doc["heads"][0]["scaled"]))
    table = run("compute", path, "--format", "table", "--stages", "doubled,weights")
    assert table.exit_code == 0, table.stderr
    assert "doubled = scaled · 2" in table.stdout and "weights = softmax(masked) over keys" in table.stdout
    markdown = run("compute", path, "--format", "markdown", "--stages", "doubled")
    assert "scaled · 2" in markdown.stdout


def test_an_added_stage_is_an_answer_key_of_check(doubled, run, tmp_path, problem_file):
    problem = problem_file(SCOOTER)
    trace = attend(build_problem(SCOOTER))
    right = np.round(trace.stage("doubled")[0], 4).tolist()
    (tmp_path / "a.json").write_text(json.dumps({"doubled": right}))
    result = run("check", tmp_path / "a.json", problem, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["stages"]["doubled"]["right"] == 3
    (tmp_path / "b.json").write_text(json.dumps({"doubled": [1, 2, 3]}))
    assert run("check", tmp_path / "b.json", problem, "--format", "json").exit_code == 1


def test_without_the_entry_the_stage_is_unknown(run, tmp_path, problem_file):
    (tmp_path / "a.json").write_text(json.dumps({"doubled": [1, 2, 3]}))
    result = run("check", tmp_path / "a.json", problem_file(SCOOTER))
    assert result.exit_code == 2 and "doubled" in result.stderr


def test_the_softmax_reads_the_stage_before_it():
    assert stages.previous(build_problem(SCOOTER), "weights") == "scaled"
    assert stages.previous(build_problem(CAUSAL), "weights") == "masked"
    assert [s.name for s in stages.logits(build_problem(CAUSAL))] == ["scores", "scaled", "masked"]


def test_every_mistake_replaces_a_stage_of_the_table():
    for mistake in MISTAKES.values():
        assert mistake.stage in stages.names()


def test_a_mistake_is_the_stage_computed_by_its_replacement():
    trace = attend(build_problem(CAUSAL))
    scaled = trace.stage("scaled")[0]
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled), trace.stage("masked")[0])
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled, "mask_ignored"), scaled)
    upper = np.triu(np.ones((3, 3), bool))  # mask_transposed: each query keeps the later keys
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled, "mask_transposed"),
                                  np.where(upper, scaled, -np.inf))


def test_trace_and_problem_arrays_are_read_only():
    trace = attend(build_problem(CAUSAL))
    with pytest.raises(ValueError, match="read-only"):
        trace.stage("weights")[0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        trace.problem.inputs["Q"][0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        trace.final[0, 0] = 1.0
    with pytest.raises(TypeError):
        trace.stages["weights"] = None
    with pytest.raises(TypeError):
        trace.problem.inputs["Q"] = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.scale = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.problem.heads = 2


def test_records_compare_by_identity_never_by_array_equality():
    a, b = attend(build_problem(SCOOTER)), attend(build_problem(SCOOTER))
    assert a == a and a != b and a.problem != b.problem  # no array __eq__, no "truth value is ambiguous"


def test_freezing_leaves_the_callers_arrays_writable():
    Q = np.array([[0.0, 4.0]])
    problem = build_problem(dict(SCOOTER, Q=Q))
    assert not problem.inputs["Q"].flags.writeable
    Q[0, 0] = 1.0  # the caller's own array is theirs to change
