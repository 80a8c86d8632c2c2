"""The tile view of `attn compute --tiles BQ,BK`: per head, each tile's tables, then O / ℓ with lse
and the largest difference from the plain output; and `--explain --tiles`, one query row through
the tiles. Views never compute: the tables read `attncli.compute.tiles.Tiles`; the explanation lays
out attncli/hand/tile_steps.py's walk, each step from the numbers as printed.
"""

from __future__ import annotations

from attncli.base.errors import plural
from attncli.base.rule_words import MASKED_ROWS_WORDS
from attncli.compute.tiles import Tiles, max_difference, sink_logits, start
from attncli.hand import handwriting as hw
from attncli.hand.tile_steps import Tile, TileStep, online_softmax
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
    n = lambda x: MINUS_INF if x is None else hw.number(x, places)  # noqa: E731  e-notation when huge
    vec = lambda xs: "[" + ", ".join(n(x) for x in xs) + "]"  # noqa: E731
    head = f", {head_title(p, h)}" if p.heads > 1 else ""
    m0, l0, _ = start(p, 1, 1, tiled.V.shape[2], float, head=h)  # before the first tile; the sink, if any
    tiles = [Tile(t.k_block, t.skipped, tuple(t.S[h, row - t.q_block[0]]) if not t.skipped else (),
                  tuple(map(tuple, tiled.V[h, slice(*t.k_block)])))
             for t in tiled.tiles if t.q_block[0] <= row < t.q_block[1]]
    walk = online_softmax(float(m0[0, 0]), float(l0[0, 0]), tiled.V.shape[2], tiles, places)
    begin = "m = −∞, l = 0, O = 0" if walk.m0 is None else f"m = sink = {n(walk.m0)}, l = e^(sink − m) = {n(walk.l0)}, O = 0"
    lines = [f"query {queries[row]}{head} through the tiles (each step from the numbers as printed, "
             f"{plural(places, 'decimal')}); start: {begin}"]
    for number_, step in enumerate(walk.steps, 1):
        lines.append(f"tile {number_}: keys {block_text(step.k_block, keys)} [{step.k_block[0]}, {step.k_block[1]})")
        lines += _step_lines(step, keys[slice(*step.k_block)], n, vec)
    if walk.output is None:
        policy = MASKED_ROWS_WORDS[p.masked_rows]
        lines.append(f"every key is masked for this query: l = 0, lse = −∞; --masked-rows {p.masked_rows}: {policy}")
        return lines
    lines.append(f"output = O / l = {vec(walk.O)} / {n(walk.l)} = {vec(walk.output)}")
    lines.append(f"lse = m + ln l = {n(walk.m)} + ln {n(walk.l)} = {n(walk.lse)}")
    exact = trace.stage("output")[h, row]
    lines.append(f"exact: output = [{', '.join(number(x, places) for x in exact)}], "
                 f"lse = {number(tiled.lse[h, row], places)} (the same, up to the rounding of each printed step)")
    return lines


def _step_lines(step: TileStep, names: list[str], n, vec) -> list[str]:
    """One tile's lines under its heading: S, m, alpha, P, l, O (`n`, `vec`: a number, a vector as written)."""
    if step.skipped:
        return ["  skipped: every key of the block is masked for this query block; m, l, O unchanged"]
    lines = ["  S = " + ", ".join(f"{name}: {n(s)}" for name, s in zip(names, step.S)),
             f"  m = max({n(step.m_old)}, {n(step.S_max)}) = {n(step.m)}"]
    if step.m is None:
        return lines + ["  every key so far is masked: alpha = 1, P = 0, l and O stay 0"]
    lines.append(f"  alpha = e^({n(step.m_old)} − {n(step.m)}) = {n(step.alpha)}" if step.m_old is not None
                 else f"  alpha = e^(−∞) = {n(step.alpha)} (nothing to rescale yet)")
    lines.append("  P = e^(S − m): " + ", ".join(
        f"{name}: {'0 (masked)' if s is None else f'e^({n(s)} − {n(step.m)}) = {n(x)}'}"
        for name, s, x in zip(names, step.S, step.P)))
    lines.append(f"  l = {n(step.alpha)} · {n(step.l_old)} + {' + '.join(n(x) for x in step.P)} = {n(step.l)}")
    terms = " + ".join(f"{n(x)} · {vec(v)}" for x, v in zip(step.P, step.V))
    lines.append(f"  O = {n(step.alpha)} · {vec(step.O_old)} + {terms} = {vec(step.O)}")
    return lines
