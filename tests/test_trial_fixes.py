"""What a user trial (a learner, a teacher, a hostile user) found on main: each item of the lane's
list with the test that failed before its fix."""

import json

import numpy as np
import pytest

from tests.conftest import SAMPLES, assert_error

ROPE_SAMPLE = json.loads((SAMPLES / "rope.json").read_text(encoding="utf-8"))


# 1. A --rope-… option replaces only its own field of the file's rope object.
def test_a_rope_option_keeps_the_files_other_rope_fields(run, problem_file):
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run.json("compute", path, "--rope-base", "500000")["rope"] == \
        {"style": "interleaved", "base": 500000.0, "dims": 2}
    assert run.json("compute", path, "--rope")["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 2}
    plain = problem_file({k: v for k, v in ROPE_SAMPLE.items() if k != "rope"}, "plain.json")
    assert run.json("compute", plain, "--rope")["rope"] == {"style": "half", "base": 10000.0, "dims": 4}
    assert run.json("compute", plain, "--rope-dims", "2")["rope"] == {"style": "half", "base": 10000.0, "dims": 2}


def test_a_rope_option_over_an_npz_keeps_its_rope_fields(run, problem_file, tmp_path):
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run("compute", path, "-o", tmp_path / "r.npz").exit_code == 0
    assert run.json("compute", tmp_path / "r.npz", "--rope-base", "100")["rope"] == \
        {"style": "interleaved", "base": 100.0, "dims": 2}


# 2. An .npz's heads/… and grads/… members read back like JSON's results.
def _npz_with(tmp_path, run, change, *options):
    first = tmp_path / "out.npz"
    assert run("compute", SAMPLES / "scooter.json", *options, "-o", first).exit_code == 0
    arrays = dict(np.load(first))
    change(arrays)
    np.savez(tmp_path / "changed.npz", **arrays)
    return tmp_path / "changed.npz"


def test_an_npz_reads_back_its_own_results(run, tmp_path):
    same = _npz_with(tmp_path, run, lambda a: None, "--do", "ones")
    assert run("compute", same, "-f", "json").exit_code == 0


@pytest.mark.parametrize("change, fragments", [
    (lambda a: a.update({"heads/foo": np.zeros(2)}), ['unknown member "heads/foo.npy"']),
    (lambda a: a.update({"extra/weights": np.zeros(2)}), ['unknown member "extra/weights.npy"']),
    (lambda a: a.update({"heads/Q": a["heads/Q"] + 1}), ["heads/Q[0][0][0] is 1.0 but recomputing gives 0.0",
                                                          "to mark answers, use attn check"]),
    (lambda a: a.update({"grads/Q": a["grads/Q"] * 2}), ["grads/Q[0][0] is", "but recomputing gives"]),
    (lambda a: a.update({"heads/weights": np.zeros((1, 2, 3))}),
     ["heads/weights is declared float64 (1, 2, 3), but this problem's weights is (1, 1, 3)"]),
    (lambda a: a.update({"heads/Q_rope": np.zeros((1, 1, 2))}), ["heads/Q_rope is given, but this problem has no Q_rope"]),
])
def test_an_npz_refuses_unknown_or_altered_results(run, tmp_path, change, fragments):
    assert_error(run("compute", _npz_with(tmp_path, run, change, "--do", "ones")), *fragments)


# 3. An error about two keys names the option that gave one of them, not the file.
@pytest.mark.parametrize("options, fragment", [
    (("--q", "1,2,3"), "--q: K has 2 columns but Q has 3"),
    (("--k", "1,2;3,4"), "--k: V has 3 rows but K has 2"),
    (("--v", "1,2;3,4"), "--v: V has 2 rows but K has 3"),
])
def test_a_mismatch_names_the_option_that_gave_a_key(run, options, fragment):
    result = run("compute", SAMPLES / "scooter.json", *options)
    assert_error(result, fragment)
    assert "scooter.json" not in result.stderr


# 4. Two long rules that differ are shown where they differ, with how to recompute.
def test_a_changed_mask_rule_shows_where_the_rules_differ(run, problem_file):
    out = run("compute", SAMPLES / "causal.json", "--alibi", "-f", "json").stdout
    result = run("compute", problem_file(out, "al_out.json"), "--window", "1,0")
    assert_error(result, 'mask_rule is "… 1, as PyTorch is_causal=True)", but from',
                 'it is "… 1, as PyTorch is_causal=True); window [1, 0]: query i may attend',
                 "--window changed the problem these came from; to recompute it with them, drop its results: "
                 "jq 'del(.attncli, .d_k, .d_v, .alibi_slopes, .mask_rule, .heads, .output, .warnings)' FILE")
    dropped = {k: v for k, v in json.loads(out).items()
               if k not in ("attncli", "d_k", "d_v", "alibi_slopes", "mask_rule", "heads", "output", "warnings")}
    assert run.json("compute", problem_file(dropped), "--window", "1,0")["window"] == [1, 0]


def test_short_echoes_are_shown_whole(run, problem_file):
    doc = run.json("compute", SAMPLES / "scooter.json")
    assert_error(run("compute", problem_file(dict(doc, d_k=3))), "d_k is 3, but from")


# 5. An empty file is "empty file", with what was expected there.
def test_an_empty_matrix_file_says_a_matrix_was_expected(run, problem_file):
    empty = problem_file(b"", "empty.csv")
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", empty),
                 "empty.csv: empty file; expected a matrix: rows of numbers")
    assert_error(run("compute", problem_file(b" \n", "blank.json")), "empty file; expected a JSON object with Q")
    assert_error(run("compute", input=""), "<stdin>: empty input; expected a JSON object")


def test_an_empty_answers_file_says_answers_were_expected(run, problem_file):
    empty = problem_file(b"", "answers.json")
    assert_error(run("check", empty, "--problem", SAMPLES / "scooter.json"),
                 "answers.json: empty file: no answers; write at least one of")
    result = run("check", empty, "--problem", SAMPLES / "scooter.json", "-f", "gradescope")
    assert "empty file: no answers" in json.loads(result.stdout)["output"]


# 6. A single file with no answers exits 2 in every format (1 in a class, as a file that differs).
@pytest.mark.parametrize("content", [b"{}", b""])
@pytest.mark.parametrize("format", ["table", "json", "gradescope", "csv"])
def test_a_file_with_no_answers_exits_alike_in_every_format(run, problem_file, content, format):
    answers = problem_file(content, "answers.json")
    result = run("check", answers, "--problem", SAMPLES / "scooter.json", "-f", format)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    right = problem_file({"weights": [[0.0454, 0.7679, 0.1867]]}, "right.json")
    assert run("check", answers, right, "--problem", SAMPLES / "scooter.json", "-f", format).exit_code == 1


# 7. Gradebook maxima: with --require every file is out of the required cells; without, a file that
# could not be marked is out of the class's common maximum.
FULL = {"scores": [[0, 4, 2]], "scaled": [[0, 2.8284, 1.4142]], "weights": [[0.0454, 0.7679, 0.1867]],
        "output": [[0.2775, 1.3491]]}


def _maxima(run, problem_file, *options):
    files = [problem_file({"weights": FULL["weights"], "output": FULL["output"]}, "good.json"),
             problem_file({"weights": FULL["weights"], "output": FULL["output"]}, "good2.json"),
             problem_file(FULL, "all.json"), problem_file(b"", "blank.json"),
             problem_file(b'{"weights": [1,', "broken.json")]
    result = run("check", *files, "--problem", SAMPLES / "scooter.json", "-f", "csv", *options)
    rows = [line.split(",") for line in result.stdout.splitlines()[1:]]
    return {row[0].rsplit("/", 1)[-1]: (int(row[1]), int(row[2])) for row in rows}, result


def test_with_require_every_file_is_out_of_the_required_cells(run, problem_file):
    maxima, _ = _maxima(run, problem_file, "--require", "weights,output")
    assert maxima == {"good.json": (5, 5), "good2.json": (5, 5), "all.json": (5, 5), "blank.json": (0, 5),
                      "broken.json": (0, 5)}
    files = [problem_file(FULL, "all.json"), problem_file(b"", "blank.json")]
    doc = json.loads(run("check", *files, "--problem", SAMPLES / "scooter.json", "-f", "gradescope",
                         "--require", "weights,output").stdout)
    full, blank = (entry["results"] for entry in doc["files"])
    assert full["score"] == 5 and full["output"].startswith("5/5 cells right")
    assert [t["max_score"] for t in full["tests"]] == [0, 0, 3, 2]
    assert full["tests"][0]["output"].startswith("not required, not scored: 3/3 right")
    assert blank["score"] == 0


def test_without_require_an_unmarked_file_is_out_of_the_common_maximum(run, problem_file):
    maxima, _ = _maxima(run, problem_file)
    assert maxima == {"good.json": (5, 5), "good2.json": (5, 5), "all.json": (11, 11), "blank.json": (0, 5),
                      "broken.json": (0, 5)}


# 8. --row: a label wins, #N is an index, a shared label is refused with the indices.
def _explained_rows(run, path, *rows):
    args = [a for r in rows for a in ("--row", r)]
    result = run("compute", path, "--explain", *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_row_a_label_wins_and_hash_is_an_index(run, problem_file):
    doc = {"Q": [[1, 0], [0, 1], [1, 1], [2, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
           "query_labels": ["1", "0", "x", "y"]}
    path = problem_file(doc)
    by_label = _explained_rows(run, path, "1")
    assert by_label == _explained_rows(run, path, "#0")  # "1" is the label of row 0
    assert _explained_rows(run, path, "#1") == _explained_rows(run, path, "0")  # row 1 is labelled "0"
    assert by_label != _explained_rows(run, path, "#1")
    assert _explained_rows(run, path, "#3") == _explained_rows(run, path, "y")
    assert_error(run("compute", path, "--explain", "--row", "#4"), '--row: no query "#4"',
                 "the queries are 1, 0, x, y (by index #0 to #3)")


def test_row_a_label_several_queries_share_is_refused(run, problem_file):
    doc = {"Q": [[1, 0], [0, 1], [1, 1], [2, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
           "query_labels": ["a", "a", "b", "c"]}
    assert_error(run("compute", problem_file(doc), "--explain", "--row", "a"),
                 '--row: "a" labels 2 queries (#0, #1); give the one to explain by index: --row #0 or --row #1')


# 9. --bias takes null for −∞ (as --help says); a path that exists is a file, suffix or not.
def test_bias_null_is_blocked_like_minus_infinity(run):
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
    assert_error(run("compute", SAMPLES / "scooter.json", "--bias", _pipe("0,,0\n")),
                 "row 1, column 2 is empty; expected a number or -inf")
    weights = run.json("compute", SAMPLES / "scooter.json", "--bias", _pipe("null,0,0\n"))["heads"][0]["weights"]
    assert weights[0][0] == 0
    # Not "0,4": a row of two whole numbers is an ambiguous decimal comma (issue 17, item 2).
    assert run.json("compute", SAMPLES / "scooter.json", "--q", _pipe("0,4.0\n"))["output"] == \
        run.json("compute", SAMPLES / "scooter.json")["output"]


# 10. Messages that said the wrong thing.
def test_messages_plural_labels_and_the_option(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", "1,0;0,1;1,1;2,2"),
                 "--q: query_labels has 1 label but there are 4 queries")


def test_messages_an_echo_without_its_source(run, problem_file):
    doc = run.json("compute", SAMPLES / "rope.json")
    del doc["rope"]
    assert_error(run("compute", problem_file(doc)), "rope_rule is given, but rope gives none")


def test_messages_tiles_and_dtype(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--tiles", "0,1"),
                 '--tiles: got "0,1"; expected two whole numbers BQ,BK of at least 1')
    result = run("compute", SAMPLES / "scooter.json", "--dtype", "float8")
    assert_error(result, "'float8' is not one of 'float64', 'float32', 'bfloat16', 'float16'")
    assert "did you mean" not in result.stderr
    assert 'did you mean "float32"' in run("compute", SAMPLES / "scooter.json", "--dtype", "flaot32").stderr


def test_messages_an_npz_array_and_a_head_key_at_the_top(run, problem_file, tmp_path):
    np.savez(tmp_path / "t.npz", Q=[[1.0]], K=[[1.0]], V=[[1.0]], title=np.array([1.0, 2.0]))
    assert_error(run("compute", tmp_path / "t.npz"), "title is an array of float64 with shape (2,); expected a string")
    doc = json.loads((SAMPLES / "scooter.json").read_text(encoding="utf-8")) | {"lse": [1.0]}
    result = run("compute", problem_file(doc))
    assert_error(result, "lse is one head's result: it goes in heads[i].lse")
    assert "title" not in result.stderr


def test_messages_csv_one_stage(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "-f", "csv", "--stages", "weights,output"),
                 "--format csv writes one stage: give one, such as --stages weights")


def test_messages_nan_in_answers_and_the_problems_own_stages(run, problem_file):
    nan = problem_file('{"weights": [[NaN, 1, 0]]}', "nan.json")
    result = run("check", nan, "--problem", SAMPLES / "scooter.json")
    assert_error(result, "NaN is not valid JSON; write −∞ as null (a bias's blocked cells, or an answer's masked ones)")
    for content in ("{}", ""):
        result = run("check", problem_file(content, "a.json"), "--problem", SAMPLES / "scooter.json")
        assert_error(result, "write at least one of scores, scaled, weights, output")
    result = run("check", problem_file("{}", "a.json"), "--problem", SAMPLES / "rope.json")
    assert "write at least one of Q_rope, K_rope, scores, scaled, masked, weights, output" in result.stderr


def test_messages_a_byte_that_is_not_utf8_in_a_label(run):
    label = b"a\xff".decode("utf-8", "surrogateescape")
    assert_error(run("compute", SAMPLES / "scooter.json", "--key-labels", f"{label},b,c"),
                 "key_labels[0] holds the byte 0xff, which is not UTF-8, at character 2")


def test_messages_a_long_double_too_large_names_its_dtype(run, tmp_path):
    if not np.isfinite(np.longdouble("1e4000")):
        pytest.skip("no long double beyond float64 here")
    np.save(tmp_path / "q.npy", np.array([[np.longdouble("1e4000"), 1]], dtype=np.longdouble))
    assert_error(run("compute", SAMPLES / "scooter.json", "--q", tmp_path / "q.npy"),
                 "is 1e+4000, too large for float64 (the file's dtype is float128)")


# 11. A narrow terminal splits a table into column ranges; it elides only past MAX_COLUMNS.
def _render(doc, width, full=False):
    from rich.console import Console

    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem
    from attncli.render.tables import render

    console = Console(file=__import__("io").StringIO(), width=width, color_system=None)
    render(attend(build_problem(doc)), console, ("weights",), 4, width, full=full)
    return console.file.getvalue()


def test_a_narrow_terminal_splits_a_small_table_and_shows_every_number():
    doc = json.loads((SAMPLES / "causal.json").read_text(encoding="utf-8"))
    text = _render(doc, 40)
    assert "⋯" not in text and "middle elided" not in text
    assert "(columns the–" in text and all(len(line.rstrip()) <= 40 for line in text.splitlines())
    assert "0.4802" in text and "0.5035" in text  # every weight is there


def test_a_table_past_max_columns_is_elided_then_split():
    rng = np.random.default_rng(0)
    doc = {"Q": rng.normal(size=(2, 3)).tolist(), "K": rng.normal(size=(40, 3)).tolist(),
           "V": rng.normal(size=(40, 2)).tolist()}
    text = _render(doc, 60)
    assert "(2×40, middle elided:" in text and "⋯" in text
    assert "(columns 0–" in text and "(column lse)" in text and all(len(line.rstrip()) <= 60 for line in text.splitlines())


# 12. Cosmetics: line breaks in a description, the submission's name for students, the causal header.
def test_a_description_may_break_lines_other_controls_stay_escaped(run, problem_file):
    doc = {"Q": [[1]], "K": [[1]], "V": [[1]], "description": "line one\nline two\u0007bell"}
    out = run("compute", problem_file(doc), "-f", "table").stdout
    assert "\nline one\nline two\\u0007bell\n" in out and "\\u000a" not in out
    latex = run("compute", problem_file(doc), "-f", "latex").stdout
    assert "% line one\n% line two" in latex


def test_gradescope_names_the_submission_by_its_file_name(run, problem_file, tmp_path):
    answers = problem_file({"weightz": [[1, 2, 3]]}, "answers.json")
    alone = json.loads(run("check", answers, "--problem", SAMPLES / "scooter.json", "-f", "gradescope").stdout)
    right = problem_file({"weights": [[0.0454, 0.7679, 0.1867]]}, "b.json")
    both = json.loads(run("check", answers, right, "--problem", SAMPLES / "scooter.json", "-f", "gradescope").stdout)
    for output in (alone["output"], both["files"][0]["results"]["output"]):
        assert "no answers found in answers.json:" in output and str(tmp_path) not in output
    assert both["files"][0]["file"] == str(answers)  # the teacher's key: the path as given


def test_the_causal_header_says_when_positions_are_given(run):
    given = run.json("compute", SAMPLES / "causal.json", "--q-positions", "1,2,3,4", "--k-positions", "1,2,3,4")
    assert given["mask_rule"] == "causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (by the positions given)"
    default = run.json("compute", SAMPLES / "causal.json")
    assert "(top-left with the default positions 0 … L − 1, as PyTorch is_causal=True)" in default["mask_rule"]
