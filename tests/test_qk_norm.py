"""QK-norm (issue 18): `q_norm` and `k_norm`, the stages Q_normed and K_normed between the projection
and RoPE. Checked against transformers' own modules (tests/fixtures/qk_norm_reference.json, written
by make_qk_norm_fixtures.py: Qwen3RMSNorm, Gemma3RMSNorm, Olmo2RMSNorm, torch.nn.LayerNorm, whole
Qwen3/OLMo 2 attention layers) to 1e-13, by hand, against central finite differences (the inputs'
and the norms' weights' gradients), and on every path: output-only, tiles, JSON and .npz round
trips, the views, --explain forward and backward, attn check."""

import json
import re
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np
import pytest

from attncli.base.errors import AttnError
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.hand.carry import CARRIES
from attncli.marking.mistakes import chain, step
from attncli.problem import qk_norm
from attncli.render.explain import explain
from attncli.stages import table as stages
from tests.conftest import assert_error
from tests.test_explain import NOTE

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "qk_norm_reference.json").read_text())
CASES = REFERENCE["cases"]

# One head, q = [3, 4]: mean(q²) = 12.5, r = 1/√12.5, q_normed = [3, 4] · r · [1, 2].
BY_HAND = {"Q": [[3.0, 4.0]], "K": [[1.0, 0.0], [0.0, 2.0]], "V": [[1.0, 0.0], [0.0, 1.0]],
           "q_norm": {"type": "rms", "weight": [1.0, 2.0], "eps": 1e-6}}


def _problem(over="head", kind="rms", offset=0, heads=4, kv=2, bias=True, rope=True, seed=0, grads=True) -> dict:
    """X and W with `heads` query heads (kv heads as 3-D Q, K, V when kv < heads), a causal mask,
    RoPE, both norms and dO."""
    rng = np.random.default_rng(seed)
    d, L = 3, 4
    doc = {"Q": rng.normal(size=(heads, L, d)).tolist(), "K": rng.normal(size=(kv, L, d)).tolist(),
           "V": rng.normal(size=(kv, L, 2)).tolist(), "mask": "causal"}
    if rope:
        doc["rope"] = {"style": "half", "dims": 2}
    if grads:
        doc["dO"] = rng.normal(size=(L, heads * 2)).tolist()
    for name, n in (("q_norm", heads), ("k_norm", kv)):
        width = d * (n if over == "all" else 1)
        doc[name] = {"type": kind, "weight": rng.normal(size=width).tolist(), "eps": 1e-5, "over": over,
                     "weight_offset": offset}
        if kind == "layer" and bias:
            doc[name]["bias"] = rng.normal(size=width).tolist()
    return doc


VARIANTS = [dict(over=over, kind=kind) for over in qk_norm.OVERS for kind in qk_norm.TYPES]


# --- the libraries' modules ------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_norms_and_layers_agree_with_transformers(case):
    trace = attend(build_problem(case["inputs"]))
    expected = case["expected"]
    kv = np.array(expected["K_normed"]).shape[0]
    np.testing.assert_allclose(trace.Q_normed, expected["Q_normed"], rtol=0, atol=1e-13)
    np.testing.assert_allclose(trace.K_normed[::trace.problem.heads // kv], expected["K_normed"], rtol=0, atol=1e-13)
    if "output" in expected:  # the module's output after o_proj: norm, then RoPE, then attention
        np.testing.assert_allclose(trace.final, expected["output"], rtol=0, atol=1e-13)


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "layer"], ids=lambda c: c["name"])
def test_the_output_only_path_and_the_tiles_agree_on_each_layer(case):
    problem = build_problem(case["inputs"])
    trace = attend(problem)
    np.testing.assert_allclose(attend_output(problem, block=2).final, trace.final, rtol=0, atol=1e-13)
    np.testing.assert_allclose(attend_tiles(problem, 2, 3).output, trace.output, rtol=0, atol=1e-13)


def test_the_fixture_covers_each_family_and_form():
    names = " ".join(case["name"] for case in CASES)
    for word in ("Qwen3RMSNorm", "Gemma3RMSNorm", "Olmo2RMSNorm", "LayerNorm per head", "over the whole row",
                 "Qwen3 attention layer, 4 heads, 2 kv heads", "OLMo 2 attention layer, 4 heads, 2 kv heads"):
        assert word in names, word


def test_by_hand():
    trace = attend(build_problem(BY_HAND))
    r = 1 / np.sqrt(12.5 + 1e-6)
    np.testing.assert_allclose(trace.Q_normed[0, 0], [3 * r, 8 * r], rtol=1e-15)
    np.testing.assert_allclose(trace.scores[0, 0], [3 * r, 16 * r], rtol=1e-15)  # the scores read Q_normed
    offset = attend(build_problem({**BY_HAND, "q_norm": {**BY_HAND["q_norm"], "weight_offset": 1}}))
    np.testing.assert_allclose(offset.Q_normed[0, 0], [6 * r, 12 * r], rtol=1e-15)  # x · (1 + weight)
    layer = attend(build_problem({**BY_HAND, "q_norm": {"type": "layer", "weight": [1.0, 2.0], "bias": [0.5, 0.0],
                                                         "eps": 1e-5}}))
    r = 1 / np.sqrt(0.25 + 1e-5)  # mean 3.5, var 0.25
    np.testing.assert_allclose(layer.Q_normed[0, 0], [-0.5 * r + 0.5, 1.0 * r], rtol=1e-15)


def test_over_all_normalises_a_row_of_every_head_and_kv_heads_share_theirs():
    doc = _problem("all", heads=4, kv=2, grads=False, rope=False)
    trace = attend(build_problem(doc))
    Q, K = np.array(doc["Q"]), np.array(doc["K"])
    row = Q[:, 1].reshape(-1)  # query 1's every head, side by side
    expected = row / np.sqrt(np.mean(row ** 2) + 1e-5) * doc["q_norm"]["weight"]
    np.testing.assert_allclose(trace.Q_normed[:, 1].reshape(-1), expected, rtol=1e-14)
    row = K[:, 2].reshape(-1)  # key 2's two kv heads
    expected = (row / np.sqrt(np.mean(row ** 2) + 1e-5) * doc["k_norm"]["weight"]).reshape(2, 3)
    np.testing.assert_allclose(trace.K_normed[:, 2], np.repeat(expected, 2, axis=0), rtol=1e-14)  # heads 0, 1 read kv 0


def test_rope_rotates_the_normed_values():
    doc = _problem(grads=False)
    trace = attend(build_problem(doc))
    plain = attend(build_problem({k: v for k, v in doc.items() if k not in ("q_norm", "k_norm")}))
    order = [s.name for s in stages.present(trace.problem)]
    assert order.index("Q_normed") < order.index("Q_rope") and order.index("K_normed") < order.index("K_rope")
    no_norm_rope = attend(build_problem({**doc, "Q": trace.Q_normed.tolist(), "K": trace.K_normed[::2].tolist(),
                                         "q_norm": None, "k_norm": None}))
    np.testing.assert_allclose(trace.Q_rope, no_norm_rope.Q_rope, rtol=0, atol=1e-15)
    np.testing.assert_allclose(trace.final, no_norm_rope.final, rtol=0, atol=1e-14)
    assert not np.allclose(trace.final, plain.final)


# --- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, fragments", [
    ({"weight": [1.0, 2.0, 3.0]}, ("q_norm.weight has 3 entries", 'over "head" it needs 2', "d_k = 2")),
    ({"weight": [1.0, 2.0], "over": "all"}, ("q_norm.weight has 2 entries", 'over "all" it needs 4', "2 heads")),
    ({"bias": [0.0, 0.0]}, ('q_norm.bias is given with type "rms"', "RMSNorm has no bias")),
    ({"type": "layer", "bias": [0.0]}, ("q_norm.bias has 1 entry;", "it needs 2")),
    ({"eps": 0}, ("q_norm.eps is the number 0", "expected a number > 0")),
    ({"eps": -1e-6}, ("q_norm.eps is the number -1e-06",)),
    ({"type": "rmsnorm"}, ('q_norm.type is the string "rmsnorm"', "did you mean", "rms (RMSNorm) or layer")),
    ({"over": "heads"}, ('q_norm.over is the string "heads"', "head (each head's d_k numbers")),
    ({"weight_offset": 2}, ("q_norm.weight_offset is the number 2", "expected 0")),
    ({"scale": 2}, ('q_norm has an unknown key "scale"',)),
    ({"weight": None}, ("q_norm.weight is null",)),
])
def test_a_wrong_norm_is_one_error_line_naming_the_field(run, problem_file, change, fragments):
    doc = {"Q": [[1.0, 2.0, 3.0, 4.0]], "K": [[1.0, 0.0, 0.0, 1.0]], "V": [[1.0, 2.0]], "heads": 2,
           "q_norm": {"type": "rms", "weight": [1.0, 2.0], **change}}
    assert_error(run("compute", problem_file(doc)), "p.json", *fragments)


def test_k_norm_over_all_counts_the_kv_heads(run, problem_file):
    doc = _problem("all", grads=False)
    doc["k_norm"]["weight"] = doc["k_norm"]["weight"] * 2  # 12 numbers: 4 heads' worth, but K has 2 kv heads
    assert_error(run("compute", problem_file(doc)), "k_norm.weight has 12 entries", 'over "all" it needs 6',
                 "2 heads of d_k = 3")


def test_a_norm_that_is_not_an_object_is_refused(run, problem_file):
    assert_error(run("compute", problem_file({**BY_HAND, "q_norm": [1, 2]})), "q_norm is a list",
                 '"type": "rms" or "layer"')


# --- the backward pass -----------------------------------------------------------------------------

def loss(doc) -> float:
    """sum(final output ∘ dO), whose gradient the backward pass gives (computed without it)."""
    return float((attend(build_problem({**doc, "dO": None})).final * np.array(doc["dO"])).sum())


def finite_differences(doc, name, h=1e-6):
    """Central differences of `loss` by every element of input `name`, or of a norm's `q_norm.weight`."""
    key, _, part = name.partition(".")
    values = np.array(doc[key][part] if part else doc[key], dtype=np.float64)
    found = np.zeros_like(values)
    for index in np.ndindex(values.shape):
        moved = []
        for delta in (h, -h):
            x = values.copy()
            x[index] += delta
            moved.append(loss({**doc, key: {**doc[key], part: x.tolist()} if part else x}))
        found[index] = (moved[0] - moved[1]) / (2 * h)
    return found


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v['kind']} over {v['over']}")
def test_the_gradients_are_central_differences(variant):
    doc = _problem(**variant, offset=int(variant["kind"] == "rms"))
    grads = attend(build_problem(doc)).gradients.grads
    expected = {"Q", "K", "V", "q_norm.weight", "k_norm.weight"} | (
        {"q_norm.bias", "k_norm.bias"} if variant["kind"] == "layer" else set())
    assert set(grads) == expected
    for name in sorted(expected):
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)


def test_the_projections_gradients_go_through_the_norm():
    doc = CASES[[c["name"] for c in CASES].index("Qwen3 attention layer, 2 heads, 2 kv heads, biases")]["inputs"]
    rng = np.random.default_rng(1)
    doc = {**doc, "dO": rng.normal(size=np.array(doc["X"]).shape).tolist()}
    grads = attend(build_problem(doc)).gradients.grads
    for name in ("X", "b_Q"):  # X reaches both norms, b_Q q_norm
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-6, atol=1e-8, err_msg=name)


def test_the_gradient_titles_go_back_through_the_norms():
    from attncli.stages import grads
    problem = build_problem(_problem())
    assert grads.title(grads.get("d_Q"), problem) == \
        "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹), back through q_norm"
    assert grads.title(grads.get("d_K"), problem) == \
        "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹), back through k_norm"


# --- one head alone (marking) ----------------------------------------------------------------------

@pytest.mark.parametrize("over", qk_norm.OVERS)
def test_one_heads_norm_is_the_traces(over):
    """Marking recomputes a stage for one head: over "all" from the problem's rows of every head."""
    for doc in (_problem(over, grads=False), CASES[-3]["inputs"] if over == "head" else CASES[-2]["inputs"]):
        trace = attend(build_problem(doc))
        for h in range(trace.problem.heads):
            np.testing.assert_allclose(step(trace, h, "Q_normed", None), trace.Q_normed[h], rtol=0, atol=1e-14)
            np.testing.assert_allclose(step(trace, h, "K_normed", None), trace.K_normed[h], rtol=0, atol=1e-14)
            np.testing.assert_allclose(chain(trace, h, None, None, "weights"), trace.weights[h], rtol=0, atol=1e-14)


def test_one_heads_gradient_over_all_is_refused_by_name():
    from attncli.compute.backward import to_inputs
    trace = attend(build_problem(_problem("all")))
    with pytest.raises(AttnError, match='k_norm over "all" normalises a row of every head together'):
        to_inputs(trace, trace.scale * trace.gradients.heads["d_scores"][:1], head=0)
    head = attend(build_problem(_problem("head")))  # per head: one head's is the table's
    d_Q, d_K = to_inputs(head, head.scale * head.gradients.heads["d_scores"][1:2], head=1)
    np.testing.assert_allclose(d_Q[0], head.gradients.heads["d_Q"][1], rtol=1e-13, atol=1e-15)


CHECKED = _problem("all", heads=2, kv=2, grads=False)


def _answers(trace, names, change=None) -> dict:
    heads = [{name: np.round(trace.stage(name)[h], 6).tolist() for name in names} for h in range(trace.problem.heads)]
    if change:
        change(heads)
    return {"heads": heads}


def _marks(run, tmp_path, answers, doc=CHECKED):
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "a.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "a.json", tmp_path / "p.json", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)["stages"]


def test_check_marks_the_normed_stages(run, tmp_path):
    trace = attend(build_problem(CHECKED))
    code, marks = _marks(run, tmp_path, _answers(trace, ["Q_normed", "K_normed", "Q_rope", "scores"]))
    assert code == 0  # the stages not answered are listed, not marked
    for h in (0, 1):
        for name in ("Q_normed", "K_normed", "Q_rope", "scores"):
            mark = marks[f"heads[{h}].{name}"]
            assert mark["wrong"] == 0 and mark["correct"] == trace.stage(name)[h].size, name


def test_check_carries_a_wrong_Q_normed_into_Q_rope(run, tmp_path):
    trace = attend(build_problem(CHECKED))
    theirs = trace.Q_normed[0] * 1.5  # the learner's own (wrong) Q_normed of head 0, rotated right

    def change(heads):
        heads[0]["Q_normed"] = np.round(theirs, 6).tolist()
        problem = build_problem({**CHECKED, "Q": [theirs.tolist(), trace.Q_normed[1].tolist()], "q_norm": None})
        heads[0]["Q_rope"] = np.round(attend(problem).Q_rope[0], 6).tolist()
    _, marks = _marks(run, tmp_path, _answers(trace, ["Q_normed", "Q_rope"], change))
    assert marks["heads[0].Q_normed"]["wrong"] == 12
    assert marks["heads[0].Q_rope"]["carried"] == 12 and marks["heads[0].Q_rope"]["wrong"] == 0


def test_check_refuses_one_heads_d_Q_over_all_in_one_line(run, tmp_path):
    doc = _problem("all", heads=2, kv=2)
    trace = attend(build_problem(doc))
    answers = {"heads": [{name: np.round(trace.gradients.heads[name][h], 6).tolist() for name in ("d_scores", "d_Q")}
                         for h in (0, 1)]}  # d_Q carried from the learner's own d_scores: one head alone
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "a.json").write_text(json.dumps(answers))
    assert_error(run("check", tmp_path / "a.json", tmp_path / "p.json"), 'over "all"', "every head")


# --- JSON, .npz, the views --------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v['kind']} over {v['over']}")
def test_the_json_and_npz_read_back_as_the_same_document(run, problem_file, tmp_path, variant):
    doc = _problem(**variant, offset=1)
    written = run.json("compute", problem_file(doc))
    assert written["q_norm"] == {"type": variant["kind"], "weight": doc["q_norm"]["weight"],
                                 **({"bias": doc["q_norm"]["bias"]} if variant["kind"] == "layer" else {}),
                                 "eps": 1e-5, "over": variant["over"], "weight_offset": 1}
    present = [s.name for s in stages.present(build_problem(doc))]  # the per-head stages in the table's order
    assert "Q_normed" in present and [key for key in written["heads"][0] if key in present] == present
    assert "q_norm.weight" in written["grads"] and "k_norm.weight" in written["grads"]
    assert run.json("compute", problem_file(written, "out.json")) == written
    tampered = json.loads(json.dumps(written))
    tampered["heads"][1]["K_normed"][0][0] += 1
    assert_error(run("compute", problem_file(tampered, "t.json"), "-f", "json"), "K_normed")
    npz = tmp_path / "out.npz"
    assert run("compute", problem_file(doc), "-o", npz).exit_code == 0
    assert run.json("compute", npz) == {**written, "dO": written["dO"]}


def test_the_header_tables_and_exports_name_the_norms(run, problem_file):
    path = problem_file(_problem("all", kind="layer", grads=False))
    table = run("compute", path, "--stages", "Q_normed,K_normed,Q_rope,scores", "-f", "table")
    assert table.exit_code == 0, table.stderr
    out = table.stdout
    assert "q_norm: q_normed = (q − mean(q)) / √(var(q) + eps) · (1 + weight) + bias, over all 4 heads' 12 numbers" \
        not in out  # weight_offset is 0 here
    assert "q_norm: q_normed = (q − mean(q)) / √(var(q) + eps) · weight + bias, over all 4 heads' 12 numbers of a " \
           "row together; eps 1e-05 (LayerNorm, as torch.nn.LayerNorm; after the projection, before RoPE)" in out
    assert "k_norm: k_normed = (k − mean(k)) / √(var(k) + eps) · weight + bias, over all 2 heads' 6 numbers" in out
    assert "Q_normed = (Q − mean(Q)) / √(var(Q) + eps) · weight + bias, over a row's every head · head 0" in out
    assert "Q_rope = Q_normed rotated by q_positions (RoPE) · head 0" in out
    latex = run("compute", path, "--stages", "Q_normed,K_normed", "-f", "latex")
    assert latex.exit_code == 0 and r"\operatorname{norm}(Q)" in latex.stdout, latex.stderr
    csv = run("compute", path, "--stages", "K_normed", "-f", "csv")
    assert csv.exit_code == 0 and len(csv.stdout.splitlines()) == 1 + 4 * 4, csv.stderr  # 4 heads × 4 keys
    no_rope = problem_file({**_problem(grads=False), "rope": None}, "plain.json")
    scores = run("compute", no_rope, "--stages", "scores", "-f", "table")
    assert "scores = Q_normed K_normedᵀ" in scores.stdout
    assert run("compute", path, "--cost").exit_code == 0


# --- the hand calculation --------------------------------------------------------------------------

NUM = r"-?\d+(?:\.\d+)?"


def _held(lines: list[str], places: int = 4) -> int:
    """Check each norm line of the rounded carry: mean(x²), r = 1/√(… + eps) and each dim's product;
    returns how many were checked."""
    checked = 0
    eps = None
    with localcontext() as context:
        context.prec = 50
        for line in lines:
            if m := re.search(r"eps = (\S+)$", line):
                eps = Decimal(m[1])
            if m := re.search(rf"mean\((?:q|k)²\) = \((.*)\) / (\d+) = ({NUM})$", line):
                if "…" in m[1]:  # elided: the terms are not all printed
                    checked += 1
                    continue
                terms = [Decimal(t.strip("()")) for t in re.findall(rf"\(?({NUM})\)?²", m[1])]
                assert abs(sum(t * t for t in terms) / int(m[2]) - Decimal(m[3])) <= Decimal("0.5e-4"), line
            elif m := re.search(rf"r = 1/√\(({NUM}) \+ \S+\) = ({NUM})$", line):
                assert abs(1 / (Decimal(m[1]) + eps).sqrt() - Decimal(m[2])) <= Decimal("0.5e-4"), line
            elif m := re.search(rf"dim \d+: ({NUM}) × ({NUM}) × ({NUM}) = ({NUM})$", line):
                product = Decimal(m[1]) * Decimal(m[2]) * Decimal(m[3])
                assert abs(product - Decimal(m[4])) <= Decimal(5).scaleb(-places - 1), line
            else:
                continue
            checked += 1
    return checked


def test_explain_writes_the_norm_by_hand():
    lines = [NOTE.sub("", line) for line in explain(attend(build_problem(BY_HAND)), [0], carry="exact")]
    start = lines.index("Step 1: normalise q (RMSNorm, as Qwen3RMSNorm): q_normed = q / √(mean(q²) + eps) · weight, "
                        "per head, eps = 1e-06")
    assert lines[start + 1:start + 6] == ["  mean(q²) = (3.0² + 4.0²) / 2 = 12.5000",
                                          "  r = 1/√(12.5000 + 1e-06) = 0.2828",
                                          "  dim 0: 3.0 × 0.2828 × 1.0 = 0.8485",
                                          "  dim 1: 4.0 × 0.2828 × 2.0 = 2.2627",
                                          "  q_normed = [0.8485, 2.2627]"]
    assert "Step 2: raw scores, q_normed · k" in lines


@pytest.mark.parametrize("carry", CARRIES)
@pytest.mark.parametrize("over", qk_norm.OVERS)
def test_explain_normalises_q_and_every_k_and_the_lines_hold(over, carry):
    trace = attend(build_problem(_problem(over, grads=False)))
    lines = explain(trace, [2], heads=[3], carry=carry)
    assert any(line.startswith("Step 2: normalise every k") for line in lines)
    if over == "all":  # the row's every head: q's 4 heads, k's 2 kv heads
        assert any(re.search(r"mean\(q²\) = \(.* \(12 terms\)\) / 12 = ", line) for line in lines)
        assert any(re.search(r"mean\(k²\) = \(.*\) / 6 = ", line) for line in lines)
    if carry == "rounded":
        assert _held(lines) == (2 + 3) + 4 * (2 + 3)  # q's 2 statistics and 3 dims, and each key's
    else:  # the printed rows are the trace's
        q = next(line for line in lines if line.startswith("  q_normed = "))
        assert q == "  q_normed = [" + ", ".join(f"{x:.4f}" for x in trace.Q_normed[3, 2]) + "]"


def test_explain_layer_norm_writes_mean_and_variance():
    doc = {**BY_HAND, "q_norm": {"type": "layer", "weight": [1.0, 2.0], "bias": [0.5, 0.0], "eps": 1e-5}}
    lines = explain(attend(build_problem(doc)), [0], carry="rounded")
    assert "  mean(q) = (3.0 + 4.0) / 2 = 3.5000" in lines
    assert "  var(q) = ((3.0 − 3.5000)² + (4.0 − 3.5000)²) / 2 = 0.2500" in lines
    assert "  r = 1/√(0.2500 + 1e-05) = 2.0000" in lines
    assert "  dim 0: (3.0 − 3.5000) × 2.0000 × 1.0 + 0.5 = -0.5000" in lines
    assert "  dim 1: (4.0 − 3.5000) × 2.0000 × 2.0 + 0.0 = 2.0000" in lines


@pytest.mark.parametrize("carry", CARRIES)
@pytest.mark.parametrize("kind", qk_norm.TYPES)
def test_explain_goes_back_through_the_norm_to_the_tables_d_Q(kind, carry):
    trace = attend(build_problem(_problem("head", kind=kind, offset=1)))
    for h, i in ((0, 1), (3, 3)):
        lines = explain(trace, [i], heads=[h], carry=carry)
        assert any(line.startswith("Step B4′: back through q_norm, d_q_j = ") for line in lines)
        assert any("with k_norm this d_k is by k_normed" in line for line in lines)
        if carry == "rounded" and kind == "rms":  # each dim's line holds for its printed numbers
            rx = rf"dim \d+: ({NUM}) × \(?({NUM})\)? − \(?({NUM})\)? × {NUM}³ × \(?({NUM})\)? / (\d+) = ({NUM})$"
            found = [re.search(rx, line) for line in lines if line.startswith("  dim") and "³" in line]
            assert len(found) == 3 and all(found)
            for m in found:
                r, g, x, total, n, shown = (Decimal(m[k]) for k in range(1, 7))
                assert abs(r * g - x * r ** 3 * total / n - shown) <= Decimal("0.00005"), m[0]
        if carry == "exact":
            d_q = [line for line in lines if line.startswith("  d_q = ")][-1]
            assert d_q == "  d_q = [" + ", ".join(f"{x:.4f}" for x in trace.gradients.heads["d_Q"][h, i]) + "]"


def test_explain_with_do_over_all_is_refused_in_one_line(run, problem_file):
    assert_error(run("compute", problem_file(_problem("all")), "--explain", "--row", "1"),
                 'over "all" normalises a row of every head together', "full backward pass computes it")
    assert run("compute", problem_file(_problem("all", grads=False), "f.json"), "--explain", "--row", "1").exit_code == 0


def test_the_default_eps_are_the_libraries():
    """Mutation: RMSNorm's default eps 1e-5 rather than transformers' rms_norm_eps 1e-6 (LayerNorm's
    1e-5 is torch.nn.LayerNorm's)."""
    assert qk_norm.read({"weight": [1.0, 1.0]}, "q_norm", 2, 1).eps == 1e-6
    assert qk_norm.read({"type": "layer", "weight": [1.0, 1.0]}, "q_norm", 2, 1).eps == 1e-5


def test_k_norm_over_all_reads_the_key_rows_from_x_kv():
    """Mutation: `whole_rows` projects X for K too, so one head's K_normed over "all" (as marking
    computes it) takes its statistics from the query rows in cross-attention."""
    rng = np.random.default_rng(4)
    doc = {"X": rng.normal(size=(2, 4)).tolist(), "X_kv": rng.normal(size=(3, 4)).tolist(),
           "W_Q": rng.normal(size=(4, 4)).tolist(), "W_K": rng.normal(size=(4, 4)).tolist(),
           "W_V": rng.normal(size=(4, 2)).tolist(), "heads": 2,
           "k_norm": {"weight": rng.normal(size=4).tolist(), "over": "all"}}
    problem = build_problem(doc)
    rows = qk_norm.whole_rows(problem, "K")
    np.testing.assert_allclose(rows, np.array(doc["X_kv"]) @ np.array(doc["W_K"]), rtol=1e-12)


def _explain_problem(over: str, offset: int = 0) -> dict:
    """Four query heads over two kv heads, both norms (tests/test_qk_norm.py's shape)."""
    rng = np.random.default_rng(1)
    doc = {"Q": rng.normal(size=(4, 3, 3)).tolist(), "K": rng.normal(size=(2, 3, 3)).tolist(),
           "V": rng.normal(size=(2, 3, 2)).tolist()}
    for name, n in (("q_norm", 4), ("k_norm", 2)):
        width = 3 * (n if over == "all" else 1)
        doc[name] = {"weight": rng.normal(size=width).tolist(), "over": over, "weight_offset": offset}
    return doc


def _printed(lines: list[str], name: str) -> list[list[float]]:
    return [json.loads(line.split(" = ", 1)[1]) for line in lines if line.strip().startswith(f"{name} = [")]


@pytest.mark.parametrize("head", range(4))
def test_explain_prints_each_query_heads_own_kv_heads_k_normed(head):
    """Mutation: norm_steps' `_part` takes kv head `head % kv_heads` rather than `head // group`, so
    query head 2's keys are normalised with kv head 0's part of a k_norm over "all"."""
    trace = attend(build_problem(_explain_problem("all")))
    lines = explain(trace, [1], heads=[head], carry="rounded")  # from the printed operands
    shown = _printed(lines, "k_normed")
    assert len(shown) == 3
    np.testing.assert_allclose(shown, trace.K_normed[head], rtol=0, atol=2e-3)


def test_explain_multiplies_by_one_plus_the_weight_with_weight_offset():
    """Mutation: norm_steps drops `+ norm.offset`: a Gemma norm's hand step multiplies by the weight
    rather than 1 + weight."""
    trace = attend(build_problem(_explain_problem("head", offset=1)))
    lines = explain(trace, [2], heads=[1], carry="rounded")  # from the printed operands
    np.testing.assert_allclose(_printed(lines, "q_normed")[0], trace.Q_normed[1, 2], rtol=0, atol=2e-3)
    np.testing.assert_allclose(_printed(lines, "k_normed"), trace.K_normed[1], rtol=0, atol=2e-3)
