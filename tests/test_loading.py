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
