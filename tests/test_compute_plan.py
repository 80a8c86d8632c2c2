"""`attn compute` is parse -> plan -> run (read, check, calculate, render): compute.plan decides
from the options alone, before numpy loads; compute_run does the rest, each step on its own."""

import json
from types import SimpleNamespace

import pytest
import typer

from attncli.base.errors import InputError
from attncli.commands import compute, compute_run
from tests.conftest import SAMPLES, assert_error


def options(**given) -> SimpleNamespace:
    """compute's options at their defaults (the table's; choices as their words), with `given` laid over."""
    return compute.parse({"file": "p.json"} | given)


def plan(**given):
    return compute.plan(options(**given), stdin_is_terminal=True)


def test_only_the_output_is_computed_in_blocks_when_nothing_else_is_shown():
    assert plan(stages="output", format="json").output_only
    assert not plan(stages="output,weights", format="json").output_only
    assert not plan(format="json").output_only  # every stage by default
    assert not plan(stages="output", format="table", heatmap=True).output_only
    assert not plan(stages="output", format="table", explain=True).output_only
    assert plan(stages="output", format="json", explain=True, tiles="2,2").output_only  # the tiles explain


def test_an_output_file_decides_the_view_and_what_is_built(tmp_path):
    chosen = plan(output_file=str(tmp_path / "out.md"))
    assert (chosen.format.name, chosen.suffix) == ("markdown", ".md")
    chosen = plan(output_file=str(tmp_path / "out.npz"))
    assert (chosen.format.name, chosen.format.binary, chosen.output_only) == ("npz", True, False)
    assert plan(output_file=str(tmp_path / "out.npy")).output_only
    with pytest.raises(InputError, match="--heatmap would be lost"):  # an .npy holds no heatmap
        plan(output_file=str(tmp_path / "out.npy"), heatmap=True)
    with pytest.raises(InputError, match="is written as latex, but --format is csv"):
        plan(output_file=str(tmp_path / "out.tex"), format="csv")


def test_tiles_show_the_output_alone_unless_stages_say_more():
    assert plan(tiles="2,2", format="json").shown == ("output",)
    assert plan(tiles="2,2", format="json", do="ones").shown[:2] == ("output", "d_output")
    assert plan(tiles="2,2", format="json", stages="weights").shown == ("weights",)
    with pytest.raises(InputError, match="--format markdown holds write-up tables, not the tiles"):
        plan(tiles="2,2", format="markdown")


def test_usage_errors_come_from_the_plan():
    with pytest.raises(InputError, match="add --explain"):
        plan(carry="rounded")
    with pytest.raises(typer.BadParameter, match="writes one stage"):
        plan(format="csv")
    with pytest.raises(InputError, match="no input"):
        compute.plan(options(file=None), stdin_is_terminal=True)
    assert compute.plan(options(file=None), stdin_is_terminal=False).stdin == "-"


def test_parse_fills_the_tables_defaults_and_gives_choices_as_words():
    o = compute.parse({"format": compute.Format.json})
    assert o.format == "json" and o.precision == 4 and o.file is None and o.invert_mask is False


def test_read_lays_the_options_over_the_file_and_names_them():
    o = compute.parse({"file": str(SAMPLES / "scooter.json"), "scale": "1/2", "alibi_slopes": "0.5",
                       "rope_dims": 2})
    problem, source, doc, options = compute_run.read(o)
    assert problem.scale == 0.5 and source == str(SAMPLES / "scooter.json")
    assert doc["alibi"] == [0.5] and doc["rope"] == {"dims": 2}
    assert set(options.values()) == {"--scale", "--alibi-slopes", "--rope", "--rope-dims"}  # {key: its option}


def test_check_adds_the_gradients_and_warns_about_the_command_line():
    o = compute.parse({"q": "1;2", "k": "1;2;3", "v": "1;2;3", "mask": "causal", "do": "ones", "format": "json"})
    problem = compute_run.read(o)[0]
    shown, warnings = compute_run.check(problem, compute.plan(o, stdin_is_terminal=True), o)
    assert "d_Q" in shown and "grads" in shown
    assert len(warnings) == 1 and "causal_lower_right" in warnings[0]


def test_calculate_then_render_write_the_planned_view(capsys):
    o = compute.parse({"file": str(SAMPLES / "scooter.json"), "stages": "weights", "format": "json", "round_": 4})
    chosen = compute.plan(o, stdin_is_terminal=True)
    problem, source, doc, given = compute_run.read(o)
    shown, _ = compute_run.check(problem, chosen, o)
    trace, tiled = compute_run.calculate(problem, chosen, shown, o.full, (source, doc, given))
    assert tiled is None and trace.weights is not None
    compute_run.render(trace, tiled, shown, chosen, o)
    assert json.loads(capsys.readouterr().out)["heads"][0]["weights"] == [[0.0454, 0.7679, 0.1867]]


def test_the_output_only_plan_computes_no_weights():
    o = compute.parse({"file": str(SAMPLES / "scooter.json"), "stages": "output", "format": "json"})
    chosen = compute.plan(o, stdin_is_terminal=True)
    problem, source, doc, given = compute_run.read(o)
    trace, _ = compute_run.calculate(problem, chosen, chosen.shown, False, (source, doc, given))
    assert chosen.output_only and trace.weights is None and trace.output is not None


def test_an_output_file_is_never_one_of_the_inputs(tmp_path):
    target = tmp_path / "dO.json"
    target.write_text("[[1, 1]]", encoding="utf-8")
    with pytest.raises(Exception, match="is an input of this run"):
        plan(do=str(target), output_file=str(target))


# `--stages ""` and `--stages ,` were an IndexError (an internal error): they name no stage.
@pytest.mark.parametrize("stages", ["", ",", " , ", ",,"])
def test_stages_naming_no_stage_is_a_usage_error(run, stages):
    for fmt in ("json", "csv", "table"):
        assert_error(run("compute", SAMPLES / "scooter.json", "--stages", stages, "-f", fmt),
                     "Invalid value for --stages: names no stage; expected some of inputs,", "; see --help")
