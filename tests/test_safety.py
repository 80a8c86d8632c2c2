"""User text is data, never markup or control: every reproduction of issue 9 (rich markup,
terminal controls, LaTeX, Markdown, CSV formulas), through the views and through the CLI."""

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console
from rich.style import Style

from attncli.base.errors import visible
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render import formats
from attncli.render.explain import explain
from attncli.render.export import csv_stage, latex, markdown
from attncli.render.heatmap import cell_style, heatmap, print_heatmaps
from attncli.render.tables import make_console, render
from attncli.render.text import header_lines
from tests.conftest import ROOT, SAMPLES, SCOOTER

LINK = "[link=file:///etc/passwd]click[/link]"
TITLE = "T\u001b]0;PWNED\u0007\u001b[2J"
TITLE_SHOWN = "T\\u001b]0;PWNED\\u0007\\u001b[2J"
LATEX = r"q\end{verbatim}\input{/etc/passwd}\begin{verbatim}"
HOSTILE = SCOOTER | {"title": TITLE, "description": "C1 \u009b31m DEL \x7f bidi \u202eevil\u202c \u2066x\u2069",
                     "query_labels": ["[/]"], "key_labels": [LINK, "a|b", "[bold]x"]}
ALL = ("inputs", "scores", "scaled", "masked", "weights", "output", "heatmap")
# What must never reach a terminal or a text file raw: C0 but the line feed, DEL, C1, bidi.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile("\x1b\\[[0-9;]*m")  # colours and bold: the only escapes a colour terminal gets


def colour_terminal(doc, stages=ALL, explained=False) -> str:
    """Rendered as on a truecolor terminal, with every style."""
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      width=300, height=50)  # with a height, rich keeps the width under TERM=dumb
    trace = attend(build_problem(doc))
    render(trace, console, stages, 4, None, explain(trace) if explained else None)
    return console.file.getvalue()


def assert_literal(text: str, *fragments: str) -> None:
    """No hyperlink, no raw control (beyond colour), and each fragment printed as written."""
    assert "\x1b]8;" not in text
    plain = SGR.sub("", text)
    assert not RAW.search(plain), RAW.findall(plain)
    for fragment in fragments:
        assert fragment in plain, fragment


@pytest.mark.parametrize("explained", [False, True])
def test_markup_in_labels_is_printed_literally_on_a_colour_terminal(explained):
    text = colour_terminal(HOSTILE, explained=explained)
    assert "\x1b[1m" in text  # the console does style: the test would see a hyperlink
    assert_literal(text, LINK, "[/]", "[bold]x", TITLE_SHOWN, "C1 \\u009b31m DEL \\u007f bidi \\u202eevil\\u202c")


def test_markup_and_controls_through_the_cli(run, problem_file):
    path = problem_file(HOSTILE)
    for args in (["-f", "table", "--heatmap"], ["--explain"], ["-f", "table", "--stages", "weights"]):
        result = run("compute", path, *args)
        assert result.exit_code == 0, result.stderr
        assert_literal(result.stdout, LINK, "[/]", "[bold]x", TITLE_SHOWN)
    assert run.json("compute", path)["title"] == TITLE  # JSON keeps the text exact
    assert run.json("compute", path)["key_labels"] == [LINK, "a|b", "[bold]x"]


def test_json_escapes_controls_and_keeps_the_text(run, problem_file, tmp_path):
    """JSON on a terminal: DEL, C1, bidi and line separators are written as \\uXXXX escapes
    (json.dumps escapes only C0), so no raw control reaches the terminal; the parsed text is exact."""
    path = problem_file(HOSTILE)
    for args in (["-f", "json"], ["-f", "json", "--explain"]):
        result = run("compute", path, *args)
        assert result.exit_code == 0, result.stderr
        assert not RAW.search(result.stdout) and "\u2028" not in result.stdout, RAW.findall(result.stdout)
        assert json.loads(result.stdout)["description"] == HOSTILE["description"]
    answers = _answers_file(tmp_path, "b\u202ex\x9b.json", {"weights": [[0.0454, 0.7679, 0.1867]]})
    other = _answers_file(tmp_path, "a.json", {"weights": [[0.0454, 0.7679, 0.1867]]})
    for fmt in ("json", "gradescope"):  # a class: the file names are in the output
        result = run("check", answers, other, "--problem", path, "-f", fmt)
        assert not RAW.search(result.stdout), (fmt, RAW.findall(result.stdout))
        assert str(answers) in json.dumps(json.loads(result.stdout), ensure_ascii=False)  # the name, exact


# Labels with something for every medium: rich markup, Markdown and reStructuredText inline
# markup and table pipes, HTML tags and entities, LaTeX commands and groups, a CSV formula and a
# comma, controls, DEL, C1 and bidi characters.
LABELS = {"key_labels": [LINK, "a|b <i>&amp; `x` *y* _z_", "=1+2,\x9b31m\u202eevil\x7f"],
          "query_labels": ["\\end{tabular}{[}#$%~^ \u2066x\u2069"]}


def assert_escapes_user_text(invoke, problem_file, fmt: formats.Format) -> None:
    """`attn compute -f FORMAT` of a problem with hostile labels and title: every label stands in its
    tables as the format's own escaping writes it (never raw, unless escaping leaves it as it is),
    and no raw control reaches its text, the explanation's included where it holds one."""
    path = problem_file(HOSTILE | LABELS)
    one = ["--stages", "weights"] if fmt.stages == "one" else []  # a one-stage format: the stage with every label
    result = invoke("compute", path, "-f", fmt.name, *one)
    assert result.exit_code == 0, result.stderr
    for label in LABELS["key_labels"] + LABELS["query_labels"]:
        escaped = fmt.escape(label)
        assert escaped in result.stdout, (fmt.name, escaped)
        assert escaped == label or label not in result.stdout, (fmt.name, label)
    explained = invoke("compute", path, "-f", fmt.name, *one, *(["--explain"] if fmt.can("explanation") else []))
    for text in (result.stdout, explained.stdout):
        assert not RAW.search(text), (fmt.name, RAW.findall(text))


@pytest.mark.parametrize("fmt", formats.views(), ids=lambda f: f.name)
def test_every_text_format_escapes_user_text(run, problem_file, fmt):
    """Every registered format that writes a trace as text (render/formats.py), escaped by its own
    record's `escape`; tests/test_formats.py runs the same on a throwaway format."""
    assert_escapes_user_text(run, problem_file, fmt)


def _answers_file(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_check_tables_print_labels_literally(run, tmp_path):
    path = _answers_file(tmp_path, "a.json", HOSTILE | {"weights": [[0.0454, 0.7679, 0.1867]]})
    result = run("check", path, "-f", "table")
    assert result.exit_code == 0, result.stderr
    assert_literal(result.stdout, LINK, "[/]", "[bold]x")


def test_class_summary_lists_file_names_literally(run, tmp_path):
    problem = _answers_file(tmp_path, "problem.json", HOSTILE)
    right = {"weights": [[0.0454, 0.7679, 0.1867]]}
    (tmp_path / "c[").mkdir()
    names = ["[bold]alice.json", "b\x1b]0;x\x07.json", "c[/]d.json"]  # the last: a file in folder `c[`
    for name in names[:2]:
        _answers_file(tmp_path, name, right)
    _answers_file(tmp_path, names[2], {"nothing": 1})  # cannot be marked: an error row
    result = run("check", *(tmp_path / n for n in names), "--problem", problem, "-f", "table")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert_literal(result.stdout, "[bold]alice.json", "b\\u001b]0;x\\u0007.json", "c[/]d.json")
    assert not RAW.search(result.stderr)


def test_a_latex_label_cannot_end_the_explanation_or_run_a_command():
    doc = SCOOTER | {"title": "one\ntwo % three", "key_labels": [LATEX, "[x]", "*y"], "query_labels": ["it"]}
    trace = attend(build_problem(doc))
    text = latex(trace, ("weights",), 4, header_lines(trace, 4), ["  " + LATEX + ":", "", "  x  y"])
    lines = text.splitlines()
    assert lines[1:3] == [r"% one\textbackslash{}u000atwo \% three",  # every header line a comment
                          r"% Q 1×2 · K 3×2 · V 3×2 · 1 head · d\_k = 2 · d\_v = 2 · float64"]
    escaped = (r"q\textbackslash{}end\{verbatim\}\textbackslash{}input\{/etc/passwd\}"
               r"\textbackslash{}begin\{verbatim\}")
    assert " & " + escaped + r" & {[}x{]} & {*}y \\ \hline" in lines
    assert text.endswith("\n".join([
        r"\begin{flushleft}\ttfamily", "~~" + escaped + r": \\", r"\mbox{} \\", r"~~x~~y", r"\end{flushleft}", ""]))
    assert "verbatim}" not in text.replace(r"verbatim\}", "") and r"\input{" not in text


def test_markdown_labels_cannot_add_columns_or_close_the_fence():
    doc = SCOOTER | {"title": "# not a heading", "key_labels": ["a|b", "`", "[x](y)"], "query_labels": ["- it"]}
    trace = attend(build_problem(doc))
    text = markdown(trace, ("weights",), 4, header_lines(trace, 4), ["a ``` b", "``"])
    assert "\\# not a heading  \n" in text
    assert ("| | a\\|b | \\` | \\[x\\](y) | sum | lse |\n|---|---:|---:|---:|---:|---:|\n"
            "| \\- it | 0.0454 | 0.7679 | 0.1867 | 1.0000 | 3.0925 |\n") in text
    assert text.endswith("\n\n````\na ``` b\n``\n````\n")


def test_csv_text_cells_that_start_like_formulas_are_prefixed():
    doc = {"Q": [[0, 4], [1, 1]], "K": [[1, 0], [0, 1], [0.5, 0.5], [0, 0], [1, 1]],
           "V": [[2, 0], [0, 2], [1, -1], [0, 0], [1, 1]], "bias": [[0, 0, 0, 0, 0], [0, 0, 0, 0, None]],
           "query_labels": ["=1+2", "@SUM(A1)"], "key_labels": ["+x", "-cmd|' /C calc'!A0", "\tt", "\rr", "-1"]}
    text = csv_stage(attend(build_problem(doc)), "masked")
    lines = text.splitlines()
    assert lines[0] == ",'+x,'-cmd|' /C calc'!A0,\\u0009t,\\u000dr,-1"  # escaped: no tab or CR starts a cell
    assert lines[1].startswith("'=1+2,0.0,2.82842712474619") and lines[2].startswith("'@SUM(A1),")
    assert lines[2].endswith(",-inf")  # a number: never prefixed
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[2][-1] == "-inf" and float(rows[1][-1]) > 0


def test_csv_negative_numbers_stay_numbers(run):
    out = run("compute", SAMPLES / "scooter.json", "-f", "csv", "--stages", "output").stdout
    assert "'" not in out
    neg = run("compute", "--q", "1,0", "--k", "1,0;0,1", "--v", "-0.5;-1", "-f", "csv", "--stages", "output").stdout
    assert "'" not in neg and ",-0.6" in neg


def test_minus_infinity_has_one_spelling_in_text_views(run):
    causal = SAMPLES / "causal.json"
    for args in (["-f", "table"], ["-f", "markdown"]):
        out = run("compute", causal, "--stages", "masked", *args).stdout
        assert "−∞" in out and "-∞" not in out, args  # U+2212
    assert "-inf" in run("compute", causal, "--stages", "masked", "-f", "csv").stdout
    assert run.json("compute", causal, "--stages", "masked")["heads"][0]["masked"][0][1] is None


def test_no_color_drops_bold_and_dim(monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    render(attend(build_problem(HOSTILE)), make_console(), ALL)
    assert "\x1b[1m" in capsys.readouterr().out  # a colour terminal gets bold
    monkeypatch.setenv("NO_COLOR", "1")
    render(attend(build_problem(HOSTILE)), make_console(), ALL)
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "heatmap of weights" in out


def test_heatmap_cells_set_their_own_foreground_and_the_grid_is_not_bold():
    grid = heatmap(attend(build_problem(SCOOTER | {"key_labels": ["a", "b", "c"]})), 0)
    assert grid.style == ""
    bold = [span for span in grid.spans if Style.parse(str(span.style)).bold]
    assert [grid.plain[s.start:s.end] for s in bold] == ["heatmap of weights\n"]
    cells = [Style.parse(str(span.style)) for span in grid.spans if span not in bold]
    assert len(cells) == 3 and all(s.color is not None and s.bgcolor is not None for s in cells)
    dark, light = cell_style(0.0), cell_style(1.0)
    assert dark == "color(255) on color(232)" and light == "color(232) on color(255)"


def test_big_heatmaps_are_elided_with_the_shape_and_a_hint():
    doc = {"Q": [[i % 3, 1] for i in range(30)], "K": [[j % 5, 0] for j in range(40)],
           "V": [[1] for _ in range(40)]}
    trace = attend(build_problem(doc))
    lines = heatmap(trace, 0).plain.splitlines()
    assert lines[0] == "heatmap of weights (30×40, middle elided: --full shows all)"
    assert len(lines) == 2 + 11 and lines[7].strip().startswith("⋮") and "⋯" in lines[1]
    assert len(lines[1].split()) == 17  # 16 keys and ⋯
    full = heatmap(trace, 0, full=True).plain.splitlines()
    assert full[0] == "heatmap of weights" and len(full) == 2 + 30 and len(full[1].split()) == 40
    narrow = Console(file=io.StringIO(), width=60, color_system=None)
    print_heatmaps(trace, narrow, width=60)
    assert all(len(line.rstrip()) <= 60 for line in narrow.file.getvalue().splitlines())


def test_minus_infinity_as_printed_reads_back(run, tmp_path):
    (tmp_path / "bias.csv").write_text("0,−∞\n", encoding="utf-8")
    args = ("compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "1;2")
    for bias in ("0,−∞", tmp_path / "bias.csv"):
        assert run.json(*args, "--bias", bias)["heads"][0]["weights"] == [[1.0, 0.0]]
    doc = {"Q": [0, 4], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "bias": [[0, "−∞"]], "masked": [[0.0, "−∞"]]}
    (tmp_path / "a.json").write_text(json.dumps(doc), encoding="utf-8")
    result = run("check", tmp_path / "a.json", "-f", "json")
    assert result.exit_code == 0, result.stderr


def test_full_shows_the_whole_heatmap_through_the_cli(run):
    args = ("compute", "--q", ";".join(f"{i},1" for i in range(12)), "--k", "1,0;0,1", "--v", "1;2",
            "--stages", "heatmap", "-f", "table")
    cut, full = run(*args).stdout, run(*args, "--full").stdout
    assert "heatmap of weights (12×2, middle elided: --full shows all)" in cut and "\n⋮" in cut
    assert "middle elided" not in full and "\n11 " in full and "⋮" not in full


UNSAFE = "\x00\x1b\x1f\x7f\x80\x9b\x9f\u2028\u2029\u200e\u200f\u061c\u202a\u202e\u2066\u2069\ud800\udcff\udfff"


def test_visible_escapes_every_unsafe_character_and_keeps_its_neighbours():
    from attncli.base.errors import visible

    assert visible(UNSAFE) == "".join(f"\\u{ord(c):04x}" for c in UNSAFE)
    kept = " ~\xa0é\u2027\u202f\u2065\u206a\ue000∞"  # the characters just outside each unsafe range
    assert visible(kept) == kept


def test_a_file_name_that_is_not_utf8_is_named_in_one_printable_line(run, tmp_path):
    name = str(tmp_path / "bad\udcffname.json")  # how Python hands over the byte 0xff of a file name
    result = run("compute", name)
    assert result.exit_code == 2 and result.stdout == ""
    assert "bad\\udcffname.json" in result.stderr and result.stderr.count("\n") == 1


def test_markdown_escapes_a_start_that_would_open_a_list_or_a_rule():
    from attncli.render.export import md

    assert [md(t) for t in ("1. Intro", "2) b", "- x", "+ y", "=", ". z", "12 monkeys")] == \
        ["1\\. Intro", "2\\) b", "\\- x", "\\+ y", "\\=", "\\. z", "12 monkeys"]


def test_characters_that_show_nothing_are_shown_escaped():
    # Issue 17, item 11: `\u200bok.json` looked exactly like `ok.json` in the class table.
    from attncli.base.errors import visible

    for invisible in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"):
        assert visible(f"{invisible}ok") == f"\\u{ord(invisible):04x}ok"
    assert visible("ok\U000e0041") == "ok\\U000e0041"  # a tag character
    assert visible("é, 中, ∞") == "é, 中, ∞"  # characters that show are kept


def test_class_table_tells_a_zero_width_file_name_from_its_twin(run, tmp_path):
    problem = _answers_file(tmp_path, "problem.json", SCOOTER)
    right = {"weights": [[0.0454, 0.7679, 0.1867]]}
    files = [_answers_file(tmp_path, name, right) for name in ("ok.json", "\u200bok.json")]
    result = run("check", *files, "--problem", problem, "-f", "table")
    assert result.exit_code == 0, result.stderr
    assert "\\u200bok.json" in result.stdout and "\u200b" not in result.stdout


@pytest.mark.parametrize("label, escaped", [
    ("https://evil.example/x", "https\\://evil.example/x"),
    ("www.evil.example", "www\\.evil.example"),
    ("me@evil.example", "me\\@evil.example"),
])
def test_markdown_labels_never_become_autolinks(label, escaped):
    trace = attend(build_problem(dict(SCOOTER, key_labels=[label, "b", "c"])))
    text = markdown(trace, ("weights",), 4, [], None)
    assert escaped in text
    assert not re.search(r"(?<!\\)://|www\.|(?<!\\)@", text.replace(escaped, ""))


SCOOTER_FILE = SAMPLES / "scooter.json"


def test_invisible_operators_up_to_u2064_are_escaped():
    """Mutation: the word joiner's range stops at U+2063, so U+2064 (invisible plus) shows nothing."""
    for c in ("\u2061", "\u2062", "\u2063", "\u2064"):
        assert visible(f"{c}ok.json") == f"\\u{ord(c):04x}ok.json"


def test_markdown_autolink_escape_ignores_case():
    """Mutation: the autolink pattern loses re.IGNORECASE: `WWW.evil.example` and `HTTPS://…` are
    autolinked by GitHub's Markdown all the same."""
    from attncli.compute.attention import attend
    from attncli.render.export import markdown

    doc = json.loads(SCOOTER_FILE.read_text())
    trace = attend(build_problem(dict(doc, key_labels=["WWW.evil.example", "b", "c"])))
    text = markdown(trace, ("weights",), 4, [], None)
    assert "WWW\\.evil.example" in text and "WWW.evil" not in text


@pytest.mark.parametrize("text, escaped", [
    ("awww.example", "awww.example"),  # www inside a word is no autolink: left as written
    ("a.www.b", "a.www.b"),
    ("x &amp; y", "x \\&amp; y"),  # an entity would show as "&"
    ("&lt;b&gt;", "\\&lt;b\\&gt;"),
    ("  - x", "  \\- x"),  # indented, still a list item
    ("  1. x", "  1\\. x"),
    (" + y", " \\+ y"),
])
def test_markdown_text_is_escaped_exactly(text, escaped):
    """Mutations: the www autolink escape loses its (?<![\\w.]) guard (escaping inside words);
    `&` is dropped from the inline specials (entities render); the line-start escape forgets
    leading spaces (an indented `- x` is still a list)."""
    from attncli.render.export import md

    assert md(text) == escaped


def test_a_hash_in_a_label_is_escaped_for_latex():
    """Mutation: `#` dropped from the LaTeX escapes: a label `#1` would be a macro parameter."""
    from attncli.render.export import latex, tex

    assert tex("#1 & 50%") == r"\#1 \& 50\%"
    trace = attend(build_problem(dict(SCOOTER, key_labels=["#1", "b", "c"])))
    text = latex(trace, ["weights"], 2, [], None)
    assert r"\#1" in text and "#1" not in text.replace(r"\#1", "")


def test_a_description_may_break_lines_other_controls_stay_escaped(run, problem_file):
    """Found by a user trial (cosmetics): line breaks in a description are kept; other controls stay
    escaped."""
    doc = {"Q": [[1]], "K": [[1]], "V": [[1]], "description": "line one\nline two\u0007bell"}
    out = run("compute", problem_file(doc), "-f", "table").stdout
    assert "\nline one\nline two\\u0007bell\n" in out and "\\u000a" not in out
    latex = run("compute", problem_file(doc), "-f", "latex").stdout
    assert "% line one\n% line two" in latex


def test_a_file_name_that_is_not_utf8_is_an_escape_in_json(tmp_path):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a file name
    whose bytes are not UTF-8 (a lone surrogate in Python) is an escape in JSON."""
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
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: the JSON
    writer escapes lone surrogates and nothing else."""
    from attncli.render.json import dumps

    assert dumps({"file": "a\udcffb", "label": "√∞ \U0001f600"}) == '{"file": "a\\udcffb", "label": "√∞ \U0001f600"}'


SELF = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


def test_a_students_file_name_reaches_the_terminal_as_text(run, problem_file):
    """The class's stderr lines name students' files: a name's controls are escaped, as in errors."""
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(3)]
    cheat = problem_file({"Q": [[0]], "K": [[0]], "V": [[0]], "weights": [[1]]}, "a\x1b[2J\u202eb.json")
    result = run("check", *files, cheat, "--format", "csv")
    assert "a\\u001b[2J\\u202eb.json: its problem differs" in result.stderr
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
