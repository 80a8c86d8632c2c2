"""The output formats, one record each, in one registry that every path reads.

A `Format` says what `--format NAME` (or `--output FILE.SUFFIX`) writes: the suffixes that choose
it, what it can hold beside the stages (the tiles, the --cost counts, the heatmap, the
explanation, the backward pass, several layers of a captured document), which stages (every one,
one, or the final output alone), whether it is binary, how user text is escaped in it
(render/escapes.py), what it builds beside the arrays (for the memory guard), and its writers: one
for a trace, one for --cost's counts. Read by: Typer's `--format` choices (`names`,
commands/edge.formats), `--output`'s suffixes (render/target.py, render/files.py), `attn compute`'s
plan, which refuses from the options alone any option the format cannot hold (commands/compute.py;
several layers, once the document is read: commands/compute_layers.py), the memory guard and the
writers (commands/compute_run.render, commands/cost_run, commands/compute_layers), and
tests/test_formats.py, which adds a throwaway `rst` format and runs every path on it.

A new format is one record here and its writer (a view in render/). Light: no numpy, no rich (the
names are read at start-up); each writer imports its view when it runs. The records are
NamedTuples, not dataclasses, which take several times as long to make at every start-up.
"""

from typing import Callable, NamedTuple, Optional

from attncli.base.errors import visible
from attncli.render import escapes

# What a format may hold beside the stages, and how the refusals say it.
CONTENTS = {"tiles": "the tiles", "cost": "the counts", "heatmap": "the heatmap",
            "explanation": "the explanation", "backward": "the backward pass",
            "layers": "several layers"}  # a captured document's (commands/compute_layers.py)
# every stage; one stage of the table (CSV); the final output alone (.npy); the weights alone, computed
# whatever --stages says (the SVG picture: of them)
STAGES = ("every", "one", "output", "weights")
BUILDS = ("json", "text", "table", "nothing")  # beside the arrays, for the memory guard (compute/limits.py)


class Format(NamedTuple):
    """One output format. `trace(view)` returns a text format's document (str), writes a binary
    one's arrays (`trace(view, handle)`), or draws a terminal one on stdout (returns None);
    `cost(problem, found)` likewise for --cost's counts (None: it cannot hold them). `escape`:
    user text as it stands in the medium (None for a binary format)."""

    name: str
    help: str  # what it is, in a few words (--format's and --output's help)
    suffixes: tuple = ()  # --output FILE suffixes written in it, lower case
    holds: frozenset = frozenset()  # of CONTENTS
    stages: str = "every"  # of STAGES
    binary: bool = False
    terminal: bool = False  # drawn on the terminal (rich): never a file
    escape: Optional[Callable[[str], str]] = None
    builds: str = "text"  # of BUILDS
    trace: Optional[Callable] = None  # None: not a view of a trace (attn check's gradescope)
    cost: Optional[Callable] = None

    def can(self, content: str) -> bool:
        """Can it hold `content` (one of CONTENTS; "cost" asks for a cost writer)?"""
        if content not in CONTENTS:
            raise ValueError(f"{content!r} is none of {', '.join(CONTENTS)}")
        return self.cost is not None if content == "cost" else content in self.holds


class View(NamedTuple):
    """What a writer reads: the trace and the choices that shape its view."""

    trace: object
    shown: tuple
    precision: int = 4
    decimals: Optional[int] = None  # --round
    explanation: Optional[list] = None
    tiled: object = None  # attncli.compute.tiles.Tiles, with --tiles
    full: bool = False
    heads: Optional[list] = None  # --head: the heads an explanation or heatmap shows
    source: Optional[str] = None  # the problem's file name (the page's title and commands)
    carry: str = "exact"
    extra: Optional[dict] = None  # keys beside the trace's in JSON (a captured layer's agreement)
    say: Optional[Callable] = None  # the CLI's words for the warnings' advice
    picked: tuple = ((), ())  # the query and key positions --query and --key name: never elided
    stages_given: bool = True  # --stages was given (else a page too big for every stage shows the weights)
    views: Optional[tuple] = None  # a captured layer's (number, word ids): the page adds its views (page_views.py)


# The writers. Each imports its view when it runs, for start-up: the views load numpy (and the
# tables rich), which `attn --version`, `--help` and the plan never need.

def _table(view: View) -> None:
    # Imported here, for start-up (see above): the tables need rich.
    from attncli.render.tables import print_tables

    print_tables(view.trace, view.shown, view.precision, view.explanation, view.heads, view.full, view.tiled,
                 view.picked)


def _json(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.json import document

    return document(view.trace, view.shown, view.decimals, view.explanation, view.tiled, say=view.say,
                    extra=view.extra)


def _markdown(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.export import markdown
    from attncli.render.text import header_lines

    return markdown(view.trace, view.shown, view.precision, header_lines(view.trace, view.precision), view.explanation)


def _latex(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.export import latex
    from attncli.render.text import header_lines

    return latex(view.trace, view.shown, view.precision, header_lines(view.trace, view.precision), view.explanation)


def _csv(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.export import csv_stage

    return csv_stage(view.trace, view.shown[0], view.decimals)


def _html(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.page import page

    return page(view.trace, view.shown, view.precision, view.full, view.tiled, view.source, view.explanation,
                view.carry, view.picked, view.stages_given, view.views)


def _svg(view: View) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.svg import heatmap_svg

    return heatmap_svg(view.trace, view.heads, view.full, view.picked)


def _npy(view: View, handle) -> None:
    # Imported here, for start-up (see above).
    from attncli.render.arrays import save_npy

    save_npy(view.trace, handle)


def _npz(view: View, handle) -> None:
    # Imported here, for start-up (see above).
    from attncli.render.arrays import save_npz

    save_npz(view.trace, handle)


def _table_cost(problem, found) -> None:
    # Imported here, for start-up (see above): the tables need rich.
    from attncli.render.cost import CostView
    from attncli.render.tables import make_console

    make_console().print(CostView(problem, found))


def _json_cost(problem, found) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.cost import document

    return escapes.dumps(document(problem, found)) + "\n"


def _markdown_cost(problem, found) -> str:
    # Imported here, for start-up (see above).
    from attncli.render.cost import markdown

    return markdown(problem, found)


FORMATS: tuple[Format, ...] = (
    Format("table", "tables on the terminal", terminal=True, escape=visible, builds="table", trace=_table,
           cost=_table_cost, holds=frozenset({"tiles", "heatmap", "explanation", "backward", "layers"})),
    Format("json", "the JSON document", (".json",), escape=escapes.json_string, builds="json",
           trace=_json, cost=_json_cost, holds=frozenset({"tiles", "explanation", "backward", "layers"})),
    Format("markdown", "write-up tables", (".md",), escape=escapes.md, trace=_markdown, cost=_markdown_cost,
           holds=frozenset({"explanation", "backward"})),
    Format("latex", "write-up tables", (".tex",), escape=escapes.tex, trace=_latex,
           holds=frozenset({"explanation", "backward"})),
    Format("csv", "one stage", (".csv",), stages="one", escape=escapes.csv_text, trace=_csv),
    Format("html", "the explorer page (docs/explorer.md)", (".html",), escape=escapes.html_text, builds="nothing",
           trace=_html, holds=frozenset({"tiles", "heatmap", "explanation", "backward", "layers"})),
    Format("svg", "the weights as a picture, each head's heatmap in a grid with a colour scale (for a paper)",
           (".svg",), stages="weights", escape=escapes.html_text, trace=_svg, holds=frozenset({"heatmap"})),
    Format("gradescope", "Gradescope's autograder results.json (attn check)", escape=escapes.json_string),
    Format("npy", "the final output", (".npy",), stages="output", binary=True, builds="nothing", trace=_npy),
    Format("npz", "every stage", (".npz",), binary=True, builds="nothing", trace=_npz,
           holds=frozenset({"backward"})),
)


def names() -> tuple[str, ...]:
    """Every format's name, in the registry's order (the order every command offers them in)."""
    return tuple(f.name for f in FORMATS)


def get(name: str) -> Format:
    return next(f for f in FORMATS if f.name == name)


def views() -> tuple[Format, ...]:
    """The formats `attn compute --format` offers: views of a trace, text or terminal (a binary
    file is chosen by its suffix)."""
    return tuple(f for f in FORMATS if f.trace is not None and not f.binary)


def by_suffix(suffix: str) -> Format | None:
    """The format an --output FILE's suffix (lower case, with its dot) writes, or None."""
    return next((f for f in FORMATS if suffix in f.suffixes), None)


def suffixes() -> tuple[str, ...]:
    """Every suffix --output writes, text formats first (the registry's order)."""
    return tuple(s for f in FORMATS for s in f.suffixes)


def holding(content: str) -> tuple[Format, ...]:
    """The formats of a trace that can hold `content` (for a refusal's advice)."""
    return tuple(f for f in FORMATS if f.trace is not None and f.can(content))


def listed(words: list[str]) -> str:
    """a, b or c."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
