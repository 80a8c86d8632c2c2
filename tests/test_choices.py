"""Choice lists are written once, in the core (attncli/base/choices.py): the command line's option
choices are made from them, and the core modules read the same tuples."""

import pytest

from attncli.base import choices
from attncli.commands import check, compute, edge, learn
from attncli.compute.attention import MASKED_ROWS_POLICY
from attncli.document import reading as problem
from attncli.hand import carry
from attncli.problem import rope, trace
from attncli.render import formats


def values(enum) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


@pytest.mark.parametrize("option, core", [
    (compute.MaskedRows, trace.MASKED_ROWS),
    (compute.Carry, carry.CARRIES),
    (compute.RopeStyle, rope.STYLES),
    (compute.DType, problem.DTYPES),
    (learn.MaskKind, choices.EXERCISE_MASKS),
])
def test_each_option_offers_exactly_the_core_choices(option, core):
    assert values(option) == tuple(core)


def test_the_core_reads_the_one_list():
    assert trace.MASKED_ROWS == choices.MASKED_ROWS and carry.CARRIES == choices.CARRIES
    assert problem.DTYPES == choices.DTYPES
    assert rope.STYLES is choices.ROPE_STYLES
    assert set(MASKED_ROWS_POLICY) <= set(choices.MASKED_ROWS)


def test_formats_are_one_family_in_one_order():
    for enum in (compute.Format, check.CheckFormat, learn.TableFormat, learn.SheetFormat):
        offered = values(enum)
        assert offered == tuple(f for f in ("auto",) + formats.names() if f in offered)
    assert values(learn.TableFormat) == ("auto", "table", "json", "markdown", "latex", "csv")
    assert values(compute.Format) == values(learn.TableFormat) + ("html", "svg")
    assert values(check.CheckFormat) == ("auto", "table", "json", "csv", "html", "gradescope")
    with pytest.raises(ValueError, match="docx"):
        edge.formats("Nope", "json", "docx")


def test_an_option_value_is_its_word():
    assert compute.MaskedRows("uniform").value == "uniform" and compute.Format.json == "json"
