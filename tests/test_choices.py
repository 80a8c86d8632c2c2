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
    assert set(values(learn.TableFormat)) <= set(values(compute.Format))  # compute writes every table format
    with pytest.raises(ValueError, match="docx"):
        edge.formats("Nope", "json", "docx")


# Each command with a --format, and what it needs beside it to run (csv writes one stage).
RUNS = [(compute.Format, ("compute", "samples/scooter.json", "--stages", "weights")),
        (check.CheckFormat, ("check", "samples/scooter.json", "--weights", "0.0454,0.7679,0.1867")),
        (learn.TableFormat, ("posenc", "--positions", "3", "--dim", "4")),
        (learn.SheetFormat, ("exercise", "--seed", "1"))]


@pytest.mark.parametrize("enum, args", RUNS, ids=[args[0] for _, args in RUNS])
def test_every_format_a_command_offers_it_writes(run, monkeypatch, enum, args):
    """The formats offered are the ones each command can write (not a list restated here): every
    word its --format offers runs to exit 0 with output, and a word of the family it does not offer
    is refused by name."""
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    for word in values(enum):
        result = run(*args, "--format", word)
        assert result.exit_code == 0 and result.stdout.strip(), (word, result.stderr)
    for word in (f for f in formats.names() if f not in values(enum)):
        refused = run(*args, "--format", word)
        assert refused.exit_code == 2 and f"'{word}' is not one of" in refused.stderr, (word, refused.stderr)


def test_an_option_value_is_its_word():
    assert compute.MaskedRows("uniform").value == "uniform" and compute.Format.json == "json"


def test_the_carry_choices_are_offered_in_the_order_the_readme_and_help_say_them():
    """Mutation: choices.CARRIES reordered ("rounded", "exact"). The default is written out as
    "exact" where it is used, so only the order the choices are offered in changes; the README
    (`--carry exact|rounded`) and the option's help ("exact (default; …) or rounded") say exact
    first, as the default (the README's text is now docs/reference/explain.md)."""
    from pathlib import Path

    from attncli.base import choices
    from attncli.commands import compute

    readme = Path(__file__).parent.parent.joinpath("docs", "reference", "explain.md").read_text(encoding="utf-8")
    assert f"--carry {'|'.join(choices.CARRIES)}" in readme
    assert tuple(member.value for member in compute.Carry) == choices.CARRIES
    assert choices.CARRIES[0] == "exact"  # the default the help and the README name
