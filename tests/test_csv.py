"""CSV/TSV and inline text: headers and labels by rule, never by guess; other separators,
unterminated quotes and empty entries are errors that say so."""

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attncli.base.errors import InputError
from attncli.document.text_input import parse_csv, parse_inline
from tests.conftest import SAMPLES, assert_error

KV = ("--k", "1,0;0,1", "--v", "1;2")


def csv(text, kind="number", name="Q.csv"):
    return parse_csv(text, name, kind)


# (text, kind, matrix, labels): what each first row is, by the rules.
READS = [
    ("0,4\n1,1.5\n", "number", [[0, 4], [1, 1.5]], None),             # numbers: data
    ("d0,d1\n0,4\n", "number", [[0, 4]], None),                       # words: a header
    ("token,d0,d1\nit,0,4\n", "number", [[0, 4]], ["it"]),            # header with a label corner
    ("d0,d1\nit,0,4\n", "number", [[0, 4]], ["it"]),                  # header names the values only
    ("it,0,4\nthey,1,1\n", "number", [[0, 4], [1, 1]], ["it", "they"]),  # labels, no header
    (",0,1\nit,0,4\n", "number", [[0, 4]], ["it"]),                   # pandas: index with labels
    (",0,1\n0,0,4\n1,1,1\n", "number", [[0, 4], [1, 1]], ["0", "1"]),  # pandas: default index
    (",a,b\nx,1,2\n", "number", [[1, 2]], ["x"]),
    ("k0,k1\ntrue,false\n", "mask", [[True, False]], None),           # a mask's header
    ("true,0\n1,false\n", "mask", [[True, 0], [1, False]], None),     # true/false are values
    (",0,1\nq,true,false\n", "mask", [[True, False]], ["q"]),
    ("k0,k1\n-inf,0\n", "bias", [[None, 0]], None),                   # -inf is a bias value
    ("-inf,0\n0,−∞\n", "bias", [[None, 0], [0, None]], None),
    ("\n0,4\n\n1,-1\n\n", "number", [[0, 4], [1, -1]], None),         # blank lines are skipped
    ("0\t4\n1\t1\n", "number", [[0, 4], [1, 1]], None),               # tabs without commas
    ("d0,d1\r\n0,4\r\n1,1\r\n", "number", [[0, 4], [1, 1]], None),    # CRLF
    ("0,−inf\n", "bias", [[0, None]], None),
    ('"0","4"\n', "number", [[0, 4]], None),                          # quoted numbers
    ("0,4\t\n1,-1\n", "number", [[0, 4], [1, -1]], None),           # a stray tab in a CSV with commas
    ("row 1,0,4\nrow 2,1,1\n", "number", [[0, 4], [1, 1]], ["row 1", "row 2"]),  # one number in a label
]


@pytest.mark.parametrize("text, kind, matrix, labels", READS)
def test_first_rows_and_label_columns_by_rule(text, kind, matrix, labels):
    assert csv(text, kind) == (matrix, labels)


ERRORS = [
    # (text, kind, file name, fragments)
    ("0,4o\n1,1\n", "number", "Q.csv", ['row 1, column 2: "4o" is not a number']),
    ("1,x\n", "number", "Q.csv", ['row 1, column 2: "x" is not a number']),
    ("it,0,x\n", "number", "Q.csv", ['row 1, column 3: "x" is not a number']),
    ("d0,d1\n0,4\n1,y\n", "number", "Q.csv", ['row 3, column 2: "y" is not a number']),
    ("0,4\nit,1,1\n", "number", "Q.csv", ["row 2 has 3 cells, row 1 has 2"]),
    ("d0,d1,d2,d3\n0,4\n", "number", "Q.csv", ["row 1 (the header) has 4 cells but row 2 has 2"]),
    ("1,,2\n", "number", "Q.csv", ["row 1, column 2 is empty; expected a number"]),
    ("0,4\n1,1,\n", "number", "Q.csv", ["row 2 has 3 cells, row 1 has 2"]),
    ("0,\n", "bias", "B.csv", ["row 1, column 2 is empty; expected a number or -inf (write −∞ as -inf)"]),
    ("1,nan\n", "number", "Q.csv", ['row 1, column 2: "nan" is not a finite number']),
    ("1,-inf\n", "number", "Q.csv", ['row 1, column 2: "-inf" is not a finite number']),  # only a bias has −∞
    ("1,yes\n", "mask", "M.csv", ['row 1, column 2: "yes" is not true/false or 1/0']),
    ("1;2\n3;4\n", "number", "Q.csv", ['row 1, column 1: "1;2" holds numbers separated by semicolons',
                                       "cells in a CSV are separated by commas"]),
    ("it;0;4\n", "number", "Q.csv", ["separated by semicolons"]),
    ("0,5;1,5\n", "number", "Q.csv", ['"5;1" holds numbers separated by semicolons',
                                      "decimals written with a point"]),
    ('"0,5","1,5"\n"2,5","3,5"\n', "number", "Q.csv", ['"3,5" is not a number (write decimals with a point: 3.5)']),
    ("1 2\n3 4\n", "number", "Q.tsv", ['row 1, column 1: "1 2" holds numbers separated by spaces; '
                                       "cells in a .tsv are separated by tabs"]),
    ("it 0 4\n", "number", "Q.csv", ["separated by spaces"]),
    ('"1,2\n3,4\n', "number", "Q.csv", ['row 1: a quote (") opens a cell and is never closed']),
    ('1,2\n3,"4\n', "number", "Q.csv", ['row 2: a quote (") opens a cell and is never closed']),
    ("a,b\n", "number", "Q.csv", ["no rows of numbers"]),
    ("a\nb\n", "number", "Q.csv", ["only labels, no numbers"]),
    ("x,1\n,2\n", "number", "Q.csv", ["row 2, column 1 is empty; expected the row's label, as in row 1"]),
    ("2,1_000\n", "number", "Q.csv", ['"1_000" is not a number']),
]


@pytest.mark.parametrize("text, kind, name, fragments", ERRORS)
def test_csv_errors_say_what_and_where(text, kind, name, fragments):
    with pytest.raises(InputError) as caught:
        csv(text, kind, name)
    assert caught.value.source == name
    for fragment in fragments:
        assert fragment in caught.value.message, caught.value.message


def test_pandas_header_with_an_empty_corner_is_read_as_a_header(run, tmp_path):
    # issue 9: `,0,1` (pandas to_csv) was read as data: Q = [[0,1],[0,4]] and a query labelled "".
    (tmp_path / "Q.csv").write_text(",0,1\nit,0,4\n")
    doc = run.json("compute", "--q", tmp_path / "Q.csv", *KV)
    assert doc["Q"] == [[0, 4]] and doc["query_labels"] == ["it"]


def test_a_typo_in_the_first_row_is_an_error_not_a_header(run, tmp_path):
    # issue 9: `0,4o` silently became a header and the row was dropped.
    (tmp_path / "Q.csv").write_text("0,4o\n1,1\n")
    assert_error(run("compute", "--q", tmp_path / "Q.csv", *KV), "Q.csv: ", 'row 1, column 2: "4o" is not a number')


@pytest.mark.parametrize("name, text, fragment", [
    ("Q.csv", "1;2\n3;4\n", "separated by semicolons"),
    ("Q.tsv", "1 2\n3 4\n", "cells in a .tsv are separated by tabs"),
    ("Q.csv", '"1,2\n3,4\n', "never closed"),
])
def test_other_separators_and_open_quotes_say_so(run, tmp_path, name, text, fragment):
    # issue 9: all three said "Q[0] is empty".
    (tmp_path / name).write_text(text)
    assert_error(run("compute", "--q", tmp_path / name, *KV), name, fragment)


def test_a_bias_csv_with_a_header_and_minus_infinity(run, tmp_path):
    (tmp_path / "B.csv").write_text("k0,k1\n-inf,0\n")
    doc = run.json("compute", "--q", "1,0", *KV, "--bias", tmp_path / "B.csv")
    assert doc["heads"][0]["weights"] == [[0.0, 1.0]]


# Inline text: rows by `;` or newlines, entries by commas, or spaces in a row without commas.
@pytest.mark.parametrize("text, matrix", [
    ("0,4", [0, 4]),
    ("0 4", [0, 4]),
    ("1,0; 0,1", [[1, 0], [0, 1]]),
    ("1, 0 ;0 ,1;", [[1, 0], [0, 1]]),       # spaces around commas; a trailing `;` is allowed
    ("; 1 0\n0 1\n", [[1, 0], [0, 1]]),      # leading and trailing separators are ignored
    ("1,0;\n0,1;\n", [[1, 0], [0, 1]]),     # a `;` ending a line is one separator
    (".5,-.5,1e-3", [0.5, -0.5, 0.001]),
    ("2,0; 0,2; 1,\u22121", [[2, 0], [0, 2], [1, -1]]),  # the minus sign of textbooks and PDFs
    ("[[1, 0], [0, 1]]", [[1, 0], [0, 1]]),
])
def test_inline_text(text, matrix):
    assert parse_inline(text, "--q") == matrix


@pytest.mark.parametrize("text, fragment", [
    ("0,,4", "row 1, column 2 is empty; expected a number"),
    ("0,4,", "row 1, column 3 is empty"),
    (",0,4", "row 1, column 1 is empty"),
    ("1,0;;0,1", "row 2 is empty (two row separators in a row)"),
    ("1,0\n\n0,1", "row 2 is empty"),
    ("1 2, 3", '"1 2" holds numbers separated by spaces; separate the entries of a row with commas'),
    ("1,x", 'row 1, column 2: "x" is not a number'),
    ("4.5%, 76.8%", 'row 1, column 1: "4.5%" is not a number (write 4.5% as 0.045)'),
    (" ; ", "empty matrix"),
])
def test_inline_errors(text, fragment):
    with pytest.raises(InputError, match=None) as caught:
        parse_inline(text, "--q")
    assert fragment in caught.value.message and caught.value.source == "--q"


def test_the_typographic_minus_is_a_minus_in_csv_and_bias(run, tmp_path):
    # A learner copies V from a textbook: "1, −1" with U+2212, as attn itself prints −∞.
    (tmp_path / "V.csv").write_text("token,d0,d1\nmechanic,2,0\nscooter,0,2\npetrol,1,\u22121\n")
    assert parse_csv((tmp_path / "V.csv").read_text(), "V.csv")[0] == [[2, 0], [0, 2], [1, -1]]
    assert parse_inline("\u22120.5, \u2212\u221e", "--bias", "bias") == [-0.5, None]
    result = run("compute", "--q", "0,4", "--k", "1,0; 0,1; .5,.5", "--v", str(tmp_path / "V.csv"), "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert '"output": [[0.27747042677509215, 1.349142171329902]]' in result.stdout


def test_inline_empty_entry_is_an_error_on_the_command_line(run):
    # issue 9: "0,,4" was read as [0, 4].
    assert_error(run("compute", "--q", "0,,4", "--k", "1,0,0", "--v", "1"), "--q: row 1, column 2 is empty")


def test_inline_mask_and_bias_words(run):
    doc = run.json("compute", "--q", "1,0", *KV, "--mask", "true, false")
    assert doc["heads"][0]["weights"] == [[1.0, 0.0]]
    doc = run.json("compute", "--q", "1,0", *KV, "--bias", "0 -inf")
    assert doc["heads"][0]["weights"] == [[1.0, 0.0]]


# Whatever numbers a spreadsheet or pandas writes, with or without a header and labels, read back
# exactly: nothing is taken for a header, nothing is dropped.
numbers = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=64))


def matrices(min_rows: int):
    """Rows of one width (1 to 4), drawn width first: filtering ragged rows out rejected most draws,
    which made these the slowest properties of the test command for the examples they kept."""
    return st.integers(1, 4).flatmap(lambda width: st.lists(st.lists(numbers, min_size=width, max_size=width),
                                                              min_size=min_rows, max_size=4))


@given(matrices(1), st.sampled_from(["none", "names", "pandas", "pandas-index"]), st.booleans())
def test_written_matrices_read_back_exactly(rows, header, labelled):
    width = len(rows[0])
    labels = [f"q{i}" for i in range(len(rows))] if header != "pandas-index" else [str(i) for i in range(len(rows))]
    labelled = labelled or header.startswith("pandas")
    lines = {"none": [], "names": [",".join(f"d{j}" for j in range(width))],
             "pandas": ["," + ",".join(str(j) for j in range(width))]}
    lines = lines.get(header, lines["pandas"])
    lines += [(f"{label}," if labelled else "") + ",".join(repr(x) for x in row) for label, row in zip(labels, rows)]
    if header == "none" and not labelled and width == 2 and all(isinstance(a, int) and isinstance(b, int) and b >= 0
                                                             for a, b in rows):
        # two whole numbers a row, the second unsigned, nothing else: maybe decimal commas, refused
        with pytest.raises(InputError, match="decimals written with commas"):
            csv("\n".join(lines) + "\n")
        return
    matrix, read_labels = csv("\n".join(lines) + "\n")
    assert matrix == rows and read_labels == (labels if labelled else None)


@given(matrices(2), st.sampled_from([", ", ",", " "]), st.sampled_from(["; ", ";", "\n", ";\n"]))
def test_inline_rows_read_back_exactly(rows, entries, separator):
    text = separator.join(entries.join(repr(x) for x in row) for row in rows)
    assert parse_inline(text, "--q") == rows


@pytest.mark.parametrize("cell, point", [("-0,5", "-0.5"), ("+1,25", "+1.25"), ("\u22120,75", "-0.75")])
def test_a_signed_decimal_comma_label_is_refused(cell, point):
    """Mutations: text_input's comma-decimal pattern loses its sign ([+-]?), or reads the cell
    without turning U+2212 into `-`: a signed 0,5 as a TSV row's first cell is then taken for a
    row label."""
    from attncli.base.errors import InputError
    from attncli.document.text_input import comma_decimal, parse_csv

    assert comma_decimal(cell) == point
    with pytest.raises(InputError, match="decimal written with a comma"):
        parse_csv(f"{cell}\t1\n2\t3\n", "x.tsv", "number")


def test_decimal_commas_are_never_taken_as_labels_or_a_header(run, problem_file):
    """Found by the second user trial (issues 16 and 17): a label column or header row of decimal-comma
    numbers (TSV, quoted CSV) is refused, not taken for labels or a header."""
    for text, name, fragment in (("2,5\t3\n1,5\t4\n", "a.tsv", '"2,5", read as the row\'s label'),
                                 ("0,5\t1,25\n2\t3\n", "b.tsv", '"0,5", read as a header'),
                                 ('"0,5","1,25"\n2,3\n', "c.csv", '"0,5", read as a header')):
        result = run("compute", "--q", problem_file(text, name), "--k", "1,1", "--v", "1", "-f", "json")
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, text
        assert fragment in result.stderr and "write decimals with a point" in result.stderr, result.stderr
    labels = problem_file("a\t1.5\nb\t2.5\n", "labels.tsv")
    assert run("compute", "--q", labels, "--k", "1", "--v", "1", "-f", "json").exit_code == 0
    header = problem_file("d0\td1\n0.5\t1.25\n", "header.tsv")
    assert run("compute", "--q", header, "--k", "1,1", "--v", "1", "-f", "json").exit_code == 0


COMMA_HINT = ('"0,7311" reads as two numbers, 0 and 7311: did you mean 0.7311? Write decimals with a point, '
              "and use spaces (or ';' between rows) between numbers")


def test_a_decimal_comma_where_another_shape_is_expected_is_named_in_the_error(run):
    """Issue 19's leftovers from earlier trials: an inline "0,7311" reads as two numbers; where another
    shape is expected the error names the decimal comma."""
    result = run("check", SAMPLES / "scooter.json", "--weights", "0,7311")
    assert result.exit_code == 2 and result.stderr == (
        "error: --weights: weights has shape (1 × 2); expected (1 × 3): queries × keys (" + COMMA_HINT + ")\n")


def test_a_decimal_comma_that_fits_the_shape_is_read_as_two_numbers_with_a_note(run, problem_file):
    """Issue 19's leftovers from earlier trials: an inline "0,7311" that fits the shape is read as two
    numbers, with a note."""
    path = problem_file({"Q": [0, 4], "K": [[1, 0], [0, 1]], "V": [[1], [2]]})
    result = run("check", path, "--weights", "0,7311", "-f", "json")
    marks = json.loads(result.stdout)["stages"]["weights"]
    # the 0 is the whole part of 0.7311, no precision shortfall: wrong, never "imprecise" beside the hint
    assert result.exit_code == 1 and marks["cells"] == [["wrong", "wrong"]] and marks["notes"] == [COMMA_HINT]
    for plain in ("0.0180, 0.9820", "0 7311", "[0, 7311]", "0, 7311", "0; 7311"):
        result = run("check", path, "--weights", plain, "-f", "json")
        assert "did you mean" not in result.stdout + result.stderr, plain


def test_only_a_single_comma_between_digits_is_marked():
    """Issue 19's leftovers from earlier trials: only a single comma between digits is marked as a possible
    decimal comma."""
    from attncli.document.text_input import parse_inline

    assert parse_inline("0,7311", "--weights").comma == "0.7311"
    assert parse_inline(" −1,5 ", "--weights").comma == "-1.5"
    for text in ("0, 7311", "0,7311,2", "0.5,1", "1,0;0,1", "1"):
        assert getattr(parse_inline(text, "--weights"), "comma", None) is None, text
    assert getattr(parse_inline("1,0", "--mask", "mask"), "comma", None) is None


def test_a_column_of_decimal_commas_is_refused(run, tmp_path):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): one column
    of decimals written with commas is not two columns of whole numbers."""
    (tmp_path / "v.csv").write_text("0,5\n1,25\n-0,75\n")
    result = run("compute", "--q", "1,0;0,1;1,1", "--k", "1,0;0,1;1,1", "--v", str(tmp_path / "v.csv"))
    assert_error(result, 'v.csv: row 1 is "0,5"', "decimals written with commas", "(0.5)",
                 "add a header row (d0,d1)", 'quote the cells ("0","5")')


@pytest.mark.parametrize("text, matrix", [
    ("d0,d1\n0,5\n1,25\n", [[0, 5], [1, 25]]),        # a header says two columns
    ('"0","5"\n"1","25"\n', [[0, 5], [1, 25]]),       # so do quotes
    ("0.5\n1.25\n", [[0.5], [1.25]]),                 # decimals with a point
    ("0,-5\n1,25\n", [[0, -5], [1, 25]]),             # a sign: no decimal comma
    ("0,5,1\n1,25,0\n", [[0, 5, 1], [1, 25, 0]]),     # three fields
    ("it,0,5\n", [[0, 5]]),                           # a label column
])
def test_unambiguous_two_column_files_still_read(text, matrix):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): two-column
    files that are not decimal commas (a header, quotes, signs, labels) still read."""
    assert parse_csv(text, "x.csv")[0] == matrix


def test_a_two_column_mask_of_whole_numbers_reads(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): a
    two-column mask of whole numbers reads (a mask has no decimals)."""
    assert parse_csv("1,0\n1,1\n", "m.csv", "mask")[0] == [[1, 0], [1, 1]]  # a mask has no decimals


# Every CSV attn writes reads back as what it holds: `--stages output -f csv` wrote `query,0,1`,
# which the reader took for data (Q gained a row [0, 1] labelled "query"); attn's own output CSV
# was refused by `attn check --output`. The header's corner is empty, as pandas writes it.
def written_stages():
    from attncli.compute.attention import attend
    from attncli.document.loading import read_document
    from attncli.document.reading import build_problem
    from attncli.stages.table import present

    for path in sorted(SAMPLES.glob("*.json")):
        trace = attend(build_problem(read_document(str(path))[0]))
        for stage in present(trace.problem):
            yield path.stem, trace, stage.name


@pytest.mark.parametrize("name, trace, stage", list(written_stages()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_stage_written_as_csv_reads_back_as_itself(name, trace, stage):
    import numpy as np

    from attncli.render.export import csv_stage
    from attncli.stages.table import get

    p = trace.problem
    matrix, labels = parse_csv(csv_stage(trace, stage), f"{stage}.csv", "bias" if stage == "masked" else "number")
    expected = trace.final if stage == "output" else trace.stage(stage) if p.heads > 1 else trace.stage(stage)[0]
    read = np.array(matrix, dtype=float)  # a bias's -inf is read as None: NaN here
    read[np.isnan(read)] = -np.inf
    np.testing.assert_array_equal(read, expected)  # every number, exactly (repr), −∞ as -inf
    rows = p.key_labels if stage != "output" and get(stage).rows == "keys" else p.query_labels
    assert labels == (rows or [str(i) for i in range(expected.shape[-2])])


def test_posenc_csv_reads_back_as_the_encodings(run):
    text = run("posenc", "--positions", "3", "--dim", "4", "-f", "csv").stdout
    doc = run.json("posenc", "--positions", "3", "--dim", "4")
    assert text.startswith(",sin 0,cos 1,")
    assert parse_csv(text, "pe.csv") == (doc["encoding"], ["0", "1", "2"])


def test_attns_own_output_csv_is_marked_and_reads_back_as_a_matrix(run, tmp_path):
    out = tmp_path / "so.csv"
    assert run("compute", SAMPLES / "scooter.json", "--stages", "output", "-o", out).exit_code == 0
    assert out.read_text().startswith(",0,1\nit,")
    marked = run("check", SAMPLES / "scooter.json", "--output", out, "-f", "json")
    assert marked.exit_code == 0 and json.loads(marked.stdout)["right"] == 2
    q = run.json("compute", "--q", out, *KV)
    output = run.json("compute", SAMPLES / "scooter.json", "--stages", "output")["output"]
    assert q["Q"] == output and q["query_labels"] == ["it"]  # one row, not the header's [0, 1] besides


def test_a_multi_head_csv_is_marked_head_by_head(run, tmp_path):
    weights = tmp_path / "w.csv"
    assert run("compute", SAMPLES / "multihead.json", "--stages", "weights", "-o", weights).exit_code == 0
    assert weights.read_text().startswith("head,,I,like,tea\n0,I,")
    marked = json.loads(run("check", SAMPLES / "multihead.json", "--weights", weights, "-f", "json").stdout)
    assert (marked["right"], marked["max"], list(marked["stages"])) == (18, 18, ["heads[0].weights", "heads[1].weights"])
    q = run("compute", SAMPLES / "multihead.json", "--stages", "Q_rope", "-f", "csv")  # no rope: refused, not read
    assert q.exit_code == 2


@pytest.mark.parametrize("text, fragment", [
    ("head,,a,b\n0,x,1,2\n2,x,5,6\n", "row 3: head 2 after head 0; expected each head's rows together"),
    ("head,,a,b\nz,x,1,2\n", 'row 2, column 1: "z" is not a head number'),
    ("head,,a,b\n0,x,1,2\n1,y,5,6\n", 'row 3: head 1 has 1 row labelled "y", head 0 "x"'),
    ("head,,a,b\n0,x,1,q\n", 'row 2, column 4: "q" is not a number'),
    ("head,,a,b\n", "no rows of numbers; expected one matrix per head"),
])
def test_a_head_column_that_is_not_attns_is_refused_naming_the_row(text, fragment):
    with pytest.raises(InputError, match=re.escape(fragment)):
        csv(text)


def test_blank_labels_are_written_as_their_index_so_the_header_is_no_blank_line(run):
    """Blank key labels made the header `,,,`, which a reader skips as a blank line: the row
    labels were then read as a column of numbers."""
    doc = {"Q": [[1, 0]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "key_labels": ["", " ", "x"],
           "query_labels": [""]}
    text = run("compute", "-", "-f", "csv", "--stages", "weights", input=json.dumps(doc)).stdout
    assert text.splitlines()[0] == ",0,1,x" and text.splitlines()[1].startswith("0,")
    matrix, labels = parse_csv(text, "w.csv")
    assert labels == ["0"] and len(matrix[0]) == 3
