"""What a marked stage earns (attncli/marking/scoring.py): its points times its share of cells right,
each slip priced once (issue 29: one slip costs once)."""

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.base.points import read_points
from attncli.marking.grading import Answer, StageMark
from attncli.marking.scoring import earned, is_required, score, slip_cost


def mark(*cells, cause=None, diagnosis=()):
    cells = np.array([cells])
    return StageMark(given=Answer(values=np.zeros(cells.shape), decimals=np.zeros(cells.shape, int)), cells=cells,
                     expected=np.zeros(cells.shape), diagnosis=diagnosis, notes=(), cause=cause)


def test_cells_right_earn_their_share():
    assert earned(mark("correct", "carried", "wrong", "wrong"), 8) == 4


def test_too_few_decimals_cost_once_whatever_the_cells():
    one = mark("correct", "correct", "correct", "imprecise")
    every = mark("imprecise", "imprecise", "imprecise", "imprecise")
    assert earned(one, 4) == earned(every, 4) == 3
    assert earned(every, 4, {"imprecise": 0.5}) == 3.5 and earned(every, 4, {"imprecise": 0}) == 4
    assert earned(mark("imprecise", "wrong", "wrong", "wrong"), 4) == 0  # never below 0
    assert slip_cost(every, {"imprecise": 0.5}) == "too few decimals cost 0.5 point once for the stage"


def test_an_early_rounding_costs_as_too_few_decimals():
    rounded = mark("correct", "wrong", "wrong", "wrong", cause="rounded_early", diagnosis=("rounded_early",))
    assert earned(rounded, 4) == 3 and earned(rounded, 4, {"imprecise": 2}) == 2


@pytest.mark.parametrize("cause", ["percent", "transposed"])
def test_percentages_and_a_transposed_stage_cost_a_fraction(cause):
    whole = mark("correct", "wrong", "wrong", "wrong", cause=cause, diagnosis=(cause,))
    assert earned(whole, 6) == 3  # half, whatever cells happen to match
    assert earned(whole, 6, {cause: 0.25}) == 4.5 and earned(whole, 6, {cause: 1}) == 0
    assert slip_cost(whole, {cause: 0.25}) == f"{cause} costs 0.25 of the stage"


def test_other_mistakes_cost_their_cells():
    assert earned(mark("correct", "wrong", cause="no_scale", diagnosis=("no_scale",)), 2) == 1
    assert slip_cost(mark("correct", "wrong", cause="no_scale")) is None


def test_a_heads_output_is_required_by_its_path_not_by_output():
    assert is_required("output", ("output",)) and not is_required("heads[0].output", ("output",))
    assert is_required("heads[0].output", ("heads[0].output",)) and not is_required("heads[1].output",
                                                                                     ("heads[0].output",))
    assert is_required("heads[1].weights", ("weights",)) and is_required("tiles[q 0–2, k 0–2]", ("tiles",))


def test_a_score_adds_the_stages_and_keeps_to_the_required():
    marks = {"weights": mark("imprecise", "imprecise", "correct"), "output": mark("correct", "wrong")}
    assert (score(marks, 0).right, score(marks, 0).max) == (3, 5)
    assert score(marks, 0, {"weights": 6, "output": 4}).right == 8 - 1
    assert score(marks, 0, None, ("output",)).max == 2


@pytest.mark.parametrize("given, fragment", [
    ("weights=2,weights=3", "given twice"), ("imprecise=-1", "from 0 to"), ("percent=1.5", "from 0 to 1"),
    ("heads[0].imprecise=1", "unknown stage"), ("weights", "is not STAGE=N"), ({"scores": True}, "above 0"),
    # '' and ',' were no points at all, without a word; an empty item was dropped
    ("", 'is ""; expected STAGE=N, comma-separated'), (" , ", "expected STAGE=N"),
    ("weights=2,,scores=1", 'is "weights=2,,scores=1": item 2 is empty; expected STAGE=N'),
])
def test_points_are_refused_naming_what_is_wrong(given, fragment):
    with pytest.raises(InputError, match=fragment):
        read_points(given)


def test_points_read_the_same_from_text_and_a_dict():
    text = read_points("scores=3, heads[1].weights=2, imprecise=0.5, percent=0")
    assert text == read_points({"scores": 3, "heads[1].weights": 2, "imprecise": 0.5, "percent": 0}) == {
        "scores": 3.0, "heads[1].weights": 2.0, "imprecise": 0.5, "percent": 0.0}
