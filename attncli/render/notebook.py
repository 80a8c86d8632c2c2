"""Views as renderables: a trace or marks in Jupyter and in rich, as the terminal's tables.

`TraceView(trace)` and `MarksView(trace, marks)` wrap what they show and render themselves when
asked (`__rich_console__` for `rich.print`, `_repr_html_` for Jupyter), as rich's own renderables
do; the core never imports a view. `attncli.view(...)` (the Python API) makes the right one.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from attncli.base.errors import plural
from attncli.marking.grading import Rule
from attncli.problem.trace import Trace
from attncli.render.marks import print_marks
from attncli.render.page import notebook
from attncli.render.page_marks import marks_notebook
from attncli.render.tables import render
from attncli.stages.table import names

HTML_WIDTH = 120  # characters; a notebook cell has no terminal width


def rendered(view, console: Console, width: int) -> Text:
    """A printing view (a function of a console) as one rich renderable at `width`."""
    # force_jupyter=False: in a notebook rich would otherwise display every print of the capture
    # as its own output (a table in 27 fragments); the capture only records, its caller displays once.
    capture = Console(file=io.StringIO(), width=width, color_system=console.color_system and "truecolor",
                      force_terminal=console.is_terminal, highlight=False, force_jupyter=False)
    view(capture)
    return Text.from_ansi(capture.file.getvalue())


def html(view) -> str:
    """A printing view recorded as HTML with inline styles (notebooks need no CSS)."""
    capture = Console(file=io.StringIO(), record=True, width=HTML_WIDTH, highlight=False, force_jupyter=False)
    view(capture)
    return capture.export_html(inline_styles=True, code_format="<pre style=\"font-family:monospace\">{code}</pre>")


class _View:
    """A view that prints to a console, shown in rich and Jupyter."""

    def print(self, console: Console) -> None:
        raise NotImplementedError

    def __rich_console__(self, console, options):
        yield rendered(self.print, console, options.max_width)

    def _repr_html_(self) -> str:
        return html(self.print)


class TraceView(_View):
    """A trace as `attn compute`'s tables: the header, the inputs and every stage, per head."""

    def __init__(self, trace: Trace, precision: int = 4):
        self.trace, self.precision = trace, precision

    def print(self, console: Console) -> None:
        render(self.trace, console, ("inputs",) + names(), self.precision, console.width)

    def _repr_html_(self) -> str:
        """The explorer page's tables (render/page.py, one code path), without its script."""
        return notebook(self.trace, ("inputs",) + names(), self.precision)

    def __repr__(self) -> str:
        return f"<TraceView of {plural(self.trace.problem.heads, 'head')}, {plural(self.trace.problem.lq, 'query')}>"


class MarksView(_View):
    """Marks as `attn check`'s tables: given against expected, ✓ ✗ ↪ per cell."""

    def __init__(self, trace: Trace, marks: dict, precision: int = 4, rule: Rule = Rule()):
        self.trace, self.marks, self.precision, self.rule = trace, dict(marks), precision, rule

    def print(self, console: Console) -> None:
        print_marks(self.trace, self.marks, console, self.precision, self.rule)

    def _repr_html_(self) -> str:
        """The marks page's tables (render/page_marks.py), without its script."""
        return marks_notebook(self.trace, self.marks, self.precision, self.rule)
