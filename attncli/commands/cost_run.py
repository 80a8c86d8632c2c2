"""`attn compute --cost`'s work, once compute.py has planned it (and refused the options it would
ignore): read the problem, count (attncli/compute/cost.py: no attention is computed), read back what the
document holds, and show the counts as tables, JSON or Markdown."""

from types import SimpleNamespace
from typing import Callable

from attncli.base.errors import AttnError
from attncli.commands.edge import flag
from attncli.compute import cost
from attncli.compute.attention import scale_of
from attncli.document.readback import counts_only, has_results, verify, verify_counts
from attncli.document.schema import check_output
from attncli.document.writing import problem_dict
from attncli.render import out
from attncli.render.cost import CostView, markdown
from attncli.render.json import dumps


def sram(text: str | None) -> int:
    """--sram's bytes (default 192 KiB)."""
    try:
        return cost.DEFAULT_SRAM if text is None else cost.parse_size(text)
    except AttnError as error:
        raise error.at("--sram")


def run(read: tuple, size: int, plan: SimpleNamespace, o: SimpleNamespace, trace: Callable) -> None:
    """Count and show. `read`: (problem, source, document, the options that changed it), as
    compute_run.read gives them; `trace()` computes the output alone, needed only to read back a
    document that holds stages or outputs."""
    problem, source, doc, options = read
    try:
        found = cost.cost(problem, size)
        if has_results(doc):
            if counts_only(doc):
                verify_counts(doc, problem, options)
            else:
                verify(doc, trace(), flag, options)
    except AttnError as error:
        raise error.at(source) if source else error
    if o.output_file:
        _write_file(o.output_file, plan.suffix, lambda: _text(plan.view, problem, found))
    elif plan.view == "table":
        # Imported here, for start-up: only the table view loads rich.
        from attncli.render.tables import make_console

        make_console().print(CostView(problem, found))
    else:
        out.write_all(_text(plan.view, problem, found))


def document(problem, found: cost.Cost) -> dict:
    """The JSON document: the problem's keys (it reads back as the problem), `heads` as a list of
    empty per-head objects (no stage is computed), and `cost`."""
    shape = found.shape
    doc = problem_dict(problem, scale_of(problem, shape.d_k), shape.d_k, shape.d_v)
    doc["heads"] = [{} for _ in range(problem.heads)]
    doc["cost"] = cost.to_dict(found)
    return check_output(doc)


def _text(view: str, problem, found: cost.Cost) -> str:
    return markdown(problem, found) if view == "markdown" else dumps(document(problem, found)) + "\n"


def _write_file(path: str, suffix: str, text: Callable) -> None:
    # Imported here, for start-up: only --output needs the careful writer.
    from attncli.render.files import Interrupted, write_output
    from attncli.render.target import OutputError

    try:
        write_output(None, path, suffix, text)
    except OutputError as error:
        raise error.at("--output")
    except Interrupted as stop:
        stop.die()
