"""The page's views of a captured model (issue 28 item 5): `attn compute layers.json -o page.html`
on a document of several layers writes one page with

- the **model view** (as bertviz's): a grid of layers × heads, each head's weights as a small
  heatmap; with a query and a key chosen (`--query it --key scooter`, or by clicking the tokens)
  every thumbnail shows the weight the query puts on the key and the best heads are ranked;
- the **head view** of the head opened: lines from each query token (left) to each key token
  (right), opacity and thickness by weight; hovering or focusing a token shows its lines alone,
  clicking it chooses it;
- the **weights table** of that head, built when the head is opened (not embedded as HTML);
- the **q·k view** of a query and a key: each dimension's product q_d·k_d as a bar, their sum
  the score, times the scale the scaled score; for a RoPE layer the rotated q and k, one bar per
  rotation pair (the two dimensions one frequency turns), the pairs grouped into frequency bands.

Words: a word of several sub-tokens (sc ##oot ##er) is one choice. The weight a query puts on a
word is the sum over its sub-tokens (what `attn heads --words` ranks); a query word of several
tokens is the mean of its rows (compute/focus.py). --key naming several keys (scooter,petrol) or a
sub-token (##oot) is a choice of its own, beside the words: the page ranks as `attn heads` does for
the same options (commands/compute_layers.py refuses several --query values). The q·k view is of one query token and one key
token: the query word's last token and the key word's sub-token with the most weight in that head.

What is embedded, and why (measured in benchmarks/page.py): for every layer, each head's weights,
scores and the logits the softmax reads (after scale, softcap, bias and mask: −∞ where masked),
and the q and k that multiply (after q_norm and RoPE; K once per kv head), all as float64 exactly
(little-endian, base64: 10.7 characters a number, fewer than a number's shortest decimal text, and
no rounding to disagree with). No table is written as HTML: the page builds the one opened.

The derivation of a weight is **computed in the page**, not embedded: the hand calculation
(render/explain.py, Decimal arithmetic) of one row of a MiniLM layer takes about half a minute
(render/page_derive.py), so rows × heads × layers would take hours. The page computes the score
as Σ q_d k_d, the scaled score, and the softmax of the embedded logits in float64 (as numpy does),
and shows attncli's own values beside them; tests/test_page_browser.py checks they agree to 1e-12.

One captured layer (a document with the model's weights beside it) gets the same views, of its
heads, as the first tab of its tables page (render/page.py's `views`); `#layer-N-head-M` links open
that tab, `#head-M` the head's tables as before.

The script and style are this module's VIEWS_JS and VIEWS_CSS, added to the page's own (and to its
Content-Security-Policy, by hash) by render/page.py's `document`; they run beside page_assets.JS,
which finds no cell of its own in the views (their cells have no data-row).
"""

from __future__ import annotations

import base64

import numpy as np

from attncli.base import tokens
from attncli.base.errors import InputError
from attncli.render.escapes import script_json
from attncli.render.text import labels
from attncli.stages.table import fill, present

# The most float64 numbers a page embeds (about 10.7 characters each). Measured in headless Chromium
# on this machine (2 cores, load average 11): SmolLM2's 30 layers on 45 tokens, 2.7 million numbers in
# 29 MB, are interactive in 1.3 s; on the scooter sentence (12 tokens) 0.4 million, 4.3 MB, 0.7 s;
# MiniLM's 6 layers 0.1 million, 1.3 MB, 0.46 s (benchmarks/page.py --long).
MOST_NUMBERS = 3_000_000


def packed(array: np.ndarray) -> str:
    """An array as float64, little-endian, in base64 (the page reads it as a Float64Array; −∞ stays −∞)."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f8").tobytes()).decode("ascii")


def unpacked(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """`packed`'s inverse (for the tests and tools)."""
    return np.frombuffer(base64.b64decode(text), dtype="<f8").reshape(shape)


def _multiplied(trace, name: str) -> np.ndarray:
    """The q (or k) the scores multiply: the latest of Q, Q_normed, Q_rope the trace holds."""
    found = trace.stage(name)
    for stage in (f"{name}_normed", f"{name}_rope"):
        if trace.stage(stage) is not None:
            found = trace.stage(stage)
    return np.asarray(found)


def logit_stages(problem) -> list[str]:
    """The stages from the scores to the softmax's input, in order (scores, scaled, capped, …)."""
    names = [stage.name for stage in present(problem)]
    return names[names.index("scores"):names.index("weights")]


def layer_data(number: int, trace, title: str | None = None) -> dict:
    """One layer's part of the page's data: its number in the model, its shape, scale and RoPE, and
    every array the views read, packed (see the module docstring)."""
    p = trace.problem
    if trace.stage("weights") is None:
        raise InputError("the page's views need the weights: drop --stages output (or --tiles)", "--stages")
    q, k = _multiplied(trace, "Q"), _multiplied(trace, "K")
    kv = p.kv_heads or k.shape[0]
    k = k[::p.heads // kv]  # repeated per query head (problem/groups.repeat): once per kv head
    stages = logit_stages(p)
    rope = None
    if p.rope is not None:
        rope = {"style": p.rope.style, "dims": p.rope.dims, "pairs": p.rope.pairs(),
                "theta": [float(t) for t in p.rope.frequencies(max(p.lq, p.lk))]}
    sinks = None if p.sinks is None else [float(s) for s in np.asarray(p.sinks, dtype=np.float64)]
    return {"layer": number, "title": title or p.title or f"layer {number}", "heads": p.heads, "kv": kv,
            "d": int(q.shape[-1]), "scale": float(trace.scale), "stages": stages, "rope": rope, "sinks": sinks,
            "titles": {stage.name: fill(stage.title, p, stage.name) for stage in present(p) if stage.name in stages},
            "weights": packed(trace.weights), "scores": packed(trace.scores), "logits": packed(trace.stage(stages[-1])),
            "q": packed(q), "k": packed(k)}


def count(trace) -> int:
    """The numbers a layer embeds: weights, scores and logits, q, and k per kv head."""
    p = trace.problem
    kv = p.kv_heads or p.heads
    return p.heads * p.lq * (3 * p.lk + trace.d_k) + kv * p.lk * trace.d_k


def views_data(layers: list[dict], problem, word_ids=None, picked=((), ()), precision: int = 4,
               head: int | None = None) -> dict:
    """The views' data block: the tokens (as text, and as words), the query and key chosen
    (--query, --key: word indexes), the head --head opens, the decimals shown (--precision), and
    each layer's `layer_data`."""
    raw_q = list(problem.query_labels) if problem.query_labels else [str(i) for i in range(problem.lq)]
    raw_k = list(problem.key_labels) if problem.key_labels else [str(j) for j in range(problem.lk)]
    ids = list(word_ids) if word_ids is not None and len(word_ids) == problem.lk else None
    key_words = list(tokens.words(raw_k, ids)) if problem.key_labels else [(str(j), [j]) for j in range(problem.lk)]
    if problem.lq == problem.lk and problem.query_labels:
        query_words = list(tokens.words(raw_q, ids))
    else:
        query_words = [(name, [i]) for i, name in enumerate(labels(problem.query_labels, problem.lq))]

    def word(groups, positions, names):
        """The word the positions are, else a choice of its own appended (a sub-token, several keys:
        what attn heads sums), named by the words (or tokens) it covers."""
        if not positions:
            return None
        found = next((n for n, (_, group) in enumerate(groups) if list(group) == positions), None)
        if found is None:
            parts = [name for name, group in groups if len(group) > 1 and set(group) <= set(positions)]
            inside = {i for name, group in groups if len(group) > 1 and set(group) <= set(positions) for i in group}
            parts += [names[i] for i in positions if i not in inside]
            groups.append((" + ".join(parts), list(positions)))
            found = len(groups) - 1
        return found

    chosen_query = word(query_words, list(picked[0]), labels(problem.query_labels, problem.lq))
    chosen_key = word(key_words, list(picked[1]), labels(problem.key_labels, problem.lk))

    return {"queries": labels(problem.query_labels, problem.lq), "keys": labels(problem.key_labels, problem.lk),
            "queryWords": [[name, group] for name, group in query_words],
            "keyWords": [[name, group] for name, group in key_words],
            "query": chosen_query, "key": chosen_key,
            "lq": problem.lq, "lk": problem.lk, "precision": precision, "head": head, "layers": layers}


BODY = """<section id="views" aria-label="model view">
<h2>Choose a query and a key</h2>
<div class="pick" id="pick-query"><span>query</span></div>
<div class="pick" id="pick-key"><span>key</span></div>
<p id="ranked-what" class="note"></p><ol id="ranked" class="ranked"></ol>
<h2>Model view: layers × heads</h2>
<p class="note">Each head's weights: a row per query, a column per key, the colour stronger for more weight
(darker on a light background, brighter on a dark one), a dim grey where masked. Click one (or use a link such as #layer-4-head-3) to open it below.</p>
<div class="wide"><table id="model-view" class="mv"></table></div>
</section>
<noscript><p>The model view, the head view and the q·k view are drawn by the page's script.</p></noscript>
<section id="head-detail" aria-live="polite" hidden>
<h2 id="head-title"></h2>
<h3>weights</h3><p class="note">Click a weight (or press Enter on it) for its derivation and its q·k products.</p>
<div id="head-weights" class="wide"></div>
<div class="views-row"><div><h3>head view</h3><p class="note">Lines from each query (left) to each key (right),
stronger and thicker for more weight; hover or focus a token to see its lines alone, click it to choose it.</p><div id="head-view"></div></div>
<div><h3>q·k view</h3><div id="head-qk"></div></div></div>
</section>"""


def section(views: dict) -> str:
    """The views' HTML (empty boxes the script fills) and their data block (script_json: user text
    such as labels cannot end it)."""
    return BODY + f'\n<script type="application/json" id="attn-views">{script_json(views)}</script>'


def layer_views(trace, number: int, word_ids=None, picked=((), ()), precision: int = 4,
                head: int | None = None, command: str | None = None) -> str:
    """One captured layer's views, for the tab of its tables page (render/page.py); `command`: the
    `attn compute FILE` (shell-quoted) the derivation suggests."""
    data = views_data([layer_data(number, trace)], trace.problem, word_ids, picked, precision, head)
    return section(data if command is None else data | {"command": command})


VIEWS_CSS = """
.attn .pick{display:flex;flex-wrap:wrap;gap:.25rem;align-items:center;margin:.3rem 0}
.attn .pick>span{min-width:3.5rem;color:var(--muted)}
.attn .pick button,.attn .mv button,.attn .ranked button{font:inherit;color:inherit;background:var(--panel);
border:1px solid var(--line);border-radius:4px;padding:.1rem .45rem;cursor:pointer}
.attn .pick button[aria-pressed=true]{border-color:var(--focus);background:rgba(var(--pos),.25);font-weight:700}
.attn .mv{border-collapse:collapse;content-visibility:visible}
.attn .mv td,.attn .mv th{border:none;padding:2px;text-align:center;vertical-align:top}
.attn .mv button{padding:2px;display:flex;flex-direction:column;align-items:center;font-size:11px;line-height:1.1}
.attn .mv canvas{width:48px;height:48px;image-rendering:pixelated;border:1px solid var(--line)}
.attn .mv button.best{border:2px solid var(--focus);background:rgba(var(--pos),.2)}
.attn .mv button.open{outline:2px dashed var(--focus)}
.attn .mv .rank{font-weight:700;color:var(--focus)}
.attn .ranked{display:flex;flex-wrap:wrap;gap:.3rem;padding:0;list-style:none}
.attn .hv line{stroke:rgb(var(--pos))}.attn .hv line.off{display:none}
.attn .hv text{fill:var(--fg);font:12px ui-monospace,"DejaVu Sans Mono",Menlo,monospace;cursor:pointer}
.attn .hv text:focus{outline:none;text-decoration:underline;font-weight:700}
.attn .hv text.on{font-weight:700}
.attn .vw td[data-q]{cursor:pointer}
.attn .qk svg{display:block}.attn .qk rect.bar{fill:rgba(var(--pos),.8)}.attn .qk rect.bar.neg{fill:rgba(var(--neg),.8)}
.attn .qk line.axis{stroke:var(--fg)}
@media print{.attn #views .wide,.attn #head-detail .wide{overflow:visible}
.attn .vw{table-layout:fixed;width:100%;font-size:6pt}.attn .vw td,.attn .vw th{padding:0;overflow-wrap:anywhere}}
.attn .qk tr.band th{text-align:left}
.attn .views-row{display:flex;flex-wrap:wrap;gap:2rem;align-items:flex-start}
.attn .views-row>div{max-width:100%}
"""

VIEWS_JS = r"""
"use strict";
(function () {
  var node = document.getElementById("attn-views");
  if (!node) return;
  var V = JSON.parse(node.textContent), panel = document.getElementById("derivation");
  var P = V.precision;  // decimals shown (--precision), as the tables
  function f64(s) {
    var b = atob(s), u = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
    return new Float64Array(u.buffer);
  }
  var cache = V.layers.map(function () { return {}; });
  function arr(l, name) {  // layer l's array `name`, decoded once (callers in loops hold it: no lookup a cell)
    return cache[l][name] || (cache[l][name] = f64(V.layers[l][name]));
  }
  var LQ = V.lq, LK = V.lk;
  function w(l, h, i, j) { return arr(l, "weights")[(h * LQ + i) * LK + j]; }
  function logit(l, h, i, j) { return arr(l, "logits")[(h * LQ + i) * LK + j]; }
  function fmt(x, p) {
    if (x === -Infinity) return "−∞";
    var t = x.toFixed(p === undefined ? P : p);
    if (/^-0\.?0*$/.test(t)) return t.slice(1);
    return t.charAt(0) === "-" ? "−" + t.slice(1) : t;  // one minus sign in text, as render/explain.py's
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  var SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (a) { e.setAttribute(a, attrs[a]); });
    return e;
  }
  var sel = {query: V.query, key: V.key, layer: null, head: null, cell: null};

  // The weight the chosen query word puts on the chosen key word in one head: the sum over the
  // key's sub-tokens, the mean over the query's tokens (as attn heads --words).
  function focusWeight(l, h) {
    var qs = V.queryWords[sel.query][1], ks = V.keyWords[sel.key][1], total = 0;
    qs.forEach(function (i) { ks.forEach(function (j) { total += w(l, h, i, j); }); });
    return total / qs.length;
  }
  function ranking() {
    if (sel.query === null || sel.key === null) return [];
    var found = [];
    V.layers.forEach(function (L, l) {
      for (var h = 0; h < L.heads; h++) found.push({l: l, h: h, w: focusWeight(l, h)});
    });
    found.sort(function (a, b) { return b.w - a.w || a.l - b.l || a.h - b.h; });
    return found;
  }

  // ---- the pickers
  function choose(which, n) {  // a query or key word chosen (again: unchosen), from a picker or the head view
    sel[which] = sel[which] === n ? null : n;
    var box = document.getElementById(which === "query" ? "pick-query" : "pick-key");
    Array.prototype.forEach.call(box.querySelectorAll("button"), function (x) {
      x.setAttribute("aria-pressed", x.getAttribute("data-word") === String(sel[which]) ? "true" : "false");
    });
    sel.cell = null;
    update();
  }
  function picker(id, words, which) {
    var box = document.getElementById(id);
    words.forEach(function (word, n) {
      var b = el("button", "", word[0]);
      b.type = "button"; b.setAttribute("data-word", n);
      b.setAttribute("aria-pressed", sel[which] === n ? "true" : "false");
      b.addEventListener("click", function () { choose(which, n); });
      box.appendChild(b);
    });
  }
  function wordOf(words, position) {
    for (var n = 0; n < words.length; n++) if (words[n][1].indexOf(position) >= 0) return n;
    return null;
  }

  // ---- the model view
  var style = getComputedStyle(document.body);
  var colour = (style.getPropertyValue("--pos") || "31,100,177").split(",").map(Number);
  var paper = (style.backgroundColor.match(/\d+/g) || [255, 255, 255]).slice(0, 3).map(Number);  // light or dark
  var thumbs = [];
  function thumbnails() {
    var table = document.getElementById("model-view"), most = 0;
    V.layers.forEach(function (L) { most = Math.max(most, L.heads); });
    var head = el("tr"); head.appendChild(el("th", "", ""));
    for (var h = 0; h < most; h++) head.appendChild(el("th", "", "head " + h));
    table.appendChild(head);
    V.layers.forEach(function (L, l) {
      var tr = el("tr"); tr.appendChild(el("th", "", "layer " + L.layer));
      for (var h = 0; h < most; h++) {
        var td = el("td");
        if (h < L.heads) {
          var b = el("button"), c = el("canvas");
          b.type = "button"; b.setAttribute("data-layer", L.layer); b.setAttribute("data-head", h);
          b.setAttribute("aria-label", "layer " + L.layer + " head " + h);
          c.width = LK; c.height = LQ;
          draw(c, l, h);
          b.appendChild(c);
          var v = el("span", "w", ""), r = el("span", "rank", "");
          b.appendChild(v); b.appendChild(r);
          b.addEventListener("click", (function (l, h) { return function () { go(l, h); }; })(l, h));
          thumbs.push({l: l, h: h, button: b, value: v, rank: r});
          td.appendChild(b);
        }
        tr.appendChild(td);
      }
      table.appendChild(tr);
    });
  }
  function draw(c, l, h) {
    var ctx = c.getContext("2d"), img = ctx.createImageData(LK, LQ), W = arr(l, "weights"), G = arr(l, "logits");
    var at = h * LQ * LK;
    for (var i = 0; i < LQ; i++) for (var j = 0; j < LK; j++) {
      var n = at + i * LK + j, p = 4 * (i * LK + j), a = Math.min(1, Math.max(0, W[n])), masked = G[n] === -Infinity;
      for (var c = 0; c < 3; c++)  // masked: a grey near the background (never the brightest in the dark)
        img.data[p + c] = Math.round(masked ? 0.75 * paper[c] + 32 : paper[c] + (colour[c] - paper[c]) * a);
      img.data[p + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }
  function update() {
    var ranked = ranking(), place = {};
    ranked.forEach(function (r, n) { place[r.l + ":" + r.h] = [n, r.w]; });
    thumbs.forEach(function (t) {
      var found = place[t.l + ":" + t.h];
      t.value.textContent = found ? fmt(found[1], 3) : "";
      t.rank.textContent = found && found[0] < 3 ? "#" + (found[0] + 1) : "";
      t.button.classList.toggle("best", !!found && found[0] === 0);
      t.button.setAttribute("aria-label", "layer " + V.layers[t.l].layer + " head " + t.h +
        (found ? ": " + fmt(found[1]) + ", rank " + (found[0] + 1) : ""));
    });
    var list = document.getElementById("ranked"), said = document.getElementById("ranked-what");
    list.textContent = "";
    if (!ranked.length) said.textContent = "Choose a query and a key to rank every head by the weight the query puts on the key.";
    else {
      said.textContent = "Heads ranked by the weight " + V.queryWords[sel.query][0] + " puts on " +
        V.keyWords[sel.key][0] + (V.keyWords[sel.key][1].length > 1 ? " (summed over its " +
        V.keyWords[sel.key][1].length + " tokens)" : "") + ", best first:";
      ranked.slice(0, 5).forEach(function (r, n) {
        var li = el("li"), b = el("button", "", (n + 1) + ". layer " + V.layers[r.l].layer + " head " + r.h + ": " + fmt(r.w));
        b.type = "button";
        b.setAttribute("data-layer", V.layers[r.l].layer); b.setAttribute("data-head", r.h);
        b.addEventListener("click", function () { go(r.l, r.h); });
        li.appendChild(b); list.appendChild(li);
      });
    }
    if (sel.layer !== null) detail();
  }

  // ---- one head opened: its weights table, head view and q·k view
  function go(l, h) {  // opened now; the address follows (Back returns), and its hashchange finds it open
    var hash = "#layer-" + V.layers[l].layer + "-head-" + h;
    if (l !== sel.layer || h !== sel.head) open(l, h);  // the head open already keeps its chosen cell
    if (location.hash !== hash) location.hash = hash;
    document.getElementById("head-detail").scrollIntoView({block: "start"});
  }
  function open(l, h) {
    sel.layer = l; sel.head = h; sel.cell = null;
    if (panel) { panel.textContent = ""; document.body.classList.remove("open"); }  // no other head's cell stays
    thumbs.forEach(function (t) { t.button.classList.toggle("open", t.l === l && t.h === h); });
    document.getElementById("head-detail").hidden = false;
    detail();
  }
  function fromHash() {
    var m = decodeURIComponent(location.hash).match(/^#(?:layer-(\d+)-)?(?:head|part|tab)-(\d+)$/);
    if (!m) return false;
    var l = m[1] === undefined ? 0 : V.layers.map(function (L) { return L.layer; }).indexOf(+m[1]);
    if (l < 0 || +m[2] >= V.layers[l].heads) return false;
    if (l !== sel.layer || +m[2] !== sel.head) open(l, +m[2]);  // a head opened already keeps its chosen cell
    var tab = document.getElementById("tab-views");  // a tables page's views tab: #layer-… links open it
    if (tab && m[1] !== undefined && tab.getAttribute("aria-selected") !== "true") tab.click();
    return true;
  }
  function bestKey(l, h, i) {  // the key word's sub-token with the most weight from query token i
    var ks = V.keyWords[sel.key][1], best = ks[0];
    ks.forEach(function (j) { if (w(l, h, i, j) > w(l, h, i, best)) best = j; });
    return best;
  }
  function chosenCell() {
    if (sel.cell) return sel.cell;
    if (sel.query === null || sel.key === null) return null;
    var qs = V.queryWords[sel.query][1], i = qs[qs.length - 1];
    return [i, bestKey(sel.layer, sel.head, i)];
  }
  function detail() {
    var l = sel.layer, h = sel.head, L = V.layers[l];
    document.getElementById("head-title").textContent = "layer " + L.layer + " · head " + h +
      (L.kv !== L.heads ? " (K of kv head " + Math.floor(h / (L.heads / L.kv)) + ")" : "");
    weightsTable(l, h);
    headView(l, h);
    qkView(l, h, chosenCell());
  }
  function weightsTable(l, h) {
    var box = document.getElementById("head-weights"), table = el("table", "vw");
    table.setAttribute("data-title", "weights · layer " + V.layers[l].layer + " · head " + h);
    var tr = el("tr"); tr.appendChild(el("th", "", ""));
    V.keys.forEach(function (k, j) { var th = el("th", "", k); th.setAttribute("data-col", j); tr.appendChild(th); });
    var thead = el("thead"); thead.appendChild(tr); table.appendChild(thead);
    var body = el("tbody"), qs = sel.query === null ? [] : V.queryWords[sel.query][1];
    var W = arr(l, "weights"), G = arr(l, "logits"), at = h * LQ * LK;
    for (var i = 0; i < LQ; i++) {
      var row = el("tr"), th = el("th", "", V.queries[i]);
      th.setAttribute("data-q", i); row.appendChild(th);
      if (qs.indexOf(i) >= 0) row.className = "hr";
      for (var j = 0; j < LK; j++) {
        var x = W[at + i * LK + j], td = el("td", G[at + i * LK + j] === -Infinity ? "x" : level(x), fmt(x));
        td.setAttribute("data-layer", V.layers[l].layer); td.setAttribute("data-head", h);
        td.setAttribute("data-q", i); td.setAttribute("data-k", j);
        td.tabIndex = i === 0 && j === 0 ? 0 : -1;
        if (sel.cell && sel.cell[0] === i && sel.cell[1] === j) td.classList.add("on");
        row.appendChild(td);
      }
      body.appendChild(row);
    }
    table.appendChild(body);
    box.textContent = "";
    box.appendChild(table);
  }
  function level(x) {
    var n = Math.min(9, Math.max(0, Math.round(Math.abs(x) * 9)));
    return n ? "p" + n : "";
  }
  function headView(l, h) {
    var box = document.getElementById("head-view"), n = Math.max(LQ, LK), step = 18, CAP = 32;
    var longest = Math.max.apply(null, V.queries.concat(V.keys).map(function (t) { return Math.min(t.length, CAP); }));
    var room = Math.max(40, Math.ceil(7.3 * longest) + 10), width = 2 * room + 140;  // 12px monospace: 7.2px a character
    var s = svg("svg", {"class": "hv", width: width, height: n * step + 10, viewBox: "0 0 " + width + " " + (n * step + 10),
      role: "img", "aria-label": "head view: lines from each query (left) to each key (right), by weight"});
    var lines = svg("g"), left = room, right = width - room, W = arr(l, "weights"), G = arr(l, "logits"), at = h * LQ * LK;
    for (var i = 0; i < LQ; i++) for (var j = 0; j < LK; j++) {
      if (G[at + i * LK + j] === -Infinity) continue;
      var x = W[at + i * LK + j];
      lines.appendChild(svg("line", {x1: left + 4, y1: i * step + 14, x2: right - 4, y2: j * step + 14,
        "stroke-opacity": Math.max(0, Math.min(1, x)).toFixed(4), "stroke-width": (0.5 + 3 * x).toFixed(3),
        "data-q": i, "data-k": j}));
    }
    s.appendChild(lines);
    function label(text, x, y, anchor, attr, n) {
      var t = svg("text", {x: x, y: y, "text-anchor": anchor, tabindex: 0});
      t.setAttribute(attr, n);
      t.textContent = text.length > CAP ? text.slice(0, CAP - 1) + "…" : text;
      if (text.length > CAP) { var full = svg("title"); full.textContent = text; t.appendChild(full); }
      s.appendChild(t);
    }
    V.queries.forEach(function (q, i) { label(q, left - 4, i * step + 18, "end", "data-q", i); });
    V.keys.forEach(function (k, j) { label(k, right + 4, j * step + 18, "start", "data-k", j); });
    function only(t) {
      var attr = t && (t.hasAttribute("data-q") ? "data-q" : "data-k"), n = t && t.getAttribute(attr);
      Array.prototype.forEach.call(s.querySelectorAll("text"), function (x) { x.classList.toggle("on", x === t); });
      Array.prototype.forEach.call(lines.childNodes, function (line) {
        line.classList.toggle("off", !!t && line.getAttribute(attr) !== n);
      });
    }
    ["mouseover", "focusin"].forEach(function (e) {
      s.addEventListener(e, function (ev) { var t = ev.target.closest("text"); if (t) only(t); });
    });
    ["mouseleave", "focusout"].forEach(function (e) { s.addEventListener(e, function () { only(null); }); });
    function pick(t) {  // a token clicked (or Enter on it) chooses its word as the query or the key
      var q = t.hasAttribute("data-q");
      var n = wordOf(q ? V.queryWords : V.keyWords, +t.getAttribute(q ? "data-q" : "data-k"));
      if (n !== null) choose(q ? "query" : "key", n);
    }
    s.addEventListener("click", function (ev) { var t = ev.target.closest("text"); if (t) pick(t); });
    s.addEventListener("keydown", function (ev) {
      if (ev.target.tagName === "text" && (ev.key === "Enter" || ev.key === " ")) { pick(ev.target); ev.preventDefault(); }
    });
    box.textContent = "";
    box.appendChild(s);
  }
  // The products q_d k_d of one score, as bars: every dimension, or for RoPE each rotation pair's two
  // products together (the rotated q and k), pairs in bands of frequency.
  function qkView(l, h, cell) {
    var box = document.getElementById("head-qk");
    box.textContent = "";
    if (!cell) {
      box.appendChild(el("p", "note", "Click a weight, or choose a query and a key above, to see its q·k products."));
      return;
    }
    var L = V.layers[l], d = L.d, i = cell[0], j = cell[1], kvh = Math.floor(h / (L.heads / L.kv));
    var q = arr(l, "q"), k = arr(l, "k"), qo = (h * LQ + i) * d, ko = (kvh * LK + j) * d;
    var prod = [];
    for (var t = 0; t < d; t++) prod.push(q[qo + t] * k[ko + t]);
    var score = 0; prod.forEach(function (p) { score += p; });
    var rows = [];  // [label, value, dims]
    if (L.rope) {
      var used = {};
      L.rope.pairs.forEach(function (p, n) {
        used[p[0]] = used[p[1]] = true;
        rows.push(["pair " + n + " (dims " + p[0] + ", " + p[1] + "; θ " + L.rope.theta[n].toPrecision(3) + ")",
          prod[p[0]] + prod[p[1]], p]);
      });
      for (t = 0; t < d; t++) if (!used[t]) rows.push(["dim " + t + " (not rotated)", prod[t], [t]]);
    } else {
      prod.forEach(function (p, t) { rows.push(["dim " + t, p, [t]]); });
    }
    var most = Math.max.apply(null, rows.map(function (r) { return Math.abs(r[1]); })) || 1;
    box.appendChild(el("p", "", "q·k of " + V.queries[i] + " (query " + i + ") and " + V.keys[j] + " (key " + j +
      "), layer " + L.layer + " head " + h + (L.rope ? ": the rotated q and k (RoPE), a bar per rotation pair, " +
      "fastest-turning first" : ": a bar per dimension")));
    var table = el("table", "qk"), head = el("tr");
    [L.rope ? "pair" : "dimension", "q·k", ""].forEach(function (x) { head.appendChild(el("th", "", x)); });
    table.appendChild(head);
    var bands = L.rope ? Math.min(4, L.rope.pairs.length) : 0, per = bands ? Math.ceil(L.rope.pairs.length / bands) : 0;
    rows.forEach(function (r, n) {
      if (bands && n < L.rope.pairs.length && n % per === 0) {
        var sum = 0, last = Math.min(n + per, L.rope.pairs.length);
        for (var b = n; b < last; b++) sum += rows[b][1];
        var band = el("tr", "band"), th = el("th", "", "band " + (n / per + 1) + ": pairs " + n + "–" + (last - 1) +
          " (θ " + L.rope.theta[n].toPrecision(3) + " to " + L.rope.theta[last - 1].toPrecision(3) + "), sum " + fmt(sum));
        th.colSpan = 3; band.appendChild(th); table.appendChild(band);
      }
      // the sign by position: from the zero axis, right for positive, left for negative (and its colour)
      var tr = el("tr", "term"), half = 60, size = half * Math.abs(r[1]) / most;
      var bars = svg("svg", {width: 2 * half + 2, height: 12, role: "img", "aria-label": fmt(r[1])});
      bars.appendChild(svg("rect", {"class": r[1] < 0 ? "bar neg" : "bar", x: (r[1] < 0 ? half + 1 - size : half + 1).toFixed(2),
        y: 2, width: size.toFixed(2), height: 8}));
      bars.appendChild(svg("line", {"class": "axis", x1: half + 1, x2: half + 1, y1: 0, y2: 12}));
      tr.setAttribute("data-value", String(r[1]));
      tr.appendChild(el("td", "", r[0])); tr.appendChild(el("td", "", fmt(r[1])));
      var td = el("td"); td.appendChild(bars); tr.appendChild(td);
      table.appendChild(tr);
    });
    box.appendChild(table);
    var given = arr(l, "scores")[(h * LQ + i) * LK + j];
    var total = el("p", "qk-sum", "sum = score = " + fmt(score) + " (attncli: " + fmt(given) + "); × scale " +
      L.scale.toPrecision(6) + " = " + fmt(score * L.scale));
    total.setAttribute("data-score", String(given));
    box.appendChild(total);
  }

  // ---- a weight's derivation, computed here (see render/page_views.py)
  function derive(l, h, i, j) {
    var L = V.layers[l], box = el("div"), x = w(l, h, i, j);
    box.appendChild(el("h2", "", "weights · layer " + L.layer + " · head " + h + " · row " + V.queries[i] +
      " · column " + V.keys[j] + " = " + fmt(x)));
    box.appendChild(el("p", "note", "computed in this page, in float64, from the layer's q, k, scale and logits " +
      "(the hand calculation of a real layer's row takes half a minute: for it run " + (V.command || "attn compute FILE") + " --layer " +
      L.layer + " --head " + h + " --explain --query '#" + i + "')"));
    var pre = el("pre"), out = [];
    function line(text, cur) { out.push([text, cur]); }
    var d = L.d, kvh = Math.floor(h / (L.heads / L.kv)), q = arr(l, "q"), k = arr(l, "k"), qo = (h * LQ + i) * d;
    var logits = [], m = -Infinity;
    for (var c = 0; c < LK; c++) { logits.push(logit(l, h, i, c)); m = Math.max(m, logits[c]); }
    if (L.sinks) m = Math.max(m, L.sinks[h]);
    var ko = (kvh * LK + j) * d, score = 0;
    for (var t = 0; t < d; t++) score += q[qo + t] * k[ko + t];
    line("Step 1: score = q · k = Σ of " + d + " products q_d k_d" + (L.rope ? " (q and k rotated by RoPE)" : "") +
      " = " + fmt(score) + "   (the q·k view shows each product)");
    line("Step 2: scaled = " + fmt(score) + " × " + L.scale.toPrecision(6) + " = " + fmt(score * L.scale));
    // The stages after scaled (softcap, relative bias, mask with bias or ALiBi), named by their titles,
    // when they changed this logit: attncli's scaled (its score × scale) against what the softmax reads.
    var scaled = arr(l, "scores")[(h * LQ + i) * LK + j] * L.scale;
    if (L.stages.length > 2 && logits[j] !== scaled)
      line("        then " + L.stages.slice(2).map(function (n) { return L.titles[n]; }).join("; then ") +
        " (attncli's): the softmax reads " + fmt(logits[j]));
    if (m === -Infinity) {  // every key masked (and no sink): no softmax; the weights are the row policy's
      line("Step 3: every key of this row is masked: it has no visible key, so no softmax; the masked_rows " +
        "policy sets its weights: " + V.keys[j] + " = " + fmt(x), true);
      out.forEach(function (o) {
        pre.appendChild(el("span", o[1] ? "cur" : "", o[0])); pre.appendChild(document.createTextNode("\n"));
      });
      box.appendChild(pre);
      return box;
    }
    line("Step 3: softmax over the row's " + LK + " keys: m = max = " + fmt(m) + ", e^(x − m) for each key");
    var e = logits.map(function (v) { return v === -Infinity ? 0 : Math.exp(v - m); }), sum = 0;
    e.forEach(function (v) { sum += v; });
    if (L.sinks) sum += Math.exp(L.sinks[h] - m);
    var width = Math.max.apply(null, V.keys.map(function (k) { return k.length; }));
    function pad(k) { return k + new Array(width - k.length + 1).join(" "); }
    logits.forEach(function (v, c) {
      line("  " + pad(V.keys[c]) + "  e^(" + fmt(v) + " − " + fmt(m) + ") = " + (v === -Infinity ? "0 (masked)" : fmt(e[c])), c === j);
    });
    if (L.sinks) line("  sink  e^(" + fmt(L.sinks[h]) + " − " + fmt(m) + ") = " + fmt(Math.exp(L.sinks[h] - m)));
    line("  sum = " + fmt(sum));
    if (sum === 0) {  // every key masked: no softmax; the weights are the row policy's (masked_rows)
      line(V.keys[j] + "  = " + fmt(x) + ": every key of this row is masked, so its weights are the masked_rows " +
        "policy's, not a softmax", true);
      out.forEach(function (o) {
        pre.appendChild(el("span", o[1] ? "cur" : "", o[0])); pre.appendChild(document.createTextNode("\n"));
      });
      box.appendChild(pre);
      return box;
    }
    var mine = e[j] / sum;
    line(V.keys[j] + "  = " + fmt(e[j]) + " / " + fmt(sum) + " = " + fmt(mine) + " (" + (100 * mine).toFixed(1) + "%)", true);
    out.forEach(function (o) {
      pre.appendChild(el("span", o[1] ? "cur" : "", o[0])); pre.appendChild(document.createTextNode("\n"));
    });
    box.appendChild(pre);
    var said = el("p", "note", "attncli's weight: " + String(x) + "; this page's: " + String(mine));
    said.setAttribute("data-page", String(mine)); said.setAttribute("data-attncli", String(x));
    said.className = "note agree";
    box.appendChild(said);
    return box;
  }
  function show(td) {
    var i = +td.getAttribute("data-q"), j = +td.getAttribute("data-k");
    sel.cell = [i, j];
    document.querySelectorAll(".vw td.on").forEach(function (x) { x.classList.remove("on"); });
    td.classList.add("on");
    panel.textContent = "";
    panel.appendChild(derive(sel.layer, sel.head, i, j));
    document.body.classList.add("open");
    qkView(sel.layer, sel.head, sel.cell);
  }
  var tableBox = document.getElementById("head-weights");
  tableBox.addEventListener("click", function (e) {
    var td = e.target.closest("td[data-k]");
    if (td) { td.focus(); show(td); }
  });
  tableBox.addEventListener("keydown", function (e) {
    var td = e.target.closest("td[data-k]");
    if (!td) return;
    if (e.key === "Enter" || e.key === " ") { show(td); e.preventDefault(); return; }
    var i = +td.getAttribute("data-q"), j = +td.getAttribute("data-k");
    var di = e.key === "ArrowUp" ? -1 : e.key === "ArrowDown" ? 1 : 0, dj = e.key === "ArrowLeft" ? -1 : e.key === "ArrowRight" ? 1 : 0;
    if (!di && !dj) return;
    var next = tableBox.querySelector('td[data-q="' + (i + di) + '"][data-k="' + (j + dj) + '"]');
    if (next) { td.tabIndex = -1; next.tabIndex = 0; next.focus(); }
    e.preventDefault();
  });

  picker("pick-query", V.queryWords, "query");
  picker("pick-key", V.keyWords, "key");
  thumbnails();
  update();
  // It opens on the head a link names (#layer-4-head-3; #head-3: the first layer's), else on --head's
  // (in the layer that ranks it best), else on the best head for the query and key chosen, else the first.
  function opening() {
    if (fromHash()) return true;
    var best = ranking().filter(function (r) { return V.head === null || r.h === V.head; })[0];
    var first = V.head !== null && V.head < V.layers[0].heads ? V.head : 0;
    open(best ? best.l : 0, best ? best.h : first);
    return false;
  }
  if (opening()) document.getElementById("head-detail").scrollIntoView({block: "start"});
  // back to no #…, or to a link of no head: the head the page opens on (the hashchange fires for both)
  window.addEventListener("hashchange", opening);
  document.body.setAttribute("data-views", "ready");
})();
"""
