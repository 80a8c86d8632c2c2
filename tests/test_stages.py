"""The stage table (attncli/stages/table.py) is the one place a stage is defined: a throwaway stage added
to it (and its name to attncli/base/names.py, which a test holds equal to the table) reaches the trace,
the output-only path, the tiles, the JSON and its read-back, the tables and exports, `--explain`,
the backward pass and the answer keys of `attn check` (test_a_stage_with_its_compute_vjp_and_hand_
step_runs_every_path runs them all on one stage); a path that cannot handle a stage refuses it by
name; records are frozen and their arrays read-only."""

import dataclasses
import itertools
import json
import re
from decimal import Decimal

import numpy as np
import pytest

from attncli.base import names
from attncli.base.errors import AttnError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.hand.carry import CARRIES
from attncli.hand.stage_steps import elementwise
from attncli.marking.mistakes import MISTAKES, step
from attncli.render.explain import explain
from attncli.stages import grads
from attncli.stages import table as stages
from tests.conftest import SAMPLES, SCOOTER, assert_error
from tests.test_backward import finite_differences
from tests.test_explain import NOTE, NUM, assert_rounded_carry, check_equations
from tests.test_explain_backward import assert_carried

CAUSAL = {"Q": [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
          "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": "causal"}

# A throwaway stage between scaled and masked: the entry and its compute function, nothing else.
DOUBLED = stages.Stage("doubled", "doubled = $previous · 2", "$previous · 2", r"\text{$previous} \cdot 2",
                       lambda block, x: x * 2)


def insert(monkeypatch, stage, after="scaled"):
    """Add `stage` to the table after `after`, and its name to attncli/base/names.py (the commands'
    numpy-free copy of the names, held equal to the table below)."""
    table = list(stages.STAGES)
    table.insert(stages.names().index(after) + 1, stage)
    monkeypatch.setattr(stages, "STAGES", tuple(table))
    monkeypatch.setattr(names, "STAGES", stages.names())


def test_the_commands_names_are_the_tables():
    assert names.STAGES == stages.names()
    assert names.GRADIENTS == grads.names() and names.GRADS == grads.GRADS


@pytest.fixture
def doubled(monkeypatch):
    insert(monkeypatch, DOUBLED)


@pytest.fixture
def doubled_with_vjp(monkeypatch):
    """The throwaway stage with its vector-Jacobian product: d x = 2 · d doubled."""
    insert(monkeypatch, dataclasses.replace(DOUBLED, vjp=lambda block, x, y, d: {"x": 2 * d}))


@pytest.mark.parametrize("doc", [SCOOTER, CAUSAL])
def test_an_added_stage_is_computed_in_the_trace_and_read_by_the_next(doubled, doc):
    trace = attend(build_problem(doc))
    np.testing.assert_array_equal(trace.stage("doubled"), 2 * trace.stage("scaled"))
    logits = trace.stage("masked") if "mask" in doc else trace.stage("doubled")
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(trace.stage("weights"), e / e.sum(axis=-1, keepdims=True), rtol=1e-15)
    blocked = attend_output(build_problem(doc), block=1)  # the output-only path runs it too
    np.testing.assert_allclose(blocked.final, trace.final, rtol=1e-14)


def test_an_added_stage_is_in_the_json_and_the_tables(doubled, run, problem_file):
    path = problem_file(CAUSAL)
    doc = run.json("compute", path)
    present = [s.name for s in stages.present(build_problem(CAUSAL))]  # the table's order, doubled after scaled
    assert present.index("doubled") == present.index("scaled") + 1
    assert list(doc["heads"][0]) == ["Q", "K", "V", *present, "lse"]
    assert np.allclose(doc["heads"][0]["doubled"], 2 * np.array(doc["heads"][0]["scaled"]))
    table = run("compute", path, "--format", "table", "--stages", "doubled,weights")
    assert table.exit_code == 0, table.stderr
    assert "doubled = scaled · 2" in table.stdout and "weights = softmax(masked) over keys" in table.stdout
    markdown = run("compute", path, "--format", "markdown", "--stages", "doubled")
    assert "scaled · 2" in markdown.stdout


def test_an_added_stage_is_an_answer_key_of_check(doubled, run, tmp_path, problem_file):
    problem = problem_file(SCOOTER)
    trace = attend(build_problem(SCOOTER))
    right = np.round(trace.stage("doubled")[0], 4).tolist()
    (tmp_path / "a.json").write_text(json.dumps({"doubled": right}))
    result = run("check", tmp_path / "a.json", problem, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["stages"]["doubled"]["right"] == 3
    (tmp_path / "b.json").write_text(json.dumps({"doubled": [1, 2, 3]}))
    assert run("check", tmp_path / "b.json", problem, "--format", "json").exit_code == 1


def test_without_the_entry_the_stage_is_unknown(run, tmp_path, problem_file):
    (tmp_path / "a.json").write_text(json.dumps({"doubled": [1, 2, 3]}))
    result = run("check", tmp_path / "a.json", problem_file(SCOOTER))
    assert result.exit_code == 2 and "doubled" in result.stderr


def test_the_softmax_reads_the_stage_before_it():
    assert stages.previous(build_problem(SCOOTER), "weights") == "scaled"
    assert stages.previous(build_problem(CAUSAL), "weights") == "masked"
    assert [s.name for s in stages.logits(build_problem(CAUSAL))] == ["scores", "scaled", "masked"]


def test_every_mistake_replaces_a_stage_of_the_table():
    for mistake in MISTAKES.values():
        assert mistake.stage in stages.names()


def test_a_mistake_is_the_stage_computed_by_its_replacement():
    trace = attend(build_problem(CAUSAL))
    scaled = trace.stage("scaled")[0]
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled), trace.stage("masked")[0])
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled, "mask_ignored"), scaled)
    upper = np.triu(np.ones((3, 3), bool))  # mask_transposed: each query keeps the later keys
    np.testing.assert_array_equal(step(trace, 0, "masked", scaled, "mask_transposed"),
                                  np.where(upper, scaled, -np.inf))


def test_trace_and_problem_arrays_are_read_only():
    trace = attend(build_problem(CAUSAL))
    with pytest.raises(ValueError, match="read-only"):
        trace.stage("weights")[0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        trace.problem.inputs["Q"][0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        trace.final[0, 0] = 1.0
    with pytest.raises(TypeError):
        trace.stages["weights"] = None
    with pytest.raises(TypeError):
        trace.problem.inputs["Q"] = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.scale = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.problem.heads = 2


def test_records_compare_by_identity_never_by_array_equality():
    a, b = attend(build_problem(SCOOTER)), attend(build_problem(SCOOTER))
    assert a == a and a != b and a.problem != b.problem  # no array __eq__, no "truth value is ambiguous"


def test_freezing_leaves_the_callers_arrays_writable():
    Q = np.array([[0.0, 4.0]])
    problem = build_problem(dict(SCOOTER, Q=Q))
    assert not problem.inputs["Q"].flags.writeable
    Q[0, 0] = 1.0  # the caller's own array is theirs to change


# --- the hand calculation (`--explain`) reads the table too ----------------------------------------

@pytest.fixture
def doubled_by_hand(monkeypatch):
    """The doubled stage with its hand-calculation step: x × 2 on each key's printed number."""
    insert(monkeypatch, dataclasses.replace(DOUBLED, hand=elementwise("double, $previous × 2", "{x} × 2",
                                                                      lambda x: x * 2)))


def _exponents(lines: list[str]) -> list[str]:
    """The printed exponents of the softmax's e^x terms (x, or x − shift), in key order."""
    line = next(line for line in lines if line.startswith("  e^"))
    return [m[0] or m[1] for m in re.findall(rf"e\^(?:\(({NUM}) − {NUM}\)|({NUM})) = ", line)]


@pytest.mark.parametrize("carry", CARRIES)
@pytest.mark.parametrize("doc", [SCOOTER, CAUSAL], ids=["no mask", "causal"])
def test_an_added_stage_is_explained_and_every_equation_holds(doubled_by_hand, doc, carry):
    trace = attend(build_problem(doc))
    rows = list(range(trace.problem.lq))
    lines = explain(trace, rows, carry=carry)
    text = "\n".join(lines)
    assert "Step 3: double, scaled × 2" in text
    scaled, doubled = trace.stage("scaled")[0, 0], trace.stage("doubled")[0, 0]
    assert f"  0: {scaled[0]:.4f} × 2 = {doubled[0]:.4f}" in lines or carry == "rounded"
    results, kinds = check_equations(lines)
    assert kinds["scale"] >= len(rows) * trace.problem.lk  # every doubled key was parsed and checked
    # The softmax reads the doubled numbers as printed (through the mask, which keeps them).
    start = lines.index("Step 3: double, scaled × 2")
    doubled_lines = lines[start + 1:start + 1 + trace.problem.lk]
    visible = trace.stage(stages.previous(trace.problem, "weights"))[0, 0] != -np.inf
    assert _exponents(lines) == [NOTE.sub("", line).rsplit(" = ", 1)[1] for line, ok in zip(doubled_lines, visible) if ok]
    if carry == "rounded":
        assert_rounded_carry(lines, results)
    else:
        assert [line for line, ok in results if not ok and "unrounded" not in line] == []
        # The softmax reads the doubled numbers (masked: doubled with −∞), as the trace does, and
        # prints the trace's weights: not `scaled`'s exponentials under the doubled weights.
        logits = trace.stage(stages.previous(trace.problem, "weights"))[0, 0]
        assert _exponents(lines) == [f"{x:.4f}" for x in logits if x != -np.inf]
        assert f"= {trace.stage('weights')[0, 0, 0]:.4f} (" in text


def test_an_added_stage_without_a_hand_step_is_refused_by_explain(doubled, run, problem_file):
    trace = attend(build_problem(SCOOTER))
    with pytest.raises(AttnError, match='"doubled"'):
        explain(trace)
    assert_error(run("compute", problem_file(SCOOTER), "--explain"), '"doubled"')


def test_the_backward_narration_refuses_a_stage_it_does_not_cover(monkeypatch, run, problem_file):
    # The stage has its vjp (the gradients are right) and a forward hand step, but no backward one.
    insert(monkeypatch, dataclasses.replace(DOUBLED, vjp=lambda block, x, y, d: {"x": 2 * d},
                                            hand=elementwise("double, $previous × 2", "{x} × 2", lambda x: x * 2)))
    result = run("compute", problem_file(SCOOTER), "--explain", "--do", "1,0")
    assert_error(result, '"doubled"')


def _narrated(after: str = "scaled"):
    """The doubled stage with its vjp and both halves of its hand step, inserted after `after`."""
    hand = elementwise("double, $previous × 2", "{x} × 2", lambda x: x * 2, slope=lambda x, y: Decimal(2))
    return dataclasses.replace(DOUBLED, vjp=lambda block, x, y, d: {"x": 2 * d}, hand=hand)


def _backward_step(lines: list[str], header: str) -> list[str]:
    """The key lines of the backward step `header`."""
    return list(itertools.takewhile(lambda line: line.startswith("  "), lines[lines.index(header) + 1:]))


@pytest.mark.parametrize("carry", CARRIES)
@pytest.mark.parametrize("masked, variants", [(False, False), (True, False), (True, True)])
def test_an_added_stage_is_narrated_backward_and_every_equation_holds(monkeypatch, masked, variants, carry):
    insert(monkeypatch, _narrated())
    trace = attend(build_problem(_problem(masked, variants)))
    lines = explain(trace, list(range(trace.problem.lq)), carry=carry)
    kinds = assert_carried(lines, carry)
    header = next(line for line in lines if "through doubled" in line)
    assert header == ("Step B3′′: " if variants else "Step B3′: ") + "through doubled, d_scores = d_doubled × ∂doubled/∂scaled"
    assert kinds["slope"] >= trace.problem.lq * trace.problem.heads * trace.problem.lk
    if carry == "exact":  # the step's results are the tables' d_scores
        for h in range(trace.problem.heads):
            for i in range(trace.problem.lq):
                one = explain(trace, [i], heads=[h], carry=carry)
                step = _backward_step(one, next(line for line in one if "through doubled" in line))
                assert [NOTE.sub("", line).rsplit(" = ", 1)[1] for line in step] == \
                    [f"{x:.4f}" for x in trace.gradients.heads["d_scores"][h, i]]


@pytest.mark.parametrize("carry", CARRIES)
def test_a_stage_between_scores_and_scaled_gets_the_scale_per_key(monkeypatch, carry):
    """The scale is applied once to the sums when the scores' step comes next; with a stage
    between, the scaled stage writes its own step per key and the sums take no factor."""
    insert(monkeypatch, _narrated(), after="scores")
    trace = attend(build_problem(_problem(True)))
    lines = explain(trace, [2], heads=[1], carry=carry)
    kinds = assert_carried(lines, carry)
    by = "√2" if carry == "rounded" else "1.4142"  # rounded carry divides by √d_k itself
    assert f"Step B3′: through the scale, d_doubled = d_scores / {by}" in lines
    # The raw scores' gradient is not the tables' d_scores (the scaled scores'): it is named apart.
    assert "Step B3′′: through doubled, d_raw_scores = d_doubled × ∂doubled/∂scores" in lines
    assert "Step B4: d_q = Σ_j d_raw_scores_j k_j" in lines and kinds["slope"] == 2 * trace.problem.lk
    d_q = next(line for line in lines if line.startswith("  d_q = "))
    assert d_q == "  d_q = [" + ", ".join(f"{x:.4f}" for x in trace.gradients.heads["d_Q"][1, 2]) + "]" or carry == "rounded"


@pytest.mark.parametrize("carry", CARRIES)
def test_a_stage_after_the_softmax_is_narrated_and_D_is_the_weights_sum(monkeypatch, carry):
    """A stage between weights and output: dO · output is not D then, so the softmax's step writes
    D = Σ_j weight_j × d_weights_j, which is the tables' D."""
    hand = elementwise("halve, $previous / 2", "{x} × 0.5", lambda x: x / 2, slope=lambda x, y: Decimal("0.5"))
    halved = stages.Stage("halved", "halved = weights / 2", "weights / 2", r"\text{weights} / 2",
                          lambda block, x: x / 2, vjp=lambda block, x, y, d: {stages.PREVIOUS: d / 2}, hand=hand)
    insert(monkeypatch, halved, after="weights")
    trace = attend(build_problem(_problem(True)))
    lines = explain(trace, [1], heads=[0], carry=carry)
    assert_carried(lines, carry)
    assert "Step B1: d_halved = dO · v  (how the loss moves with each weight)" in lines
    assert "Step B1′: through halved, d_weights = d_halved × ∂halved/∂weights" in lines
    D = lines[lines.index("Step B2: D = Σ_j weight_j × d_weights_j") + 1]
    assert NOTE.sub("", D).endswith(f" = {trace.gradients.heads['D'][0, 1]:.4f}") or carry == "rounded"


def test_every_stage_of_the_table_has_its_hand_step():
    assert [stage.name for stage in stages.STAGES if stage.hand is None] == []
    assert [stage.name for stage in stages.STAGES if not stage.hand.backward] == []  # the narration covers them


@pytest.mark.parametrize("carry", CARRIES)
def test_an_added_stage_is_explained_through_the_cli(doubled_by_hand, run, problem_file, carry):
    result = run("compute", problem_file(CAUSAL), "--explain", "--carry", carry, "--row", "2", "-f", "markdown")
    assert result.exit_code == 0, result.stderr
    assert "Step 3: double, scaled × 2" in result.stdout and "Step 4: apply the mask" in result.stdout


def _problem(masked: bool, variants: bool = False) -> dict:
    """Two heads, Lq 3, Lk 4, random numbers and dO; causal or not; `variants`: a softcap, RoPE,
    a bias and sinks too."""
    rng = np.random.default_rng(7 + masked + 2 * variants)
    doc = {"Q": rng.normal(size=(3, 4)), "K": rng.normal(size=(4, 4)), "V": rng.normal(size=(4, 2)), "heads": 2,
           "dO": rng.normal(size=(3, 2))}
    if masked:
        doc["mask"] = "causal"
    if variants:
        doc |= {"softcap": 2.0, "rope": {"style": "half", "base": 3.0}, "bias": rng.normal(size=(3, 4)),
                "sinks": rng.normal(size=2)}
    return doc


@pytest.mark.parametrize("masked, variants", [(False, False), (True, False), (True, True)])
def test_an_added_stage_with_its_vjp_gets_the_gradients_of_finite_differences(doubled_with_vjp, masked, variants):
    doc = _problem(masked, variants)
    grads = attend(build_problem(doc)).gradients.grads
    assert set(grads) == {"Q", "K", "V"} | ({"sinks"} if variants else set())
    for name in grads:
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)


@pytest.mark.parametrize("masked", [False, True])
def test_an_added_stage_reaches_every_tile(doubled, masked):
    problem = build_problem({**_problem(masked, variants=masked), "dO": None})
    plain = attend(problem)
    for bq in range(1, problem.lq + 1):
        for bk in range(1, problem.lk + 1):
            np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, plain.output, rtol=0, atol=1e-13)


def test_the_backward_pass_refuses_a_stage_without_a_vjp(doubled):
    attend(build_problem({**_problem(True), "dO": None}))  # the forward pass alone is fine
    with pytest.raises(AttnError, match="doubled"):
        attend(build_problem(_problem(True)))


def test_the_cli_refuses_a_stage_without_a_vjp_in_one_line(doubled, run, problem_file):
    path = problem_file({k: np.asarray(v).tolist() if k != "mask" else v for k, v in _problem(True).items()})
    result = run("compute", path, "-f", "json")
    assert result.exit_code == 2 and "doubled" in result.stderr and "Traceback" not in result.stderr


def test_a_stage_after_the_softmax_gets_its_gradients_and_the_fused_paths_refuse_it(monkeypatch):
    """A stage between weights and output (×0.5): the full trace and the backward pass run it (D =
    rowsum(dP ∘ P) needs nothing after the softmax); the output-only and tiled paths, which fuse the
    softmax with output, refuse it by name rather than skip it."""
    halved = stages.Stage("halved", "halved = weights / 2", "weights / 2", r"\text{weights} / 2",
                          lambda block, x: x / 2, vjp=lambda block, x, y, d: {stages.PREVIOUS: d / 2})
    insert(monkeypatch, halved, after="weights")
    doc = _problem(True, variants=True)
    trace = attend(build_problem(doc))
    np.testing.assert_allclose(trace.output, trace.stage("halved") @ trace.V)
    for name, grad in trace.gradients.grads.items():
        np.testing.assert_allclose(grad, finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)
    problem = build_problem({**doc, "dO": None})
    for path in (lambda: attend_output(problem), lambda: attend_tiles(problem, 2, 2)):
        with pytest.raises(AttnError, match="halved"):
            path()


def test_gradient_titles_name_the_stages_their_vjps_pass_through(doubled_with_vjp):
    title = lambda name, doc: grads.title(grads.get(name), build_problem(doc))  # noqa: E731
    assert title("d_scores", CAUSAL) == "d_scores = weights ∘ (d_weights − D) (through doubled), 0 where masked"
    capped = dict(CAUSAL, softcap=2.0, rope={"style": "half"})
    assert title("d_scores", capped) == \
        "d_scores = weights ∘ (d_weights − D) ∘ (1 − (capped / c)²) (through doubled), 0 where masked"
    assert title("d_Q", capped) == "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹)"
    assert title("d_K", capped) == "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹)"
    assert title("d_Q", SCOOTER) == "d_Q = scale · d_scores K" and title("D", SCOOTER) == "D = rowsum(d_output ∘ output)"


def test_each_vjp_is_the_transpose_of_its_stage():
    """⟨d, J v⟩ = ⟨Jᵀ d, v⟩ for every stage of a problem with every variant, J by central
    differences of the stage's own compute; the masked stage's vjp is 0 on hidden keys."""
    problem = build_problem({**_problem(True, variants=True), "dO": None})
    trace = attend(problem)
    rng = np.random.default_rng(3)
    block = stages.Block(problem, trace.Q, trace.K, trace.V, trace.scale)
    for stage in stages.present(problem):
        x = trace.stage(stages.previous(problem, stage.name)) if stages.previous(problem, stage.name) else None
        y = stage.compute(block, x)
        d = rng.normal(size=y.shape)
        d_in = stage.vjp(block, x, y, np.where(np.isfinite(y), d, 0.0) if stage.name != "masked" else d)
        reads = {name: getattr(block, name) for name in ("Q", "K", "V") if name in d_in}
        if stages.PREVIOUS in d_in:
            reads[stages.PREVIOUS] = x
        for name, value in reads.items():
            v = rng.normal(size=value.shape) * np.isfinite(value)
            def at(t, name=name, value=value, v=v, block=block, stage=stage, x=x):
                moved = np.where(np.isfinite(value), value + t * v, value)
                b = dataclasses.replace(block, **{name: moved}) if name != stages.PREVIOUS else block
                out = stage.compute(b, moved if name == stages.PREVIOUS else x)
                return np.where(np.isfinite(out), out, 0.0)
            jv = (at(1e-6) - at(-1e-6)) / 2e-6
            lhs = float((np.where(np.isfinite(y), d, 0.0) * jv).sum())
            np.testing.assert_allclose(lhs, float((d_in[name] * v).sum()), rtol=1e-5, atol=1e-8,
                                       err_msg=f"{stage.name} by {name}")
        if stage.replaces is not None:
            block = dataclasses.replace(block, **{stage.replaces: y})
        if stage.name == "masked":
            np.testing.assert_array_equal(d_in[stages.PREVIOUS][np.isneginf(y)], 0.0)


# --- one throwaway stage, every path ---------------------------------------------------------------
# The doubled stage defined once, with its compute function, its vjp and its hand step, and then run
# through every path that meets the table: the full trace, the output-only path, the tiles, the JSON
# and its read-back, the tables and exports, --explain in both carries, attn check, the gradients.

def _listed(doc: dict) -> dict:
    """A document as JSON holds it: arrays as nested lists."""
    return {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in doc.items()}


def test_a_stage_with_its_compute_vjp_and_hand_step_runs_every_path(monkeypatch, run, tmp_path, problem_file):
    insert(monkeypatch, stages.Stage(
        "doubled", "doubled = $previous · 2", "$previous · 2", r"\text{$previous} \cdot 2",
        lambda block, x: x * 2,  # compute
        vjp=lambda block, x, y, d: {stages.PREVIOUS: 2 * d},  # d x = 2 · d doubled
        hand=elementwise("double, $previous × 2", "{x} × 2", lambda x: x * 2)))
    # Two heads, a causal mask, a bias, RoPE, a softcap (which reads doubled) and sinks.
    doc = _listed(_problem(masked=True, variants=True))
    forward = {**doc, "dO": None}
    trace = attend(build_problem(forward))
    _the_full_trace_computes_it(trace)
    _the_output_only_path_and_the_tiles_agree(build_problem(forward), trace)
    _the_json_holds_it_and_reads_back(run, problem_file, doc)
    _the_views_show_it(run, problem_file(forward))
    _explain_writes_it_in_both_carries(run, problem_file, problem_file(forward), trace)
    _check_marks_it(run, tmp_path, forward, trace)
    grads = attend(build_problem(doc)).gradients.grads
    assert set(grads) == {"Q", "K", "V", "sinks"}
    for name in grads:  # the backward pass ran doubled's vjp: the gradients of finite differences
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)


def _the_full_trace_computes_it(trace) -> None:
    p = trace.problem
    present = [s.name for s in stages.present(p)]
    assert {"Q_rope", "K_rope", "capped", "masked"} <= set(present)  # every variant the problem has
    assert present.index("doubled") == present.index("scaled") + 1  # where the throwaway entry was put
    np.testing.assert_array_equal(trace.doubled, 2 * trace.scaled)
    np.testing.assert_allclose(trace.capped, p.softcap * np.tanh(trace.doubled / p.softcap), rtol=1e-15)
    x, sink = trace.masked, p.sinks[:, None, None]  # the softmax over masked and each head's sink
    top = np.maximum(x.max(axis=-1, keepdims=True), sink)
    e = np.exp(x - top)
    np.testing.assert_allclose(trace.weights, e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - top)), rtol=1e-13)


def _the_output_only_path_and_the_tiles_agree(problem, trace) -> None:
    for block in (1, 2, None):  # None: the default block size
        blocked = attend_output(problem, block=block)
        np.testing.assert_allclose(blocked.final, trace.final, rtol=1e-13, atol=1e-15, err_msg=str(block))
        np.testing.assert_allclose(blocked.lse, trace.lse, rtol=1e-13, err_msg=str(block))
    for bq in range(1, problem.lq + 1):
        for bk in range(1, problem.lk + 1):
            tiled = attend_tiles(problem, bq, bk)
            np.testing.assert_allclose(tiled.output, trace.output, rtol=0, atol=1e-13, err_msg=f"{bq}×{bk}")
            np.testing.assert_allclose(tiled.lse, trace.lse, rtol=0, atol=1e-13, err_msg=f"{bq}×{bk}")


def _the_json_holds_it_and_reads_back(run, problem_file, doc) -> None:
    written = run.json("compute", problem_file(doc))
    head = written["heads"][1]
    present = [s.name for s in stages.present(build_problem(doc))]
    assert "doubled" in present and [key for key in head if key in present] == present  # the table's order
    np.testing.assert_array_equal(head["doubled"], 2 * np.array(head["scaled"]))
    assert run.json("compute", problem_file(written, "out.json")) == written  # read back: the same document
    tampered = json.loads(json.dumps(written))
    tampered["heads"][1]["doubled"][0][0] += 1
    assert_error(run("compute", problem_file(tampered, "tampered.json"), "-f", "json"), "doubled")
    tiled = run.json("compute", problem_file(doc), "--tiles", "2,3", "--stages", "doubled,output,grads")
    assert run.json("compute", problem_file(tiled, "tiled.json"), "--tiles", "2,3",
                    "--stages", "doubled,output,grads") == tiled


def _the_views_show_it(run, path) -> None:
    table = run("compute", path, "--format", "table", "--stages", "doubled,capped")
    assert table.exit_code == 0, table.stderr
    assert "doubled = scaled · 2 · head 1" in table.stdout and "capped = 2 · tanh(doubled / 2)" in table.stdout
    markdown = run("compute", path, "--format", "markdown", "--stages", "doubled")
    assert markdown.exit_code == 0 and "scaled · 2" in markdown.stdout, markdown.stderr
    latex = run("compute", path, "--format", "latex", "--stages", "doubled,capped")
    assert latex.exit_code == 0, latex.stderr
    assert r"\text{scaled} \cdot 2" in latex.stdout and r"\tanh(\text{doubled} / 2)" in latex.stdout
    csv = run("compute", path, "--format", "csv", "--stages", "doubled")
    assert csv.exit_code == 0 and len(csv.stdout.splitlines()) == 1 + 2 * 3, csv.stderr  # a header, 2 heads × 3 rows


def _explain_writes_it_in_both_carries(run, problem_file, path, trace) -> None:
    lk = trace.problem.lk
    for carry in CARRIES:
        written = run.json("compute", path, "--explain", "--carry", carry)
        lines = written["explanation"]
        step = next(line for line in lines if line.startswith("Step") and "double, scaled × 2" in line)
        results, kinds = check_equations(lines)
        assert kinds["scale"] >= 2 * 3 * lk, kinds  # every doubled key, of every row of both heads, was checked
        broken = [line for line, ok in results if not ok and "unrounded" not in line]
        assert broken == [], (carry, broken)
        if carry == "rounded":
            assert_rounded_carry(lines, results)
        if carry == "exact":  # the row printed is the trace's: doubled is 2 × scaled to the last digit shown
            start = lines.index(step)
            scaled, doubled = trace.scaled[0, 0], trace.doubled[0, 0]
            assert [NOTE.sub("", line) for line in lines[start + 1:start + 1 + lk]] == \
                [f"  {j}: {scaled[j]:.4f} × 2 = {doubled[j]:.4f}" for j in range(lk)]
        assert run.json("compute", problem_file(written, "explained.json"), "--explain", "--carry", carry) == written


def _check_marks_it(run, tmp_path, doc, trace) -> None:
    (tmp_path / "problem.json").write_text(json.dumps(doc))
    present = [stage.name for stage in stages.present(trace.problem)]
    right = {"heads": [{name: np.where(np.isneginf(trace.stage(name)[h]), None,  # −∞ as JSON writes it
                                       np.round(trace.stage(name)[h], 4)).tolist() for name in present}
                       for h in range(trace.problem.heads)]}
    marks = _checked(run, tmp_path, right, 0)["stages"]
    assert [marks[f"heads[{h}].doubled"]["right"] for h in (0, 1)] == [12, 12]  # full marks
    wrong = json.loads(json.dumps(right))
    for h, head in enumerate(wrong["heads"]):  # doubling forgotten: scaled's numbers under doubled
        head["doubled"] = np.round(trace.scaled[h], 4).tolist()
    marks = _checked(run, tmp_path, wrong, 1)["stages"]
    for h in (0, 1):
        assert marks[f"heads[{h}].doubled"]["right"] == 0 and marks[f"heads[{h}].doubled"]["wrong"] == 12
        assert marks[f"heads[{h}].capped"]["right"] == 12  # the stages after it keep their marks


def _checked(run, tmp_path, answers: dict, code: int) -> dict:
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == code, (result.stdout, result.stderr)
    marks = json.loads(result.stdout)
    assert marks["all_correct"] == (code == 0)
    return marks


def test_a_csv_of_a_stage_the_problem_lacks_suggests_the_stage_just_before_it(run, problem_file):
    """Mutation: `stages.stand_in` gives the first present stage before the missing one (scores)
    rather than the last (capped): the CSV error must point at the stage shown in its place."""

    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "softcap": 2.0}
    assert stages.stand_in(build_problem(doc), "masked") == "capped"
    result = run("compute", problem_file(doc), "--format", "csv", "--stages", "masked")
    assert result.exit_code == 2 and "use --stages capped" in result.stderr, result.stderr


def test_csv_of_the_masked_stage_without_mask_or_bias(run):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a CSV of the
    masked stage of a problem without one names the stage to give instead."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--format", "csv", "--stages", "masked"),
                 "--stages: this problem has no mask, bias or ALiBi, so it has no masked stage", "--stages scaled")
    result = run("compute", SAMPLES / "causal.json", "--format", "csv", "--stages", "masked")
    assert result.exit_code == 0 and "-inf" in result.stdout
