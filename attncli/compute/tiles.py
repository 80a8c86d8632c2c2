"""The tiled online softmax of FlashAttention-2's forward pass, in plain numpy, as a trace of tiles.

The queries are cut into blocks of BQ rows and the keys into blocks of BK columns. Each query
block walks the key blocks in order, keeping per row a running max m, a running sum ℓ and a
running unnormalised output O (all heads at once):

    S     = the logits tile: the stage table's stages before the softmax   (H, bq, bk)
            (scores, scaled, and capped/masked where the problem has them)
    m     = max(m_old, rowmax S)                                             (H, bq)
    alpha = e^(m_old − m)           how much the old ℓ and O shrink          (H, bq)
    P     = e^(S − m)                                                        (H, bq, bk)
    l     = alpha · l_old + rowsum P                                         (H, bq)
    O     = alpha · O_old + P V                                              (H, bq, d_v)

and at the end output = O / ℓ, lse = m + ln ℓ. Before the first tile m = −∞, ℓ = 0, O = 0; with
sinks (gpt-oss) the head's sink logit is the first one seen: m = sink, ℓ = e^0 = 1, O = 0, so the
sink is in every row's sum and max and never in O, and no row is left with ℓ = 0.
Where m and m_old are both −∞ (every key so far masked) alpha is 1 and P is 0: nothing to rescale.
A key block in which the mask rules hide every key from every query of the block (every head) is
skipped: no S, no change to m, ℓ, O. A row whose ℓ is still 0 at the end had every key masked
and follows the masked-rows policy. Blocks are [start, end) (end exclusive, as Python slices).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.base.arrays import check_finite, plain
from attncli.base.softmax import row_policy
from attncli.compute.attention import head_inputs, masked_rows_warnings, scale_of
from attncli.problem import masks
from attncli.problem.trace import Problem, frozen
from attncli.stages import table as stages


@dataclass(frozen=True, eq=False)
class Tile:
    """One (query block, key block) step; arrays for all heads, read-only. A skipped tile holds
    the block bounds only (its m, ℓ, O are the previous tile's)."""

    q_block: tuple[int, int]  # [start, end)
    k_block: tuple[int, int]  # [start, end)
    skipped: bool = False
    S: np.ndarray | None = None  # (H, bq, bk) the logits, −∞ where masked
    m_old: np.ndarray | None = None  # (H, bq) the running max before this tile
    m: np.ndarray | None = None  # (H, bq) after it
    alpha: np.ndarray | None = None  # (H, bq) e^(m_old − m)
    P: np.ndarray | None = None  # (H, bq, bk) e^(S − m)
    l: np.ndarray | None = None  # (H, bq)
    O: np.ndarray | None = None  # (H, bq, d_v), not yet divided by ℓ

    def __post_init__(self):
        for name in ("S", "m_old", "m", "alpha", "P", "l", "O"):
            object.__setattr__(self, name, frozen(getattr(self, name)))


@dataclass(frozen=True, eq=False)
class Tiles:
    """The tiles of one problem in the order they are computed (query block by query block, key
    blocks in order within each), and what they end with."""

    problem: Problem
    bq: int
    bk: int
    tiles: tuple[Tile, ...]
    output: np.ndarray  # (H, Lq, d_v) O / ℓ of each row's last tile (masked-rows policy where ℓ = 0)
    lse: np.ndarray  # (H, Lq) m + ln ℓ, −∞ where every key is masked
    V: np.ndarray  # (H, Lk, d_v), for the explanation's P V products

    def __post_init__(self):
        for name in ("output", "lse", "V"):
            object.__setattr__(self, name, frozen(getattr(self, name)))


def attend_tiles(problem: Problem, bq: int, bk: int) -> Tiles:
    """Run the tiled forward pass; raises as `attention.attend` does (overflow, masked rows)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        return _attend_tiles(problem, bq, bk)


def _attend_tiles(problem: Problem, bq: int, bk: int) -> Tiles:
    Q, K, V = head_inputs(problem)  # (H, Lq, d_k), (H, Lk, d_k), (H, Lk, d_v)
    heads, lq, _ = Q.shape
    lk, d_v = K.shape[1], V.shape[2]
    scale = scale_of(problem, Q.shape[-1])
    stages.refuse_unfused(problem)
    logits = stages.previous(problem, stages.SOFTMAX)  # the last stage before the softmax
    sinks = None if problem.sinks is None else problem.sinks.astype(Q.dtype)[:, None]  # (H, 1)
    tiles: list[Tile] = []
    output = np.empty((heads, lq, d_v), Q.dtype)
    lse = np.empty((heads, lq), Q.dtype)
    for q0 in range(0, lq, bq):
        rows = slice(q0, min(q0 + bq, lq))
        b = rows.stop - rows.start
        m, l, O = start(problem, heads, b, d_v, Q.dtype)  # running max, sum, unnormalised output
        first, stop = masks.key_span(problem, rows)  # keys outside it are hidden from every row
        for k0 in range(0, lk, bk):
            cols = slice(k0, min(k0 + bk, lk))
            bounds = ((rows.start, rows.stop), (cols.start, cols.stop))
            if _hidden(problem, rows, cols, first, stop):
                tiles.append(Tile(*bounds, skipped=True))
                continue
            block = stages.Block(problem, Q[:, rows], K[:, cols], V[:, cols], scale, rows=rows, cols=cols)
            S = stages.run(block, stop=logits)[logits]  # (H, b, c): the stage table's logits
            m_old = m
            m, alpha, P, l, O = step(S, V[:, cols], m_old, l, O)
            tiles.append(Tile(*bounds, S=S, m_old=m_old, m=m, alpha=alpha, P=P, l=l, O=O))
        # (H, b): every key masked (m = −∞ and ℓ = 0; with a sink m ≥ sink and ℓ ≥ 1: the max contributes e^0)
        _, dead, fill = row_policy(m, sinks, problem.masked_rows, lk)
        output[:, rows] = O / np.where(dead, 1.0, l)[..., None]  # 0 / 1 for a dead row
        if fill and dead.any():  # its weights are `fill` for ALL keys
            output[:, rows] = np.where(dead[..., None], np.full((heads, 1, lk), fill, Q.dtype) @ V, output[:, rows])
        lse[:, rows] = np.where(dead, -np.inf, m + np.log(np.where(dead, 1.0, l)))
    masked_rows_warnings(problem, lse == -np.inf)  # raises for masked_rows "error"; the trace has the warnings
    check_finite(output, "output = O / ℓ", ("head", "query", "column"))
    return Tiles(problem=problem, bq=bq, bk=bk, tiles=tuple(tiles), output=output, lse=lse, V=V)


def sink_logits(problem: Problem):
    """The problem's sink logits (H,), or None."""
    return problem.sinks


def start(problem: Problem, heads: int, b: int, d_v: int, dtype, head: int | None = None):
    """A query block's running (m, l, O) before its first tile, (heads, b), (heads, b), (heads,
    b, d_v): m = −∞, l = 0, O = 0; with sinks the sink is the first logit seen: m = sink,
    l = e^(sink − sink) = 1 (it is in every row's sum and never in O). `head`: that head's only."""
    sinks = sink_logits(problem)
    if sinks is None:
        m, l = np.full((heads, b), -np.inf, dtype), np.zeros((heads, b), dtype)
    else:
        chosen = sinks if head is None else sinks[head:head + 1]
        m, l = np.repeat(chosen.astype(dtype)[:, None], b, axis=1), np.ones((heads, b), dtype)
    return m, l, np.zeros((heads, b, d_v), dtype)


def step(S: np.ndarray, V: np.ndarray, m_old: np.ndarray, l_old: np.ndarray, O_old: np.ndarray,
         m: np.ndarray | None = None, alpha: np.ndarray | None = None):
    """One tile of the online softmax: S (..., b, c) the logits tile, V (..., c, d_v) its values,
    the running m_old, l_old (..., b) and O_old (..., b, d_v) → (m, alpha, P, l, O). `m` and
    `alpha`, when given, are used instead of being computed (marking follows a learner's own).
    Where m is −∞ (every key so far masked) P is 0 and alpha is 1 (nothing to rescale); where only
    m_old is, alpha = e^(−∞) = 0."""
    if m is None:
        m = np.maximum(m_old, S.max(axis=-1))  # (..., b)
    shift = row_policy(m)[0]  # m, or 0 where m = −∞: e^(−∞ − 0) = 0
    if alpha is None:
        alpha = np.where(m_old == -np.inf, np.where(m == -np.inf, 1.0, 0.0), np.exp(m_old - shift))
    P = np.exp(S - shift[..., None])  # (..., b, c)
    l = alpha * l_old + P.sum(axis=-1)  # (..., b)
    O = alpha[..., None] * O_old + P @ V  # (..., b, d_v)
    return m, alpha, P, l, O


def _hidden(problem: Problem, rows: slice, cols: slice, first: int, stop: int) -> bool:
    """Whether the mask rules hide every key of `cols` from every query of `rows`, in every head."""
    if cols.stop <= first or cols.start >= stop:
        return True
    seen = masks.visible(problem, rows, cols)  # (1 or H, b, c) bool, None = all visible
    return seen is not None and not seen.any()


def max_difference(tiles: Tiles, output: np.ndarray) -> float:
    """max |tiled output − the naive per-head output (H, Lq, d_v)|."""
    return float(np.abs(tiles.output - output).max()) if output.size else 0.0


def head_dicts(tiles: Tiles, head: int, decimals: int | None = None) -> list[dict]:
    """JSON's per-head "tiles": each tile's blocks and numbers (−∞ as null); a skipped tile has
    its blocks and `"skipped": true` only."""
    found = []
    for tile in tiles.tiles:
        item = {"q_block": list(tile.q_block), "k_block": list(tile.k_block), "skipped": tile.skipped}
        if not tile.skipped:
            for name in ("S", "m_old", "m", "alpha", "P", "l", "O"):
                item[name] = plain(getattr(tile, name)[head], decimals)
        found.append(item)
    return found
