"""Heatmaps and write-up exports on a fixed-width, colourless console."""

import csv
import io

from rich.console import Console

from attncli.attention import attend
from attncli.loading import read_document
from attncli.problem import build_problem
from attncli.render.export import csv_stage, latex, markdown
from attncli.render.heatmap import print_heatmaps, shade
from attncli.render.text import header_lines
from tests.conftest import SAMPLES


def trace_of(name):
    return attend(build_problem(read_document(str(SAMPLES / f"{name}.json"))[0]))


def test_shades_step_with_the_weight():
    assert [shade(w) for w in (0.0, 0.1, 0.2, 0.5, 0.7, 0.9, 1.0)] == [" ", " ", "░", "▒", "▓", "█", "█"]


def test_scooter_heatmap_exactly():
    console = Console(file=io.StringIO(), width=80, color_system=None)
    print_heatmaps(trace_of("scooter"), console)
    text = "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())
    assert text == """\
heatmap of weights
   mechanic  scooter   petrol
it     0.05 ▓▓▓ 0.77 ░░░ 0.19

shade: ' ' < 0.125 ≤ '░' < 0.375 ≤ '▒' < 0.625 ≤ '▓' < 0.875 ≤ '█'
"""


def test_heads_sit_side_by_side_when_they_fit_and_stack_when_not():
    trace = trace_of("multihead")
    wide = Console(file=io.StringIO(), width=120, color_system=None)
    print_heatmaps(trace, wide)
    first = wide.file.getvalue().splitlines()[0]
    assert "head 0" in first and "head 1" in first
    narrow = Console(file=io.StringIO(), width=40, color_system=None)
    print_heatmaps(trace, narrow)
    lines = narrow.file.getvalue().splitlines()
    assert all("head 1" not in line for line in lines[:4]) and any("head 1" in line for line in lines)


def test_heatmap_through_the_cli_without_colour(run):
    out = run("compute", SAMPLES / "causal.json", "--heatmap", "--stages", "weights", "-f", "table",
              env={"NO_COLOR": "1"}).stdout
    assert "heatmap of weights" in out and "█" in out and "\x1b[" not in out


def test_markdown_tables():
    trace = trace_of("scooter")
    text = markdown(trace, ("weights",), 4, header_lines(trace, 4), None)
    assert "**weights** = softmax over keys\n\n| | mechanic | scooter | petrol |\n|---|---:|---:|---:|\n" \
           "| it | 0.0454 | 0.7679 | 0.1867 |" in text
    assert text.startswith("attn · softmax(Q Kᵀ · scale + bias) V  \n")


def test_latex_has_captioned_tables_and_bmatrices():
    trace = trace_of("causal")
    text = latex(trace, ("masked", "weights"), 4, header_lines(trace, 4), ["Step 1: …"])
    assert r"\caption{masked: $\text{scaled} + \text{bias}, -\infty \text{ where masked}$}" in text
    assert r"\caption{weights: $\operatorname{softmax}(\text{masked})$}" in text
    assert r"\text{masked} = \begin{bmatrix}" in text and r"0.7071 & -\infty & -\infty & -\infty \\" in text
    assert "\\begin{flushleft}\\ttfamily\nStep~1:~…\n\\end{flushleft}" in text
    assert text.count(r"\begin{table}") == text.count(r"\end{table}") == 2


def test_csv_export_round_trips_through_a_csv_reader(run):
    out = run("compute", SAMPLES / "multihead.json", "-f", "csv", "--stages", "weights").stdout
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["head", "query", "I", "like", "tea"] and len(rows) == 7
    assert abs(sum(float(x) for x in rows[1][2:]) - 1) < 1e-15
    single = csv_stage(trace_of("causal"), "masked").splitlines()
    assert single[0] == "query,the,cat,sat,down" and single[1].endswith(",-inf,-inf,-inf")


def test_markdown_and_latex_through_the_cli(run):
    md = run("compute", SAMPLES / "scooter.json", "-f", "markdown", "--explain").stdout
    assert "| it | 0.0454 | 0.7679 | 0.1867 |" in md and "```\nQuery \"it\" (row 0)" in md
    tex = run("compute", SAMPLES / "scooter.json", "-f", "latex", "--stages", "output").stdout
    assert r"\caption{output: $\text{weights}\, V$}" in tex
    bad = run("compute", SAMPLES / "scooter.json", "-f", "csv")
    assert bad.exit_code == 2 and "--format csv writes one stage" in bad.stderr
