"""attncli/hand/tile_steps.py: one query row through its tiles by hand, each step from the numbers
as rounded (the view, render/tiles.py, only lays the steps out)."""

from decimal import Decimal

from attncli.hand.tile_steps import Tile, online_softmax

NEG = float("-inf")


def test_a_row_through_two_tiles_worked_by_hand():
    """Tile 1 sees ln 2 ≈ 0.6931 and a masked key; tile 2 a larger logit 1, which rescales."""
    tiles = [Tile((0, 2), False, (0.6931, NEG), ((2.0, 0.0), (5.0, 5.0))), Tile((2, 3), True),
             Tile((3, 4), False, (1.0,), ((0.0, 1.0),))]
    walk = online_softmax(NEG, 0.0, 2, tiles, 4)
    first, skipped, last = walk.steps
    assert (first.m_old, first.m, first.alpha, first.P, first.l) == (None, Decimal("0.6931"), 0, (1, 0), 1)
    assert first.O == (2, 0) and skipped.skipped and skipped.m is None
    assert last.m_old == Decimal("0.6931") and last.m == 1
    assert last.alpha == Decimal("0.7357")  # e^(0.6931 − 1) = 0.73572…
    assert last.l == Decimal("1.7357") and last.O == (Decimal("1.4714"), Decimal("1.0000"))  # from the rounded alpha
    assert walk.output == (Decimal("0.8477"), Decimal("0.5761"))  # 1.4714 / 1.7357, 1 / 1.7357
    assert walk.lse == Decimal("1.5514")  # 1 + ln 1.7357 = 1.55141…


def test_a_row_whose_keys_are_all_masked_has_no_output():
    walk = online_softmax(NEG, 0.0, 1, [Tile((0, 2), False, (NEG, NEG), ((1.0,), (2.0,)))], 4)
    assert walk.steps[0].m is None and walk.steps[0].S_max is None
    assert walk.output is None and walk.lse is None and walk.l == 0


def test_a_sink_starts_the_row():
    walk = online_softmax(0.5, 1.0, 1, [Tile((0, 1), False, (0.5,), ((4.0,),))], 2)
    assert (walk.m0, walk.l0) == (Decimal("0.50"), Decimal("1.00"))
    assert walk.steps[0].alpha == 1 and walk.l == 2 and walk.output == (Decimal("2.00"),)
