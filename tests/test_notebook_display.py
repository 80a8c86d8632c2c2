"""Issue 16: in a Jupyter kernel a trace or marks display once. nbclient and a kernel are not
installed here, so the test drives rich's own Jupyter hooks: rich, in a notebook, shows every
print of a Console as a separate output through `rich.jupyter.display`; counting those calls
counts the outputs a cell would get."""

import io

import pytest
import rich.console
import rich.jupyter
from conftest import SCOOTER
from rich.console import Console

from attncli import attend, check, view


@pytest.fixture
def outputs(monkeypatch):
    shown = []
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)  # as inside a kernel
    monkeypatch.setattr(rich.jupyter, "display", lambda segments, text: shown.append(text))
    return shown


def test_the_html_of_a_trace_and_of_marks_displays_nothing_itself(outputs):
    trace = attend(**SCOOTER)
    html = view(trace)._repr_html_()
    assert outputs == [] and "<pre" in html and "weights" in html
    marks = check({"weights": [[0.05, 0.77, 0.19]]}, trace)
    assert "all correct" in marks._repr_html_() and outputs == []


def test_rich_print_in_a_notebook_is_one_output(outputs):
    trace = attend(**SCOOTER)
    console = Console(file=io.StringIO(), width=100)  # rich.print's console, in a kernel
    console.print(view(trace))
    assert len(outputs) == 1 and "weights" in outputs[0]
    console.print(check({"weights": [[0.05, 0.77, 0.19]]}, trace))
    assert len(outputs) == 2


MULTI = {"X": [[1, 0, 1, 0], [0, 2, 0, 1], [1, 1, 1, 1]], "W_Q": [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1]],
         "W_K": [[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1], [1, 0, 1, 0]], "W_V": [[1, 0, 0, 0], [0, 1, 0, 0],
                                                                                [0, 0, 1, 0], [0, 0, 0, 1]],
         "heads": 2, "mask": "causal"}


def multi_marks():
    trace = attend(**MULTI)
    answers = {"heads": [{"weights": [["0.5", "0", "0"], ["0.0142", "0.9858", "0"], [0.1, 0.2, 0.7]],
                          "output": trace.output[0].round(4).tolist()} for _ in range(2)]}
    return check(answers, trace)


def test_the_marks_in_a_notebook_are_html_tables_not_drawn_borders(outputs):
    html = multi_marks()._repr_html_()
    assert html.count("<table") == 4 and "mk-wrong" in html and "mk-carried" in html
    assert not any(ch in html for ch in "╭│╰─"), "drawn borders go ragged in a notebook's font"


def test_the_marks_at_100_columns_have_straight_borders():
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(multi_marks())
    lines = console.file.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    table = []
    for line in lines + [""]:
        if line and line[0] in "╭│├╰":
            table.append(line)
        elif table:
            assert len({len(row) for row in table}) == 1, table  # every row of a table as wide as its border
            table = []
