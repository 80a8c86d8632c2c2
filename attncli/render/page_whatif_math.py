"""The what-if script's arithmetic (render/page_whatif_assets.py joins it into the one script, whose
variables it reads: W the embedded data, H, LQ, LK the heads, queries and keys, P the decimals,
NEG −∞, and the bias and relative bias with −∞ restored).

The script recomputes every stage from its inputs as attncli/stages/table.py's compute functions
do, in doubles: the projections X W (+ b) split into heads, QK-norm ((x − mean) · r · w + b, r =
1/√(mean + eps)), the rotation a·cos − b·sin, scores = Q Kᵀ, scaled = scores · scale, the softcap
c·tanh(x / c), the relative bias and the bias (ALiBi included) added, −∞ where a key is hidden,
the softmax as base/softmax.py's (the row's max, or the sink when larger, subtracted before exp;
the sink's e^(sink − shift) in the sum; a row whose every key is masked gets 0, 1/Lk or refuses
as the masked-rows policy says), output = weights V, the heads side by side and times W_O. A value
is shown as render/text.py's `number` writes it (fixed decimals, a tie rounded to even as Python
does, −∞ as the page's sign), its heat class as render/page.py's `_levels` gives it.
"""

MATH_JS = r"""
  function matmulT(a, b) {  // a (n, d) times b (m, d) transposed: (n, m), each sum left to right
    return a.map(function (x) { return b.map(function (y) { var s = 0; for (var d = 0; d < x.length; d++) s += x[d] * y[d]; return s; }); });
  }
  function matmul(a, b) {  // a (n, m) times b (m, c)
    var c = b.length ? b[0].length : 0;
    return a.map(function (x) {
      var out = []; for (var k = 0; k < c; k++) { var s = 0; for (var m = 0; m < x.length; m++) s += x[m] * b[m][k]; out.push(s); }
      return out;
    });
  }
  function rotate(x, cos, sin) {  // rope.rotate: (a, b) -> (a cos - b sin, b cos + a sin) on each pair
    return x.map(function (row, i) {
      var out = row.slice();
      W.rope.pairs.forEach(function (pair, n) {
        var a = row[pair[0]], b = row[pair[1]];
        out[pair[0]] = a * cos[i][n] - b * sin[i][n];
        out[pair[1]] = b * cos[i][n] + a * sin[i][n];
      });
      return out;
    });
  }
  function kv(h) { return Math.floor(h / W.group); }  // the kv head query head h reads (K and V are embedded per kv head)
  function plane(a, h) { return a[a.length > 1 ? h : 0]; }  // a (1 or H, Lq, Lk) array's plane for head h
  function rowLabel(i) {
    var th = document.querySelector('th[data-row="' + i + '"][data-query]');
    return th ? th.textContent : String(i);
  }
  function fail(message) { var e = new Error(message); e.whatif = true; throw e; }
  function finite(name, h, m, allowNeg) {
    m.forEach(function (row, i) { row.forEach(function (x, j) {
      if (x !== x || x === Infinity || (x === NEG && !allowNeg))
        fail(name + " overflows at head " + h + ", row " + i + ", column " + j + " (" + x + ")");
    }); });
  }
  function softmax(x, h, out) {  // base/softmax.py: (weights, lse) of head h's rows
    var sink = W.sinks ? W.sinks[h] : null, fill = W.maskedRows === "uniform" && sink === null ? 1 / LK : 0;
    out.weights[h] = []; out.lse[h] = []; out.sum[h] = [];
    x.forEach(function (row, i) {
      var most = NEG; row.forEach(function (v) { if (v > most) most = v; });
      var dead = most === NEG;
      if (dead && sink === null && W.maskedRows === "error")
        fail("head " + h + ": every key is masked for query " + rowLabel(i) + " (the masked-rows policy is error)");
      var shift = sink !== null ? Math.max(most, sink) : dead ? 0 : most;
      var e = row.map(function (v) { return Math.exp(v - shift); }), sums = 0;
      e.forEach(function (v) { sums += v; });
      if (sink !== null) sums += Math.exp(sink - shift);
      out.lse[h].push(shift + Math.log(sums));
      if (sink === null && dead) sums = 1;
      var w = e.map(function (v) { return fill && dead ? fill : v / sums; }), total = 0;
      w.forEach(function (v) { total += v; });
      out.weights[h].push(w); out.sum[h].push(total);
    });
  }
  // Every stage of every head from the state (Q, K, V, scale, visibility), in the stage table's order.
  function project(x, name, n) {  // head_inputs: x W (+ b), its columns split into n heads: (n, L, d)
    var P = W.proj, m = matmul(x, P["W_" + name]), b = P["b_" + name], d = m[0].length / n, out = [];
    if (b) m = m.map(function (r) { return r.map(function (v, c) { return v + b[c]; }); });
    finite("the projection " + name + " = X W_" + name, 0, m);
    for (var g = 0; g < n; g++) out.push(m.map(function (r) { return r.slice(g * d, (g + 1) * d); }));
    return out;
  }
  // Q, K and V (K and V per kv head): projected from X when the page embeds the projections, else as
  // given; then the entries edited.
  function inputs(s) {
    var kvs = H / W.group, x = s.X_kv || s.X;
    var m = W.proj ? {Q: project(s.X, "Q", H), K: project(x, "K", kvs), V: project(x, "V", kvs)} : {Q: W.Q, K: W.K, V: W.V};
    if (s.over.length) m = copy(m);
    s.over.forEach(function (e) { m[e.what][e.what === "Q" ? e.h : kv(e.h)][e.i][e.j] = e.value; });
    return m;
  }
  function normed(x, N) {  // qk_norm.apply: x (H, L, d_k) normalised per head, or over a row's every head
    function statistics(v) {  // [mean (null for rms), r = 1/√(mean(x²) + eps) or 1/√(var + eps)]
      var t = 0, s = 0, m = null;
      if (N.type === "rms") { v.forEach(function (a) { s += a * a; }); return [null, 1 / Math.sqrt(s / v.length + N.eps)]; }
      v.forEach(function (a) { t += a; }); m = t / v.length;
      v.forEach(function (a) { var c = a - m; s += c * c; });
      return [m, 1 / Math.sqrt(s / v.length + N.eps)];
    }
    var all = N.over === "all" ? x[0].map(function (row, i) {
      return statistics([].concat.apply([], x.map(function (hx) { return hx[i]; })));
    }) : null;
    return x.map(function (hx, h) {
      return hx.map(function (row, i) {
        var st = all ? all[i] : statistics(row);
        return row.map(function (a, d) {
          var o = (st[0] === null ? a : a - st[0]) * st[1] * N.scale[h][d];
          return N.bias ? o + N.bias[h][d] : o;
        });
      });
    });
  }
  function compute(s) {
    var m = inputs(s), out = {Q: m.Q, K: [], V: [], X: s.X, X_kv: s.X_kv, weights: [], lse: [], sum: []};
    for (var g = 0; g < H; g++) { out.K.push(m.K[kv(g)]); out.V.push(m.V[kv(g)]); }  // per query head, as the tables show them
    W.stages.forEach(function (name) { if (!out[name]) out[name] = []; });
    if (W.qnorm) { out.Q_normed = normed(out.Q, W.qnorm); out.Q_normed.forEach(function (m, h) { finite("Q_normed", h, m); }); }
    if (W.knorm) { out.K_normed = normed(out.K, W.knorm); out.K_normed.forEach(function (m, h) { finite("K_normed", h, m); }); }
    for (var h = 0; h < H; h++) {
      var q = out.Q[h], k = out.K[h], x = null;
      W.stages.forEach(function (name) {
        if (name === "Q_normed") { q = out.Q_normed[h]; return; }
        if (name === "K_normed") { k = out.K_normed[h]; return; }
        if (name === "Q_rope") { q = out.Q_rope[h] = rotate(q, W.rope.qcos, W.rope.qsin); finite(name, h, q); return; }
        if (name === "K_rope") { k = out.K_rope[h] = rotate(k, W.rope.kcos, W.rope.ksin); finite(name, h, k); return; }
        if (name === "scores") x = matmulT(q, k);
        else if (name === "scaled") x = x.map(function (r) { return r.map(function (v) { return v * s.scale; }); });
        else if (name === "capped") x = x.map(function (r) { return r.map(function (v) { return Math.tanh(v / W.softcap) * W.softcap; }); });
        else if (name === "biased") x = x.map(function (r, i) { return r.map(function (v, j) { return v + relative[h][i][j]; }); });
        else if (name === "masked") {
          var seen = plane(s.visible, h), add = bias && plane(bias, h);
          x = x.map(function (r, i) { return r.map(function (v, j) { return seen[i][j] ? (add ? v + add[i][j] : v) : NEG; }); });
        } else if (name === "weights") { softmax(x, h, out); x = out.weights[h]; return; }
        else if (name === "output") x = matmul(x, out.V[h]);
        else fail("the stage " + name + " is not recomputed");
        finite(name, h, x, name === "masked");
        out[name][h] = x;
      });
    }
    if (!W.final) return out;  // the page does not show it
    out.concat = []; for (var i = 0; i < LQ; i++) { var r = []; for (h = 0; h < H; h++) r = r.concat(out.output[h][i]); out.concat.push(r); }
    out.final = out.concat;
    if (W.WO) {
      out.final = matmul(out.concat, W.WO);
      if (W.bO) out.final = out.final.map(function (r) { return r.map(function (v, c) { return v + W.bO[c]; }); });
      finite("output = concat W_O", 0, out.final);
    }
    return out;
  }

  // render/text.py's number: fixed decimals (a tie to even, as Python's format), −∞ as the page writes it.
  function number(x) {
    if (x === NEG) return W.minusInf;
    if (x !== x) return "nan";
    if (x === Infinity) return "inf";
    if (Math.abs(x) >= 1e15) return scientific(x);
    var text = x.toFixed(P), exact = Math.abs(x).toFixed(Math.min(100, P + 30)), at = exact.indexOf(".") + P + 1;
    if (exact.charAt(at) === "5" && /^0*$/.test(exact.slice(at + 1))) {  // a tie: JS rounds it up, Python to even
      var kept = exact.slice(0, P ? at : at - 1);
      if (+kept.charAt(kept.length - 1) % 2 === 0) text = (x < 0 ? "-" : "") + kept;
    }
    return text.charAt(0) === "-" && +text === 0 ? text.slice(1) : text;
  }
  function scientific(x) {  // Python's f"{x:.Pe}" for |x| ≥ 1e15, from the exact digits: a tie to even
    var a = Math.abs(x), exact = a < 9007199254740992 ? a.toFixed(3) : BigInt(a).toString();  // 2^53: whole numbers beyond
    var e = exact.split(".")[0].length - 1, digits = exact.replace(".", "");
    var keep = digits.slice(0, P + 1), rest = digits.slice(P + 1);
    while (keep.length < P + 1) keep += "0";
    if (rest.charAt(0) > "5" || (rest.charAt(0) === "5" && (/[1-9]/.test(rest.slice(1)) || +keep.charAt(P) % 2))) {
      var d = keep.split(""), k = P;
      while (k >= 0 && d[k] === "9") { d[k] = "0"; k--; }
      if (k < 0) { d.unshift("1"); d.pop(); e++; } else d[k] = String(+d[k] + 1);
      keep = d.join("");
    }
    return (x < 0 ? "-" : "") + keep.charAt(0) + (P ? "." + keep.slice(1) : "") + "e+" + (e < 10 ? "0" : "") + e;
  }
  function most(m, name) {  // render/page.py's _levels: the largest finite magnitude (weights: 1)
    if (name === "weights") return 1;
    var top = 0;
    m.forEach(function (r) { r.forEach(function (v) { if (isFinite(v) && Math.abs(v) > top) top = Math.abs(v); }); });
    return top || 1;
  }
  function level(v, top) {
    if (!isFinite(v)) return "";
    var t = Math.abs(v) / top * 9, n = Math.round(t);
    if (n - t === 0.5 && n % 2) n -= 1;  // numpy's rint: a half to even
    n = Math.min(9, Math.max(0, n));
    return n ? (v < 0 ? "n" : "p") + n : "";
  }

"""
