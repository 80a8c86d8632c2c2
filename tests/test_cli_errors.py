"""Every kind of bad input: exit 2, one `error:` line naming file, field, expected and found."""

import json

import numpy as np
import pytest

from attncli.base.errors import InputError, plural
from attncli.commands.compute import need_input
from tests.conftest import SAMPLES, SCOOTER, assert_error

QKV = {"Q": [[1, 2]], "K": [[1, 2], [3, 4]], "V": [[1], [2]]}
PROJ = {"X": [[1, 0], [0, 1]], "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], "W_V": [[1], [1]]}

DOCUMENT_ERRORS = [
    # (name, document, fragments expected in the error line)
    ("d_k mismatch", {"Q": [[1, 2]], "K": [[1, 2, 3]], "V": [[1]]}, ["K has 3 columns but Q has 2: d_k must match"]),
    ("values per key", dict(QKV, V=[[1]]), ["V has 1 row but K has 2"]),
    ("ragged rows", dict(QKV, Q=[[1, 2], [1]]), ["Q[1] has 1 entry, Q[0] has 2"]),
    ("string", dict(QKV, K=[[1, "2"], [3, 4]]), ['K[0][1] is the string "2"; expected a number']),
    ("boolean", dict(QKV, V=[[True], [2]]), ["V[0][0] is true; expected a number"]),
    ("null outside bias", dict(QKV, Q=[[None, 1]]), ["Q[0][0] is null; expected a number"]),
    ("four dimensions", dict(QKV, Q=[[[[1, 2]]]]), ["Q[0][0][0] is nested more than 3 levels deep"]),
    ("scalar matrix", dict(QKV, Q=3), ["Q is the number 3; expected numbers in nested lists"]),
    ("object matrix", dict(QKV, Q={"a": 1}), ["Q is an object; expected numbers in nested lists"]),
    ("empty matrix", dict(QKV, Q=[]), ["Q is empty"]),
    ("missing", {"Q": [[1]]}, ["missing K, V"]),
    ("wrong top level", [1, 2], ["the top level is a list of 2; expected a JSON object"]),
    ("unknown key", dict(QKV, Qs=1), ['unknown key "Qs" (did you mean "Q"?)']),
    ("alias twice", dict(QKV, q=[[1, 2]]), ['both "Q" and its alias "q"']),
    ("mask shape", dict(QKV, mask=[[True, True, True]]), ["mask has shape (1 × 3); expected (1 × 2): queries × keys"]),
    ("mask values", dict(QKV, mask=[[1, 0.5]]), ["mask[0][1] is the number 0.5; expected true/false or 1/0"]),
    ("mask word", dict(QKV, mask="casual"), ['mask is "casual" (did you mean "causal"?)']),
    ("bias shape", dict(QKV, bias=[[1, 2], [3, 4]]), ["bias has shape (2 × 2); expected (1 × 2)"]),
    ("bias +inf", dict(QKV, bias=[[1, "inf"]]), ['bias[0][1] is the string "inf"; expected a number, null or "-inf"']),
    ("heads divide", dict(QKV, heads=2), ["heads = 2 does not divide the 1 column of V"]),
    ("heads zero", dict(QKV, heads=0), ["heads is the number 0; expected a whole number ≥ 1"]),
    ("heads fraction", dict(QKV, heads=1.5), ["heads is the number 1.5; expected a whole number ≥ 1"]),
    ("heads string", dict(QKV, heads="2"), ['heads is the string "2"']),
    ("gqa", {"Q": np.ones((3, 1, 2)).tolist(), "K": np.ones((2, 1, 2)).tolist(), "V": np.ones((2, 1, 2)).tolist()},
     ["Q has 3 heads but K and V have 2: the query head count must be a multiple"]),
    ("heads vs 3-D", {"Q": np.ones((2, 1, 2)).tolist(), "K": np.ones((2, 1, 2)).tolist(),
                      "V": np.ones((2, 1, 2)).tolist(), "heads": 3}, ["heads is 3 but Q has 2 heads"]),
    ("2-D Q, 3-D K", dict(QKV, K=[[[1, 2]]], V=[[[1]]]), ["Q is 2-D but K and V are 3-D"]),
    ("query labels", dict(QKV, query_labels=["a", "b"]), ["query_labels has 2 labels but there is 1 query"]),
    ("key labels type", dict(QKV, key_labels="a,b"), ['key_labels is the string "a,b"; expected a list of strings']),
    ("both forms", dict(QKV, X=[[1]]), ["both Q and X are given"]),
    ("W_Q rows", dict(PROJ, W_Q=[[1, 0]]), ["W_Q has 1 row but X has 2 columns", "Q = X W_Q"]),
    ("W_K columns", dict(PROJ, W_K=[[1], [0]]), ["W_K has 1 column but W_Q has 2: d_k must match"]),
    ("b_Q length", dict(PROJ, b_Q=[1, 2, 3]), ["b_Q has 3 entries; expected 2 entries, one per column of W_Q"]),
    ("W_O rows", dict(PROJ, W_O=[[1], [1]]), ["W_O has 2 rows but the heads' outputs side by side have 1 column"]),
    ("b_O alone", dict(PROJ, b_O=[1]), ["b_O is given without W_O"]),
    ("scale", dict(QKV, scale="big"), ['scale is the string "big"; expected a finite number']),
    ("masked_rows", dict(QKV, masked_rows="drop"), ['masked_rows is the string "drop"; expected one of zero, uniform, error']),
    ("overflow", {"Q": [1e200, 1e200], "K": [1e200, 1e200], "V": [1]}, ["scores = Q Kᵀ overflows float64 at head 0"]),
    ("title", dict(QKV, title=3), ["title is the number 3; expected a string"]),
    ("huge int", dict(QKV, Q=[[10 ** 400, 1]]), ["Q[0][0] is a 401-digit integer, too large for float64"]),
]


@pytest.mark.parametrize("name, doc, fragments", DOCUMENT_ERRORS, ids=[e[0] for e in DOCUMENT_ERRORS])
def test_document_errors(run, problem_file, name, doc, fragments):
    path = problem_file(doc)
    assert_error(run("compute", path), f"{path}: ", *fragments)


RAW_ERRORS = [
    ("empty", b"", ["empty file; expected a JSON object with Q, K and V"]),
    ("blank", b"  \n ", ["empty file; expected a JSON object with Q, K and V"]),
    ("syntax", b'{"Q": [1,\n 2', ["invalid JSON at line 2, column 3"]),
    ("NaN token", b'{"Q": [NaN]}', ["NaN is not valid JSON"]),
    ("Infinity token", b'{"Q": [-Infinity]}', ["-Infinity is not valid JSON"]),
    ("overflowing literal", b'{"Q": [1e400]}', ["the number 1e400 overflows float64"]),
    ("deep nesting", b"[" * 100000, ["nested too deeply"]),
    ("binary", bytes(range(256)), ["binary data"]),
    ("latin-1", '{"title": "café"}'.encode("latin-1"), ["not UTF-8 text (byte 0xe9"]),
]


@pytest.mark.parametrize("name, data, fragments", RAW_ERRORS, ids=[e[0] for e in RAW_ERRORS])
def test_raw_input_errors(run, problem_file, name, data, fragments):
    path = problem_file(data)
    assert_error(run("compute", path), *fragments)


def test_utf8_bom_is_accepted(run, problem_file):
    path = problem_file(b"\xef\xbb\xbf" + json.dumps(SCOOTER).encode())
    assert run("compute", path).exit_code == 0


def test_missing_file_and_directory(run, tmp_path):
    assert_error(run("compute", tmp_path / "nope.json"), "nope.json: no such file")
    assert_error(run("compute", tmp_path), "is a directory")
    assert_error(run("compute", "--q", tmp_path / "q.csv", "--k", "1", "--v", "1"), "q.csv: no such file")


def test_empty_stdin(run):
    assert_error(run("compute", input=""), "<stdin>: empty input")


def test_no_input_on_a_terminal_shows_the_ways_to_give_it():
    with pytest.raises(InputError, match="name a JSON file .* pipe one .* --q, --k and --v"):
        need_input(None, {}, stdin_is_terminal=True)


@pytest.mark.parametrize("text, fragments", [
    ("token,a,b\nx,1,2\ny,1\n", ["row 3 has 2 cells, row 2 has 3"]),
    ("1,2\n3,abc\n", ['row 2, column 2: "abc" is not a number']),
    ("1,2\n3,nan\n", ['row 2, column 2: "nan" is not a finite number']),
    ("a,b\n", ["no rows of numbers"]),
])
def test_csv_errors_name_row_and_column(run, tmp_path, text, fragments):
    path = tmp_path / "K.csv"
    path.write_text(text)
    assert_error(run("compute", "--q", "1,2", "--k", path, "--v", "1;2"), "K.csv: ", *fragments)


def test_inline_errors_name_the_option(run):
    assert_error(run("compute", "--q", "0,4", "--k", "1,0;0,1;.5", "--v", "2,0;0,2;1,-1"),
                 "--k: K[2] has 1 entry, K[0] has 2")
    assert_error(run("compute", "--q", "0,x", "--k", "1,0", "--v", "1"), '--q: row 1, column 2: "x" is not')
    assert_error(run("compute", "--q", "[0, 4", "--k", "1,0", "--v", "1"), "--q: invalid JSON")
    assert_error(run("compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "1;2", "--mask", "1,0,1"),
                 "--mask: mask has shape (3)")


def test_npy_with_objects_is_refused(run, tmp_path):
    np.save(tmp_path / "q.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert_error(run("compute", "--q", tmp_path / "q.npy", "--k", "1", "--v", "1"), "pickles are refused")
    np.save(tmp_path / "k.npy", np.array([["a"]]))
    assert_error(run("compute", "--q", "1", "--k", tmp_path / "k.npy", "--v", "1"), "K has dtype <U1")
    np.save(tmp_path / "v.npy", np.array([[np.nan]]))
    assert_error(run("compute", "--q", "1", "--k", "1", "--v", tmp_path / "v.npy"),
                 "V[0][0] is nan; expected a finite number")


def test_usage_errors_are_one_line(run):
    assert_error(run("compute", "--bogus"), "No such option: --bogus")
    assert_error(run("compute", "--heads", "two"), "'--heads'")
    assert_error(run("compute", "--stages", "weigths"), 'unknown stage "weigths"')
    assert_error(run("compute", "--format", "xml"), "'--format'")
    assert_error(run("compute", "--scale", "nan", "--q", "1", "--k", "1", "--v", "1"),
                 "--scale: scale is the number nan; expected a finite number")
    assert_error(run("frobnicate"), "No such command")


def test_masked_rows_error_policy_exits_2(run):
    assert_error(run("compute", "--q", "1", "--k", "1", "--v", "1", "--mask", "0", "--masked-rows", "error"),
                 "every key is masked for query 0")


def test_a_mistyped_choice_is_named_with_the_closest_one_and_no_library_wording(run):
    result = run("compute", str(SAMPLES / "rope.json"), "--rope-style", "halff")
    assert_error(result, "--rope-style", "'halff' is not one of 'half', 'interleaved'", '(did you mean "half"?)')
    assert "Value error" not in result.stderr
    result = run("compute", str(SAMPLES / "scooter.json"), "--format", "bogus")
    assert_error(result, "'bogus' is not one of", "see --help")
    assert "Value error" not in result.stderr and "did you mean" not in result.stderr


@pytest.mark.parametrize("options, fragment", [
    (("--q", "1,2,3"), "--q: K has 2 columns but Q has 3"),
    (("--k", "1,2;3,4"), "--k: V has 3 rows but K has 2"),
    (("--v", "1,2;3,4"), "--v: V has 2 rows but K has 3"),
])
def test_a_mismatch_names_the_option_that_gave_a_key(run, options, fragment):
    """Found by a user trial: an error about two keys names the option that gave one of them, not the file."""
    result = run("compute", SAMPLES / "scooter.json", *options)
    assert_error(result, fragment)
    assert "scooter.json" not in result.stderr


def test_an_empty_matrix_file_says_a_matrix_was_expected(run, problem_file):
    """Found by a user trial: an empty file is "empty file", with what was expected there."""
    empty = problem_file(b"", "empty.csv")
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", empty),
                 "empty.csv: empty file; expected a matrix: rows of numbers")
    assert_error(run("compute", problem_file(b" \n", "blank.json")), "empty file; expected a JSON object with Q")
    assert_error(run("compute", input=""), "<stdin>: empty input; expected a JSON object")


def test_messages_plural_labels_and_the_option(run):
    """Found by a user trial (messages that said the wrong thing): one label, four queries, and the option
    that gave them."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", "1,0;0,1;1,1;2,2"),
                 "--q: query_labels has 1 label but there are 4 queries")


def test_messages_tiles_and_dtype(run):
    """Found by a user trial (messages that said the wrong thing): --tiles of 0 and a --dtype that is no
    near miss."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--tiles", "0,1"),
                 '--tiles: got "0,1"; expected two whole numbers BQ,BK of at least 1')
    result = run("compute", SAMPLES / "scooter.json", "--dtype", "float8")
    assert_error(result, "'float8' is not one of 'float64', 'float32', 'bfloat16', 'float16'")
    assert "did you mean" not in result.stderr
    assert 'did you mean "float32"' in run("compute", SAMPLES / "scooter.json", "--dtype", "flaot32").stderr


def test_messages_an_npz_array_and_a_head_key_at_the_top(run, problem_file, tmp_path):
    """Found by a user trial (messages that said the wrong thing): an .npz array where a string belongs, a
    head's key at the top."""
    np.savez(tmp_path / "t.npz", Q=[[1.0]], K=[[1.0]], V=[[1.0]], title=np.array([1.0, 2.0]))
    assert_error(run("compute", tmp_path / "t.npz"), "title is an array of float64 with shape (2,); expected a string")
    doc = json.loads((SAMPLES / "scooter.json").read_text(encoding="utf-8")) | {"lse": [1.0]}
    result = run("compute", problem_file(doc))
    assert_error(result, "lse is one head's result: it goes in heads[i].lse")
    assert "title" not in result.stderr


def test_messages_csv_one_stage(run):
    """Found by a user trial (messages that said the wrong thing): --format csv writes one stage."""
    assert_error(run("compute", SAMPLES / "scooter.json", "-f", "csv", "--stages", "weights,output"),
                 "--format csv writes one stage: give one, such as --stages weights")


def test_messages_a_byte_that_is_not_utf8_in_a_label(run):
    """Found by a user trial (messages that said the wrong thing): a byte that is not UTF-8 in a label."""
    label = b"a\xff".decode("utf-8", "surrogateescape")
    assert_error(run("compute", SAMPLES / "scooter.json", "--key-labels", f"{label},b,c"),
                 "key_labels[0] holds the byte 0xff, which is not UTF-8, at character 2")


@pytest.mark.parametrize("key, value, fragment", [
    ("title", '"\\ud800"', "title holds a lone surrogate \\ud800 at character 1"),
    ("description", '"ok \\udfff"', "description holds a lone surrogate \\udfff at character 4"),
    ("query_labels", '["a\\ud83d"]', "query_labels[0] holds a lone surrogate \\ud83d at character 2"),
    ("key_labels", '["x", "\\udc00"]', "key_labels[1] holds a lone surrogate \\udc00"),
])
def test_lone_surrogates_are_refused_at_input(run, problem_file, key, value, fragment):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: lone
    surrogates (valid JSON escapes that no UTF-8 output can hold) are refused at input."""
    text = '{"Q": [[1, 2]], "K": [[1, 2], [3, 4]], "V": [[1], [2]], "%s": %s}' % (key, value)
    result = run("compute", problem_file(text), "--format", "json")
    assert_error(result, fragment, "expected text that is valid Unicode")


def test_a_surrogate_pair_is_one_character_and_fine(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a surrogate
    pair is one character, and fine."""
    text = '{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": "\\ud83d\\ude00"}'
    assert run.json("compute", problem_file(text))["title"] == "\U0001f600"


def test_undecodable_label_bytes_on_the_command_line(run):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a label's byte
    that is not UTF-8 on the command line is said as the byte."""
    # Python decodes a non-UTF-8 argument byte 0xff to the lone surrogate U+DCFF: said as the byte.
    assert_error(run("compute", SAMPLES / "scooter.json", "--query-labels", "a\udcff", "--format", "json"),
                 "--query-labels: query_labels[0] holds the byte 0xff, which is not UTF-8")


# Counts said with the wrong word: "3 keies", "1 heads", "1 kv heads", "1 of 3 keys are padding",
# "1 columns". One helper, base.errors.plural, says every count.
@pytest.mark.parametrize("n, word, said", [(1, "key", "1 key"), (3, "key", "3 keys"), (2, "query", "2 queries"),
                                           (1, "entry", "1 entry"), (0, "head", "0 heads"), (2, "kv head", "2 kv heads"),
                                           (1, "query head", "1 query head"), (4000, "key", "4,000 keys"),
                                           (2, "day", "2 days"), (2, "box", "2 boxes")])
def test_plural_says_a_count_with_its_word(n, word, said):
    assert plural(n, word) == said


def test_counts_in_messages_and_headers_agree_with_their_number(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--key-labels", "a,b,c,d"),
                 "--key-labels: key_labels has 4 labels but there are 3 keys")
    assert_error(run("compute", "-", input=json.dumps({"Q": [[[1, 0]]], "K": [[[1, 0]]], "V": [[[1]]], "heads": 2})),
                 "heads is 2 but Q has 1 head (its first axis)")
    gqa = json.loads(run("exercise", "--kind", "gqa", "--seed", "1", "-f", "json").stdout)
    assert "2 query heads, 1 kv head, query head h" in gqa["description"]
    header = run("compute", SAMPLES / "scooter.json", "--key-mask", "1,1,0", "-f", "table").stdout
    assert "1 of 3 keys is padding" in " ".join(header.split())
