"""Narrow terminals: tables and heatmaps split into column ranges before anything is elided, and
the heatmap's masked cells have their own mark (issue 19, "Terminal views"). Rendered on
fixed-width colourless consoles (and a colour one for the styles): exact text."""

import io
import json
import sys

import numpy as np
import pytest
from rich.console import Console
from rich.style import Style

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render.heatmap import MASKED, MASKED_LEGEND, heatmap, masked_cells, print_heatmaps
from attncli.render.tables import print_tables, render
from attncli.render.text import MAX_COLUMNS, RANGES
from tests.conftest import SAMPLES

WINDOW = json.loads((SAMPLES / "window.json").read_text(encoding="utf-8"))
WORDS = WINDOW["key_labels"]  # a cat sat on my mat


def _trace(doc):
    return attend(build_problem(doc))


def _rendered(doc, stages, width, full=False):
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render(_trace(doc), console, stages, 4, width, full=full)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def _header_cells(lines):
    """The column labels of every table, in order (the header row of each box)."""
    out = []
    for before, line in zip(lines, lines[1:]):
        if before.startswith("╭"):
            out += [c.strip() for c in line.split("│")[2:-1]]
    return out


def _wide(n_keys, n_queries=2, seed=0):
    rng = np.random.default_rng(seed)
    return {"Q": rng.normal(size=(n_queries, 2)).round(2).tolist(), "K": rng.normal(size=(n_keys, 2)).round(2).tolist(),
            "V": rng.normal(size=(n_keys, 1)).round(2).tolist()}


# --- tables ----------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [40, 50, 60, 80, 100])
def test_the_window_sample_shows_every_key_at_every_width(width):
    lines = _rendered(WINDOW, ("weights",), width)
    assert all(len(line) <= width for line in lines), width
    assert [c for c in _header_cells(lines) if c not in ("sum", "lse")] == WORDS  # each once, in order
    assert "⋯" not in "\n".join(lines) and "middle elided" not in "\n".join(lines)
    assert "0.4978" in "\n".join(lines) and "0.0850" in "\n".join(lines)  # the band's last row, whole


def test_the_window_sample_on_60_columns_exactly():
    lines = _rendered(WINDOW, ("weights",), 60)
    start = lines.index("weights = softmax(masked) over keys (columns a–my)")
    assert lines[start:start + 4] == [
        "weights = softmax(masked) over keys (columns a–my)",
        "╭─────┬────────┬────────┬────────┬────────┬────────╮",
        "│     │      a │    cat │    sat │     on │     my │",
        "├─────┼────────┼────────┼────────┼────────┼────────┤"]
    assert "weights = softmax(masked) over keys (columns mat–lse)" in lines
    assert "│ mat │ 0.4978 │ 1.0000 │ 1.5814 │" in lines


def test_columns_past_max_columns_that_fit_in_three_ranges_are_all_shown():
    doc = _wide(MAX_COLUMNS + 4)  # 20 keys: elided through a pipe, three ranges on 100 columns
    lines = _rendered(doc, ("weights",), 100)
    text = "\n".join(lines)
    assert "middle elided" not in text and "⋯" not in text
    assert [c for c in _header_cells(lines) if c.isdigit()] == [str(j) for j in range(20)]
    titles = [line for line in lines if line.startswith("weights = ")]
    assert 1 < len(titles) <= RANGES and titles[0].endswith("(columns 0–9)")
    assert all(len(line) <= 100 for line in lines)


def test_more_than_three_ranges_elide_the_middle_and_say_how_to_see_the_rest():
    doc = _wide(40)
    lines = _rendered(doc, ("weights",), 60)
    text = "\n".join(lines)
    flat = " ".join(text.split())  # the long title wraps on 60 columns
    assert "weights = softmax(scaled) over keys (2×40, middle elided: --full shows all) (columns 0–" in flat
    shown = [c for c in _header_cells(lines) if c not in ("sum", "lse")]
    assert shown == [str(j) for j in range(8)] + ["⋯"] + [str(j) for j in range(32, 40)]
    assert all(len(line) <= 60 for line in lines)
    full = _rendered(doc, ("weights",), 60, full=True)
    assert [c for c in _header_cells(full) if c.isdigit()] == [str(j) for j in range(40)]


def test_a_pipe_has_no_width_and_elides_as_before():
    console = Console(file=io.StringIO(), width=1000, color_system=None)
    render(_trace(_wide(20)), console, ("weights",), 4, None)
    text = console.file.getvalue()
    assert "(2×20, middle elided: --full shows all)" in text and "(columns" not in text


def test_a_terminal_of_60_columns_through_print_tables(monkeypatch):
    """The CLI's own path: a terminal (isatty) COLUMNS=60 wide, NO_COLOR, TERM=dumb."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    for name, value in (("COLUMNS", "60"), ("LINES", "24"), ("NO_COLOR", "1"), ("TERM", "dumb")):
        monkeypatch.setenv(name, value)
    print_tables(_trace(WINDOW), ("weights", "heatmap"))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert "\x1b" not in out.getvalue() and all(len(line) <= 60 for line in lines)
    assert [c for c in _header_cells(lines) if c not in ("sum", "lse")] == WORDS
    assert "           a      cat      sat       on       my      mat" in lines  # the heatmap's keys


# --- heatmaps --------------------------------------------------------------------------------

def _grid(doc, width=None, full=False, head=0):
    return heatmap(_trace(doc), head, width, full).plain.splitlines()


@pytest.mark.parametrize("width", [40, 45, 50, 60, 100])
def test_the_window_heatmap_shows_every_key_at_every_width(width):
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_heatmaps(_trace(WINDOW), console, width=width)
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
    assert all(len(line) <= width for line in lines)
    keys = [word for line in lines if line.startswith("     ") for word in line.split()]
    assert keys == WORDS and "⋯" not in "\n".join(lines)


def test_the_window_heatmap_on_40_columns_exactly():
    assert _grid(WINDOW, width=40) == [
        "heatmap of weights",
        "(columns a–on)",
        "           a      cat      sat       on",
        "a   ███ 1.00        ×        ×        ×",
        "cat ░░░ 0.33 ▓▓▓ 0.67        ×        ×",
        "sat ░░░ 0.25 ░░░ 0.25 ▒▒▒ 0.50        ×",
        "on         × ░░░ 0.14 ░░░ 0.19 ▓▓▓ 0.67",
        "my         ×        × ░░░ 0.19 ░░░ 0.14",
        "mat        ×        ×        × ▒▒▒ 0.42",
        "",
        "(columns my–mat)",
        "          my      mat",
        "a          ×        ×",
        "cat        ×        ×",
        "sat        ×        ×",
        "on         ×        ×",
        "my  ▓▓▓ 0.67        ×",
        "mat     0.08 ▒▒▒ 0.50"]


def test_a_heatmap_too_wide_for_three_ranges_is_elided_then_split():
    doc = {"Q": [[i % 3, 1] for i in range(30)], "K": [[j % 5, 0] for j in range(40)], "V": [[1] for _ in range(40)]}
    lines = _grid(doc, width=60)
    assert lines[0] == "heatmap of weights (30×40, middle elided: --full shows all)"
    keys = [word for line in lines if line.startswith("   ") for word in line.split()]
    assert keys == [str(j) for j in range(8)] + ["⋯"] + [str(j) for j in range(32, 40)]
    assert all(len(line) <= 60 for line in lines) and lines[1].startswith("(columns 0–")
    # 18 keys fit in three ranges of six on 60 columns: all shown; 19 do not
    some = {"Q": doc["Q"][:4], "K": doc["K"][:18], "V": doc["V"][:18]}
    keys = [word for line in _grid(some, width=60) if line.startswith("   ") for word in line.split()]
    assert keys == [str(j) for j in range(18)] and "middle elided" not in _grid(some, width=60)[0]
    assert "middle elided" in _grid(some)[0]  # a pipe: no width, at most MAX_COLUMNS
    more = {"Q": doc["Q"][:4], "K": doc["K"][:19], "V": doc["V"][:19]}
    assert "middle elided" in _grid(more, width=60)[0]


def test_masked_cells_differ_from_a_small_visible_weight_without_colour():
    lines = _grid(WINDOW)
    mat = lines[-1].split()
    assert mat == ["mat", MASKED, MASKED, MASKED, "▒▒▒", "0.42", "0.08", "▒▒▒", "0.50"]
    console = Console(file=io.StringIO(), width=100, color_system=None)
    print_heatmaps(_trace(WINDOW), console)
    assert MASKED_LEGEND in console.file.getvalue()
    # no mask: no mark and no legend line for it
    plain = Console(file=io.StringIO(), width=100, color_system=None)
    print_heatmaps(_trace({k: WINDOW[k] for k in "QKV"}), plain)
    assert MASKED not in plain.file.getvalue() and MASKED_LEGEND not in plain.file.getvalue()


def test_masked_cells_have_their_own_colour():
    grid = heatmap(_trace(WINDOW), 0)
    styles = {}
    for span in grid.spans:
        styles.setdefault(grid.plain[span.start:span.end].strip(), Style.parse(str(span.style)))
    masked, small = styles[MASKED], styles["0.08"]
    assert masked != small and masked.bgcolor is None and small.bgcolor is not None
    assert masked.color is not None and masked.color != small.color


def test_a_minus_infinity_bias_is_masked_and_a_uniform_row_shows_its_weights():
    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "bias": [[0, "-inf"], ["-inf", "-inf"]],
           "masked_rows": "uniform"}
    trace = _trace(doc)
    assert masked_cells(trace, 0).tolist() == [[False, True], [False, False]]
    lines = heatmap(trace, 0).plain.splitlines()
    assert lines[2].split() == ["0", "███", "1.00", MASKED] and lines[3].split() == ["1", "▒▒▒", "0.50", "▒▒▒", "0.50"]
    zero = _trace({**doc, "masked_rows": "zero"})
    assert masked_cells(zero, 0).tolist() == [[False, True], [True, True]]


def test_a_table_exactly_as_wide_as_the_terminal_is_not_split():
    """Mutation: `column_chunks` splits when a run would reach the width (`>=`), not pass it: a
    table that fits exactly is cut into two ranges."""
    from attncli.render.tables import column_chunks

    # the label column takes 2 + 4 characters, each column its width + 3: 6 + 8 + 8 = 22
    assert column_chunks([5, 5], 2, 22) == [[0, 1]]
    assert column_chunks([5, 5], 2, 21) == [[0], [1]]


def _render(doc, width, full=False):
    from rich.console import Console

    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem
    from attncli.render.tables import render

    console = Console(file=__import__("io").StringIO(), width=width, color_system=None)
    render(attend(build_problem(doc)), console, ("weights",), 4, width, full=full)
    return console.file.getvalue()


def test_a_narrow_terminal_splits_a_small_table_and_shows_every_number():
    """Found by a user trial: a narrow terminal splits a table into column ranges, eliding nothing."""
    doc = json.loads((SAMPLES / "causal.json").read_text(encoding="utf-8"))
    text = _render(doc, 40)
    assert "⋯" not in text and "middle elided" not in text
    assert "(columns the–" in text and all(len(line.rstrip()) <= 40 for line in text.splitlines())
    assert "0.4802" in text and "0.5035" in text  # every weight is there


def test_a_table_past_max_columns_is_elided_then_split():
    """Found by a user trial: a table is elided only past MAX_COLUMNS, then split."""
    rng = np.random.default_rng(0)
    doc = {"Q": rng.normal(size=(2, 3)).tolist(), "K": rng.normal(size=(40, 3)).tolist(),
           "V": rng.normal(size=(40, 2)).tolist()}
    text = _render(doc, 60)
    assert "(2×40, middle elided:" in text and "⋯" in text
    assert "(columns 0–" in text and "(column lse)" in text and all(len(line.rstrip()) <= 60 for line in text.splitlines())
