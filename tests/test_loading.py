"""Reading inputs (attncli/document/loading.py): files, pipes and stdin, the matrix options (`--q -`
reads stdin), .npy and .npz."""

import json

import numpy as np
import pytest

from tests.conftest import SAMPLES, assert_error

QKV = ("--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1,0;0,1")


def test_blank_piped_stdin_beside_matrix_options_gives_nothing(run):
    """Mutation: read_piped tests `not data` rather than `not data.strip()`: whitespace on stdin
    is then parsed as a JSON document and refused."""
    result = run("compute", *QKV, "-f", "json", input="  \n\t\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_a_matrix_from_stdin_may_start_with_spaces_before_its_json(run):
    """Mutation: `--q -` tells JSON from CSV by the text's first character, not its first
    non-blank one."""
    result = run("compute", "--q", "-", "--k", "1,0;0,1", "--v", "1,0;0,1", "-f", "json",
                 input="  \n [[1, 0], [0, 1]]\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_a_dash_with_spaces_reads_the_matrix_from_stdin(run):
    """Mutation: load_matrix compares the value itself with "-", so `--q " -"` is read as inline text."""
    result = run("compute", "--q", " - ", "--k", "1,0;0,1", "--v", "1,0;0,1", "-f", "json", input="[[1, 0], [0, 1]]")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_a_matrix_option_of_dash_reads_the_matrix_from_stdin(run):
    """Found by the second user trial (issues 16 and 17): a matrix option of - reads that matrix from stdin
    (as a .csv file is read); stdin is then not the document."""
    result = run("compute", "--q", "-", "--k", "1,0,0", "--v", "1", "-f", "json", input="1,0,0\n")
    assert result.exit_code == 0 and json.loads(result.stdout)["Q"] == [[1, 0, 0]]
    result = run("compute", "--q", "-", "--k", "1,0", "--v", "1", "-f", "json", input="[[1, 0], [0, 1]]")
    assert result.exit_code == 0 and json.loads(result.stdout)["Q"] == [[1, 0], [0, 1]]
    labelled = run("compute", "--q", "-", "--k", "1,0;0,1", "--v", "1;2", "-f", "json", input="a,1,0\nb,0,1\n")
    assert json.loads(labelled.stdout)["query_labels"] == ["a", "b"]
    for args, stdin, fragment in ((("--q", "-", "--k", "-", "--v", "1"), "1,0,0\n", "--q: is -, and so is --k"),
                                  (("-", "--q", "-", "--k", "1,0,0", "--v", "1"), "1,0,0\n", "and so is FILE"),
                                  (("--q", "-", "--k", "1,0,0", "--v", "1"), "", "stdin is empty"),
                                  (("--q", "-", "--k", "1,0", "--v", "1"), "1,0\n", "two whole numbers")):
        refused = run("compute", *args, input=stdin)
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and fragment in refused.stderr, args
    piped = run("compute", "--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2", "-f", "json", input='{"mask": "causal"}')
    assert json.loads(piped.stdout)["mask_rule"].startswith("causal")  # stdin as the document, as before


def test_bias_null_is_blocked_like_minus_infinity(run):
    """Found by a user trial: --bias takes null for −∞ (as --help says)."""
    null = run.json("compute", SAMPLES / "scooter.json", "--bias", "null,0,0")
    assert null["heads"][0]["weights"] == run.json("compute", SAMPLES / "scooter.json", "--bias", "-inf,0,0")[
        "heads"][0]["weights"]
    assert null["heads"][0]["weights"][0][0] == 0


def _pipe(text: str) -> str:
    """A path like bash's <(printf …): /dev/fd/N, a pipe holding `text` (no suffix, not a regular file)."""
    import os

    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    return f"/dev/fd/{read}"


def test_a_pipe_path_without_a_suffix_is_read_as_a_file(run):
    """Found by a user trial: a path that exists is a file, suffix or not (a pipe such as bash's <(printf
    …))."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--bias", _pipe("0,,0\n")),
                 "row 1, column 2 is empty; expected a number or -inf")
    weights = run.json("compute", SAMPLES / "scooter.json", "--bias", _pipe("null,0,0\n"))["heads"][0]["weights"]
    assert weights[0][0] == 0
    # Not "0,4": a row of two whole numbers is an ambiguous decimal comma (issue 17, item 2).
    assert run.json("compute", SAMPLES / "scooter.json", "--q", _pipe("0,4.0\n"))["output"] == \
        run.json("compute", SAMPLES / "scooter.json")["output"]


def test_messages_a_long_double_too_large_names_its_dtype(run, tmp_path):
    """Found by a user trial (messages that said the wrong thing): a long double too large for float64
    names the file's dtype."""
    if not np.isfinite(np.longdouble("1e4000")):
        pytest.skip("no long double beyond float64 here")
    np.save(tmp_path / "q.npy", np.array([[np.longdouble("1e4000"), 1]], dtype=np.longdouble))
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", tmp_path / "q.npy"),
                 "is 1e+4000, too large for float64 (the file's dtype is float128)")


needs_long_double = pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
                                       reason="long double is float64 on this platform")


@needs_long_double
@pytest.mark.filterwarnings("error")
def test_a_long_double_beyond_float64_is_named(run, tmp_path):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a long double
    .npy beyond float64 is named, with no RuntimeWarning."""
    np.save(tmp_path / "q.npy", np.array([[np.longdouble("1e400"), 1]]))
    result = run("compute", "--q", tmp_path / "q.npy", "--k", "1,2", "--v", "1")
    assert_error(result, "q.npy: Q[0][0] is 1e+400, too large for float64 (the file's dtype is float128)")
    assert "RuntimeWarning" not in result.stderr


@needs_long_double
@pytest.mark.filterwarnings("error")
def test_a_long_double_within_float64_is_accepted(run, tmp_path):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a long double
    .npy within float64 is read as JSON numbers are (rounded to float64)."""
    np.save(tmp_path / "q.npy", np.array([[0, 4]], dtype=np.longdouble))
    doc = run.json("compute", "--q", tmp_path / "q.npy", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1")
    assert doc["output"] == run.json("compute", "--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1")["output"]


QKV_OPTIONS = ["--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2"]


def test_an_empty_file_name_is_named_as_one(run):
    """`attn compute ''` said `error: no such file`, naming nothing."""
    assert_error(run("compute", ""), 'error: "": no such file')
    assert_error(run("check", SAMPLES / "scooter.json", "--problem", ""), 'error: "": no such file')


def test_piped_stdin_is_read_beside_matrix_options(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): piped
    stdin beside matrix options is read; the options override its keys."""
    doc = run.json("compute", *QKV_OPTIONS, input='{"mask": "causal"}')
    assert doc["mask"] == "causal" and doc["heads"][0]["weights"][0] == [1.0, 0.0]
    over = run.json("compute", *QKV_OPTIONS, input=json.dumps({"Q": [[9, 9], [9, 9]], "scale": 2}))
    assert over["Q"] == [[1, 0], [0, 1]] and over["scale"] == 2  # --q over the piped Q; its scale stays


def test_empty_stdin_beside_matrix_options_gives_nothing(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): empty
    stdin beside matrix options gives nothing."""
    assert run.json("compute", *QKV_OPTIONS, input="")["heads"][0]["weights"][0][0] > 0.5
    assert run.json("compute", *QKV_OPTIONS, input=" \n")["mask_rule"] == "none"


def test_piped_garbage_beside_matrix_options_is_an_error(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): piped
    garbage beside matrix options is an error."""
    assert_error(run("compute", *QKV_OPTIONS, input="not json"), "<stdin>: invalid JSON")
