"""compute.plan: what `attn compute` will do, decided from its options before numpy loads."""

import inspect
from types import SimpleNamespace

import pytest
import typer

from attncli.commands import compute
from attncli.errors import InputError


def options(**given) -> SimpleNamespace:
    """compute's options at their defaults (choices as their words), with `given` laid over."""
    defaults = {name: getattr(p.default, "value", p.default)
                for name, p in inspect.signature(compute.compute).parameters.items()}
    return SimpleNamespace(**defaults | {"file": "p.json"} | given)


def plan(**given):
    return compute.plan(options(**given), stdin_is_terminal=True)


def test_only_the_output_is_computed_in_blocks_when_nothing_else_is_shown():
    assert plan(stages="output", format="json").output_only
    assert not plan(stages="output,weights", format="json").output_only
    assert not plan(format="json").output_only  # every stage by default
    assert not plan(stages="output", format="json", heatmap=True).output_only
    assert not plan(stages="output", format="table", explain=True).output_only
    assert plan(stages="output", format="json", explain=True, tiles="2,2").output_only  # the tiles explain


def test_an_output_file_decides_the_view_and_what_is_built(tmp_path):
    chosen = plan(output_file=str(tmp_path / "out.md"))
    assert (chosen.format, chosen.view, chosen.written, chosen.suffix) == ("markdown", "markdown", "markdown", ".md")
    chosen = plan(output_file=str(tmp_path / "out.npz"))
    assert (chosen.view, chosen.written, chosen.output_only) == ("json", "npz", False)
    assert plan(output_file=str(tmp_path / "out.npy")).output_only
    assert not plan(output_file=str(tmp_path / "out.npy"), heatmap=True).output_only  # the heatmap needs weights
    with pytest.raises(InputError, match="is written as latex, but --format is csv"):
        plan(output_file=str(tmp_path / "out.tex"), format="csv")


def test_tiles_show_the_output_alone_unless_stages_say_more():
    assert plan(tiles="2,2", format="json").shown == ("output",)
    assert plan(tiles="2,2", format="json", do="ones").shown[:2] == ("output", "d_output")
    assert plan(tiles="2,2", format="json", stages="weights").shown == ("weights",)
    with pytest.raises(InputError, match="tables or JSON only"):
        plan(tiles="2,2", format="markdown")


def test_usage_errors_come_from_the_plan():
    with pytest.raises(InputError, match="add --explain"):
        plan(carry="rounded")
    with pytest.raises(typer.BadParameter, match="writes one stage"):
        plan(format="csv")
    with pytest.raises(InputError, match="no input"):
        compute.plan(options(file=None), stdin_is_terminal=True)
    assert compute.plan(options(file=None), stdin_is_terminal=False).stdin == "-"
