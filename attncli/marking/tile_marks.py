"""Mark a learner's tile tables (`attn compute --tiles`): m, alpha, l and O per tile, with
follow-through.

The answers are what `attn compute --tiles BQ,BK --format json` writes: top-level `"tile_size":
[BQ, BK]` and per head `"tiles": [{"q_block": [start, end], "k_block": [start, end], "m": […],
"alpha": […], "l": […], "O": [[…], …]}, …]` (a one-head problem may give `"tiles"` at the top
level). Any tile and any of its four fields may be left out; other keys of a tile (S, P, m_old,
skipped) are not marked. A tile is named by its blocks, so it may be given in any order; its
blocks must be blocks of the tiling (end exclusive).

Each tile is one marked table, rows its queries, columns m, alpha, l, O_0 … (the fields given).
A cell is correct as `attn check` marks a stage (attncli/marking/grading.py); a wrong one is *carried*
when it is right from the learner's own numbers: the previous tile's m, l, O of the same query
block as written, and this tile's m as written for its alpha, P, l and O (and its alpha for l
and O). Following one's own numbers that were all correct (rounded, say) is correct. A tile the
learner did not give is followed through at its exact values. A skipped key block (every key
masked) may be given too: there m, l and O stay and alpha is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.base.errors import InputError, quote
from attncli.base.values import as_array, decimals_of, describe
from attncli.compute.tiles import attend_tiles, start, step
from attncli.marking.answers import read_written
from attncli.marking.grading import Answer, Rule, StageMark, grade, missing

FIELDS = ("m", "alpha", "l", "O")
OTHER_KEYS = ("q_block", "k_block", "skipped", "S", "P", "m_old")


@dataclass(frozen=True)
class _Running:
    """A query block's running m, l (b,) and O (b, d_v) after some tile; `sound`: every number
    behind them was marked correct."""

    m: np.ndarray
    l: np.ndarray
    O: np.ndarray
    sound: bool = True


def given_tiles(doc: dict, heads: int) -> list[list] | None:
    """Per head, the learner's list of tiles (raw JSON), or None when no head has any."""
    listed = [entry.get("tiles") if isinstance(entry, dict) else None
              for entry in (doc.get("heads") if isinstance(doc.get("heads"), list) else [])]
    listed += [None] * (heads - len(listed))
    if doc.get("tiles") is not None:
        if heads > 1:
            raise InputError(f"tiles is given at the top level, but the problem has {heads} heads: answer each "
                             'head\'s tiles in "heads": [{"tiles": [...]}, ...]', field="tiles")
        listed[0] = doc["tiles"]
    if all(t is None for t in listed):
        return None
    for h, tiles in enumerate(listed):
        if tiles is not None and not isinstance(tiles, list):
            raise InputError(f"{_prefix(heads, h)}tiles is {describe(tiles)}; expected a list of tiles",
                             field=f"{_prefix(heads, h)}tiles")
    return listed if any(listed) else None  # only empty lists: no tile answered


def tile_size(doc: dict, listed: list[list | None]) -> tuple[int, int]:
    """(BQ, BK): `tile_size`, else the blocks of the first tile given."""
    size = doc.get("tile_size")
    if size is None:
        first = next(tile for tiles in listed if tiles for tile in tiles)
        if isinstance(first, dict) and _block(first.get("q_block")) and _block(first.get("k_block")):
            (q0, q1), (k0, k1) = first["q_block"], first["k_block"]
            return q1 - q0, k1 - k0
        raise InputError('no tile_size: give "tile_size": [BQ, BK] beside the tiles', field="tile_size")
    if not (isinstance(size, list) and len(size) == 2 and all(_whole(x) and x >= 1 for x in size)):
        raise InputError(f"tile_size is {describe(size)}; expected [BQ, BK], two whole numbers of at least 1",
                         field="tile_size")
    return size[0], size[1]


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _block(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(_whole(x) for x in value)


def _prefix(heads: int, h: int) -> str:
    return f"heads[{h}]." if heads > 1 else ""


def mark_tiles(trace, doc: dict, rule: Rule = Rule(), required: bool = False,
               size: tuple[int, int] | None = None) -> dict[str, StageMark]:
    """Every tile the learner gave, keyed `tiles[q 0–2, k 2–4]` (`heads[1].tiles[…]` with
    several heads), in the order the tiles are computed. {} when the answers hold no tiles.
    `required`: every tile of every head is marked, one not given as missing, tiled by `size`
    (the problem's tile_size; else the answers')."""
    p = trace.problem
    listed = given_tiles(doc, p.heads)
    if listed is None and not required:
        return {}
    listed = listed or [None] * p.heads
    if required and size is None and doc.get("tile_size") is None and not any(listed):
        raise InputError("tiles are required, but the problem gives no tile_size to tile by", field="tiles")
    bq, bk = size if required and size is not None else tile_size(doc, listed)
    tiled = attend_tiles(p, bq, bk)
    marks = {}
    for h, tiles in enumerate(listed):
        if tiles or required:
            marks.update(_mark_head(tiled, trace, h, _by_block(tiles or [], tiled, _prefix(p.heads, h)), rule,
                                    _prefix(p.heads, h), required))
    return marks


def _by_block(tiles: list, tiled, prefix: str) -> dict[tuple, dict]:
    """The learner's tiles keyed by ((q0, q1), (k0, k1)), each checked against the tiling."""
    known = {(t.q_block, t.k_block) for t in tiled.tiles}
    found = {}
    for i, tile in enumerate(tiles):
        where = f"{prefix}tiles[{i}]"
        if not isinstance(tile, dict):
            raise InputError(f"{where} is {describe(tile)}; expected an object with q_block, k_block, m, alpha, l, O",
                             field=where)
        for key in tile:
            if key not in FIELDS + OTHER_KEYS:
                raise InputError(f"unknown key {quote(key)} in {where}; a tile has q_block, k_block, m, alpha, l, O",
                                 field=where)
        if not (_block(tile.get("q_block")) and _block(tile.get("k_block"))):
            raise InputError(f"{where} needs q_block and k_block, each [start, end] (end exclusive)", field=where)
        key = (tuple(tile["q_block"]), tuple(tile["k_block"]))
        if key not in known:
            raise InputError(f"{where} has q_block {list(key[0])}, k_block {list(key[1])}: not a tile of "
                             f"{tiled.bq},{tiled.bk} tiles (blocks start at multiples of the tile size, end "
                             "exclusive)", field=where)
        if key in found:
            raise InputError(f"{where} gives the tile q_block {list(key[0])}, k_block {list(key[1])} a second time", field=where)
        found[key] = tile
    return found


def _answer(value, field: str, shape: tuple[int, ...]) -> Answer:
    """One field of a learner's tile, shaped (b,) or (b, d_v); null or "-inf" is −∞."""
    read = read_written(read_written(value, False), True)
    values = as_array(read, field, kind="bias", max_dims=2)
    if values.shape != shape:
        found = " × ".join(map(str, values.shape)) or "one number"
        raise InputError(f"{field} has shape ({found}); expected ({' × '.join(map(str, shape))})", field=field)
    decimals = decimals_of(read, values.shape) if isinstance(read, list) else np.full(values.shape, -1)
    return Answer(values=values, decimals=decimals)


def _mark_head(tiled, trace, h: int, given: dict, rule: Rule, prefix: str,
               required: bool = False) -> dict[str, StageMark]:
    p = trace.problem
    V = tiled.V[h]  # (Lk, d_v)
    d_v = V.shape[1]
    marks = {}
    exact = learner = None
    for tile in tiled.tiles:
        rows, cols = slice(*tile.q_block), slice(*tile.k_block)
        b = rows.stop - rows.start
        if tile.k_block[0] == 0:  # a new query block: nothing seen yet (but the sink, if any)
            m0, l0, O0 = start(p, 1, b, d_v, V.dtype, head=h)
            exact = learner = _Running(m0[0], l0[0], O0[0])
        S = np.full((b, cols.stop - cols.start), -np.inf) if tile.skipped else tile.S[h]
        m, alpha, _, l, O = step(S, V[cols], exact.m, exact.l, exact.O)
        answer = given.get((tile.q_block, tile.k_block))
        name = f"{prefix}tiles[q {tile.q_block[0]}–{tile.q_block[1]}, k {tile.k_block[0]}–{tile.k_block[1]}]"
        if answer is None:  # not given: followed through at its exact values
            if required:
                whole = np.hstack([m[:, None], alpha[:, None], l[:, None], O])
                marks[name] = missing(whole, _row_labels(p, rows), ("m", "alpha", "l", *(f"O_{j}" for j in range(d_v))))
            exact = learner = _Running(m, l, O, learner.sound)
            continue
        fields = [f for f in FIELDS if answer.get(f) is not None]
        if not fields:
            raise InputError(f"{name} gives none of m, alpha, l, O", field=name)
        shapes = {"m": (b,), "alpha": (b,), "l": (b,), "O": (b, d_v)}
        answers = {f: _answer(answer[f], f"{name}.{f}", shapes[f]) for f in fields}
        expected = {"m": m, "alpha": alpha, "l": l, "O": O}
        # Follow-through: the learner's own m (then alpha) carries into the rest of this tile.
        own_m = answers["m"].values if "m" in answers else None
        own_alpha = answers["alpha"].values if "alpha" in answers else None
        running = (S, V[cols], learner.m, learner.l, learner.O)
        c_m, _, _, c_l, c_O = step(*running, m=own_m, alpha=own_alpha)
        carried = {"m": step(*running)[0], "alpha": step(*running, m=own_m)[1], "l": c_l, "O": c_O}
        cells, sound = {}, learner.sound
        for f in fields:
            ok, near = grade(answers[f].values, answers[f].decimals, expected[f], rule)
            ok2, _ = grade(answers[f].values, answers[f].decimals, carried[f], rule)
            inputs_sound = sound and all((cells[g] == "correct").all() for g in cells)  # this tile's m, alpha
            follow = "correct" if inputs_sound else "carried"
            cells[f] = np.where(ok, "correct", np.where(ok2, follow, np.where(near, "imprecise", "wrong")))
        diagnosis = _diagnose(S, V[cols], learner, own_m, answers, cells, rule)
        marks[name] = _tile_mark(answers, cells, expected, fields, b, d_v, p, rows, diagnosis, carried)
        sound = sound and all((cells[f] == "correct").all() for f in fields)
        own = {f: answers[f].values if f in answers else {"m": c_m, "l": c_l, "O": c_O}[f] for f in ("m", "l", "O")}
        exact, learner = _Running(m, l, O), _Running(own["m"], own["l"], own["O"], sound)
    return marks


# Common slips in a tile: (what the learner did, the alpha they used from m_old and m (both (b,)),
# the fields that used it; the others use the true alpha). When alpha itself is not among them, the
# alpha written may be either (computed right and then left out, or written as 1).
MISTAKES = {
    "no_rescale": ("l and O were not multiplied by alpha = e^(m_old − m) when the running max changed",
                   lambda m_old, m: np.ones_like(m), ("l", "O")),
    "l_without_alpha": ("l = l_old + rowsum P: alpha left out of the running sum (l = alpha·l_old + rowsum P), "
                        "though O was rescaled", lambda m_old, m: np.ones_like(m), ("l",)),
    "O_without_alpha": ("O = O_old + P V: alpha left out of the running output (O = alpha·O_old + P V), though "
                        "l was rescaled", lambda m_old, m: np.ones_like(m), ("O",)),
    "alpha_inverted": ("alpha was e^(m − m_old) instead of e^(m_old − m)",
                       lambda m_old, m: np.where(np.isneginf(m_old), 0.0, np.exp(m - np.where(np.isneginf(m_old), 0.0, m_old))),
                       ("alpha", "l", "O")),
}


def _predicted(S, V, learner: _Running, m, alpha_of, uses) -> dict[str, np.ndarray]:
    """alpha, l and O of a tile from the learner's running numbers and m, with `alpha_of`'s alpha in
    the fields `uses` and the true alpha in the others."""
    running = (S, V, learner.m, learner.l, learner.O)
    _, alpha, _, l, O = step(*running, m=m)
    _, wrong_alpha, _, wrong_l, wrong_O = step(*running, m=m, alpha=alpha_of(learner.m, m))
    mixed = {"alpha": (alpha, wrong_alpha), "l": (l, wrong_l), "O": (O, wrong_O)}
    return {f: pair[f in uses] for f, pair in mixed.items()} | {"either alpha": (alpha, wrong_alpha)}


def _diagnose(S, V, learner: _Running, own_m, answers, cells, rule: Rule) -> list[tuple[str, str]]:
    """(id, note) of each mistake that, recomputed from the learner's own numbers, gives every
    wrong alpha, l and O cell of the tile and contradicts none that is right."""
    fields = [f for f in ("alpha", "l", "O") if f in answers]
    if not any((cells[f] == "wrong").any() for f in fields):
        return []
    m = own_m if own_m is not None else np.maximum(learner.m, S.max(axis=-1))
    found = []
    with np.errstate(over="ignore", invalid="ignore"):
        for mistake, (text, alpha_of, uses) in MISTAKES.items():
            predicted = _predicted(S, V, learner, m, alpha_of, uses)
            near = {f: grade(answers[f].values, answers[f].decimals, predicted[f], rule)[1] for f in fields}
            if "alpha" in near and "alpha" not in uses:
                near["alpha"] = np.logical_or(*(grade(answers["alpha"].values, answers["alpha"].decimals, a, rule)[1]
                                                for a in predicted["either alpha"]))
            right = {f: (cells[f] == "correct") | (cells[f] == "carried") for f in fields}
            if all(near[f][cells[f] == "wrong"].all() and near[f][right[f]].all() for f in fields):
                found.append((mistake, f"{mistake}: {text}"))
    return found


def _tile_mark(answers, cells, expected, fields, b: int, d_v: int, p, rows: slice, diagnosis=(),
               followed=None) -> StageMark:
    """One (b, columns) marked table: the fields given side by side, O as d_v columns; `followed`:
    what the learner's own earlier numbers give, per field (shown beside a carried cell)."""
    def columns(x, f):
        return x.reshape(b, -1) if f == "O" else x.reshape(b, 1)

    values = np.hstack([columns(answers[f].values, f) for f in fields])
    decimals = np.hstack([columns(answers[f].decimals, f) for f in fields])
    names = [name for f in fields for name in ([f"O_{j}" for j in range(d_v)] if f == "O" else [f])]
    notes = ("carried: right from your own earlier numbers (the previous tile's m, l, O; this tile's m and alpha)",) \
        if any((cells[f] == "carried").any() for f in fields) else ()
    return StageMark(given=Answer(values=values, decimals=decimals),
                     cells=np.hstack([columns(cells[f], f) for f in fields]),
                     expected=np.hstack([columns(expected[f], f) for f in fields]),
                     diagnosis=tuple(m for m, _ in diagnosis), notes=notes + tuple(note for _, note in diagnosis),
                     rows=_row_labels(p, rows), columns=tuple(names),
                     followed=None if followed is None else np.hstack([columns(followed[f], f) for f in fields]))


def _row_labels(p, rows: slice) -> tuple[str, ...]:
    """A tile's query labels as given (views escape them), or the query indices."""
    return tuple(p.query_labels[rows]) if p.query_labels else tuple(map(str, range(rows.start, rows.stop)))
