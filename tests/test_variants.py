"""A logit variant is one record (attncli/problem/variants.py) plus its stage: a throwaway `temperature`
variant (key `temperature`, stage `tempered = scaled / T`), added to the registry and the stage
table and nowhere else, reaches every path: the input key and its errors, the float32 check, the
option, the full trace, the output-only path, the tiles, the backward pass, the header, the JSON
and .npz round trips, `--explain` in both carries, `--tiles`, `--cost` and `attn check`. Also: the
registry's own variants keep their words and their stages, and the records load no numpy."""

import json
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.commands import compute_options
from attncli.compute import cost
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document import schema
from attncli.document.reading import build_problem
from attncli.hand.carry import CARRIES
from attncli.hand.stage_steps import elementwise
from attncli.problem import variants
from attncli.stages import table as stages
from tests.conftest import ROOT, SCOOTER, assert_error
from tests.test_backward import finite_differences
from tests.test_explain import assert_rounded_carry, check_equations
from tests.test_stages import insert

T = 2.0  # the temperature of the throwaway problems: its hand step divides by it


def _held_by_float32(t: float) -> None:
    if t > variants.FLOAT32_MAX:
        raise InputError(f"temperature is {t:g}, which is ∞ in float32", field="temperature")


# The throwaway variant: one record, and its stage (with its vjp and hand step); nothing else.
TEMPERATURE = variants.Variant(
    "temperature", "T > 0: tempered = scaled / T",
    read=lambda value, reading: reading.number(value, "temperature", "a number > 0", above=0.0),
    line=lambda problem: f"temperature {variants.number(problem.temperature)}: tempered = scaled / T, before the mask",
    options=(variants.Flag("Temperature T > 0: tempered = scaled / T, before the mask.", "T"),),
    float32=_held_by_float32, stage="tempered", flops=1)
TEMPERED = stages.Stage(
    "tempered", "tempered = $previous / $temperature", "$previous / T, T = $temperature",
    r"\text{$previous} / $temperature",
    lambda block, x: x / x.dtype.type(block.problem.temperature),  # compute
    vjp=lambda block, x, y, d: {stages.PREVIOUS: d / block.problem.temperature},  # d x = d tempered / T
    applies=lambda problem: problem.temperature is not None, absent="this problem has no temperature",
    hand=elementwise("divide by the temperature, $previous / $temperature", "{x} / 2", lambda x: x / Decimal(2),
                     slope=lambda x, y: Decimal("0.5")))


@pytest.fixture
def temperature(monkeypatch):
    monkeypatch.setattr(variants, "VARIANTS", variants.VARIANTS + (TEMPERATURE,))
    insert(monkeypatch, TEMPERED, after="scaled")


def _problem(**more) -> dict:
    """Two heads, Lq 3, Lk 4, causal, with a bias, ALiBi, a softcap and sinks beside the temperature."""
    rng = np.random.default_rng(11)
    return {"Q": rng.normal(size=(3, 4)).tolist(), "K": rng.normal(size=(4, 4)).tolist(),
            "V": rng.normal(size=(4, 2)).tolist(), "heads": 2, "mask": "causal", "temperature": T, "softcap": 3.0,
            "alibi": [0.5, 0.25], "bias": rng.normal(size=(3, 4)).tolist(), "sinks": [0.5, -1.0], **more}


def test_the_variant_is_unknown_until_it_is_registered(run, problem_file):
    assert_error(run("compute", problem_file(_problem())), 'unknown key "temperature"')


def test_the_record_gives_the_key_its_reader_and_its_float32_check(temperature, run, problem_file):
    assert schema.key("temperature").kind == schema.INPUT
    assert build_problem(_problem()).temperature == T and build_problem(SCOOTER).temperature is None
    for value, message in ((0, "temperature is the number 0; expected a number > 0"),
                           ("hot", 'temperature is the string "hot"; expected a number > 0')):
        with pytest.raises(InputError, match=message):
            build_problem(_problem(temperature=value))
    assert_error(run("compute", problem_file(_problem(temperature=1e39, dtype="float32"))),
                 "temperature is 1e+39, which is ∞ in float32")


def test_the_record_gives_the_option(temperature):
    option = next(o for o in compute_options.variant_options() if o.name == "temperature")
    assert option.flag == "--temperature" and option.key == "temperature" and option.metavar == "T"
    assert option.read("0.5") == 0.5 and option.panel == "Variants"


def test_a_variant_with_its_record_and_stage_runs_every_path(temperature, run, tmp_path, problem_file):
    doc = _problem()
    trace = attend(build_problem(doc))
    _the_full_trace_computes_it(trace)
    _the_output_only_path_and_the_tiles_agree(build_problem(doc), trace)
    _the_backward_pass_runs_its_vjp(doc)
    _the_header_says_it(run, problem_file(doc))
    _the_json_and_the_npz_hold_it_and_read_back(run, problem_file, tmp_path, doc)
    _explain_writes_it_in_both_carries(run, problem_file, doc, trace)
    _tiles_and_cost_count_it(run, problem_file, doc, trace)
    _check_marks_it(run, tmp_path, doc, trace)


def _the_full_trace_computes_it(trace) -> None:
    assert [s.name for s in stages.present(trace.problem)] == ["scores", "scaled", "tempered", "capped", "masked",
                                                               "weights", "output"]
    np.testing.assert_array_equal(trace.tempered, trace.scaled / T)
    np.testing.assert_allclose(trace.capped, 3.0 * np.tanh(trace.tempered / 3.0), rtol=1e-15)


def _the_output_only_path_and_the_tiles_agree(problem, trace) -> None:
    for block in (1, 2, None):
        blocked = attend_output(problem, block=block)
        np.testing.assert_allclose(blocked.final, trace.final, rtol=1e-13, atol=1e-15, err_msg=str(block))
    for bq in range(1, problem.lq + 1):
        for bk in range(1, problem.lk + 1):
            np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, trace.output, rtol=0, atol=1e-13)


def _the_backward_pass_runs_its_vjp(doc) -> None:
    rng = np.random.default_rng(5)
    with_do = {**doc, "dO": rng.normal(size=(3, 2)).tolist()}
    grads = attend(build_problem(with_do)).gradients.grads
    assert set(grads) == {"Q", "K", "V", "sinks"}
    for name in grads:
        np.testing.assert_allclose(grads[name], finite_differences(with_do, name), rtol=1e-6, atol=1e-8,
                                   err_msg=name)


def _the_header_says_it(run, path) -> None:
    table = run("compute", path, "-f", "table", "--stages", "tempered")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "temperature 2: tempered = scaled / T, before the mask" in lines
    assert "tempered = scaled / 2 · head 1" in table.stdout
    latex = run("compute", path, "-f", "latex", "--stages", "tempered")
    assert latex.exit_code == 0 and r"\text{scaled} / 2" in latex.stdout, latex.stderr


def _the_json_and_the_npz_hold_it_and_read_back(run, problem_file, tmp_path, doc) -> None:
    written = run.json("compute", problem_file(doc))
    assert written["temperature"] == T and "temperature 2" not in written["mask_rule"]
    np.testing.assert_allclose(written["heads"][0]["tempered"], np.array(written["heads"][0]["scaled"]) / T)
    assert run.json("compute", problem_file(written, "again.json")) == written
    tampered = json.loads(json.dumps(written))
    tampered["heads"][1]["tempered"][0][0] += 1
    assert_error(run("compute", problem_file(tampered, "tampered.json"), "-f", "json"), "tempered")
    npz = tmp_path / "out.npz"
    assert run("compute", problem_file(doc), "-o", npz).exit_code == 0
    with np.load(npz) as archive:
        assert float(archive["temperature"]) == T and "heads/tempered" in archive.files
    assert run.json("compute", npz) == written  # the archive reads back: the same problem, its results checked


def _explain_writes_it_in_both_carries(run, problem_file, doc, trace) -> None:
    for carry in CARRIES:
        lines = run.json("compute", problem_file(doc), "--explain", "--carry", carry, "--head", "1")["explanation"]
        step = next(line for line in lines if "divide by the temperature, scaled / 2" in line)
        assert step.startswith("Step 3:")
        results, kinds = check_equations(lines)
        assert kinds["divide"] >= 2 * 3 * trace.problem.lk, kinds  # ÷ √d_k, then ÷ T: every key of every row
        if carry == "rounded":
            assert_rounded_carry(lines, results)
        else:
            assert [line for line, ok in results if not ok and "unrounded" not in line] == []
    backward = run.json("compute", problem_file({**doc, "dO": "ones"}, "backward.json"), "--explain", "--row", "2",
                        "--head", "0")["explanation"]
    assert any("through tempered, d_scores = d_tempered × ∂tempered/∂scaled" in line for line in backward)


def _tiles_and_cost_count_it(run, problem_file, doc, trace) -> None:
    tiled = run.json("compute", problem_file(doc), "--tiles", "2,3", "--stages", "tempered,output")
    assert tiled["tiled_max_difference"] < 1e-13
    assert run.json("compute", problem_file(tiled, "tiled.json"), "--tiles", "2,3",
                    "--stages", "tempered,output") == tiled
    counted = run.json("compute", problem_file(doc), "--cost")["cost"]
    cells = trace.problem.heads * trace.problem.lq * trace.problem.lk
    assert counted["naive"]["stages"]["tempered"]["flops"] == cells  # one ÷ a cell
    assert counted["tiled"]["stages"]["tempered"]["flops"] == counted["tiled"]["stages"]["scaled"]["flops"]
    assert cost.to_dict(cost.cost(trace.problem))["naive"]["stages"]["tempered"] == counted["naive"]["stages"]["tempered"]
    assert run.json("compute", problem_file({**doc, "cost": counted}, "counted.json"), "--cost")["cost"] == counted


def _check_marks_it(run, tmp_path, doc, trace) -> None:
    (tmp_path / "problem.json").write_text(json.dumps(doc))
    present = [stage.name for stage in stages.present(trace.problem)]
    right = {"heads": [{name: np.where(np.isneginf(trace.stage(name)[h]), None,
                                       np.round(trace.stage(name)[h], 6)).tolist() for name in present}
                       for h in range(trace.problem.heads)]}
    marks = _checked(run, tmp_path, right, 0)["stages"]
    assert [marks[f"heads[{h}].tempered"]["right"] for h in (0, 1)] == [12, 12]
    wrong = json.loads(json.dumps(right))
    for h, head in enumerate(wrong["heads"]):  # the temperature forgotten: scaled's numbers under tempered
        head["tempered"] = np.round(trace.scaled[h], 6).tolist()
    marks = _checked(run, tmp_path, wrong, 1)["stages"]
    for h in (0, 1):
        assert marks[f"heads[{h}].tempered"]["wrong"] == 12 and marks[f"heads[{h}].capped"]["right"] == 12


def _checked(run, tmp_path, answers: dict, code: int) -> dict:
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == code, (result.stdout, result.stderr)
    return json.loads(result.stdout)


# --- the registry's own variants -----------------------------------------------------------------

VALUES = {"softcap": 2.0, "alibi": True, "sinks": 0.5,  # a value of each, for the scooter problem (one head)
          "relative_bias": {"buckets": 4, "max_distance": 8, "bidirectional": True, "embedding": [[0.5], [-1], [2], [0]]}}

@pytest.mark.parametrize("variant", variants.VARIANTS, ids=lambda v: v.name)
def test_each_variant_brings_or_joins_its_stage_and_says_its_line(variant):
    """Given alone, a variant's stage is among the problem's, its header line is said, and its
    input keys read back to the same problem."""
    value = VALUES[variant.name]
    problem = build_problem({**SCOOTER, variant.name: value})
    assert variant.present(problem) and variant.stage in [s.name for s in stages.present(problem)]
    assert variant.line(problem) in variants.variant_lines(problem)
    echoed = variants.input_keys(problem)
    again = build_problem({**SCOOTER, **echoed})
    for name in variant.fields:
        assert np.array_equal(getattr(again, name), getattr(problem, name)), name
    assert not variant.present(build_problem(SCOOTER))


def test_every_stage_a_variant_names_is_in_the_table_and_its_flops_are_counted():
    """A variant's own stage (not in cost.COUNTS) costs its record's FLOPs on every score cell; one
    that joins the masked stage adds them there."""
    for variant in variants.VARIANTS:
        assert variant.stage in stages.names(), variant.name
        problem = build_problem({**SCOOTER, variant.name: VALUES[variant.name]})
        plain = cost.cost(build_problem({**SCOOTER, "bias": [[0, 0, 0]]})).naive
        counted, cells = cost.cost(problem).naive, problem.heads * problem.lq * problem.lk
        if variant.stage not in cost.COUNTS:
            assert counted[variant.stage].flops == variant.flops * cells, variant.name
        elif variant.stage == "masked":
            assert counted["masked"].flops - plain["masked"].flops == (variant.flops - 1) * cells, variant.name


def test_the_records_and_the_options_load_no_numpy():
    """`attn compute --help` builds the variants' options from the records before numpy loads."""
    code = ("import sys; import attncli.commands.compute_options as o; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stderr
