"""`attn compute` of a document of several layers (attn capture --layer all; attncli/document/layers.py).
One layer chosen (`--layer 3`) is an ordinary document: compute_run.py computes it, every view and
option as for any problem. Several chosen (`--layer 3,7-9`, or none named: all) come here, from
the one reading of the file: each layer is computed in turn (`computed`, one `LayerRun` each, for
views that span layers) and shown in turn, its header with its title, its agreement line after
it, as tables; or as one JSON document, `{"attncli", "title", "model", "layers": [each layer's
document as attn compute writes one]}`, which reads back as a document of several layers; or as
one page (render/page_layers.py: the model view, each head's weights, head view and q·k view), built
as each layer is computed. A format whose record does not hold "layers" (render/formats.py: a text
export, an .npy or .npz file), --explain beside JSON or the page, and --cost show one layer: they
are refused, naming --layer (and the page's --tiles and --stages output, which compute no weights;
its --dtype other than float64, --do, --full and several --query values, each by name; and a page too
big, counted from the shapes before any layer is computed). The page's layers go in the model's order.
Exit status as for one layer: 1 when any layer differs from its model.
"""

from __future__ import annotations

import sys
from typing import Iterator, NamedTuple

from attncli.base.errors import AttnError, InputError, one_line
from attncli.commands import compute_run, spec
from attncli.commands import option_text as opt
from attncli.commands.compute_options import OPTIONS, PARTS
from attncli.commands.edge import flag, warning, write_file
from attncli.document import agreement, layers
from attncli.document.loading import overlay
from attncli.document.reading import build_problem
from attncli.render import formats, out
from attncli.render.formats import View
from attncli.render.json import dumps


class LayerRun(NamedTuple):
    """One layer of the document, computed: its number (model.layer), its document (the options
    over it), its trace (and tile trace), the stages shown and its agreement with its model."""

    number: int
    doc: dict
    trace: object
    tiled: object
    shown: tuple[str, ...]
    agreed: object


def run(o, plan) -> None:
    """compute_run.run, and each layer in turn when the document holds several."""
    try:
        compute_run.run(o, plan)
    except layers.SeveralLayers as several:
        _refuse(o, plan, several)
        if plan.format.name == "html":  # the page's rows of layers go down the model, whatever order --layer typed
            numbers = layers.numbers(several.doc)
            several.places = sorted(several.places, key=lambda place: numbers[place])
        runs = computed(several, o, plan)
        if plan.format.terminal:
            differs = _tables(runs, o, plan)
        else:
            differs = (_page if plan.format.name == "html" else _json)(runs, several, o, plan)
        if differs:
            sys.exit(1)  # as diff: some layer and its model differ


def _refuse(o, plan, several: layers.SeveralLayers) -> None:
    """What shows one layer, refused before any is computed."""
    count = f"{len(several.places)} layers"
    one = f"choose one with --layer {layers.numbers(several.doc)[several.places[0]]}"
    if o.cost:
        raise InputError(f"counts one problem, and the document holds {count}; {one}", "--cost")
    if not plan.format.can("layers"):
        what = f"an {plan.suffix} file" if plan.format.binary else f"--format {plan.format.name}"
        ways = formats.listed([f.name for f in formats.holding("layers")])
        raise InputError(f"{what} holds one layer, and the document holds {count}; {one}, or use --format {ways}",
                         "--output" if plan.suffix else "--format")
    if plan.format.name == "html" and (plan.output_only or plan.tile_sizes is not None):
        flag_ = "--tiles" if plan.tile_sizes else "--stages"  # neither computes the weights the views draw
        said = "--tiles" if plan.tile_sizes else "--stages output"
        raise InputError(f"the page of {count} shows their weights, which {said} does not compute; drop it, or {one}",
                         flag_)
    if plan.format.name == "html":
        _refuse_page(o, plan, several, count, one)
    if o.explain and not plan.format.terminal:
        beside = "the page" if plan.format.name == "html" else "JSON"
        raise InputError(f"beside {beside} explains one layer, and the document holds {count}; {one}, or use tables",
                         "--explain")


def _refuse_page(o, plan, several: layers.SeveralLayers, count: str, one: str) -> None:
    """What the page of several layers does not show, refused by name: another dtype (it derives
    weights in float64 and compares them to 1e-12), the backward pass, --full (it draws every row),
    several queries (it ranks the heads for one, as attn heads does for each); and a page too big,
    counted from the document's shapes before any layer is computed."""
    # Imported here, for start-up: only the page needs it.
    from attncli.render.page_views import MOST_NUMBERS

    unused = [("--dtype", o.dtype not in (None, "float64"), f"computes in float64 (and derives its weights so), "
               f"not --dtype {o.dtype}; drop it"),
              ("--do", o.do is not None, "draws the forward pass, not the backward; drop --do"),
              ("--full", o.full, "builds every row and column of the table opened; drop --full")]
    for flag_, given, why in unused:
        if given:
            raise InputError(f"the page of {count} {why}, or {one}", flag_)
    matrices, settings, origin = spec.settings(OPTIONS, o, PARTS)
    numbers, total = layers.numbers(several.doc), 0
    for place in several.places:
        doc, found = overlay(layers.layer_document(several.doc, place), matrices, settings, several.source)
        problem = build_problem(doc, found | origin, several.source)
        if place == several.places[0] and o.query:
            word_ids = doc.get("word_ids")
            queries = opt.picks(o.query, problem.query_labels, problem.lq, "--query",
                                None if word_ids is None or problem.lq != problem.lk else list(word_ids))
            if len(queries) > 1:
                names = ", ".join(name for name, _ in queries)
                raise InputError(f"the page ranks the heads for one query, and it names {len(queries)} ({names}); "
                                 "name one, or rank them all with attn heads", "--query")
        q, kv = problem.inputs.get("Q", problem.inputs.get("W_Q")), problem.kv_heads or problem.heads
        d_k = 0 if q is None else q.shape[-1] if q.ndim == 3 else q.shape[-1] // problem.heads
        total += problem.heads * problem.lq * (3 * problem.lk + d_k) + kv * problem.lk * d_k
        if total > MOST_NUMBERS:
            raise InputError(f"the page would embed more than {MOST_NUMBERS:,} numbers by layer "
                             f"{numbers[place]} ({total:,}), more than a page opens quickly; choose fewer layers",
                             "--layer")


def computed(several: layers.SeveralLayers, o, plan) -> Iterator[LayerRun]:
    """Each chosen layer computed, in the order chosen, as compute_run computes one document."""
    matrices, settings, origin = spec.settings(OPTIONS, o, PARTS)
    numbers = layers.numbers(several.doc)
    source = several.source
    for place in several.places:
        doc, found = overlay(layers.layer_document(several.doc, place), matrices, settings, source)
        found |= origin
        problem = build_problem(doc, found | {"invert_mask": "--invert-mask"}, source, invert_mask=o.invert_mask)
        shown, warnings = compute_run.check(problem, plan, o)
        trace, tiled = compute_run.calculate(problem, plan, shown, o.full, (source, doc, tuple(found.values())),
                                             warnings)
        try:
            agreed = agreement.compare(doc, trace)
            if "agreement" in doc:
                agreement.check_claim(doc["agreement"], agreed)
        except AttnError as error:
            raise error.at(source) if source else error
        yield LayerRun(numbers[place], doc, trace, tiled, shown, agreed)


def _warn(run: LayerRun) -> None:
    for notice in run.trace.warnings:
        sys.stderr.write(f"warning: layer {run.number}: {one_line(warning(notice))}\n")


def _tables(runs: Iterator[LayerRun], o, plan) -> bool:
    """Each layer as compute_run renders one (its header names it: the title), a blank line between."""
    differs, ended = False, True  # the tables end with a blank line of their own; an agreement line does not
    for run in runs:
        if not ended:
            out.write_all("\n")
        ended = run.agreed is None
        compute_run.render(run.trace, run.tiled, run.shown, plan, o, run.agreed, run.doc.get("word_ids"))
        _warn(run)
        differs |= run.agreed is not None and not run.agreed.agrees
    return differs


def _json(runs: Iterator[LayerRun], several: layers.SeveralLayers, o, plan) -> bool:
    """One JSON document: the file's title and model, and each layer's document as attn compute
    writes one, joined as text (each is already strict JSON); every agreement line on stderr."""
    top = {k: several.doc[k] for k in ("title", "model") if k in several.doc}
    parts, differs = [], False
    for run in runs:
        extra = agreement.captured(run.doc) if run.agreed is None else run.agreed.keys  # model.layer: its number
        view = View(run.trace, run.shown, decimals=o.round_, tiled=run.tiled, extra=extra, say=flag)
        parts.append(plan.format.trace(view).rstrip("\n"))
        if run.agreed is not None:
            sys.stderr.write(one_line(run.agreed.line()) + "\n")
            differs |= not run.agreed.agrees
        _warn(run)
    text = dumps({"attncli": 1, **top})[:-1] + ', "layers": [' + ", ".join(parts) + "]}\n"
    if o.output_file:
        write_file(o.output_file, ".json", text)
    else:
        out.write_all(text)
    return differs


def _page(runs: Iterator[LayerRun], several: layers.SeveralLayers, o, plan) -> bool:
    """One page of every layer (render/page_layers.py), built as each is computed; every agreement
    line on stderr, as beside JSON."""
    # Imported here, for start-up: only the page needs it.
    from attncli.render.page_layers import LayersPage

    page, differs, chosen, head = LayersPage(several.doc, several.source), False, ((), ()), None
    for run in runs:
        word_ids = run.doc.get("word_ids")
        if page.first is None:
            chosen = compute_run.picked(o, run.trace.problem, None if word_ids is None else list(word_ids))
            head = None if o.head is None else opt.head(o.head, run.trace.problem.heads)
        page.add(run.number, run.trace, run.doc.get("title"), run.agreed, word_ids)
        if run.agreed is not None:
            sys.stderr.write(one_line(run.agreed.line()) + "\n")
            differs |= not run.agreed.agrees
        _warn(run)
    text = page.text(chosen, o.precision, head)
    if o.output_file:
        write_file(o.output_file, ".html", text)
    else:
        out.write_all(text)
    return differs
