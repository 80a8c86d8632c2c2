"""The page's what-if: the learner changes one input number (an entry of a head's Q, K or V, a mask
bit, the scale) and the page's script (render/page_whatif_assets.py) recomputes every stage after it
and redraws the cells, the changed ones marked. This module decides whether a page can do it and
writes what the script needs: each head's Q and each kv head's K and V at full float64 precision
(JSON numbers are `repr`, which round-trips), and what the problem adds that no edit changes, as
numpy computed it (QK-norm's weights per head, RoPE's cos and sin, the bias with ALiBi, T5's
relative bias, the visibility of every key, the sinks, W_O and b_O; X and the weights of a
projected problem when they fit, X then editable too).

The script computes in doubles in numpy's order where the order shows in the last bits (the row's
max subtracted before exp, the sink in the sum, the masked-rows policy, a × cos − b × sin); sums
over d_k, keys and W_O's rows are left to right where numpy's BLAS may pair them otherwise, which
moves a value by a few units in its last place: the browser test holds the page to numpy within
1e-12, absolute and relative.

What it recomputes is `RECOMPUTED` (the stage table's stages the script knows); a problem with any
other stage, or one of `REFUSED`'s conditions, gets the reason in one line instead of the controls.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from attncli.problem import groups, masks
from attncli.problem.rope import angles, length
from attncli.problem.trace import Trace
from attncli.render.escapes import html_text
from attncli.render.text import MINUS_INF, exact_scale, number
from attncli.stages.table import present

# The stages the page's script recomputes, in the stage table's order (its `STAGES` there).
RECOMPUTED = ("Q_normed", "K_normed", "Q_rope", "K_rope", "scores", "scaled", "capped", "biased", "masked", "weights", "output")
# The most numbers the what-if embeds (its inputs, the bias and the visibility): about 4 MB of JSON.
MOST = 200_000


class Refusal(NamedTuple):
    applies: Callable  # (trace, tiled) -> bool
    why: str  # one line: why the page cannot recompute it


REFUSED = (
    Refusal(lambda trace, tiled: tiled is not None, "the tile tables (--tiles) are not recomputed"),
    Refusal(lambda trace, tiled: any(trace.stage(s.name) is None for s in present(trace.problem)),
            "only the output was computed (in blocks)"),
    Refusal(lambda trace, tiled: trace.problem.dtype != "float64" or trace.precision is not None,
            "it recomputes float64 runs only, not a low-precision run's roundings"),
    Refusal(lambda trace, tiled: trace.gradients is not None, "the backward pass (dO) is not recomputed"),
)


def refusal(trace: Trace, tiled=None) -> str | None:
    """Why this page has no what-if, in one line; None when it has one."""
    for refused in REFUSED:
        if refused.applies(trace, tiled):
            return refused.why
    others = [s.name for s in present(trace.problem) if s.name not in RECOMPUTED]
    if others:
        return f"the stage{'s' if len(others) > 1 else ''} {', '.join(others)} {'are' if len(others) > 1 else 'is'} " \
               "not recomputed"
    if size(trace) > MOST:
        return f"the problem is too large to embed ({size(trace):,} numbers; at most {MOST:,})"
    return None


def size(trace: Trace) -> int:
    """The numbers the what-if would embed, besides W_O (as large as the page's final output table)."""
    p = trace.problem
    planes = sum(a.shape[0] for a in (masks.visible(p), masks.bias(p)) if a is not None)
    relative = p.heads if p.relative_bias is not None else 0
    group = p.heads // groups.count(p)
    return trace.Q.size + (trace.K.size + trace.V.size) // group + (planes + relative) * p.lq * p.lk


def _numbers(array) -> list:
    """An array as nested lists of floats, −∞ as null (JSON has no infinities); every value
    written by `repr`, so it reads back as the same double."""
    a = np.asarray(array, dtype=np.float64)
    return np.where(np.isneginf(a), None, a).tolist() if np.isneginf(a).any() else a.tolist()


def data(trace: Trace, precision: int, tiled=None, tables=None) -> dict:
    """What the script reads (the JSON block's "whatif"): {"why": reason} when the page has no
    what-if, else the inputs per head and what the problem adds, as numpy computed them. `tables`:
    the page's (render/page.py's Tables); W_O is embedded only when they show the final output
    (a real layer's 384 × 384 W_O is 3 MB of JSON beside a page of weights of 0.1 MB)."""
    why = refusal(trace, tiled)
    if why is not None:
        return {"why": why}
    p = trace.problem
    visible, bias = masks.visible(p), masks.bias(p)
    group = p.heads // groups.count(p)
    final = tables is None or any(isinstance(part, str) and 'data-stage="final"' in part for _, part in tables.parts)
    found = {
        "heads": p.heads, "lq": p.lq, "lk": p.lk, "group": group,
        "stages": [s.name for s in present(p)], "precision": precision, "minusInf": MINUS_INF,
        # Q (H, Lq, d_k); K and V per kv head (kv_heads, Lk, d): query head h reads kv head h // group
        "Q": trace.Q.tolist(), "K": trace.K[::group].tolist(), "V": trace.V[::group].tolist(),
        "scale": float(trace.scale), "scaleText": _scale_text(trace, precision),
        "softcap": p.softcap, "maskedRows": p.masked_rows,
        "sinks": None if p.sinks is None else p.sinks.astype(np.float64).tolist(),
        "visible": None if visible is None else visible.astype(int).tolist(),  # (1 or H, Lq, Lk), 1 = may attend
        "bias": None if bias is None else _numbers(bias),  # (1 or H, Lq, Lk), ALiBi included
        "relative": None if p.relative_bias is None else _numbers(
            p.relative_bias.bias(p.q_positions, p.k_positions, np.float64)),  # (H, Lq, Lk)
        "final": final,  # the final output is recomputed (and W_O embedded) only when the page shows it
        "WO": _numbers(p.inputs["W_O"]) if final and "W_O" in p.inputs else None,
        "bO": _numbers(p.inputs["b_O"].reshape(-1)) if final and "b_O" in p.inputs else None,
        "rope": _rope(trace),
        "proj": _projections(trace),
        "qnorm": _norm(p.q_norm, p.heads), "knorm": _norm(p.k_norm, p.heads),
    }
    return found


def _norm(norm, heads: int) -> dict | None:
    """A QK-norm as qk_norm.apply uses it: its type, eps, what it runs over, and the weight (1 +
    weight with weight_offset) and bias each query head multiplies by and adds, (H, d_k): one vector
    for every head, or each head's part (a kv head's repeated over its group)."""
    if norm is None:
        return None

    def per_head(values):
        parts = values.reshape(norm.heads, -1) if norm.parts else values[None]  # (n, d_k)
        return np.repeat(parts, heads // parts.shape[0], axis=0).tolist()  # (H, d_k)
    return {"type": norm.type, "eps": float(norm.eps), "over": norm.over, "scale": per_head(norm.scale),
            "bias": None if norm.bias is None else per_head(norm.bias)}


def _projections(trace: Trace) -> dict | None:
    """X (and X_kv), W_Q, W_K, W_V and their biases, when the problem is projected and they fit in
    MOST beside the rest: then X's entries are editable too, and Q, K, V are recomputed from them."""
    p = trace.problem
    if not p.projected or size(trace) + sum(a.size for a in p.inputs.values()) > MOST:
        return None
    names = ("X", "X_kv", "W_Q", "W_K", "W_V")
    return {name: p.inputs[name].tolist() if name in p.inputs else None for name in names} | \
        {name: p.inputs[name].reshape(-1).tolist() if name in p.inputs else None for name in ("b_Q", "b_K", "b_V")}


def _scale_text(trace: Trace, precision: int) -> str:
    """The scale as the stage titles write it: "0.7071 (1/√2)"."""
    exact = exact_scale(trace)
    return number(trace.scale, precision) + (f" ({exact})" if exact else "")


def _rope(trace: Trace) -> dict | None:
    """RoPE's pairs and each position's cos and sin (times the attention factor), as rope.rotate has them."""
    p = trace.problem
    if p.rope is None:
        return None
    found = {"pairs": [list(pair) for pair in p.rope.pairs()]}
    for name, positions in (("q", p.q_positions), ("k", p.k_positions)):
        angle = angles(p.rope, positions, length(p))  # (L, dims/2)
        cos, sin = np.cos(angle), np.sin(angle)
        if p.rope.scaling is not None:
            cos, sin = cos * p.rope.attention_factor, sin * p.rope.attention_factor
        found[name + "cos"], found[name + "sin"] = cos.tolist(), sin.tolist()
    return found


def panel(found: dict, trace: Trace) -> str:
    """The what-if's controls (or the one line saying why there are none), above the tabs."""
    head = '<section id="whatif" aria-labelledby="whatif-title"><h2 id="whatif-title">What if?</h2>'
    if "why" in found:
        return head + f'<p class="note" id="wi-why">What-if is not available on this page: {html_text(found["why"])}.</p>' \
                      "</section>"
    p = trace.problem
    options = [("Q", "Q (a query's entry)"), ("K", "K (a key's entry)"), ("V", "V (a value's entry)")]
    if found["proj"] is not None:
        options[:0] = [("X", "X (a query token's input)")] + [("X_kv", "X_kv (a key token's input)")] * ("X_kv" in p.inputs)
    if "masked" in found["stages"]:
        options.append(("mask", "mask bit (1 = the query may attend the key)"))
    options.append(("scale", "scale"))
    choice = "".join(f'<option value="{value}">{html_text(text)}</option>' for value, text in options)
    shared = " K and V are shared by each kv head's query heads: an edit changes the group's." \
        if found["group"] > 1 else ""
    projected = "" if not p.projected else \
        " An entry of X changes the projections Q = X W_Q, K and V; an entry of Q, K or V overrides its projection." \
        if found["proj"] is not None else " Q, K and V are the projections as computed (X and the weights are too " \
        "large to embed, and not editable)."
    return head + (
        '<p class="note">Change one input number and every stage after it is recomputed in this page, in float64 '
        "as attncli computes it; the changed cells are outlined. Click a Q, K, V or masked cell to pick it."
        f"{shared}{projected}</p>"
        '<form id="wi-form" autocomplete="off">'
        f'<label>entry <select id="wi-what">{choice}</select></label> '
        f'<label>head <input id="wi-head" type="number" min="0" max="{p.heads - 1}" value="0"></label> '
        '<label>row <input id="wi-row" type="number" min="0" value="0"></label> '
        '<label>column <input id="wi-col" type="number" min="0" value="0"></label> '
        '<label>value <input id="wi-value" type="text" inputmode="decimal" size="14"></label> '
        '<button type="submit" id="wi-apply">apply</button> <button type="button" id="wi-reset">reset</button>'
        '</form><p id="wi-status" class="note" aria-live="polite"></p></section>')

