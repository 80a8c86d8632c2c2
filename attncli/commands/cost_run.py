"""`attn compute --cost`'s work, once compute.py has planned it (and refused the options it would
ignore, and the formats that cannot hold the counts): read the problem, count
(attncli/compute/cost.py: no attention is computed), read back what the document holds, and show
the counts through the format's `cost` writer (attncli/render/formats.py)."""

from types import SimpleNamespace
from typing import Callable

from attncli.base.errors import AttnError
from attncli.commands.edge import flag, write_file
from attncli.compute import cost
from attncli.document.readback import counts_only, verify, verify_counts
from attncli.document.schema import has_results
from attncli.render import out


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
                verify_counts(doc, problem, tuple(options.values()))
            else:
                verify(doc, trace(), flag, tuple(options.values()))
    except AttnError as error:
        raise error.at(source) if source else error
    if plan.format.terminal:
        plan.format.cost(problem, found)
        return
    text = plan.format.cost(problem, found)
    if o.output_file:
        write_file(o.output_file, plan.suffix, text)
    else:
        out.write_all(text)
