"""The online softmax of one query row through its tiles, by hand (`attn compute --explain --tiles`):
every number rounded to `places` decimals and each step computed from the numbers as rounded
(Decimal arithmetic), as on a pocket calculator, so every equation render/tiles.py prints holds.

Per tile of keys, from the running max m, sum l and unnormalised output O before it:

    m_new = max(m, max S)          alpha = e^(m − m_new)          P = e^(S − m_new)
    l_new = alpha · l + Σ P        O_new = alpha · O + Σ_j P_j V_j

and at the end output = O / l, lse = m + ln l. A masked logit is None (−∞), as is m before the
first visible key.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, localcontext

from attncli.hand.carry import round_to

PRECISION = 40  # digits of the Decimal arithmetic between roundings


@dataclass(frozen=True)
class Tile:
    """One tile of keys as the row meets it: its key block, whether every key of it is masked for
    the row's query block (skipped), the row's logits there (−∞ for a masked key) and the keys' V rows."""

    k_block: tuple[int, int]
    skipped: bool
    S: tuple[float, ...] = ()
    V: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class TileStep:
    """One tile's step, every number as rounded. `m` None: every key so far is masked (nothing else
    is computed: alpha, P, l, O stay as they were, and are None here)."""

    k_block: tuple[int, int]
    skipped: bool
    S: tuple[Decimal | None, ...] = ()  # None: masked
    m_old: Decimal | None = None
    S_max: Decimal | None = None  # the largest visible logit of the tile; None: none visible
    m: Decimal | None = None
    alpha: Decimal | None = None
    P: tuple[Decimal, ...] = ()
    l_old: Decimal | None = None
    l: Decimal | None = None
    V: tuple[tuple[Decimal, ...], ...] = ()
    O_old: tuple[Decimal, ...] = ()
    O: tuple[Decimal, ...] = ()


@dataclass(frozen=True)
class TileRow:
    """A row's start (m0 None: −∞), its steps, and the end: O / l and lse (None when every key is masked)."""

    m0: Decimal | None
    l0: Decimal
    O0: tuple[Decimal, ...]
    steps: tuple[TileStep, ...]
    m: Decimal | None
    l: Decimal
    O: tuple[Decimal, ...]
    output: tuple[Decimal, ...] | None
    lse: Decimal | None


def _d(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def online_softmax(m0: float, l0: float, width: int, tiles: list[Tile], places: int) -> TileRow:
    """One row through `tiles` from the running max `m0` (−∞, or a sink logit) and sum `l0`, with
    an output of `width` columns, each step from the numbers rounded to `places`."""
    r = lambda x: round_to(x, places)  # noqa: E731  round half even, as printed (any magnitude)
    m = first_m = None if m0 == float("-inf") else r(_d(m0))
    l = first_l = r(_d(l0))
    O = first_O = (Decimal(0),) * width
    steps = []
    output = lse = None
    with localcontext() as context:
        context.prec = PRECISION
        for tile in tiles:
            if tile.skipped:
                steps.append(TileStep(tile.k_block, True))
                continue
            S = tuple(None if x == float("-inf") else r(_d(x)) for x in tile.S)
            finite = [s for s in S if s is not None]
            S_max = max(finite) if finite else None
            new = max([m] + finite if m is not None else finite) if finite else m
            if new is None:  # every key so far is masked: m, l, O unchanged
                steps.append(TileStep(tile.k_block, False, S, m, S_max))
                continue
            alpha = Decimal(0) if m is None else r((m - new).exp())
            P = tuple(Decimal(0) if s is None else r((s - new).exp()) for s in S)
            l_new = r(alpha * l + sum(P))
            V = tuple(tuple(r(_d(v)) for v in row) for row in tile.V)
            PV = [sum(x * v[c] for x, v in zip(P, V)) for c in range(width)]
            O_new = tuple(r(alpha * o + pv) for o, pv in zip(O, PV))
            steps.append(TileStep(tile.k_block, False, S, m, S_max, new, alpha, P, l, l_new, V, O, O_new))
            m, l, O = new, l_new, O_new
        if m is not None:
            output = tuple(r(o / l) for o in O)
            lse = r(m + l.ln())
    return TileRow(first_m, first_l, first_O, tuple(steps), m, l, O, output, lse)
