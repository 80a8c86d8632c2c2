"""The page of a captured model's layers: `attn compute layers.json -o page.html` on a document of
several layers (commands/compute_layers.py), one self-contained file with the model view, the head
view, the weights table and the q·k view of render/page_views.py, around the page's own frame
(render/page.py's `document`: the policy, the style, the derivation panel).

Views never compute: the arrays are each layer's trace, packed as they are; the page's script draws
them (and derives a clicked weight, see page_views' docstring).
"""

from __future__ import annotations

import shlex

from attncli.base.errors import InputError, plural
from attncli.render import page_views
from attncli.render.escapes import script_json
from attncli.render.page import document, escape_lines
from attncli.render.page_views import VIEWS_CSS, VIEWS_JS, count, layer_data, section, views_data


class LayersPage:
    """The page, built as the layers are computed (one at a time: each layer's trace is packed and
    dropped); `add` refuses, naming --layer, once the page would embed more than page_views.MOST_NUMBERS."""

    def __init__(self, doc: dict, source: str | None):
        self.doc, self.source = doc, source
        self.layers: list[dict] = []
        self.agreements: list[str] = []
        self.numbers = 0
        self.first = None  # (problem, word_ids) of the first layer: the tokens every layer shares

    def add(self, number: int, trace, title: str | None, agreed, word_ids=None) -> None:
        self.numbers += count(trace)
        most = page_views.MOST_NUMBERS
        if self.numbers > most:
            raise InputError(f"the page would embed more than {most:,} numbers by layer {number} "
                             f"({self.numbers:,}), more than a page opens quickly; choose fewer layers with --layer",
                             "--output")
        if self.first is None:
            self.first = (trace.problem, word_ids)
        elif (trace.problem.lq, trace.problem.lk) != (self.first[0].lq, self.first[0].lk):
            first = self.layers[0]["layer"]
            raise InputError(f"layer {number} has {trace.problem.lq} × {trace.problem.lk} queries × keys and layer "
                             f"{first} {self.first[0].lq} × {self.first[0].lk}; a page shows the layers of one "
                             "sequence: choose them with --layer", "--layer")
        self.layers.append(layer_data(number, trace, title))
        if agreed is not None:
            self.agreements.append(agreed.line())

    def text(self, picked=((), ()), precision: int = 4, head: int | None = None) -> str:
        problem, word_ids = self.first
        title = self.doc.get("title") or (self.source if self.source and self.source != "-" else "attention")
        first = self.layers[0]
        numbers = [layer["layer"] for layer in self.layers]
        header = [f"{plural(len(self.layers), 'layer')} ({', '.join(map(str, numbers))}) × "
                  f"{plural(first['heads'], 'head')}, {plural(problem.lq, 'query')} × {plural(problem.lk, 'key')}, "
                  f"d_k = {first['d']}" + (", RoPE" if first["rope"] else "")
                  + (f", mask {problem.mask_rule}" if problem.mask_rule else "")]
        header += self.agreements
        views = views_data(self.layers, problem, word_ids, picked, precision, head)
        data = {"rows": {}, "tiles": {}, "why": None, "heads": first["heads"], "given": [], "keyRows": [],
                "command": "attn compute " + (shlex.quote(self.source) if self.source and self.source != "-" else "FILE")}
        body = [section(views)]
        intro = ("Choose a query and a key to rank every head by the weight between them; click a head to open "
                 "its weights, its head view and its q·k view; click a weight to see how it was calculated.")
        return document(title, escape_lines(header), body, script_json(data), intro, (VIEWS_CSS, VIEWS_JS))
