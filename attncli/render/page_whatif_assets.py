"""The what-if's style and script (render/page_whatif.py writes its data and controls). They join
the page's own style and script (render/page_assets.py), so the Content-Security-Policy's two
hashes still cover everything that runs; the script does nothing on a page without what-if data.

The arithmetic is render/page_whatif_math.py's, a part of the same script.

`window.attnWhatIf` gives the current stages (`now()`), the original ones (`base()`), the edits
(`edits()`) and the number format (`number(x)`): the browser test reads them.

After an edit, a click on a number puts above its derivation (which is of the original numbers, and
says so) its new value and the step that made it from the edited numbers, in one line (`worked`).
"""

from attncli.render.page_whatif_math import MATH_JS

WHATIF_CSS = """
.attn #whatif{border:1px solid var(--line);border-radius:6px;padding:.2rem .8rem .5rem;margin:.8rem 0}
.attn #whatif h2{margin:.4rem 0 .2rem}.attn #whatif label{white-space:nowrap;margin-right:.4rem}
.attn #whatif input[type=number]{width:4rem}.attn #whatif .bad{color:rgb(200,40,40)}
.attn:not(.js) #wi-form{display:none}
.attn td.wi{outline:2px dashed rgb(200,40,160);outline-offset:-3px;font-weight:700}
.attn td.wi-edit{outline:3px solid rgb(200,40,160);outline-offset:-3px}
@media print{.attn #whatif{display:none}}
.attn #derivation .wi-note{border-left:4px solid rgb(200,40,160);padding-left:.5rem}
"""

WHATIF_JS = r"""
(function () {
  "use strict";
  var block = document.getElementById("attn-data"), form = document.getElementById("wi-form");
  if (!block || !form) return;  // no what-if on this page (or the line saying why)
  var status = document.getElementById("wi-status"), NEG = -Infinity, HEAT = /^(p[1-9]|n[1-9]|x)$/;
  // Read at the first use, not as the page opens: a real layer's inputs are half a megabyte of JSON.
  var W, H, LQ, LK, P, bias, relative, original, state, edits = [], cells, base, now;
  function init() {
    if (W) return;
    W = JSON.parse(block.textContent).whatif;
    H = W.heads; LQ = W.lq; LK = W.lk; P = W.precision;
    bias = W.bias && inf(W.bias); relative = W.relative && inf(W.relative);
    original = {scale: W.scale, over: [], X: W.proj && W.proj.X, X_kv: W.proj && W.proj.X_kv,
                visible: W.visible || [W.Q[0].map(function () { var r = []; for (var j = 0; j < LK; j++) r.push(1); return r; })]};
    state = copy(original);
    cells = index();
    base = now = compute(original);
  }
  var field = function (n) { return document.getElementById("wi-" + n); };
  function copy(a) {  // a deep copy of arrays and plain objects
    if (Array.isArray(a)) return a.map(copy);
    if (a === null || typeof a !== "object") return a;
    var out = {}; Object.keys(a).forEach(function (k) { out[k] = copy(a[k]); }); return out;
  }
  function inf(a) { return Array.isArray(a) ? a.map(inf) : a === null ? NEG : a; }  // JSON null: −∞

""" + MATH_JS + r"""
  // The cells the script redraws: every value cell of a stage it computes, with its text and heat class as written.
  function index() {
    var known = ["Q", "K", "V", "sum", "lse", "concat", "final"].concat(W.stages, W.proj ? ["X", "X_kv"] : []);
    return Array.prototype.filter.call(document.querySelectorAll("td[data-stage][data-row]"), function (c) {
      return known.indexOf(c.getAttribute("data-stage")) >= 0 && !c.hasAttribute("data-tile");
    }).map(function (c) {
      var h = c.getAttribute("data-head");
      return {el: c, stage: c.getAttribute("data-stage"), h: h === "" ? null : +h, i: +c.getAttribute("data-row"),
              j: c.getAttribute("data-col"), text: c.textContent,
              heat: Array.prototype.filter.call(c.classList, function (k) { return HEAT.test(k); }).join(" ")};
    });
  }
  function matrix(out, cell) {  // the (rows, columns) array a cell's table shows
    if (cell.h === null) return out[cell.stage];  // concat, final, X, X_kv
    return out[cell.stage === "sum" || cell.stage === "lse" ? "weights" : cell.stage][cell.h];
  }
  function value(out, cell) {
    if (cell.stage === "sum" || cell.stage === "lse") return out[cell.stage][cell.h][cell.i];
    return matrix(out, cell)[cell.i][+cell.j];
  }
  function same(a, b) { return a === b || (a !== a && b !== b); }

  function draw() {
    var tops = {};
    cells.forEach(function (c) {
      var v = value(now, c), was = value(base, c), el = c.el;
      // A row's sum is 1 (less with a sink) whatever the edit: its last bit moving is not a change.
      var changed = !same(v, was) && !(c.stage === "sum" && Math.abs(v - was) <= 1e-12);
      el.classList.toggle("wi", changed);
      el.textContent = changed ? number(v) : c.text;
      if (c.stage === "sum" || c.stage === "lse") return;
      var key = c.stage + ":" + c.h;
      if (!(key in tops)) tops[key] = [most(matrix(now, c), c.stage), most(matrix(base, c), c.stage)];
      var heat = c.heat;
      if (changed || tops[key][0] !== tops[key][1]) {  // else the class as written
        var blocked = now.masked && (c.stage === "masked" || c.stage === "weights") && now.masked[c.h][c.i][+c.j] === NEG;
        heat = blocked ? "x" : level(v, tops[key][0]);
      }
      Array.prototype.slice.call(el.classList).forEach(function (k) { if (HEAT.test(k)) el.classList.remove(k); });
      if (heat) heat.split(" ").forEach(function (k) { el.classList.add(k); });
    });
    document.querySelectorAll("td.wi-edit").forEach(function (el) { el.classList.remove("wi-edit"); });
    edits.forEach(function (e) {
      if (e.what === "scale") return;
      var stage = e.what === "mask" ? "masked" : e.what;
      e.heads.forEach(function (h) {
        var el = document.querySelector('td[data-stage="' + stage + '"][data-head="' + h + '"][data-row="' + e.i + '"][data-col="' + e.j + '"]');
        if (el) el.classList.add("wi-edit");
      });
    });
    document.querySelectorAll("table[data-title]").forEach(function (t) {  // the scaled tables' titles name the scale
      if (!t.querySelector('td[data-stage="scaled"]')) return;
      var h2 = t.previousElementSibling, shown = state.scale === W.scale ? W.scaleText : number(state.scale);
      if (!h2 || h2.tagName !== "H2") return;
      if (!h2.hasAttribute("data-wi")) h2.setAttribute("data-wi", h2.textContent);
      h2.textContent = h2.getAttribute("data-wi").replace(W.scaleText, shown);
    });
  }
  function keyLabel(j) {
    var th = document.querySelector('th[data-col="' + j + '"][data-key]') || document.querySelector('th[data-row="' + j + '"][data-key]');
    return th ? th.textContent : String(j);
  }
  function words(e) {  // "K · heads 0, 1 · key sat · column 1: 0.5 → 2" (labels as the page shows them: textContent)
    if (e.what === "scale") return "scale " + number(e.old) + " → " + e.value;
    var heads = (e.heads.length > 1 ? " · heads " : " · head ") + e.heads.join(", ");
    if (e.heads[0] === "") return e.what + " · " + (e.what === "X" ? "query " + rowLabel(e.i) : "key " + keyLabel(e.i)) + " · column " + e.j + ": " + e.old + " → " + e.value;
    if (e.what === "mask") return "mask bit" + heads + " · query " + rowLabel(e.i) + " → key " + keyLabel(e.j) + ": " + e.old + " → " + e.value;
    return e.what + heads + (e.what === "Q" ? " · query " + rowLabel(e.i) : " · key " + keyLabel(e.i)) + " · column " + e.j + ": " + e.old + " → " + e.value;
  }
  function apply(e) {
    var s = copy(state), heads = [e.h];
    if (e.what === "K" || e.what === "V") {  // a kv head's K and V are its group's
      var g = Math.floor(e.h / W.group) * W.group; heads = [];
      for (var h = g; h < g + W.group; h++) heads.push(h);
    }
    if (e.what === "mask") { heads = s.visible.length > 1 ? [e.h] : []; if (!heads.length) for (h = 0; h < H; h++) heads.push(h); }
    if (e.what === "X" || e.what === "X_kv") heads = [""];
    if (e.what === "scale") { e.old = s.scale; s.scale = e.value; }
    else if (e.what === "mask") { e.old = s.visible[s.visible.length > 1 ? e.h : 0][e.i][e.j]; s.visible[s.visible.length > 1 ? e.h : 0][e.i][e.j] = e.value; }
    else if (heads[0] === "") { e.old = s[e.what][e.i][e.j]; s[e.what][e.i][e.j] = e.value; }
    else { e.old = now[e.what][e.h][e.i][e.j]; s.over.push({what: e.what, h: e.h, i: e.i, j: e.j, value: e.value}); }
    e.heads = heads;
    var out = compute(s);  // throws (nothing changed) when numpy would refuse the edited problem
    state = s; now = out; edits.push(e);
    draw();
  }
  function say(text, bad) { status.textContent = text; status.classList.toggle("bad", !!bad); }
  function read() {
    var what = field("what").value, e = {what: what, h: +field("head").value, i: +field("row").value, j: +field("col").value};
    var text = field("value").value.trim().replace(/\u2212/g, "-");
    var limits = {Q: [LQ, W.Q[0][0].length], K: [LK, W.K[0][0].length], V: [LK, W.V[0][0].length], mask: [LQ, LK],
                  X: state.X && [state.X.length, state.X[0].length], X_kv: state.X_kv && [state.X_kv.length, state.X_kv[0].length]}[what];
    if (what === "X" || what === "X_kv") e.h = "";
    if (what !== "scale") {
      if (e.h !== "" && !(e.h >= 0 && e.h < H && e.h % 1 === 0)) fail("head is " + field("head").value + "; expected 0 to " + (H - 1));
      if (!(e.i >= 0 && e.i < limits[0] && e.i % 1 === 0)) fail("row is " + field("row").value + "; expected 0 to " + (limits[0] - 1));
      if (!(e.j >= 0 && e.j < limits[1] && e.j % 1 === 0)) fail("column is " + field("col").value + "; expected 0 to " + (limits[1] - 1));
    }
    if (what === "mask") {
      if (text !== "0" && text !== "1") fail("a mask bit is 1 (the query may attend the key) or 0 (masked); found " + JSON.stringify(text));
      e.value = +text;
    } else {
      e.value = text === "" ? NaN : Number(text);
      if (!isFinite(e.value)) fail("value is " + JSON.stringify(text) + "; expected a finite number");
    }
    return e;
  }
  function showing(what) {
    ["head", "row", "col"].forEach(function (n) { field(n).parentNode.hidden = what === "scale" || (n === "head" && what.charAt(0) === "X"); });
    if (what === "scale") { init(); field("value").value = String(state.scale); }
  }
  field("what").addEventListener("change", function () { showing(field("what").value); });
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    try {
      init();
      var e = read(); apply(e);
      say("recomputed: " + edits.map(words).join("; ") + ". Changed cells are outlined; reset to go back.");
    } catch (err) {
      if (!err.whatif) throw err;
      say("error: " + err.message + "; not applied", true);
    }
  });
  field("reset").addEventListener("click", function () {
    init();
    state = copy(original); edits = []; now = base; draw();
    say("reset: every number is the original again.");
  });
  showing(field("what").value);

  // A click on a Q, K, V or masked cell picks it; the derivation panel says what the edits did to the cell it explains.
  function picked(c) {
    var stage = c.getAttribute("data-stage"), h = c.getAttribute("data-head");
    var what = {Q: "Q", K: "K", V: "V", masked: "mask", X: "X", X_kv: "X_kv"}[stage];
    if (!what || (h === "") !== (what.charAt(0) === "X") || !field("what").querySelector('option[value="' + what + '"]')) return;
    init();
    var i = +c.getAttribute("data-row"), j = +c.getAttribute("data-col");
    field("what").value = what; field("head").value = h || 0; field("row").value = i; field("col").value = j;
    showing(what);
    field("value").value = what === "mask" ? String(1 - plane(state.visible, +h)[i][j]) : String(h === "" ? state[what][i][j] : now[what][+h][i][j]);
  }
  var MOST_TERMS = 8;  // a long sum shows its first terms and says how many more
  function sum(terms) {  // "(a)(b) + (c)(d) + …" of [a, b] pairs, as the hand calculation writes products
    var shown = terms.slice(0, MOST_TERMS).map(function (t) { return "(" + number(t[0]) + ")(" + number(t[1]) + ")"; });
    return shown.join(" + ") + (terms.length > MOST_TERMS ? " + … (" + (terms.length - MOST_TERMS) + " more terms)" : "");
  }
  function before(name) { return W.stages[W.stages.indexOf(name) - 1]; }
  // The clicked number worked out from the edited numbers, one line: the step that made it.
  function worked(c) {
    var h = c.h, i = c.i, j = +c.j, v = value(now, c), x, n;
    var q = now.Q_rope ? now.Q_rope[h] : now.Q[h], k = now.K_rope ? now.K_rope[h] : now.K[h];
    if (c.h === null && c.stage !== "final") return null;  // X, X_kv, concat
    if (c.stage === "Q" || c.stage === "K" || c.stage === "V") {
      var edited = state.over.some(function (e) { return e.what === c.stage && e.i === i && e.j === j && (c.stage === "Q" ? e.h === h : kv(e.h) === kv(h)); });
      if (!W.proj || edited) return edited ? "an entry you edited" : null;
      var from = c.stage === "Q" ? state.X : state.X_kv || state.X, col = (c.stage === "Q" ? h : kv(h)) * now[c.stage][h][0].length + j;
      var b = W.proj["b_" + c.stage];
      return "X · W_" + c.stage + "'s column " + col + " = " + sum(from[i].map(function (a, m) { return [a, W.proj["W_" + c.stage][m][col]]; })) +
        (b ? " + " + number(b[col]) : "") + " = " + number(v);
    }
    if (c.stage === "scores") return (now.Q_rope ? "Q_rope · K_rope" : "q · k") + " = " + sum(q[i].map(function (a, d) { return [a, k[j][d]]; })) + " = " + number(v);
    if (c.stage === "Q_rope" || c.stage === "K_rope") return null;
    if (c.stage === "sum") return "the row's weights added up = " + number(v);
    x = now[before(c.stage === "lse" ? "weights" : c.stage)];
    x = x && x[h] && x[h][i];
    if (c.stage === "scaled") return "scores · scale = " + number(x[j]) + " · " + state.scale + " = " + number(v);
    if (c.stage === "capped") return W.softcap + " · tanh(" + number(x[j]) + " / " + W.softcap + ") = " + number(v);
    if (c.stage === "biased") return number(x[j]) + " + relative bias " + number(relative[h][i][j]) + " = " + number(v);
    if (c.stage === "masked") return plane(state.visible, h)[i][j] ? number(x[j]) + (bias ? " + bias " + number(plane(bias, h)[i][j]) : "") +
      " = " + number(v) + " (the mask lets this query see this key)"
      : "−∞: the mask hides this key from this query";
    if (c.stage === "weights" || c.stage === "lse") {
      var most = NEG; x.forEach(function (y) { if (y > most) most = y; });
      var sink = W.sinks ? W.sinks[h] : null, shift = sink !== null ? Math.max(most, sink) : most, total = 0;
      if (shift === NEG) return "every key is masked for this query: " + number(v) + " (the masked-rows policy)";
      x.forEach(function (y) { total += Math.exp(y - shift); });
      if (sink !== null) total += Math.exp(sink - shift);
      var of = "Σ e^(x − " + number(shift) + ") = " + number(total) + (sink !== null ? " (the sink's e^(" + number(sink - shift) + ") included)" : "");
      if (c.stage === "lse") return "lse = " + number(shift) + " + ln " + number(total) + " = " + number(v) + ", " + of;
      return "e^(" + number(x[j]) + " − " + number(shift) + ") / " + number(total) + " = " + number(v) + ", " + of;
    }
    if (c.stage === "output") return "Σ weight · v = " + sum(now.weights[h][i].map(function (w, m) { return [w, now.V[h][m][j]]; })) + " = " + number(v);
    if (c.stage === "final" && W.WO) {
      n = sum(now.concat[i].map(function (a, m) { return [a, W.WO[m][j]]; }));
      return "concat · W_O's column " + j + " = " + n + (W.bO ? " + " + number(W.bO[j]) : "") + " = " + number(v);
    }
    return null;
  }
  function note(c) {
    var panel = document.getElementById("derivation");
    if (!edits.length || !panel) return;
    var cell = cells.filter(function (x) { return x.el === c; })[0], box = document.createElement("div");
    box.className = "wi-note";
    var say = function (tag, text) { var e = document.createElement(tag); e.textContent = text; box.appendChild(e); };
    if (!cell) say("p", "What-if: your edits do not reach this table; the derivation below is of the original numbers.");
    else {
      var v = value(now, cell), was = value(base, cell), line = worked(cell);
      say("p", same(v, was) ? "What-if: your edits leave this number as it was (" + number(v) + ")."
        : "What-if: after your edits this number is " + number(v) + " (" + v + "), was " + number(was) + ".");
      if (line) say("pre", line);
      say("p", "The derivation below is of the original numbers (reset to see them again).");
    }
    panel.insertBefore(box, panel.firstChild);
  }
  document.addEventListener("click", function (ev) {
    var c = ev.target.closest ? ev.target.closest("td[data-row]") : null;
    if (c) { picked(c); note(c); }
  });
  document.addEventListener("keydown", function (ev) {
    var c = ev.target.closest ? ev.target.closest("td[data-row]") : null;
    if (c && (ev.key === "Enter" || ev.key === " ")) { picked(c); note(c); }
  });
  window.attnWhatIf = {now: function () { init(); return now; }, base: function () { init(); return base; },
                       number: function (x) { init(); return number(x); },
                       edits: function () { return edits.map(function (e) { return {what: e.what, h: e.h, i: e.i, j: e.j, value: e.value}; }); }};
})();
"""
