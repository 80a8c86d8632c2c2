"""A trace or marks in Jupyter and in rich: the same tables as the terminal, captured.

`rendered` turns a printing view into one rich renderable at the caller's width; `html` records it
for `_repr_html_` (inline styles, so notebooks need no CSS).
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

HTML_WIDTH = 120  # characters; a notebook cell has no terminal width


def rendered(view, console: Console, width: int) -> Text:
    capture = Console(file=io.StringIO(), width=width, color_system=console.color_system and "truecolor",
                      force_terminal=console.is_terminal, highlight=False)
    view(capture)
    return Text.from_ansi(capture.file.getvalue())


def html(view) -> str:
    capture = Console(file=io.StringIO(), record=True, width=HTML_WIDTH, highlight=False)
    view(capture)
    return capture.export_html(inline_styles=True, code_format="<pre style=\"font-family:monospace\">{code}</pre>")


def print_trace(trace, console: Console) -> None:
    from attncli.render.tables import render
    from attncli.stages import names

    render(trace, console, ("inputs",) + names(), 4, console.width)
