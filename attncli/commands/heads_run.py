"""`attn heads`' work (commands/heads.py has its options): read the document (every layer chosen of
a document of several, from one reading), compute each layer's weights as attn compute does (the
memory guard, the read-back of the document's own results), and rank the heads by the weights
(compute/focus.py); render/heads.py shows them."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from attncli.base import tokens
from attncli.base.errors import AttnError, InputError
from attncli.commands import compute_run
from attncli.commands import option_text as opt
from attncli.commands.edge import auto_is_table
from attncli.compute.focus import focus, ranked
from attncli.document import layers
from attncli.document.loading import gather
from attncli.document.reading import build_problem
from attncli.render import formats, out
from attncli.render.heads import heads_json, heads_table


def each_layer(file: str | None, layer: str | None, piped: bool):
    """(layer number, document, problem) for each chosen layer of the file, in order."""
    try:
        doc, found, source = gather(file, {}, {}, piped, layer)
        docs = [((doc.get("model") or {}).get("layer", 0) if isinstance(doc.get("model"), dict) else 0, doc)]
    except layers.SeveralLayers as several:
        numbers, source = layers.numbers(several.doc), several.source
        docs = [(numbers[place], layers.layer_document(several.doc, place)) for place in several.places]
    for number, doc in docs:
        yield number, doc, build_problem(doc, {}, source), source


def run(o: SimpleNamespace) -> None:
    if not o.query:
        raise InputError("names the query whose weights are ranked: add --query LABEL (it) or --query #INDEX",
                         "--query")
    # compute_run's plan for the weights: the memory guard counts what JSON builds (the heads' rows are small)
    plan = SimpleNamespace(format=formats.get("json"), output_only=False, tile_sizes=None, threads=None)
    found, names, shown = [], None, None
    piped = o.file is None and not sys.stdin.isatty()
    for number, doc, problem, source in each_layer(o.file, o.layer, piped):
        word_ids = doc.get("word_ids")
        word_ids = list(word_ids) if word_ids is not None else None
        queries = opt.picks(o.query, problem.query_labels, problem.lq, "--query",
                            word_ids if problem.lq == problem.lk else None)
        keys = opt.picks(o.key, problem.key_labels, problem.lk, "--key", word_ids, "key")
        raw = list(problem.key_labels) if problem.key_labels else [str(j) for j in range(problem.lk)]
        if o.words:
            groups = tokens.words(raw, word_ids if word_ids is not None and len(word_ids) == problem.lk else None)
            names, groups = [word for word, _ in groups], [group for _, group in groups]
        else:
            names, groups = tokens.readable(raw), [[j] for j in range(problem.lk)]
        trace, _ = compute_run.calculate(problem, plan, ("weights",), False, (source, doc, ()))
        try:
            for query in queries:
                found += focus(trace.weights, number, query, opt.positions(keys) if keys else None, groups, o.top,
                               trace.problem.sinks is not None)
        except AttnError as error:
            raise error.at(source) if source else error
        shown = (queries, keys)
    rows = ranked(found, [name for name, _ in shown[0]])
    if o.rows is not None:  # the best N of each query
        rows = [r for r in rows if sum(1 for s in rows[:rows.index(r)] if s.query == r.query) < o.rows]
    entries = [(name, group, [raw[j] for j in group]) for name, group in zip(names, groups)]
    if (o.format == "auto" and auto_is_table()) or o.format == "table":
        heads_table(rows, entries, shown[0], shown[1])
    else:
        out.write_all(heads_json(rows, entries, shown[1]))
