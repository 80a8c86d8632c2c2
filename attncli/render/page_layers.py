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
from attncli.document import layers
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
        self.agreements: list = []  # each layer's Agreement (document/agreement.py)
        self.numbers = 0
        self.first = None  # (problem, word_ids) of the first layer: the tokens every layer shares

    def add(self, number: int, trace, title: str | None, agreed, word_ids=None) -> None:
        self.numbers += count(trace)
        most = page_views.MOST_NUMBERS
        if self.numbers > most:
            raise InputError(f"the page would embed more than {most:,} numbers by layer {number} "
                             f"({self.numbers:,}), more than a page opens quickly; choose fewer layers",
                             "--layer")
        if self.first is None:
            self.first = (trace.problem, word_ids)
        elif (trace.problem.lq, trace.problem.lk) != (self.first[0].lq, self.first[0].lk):
            first = self.layers[0]["layer"]
            raise InputError(f"layer {number} has {trace.problem.lq} × {trace.problem.lk} queries × keys and layer "
                             f"{first} {self.first[0].lq} × {self.first[0].lk}; a page shows the layers of one "
                             "sequence: choose them with --layer", "--layer")
        self.layers.append(layer_data(number, trace, title))
        if agreed is not None:
            self.agreements.append(agreed)

    def agreement_lines(self) -> list[str]:
        """One line for the layers that agree with their model (the largest difference), and each
        other layer's own line (those that differ, or compare the output alone) by name."""
        plain = [a for a in self.agreements if a.agrees and not a.uncompared and a.layer is not None]
        kinds = {(a.model, a.dtype) for a in plain}
        if len(plain) < 2 or len(kinds) != 1:
            return [a.line() for a in self.agreements]
        model, dtype = kinds.pop()
        numbers = [a.layer for a in plain]
        words = plain[0].line().rsplit(" (", 1)[1]  # the dtype's words, as each layer's line ends
        summary = (f"layers {layers.spans(numbers)} agree with {model} to ≤ {max(a.difference for a in plain):.0e} "
                   f"({words}")
        return [summary] + [a.line() for a in self.agreements if a not in plain]

    def title(self, numbers: list[int]) -> str:
        """The document's title (a capture's names its layers: `… layers 0-5 (…)`), of the layers
        shown when they are not all of them; else the file's name."""
        title = self.doc.get("title")
        if not isinstance(title, str) or not title:
            return self.source if self.source and self.source != "-" else "attention"
        held = layers.numbers(self.doc)
        if sorted(numbers) == sorted(held):
            return title
        chosen = f"layer {numbers[0]}" if len(numbers) == 1 else f"layers {layers.spans(sorted(numbers))}"
        whole = f"layers {layers.spans(held)}"
        return title.replace(whole, chosen) if whole in title else f"{title}: {chosen}"

    def text(self, picked=((), ()), precision: int = 4, head: int | None = None) -> str:
        problem, word_ids = self.first
        first = self.layers[0]
        numbers = [layer["layer"] for layer in self.layers]
        title = self.title(numbers)
        header = [f"{plural(len(self.layers), 'layer')} ({', '.join(map(str, numbers))}) × "
                  f"{plural(first['heads'], 'head')}, {plural(problem.lq, 'query')} × {plural(problem.lk, 'key')}, "
                  f"d_k = {first['d']}" + (", RoPE" if first["rope"] else "")
                  + (f", mask {problem.mask_rule}" if problem.mask_rule else "")]
        header += self.agreement_lines()
        views = views_data(self.layers, problem, word_ids, picked, precision, head)
        data = {"rows": {}, "tiles": {}, "why": None, "heads": first["heads"], "given": [], "keyRows": [],
                "command": "attn compute " + (shlex.quote(self.source) if self.source and self.source != "-" else "FILE")}
        # the derivation's suggested command (text: the page's script sets it as textContent)
        views["command"] = data["command"]
        body = [section(views)]
        intro = ("Choose a query and a key to rank every head by the weight between them; click a head to open "
                 "its weights, its head view and its q·k view; click a weight to see how it was calculated.")
        return document(title, escape_lines(header), body, script_json(data), intro, (VIEWS_CSS, VIEWS_JS))
