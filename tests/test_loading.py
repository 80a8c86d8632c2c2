"""Reading inputs (attncli/document/loading.py): files, pipes and stdin, the matrix options (`--q -`
reads stdin), .npy and .npz."""

import json

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
