"""Found by an engineer's trial of captured layers (no torch): the agreement line tells two differing
numbers apart, its JSON says which stages were compared (--stages output computes no weights), and the output-only path never
starts more workers (each with its own scratch buffers) than it has blocks."""

import numpy as np

from attncli.compute import blocks, pool
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.agreement import compare
from attncli.document.reading import build_problem
from tests.conftest import SCOOTER


def reference_doc(shift=0.0):
    trace = attend(build_problem(SCOOTER))
    output = trace.final.copy()
    output[0, 1] += shift
    reference = {"weights": trace.stage("weights").tolist(), "output": output.tolist(), "dtype": "float64"}
    return dict(SCOOTER, reference=reference, model={"name": "m", "class": "C", "layer": 0}), trace


def test_a_difference_below_six_digits_is_shown_with_the_digits_that_tell_it():
    doc, trace = reference_doc(1e-7)
    line = compare(doc, trace).line()
    mine, theirs = f"{trace.final[0, 1]:.9g}", f"{trace.final[0, 1] + 1e-7:.9g}"
    assert mine != theirs and f"attncli {mine}, the model {theirs} " in line


def test_the_json_says_the_output_alone_was_compared():
    doc, _ = reference_doc()
    doc["reference"]["weights"][0][0][0] += 0.5  # a weight the output-only path never sees
    problem = build_problem(doc)
    found = compare(doc, attend_output(problem, threads=1))
    assert found.agrees and found.to_json()["compared"] == ["output"]
    assert found.line().endswith(" in the output (weights not computed here, so not "
                                 "compared; the model ran in float64)")  # the line says so too
    assert "in the output" not in compare(reference_doc()[0], attend(problem)).line()
    assert compare(doc, attend(problem)).to_json()["compared"] == ["weights", "output"]
    assert not compare(doc, attend(problem)).agrees


def test_no_more_workers_than_blocks(monkeypatch):
    asked = []
    run = pool.run

    def counting(task, items, threads, scratch):
        asked.append((threads, len(items)))
        return run(task, items, threads, scratch)

    monkeypatch.setattr(blocks.pool, "run", counting)
    rng = np.random.default_rng(0)
    problem = build_problem({"Q": rng.normal(size=(20, 4)), "K": rng.normal(size=(9, 4)), "V": rng.normal(size=(9, 4))})
    expected = attend_output(problem, threads=1).final
    assert np.array_equal(attend_output(problem, threads=100000).final, expected)
    assert asked[-1][0] == asked[-1][1] < 100000


def test_the_model_name_reaches_the_terminal_as_text(run, problem_file):
    """The agreement line names the document's model: a name from someone else's file has its
    controls escaped on stdout (the tables) and stderr (beside a document), as labels are."""
    doc, _ = reference_doc()
    doc["model"]["name"] = "\x1b]0;owned\x07m\u202e"
    path = problem_file(doc)
    for args, stream in ((("--format", "table"), "stdout"), (("--format", "json"), "stderr")):
        result = run("compute", path, *args)
        assert result.exit_code == 0, result.stderr
        text = getattr(result, stream)
        assert "agrees with \\u001b]0;owned\\u0007m\\u202e layer 0" in text
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
