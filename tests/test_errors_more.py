"""Inputs that used to end in `error: internal error (…)`, a RuntimeWarning, a cut table or a
wrong exit code: each is now one clear `error:` line (or correct output), exactly as a user sees it."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attncli.base.arrays import EXACT_INTEGERS, plain
from attncli.base.values import MAX_DECIMALS, Typed
from attncli.render import tables
from tests.conftest import ROOT, SAMPLES, SCOOTER, assert_error

QKV = {"Q": [[1, 2]], "K": [[1, 2], [3, 4]], "V": [[1], [2]]}
DIGITS_5000 = "9" * 5000  # more digits than Python's int() reads by default (4300)


# A list where a number belongs: only the first row's leaves are checked by shape.
def test_a_list_where_a_number_belongs_is_named(run, problem_file):
    assert_error(run("compute", "--q", "[[1,2],[[3],4]]", "--k", "1,2", "--v", "1"),
                 "--q: Q[1][0] is a list of 1; expected a number")
    path = problem_file(dict(QKV, K=[[1, 2], [[3, 4], 5]]))
    assert_error(run("compute", path), "K[1][0] is a list of 2; expected a number")
    path = problem_file({"Q": [[[1, 2], [3, 4]], [[5, 6], [[7], 8]]], "K": [[[1, 2]], [[1, 2]]],
                         "V": [[[1]], [[1]]]})
    assert_error(run("compute", path), "Q[1][1][0] is a list of 1; expected a number")


# Huge integers: measured by their digits, never converted (no OverflowError, no int() advice).
@pytest.mark.parametrize("key, fragment", [
    ("scale", "scale is a 401-digit integer, too large for float64"),
    ("heads", "heads is a 401-digit number; expected a whole number from 1 to 1,000,000"),
])
def test_401_digit_settings(run, problem_file, key, fragment):
    path = problem_file(dict(QKV, **{key: 10**400}))
    assert_error(run("compute", path), f"{path}: {fragment}")


def test_a_huge_float_heads_is_refused_before_it_becomes_an_integer(run, problem_file):
    assert_error(run("compute", problem_file(dict(QKV, heads=1e300))), "heads is the number 1e+300")
    assert_error(run("compute", "--q", "1,2", "--k", "1,2", "--v", "1", "--heads", str(10**400)),
                 "--heads: heads is a 401-digit number")


@pytest.mark.parametrize("text, fragment", [
    ('{"Q": [[1, %s]], "K": [[1, 2]], "V": [[1]]}', "Q[0][1] is a 5000-digit integer, too large for float64"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "scale": -%s}', "scale is a 5000-digit integer"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "heads": %s}', "heads is a 5000-digit number"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": %s}', "title is a 5000-digit number; expected a string"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "mask": [[%s]]}', "mask[0][0] is a 5000-digit number"),
    ('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "bias": [[%s]]}', "bias[0][0] is a 5000-digit integer"),
    ('{"Q": [[1, %s.5]], "K": [[1, 2]], "V": [[1]]}', "the number 99999999999999999999…999.5 (5002 characters) "
                                                     "overflows float64"),
])
def test_5000_digit_numbers_in_json(run, problem_file, text, fragment):
    result = run("compute", problem_file(text % DIGITS_5000))
    assert_error(result, fragment)
    assert "set_int_max_str_digits" not in result.stderr and len(result.stderr) < 300


def test_5000_digit_numbers_inline_and_in_answers(run, problem_file):
    result = run("compute", "--q", DIGITS_5000, "--k", "1", "--v", "1")
    assert_error(result, '--q: row 1, column 1: "99999999999999999999…99999" (5000 characters) is not a finite number')
    assert len(result.stderr) < 300
    answers = problem_file('{"weights": [[%s, 0, 0]]}' % DIGITS_5000, "answers.json")
    result = run("check", answers, SAMPLES / "scooter.json")
    assert_error(result, "weights[0][0] is a 5000-digit integer")
    assert "set_int_max_str_digits" not in result.stderr


# Stages and rows that do not exist.
def test_csv_of_the_masked_stage_without_mask_or_bias(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--format", "csv", "--stages", "masked"),
                 "--stages: this problem has no mask, bias or ALiBi, so it has no masked stage", "--stages scaled")
    result = run("compute", SAMPLES / "causal.json", "--format", "csv", "--stages", "masked")
    assert result.exit_code == 0 and "-inf" in result.stdout


@pytest.mark.parametrize("row", ["²", "٣", "１", "-0", "9" * 5000])
def test_rows_are_ascii_digits_or_labels(run, row):
    assert_error(run("compute", SAMPLES / "scooter.json", "--explain", "--row", row),
                 "--row: no query", "the queries are it")


def test_row_by_index_still_works(run):
    result = run("compute", SAMPLES / "scooter.json", "--explain", "--row", "0")
    assert result.exit_code == 0 and "0.2775" in result.stdout


# Lone surrogates: valid JSON escapes that no UTF-8 output can hold.
@pytest.mark.parametrize("key, value, fragment", [
    ("title", '"\\ud800"', "title holds a lone surrogate \\ud800 at character 1"),
    ("description", '"ok \\udfff"', "description holds a lone surrogate \\udfff at character 4"),
    ("query_labels", '["a\\ud83d"]', "query_labels[0] holds a lone surrogate \\ud83d at character 2"),
    ("key_labels", '["x", "\\udc00"]', "key_labels[1] holds a lone surrogate \\udc00"),
])
def test_lone_surrogates_are_refused_at_input(run, problem_file, key, value, fragment):
    text = '{"Q": [[1, 2]], "K": [[1, 2], [3, 4]], "V": [[1], [2]], "%s": %s}' % (key, value)
    result = run("compute", problem_file(text), "--format", "json")
    assert_error(result, fragment, "expected text that is valid Unicode")


def test_a_surrogate_pair_is_one_character_and_fine(run, problem_file):
    text = '{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": "\\ud83d\\ude00"}'
    assert run.json("compute", problem_file(text))["title"] == "\U0001f600"


def test_undecodable_label_bytes_on_the_command_line(run):
    # Python decodes a non-UTF-8 argument byte 0xff to the lone surrogate U+DCFF: said as the byte.
    assert_error(run("compute", SAMPLES / "scooter.json", "--query-labels", "a\udcff", "--format", "json"),
                 "--query-labels: query_labels[0] holds the byte 0xff, which is not UTF-8")


# Typed numbers with absurd exponents: decimals are capped, marking prints no warning.
@pytest.mark.filterwarnings("error")  # a RuntimeWarning would be an internal error
@pytest.mark.parametrize("cell", ["0e-99999999999999999999", "0e-400", "0e-" + DIGITS_5000])
def test_check_with_an_absurd_exponent_is_marked(run, cell):
    result = run("check", SAMPLES / "scooter.json", "--weights", f"{cell},1,0", "--format", "json")
    assert result.exit_code == 1 and result.stderr == "", result.stderr
    assert json.loads(result.stdout)["stages"]["weights"]["cells"][0][0] == "wrong"


@pytest.mark.filterwarnings("error")
def test_many_decimals_on_a_large_value_still_mark_correct(run):
    # t · 10^308 overflows for the output 1.349…: the value is kept, not turned into NaN.
    result = run("check", SAMPLES / "scooter.json", "--output",
                 "0.2774704267750921" + "0" * 300 + ",1.3491421713299023" + "0" * 300, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["all_correct"] is True


@pytest.mark.parametrize("token, decimals", [("0.0454", 4), ("4.54e-2", 4), ("3", 0), ("1e5", 0),
                                             ("0e-99999999999999999999", MAX_DECIMALS),
                                             ("1e+" + DIGITS_5000, 0), ("1." + "0" * 1000, MAX_DECIMALS)])
def test_written_decimals_are_capped(token, decimals):
    assert Typed.parse(token).decimals == decimals


# Options that typer reads as infinity.
@pytest.mark.parametrize("base", ["1e309", "inf"])
def test_posenc_base_must_be_finite(run, base):
    assert_error(run("posenc", "--base", base, "--format", "json"), "--base: expected a finite number ≥ 1, found inf")


# long double .npy: read as JSON numbers are (rounded to float64), with no RuntimeWarning.
needs_long_double = pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
                                       reason="long double is float64 on this platform")


@needs_long_double
@pytest.mark.filterwarnings("error")
def test_a_long_double_beyond_float64_is_named(run, tmp_path):
    np.save(tmp_path / "q.npy", np.array([[np.longdouble("1e400"), 1]]))
    result = run("compute", "--q", tmp_path / "q.npy", "--k", "1,2", "--v", "1")
    assert_error(result, "q.npy: Q[0][0] is 1e+400, too large for float64 (the file's dtype is float128)")
    assert "RuntimeWarning" not in result.stderr


@needs_long_double
@pytest.mark.filterwarnings("error")
def test_a_long_double_within_float64_is_accepted(run, tmp_path):
    np.save(tmp_path / "q.npy", np.array([[0, 4]], dtype=np.longdouble))
    doc = run.json("compute", "--q", tmp_path / "q.npy", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1")
    assert doc["output"] == run.json("compute", "--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1")["output"]


# Rounding never turns a finite number into infinity.
HUGE_ROUNDED = {"Q": [[0] * 12, [0] * 10 + [1e154, 0]], "K": [[0] * 10 + [1e154, 0]], "V": [[0, 0, 0]], "heads": 3}


def test_round_keeps_huge_finite_values(run, problem_file):
    doc = run.json("compute", problem_file(HUGE_ROUNDED), "--round", "3")
    assert doc["heads"][2]["scores"] == [[0.0], [1e308]]
    assert doc["heads"][2]["scaled"] == [[0.0], [5e307]]


@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 17))
@example(1e308, 3)
@example(-1.7976931348623157e308, 17)
@example(2.0**52 - 0.5, 0)
@example(123.456789, 2)
def test_plain_rounds_without_overflow(x, decimals):
    (value,) = plain(np.array([x]), decimals)
    assert np.isfinite(value)
    if abs(x) >= EXACT_INTEGERS:
        assert value == x  # already a whole number: nothing to round
    else:
        assert value == np.round(x, decimals)


def test_plain_keeps_minus_infinity_as_null_when_rounding():
    assert plain(np.array([-np.inf, 1e300, 0.12345]), 2) == [None, 1e300, 0.12]


# A closed stdout is a normal end: exit 0, nothing on stderr.
@pytest.mark.parametrize("args", [
    ["compute", "samples/scooter.json"],
    ["compute", "samples/scooter.json", "--format", "table"],
    ["posenc", "--positions", "2000"],
    ["example", "scooter"],
])
def test_a_reader_that_goes_away_is_not_an_error(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "attncli", *args], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the child has started up: every write meets a closed pipe
    stderr = child.stderr.read()
    assert child.wait() == 0 and stderr == b""


# check's verdict is decided before it prints: a reader that leaves does not turn "differ" into 0.
@pytest.mark.parametrize("weights, code", [("0.0454, 0.7679, 0.1867", 0), ("0.5, 0.25, 0.25", 1)])
@pytest.mark.parametrize("form", ["json", "table", "csv"])
def test_check_keeps_its_verdict_when_the_reader_goes_away(weights, code, form):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "attncli", "check", "samples/scooter.json", "--weights",
                              weights, "--format", form], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read()
    assert child.wait() == code and stderr == b""


# A terminal of almost no columns still gets tables.
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("columns", ["0", "1", "5"])
def test_tiny_terminal_widths_still_print(monkeypatch, columns):
    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    tables.print_tables(attend(build_problem(SCOOTER)), ["weights"])
    text = terminal.getvalue()
    assert "weights = softmax(scaled) over keys" in text and "0.0454" in text
    assert max(len(line) for line in text.splitlines()) >= tables.MIN_WIDTH // 2


def test_terminal_width_has_a_floor(monkeypatch):
    monkeypatch.setenv("COLUMNS", "3")
    assert tables.terminal_width() == tables.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "123")
    assert tables.terminal_width() == 123


# Through a pipe the console grows to the widest table: no line is ever cut.
def _wide_problem(keys: int) -> dict:
    return {"Q": [[1, 0], [0, 1]], "K": [[(j % 7) / 10, 1] for j in range(keys)], "V": [[1]] * keys,
            "key_labels": [f"key{j}" for j in range(keys)]}


def _assert_every_column_shown(result, keys: int):
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if " key0 " in line)
    names = [cell.strip() for cell in header.split("│")[1:-1]]
    assert names == [""] + [f"key{j}" for j in range(keys)] + ["sum", "lse"]  # one table, every column
    rows = [line for line in lines if line.startswith("│") and line is not header]
    assert len(rows) == 2 and all(row.split("│")[-3].strip() == "1.0000" for row in rows)  # weights sum to 1
    assert all(len(row.split("│")) == len(header.split("│")) for row in rows)


def test_a_table_wider_than_the_pipe_limit_is_not_cut(run, problem_file, monkeypatch):
    monkeypatch.setattr(tables, "UNLIMITED", 120)
    path = problem_file(_wide_problem(40))
    _assert_every_column_shown(run("compute", path, "--format", "table", "--full", "--stages", "weights"), 40)


def test_marks_tables_wider_than_the_pipe_limit_are_not_cut(run, problem_file, monkeypatch):
    monkeypatch.setattr(tables, "UNLIMITED", 60)
    path = problem_file(dict(_wide_problem(30), weights=[[0.5] * 30, [0.5] * 30]))
    result = run("check", path, "--format", "table")
    assert result.exit_code == 1, result.stderr
    header = next(line for line in result.stdout.splitlines() if " key0 " in line)
    assert " key29 " in header and header.rstrip().endswith("│")


@pytest.mark.slow
def test_twelve_thousand_keys_with_full_are_not_cut(run, problem_file):
    path = problem_file(_wide_problem(12_000))
    _assert_every_column_shown(run("compute", path, "--format", "table", "--full", "--stages", "weights"), 12_000)


# A file name whose bytes are not UTF-8 reaches Python as a lone surrogate (U+DCFF for 0xff).
def test_a_file_name_that_is_not_utf8_is_an_escape_in_json(tmp_path):
    name = os.fsdecode(tmp_path / os.fsdecode(b"\xff.json"))
    with open(name, "w", encoding="utf-8") as handle:
        json.dump({"weights": [[0.0454, 0.7679, 0.1867]]}, handle)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8:strict")  # as en_US.UTF-8
    result = subprocess.run([sys.executable, "-m", "attncli", "check", name, name, "--problem",
                             str(SAMPLES / "scooter.json"), "--format", "json"],
                            cwd=ROOT, env=env, capture_output=True)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    result.stdout.decode("utf-8")  # valid UTF-8 throughout
    marked = json.loads(result.stdout)["files"]
    assert [os.fsencode(m["file"]) for m in marked] == [os.fsencode(name)] * 2


def test_json_dumps_escapes_only_lone_surrogates():
    from attncli.render.json import dumps

    assert dumps({"file": "a\udcffb", "label": "√∞ \U0001f600"}) == '{"file": "a\\udcffb", "label": "√∞ \U0001f600"}'


@pytest.mark.filterwarnings("error")  # a RuntimeWarning from rounding would be an internal error
@pytest.mark.parametrize("option, value", [("--scores", "1e308,-1e308,1e308"), ("--scaled", "1e308,-1e308,1e308"),
                                           ("--weights", "1e308,1e308,1e308"), ("--output", "1e308,-1e308")])
def test_marking_huge_answers_prints_no_warning(run, option, value):
    result = run("check", SAMPLES / "scooter.json", option, value, "--format", "json")
    assert result.exit_code == 1 and result.stderr == "", result.stderr


def test_text_wider_than_the_pipe_limit_is_not_wrapped(run, monkeypatch):
    monkeypatch.setattr(tables, "UNLIMITED", 20)
    result = run("compute", SAMPLES / "scooter.json", "--format", "table", "--stages", "weights")
    assert "The mechanic fixed the scooter because it was leaking petrol.\n" in result.stdout


# On a terminal, a table that cannot fit even at its narrowest is printed whole (the terminal
# wraps its lines) rather than squeezed to empty cells.
def test_a_table_too_wide_for_the_terminal_is_not_squeezed_to_nothing(monkeypatch):
    from rich import box
    from rich.table import Table

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    table = Table(box=box.ROUNDED)  # as the marks tables are built: wrappable columns
    for j in range(30):
        table.add_column(f"key{j}")
    table.add_row(*["0.5 ✗ 0.0270"] * 30)
    tables.make_console().print(table)
    header = next(line for line in terminal.getvalue().splitlines() if "key0" in line)
    assert [cell.strip() for cell in header.split("│")[1:-1]] == [f"key{j}" for j in range(30)]
    assert terminal.getvalue().count("0.5 ✗ 0.0270") == 30


def test_a_label_wider_than_the_terminal_is_not_cut(monkeypatch):
    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem

    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    label = "a query label much longer than the terminal is wide, " * 2 + "end"
    tables.print_tables(attend(build_problem(dict(SCOOTER, query_labels=[label]))), ["weights"])
    assert label in terminal.getvalue() and "0.0454" in terminal.getvalue()
