"""Fuzzing every loader and the whole CLI: every input ends in valid output (exit 0, or 1 for
`check`) or exactly one `error:` line with exit 2, nothing on stdout: never a traceback.
Labels, titles, descriptions and file names are hostile text (rich markup, terminal controls,
bidi overrides, LaTeX, Markdown and CSV specials): no raw control and no markup effect may reach
any text output, and JSON keeps the text exact.

The short profile runs with every test run; the `slow` tests run the same properties with
5,000 examples each (CI: `python -m pytest -q -m slow -n 2`), which keeps CI within ten minutes.
"""

import errno
import io
import json
import os
import re
import string
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attncli.base.errors import AttnError, InputError, visible
from attncli.cli import app
from attncli.compute.attention import attend
from attncli.document.loading import decode, load_npy, parse_csv, parse_inline, parse_json
from attncli.document.reading import input_keys
from tests.conftest import SAMPLES
from tests.test_fuzz_variants import variant_keys
from tests.test_safety import RAW, SGR

SHORT = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=5_000, deadline=None, suppress_health_check=list(HealthCheck))
RUNNER = CliRunner()


def _strict(token):
    raise AssertionError(f"non-standard JSON token {token}")


def invoke(args, input=None):
    return RUNNER.invoke(app, args, input=input)


def assert_clean(result, json_out=False, differ_ok=False):
    """The invariant: success with valid output, or one `error:` line, exit 2, empty stdout."""
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.exit_code in ((0, 1, 2) if differ_ok else (0, 2)), (result.exit_code, result.stderr)
    lines = result.stderr.splitlines()
    if result.exit_code == 2:
        assert result.stdout == "" and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    else:
        assert all(line.startswith("warning: ") for line in lines), result.stderr
        if json_out:
            json.loads(result.stdout, parse_constant=_strict)


# Hostile text: pieces that mean something to rich, a terminal, LaTeX, Markdown or a spreadsheet,
# mixed with arbitrary text.
PIECES = ["[bold]", "[/]", "[/bold]", "[link=file:///etc/passwd]", "[/link]", ":smile:", "\x1b]0;PWNED\x07",
          "\x1b]8;;http://x\x1b\\", "\x1b[2J", "\x9b31m", "\x7f", "\x85", "\x00", "\t", "\r", "\n", "\u202e",
          "\u2066", "\u2069", "\u200f", "\u2028", "\\end{verbatim}", "\\input{/etc/passwd}", "%", "&", "{", "}",
          "$", "#", "_", "^", "~", "\\", "|", "```", "`", "<b>", "=", "+", "-", "@", "*", "=1+2", "-cmd|' /C calc'!A0"]
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=3)), max_size=3).map("".join)

# Structured problems: mostly consistent, sometimes not, with every option.
floats = st.one_of(st.floats(-10, 10, allow_nan=False), st.integers(-5, 5),
                   st.sampled_from([0.0, 1e-310, -1e300, 1e154, 0.5]))


@st.composite
def problems(draw):
    heads = draw(st.integers(1, 3))
    lq, lk, d, dv = (draw(st.integers(1, 4)) for _ in range(4))
    jitter = lambda n: draw(st.sampled_from([n, n, n, n, n + 1, max(0, n - 1)]))  # noqa: E731
    matrix = lambda rows, cols: [[draw(floats) for _ in range(cols)] for _ in range(rows)]  # noqa: E731
    doc = {"Q": matrix(lq, jitter(d * heads)), "K": matrix(jitter(lk), d * heads),
           "V": matrix(lk, jitter(dv * heads))}
    if heads > 1 or draw(st.booleans()):
        doc["heads"] = draw(st.sampled_from([heads, heads, 0, -1, 2.5, "2", None]))
    if draw(st.booleans()):
        doc["mask"] = draw(st.one_of(
            st.sampled_from(["causal", "causal_lower_right", "casual", ""]),
            st.lists(st.lists(st.booleans(), min_size=lk, max_size=lk), min_size=lq, max_size=lq),
            st.lists(st.lists(st.integers(0, 2), min_size=lk, max_size=lk), min_size=lq, max_size=lq)))
    if draw(st.booleans()):
        doc["bias"] = [[draw(st.one_of(floats, st.none(), st.just("-inf"))) for _ in range(jitter(lk))]
                       for _ in range(lq)]
    if draw(st.booleans()):
        doc["scale"] = draw(st.one_of(floats, st.just(1e300), st.text(max_size=3)))
    for key, length in (("query_labels", lq), ("key_labels", lk)):
        if draw(st.booleans()):
            n = jitter(length)
            doc[key] = draw(st.lists(hostile, min_size=n, max_size=n))
    for key in ("title", "description"):
        if draw(st.booleans()):
            doc[key] = draw(hostile)
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["Qs", "title", "description", "masked_rows", "dtype"]))] = draw(
            st.one_of(st.text(max_size=8), st.sampled_from(["uniform", "error", "float32"])))
    if draw(st.booleans()):  # the newer keys, mostly well formed, sometimes odd
        doc.update(draw(variant_keys(heads, lq, lk, d, jitter=jitter, odd=True)))
    return doc


OPTIONS = st.lists(st.sampled_from([
    ["--format", "json"], ["--format", "table"], ["--format", "markdown"], ["--format", "latex"],
    ["--format", "csv", "--stages", "weights"], ["--stages", "output"], ["--stages", "weights,heatmap"],
    ["--dtype", "float32"], ["--masked-rows", "uniform"], ["--masked-rows", "error"], ["--explain"],
    ["--heatmap"], ["--invert-mask"], ["--precision", "2"], ["--round", "3"], ["--full"], ["--row", "1"],
    ["--head", "1"], ["--scale", "0"], ["--tiles", "2,2"], ["--tiles", "1,3"], ["--do", "ones"],
    ["--softcap", "5"], ["--sinks", "0.5"], ["--alibi"], ["--rope"], ["--window", "1,none"],
    ["--q-positions", "9007199254740992"], ["--explain", "--tiles", "2,1"],
    ["--stages", ""], ["--stages", ","], ["--format", "csv", "--stages", "output"],  # issue 24: no stage; CSV headers
    ["--format", "csv", "--stages", "masked"], ["--rope-base", "1e400"], ["--rope-base", "nan"]]), max_size=3)


def compute_property(doc, options):
    fmt = next((o[1] for o in reversed(options) if o[0] == "--format"), None)  # the last one wins
    args = ["compute", "-"] + [a for option in options for a in option] + (["--format", "json"] if not fmt else [])
    result = invoke(args, input=json.dumps(doc))
    assert_clean(result, json_out=fmt in (None, "json"))
    if result.exit_code == 0 and fmt in (None, "json"):
        out = json.loads(result.stdout)
        assert all(out.get(key) == doc[key] for key in ("title", "description") if key in out)  # exact
        assert not RAW.search(result.stdout), RAW.findall(result.stdout)  # as \uXXXX escapes
    elif result.exit_code == 0:
        assert not RAW.search(result.stdout), RAW.findall(result.stdout)


@settings(SHORT, max_examples=30)  # the slow run has 5,000
@given(problems(), OPTIONS)
# Found by exploration: numpy's round scaled 1e308 by 10^3 to infinity (strict JSON refused it).
@example({"Q": [[0] * 12, [0] * 10 + [1e154, 0]], "K": [[0] * 10 + [1e154, 0]], "V": [[0, 0, 0]], "heads": 3},
         [["--round", "3"]])
@example({"Q": [[1, 2], [[3], 4]], "K": [[1, 2]], "V": [[1]]}, [])  # a list where a number belongs
@example({"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": "\ud800"}, [["--format", "table"]])  # lone surrogate
@example({"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "scale": 10**400, "heads": 10**400}, [])
@example({"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]]}, [["--format", "csv", "--stages", "masked"]])
@example({"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]]}, [["--explain"], ["--row", "²"]])
@example({"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "title": "\x9b2J\u202e\x7f\u2028"}, [])  # raw in JSON
# Found by the long profile: the causal hint (a warning) came before an error, two lines.
@example({"Q": [[0.0] * 4], "K": [[0.0] * 4] * 2, "V": [[0.0, 0.0]] * 2, "heads": 2, "mask": "causal"},
         [["--row", "1"]])
def test_compute_on_structured_problems(doc, options):
    compute_property(doc, options)


@pytest.mark.slow
@LONG
@given(problems(), OPTIONS)
def test_compute_on_structured_problems_long(doc, options):
    compute_property(doc, options)


# Hostile text in every label, title, description and file name of a valid problem: every view
# prints it literally (escaped by `visible`), with no raw control, hyperlink or markup effect.
@st.composite
def hostile_problems(draw):
    return {"Q": [[0, 4], [1, 1]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]],
            "mask": [[True, True, False], [True, True, True]],
            "query_labels": draw(st.lists(hostile, min_size=2, max_size=2)),
            "key_labels": draw(st.lists(hostile, min_size=3, max_size=3)),
            "title": draw(hostile), "description": draw(hostile)}


def assert_literal(output: str, texts) -> None:
    assert "\x1b]" not in output  # no hyperlink, no window title
    plain = SGR.sub("", output)
    assert not RAW.search(plain), RAW.findall(plain)
    for text in texts:
        # rich trims whitespace (a no-break space too) at a cell's edges: layout, not escaping.
        assert visible(text).strip() in plain, (text, visible(text))


def exports(trace, explanation) -> None:
    """Markdown keeps its columns and its fence, LaTeX its groups, CSV its cells; none gets a raw
    control."""
    import csv

    from attncli.render.export import csv_stage, latex, markdown
    from attncli.render.text import header_lines

    header, lk = header_lines(trace, 4), trace.problem.lk
    md = markdown(trace, ("weights",), 4, header, explanation)
    tex = latex(trace, ("weights",), 4, header, explanation)
    table = csv_stage(trace, "weights")
    for text in (md, tex, table):
        assert not RAW.search(text), RAW.findall(text)
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    beside = 1 + (trace.lse is not None)  # the weights' sum and lse columns, as the terminal's tables
    assert len(rows) == 3 and all(re.findall(r"\\.|\|", row).count("|") == lk + 2 + beside for row in rows), rows
    lines = md.splitlines()
    fence, start = lines[-1], lines.index(lines[-1])
    assert set(fence) == {"`"} and not any(line.lstrip(" ").startswith(fence) for line in lines[start + 1:-1])
    tokens = re.findall(r"\\[a-zA-Z]+|\\.|[{}]", tex)
    assert tokens.count("{") == tokens.count("}") and tokens.count(r"\input") == 0
    assert tokens.count(r"\begin") == tokens.count(r"\end") == 4  # table, tabular, bmatrix, flushleft
    cells = list(csv.reader(io.StringIO(table)))
    assert len(cells) == 3 and all(len(row) == lk + 1 for row in cells)
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in cells[0] + [r[0] for r in cells[1:]])


def hostile_property(tmp, doc, file_name):
    from rich.console import Console

    from attncli.document.reading import build_problem
    from attncli.render.explain import explain
    from attncli.render.tables import render

    # A description's line breaks are header lines (each line escaped on its own); other text is one line.
    description = [line.strip() for line in doc["description"].replace("\r\n", "\n").split("\n")]
    shown = doc["query_labels"] + doc["key_labels"] + [doc["title"].strip()] + description
    trace = attend(build_problem(doc))
    for explanation in (None, explain(trace)):  # tables and heatmap; the explanation
        console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor",
                          width=300, height=50)  # with a height, rich keeps the width under TERM=dumb
        render(trace, console, ("scores", "masked", "weights", "heatmap"), 4, None, explanation)
        assert_literal(console.file.getvalue(), shown)
    exports(trace, explain(trace))
    problem = tmp / "problem.json"
    answers = tmp / (file_name.replace("/", "∕").replace("\0", "") + ".json")  # any name a folder can hold
    problem.write_text(json.dumps(doc))
    answers.write_text(json.dumps({"weights": [[0.0454, 0.7679, 0.1867], [0.2, 0.2, 0.6]]}))
    one = invoke(["check", str(answers), str(problem), "--format", "table"])
    assert_clean(one, differ_ok=True)
    assert_literal(one.stdout, doc["query_labels"] + doc["key_labels"])
    many = invoke(["check", str(answers), str(problem), "--problem", str(problem), "--format", "table"])
    assert_clean(many, differ_ok=True)
    assert_literal(many.stdout, [str(answers)])
    for fmt in ("json", "gradescope"):  # the file name in JSON: escaped, and exact when parsed
        result = invoke(["check", str(answers), str(problem), "--problem", str(problem), "--format", fmt])
        assert_clean(result, json_out=True, differ_ok=True)
        assert not RAW.search(result.stdout), RAW.findall(result.stdout)


@settings(SHORT, max_examples=5)  # ~0.2 s each (five views, four `check` runs); the slow run has 200
@given(hostile_problems(), hostile)
# Found by the long profile: a file name holding a wide character (⺀ takes two terminal cells),
# and a label that is a no-break space (rich trims it at the cell's edge).
@example({"Q": [[0, 4], [1, 1]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]],
          "mask": [[True, True, False], [True, True, True]], "query_labels": ["", ""],
          "key_labels": ["", "", "\xa0"], "title": "", "description": ""}, "\x1f⺀")
def test_hostile_text_is_shown_literally(tmp_path_factory, doc, file_name):
    hostile_property(tmp_path_factory.mktemp("hostile"), doc, file_name)


@pytest.mark.slow
@settings(LONG, max_examples=200)
@given(hostile_problems(), hostile)
def test_hostile_text_is_shown_literally_long(tmp_path_factory, doc, file_name):
    hostile_property(tmp_path_factory.mktemp("hostile"), doc, file_name)


# Garbage: random bytes, and valid documents damaged in the ways files get damaged.
VALID = json.dumps({"title": "café", "Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]],
                    "V": [[2, 0], [0, 2], [1, -1]], "mask": [True, True, False]}, ensure_ascii=False)
damaged = st.one_of(
    st.binary(max_size=200),
    st.integers(0, len(VALID)).map(lambda n: VALID[:n].encode()),  # truncated
    st.just(b"\xef\xbb\xbf" + VALID.encode()),  # UTF-8 BOM
    st.just(VALID.replace(", ", ",\r\n").encode()),  # CRLF line ends
    st.just(VALID.encode("latin-1")),  # Latin-1
    st.tuples(st.integers(0, len(VALID) - 1), st.binary(min_size=1, max_size=3)).map(
        lambda t: VALID.encode()[:t[0]] + t[1] + VALID.encode()[t[0] + 1:]),  # a flipped byte
    st.integers(1, 5000).map(lambda n: ("[" * n + "]" * n).encode()),  # deep nesting
    st.sampled_from([b'{"Q": [1e999]}', b'{"Q": [[1, 2], [3]]}', b'{"Q": NaN}', b"null", b'"Q"', b"[]",
                     b'{"Q": [-1e308], "K": [1e308], "V": [1]}', b'{"Q": [1' + b"0" * 400 + b"]}"]))


def garbage_property(data):
    assert_clean(invoke(["compute", "-", "--format", "json"], input=data), json_out=True)


@settings(SHORT, max_examples=30)  # the slow run has 5,000
@given(damaged)
@example(b'{"Q": [1' + b"9" * 5000 + b"]}")  # longer than Python's int() reads
@example(b'{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "heads": ' + b"9" * 5000 + b"}")
@example(b'{"Q": [[1, 2]], "K": [[1, 2]], "V": [[1]], "description": "\\udfff"}')
def test_compute_on_damaged_input(data):
    garbage_property(data)


@pytest.mark.slow
@LONG
@given(damaged)
def test_compute_on_damaged_input_long(data):
    garbage_property(data)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=12)


@settings(SHORT, max_examples=30)  # the slow run has 5,000
@given(st.sampled_from(input_keys() + ("heads", "q", "output", "weights")), json_values)
def test_wrong_types_at_every_key(key, value):
    doc = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]], key: value}
    assert_clean(invoke(["compute", "-", "--format", "json"], input=json.dumps(doc)), json_out=True)


@pytest.mark.slow
@LONG
@given(st.sampled_from(input_keys() + ("heads", "q", "output", "weights")), json_values)
def test_wrong_types_at_every_key_long(key, value):
    test_wrong_types_at_every_key.hypothesis.inner_test(key, value)


# Extreme scalars at every key: integers past float64 (and past Python's 4300-digit int() limit),
# floats at the edges, lone surrogates in text, written as JSON text so that nothing is lost.
extreme_scalars = st.one_of(
    st.integers(300, 6000).map(lambda n: "9" * n), st.integers(300, 6000).map(lambda n: "-1" + "0" * n),
    st.sampled_from(["1e308", "-1.7976931348623157e308", "5e-324", "0e-99999999999999999999", "1e-400",
                     "123456789012345678901234567890.5", "true", "null", '"-inf"']),
    st.text(st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3).map(
        lambda t: json.dumps(t)))


@SHORT
@given(st.sampled_from(input_keys() + ("heads", "q", "weights")), extreme_scalars,
       st.sampled_from(["{}", "[{}]", "[[{}, 1]]", "[[1, {}], [2, 3]]"]),
       st.sampled_from([["--format", "json"], ["--format", "table"], ["--round", "2"]]))
def test_extreme_scalars_at_every_key(key, scalar, shape, options):
    text = '{"Q": [[0, 4]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]], "%s": %s}' % (
        key, shape.format(scalar))
    args = ["compute", "-"] + options + (["--format", "json"] if options[0] == "--round" else [])
    result = invoke(args, input=text)
    assert_clean(result, json_out=options[-1] == "json" or options[0] == "--round")
    assert "set_int_max_str_digits" not in result.stderr


# Loaders on their own: a value, or an InputError; nothing else.
def only_input_errors(function, *args):
    try:
        function(*args)
    except InputError:
        pass


cells = st.one_of(st.text(alphabet=string.printable, max_size=6), st.floats().map(repr), st.sampled_from(
    ["-inf", "true", "nan", "1e400", "", " 2 ", "0x10", "1_000", "∞"]))


@SHORT
@given(st.lists(st.lists(cells, max_size=4), max_size=4), st.sampled_from([",", "\t", ";"]),
       st.sampled_from(["number", "mask", "bias"]))
def test_csv_and_inline_loaders(rows, separator, kind):
    text = "\n".join(separator.join(row) for row in rows)
    only_input_errors(parse_csv, text, "x.csv", kind)
    only_input_errors(parse_inline, text, "--q", kind)


@SHORT
@given(st.binary(max_size=300))
def test_text_and_json_decoding(data):
    try:
        parse_json(decode(data, "x"), "x", keep_decimals=True)
    except InputError:
        pass


@SHORT
@given(st.binary(max_size=300))
def test_npy_loader_on_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("npy") / "x.npy"
    path.write_bytes(b"\x93NUMPY" + data)
    only_input_errors(load_npy, str(path))


def test_npy_declaring_an_enormous_shape(tmp_path):
    path = tmp_path / "huge.npy"
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000), }"
    header = header.ljust(118) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 64)
    result = invoke(["compute", "--q", str(path), "--k", "1", "--v", "1"])
    assert_clean(result)
    assert result.exit_code == 2 and "huge.npy: cannot read .npy" in result.stderr


# The other commands.
@SHORT
@given(st.dictionaries(st.sampled_from(["scores", "scaled", "weights", "output", "masked", "heads", "x"]),
                       json_values, max_size=3))
def test_check_on_random_answers(answers):
    problem = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}
    with warnings.catch_warnings():  # pytest keeps warnings from stderr: a numpy warning fails here
        warnings.simplefilter("error", RuntimeWarning)
        result = invoke(["check", "-", "--format", "json"], input=json.dumps(problem | answers))
    assert_clean(result, json_out=True, differ_ok=True)


exercise_draws = (st.integers(0, 2**40), st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3),
                     st.sampled_from([[], ["--mask", "causal"], ["--mask", "random"]]),
                     st.sampled_from(["plain", "causal", "multihead", "cross", "posenc"]))


@settings(SHORT, max_examples=40)  # the slow run has 500
@given(*exercise_draws)
def test_exercises_always_compute(seed, queries, keys, dim, heads, mask, kind):
    exercise_property(seed, queries, keys, dim, heads, mask, kind)


@pytest.mark.slow
@settings(LONG, max_examples=500)
@given(*exercise_draws)
@example(0, 1, 5, 1, 1, [], "multihead")  # found by this profile: refused, keys 5 over dim 1
def test_exercises_always_compute_long(seed, queries, keys, dim, heads, mask, kind):
    # Deeper, the draw meets settings it cannot make a problem by hand from (keys 5, dim 1, several
    # heads): exercise refuses them in one error line, exit 2; every problem it draws computes.
    exercise_property(seed, queries, keys, dim, heads, mask, kind, refusal_ok=True)


def exercise_property(seed, queries, keys, dim, heads, mask, kind, refusal_ok=True):
    if kind == "posenc" and dim * heads % 2:
        dim *= 2  # sin and cos columns come in pairs
    self_attention = kind in ("causal", "multihead", "posenc") or mask == ["--mask", "causal"]
    args = ["exercise", "--seed", str(seed), "--queries", str(keys if self_attention else queries),
            "--keys", str(keys), "--dim", str(dim), "--heads", str(heads), "--kind", kind] + mask
    problem = invoke(args)
    if refusal_ok and problem.exit_code == 2:
        assert_clean(problem)
        assert problem.stderr.startswith("error: --dim: could not draw a problem"), problem.stderr
        return
    assert problem.exit_code == 0, problem.stderr
    result = invoke(["compute", "-", "--format", "json"], input=problem.stdout)
    assert_clean(result, json_out=True)
    assert result.exit_code == 0


def test_no_code_path_evaluates_input(sources):
    source = "\n".join(module.text for module in sources)
    for forbidden in ("eval(", "exec(", "import pickle", "pickle.load", "allow_pickle=True", "literal_eval", "yaml"):
        assert forbidden not in source, forbidden
    import re

    loads = re.findall(r"np\.load\([^)]*\)", source)
    assert loads and all("allow_pickle=False" in call for call in loads), loads



# Issue 24's shapes. A key given twice, anywhere a document holds an object (the top level, a
# nested object, an object given as JSON text as an .npz holds rope and q_norm): one error naming
# the key, never the last one taken.
@st.composite
def twice_keyed(draw):
    doc = {"Q": [[0, 4]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]],
           "rope": {"base": 10, "dims": 2, "scaling": {"rope_type": "linear", "factor": 2}},
           "q_norm": {"type": "rms", "weight": [1, 1]}}
    where = draw(st.sampled_from(["top", "rope", "rope.scaling", "q_norm", "rope as text", "q_norm as text"]))
    value = draw(st.one_of(floats, st.text(max_size=3), st.booleans(), st.none()))
    text = json.dumps(doc)
    if where == "top":
        key = draw(st.sampled_from(sorted(doc)))
        return text[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}", key
    if where.endswith("as text"):
        key = where.split()[0]
        inner = json.dumps(doc[key])
        repeated = draw(st.sampled_from(sorted(doc[key])))
        doc[key] = inner[:-1] + f", {json.dumps(repeated)}: {json.dumps(value)}}}"
        return json.dumps(doc), repeated
    parent = doc["rope"]["scaling"] if where == "rope.scaling" else doc[where]
    repeated = draw(st.sampled_from(sorted(parent)))
    marker = {"rope": '"dims": 2', "rope.scaling": '"factor": 2', "q_norm": '"type": "rms"'}[where]
    return text.replace(marker, marker + f", {json.dumps(repeated)}: {json.dumps(value)}", 1), repeated


def twice_property(case):
    text, key = case
    result = invoke(["compute", "-", "--format", "json"], input=text)
    assert_clean(result)
    assert result.exit_code == 2 and f'the key "{key}" appears twice in one object' in result.stderr, result.stderr


@settings(SHORT, max_examples=30)  # the slow run has 2,000
@given(twice_keyed())
def test_a_key_twice_is_one_error_wherever_it_is(case):
    twice_property(case)


@pytest.mark.slow
@settings(LONG, max_examples=2_000)
@given(twice_keyed())
def test_a_key_twice_is_one_error_wherever_it_is_long(case):
    twice_property(case)


# Every CSV attn writes reads back: each stage of a random problem, as `-f csv` writes it, is the
# trace's numbers exactly (−∞ too), with its row labels as the CSV holds them (a blank one as its
# index); a label the reader cannot take (a decimal written with a comma) is one clean error, never
# a shifted matrix.
def csv_property(doc, stage):
    from attncli.document.reading import build_problem
    from attncli.document.text_input import comma_decimal
    from attncli.render.export import csv_stage, csv_text
    from attncli.stages.table import get, present

    try:
        trace = attend(build_problem(doc))
    except AttnError:  # a problem attn refuses (bad input, or numbers beyond float64)
        return
    p = trace.problem
    if stage != "output" and stage not in {s.name for s in present(p)}:
        return
    text = csv_stage(trace, stage)
    rows = p.key_labels if stage != "output" and get(stage).rows == "keys" else p.query_labels
    columns = p.key_labels if stage != "output" and get(stage).columns == "keys" else None
    odd = [label for label in (rows or []) + (columns or []) if comma_decimal(csv_text(label))]
    try:
        matrix, labels = parse_csv(text, "stage.csv", "bias" if stage == "masked" else "number")
    except InputError:
        assert odd, text
        return
    expected = trace.final if stage == "output" else trace.stage(stage) if p.heads > 1 else trace.stage(stage)[0]
    read = np.array(matrix, dtype=float)
    read[np.isnan(read)] = -np.inf  # a bias's -inf reads as None
    np.testing.assert_array_equal(read, expected)
    assert labels == ([csv_text(label).strip() or str(i) for i, label in enumerate(rows)] if rows else
                      [str(i) for i in range(expected.shape[-2])])  # a blank label is written as its index


@settings(SHORT, max_examples=30)  # the slow run has 2,000
@given(problems(), st.sampled_from(("Q_rope", "K_rope", "scores", "scaled", "capped", "masked", "weights", "output")))
@example({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "query_labels": [" "]}, "weights")  # a blank label
# Found by the long profile: blank key labels made the header `,,,`, skipped as a blank line.
@example({"Q": [[0.0] * 4] * 2, "K": [[0.0] * 4] * 3, "V": [[0.0]] * 3, "key_labels": ["", "", ""]}, "scores")
@example({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "key_labels": ["0,5", "x"]}, "weights")
def test_every_csv_attn_writes_reads_back(doc, stage):
    csv_property(doc, stage)


@pytest.mark.slow
@settings(LONG, max_examples=2_000)
@given(problems(), st.sampled_from(("Q_rope", "K_rope", "scores", "scaled", "capped", "masked", "weights", "output")))
def test_every_csv_attn_writes_reads_back_long(doc, stage):
    csv_property(doc, stage)


# stdout that fills up after a random number of bytes (a disk, /dev/full at 0): the real entry
# point, with the real WholeWrites, over a descriptor whose write(2) takes what fits and then
# fails with ENOSPC. Either everything fitted and the run is as usual, or it ends with exit 2
# and the one line saying so (after any warnings): never exit 0 with less written.
class FillingDisk:
    def __init__(self, room: int):
        self.room, self.written, self.full = room, 0, False

    def write(self, fd, data):
        if self.written >= self.room:
            self.full = True
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = min(len(data), self.room - self.written)
        self.written += taken
        return taken


def entry_point(args, room: int):
    """(exit status, stderr, disk) of `attn ARGS` through attncli.cli.main with stdout on a disk
    of `room` bytes."""
    from unittest import mock

    from attncli import cli
    from attncli.render import out

    disk, err = FillingDisk(room), io.BytesIO()
    with open(os.devnull, "w") as null, mock.patch.object(out, "SYSTEM_WRITE", disk.write), \
            mock.patch.object(sys, "argv", ["attn", *args]), mock.patch.object(sys, "stdout", null), \
            mock.patch.object(sys, "stderr", io.TextIOWrapper(err, encoding="utf-8", line_buffering=True)), \
            mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(), encoding="utf-8")):
        try:
            cli.main()
            code = 0
        except SystemExit as done:
            code = done.code
        sys.stderr.flush()
        said = err.getvalue().decode()
    return code, said, disk


COMMAND_LINES = st.sampled_from([
    ["compute", "{problem}", "-f", "json"], ["compute", "{problem}", "-f", "table"], ["compute", "{problem}", "--explain"],
    ["compute", "{problem}", "-f", "csv", "--stages", "weights"], ["compute", "{problem}", "-f", "markdown"],
    ["compute", "{problem}", "--stages", "output", "-f", "json"], ["compute", "{problem}", "-f", "html"],
    ["check", "{problem}", "--weights", "0.1,0.2,0.7", "-f", "json"], ["check", "{problem}", "--weights", "0.1,0.2,0.7"],
    ["exercise", "--seed", "5"], ["exercise", "--seed", "5", "-f", "markdown"], ["posenc", "--positions", "9", "--dim", "8"],
    ["example"], ["example", "scooter"], ["compute", "--help"], ["--version"]])


def stdout_property(tmp, doc, line, room):
    problem = tmp / "p.json"
    problem.write_text(json.dumps(doc))
    code, stderr, disk = entry_point([part.replace("{problem}", str(problem)) for part in line], room)
    lines = stderr.splitlines()
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert disk.full or room > 0 or code == 2  # each of these writes something, unless its input is refused
    if disk.full:
        assert code == 2 and lines and lines[-1] == "error: cannot write stdout: no space left on device", stderr
        assert all(text.startswith(("warning: ", "answer key: ")) for text in lines[:-1]), stderr
    else:
        assert code in (0, 1, 2), code
        assert all(text.startswith(("warning: ", "answer key: ")) for text in lines[:-1]), stderr
        if code == 2:
            assert len(lines) >= 1 and lines[-1].startswith("error: ") and disk.written == 0, stderr


@settings(SHORT, max_examples=20, suppress_health_check=list(HealthCheck))  # the slow run has 2,000
@given(st.sampled_from([json.loads(VALID)] + [json.loads((SAMPLES / f"{name}.json").read_text())
                                              for name in ("multihead", "causal", "rope", "alibi")]),
       COMMAND_LINES, st.one_of(st.just(0), st.integers(1, 40_000)))
@example(json.loads(VALID), ["compute", "{problem}", "-f", "json"], 100)
@example(json.loads(VALID), ["check", "{problem}", "--weights", "0.1,0.2,0.7"], 0)  # check's verdict is 1
def test_stdout_that_fills_up_is_always_said(tmp_path_factory, doc, line, room):
    stdout_property(tmp_path_factory.mktemp("full"), doc, line, room)


@pytest.mark.slow
@settings(LONG, max_examples=2_000)
@given(problems(), COMMAND_LINES, st.one_of(st.just(0), st.integers(1, 40_000)))
def test_stdout_that_fills_up_is_always_said_long(tmp_path_factory, doc, line, room):
    stdout_property(tmp_path_factory.mktemp("full"), doc, line, room)
