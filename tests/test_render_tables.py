"""Tables rendered on a fixed-width, colourless console: exact text."""

import io
import sys

import numpy as np
import pytest
from rich.console import Console

from attncli.compute.attention import attend
from attncli.document.loading import read_document
from attncli.document.reading import build_problem
from attncli.render import tables
from attncli.render.tables import render
from attncli.render.text import number
from tests.conftest import SAMPLES, SCOOTER

ALL = ("inputs", "scores", "scaled", "masked", "weights", "output")


def rendered(doc, stages=ALL, width=100, precision=4):
    console = Console(file=io.StringIO(), width=width or 1000, color_system=None)
    render(attend(build_problem(doc)), console, stages, precision, width)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def test_scooter_weights_and_output_exactly():
    doc, _ = read_document(str(SAMPLES / "scooter.json"))
    assert rendered(doc, ("scaled", "weights", "output")) == """\
attn · softmax(Q Kᵀ · scale + bias) V
The mechanic fixed the scooter because it was leaking petrol.
Which word does "it" attend to? One query, three keys, d_k = 2.
Q 1×2 · K 3×2 · V 3×2 · 1 head · d_k = 2 · d_v = 2 · float64
scale = 1/√d_k = 1/√2 = 0.7071
mask: none
rows are queries, columns are keys

scaled = scores · 0.7071 (1/√2)
╭────┬──────────┬─────────┬────────╮
│    │ mechanic │ scooter │ petrol │
├────┼──────────┼─────────┼────────┤
│ it │   0.0000 │  2.8284 │ 1.4142 │
╰────┴──────────┴─────────┴────────╯

weights = softmax(scaled) over keys
╭────┬──────────┬─────────┬────────┬────────┬────────╮
│    │ mechanic │ scooter │ petrol │    sum │    lse │
├────┼──────────┼─────────┼────────┼────────┼────────┤
│ it │   0.0454 │  0.7679 │ 0.1867 │ 1.0000 │ 3.0925 │
╰────┴──────────┴─────────┴────────┴────────┴────────╯

output = weights V
╭────┬────────┬────────╮
│    │      0 │      1 │
├────┼────────┼────────┤
│ it │ 0.2775 │ 1.3491 │
╰────┴────────┴────────╯
"""


def test_masked_stage_shows_minus_infinity_and_states_conventions():
    doc, _ = read_document(str(SAMPLES / "causal.json"))
    text = rendered(doc, ("masked",))
    assert "mask: causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (top-left" in text
    assert "rows with every key masked: weights and output 0 (as PyTorch SDPA)" in text
    assert "│ the  │ 0.7071 │      −∞ │      −∞ │     −∞ │" in text


def _wide_problem():
    rng = np.random.default_rng(1)
    return {"Q": rng.normal(size=(2, 3)).round(3).tolist(), "K": rng.normal(size=(12, 3)).round(3).tolist(),
            "V": rng.normal(size=(12, 2)).round(3).tolist()}


def test_narrow_console_splits_columns_into_ranges_and_never_cuts_numbers():
    # 12 columns (at most MAX_COLUMNS): split into column ranges on a narrow console, never elided.
    text = rendered(_wide_problem(), ("weights",), width=60)
    assert "weights = softmax(scaled) over keys (columns 0–" in text and "middle elided" not in text
    assert "⋯" not in text and "…" not in text and all(len(line) <= 60 for line in text.splitlines())
    cells = [c.strip() for line in text.splitlines() if line.startswith("│   ") for c in line.split("│")[2:-1]]
    assert cells.count("sum") == 1 and [str(j) for j in range(12)] == [c for c in cells if c.isdigit()]


def test_full_splits_wide_tables_into_column_ranges():
    console = Console(file=io.StringIO(), width=60, color_system=None)
    render(attend(build_problem(_wide_problem())), console, ("weights",), 4, 60, full=True)
    text = console.file.getvalue()
    assert "weights = softmax(scaled) over keys (columns 0–" in text and "⋯" not in text
    assert all(len(line.rstrip()) <= 60 for line in text.splitlines())
    cells = [c.strip() for line in text.splitlines() if line.startswith("│   ") for c in line.split("│")[2:-1]]
    assert cells.count("sum") == 1 and "11" in cells  # every column shown once


def test_big_stages_are_elided_without_building_every_cell(monkeypatch):
    import attncli.render.tables as tables

    calls = []
    monkeypatch.setattr(tables, "number", lambda x, p: calls.append(1) or f"{x:.{p}f}")
    rng = np.random.default_rng(0)
    doc = {name: rng.normal(size=(512, 64)) for name in "QKV"}
    text = rendered(doc, ("scores", "weights"), width=None)
    assert "scores = Q Kᵀ (512×512, middle elided: --full shows all)" in text
    assert "│ ⋮   │" in text and len(calls) < 1000  # not 262,144


def test_precision_and_negative_zero():
    assert number(-0.00001, 4) == "0.0000"
    assert number(-np.inf, 4) == "−∞"  # U+2212
    assert number(2.0 / 3, 2) == "0.67"
    assert number(1.5e300, 2) == "1.50e+300"
    assert "0.045388" in rendered(SCOOTER, ("weights",), precision=6)


def test_multihead_titles_name_heads_and_final_output():
    doc, _ = read_document(str(SAMPLES / "multihead.json"))
    text = rendered(doc, ("inputs", "output"))
    for title in ("X 3×4", "W_O 4×4", "Q · head 0", "V · head 1", "output = weights V · head 1",
                  "concat = heads side by side", "output = concat W_O (final)"):
        assert title in text, title
    assert "projections: Q = X W_Q, W is (d_in × d_out)" in text


def test_a_long_explanation_line_folds_between_terms_on_a_terminal():
    # At 80 columns the terminal broke "sum =" from "22.032079"; the line now folds between the
    # e^x terms and before its note, the continuation indented under the step.
    from attncli.render.explain import explain

    trace = attend(build_problem(SCOOTER))
    for precision, expected in [
        (4, ["  e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321",
             "    (2.82842…, 1.41421… unrounded)"]),
        (6, ["  e^0.000000 = 1.000000   e^2.828427 = 16.918829   e^1.414214 = 4.113250",
             "    sum = 22.032079  (2.8284271…, 1.4142135… unrounded)"]),
    ]:
        console = Console(file=io.StringIO(), width=80, color_system=None)
        render(trace, console, (), precision, 80, explain(trace, [0], [0], precision, "exact"))
        lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
        start = lines.index("Step 3: softmax") + 1
        assert lines[start:start + 2] == expected
        assert max(map(len, lines)) <= 80
    wide = Console(file=io.StringIO(), width=1000, color_system=None)
    render(trace, wide, (), 4, None, explain(trace, [0], [0], 4, "exact"))  # a pipe: nothing folds
    assert "sum = 22.0321  (2.82842…, 1.41421… unrounded)" in wide.file.getvalue()


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("columns", ["0", "1", "5"])
def test_tiny_terminal_widths_still_print(monkeypatch, columns):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a terminal of
    almost no columns still gets tables."""
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
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: the terminal
    width has a floor."""
    monkeypatch.setenv("COLUMNS", "3")
    assert tables.terminal_width() == tables.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "123")
    assert tables.terminal_width() == 123


def _labelled_keys(keys: int) -> dict:
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
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: through a pipe
    the console grows to the widest table: no line is ever cut."""
    monkeypatch.setattr(tables, "UNLIMITED", 120)
    path = problem_file(_labelled_keys(40))
    _assert_every_column_shown(run("compute", path, "--format", "table", "--full", "--stages", "weights"), 40)


def test_marks_tables_wider_than_the_pipe_limit_are_not_cut(run, problem_file, monkeypatch):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: through a pipe
    the marks tables are not cut either."""
    monkeypatch.setattr(tables, "UNLIMITED", 60)
    path = problem_file(dict(_labelled_keys(30), weights=[[0.5] * 30, [0.5] * 30]))
    result = run("check", path, "--format", "table")
    assert result.exit_code == 1, result.stderr
    header = next(line for line in result.stdout.splitlines() if " key0 " in line)
    assert " key29 " in header and header.rstrip().endswith("│")


@pytest.mark.slow
def test_twelve_thousand_keys_with_full_are_not_cut(run, problem_file):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a table of
    12,000 keys with --full is not cut."""
    path = problem_file(_labelled_keys(12_000))
    _assert_every_column_shown(run("compute", path, "--format", "table", "--full", "--stages", "weights"), 12_000)


def test_text_wider_than_the_pipe_limit_is_not_wrapped(run, monkeypatch):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: through a
    pipe, text wider than the limit is not wrapped."""
    monkeypatch.setattr(tables, "UNLIMITED", 20)
    result = run("compute", SAMPLES / "scooter.json", "--format", "table", "--stages", "weights")
    assert "The mechanic fixed the scooter because it was leaking petrol.\n" in result.stdout


def test_a_table_too_wide_for_the_terminal_is_not_squeezed_to_nothing(monkeypatch):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: on a terminal,
    a table that cannot fit even at its narrowest is printed whole (the terminal wraps its lines)
    rather than squeezed to empty cells."""
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
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a label wider
    than the terminal is not cut."""
    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem

    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    label = "a query label much longer than the terminal is wide, " * 2 + "end"
    tables.print_tables(attend(build_problem(dict(SCOOTER, query_labels=[label]))), ["weights"])
    assert label in terminal.getvalue() and "0.0454" in terminal.getvalue()


# d_Q's and d_K's titles for a problem whose scores are by K_rope, K_normed (grads.title): every view says them.
GRADIENT_TITLES = [
    ("rope.json", (), "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹)",
     "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹)"),
    ("qk_norm.json", (), "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹), back through q_norm",
     "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹), back through k_norm"),
    ("qk_norm.json", ("rope",), "d_Q = scale · d_scores K_normed, back through q_norm",
     "d_K = scale · d_scoresᵀ Q_normed, back through k_norm"),
]


def backward_problem(sample: str, without=()) -> dict:
    """A sample with dO = ones (and without the keys `without`)."""
    doc, _ = read_document(str(SAMPLES / sample))
    return {key: value for key, value in doc.items() if key not in without} | {"dO": "ones"}


@pytest.mark.parametrize("sample, without, d_Q, d_K", GRADIENT_TITLES)
def test_the_gradient_tables_are_titled_by_what_the_scores_read(sample, without, d_Q, d_K):
    doc = backward_problem(sample, without)
    text = rendered(doc, ("d_Q", "d_K"), width=300)
    titles = [line for line in text.splitlines() if line.startswith(("d_Q", "d_K"))]
    heads = build_problem(doc).heads
    heads = [f" · head {h}" for h in range(heads)] if heads > 1 else [""]
    assert titles == [title + head for head in heads for title in (d_Q, d_K)]
