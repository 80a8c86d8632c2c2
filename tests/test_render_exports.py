"""Heatmaps and write-up exports on a fixed-width, colourless console."""

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from attncli.compute.attention import attend
from attncli.document.loading import read_document
from attncli.document.reading import build_problem
from attncli.render.export import csv_stage, latex, markdown
from attncli.render.heatmap import print_heatmaps, shade
from attncli.render.text import header_lines
from tests.conftest import SAMPLES, assert_error
from tests.test_render_tables import GRADIENT_TITLES, backward_problem


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
    assert "**weights** = softmax(scaled) over keys\n\n| | mechanic | scooter | petrol | sum | lse |\n" \
           "|---|---:|---:|---:|---:|---:|\n| it | 0.0454 | 0.7679 | 0.1867 | 1.0000 | 3.0925 |" in text
    assert text.startswith("attn · softmax(Q Kᵀ · scale + bias) V  \n")


def test_latex_has_captioned_tables_and_bmatrices():
    trace = trace_of("causal")
    text = latex(trace, ("masked", "weights"), 4, header_lines(trace, 4), ["Step 1: …"])
    assert r"\caption{masked: $\text{scaled}, -\infty \text{ where masked}$}" in text  # no bias: none written
    assert r"\caption{weights: $\operatorname{softmax}(\text{masked})$}" in text
    assert r"\text{masked} = \begin{bmatrix}" in text and r"0.7071 & -\infty & -\infty & -\infty \\" in text
    assert "\\begin{flushleft}\\ttfamily\nStep~1:~…\n\\end{flushleft}" in text
    assert text.count(r"\begin{table}") == text.count(r"\end{table}") == 2


TWO_HEADS = {"Q": [[1, 0], [0, 2], [1, 1]], "K": [[0, 1], [1, 0]], "V": [[1, 2], [3, 4]], "heads": 2,
             "W_O": [[1, 0], [0.5, 1]], "query_labels": ["a", "b", "c"], "key_labels": ["x", "y"]}
FIXTURES = Path(__file__).parent / "fixtures"


def test_markdown_and_latex_of_two_heads_and_W_O_are_the_golden_text(run):
    """Three rows, two heads, W_O: every head's weights and output, then the final output, exactly
    as in tests/fixtures/export_two_heads.{md,tex} (a dropped row, head or table fails here)."""
    problem = json.dumps(TWO_HEADS)
    md = run("compute", "-", "-f", "markdown", "--stages", "weights,output", input=problem).stdout
    assert md == (FIXTURES / "export_two_heads.md").read_text(encoding="utf-8")
    tex = run("compute", "-", "-f", "latex", "--stages", "weights,output", "--precision", "3", input=problem).stdout
    assert tex == (FIXTURES / "export_two_heads.tex").read_text(encoding="utf-8")


def test_the_golden_text_holds_the_right_numbers():
    """The golden Markdown's tables, read back, are softmax(q k / √1) V per head and concat W_O,
    computed here without attncli."""
    q, k, v = (np.array(TWO_HEADS[n], dtype=float) for n in "QKV")
    exps = [np.exp(np.outer(q[:, h], k[:, h])) for h in range(2)]
    weights = [w / w.sum(axis=1, keepdims=True) for w in exps]
    outputs = [w @ v[:, h:h + 1] for h, w in zip(range(2), weights)]
    final = np.hstack(outputs) @ np.array(TWO_HEADS["W_O"])
    # beside the weights, as the terminal's tables: each row's sum and ln Σ e^logit
    weights = [np.column_stack([w, w.sum(axis=1), np.log(e.sum(axis=1))]) for w, e in zip(weights, exps)]
    tables = [[[float(x) for x in line.split("|")[2:-1]] for line in block.splitlines() if line.startswith("| ")
               and not line.startswith("| |")]
              for block in (FIXTURES / "export_two_heads.md").read_text(encoding="utf-8").split("**")[2::2]]
    expected = [weights[0], outputs[0], weights[1], outputs[1], final]
    assert len(tables) == len(expected)
    for table, matrix in zip(tables, expected):
        assert np.allclose(table, matrix, atol=5e-5)


def test_captions_name_the_softmax_input_and_the_final_formula():
    scooter, causal = trace_of("scooter"), trace_of("causal")
    assert r"\caption{weights: $\operatorname{softmax}(\text{scaled})$}" in latex(
        scooter, ("weights",), 4, header_lines(scooter, 4), None)
    assert "**weights** = softmax(masked) over keys" in markdown(causal, ("weights",), 4, header_lines(causal, 4), None)
    with_b = attend(build_problem(dict(TWO_HEADS, b_O=[1, 0])))
    assert r"\caption{final output: $\text{concat}\, W_O + b_O$}" in latex(
        with_b, ("output",), 4, header_lines(with_b, 4), None)
    no_w = attend(build_problem({k: v for k, v in TWO_HEADS.items() if k != "W_O"}))
    assert "**final output** = the heads' outputs side by side" in markdown(
        no_w, ("output",), 4, header_lines(no_w, 4), None)


def test_csv_honours_round_and_output_files_take_the_text_formats(run, tmp_path):
    out = run("compute", SAMPLES / "scooter.json", "-f", "csv", "--stages", "weights", "--round", "2").stdout
    assert out == ",mechanic,scooter,petrol\nit,0.05,0.77,0.19\n"
    assert run("compute", SAMPLES / "causal.json", "-f", "csv", "--stages", "masked", "--round", "1").stdout \
        .splitlines()[1] == "the,0.7,-inf,-inf,-inf"
    problem = json.dumps(TWO_HEADS)
    for suffix, fmt, extra in ((".md", "markdown", ()), (".tex", "latex", ()), (".csv", "csv", ("--round", "3"))):
        path = tmp_path / f"out{suffix}"
        args = ("compute", "-", "--stages", "weights", *extra)
        result = run(*args, "-o", path, input=problem)
        assert result.exit_code == 0 and result.stdout == "", result.stderr
        assert path.read_text(encoding="utf-8") == run(*args, "-f", fmt, input=problem).stdout
    assert_error(run("compute", "-", "-o", tmp_path / "x.tex", "-f", "markdown", input=problem),
                 "--output", "is written as latex, but --format is markdown")
    assert not (tmp_path / "x.tex").exists()
    for name, fmt in (("x.json", "latex"), ("x.npz", "markdown"), ("x.npy", "csv"), ("x.json", "table")):
        # the README: a --format that contradicts the suffix is an error (JSON was written silently)
        assert_error(run("compute", "-", "-o", tmp_path / name, "-f", fmt, "--stages", "weights", input=problem),
                     "--output", f"is written as {name[2:]}, but --format is {fmt}")
        assert not (tmp_path / name).exists()
    assert run("compute", "-", "-o", tmp_path / "x.json", "-f", "json", input=problem).exit_code == 0


def test_posenc_writes_csv_markdown_and_latex(run):
    csv_text = run("posenc", "--positions", "2", "--dim", "2", "-f", "csv").stdout
    assert csv_text == ",sin 0,cos 1\n0,0.0,1.0\n1,0.8414709848078965,0.5403023058681398\n"
    md = run("posenc", "--positions", "2", "--dim", "2", "-f", "markdown", "--precision", "2").stdout
    assert md == ("sinusoidal positional encoding, base 10000: PE(pos, 2i) = sin(pos / 10000^(2i/2)), "
                  "PE(pos, 2i+1) = cos(pos / 10000^(2i/2))  \n\n**PE**\n\n| | sin 0 | cos 1 |\n|---|---:|---:|\n"
                  "| 0 | 0.00 | 1.00 |\n| 1 | 0.84 | 0.54 |\n")
    tex = run("posenc", "--positions", "2", "--dim", "2", "-f", "latex").stdout
    assert (r"\caption{PE: $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/2}),\ "
            r"PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/2})$}") in tex
    assert "1 & $0.8415$ & $0.5403$" in tex and tex.count(r"\begin{table}") == 1
    table = run("posenc", "--positions", "3", "--dim", "4", "-f", "table").stdout
    assert "\nPE\n" in table and "3×4" not in table
    assert "PE (100×8, middle elided" in run("posenc", "--positions", "100", "-f", "table").stdout


def test_csv_export_round_trips_through_a_csv_reader(run):
    out = run("compute", SAMPLES / "multihead.json", "-f", "csv", "--stages", "weights").stdout
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["head", "", "I", "like", "tea"] and len(rows) == 7
    assert abs(sum(float(x) for x in rows[1][2:]) - 1) < 1e-15
    single = csv_stage(trace_of("causal"), "masked").splitlines()
    assert single[0] == ",the,cat,sat,down" and single[1].endswith(",-inf,-inf,-inf")


def test_markdown_and_latex_through_the_cli(run):
    md = run("compute", SAMPLES / "scooter.json", "-f", "markdown", "--explain").stdout
    assert "| it | 0.0454 | 0.7679 | 0.1867 |" in md and "```\nQuery \"it\" (row 0)" in md
    tex = run("compute", SAMPLES / "scooter.json", "-f", "latex", "--stages", "output").stdout
    assert r"\caption{output: $\text{weights}\, V$}" in tex
    bad = run("compute", SAMPLES / "scooter.json", "-f", "csv")
    assert bad.exit_code == 2 and "--format csv writes one stage" in bad.stderr


def test_csv_writes_minus_zero_as_zero_and_minus_infinity_as_minus_inf():
    from attncli.render.export import csv_table

    text = csv_table(["q"], ["a", "b", "c"], [(None, np.array([[-0.0, -np.inf, -1e-300]]))], decimals=4)
    assert text == ",a,b,c\nq,0.0,-inf,0.0\n"  # -1e-300 rounds to −0, written 0.0


def test_heatmap_through_a_pipe_is_drawn_not_dropped(run):
    # `attn compute p.json --heatmap | less` gave JSON, without the picture that was asked for;
    # like --explain, a heatmap makes the auto view text.
    out = run("compute", SAMPLES / "scooter.json", "--heatmap").stdout
    assert "heatmap of weights" in out and "▓▓▓ 0.77" in out and not out.startswith("{")
    # JSON holds no heatmap: asked for both, the plan refuses (it exited 0 without the heatmap)
    assert_error(run("compute", SAMPLES / "scooter.json", "--heatmap", "-f", "json"),
                 "--heatmap: --format json holds", "use --format table, html or svg")


WIDE = {"Q": [[1, 0]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "query_labels": ["ｉｔ"],
        "key_labels": ["ｃａｔ", "猫", "café"], "title": "全角 ｔｉｔｌｅ: 100％"}


def _pdflatex_safe(text: str) -> list[str]:
    """The characters in `text` that pdflatex's fonts cannot set, outside comments: none may be left."""
    body = "\n".join(line.split("%", 1)[0] if not line.startswith("%") else "" for line in text.splitlines())
    return sorted({c for c in body if c >= "\x80" and not ("\xc0" <= c <= "\xff" and c not in "×÷")
                   and c not in "–—…‘’“”"})


def test_full_width_and_cjk_labels_are_written_so_pdflatex_sets_them(run):
    """Issue 19's leftovers from earlier trials: LaTeX exports that pdflatex compiles whatever the labels:
    full-width and CJK labels."""
    out = run("compute", "-", "-f", "latex", "--stages", "weights", "--explain", input=json.dumps(WIDE)).stdout
    assert _pdflatex_safe(out) == []
    assert out.startswith("\\providecommand{\\attnchar}[1]{\\texttt{[U+#1]}}% a character pdflatex cannot set\n")
    assert " & cat & \\attnchar{732B} & café \\\\ \\hline" in out  # full-width ASCII: its letters; CJK: its code point
    assert "\nit & $" in out and "% 全角 ｔｉｔｌｅ: 100％" in out  # the header comments as written
    assert "\\ensuremath{\\surd}2" in out  # the explanation's symbols as math


def test_the_escapes_keep_the_text_and_leave_plain_exports_alone(run):
    """Issue 19's leftovers from earlier trials: the LaTeX escapes keep the text and leave plain exports
    alone."""
    from attncli.render.export import tex

    assert tex("ｃａｔ") == "cat" and tex("１００％") == r"100\%" and tex("ｘ＿ｉ") == r"x\_i"
    assert tex("猫") == r"\attnchar{732B}" and tex("😀") == r"\attnchar{1F600}"
    assert tex("Q Kᵀ · √2 ≈ 1.41, −∞") == r"Q K\ensuremath{^{\top}} \ensuremath{\cdot} \ensuremath{\surd}2 " \
                                          r"\ensuremath{\approx} 1.41, \ensuremath{-}\ensuremath{\infty}"
    assert tex("naïve – é…") == "naïve – é…" and tex("a\u3000b") == "a b"
    assert tex("猫", symbols=False) == "猫"
    plain = run("compute", SAMPLES / "scooter.json", "-f", "latex").stdout
    assert "attnchar" not in plain and _pdflatex_safe(plain) == []


def test_a_worksheet_is_pdflatex_safe_too(run):
    """Issue 19's leftovers from earlier trials: a LaTeX worksheet is pdflatex-safe too."""
    sheet = run("exercise", "--seed", "3", "--kind", "rope", "--format", "latex").stdout
    assert _pdflatex_safe(sheet) == [] and r"$\theta_i$" in sheet  # the worksheet's own math kept


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (the text is tested above)")
def test_pdflatex_compiles_the_export(run, tmp_path):
    """Issue 19's leftovers from earlier trials: pdflatex compiles the export (when it is installed)."""
    doc = {**WIDE, "mask": "causal", "bias": [[0, 0.5, "-inf"]]}
    body = run("compute", "-", "-f", "latex", "--stages", "scaled,masked,weights,output", "--explain",
               input=json.dumps(doc)).stdout
    (tmp_path / "body.tex").write_text(body, encoding="utf-8")
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n"
                                      "\\input{body}\n\\end{document}\n", encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]


# The LaTeX of GRADIENT_TITLES' formulas (tests/test_render_tables.py), by sample and the keys left out.
GRADIENT_LATEX = {
    ("rope.json", ()): (r"\text{scale} \cdot dS\, K_{\text{rope}},\ \text{rotated back } (\operatorname{RoPE}^{-1})",
                        r"\text{scale} \cdot dS^\top Q_{\text{rope}},\ \text{rotated back } (\operatorname{RoPE}^{-1})"),
    ("qk_norm.json", ()): (r"\text{scale} \cdot dS\, K_{\text{rope}},\ \text{rotated back } (\operatorname{RoPE}^{-1}),"
                           r"\ \text{back through q\_norm}",
                           r"\text{scale} \cdot dS^\top Q_{\text{rope}},\ \text{rotated back } (\operatorname{RoPE}^{-1}),"
                           r"\ \text{back through k\_norm}"),
    ("qk_norm.json", ("rope",)): (r"\text{scale} \cdot dS\, K_{\text{normed}},\ \text{back through q\_norm}",
                                  r"\text{scale} \cdot dS^\top Q_{\text{normed}},\ \text{back through k\_norm}"),
}


@pytest.mark.parametrize("sample, without, d_Q, d_K", GRADIENT_TITLES)
def test_markdown_and_latex_title_the_gradients_by_what_the_scores_read(sample, without, d_Q, d_K):
    trace = attend(build_problem(backward_problem(sample, without)))
    text = markdown(trace, ("d_Q", "d_K"), 4, header_lines(trace, 4), None)
    formulas = set(re.findall(r"\*\*d_[QK](?: \(head \d\))?\*\* = (.*)", text))
    assert formulas == {d_Q.split(" = ", 1)[1], d_K.split(" = ", 1)[1]}
    text = latex(trace, ("d_Q", "d_K"), 4, header_lines(trace, 4), None)
    captions = set(re.findall(r"\\caption\{d\\_[QK](?: \(head \d\))?: \$(.*)\$\}", text))
    assert captions == set(GRADIENT_LATEX[sample, without])
