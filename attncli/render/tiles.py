"""The tile view of `attn compute --tiles BQ,BK`: per head, each tile's tables, then O / ℓ with lse
and the largest difference from the plain output; and `--explain --tiles`, one query row through
the tiles. Views never compute: the tables read `attncli.compute.tiles.Tiles`; the explanation redoes each
step from the numbers as printed (Decimal arithmetic), so every printed equation holds.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np

from attncli.base.errors import plural
from attncli.base.rule_words import MASKED_ROWS_WORDS
from attncli.compute.tiles import Tiles, max_difference, sink_logits, start
from attncli.hand.carry import round_to
from attncli.hand.handwriting import number as written
from attncli.problem.groups import title as head_title
from attncli.problem.trace import Trace
from attncli.render.text import MINUS_INF, labels, number


def block_text(bounds: tuple[int, int], names: list[str]) -> str:
    """[0, 2) as the labels it covers: "a–b", or one label."""
    start, end = bounds
    return names[start] if end - start == 1 else f"{names[start]}–{names[end - 1]}"


def tile_parts(tiled: Tiles, trace: Trace, precision: int, heads: list[int] | None = None):
    """Yield what the tables view prints, in order: a str is a line of text (labels in it are
    already escaped by `labels`), a tuple is (title, matrix, row labels, column labels, extra
    columns) for `matrix_tables`."""
    p = tiled.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    begin = "m = −∞, l = 0, O = 0" if sink_logits(p) is None else \
        "m = the head's sink logit, l = e^(sink − m) = 1, O = 0 (the sink is in every row's sum, never in O)"
    yield (f"tiled online softmax (FlashAttention-2 forward): tiles of {plural(tiled.bq, 'query')} × {plural(tiled.bk, 'key')}; "
           f"per row, before the first tile {begin}; blocks are [start, end), end exclusive")
    for h in heads if heads is not None else range(p.heads):
        head = f" · {head_title(p, h)}" if p.heads > 1 else ""
        for n, tile in enumerate(tiled.tiles, 1):
            rows = slice(*tile.q_block)
            where = (f"tile {n}: queries {block_text(tile.q_block, queries)} [{tile.q_block[0]}, {tile.q_block[1]})"
                     f" × keys {block_text(tile.k_block, keys)} [{tile.k_block[0]}, {tile.k_block[1]}){head}")
            if tile.skipped:
                yield f"{where}: skipped, every key of the block is masked for these queries (m, l, O unchanged)"
                continue
            names = queries[rows]
            columns = keys[slice(*tile.k_block)]
            yield (f"S = logits tile · {where}", tile.S[h], names, columns,
                   (("rowmax", tile.S[h].max(axis=1)), ("m_old", tile.m_old[h]), ("m", tile.m[h]),
                    ("alpha", tile.alpha[h])))
            yield (f"P = e^(S − m), l = alpha · l_old + rowsum P · tile {n}{head}", tile.P[h], names, columns,
                   (("rowsum", tile.P[h].sum(axis=1)), ("l", tile.l[h])))
            yield (f"O = alpha · O_old + P V (unnormalised) · tile {n}{head}", tile.O[h], names, None, ())
        yield (f"output = O / l, lse = m + ln l{head}", tiled.output[h], queries, None, (("lse", tiled.lse[h]),))
    difference = max_difference(tiled, trace.stage("output"))
    yield f"max |tiled output − plain output| = {difference:.3g} (every head, every query, every column)"


def _d(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def explain_tiles(tiled: Tiles, trace: Trace, rows: list[int] | None, heads: list[int] | None,
                  places: int) -> list[str]:
    """One query row (the first of `rows`, else 0) of each head shown, through its tiles. Every
    number is rounded to `places` decimals and the next step is computed from the rounded numbers,
    as on a pocket calculator, so the printed arithmetic adds up; the end compares with the exact
    output."""
    p = tiled.problem
    row = rows[0] if rows else 0
    lines = []
    for h in heads if heads is not None else range(p.heads):
        lines += _explain_row(tiled, trace, h, row, places)
    return lines


def _explain_row(tiled: Tiles, trace: Trace, h: int, row: int, places: int) -> list[str]:
    p = tiled.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    r = lambda x: round_to(x, places)  # noqa: E731  round half even, as printed (any magnitude)
    n = lambda x: MINUS_INF if x is None else written(x, places)  # noqa: E731  e-notation when huge
    vec = lambda xs: "[" + ", ".join(n(x) for x in xs) + "]"  # noqa: E731
    head = f", {head_title(p, h)}" if p.heads > 1 else ""
    m0, l0, _ = start(p, 1, 1, tiled.V.shape[2], float, head=h)  # before the first tile; the sink, if any
    m = None if m0[0, 0] == -np.inf else r(_d(m0[0, 0]))  # None = −∞
    l = r(_d(l0[0, 0]))
    O = [Decimal(0)] * tiled.V.shape[2]
    begin = "m = −∞, l = 0, O = 0" if m is None else f"m = sink = {n(m)}, l = e^(sink − m) = {n(l)}, O = 0"
    lines = [f"query {queries[row]}{head} through the tiles (each step from the numbers as printed, "
             f"{plural(places, 'decimal')}); start: {begin}"]
    tiles = [t for t in tiled.tiles if t.q_block[0] <= row < t.q_block[1]]
    with localcontext() as context:
        context.prec = 40
        for n_tile, tile in enumerate(tiles, 1):
            names = keys[slice(*tile.k_block)]
            lines.append(f"tile {n_tile}: keys {block_text(tile.k_block, keys)} [{tile.k_block[0]}, {tile.k_block[1]})")
            if tile.skipped:
                lines.append("  skipped: every key of the block is masked for this query block; m, l, O unchanged")
                continue
            i = row - tile.q_block[0]
            S = [None if x == -np.inf else r(_d(x)) for x in tile.S[h, i]]
            lines.append("  S = " + ", ".join(f"{name}: {n(s)}" for name, s in zip(names, S)))
            finite = [s for s in S if s is not None]
            new = max([m] + finite if m is not None else finite) if finite else m
            lines.append(f"  m = max({n(m)}, {n(max(finite)) if finite else MINUS_INF}) = {n(new)}")
            if new is None:
                lines.append("  every key so far is masked: alpha = 1, P = 0, l and O stay 0")
                continue
            alpha = Decimal(0) if m is None else r((m - new).exp())
            lines.append(f"  alpha = e^({n(m)} − {n(new)}) = {n(alpha)}" if m is not None
                         else f"  alpha = e^(−∞) = {n(alpha)} (nothing to rescale yet)")
            P = [Decimal(0) if s is None else r((s - new).exp()) for s in S]
            lines.append("  P = e^(S − m): " + ", ".join(
                f"{name}: {'0 (masked)' if s is None else f'e^({n(s)} − {n(new)}) = {n(x)}'}"
                for name, s, x in zip(names, S, P)))
            l_new = r(alpha * l + sum(P))
            lines.append(f"  l = {n(alpha)} · {n(l)} + {' + '.join(n(x) for x in P)} = {n(l_new)}")
            Vt = [[r(_d(v)) for v in tiled.V[h, j]] for j in range(*tile.k_block)]
            PV = [sum(x * v[c] for x, v in zip(P, Vt)) for c in range(len(O))]
            O_new = [r(alpha * o + pv) for o, pv in zip(O, PV)]
            terms = " + ".join(f"{n(x)} · {vec(v)}" for x, v in zip(P, Vt))
            lines.append(f"  O = {n(alpha)} · {vec(O)} + {terms} = {vec(O_new)}")
            m, l, O = new, l_new, O_new
        if m is None:
            policy = MASKED_ROWS_WORDS[p.masked_rows]
            lines.append(f"every key is masked for this query: l = 0, lse = −∞; --masked-rows {p.masked_rows}: {policy}")
            return lines
        out = [r(o / l) for o in O]
        lse = r(m + l.ln())
        lines.append(f"output = O / l = {vec(O)} / {n(l)} = {vec(out)}")
        lines.append(f"lse = m + ln l = {n(m)} + ln {n(l)} = {n(lse)}")
    exact = trace.stage("output")[h, row]
    lines.append(f"exact: output = [{', '.join(number(x, places) for x in exact)}], "
                 f"lse = {number(tiled.lse[h, row], places)} (the same, up to the rounding of each printed step)")
    return lines
