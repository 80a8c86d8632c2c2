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
