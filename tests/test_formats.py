"""The output formats are records in one registry (attncli/render/formats.py) that every path reads:
a throwaway reStructuredText format, added as one record and its writer, is offered by --format,
written by --output FILE.rst, refused by the plan for what it cannot hold (tiles, counts, heatmap,
backward pass), counted by the memory guard and escaped by its own escaping; the formats' silent
cases (an option accepted and its content dropped) are refused from the options alone; nothing is
rendered but the format asked for, and a binary file never passes through JSON."""

import json
import re

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from attncli import cli
from attncli.base.errors import visible
from attncli.commands import compute, compute_options, edge, spec
from attncli.compute import limits
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render import formats
from attncli.render.text import header_lines, labels, number
from attncli.stages.table import get
from tests.conftest import SAMPLES, SCOOTER, assert_error
from tests.test_safety import assert_escapes_user_text

RST_SPECIAL = re.compile(r"([\\`*_|:<>\[\]])")


def rst_escape(text: str) -> str:
    """User text for reStructuredText: every inline-markup character backslash-escaped."""
    return RST_SPECIAL.sub(r"\\\1", visible(text))


def rst(view: formats.View) -> str:
    """A throwaway writer: the header as a line block, then each shown stage of each head as a
    list table; the explanation as a literal block."""
    trace, p = view.trace, view.trace.problem
    parts = ["\n".join("| " + rst_escape(line) for line in header_lines(trace, view.precision))]
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    for name in view.shown:
        stage = get(name)
        if stage is None or trace.stage(name) is None:
            continue
        for h, matrix in enumerate(trace.stage(name)):
            columns = keys if stage.columns == "keys" else [str(j) for j in range(matrix.shape[1])]
            rows = keys if stage.rows == "keys" else queries
            table = [f".. list-table:: {name} (head {h})", "   :header-rows: 1", "",
                     "   * - ", *(f"     - {rst_escape(c)}" for c in columns)]
            for label, row in zip(rows, matrix):
                table += [f"   * - {rst_escape(label)}", *(f"     - {number(x, view.precision)}" for x in row)]
            parts.append("\n".join(table))
    if view.explanation:
        parts.append("::\n\n" + "\n".join("   " + visible(line) for line in view.explanation))
    return "\n\n".join(parts) + "\n"


RST = formats.Format("rst", "reStructuredText tables", (".rst",), holds=frozenset({"explanation"}),
                     escape=rst_escape, trace=rst)


def register(monkeypatch, record: formats.Format):
    """Add `record` to the registry, and make the command line again as its module would make it
    with the record there (Typer's --format choices are made once, when compute's options load):
    returns an `invoke(*args)` on that command line."""
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS + (record,))
    option = spec.find(compute_options.OPTIONS, "format")
    monkeypatch.setattr(option, "enum", edge.formats("Format", "auto", *(f.name for f in formats.views())))
    monkeypatch.setattr(compute.compute, "__signature__", spec.signature(compute_options.OPTIONS))
    app = typer.Typer(cls=cli.AttnGroup, pretty_exceptions_enable=False)
    app.callback()(lambda: None)
    app.command(cls=cli.AttnCommand)(compute.compute)
    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture
def with_rst(monkeypatch):
    return register(monkeypatch, RST)


def test_an_added_format_is_offered_written_to_stdout_and_to_its_suffix(with_rst, tmp_path):
    invoke = with_rst
    result = invoke("compute", SAMPLES / "scooter.json", "--format", "rst")
    assert result.exit_code == 0, result.stderr
    trace = attend(build_problem(SCOOTER))
    weights = trace.stage("weights")[0, 0]
    assert ".. list-table:: weights (head 0)" in result.stdout
    assert "     - " + number(weights[1], 4) in result.stdout and "   * - it" in result.stdout
    assert ".. list-table:: scores (head 0)" in result.stdout  # every stage by default
    # --stages: the stages asked for alone
    only = invoke("compute", SAMPLES / "scooter.json", "-f", "rst", "--stages", "weights").stdout
    assert "weights (head 0)" in only and "scores (head 0)" not in only
    # --output FILE.rst: written as rst by its suffix, the same text as on stdout
    target = tmp_path / "out.rst"
    assert invoke("compute", SAMPLES / "scooter.json", "-o", target).exit_code == 0
    assert target.read_text(encoding="utf-8") == result.stdout
    assert_error(invoke("compute", SAMPLES / "scooter.json", "-o", target, "-f", "json"),
                 "--output", "is written as rst, but --format is json")
    # --explain: held by the record, so written
    explained = invoke("compute", SAMPLES / "scooter.json", "-f", "rst", "--explain").stdout
    assert "::\n\n   " in explained and "Step 1" in explained


@pytest.mark.parametrize("options, flag", [
    (["--tiles", "1,2"], "--tiles"),
    (["--cost"], "--cost"),
    (["--heatmap"], "--heatmap"),
    (["--do", "ones"], "--do"),
])
def test_an_added_format_refuses_what_its_record_does_not_hold(with_rst, tmp_path, options, flag):
    """Refused by the plan, from the options alone, naming the format and the option; before it,
    `--format rst --tiles 1,2` exited 0 without the tiles and `--format rst --cost` printed JSON."""
    for target in (["-f", "rst"], ["-o", tmp_path / "out.rst"]):
        result = with_rst("compute", SAMPLES / "scooter.json", *target, *options)
        assert_error(result, f"{flag}: ", "rst" if target[0] == "-f" else ".rst file", "would be lost")
        assert not (tmp_path / "out.rst").exists()


def test_what_a_record_holds_is_what_its_format_writes(monkeypatch, tmp_path):
    """The same format with a cost writer and the tiles: the plan lets them through, and the writer gets them."""
    seen = []

    def tiles_too(view):
        seen.append(view.tiled)
        return rst(view)

    invoke = register(monkeypatch, RST._replace(holds=RST.holds | {"tiles"}, trace=tiles_too,
                                                cost=lambda problem, found: f"{found.matmul_flops} FLOPs\n"))
    assert invoke("compute", SAMPLES / "scooter.json", "-f", "rst", "--cost").stdout == "24 FLOPs\n"
    assert invoke("compute", SAMPLES / "tiny_tiles.json", "-f", "rst", "--tiles", "1,2").exit_code == 0
    assert seen and seen[0] is not None and seen[0].tiles


def test_an_added_format_escapes_user_text(with_rst, problem_file):
    assert_escapes_user_text(with_rst, problem_file, RST)


def test_the_memory_guard_counts_what_a_record_builds():
    problem = build_problem({"Q": np.ones((8, 2)), "K": np.ones((8, 2)), "V": np.ones((8, 2))})
    shown = ("weights", "output")
    text = limits.needs(problem, RST.builds, shown)["its text"]
    assert text == limits.view_bytes(problem, "text", shown) > 64 * limits.TEXT_NUMBER
    assert limits.needs(problem, formats.get("npz").builds, shown)["its text"] == 0


# The silent cases: each exited 0 with the option's content missing (or another format's text).
@pytest.mark.parametrize("args, fragments", [
    (["--format", "html", "--cost"], ("--cost: --format html holds", "use --format table, json or markdown")),
    (["--format", "markdown", "--heatmap"], ("--heatmap: --format markdown holds", "use --format table, html or svg")),
    (["--format", "json", "--heatmap"], ("--heatmap: --format json holds", "use --format table, html or svg")),
    (["--format", "latex", "--stages", "weights,heatmap"], ("--heatmap: --format latex holds",)),
    (["--format", "csv", "--stages", "weights", "--explain"], ("--explain: --format csv holds",)),
    (["--format", "csv", "--stages", "weights", "--do", "ones"], ("--do: --format csv holds",)),
    (["--format", "latex", "--tiles", "1,2"], ("--tiles: --format latex holds", "use --format table, json or html")),
    # a user trial: csv's hint was "give one stage, such as --stages weights", which --heatmap then still failed
    (["--format", "csv", "--heatmap"], ("--heatmap: --format csv holds", "use --format table, html or svg")),
    (["--format", "csv", "--heatmap", "--stages", "weights"], ("--heatmap: --format csv holds",)),
])
def test_an_option_a_format_cannot_hold_is_refused(run, args, fragments):
    assert_error(run("compute", SAMPLES / "alibi.json", *args), *fragments)


@pytest.mark.parametrize("suffix, args, flag", [
    (".json", ["--heatmap"], "--heatmap"),
    (".md", ["--tiles", "1,2"], "--tiles"),
    (".html", ["--cost"], "--cost"),
    (".csv", ["--stages", "weights", "--explain"], "--explain"),
])
def test_a_file_refuses_what_its_format_cannot_hold_and_is_not_written(run, tmp_path, suffix, args, flag):
    target = tmp_path / f"out{suffix}"
    assert_error(run("compute", SAMPLES / "alibi.json", "-o", target, *args), f"{flag}: an {suffix} file holds")
    assert not target.exists()


def test_the_registry_is_what_the_command_line_offers():
    assert [m.value for m in compute.Format] == ["auto"] + [f.name for f in formats.views()]
    assert formats.suffixes() == (".json", ".md", ".tex", ".csv", ".html", ".svg", ".npy", ".npz")
    assert {f.name for f in formats.FORMATS if f.binary} == {"npy", "npz"}
    for record in formats.FORMATS:  # every record's words are the registry's own
        assert set(record.holds) <= set(formats.CONTENTS) and record.stages in formats.STAGES
        assert record.builds in formats.BUILDS and (record.escape is None) == record.binary
    with pytest.raises(ValueError, match="colour"):
        formats.get("json").can("colour")


# Nothing computed that is not written: the asked format's writer alone runs, and binary files are
# written from the trace's arrays, never through JSON.
VIEWS = {"json": ("attncli.render.json", "document"), "markdown": ("attncli.render.export", "markdown"),
         "latex": ("attncli.render.export", "latex"), "csv": ("attncli.render.export", "csv_stage"),
         "html": ("attncli.render.page", "page"), "table": ("attncli.render.tables", "print_tables"),
         "svg": ("attncli.render.svg", "heatmap_svg"),
         "npy": ("attncli.render.arrays", "save_npy"), "npz": ("attncli.render.arrays", "save_npz")}


def test_every_format_has_its_view_watched():
    assert set(VIEWS) == {f.name for f in formats.FORMATS if f.trace is not None}


@pytest.mark.parametrize("name", list(VIEWS))
def test_only_the_format_asked_for_is_rendered(run, monkeypatch, tmp_path, name):
    import importlib

    called = []
    for view, (module, function) in VIEWS.items():
        real = getattr(importlib.import_module(module), function)
        monkeypatch.setattr(importlib.import_module(module), function,
                            lambda *a, _real=real, _view=view, **k: (called.append(_view), _real(*a, **k))[1])
    fmt = formats.get(name)
    where = ["-o", tmp_path / f"out{fmt.suffixes[0]}"] if fmt.suffixes else ["-f", name]
    one = ["--stages", "weights"] if fmt.stages == "one" else []
    result = run("compute", SAMPLES / "scooter.json", *where, *one)
    assert result.exit_code == 0, result.stderr
    assert called == [name]


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_a_binary_file_never_passes_through_json(run, monkeypatch, tmp_path, suffix):
    """`attn compute --q q.npy … -o out.npy` encoded every echoed input and the output as JSON text
    and threw it away (3.5 s of 5.3 s at 8192 × 64); the arrays are written as computed."""
    rng = np.random.default_rng(0)
    for name in "qkv":
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((64, 8)))
    encoded = []
    real = json.JSONEncoder.iterencode
    monkeypatch.setattr(json.JSONEncoder, "iterencode",
                        lambda self, o, _one_shot=False: (encoded.append(type(o)), real(self, o, _one_shot))[1])
    target = tmp_path / f"out{suffix}"
    stages = ["--stages", "output"] if suffix == ".npy" else []
    result = run("compute", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v", tmp_path / "v.npy",
                 *stages, "-o", target)
    assert result.exit_code == 0, result.stderr
    assert encoded == []
    q, k, v = (np.load(tmp_path / f"{name}.npy") for name in "qkv")
    expected = attend(build_problem({"Q": q, "K": k, "V": v})).final
    written = np.load(target) if suffix == ".npy" else np.load(target)["output"]
    np.testing.assert_allclose(written, expected, rtol=1e-12, atol=1e-12)
    assert json.dumps({"a": 1}) and encoded == [dict]  # the spy sees the encoder when it is used


def test_the_csv_records_escape_is_what_the_csv_writer_writes(run, problem_file):
    """The CSV record's `escape` was csv_cell (the cell quoted as the file holds it) while the CSV
    writer escapes labels with csv_text and lets the csv module quote them: a hostile label's cell,
    read back with Python's csv module, is the record's escape of the label, exactly."""
    import csv
    import io

    fmt = formats.get("csv")
    keys = ["=1+2,\x9b31m\u202eevil\x7f", 'say "hi", then\nleave', "-1", "@SUM(A1)", "a|b <i>&amp;"]
    query = ["+cmd|' /C calc'!A0"]
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0]] * 5, "V": [[1, 0]] * 5, "key_labels": keys,
                         "query_labels": query})
    result = run("compute", path, "-f", "csv", "--stages", "weights")
    assert result.exit_code == 0, result.stderr
    header, row = list(csv.reader(io.StringIO(result.stdout)))
    assert header == [""] + [fmt.escape(label) for label in keys]
    assert row[0] == fmt.escape(query[0])
    assert header[1] != keys[0] and header[1].startswith("'=1+2,")  # escaped: no formula, no raw control


def test_markdown_has_the_columns_the_terminal_tables_show(run):
    """A user trial: markdown dropped the weights' sum and lse columns the tables show beside them."""
    table = run("compute", SAMPLES / "scooter.json", "--stages", "weights", "-f", "table").stdout
    markdown = run("compute", SAMPLES / "scooter.json", "--stages", "weights", "-f", "markdown").stdout
    assert "│    │ mechanic │ scooter │ petrol │    sum │    lse │" in table
    assert "| | mechanic | scooter | petrol | sum | lse |" in markdown
    assert "| it | 0.0454 | 0.7679 | 0.1867 | 1.0000 | 3.0925 |" in markdown
