"""The page's style and script, inline (a page loads nothing: no CDN, no web font). The
Content-Security-Policy of the page allows exactly these two texts, by their SHA-256 hashes
(render/page.py). Every rule is scoped under `.attn`, so that a notebook (which gets the style and
never the script) keeps its own look around the tables.

Heatmap levels are classes (`p0`…`p9` for a value's share of its table's largest magnitude,
`n1`…`n9` for negative values, `x` for a masked cell), never style attributes: the policy allows
no inline style attribute, and the colours survive without the script (a notebook, print).

The what-if's style and script (render/page_whatif_assets.py) are part of these two texts.
"""

from attncli.render.page_whatif_assets import WHATIF_CSS, WHATIF_JS

CSS = """
.attn{--bg:#fff;--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4d9;--pos:31,100,177;--neg:200,80,50;
--mark:#ffe58a;--focus:#0b57d0;--panel:#f6f7f9;color-scheme:light dark;
background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
@media (prefers-color-scheme:dark){.attn{--bg:#121417;--fg:#e8eaed;--muted:#9aa0a6;--line:#3c4043;
--pos:110,170,240;--neg:240,140,110;--mark:#5c4b00;--focus:#8ab4f8;--panel:#1c1f24}}
body.attn{margin:0;padding:0 1rem 2rem}
.attn h1{font-size:1.3rem;margin:1rem 0 .5rem}.attn h2{font-size:1.05rem;margin:1.4rem 0 .3rem}
.attn pre{font:13px/1.4 ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;white-space:pre-wrap;margin:.3rem 0}
.attn .header{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem}
.attn .note{color:var(--muted)}
.attn table{content-visibility:auto;contain-intrinsic-size:auto 20rem;border-collapse:collapse;margin:.3rem 0 1rem;font:13px ui-monospace,"DejaVu Sans Mono",Menlo,monospace}
.attn th,.attn td{border:1px solid var(--line);padding:2px 6px;text-align:right;white-space:nowrap}
.attn thead th,.attn tbody th{background:var(--panel);font-weight:600}
.attn td[data-row]{cursor:pointer}
.attn td:focus{outline:2px solid var(--focus);outline-offset:-2px}
.attn .hr>th,.attn th.hc,.attn td.hr,.attn td.hc{box-shadow:inset 0 0 0 999px rgba(127,127,127,.18)}
.attn td.on{outline:2px solid var(--focus);outline-offset:-2px}
.attn td.nf{outline:3px solid rgba(220,50,50,.9);outline-offset:-3px}
.attn td.x{color:var(--muted);background:repeating-linear-gradient(135deg,transparent 0 4px,var(--line) 4px 6px)}
.attn td.p1{background:rgba(var(--pos),.08)}.attn td.p2{background:rgba(var(--pos),.16)}
.attn td.p3{background:rgba(var(--pos),.24)}.attn td.p4{background:rgba(var(--pos),.32)}
.attn td.p5{background:rgba(var(--pos),.42)}.attn td.p6{background:rgba(var(--pos),.52)}
.attn td.p7{background:rgba(var(--pos),.64)}.attn td.p8{background:rgba(var(--pos),.76)}
.attn td.p9{background:rgba(var(--pos),.88)}
.attn td.n1{background:rgba(var(--neg),.08)}.attn td.n2{background:rgba(var(--neg),.16)}
.attn td.n3{background:rgba(var(--neg),.24)}.attn td.n4{background:rgba(var(--neg),.32)}
.attn td.n5{background:rgba(var(--neg),.42)}.attn td.n6{background:rgba(var(--neg),.52)}
.attn td.n7{background:rgba(var(--neg),.64)}.attn td.n8{background:rgba(var(--neg),.76)}
.attn td.n9{background:rgba(var(--neg),.88)}
@media (prefers-color-scheme:light){.attn td.p7,.attn td.p8,.attn td.p9,.attn td.n7,.attn td.n8,.attn td.n9{color:#fff}}
.attn td.mk-correct{background:rgba(40,160,80,.25)}.attn td.mk-carried{background:rgba(40,160,160,.25)}
.attn td.mk-imprecise{background:rgba(220,170,0,.3)}.attn td.mk-wrong{background:rgba(220,50,50,.35)}
.attn td.mk-missing{background:repeating-linear-gradient(135deg,transparent 0 4px,rgba(220,50,50,.3) 4px 6px)}
.attn [role=tablist]{display:flex;flex-wrap:wrap;gap:.3rem;margin:1rem 0 .3rem;border-bottom:1px solid var(--line)}
.attn [role=tab]{font:inherit;color:inherit;background:var(--panel);border:1px solid var(--line);border-bottom:none;
border-radius:6px 6px 0 0;padding:.3rem .8rem;cursor:pointer}
.attn [role=tab][aria-selected=true]{background:var(--bg);font-weight:700;border-color:var(--focus)}
.attn [role=tab]:focus-visible{outline:2px solid var(--focus)}
.attn #derivation{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.5rem .8rem;margin:1rem 0}
.attn #derivation .cur{background:var(--mark)}
.attn #derivation .bar{display:inline-block;height:.7em;background:rgba(var(--pos),.8);vertical-align:middle}
.attn #derivation .bar.neg{background:rgba(var(--neg),.8)}
.attn #derivation table{margin:.3rem 0}
.attn td .exp{color:var(--muted)}.attn .wide{overflow-x:auto;max-width:100%}.attn .wide>table{margin-bottom:.3rem}
.attn td.words{white-space:normal;text-align:left;min-width:10rem;max-width:32rem}
.attn td.stage{white-space:normal}
.attn td.words.short{min-width:6rem}
.attn .legend span{display:inline-block;min-width:3.5rem;border:1px solid var(--line);text-align:center;margin-right:.2rem}
.attn.js:not(.open) #derivation{display:none}
@media (min-width:1100px){body.attn.js.open{margin-right:30rem}
.attn.js #derivation{position:fixed;top:0;right:0;bottom:0;width:28rem;margin:0;overflow:auto;border-radius:0}}
@media (min-width:1500px){body.attn.js.open{margin-right:34rem}.attn.js #derivation{width:32rem}}
@media (max-width:1099px){body.attn.js.open{margin-bottom:47vh}
.attn.js #derivation{position:fixed;left:0;right:0;bottom:0;max-height:45vh;margin:0;overflow:auto;border-radius:0;z-index:2}}
@media print{body.attn.js,body.attn.js.open{margin:0}.attn [role=tablist],.attn #derivation{display:none}
.attn section[hidden]{display:block!important}.attn td{color:#000!important}}
""" + WHATIF_CSS

# Event delegation on the document: one handler each for the whole page, however many cells.
JS = r"""
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("attn-data").textContent);
  var panel = document.getElementById("derivation");
  document.body.classList.add("js");
  var tabs = Array.prototype.slice.call(document.querySelectorAll("[role=tab]"));
  function select(tab) {
    tabs.forEach(function (t) {
      var on = t === tab;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    });
  }
  tabs.forEach(function (t, n) {
    t.addEventListener("click", function () { select(t); });
    t.addEventListener("keydown", function (e) {
      var step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (!step) return;
      var next = tabs[(n + step + tabs.length) % tabs.length];
      select(next); next.focus(); e.preventDefault();
    });
  });
  // The tab a link names (#head-3, #part-3, #tab-3, #inputs, #all), else the first head's: the weights,
  // not the inputs.
  function named() {
    var id = decodeURIComponent(location.hash.slice(1)).replace(/^(head|part|tab)-/, "");
    return document.getElementById("tab-" + id) || document.getElementById("tab-0") || tabs[0];
  }
  if (tabs.length) select(named());
  window.addEventListener("hashchange", function () { if (tabs.length) select(named()); });

  function cellOf(e) { return e.target.closest ? e.target.closest("td[data-row]") : null; }
  var marked = [];
  function mark(c) {
    marked.forEach(function (m) { m[0].classList.remove(m[1]); });
    marked = [];
    var add = function (el, cls) { if (el) { el.classList.add(cls); marked.push([el, cls]); } };
    add(c.parentNode, "hr");
    var n = Array.prototype.indexOf.call(c.parentNode.children, c), rows = c.closest("table").rows;
    for (var r = 0; r < rows.length; r++) if (rows[r].cells[n] && rows[r].cells[n] !== c) add(rows[r].cells[n], "hc");
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function label(c, which) {
    var table = c.closest("table");
    if (which === "row") {
      var th = c.parentNode.querySelector("th");
      return th ? th.textContent : c.getAttribute("data-row");
    }
    var h = table.querySelector('thead th[data-col="' + c.getAttribute("data-col") + '"]');
    return h ? h.textContent : c.getAttribute("data-col");
  }
  function starts(line, name) {
    var t = line.trim();
    return t.indexOf(name) === 0 && /^[:= ]/.test(t.slice(name.length));
  }
  function lines(box, list, hit) {
    var pre = el("pre");
    list.forEach(function (line) {
      var span = el("span", hit && hit(line) ? "cur" : "", line);
      pre.appendChild(span); pre.appendChild(document.createTextNode("\n"));
    });
    box.appendChild(pre);
  }
  function vector(stage, h, row) {  // a row of an input table on this page, as printed; null when elided
    var cells = document.querySelectorAll('td[data-stage="' + stage + '"][data-head="' + h + '"][data-row="' + row + '"]');
    if (!cells.length || cells[0].parentNode.querySelector("td:not([data-row])")) return null;
    return Array.prototype.map.call(cells, function (c) { return c.textContent; });
  }
  function products(c) {  // every product q_d k_d of a score, from the Q and K tables (RoPE: rotated)
    var h = c.getAttribute("data-head"), rope = document.querySelector('td[data-stage="Q_rope"]') !== null;
    var q = vector(rope ? "Q_rope" : "Q", h, c.getAttribute("data-row"));
    var k = vector(rope ? "K_rope" : "K", h, c.getAttribute("data-col"));
    if (!q || !k || q.length !== k.length) return null;
    return q.map(function (x, d) { return [x, k[d], parseFloat(x) * parseFloat(k[d])]; });
  }
  function bars(box, line, c) {
    var terms = [], found = line.match(/\(-?[0-9.]+(?:e[-+]?[0-9]+)?\)\(-?[0-9.]+(?:e[-+]?[0-9]+)?\)/g) || [];
    found.forEach(function (f) {
      var m = f.match(/^\((.*)\)\((.*)\)$/);
      terms.push([m[1], m[2], parseFloat(m[1]) * parseFloat(m[2])]);
    });
    var elided = line.split("=")[0].indexOf("…") >= 0, every = elided ? products(c) : null;
    if (every) terms = every;
    if (terms.length < 2) return;
    var most = Math.max.apply(null, terms.map(function (t) { return Math.abs(t[2]); })) || 1;
    var table = el("table");
    var head = el("tr");
    ["", "q", "k", "q × k as printed", ""].forEach(function (t) { head.appendChild(el("th", "", t)); });
    table.appendChild(head);
    terms.forEach(function (t, n) {
      var tr = el("tr"), bar = el("span", t[2] < 0 ? "bar neg" : "bar");
      bar.style.width = (6 * Math.abs(t[2]) / most).toFixed(2) + "rem";
      [String(n + 1), t[0], t[1], String(+t[2].toPrecision(6))].forEach(function (x) { tr.appendChild(el("td", "", x)); });
      var td = el("td"); td.appendChild(bar); tr.appendChild(td);
      table.appendChild(tr);
    });
    box.appendChild(el("p", "note", "the products behind this score" + (every ? ", every dimension (from the tables above)" :
      elided ? " (the terms the hand calculation prints; it elides the middle of long rows)" : "")));
    box.appendChild(table);
  }
  function command(i, h) {
    return data.command + " --explain --row '#" + i + "'" + (data.heads > 1 ? " --head " + h : "");
  }
  function derive(c) {
    var stage = c.getAttribute("data-stage"), h = c.getAttribute("data-head"), i = c.getAttribute("data-row");
    var col = c.getAttribute("data-col"), key = label(c, "col"), rowName = label(c, "row");
    var box = el("div");
    var title = c.closest("table").getAttribute("data-title");
    box.appendChild(el("h2", "", stage + (h !== "" && data.heads > 1 ? " · head " + h : "") + " · row " + rowName +
      " · column " + key + " = " + c.textContent));
    box.appendChild(el("p", "note", title));
    if (c.getAttribute("data-mark")) box.appendChild(el("pre", "", c.getAttribute("data-mark")));
    if (stage === "tiles") {
      var tl = data.tiles[h + ":" + i];
      if (tl) lines(box, tl, function (l) { return l.indexOf("tile " + c.getAttribute("data-tile") + ":") === 0; });
      else box.appendChild(el("p", "note", "run " + data.command + " --tiles … --explain --row '#" + i + "'"));
      return box;
    }
    if (data.given.indexOf(stage) >= 0) { box.appendChild(el("p", "", "an input: given, not computed")); return box; }
    if (stage.indexOf("grads/") === 0) {
      box.appendChild(el("p", "", "the gradient of the loss by the input " + stage.slice(6) + ": every head's and " +
        "every query's share added up (the backward pass's d_Q, d_K and d_V steps of each row, in the head tabs)"));
      return box;
    }
    if (data.why) { box.appendChild(el("p", "note", data.why)); return box; }
    if (data.keyRows.indexOf(stage) >= 0) {  // d_K, d_V, K_rope: a key's row; every query adds its share
      box.appendChild(el("p", "note", "each query's line for key " + rowName + ":"));
      var said = false;
      Object.keys(data.rows).forEach(function (q) {
        var r = data.rows[q], s = r.heads[h] && r.heads[h].steps[stage];
        if (!s) return;
        var found = r.lines.slice(s[0], s[1]).filter(function (l) { return starts(l, rowName); });
        var first = said ? [] : [r.lines[s[0]]];  // the step's title, once
        said = true;
        if (found.length) lines(box, first.concat([r.lines[r.heads[h].span[0]]], found), function (l) { return starts(l, rowName); });
      });
      return box;
    }
    var row = data.rows[i];
    if (!row) { box.appendChild(el("p", "note", "not explained on this page (a hand calculation of this size " +
      "takes a while); run: " + command(i, h))); return box; }
    var span, hit;
    if (h === "") { span = row.final; hit = function (l) { return l.indexOf("output" + col + ":") >= 0; }; }
    else {
      var part = row.heads[h];
      span = part.steps[stage === "sum" || stage === "lse" ? "weights" : stage];
      hit = function (l) { return starts(l, key) || (stage === "output" && l.trim().indexOf("sum =") === 0); };
      if (!span) span = part.span;
    }
    if (span) {
      var list = row.lines.slice(span[0], span[1]);
      lines(box, list, hit);
      if (stage === "scores" || stage === "d_weights") {
        var line = list.filter(hit)[0];
        if (line) bars(box, line, c);
      }
      if (h !== "") {
        var all = el("details"), whole = row.heads[h].span;
        all.appendChild(el("summary", "", "the whole hand calculation of this row"));
        lines(all, row.lines.slice(whole[0], whole[1]));
        box.appendChild(all);
      }
    }
    return box;
  }
  function show(c) {
    document.querySelectorAll("td.on").forEach(function (x) { x.classList.remove("on"); });
    c.classList.add("on");
    panel.textContent = "";
    panel.appendChild(derive(c));
    document.body.classList.add("open");  // the panel takes room only once it has something to show
    var r = panel.getBoundingClientRect(), cell = c.getBoundingClientRect();
    if (r.top > window.innerHeight || r.bottom < 0) panel.scrollIntoView({block: "nearest"});
    else if (r.left < cell.right && cell.bottom > r.top) window.scrollBy(0, cell.bottom - r.top + 16);  // not under it
  }
  function focus(c) {
    var old = c.closest("table").querySelector("td[tabindex='0']");
    if (old && old !== c) old.tabIndex = -1;
    c.tabIndex = 0; c.focus();
  }
  function move(c, key) {
    var tr = c.parentNode, n = Array.prototype.indexOf.call(tr.children, c), next = null;
    var walk = function (t, dir) {
      for (t = dir > 0 ? t.nextElementSibling : t.previousElementSibling; t; t = dir > 0 ? t.nextElementSibling : t.previousElementSibling) {
        var x = t.children[n];
        if (x && x.hasAttribute("data-row")) return x;
      }
      return null;
    };
    if (key === "ArrowUp") next = walk(tr, -1);
    else if (key === "ArrowDown") next = walk(tr, 1);
    else {
      for (var x = key === "ArrowLeft" ? c.previousElementSibling : c.nextElementSibling; x;
           x = key === "ArrowLeft" ? x.previousElementSibling : x.nextElementSibling) {
        if (x.hasAttribute("data-row")) { next = x; break; }
      }
    }
    if (next) focus(next);
  }
  document.addEventListener("mouseover", function (e) { var c = cellOf(e); if (c) mark(c); });
  document.addEventListener("focusin", function (e) { var c = cellOf(e); if (c) mark(c); });
  document.addEventListener("click", function (e) { var c = cellOf(e); if (c) { focus(c); show(c); } });
  document.addEventListener("keydown", function (e) {
    var c = cellOf(e);
    if (!c) return;
    if (e.key === "Enter" || e.key === " ") { show(c); e.preventDefault(); }
    else if (/^Arrow/.test(e.key)) { move(c, e.key); e.preventDefault(); }
  });
})();
""" + WHATIF_JS
