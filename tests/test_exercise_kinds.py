"""`attn exercise` for every concept (issue 16): the kinds sinks, softcap, gqa, padding, tiles and
backward; mixed sets; find-the-slip; no degenerate problems; what a problem asks; which problem
of a set to compute; the multi-head scale diagnosis."""

import ast
import json
import re

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document import schema
from attncli.document.reading import build_problem
from attncli.marking import exercise, kinds, slip
from attncli.marking.exercise import KINDS, Options, build
from attncli.marking.marks import mark_document
from attncli.render import worksheet
from attncli.stages import grads
from attncli.stages import table as stages
from tests.conftest import SCOOTER, assert_error


def options(seed: int, kind: str, **more) -> Options:
    """The command line's defaults for a kind (its record's keys, heads and d_k)."""
    record = KINDS[kind]
    return Options(seed, kind, **({"keys": record.keys, "heads": record.heads, "dim": record.dim} | more))


def key_of(run, *args) -> dict:
    result = run("exercise", *args, "--answers")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_each_new_kind_adds_its_one_thing(run):
    sinks = build(Options(3, kind="sinks", heads=2)).doc
    assert len(sinks["sinks"]) == 2 and set(sinks["sinks"]) <= set(kinds.SINK_VALUES)
    assert build(Options(3, kind="softcap")).doc["softcap"] == kinds.SOFTCAP
    padding = build(Options(3, kind="padding", keys=4)).doc
    assert padding["key_mask"] == [True, True, True, False] and padding["key_labels"][-1] == "[PAD]"
    gqa = build(Options(3, kind="gqa", heads=4)).doc
    assert np.array(gqa["Q"]).shape == (4, 1, 2) and np.array(gqa["K"]).shape == (2, 3, 2)
    assert "heads" not in gqa  # the 3-D Q says it
    backward = key_of(run, "--seed", "3", "--kind", "backward", "--queries", "2")
    assert np.array(backward["dO"]).shape == (2, 2) and "d_Q" in backward["heads"][0]
    assert backward["ask"][-2:] == ["d_Q", "d_K"]
    tiles = key_of(run, "--seed", "3", "--kind", "tiles", "--keys", "4", "--tiles", "1,2")
    assert tiles["tile_size"] == [1, 2] and tiles["scale"] == 1 and len(tiles["heads"][0]["tiles"]) == 2
    assert tiles["ask"] == ["tiles"] and tiles["reproduce"].endswith("--tiles 1,2")


def test_a_tiles_sheet_has_a_grid_per_tile_and_its_key_marks_itself(run, tmp_path):
    sheet = run("exercise", "--seed", "3", "--kind", "tiles", "--keys", "4", "--format", "markdown").stdout
    assert "**tiles[q 0–1, k 0–2]**\n\n| | m | alpha | l | O\\_0 | O\\_1 |" in sheet
    assert "**tiles[q 0–1, k 2–4]**" in sheet and "- scale = 1\n" in sheet and "**weights" not in sheet
    key = run("exercise", "--seed", "3", "--kind", "tiles", "--keys", "4", "--answers").stdout
    (tmp_path / "key.json").write_text(key)
    answers = {"tile_size": [1, 2], "tiles": json.loads(key)["heads"][0]["tiles"]}
    (tmp_path / "a.json").write_text(json.dumps(answers))
    marked = json.loads(run("check", str(tmp_path / "a.json"), str(tmp_path / "key.json"), "-f", "json").stdout)
    assert marked["all_correct"] and set(marked["stages"]) == {"tiles[q 0–1, k 0–2]", "tiles[q 0–1, k 2–4]"}
    assert_error(run("exercise", "--kind", "plain", "--tiles", "1,2"), "--tiles", "--kind tiles")
    assert_error(run("exercise", "--kind", "tiles", "--tiles", "2"), "--tiles", "BQ,BK")


def test_a_comma_list_of_kinds_is_a_numbered_mixed_set(run):
    problems = json.loads(run("exercise", "--seed", "10", "--kind", "plain,causal,rope").stdout)["problems"]
    assert [p["title"] for p in problems] == ["Problem 1: attention", "Problem 2: causal self-attention",
                                              "Problem 3: rotary positions (RoPE)"]  # --count: the kinds
    assert "rope" in problems[2] and problems[1]["mask"] == "causal" and "mask" not in problems[0]
    for k, (p, kind) in enumerate(zip(problems, ("plain", "causal", "rope"))):
        assert {**p, "title": None} == {**build(options(10 + k, kind)).doc, "title": None}
    five = json.loads(run("exercise", "--seed", "10", "--kind", "plain,gqa", "--count", "5").stdout)["problems"]
    assert [np.array(p["Q"]).ndim for p in five] == [2, 3, 2, 3, 2]  # round and round
    keys = json.loads(run("exercise", "--seed", "10", "--kind", "plain,causal", "--answers").stdout)["problems"]
    assert keys[1]["reproduce"].endswith("attn exercise --seed 11 --kind causal --queries 3 --keys 3 --dim 2 "
                                           "--value-dim 2 --heads 1")
    told = run("exercise", "--kind", "plain,causal")
    assert re.fullmatch(r"answer key: attn exercise --seed \d+ --set plain,causal --answers\n", told.stderr)
    assert_error(run("exercise", "--kind", "plain,casual"), "--kind", '"casual" is not a kind', "causal")


def test_a_problem_set_piped_to_compute_says_which_problem_to_pick(run):
    # Decision: a set is not one problem; compute and check say how to pick one (jq '.problems[k]').
    result = run("compute", "-", input=run("exercise", "--seed", "1", "--count", "2").stdout)
    assert_error(result, "a problem set of 2 problems", "jq '.problems[0]'")
    one = run("exercise", "--seed", "1", "--count", "2").stdout
    picked = json.dumps(json.loads(one)["problems"][1])
    assert run("compute", "-", "-f", "json", input=picked).exit_code == 0


def test_every_generated_problem_says_what_it_asks(run):
    for kind in KINDS:
        doc = build(options(4, kind)).doc
        assert doc["decimals"] == 2 and doc["ask"], kind
        trace = attend(build_problem(doc))
        # a projected problem's Q, K, V first: its sheet has a grid for each (they went unmarked)
        present = ["Q", "K", "V"] * trace.problem.projected + [s.name for s in stages.present(trace.problem)]
        if trace.problem.heads > 1 or "W_O" in trace.problem.inputs:  # each head's output, then the final one
            present[-1:] = [f"heads[{h}].output" for h in range(trace.problem.heads)] + ["output"]
        assert doc["ask"] == (["tiles"] if kind == "tiles" else present + (
            [g for g in grads.names() if g != "d_output"] if kind == "backward" else [])), kind  # one head: d_output is dO
    assert build(options(4, "rope")).doc["ask"][:2] == ["Q_rope", "K_rope"]
    assert build(Options(4, decimals=3)).doc["decimals"] == 3
    sheet = run("exercise", "--seed", "4", "--decimals", "3", "--kind", "softcap", "--format", "latex").stdout
    assert "answer: scores, scaled, capped, weights, output; write each value with at least 3 decimals" in sheet
    key = key_of(run, "--seed", "4", "--decimals", "3")
    assert key["ask"] == ["scores", "scaled", "weights", "output"] and key["decimals"] == 3
    assert key["reproduce"].endswith("--heads 1 --decimals 3")


def _degenerate(trace, large_scores: bool = False) -> list[str]:
    """Independently of exercise.degenerate and exercise.workable: a query of zeros, equal weights
    over the 2 or more keys a query sees, a score beyond ±8 (±8·√(d_k/2) beyond d_k = 2; a kind with
    large scores on purpose, precision: x − max, what its learner takes e^ of), or a weight
    that rounds to 1.00 beside other keys (what a learner cannot work by hand at 2 decimals)."""
    found = []
    scores = trace.stage("scores")
    if large_scores:
        scores = scores - scores.max(axis=-1, keepdims=True)
    if np.abs(scores[np.isfinite(scores)]).max() > 8 * max(1, trace.d_k / 2) ** 0.5:
        found.append(f"a score of {np.abs(scores[np.isfinite(scores)]).max():g} at d_k {trace.d_k}")
    for h, (Q, weights) in enumerate(zip(trace.Q, trace.stage("weights"))):
        for i, (q, row) in enumerate(zip(Q, weights)):
            seen = row[row > 0]
            if not q.any():
                found.append(f"head {h} query {i} is zero")
            elif len(seen) >= 2 and np.ptp(seen) < 1e-12:
                found.append(f"head {h} query {i} has uniform weights {seen}")
            elif len(seen) >= 2 and round(seen.max(), 2) == 1:
                found.append(f"head {h} query {i} has a weight {seen.max():.4f}, 1.00 at 2 decimals")
    return found


# The seeds 0-999 whose first plain draw (before the re-draw) had a zero query or uniform weights
# (`_degenerate` of `_first_draw`, below): a regression each, checked in the fast suite.
ONCE_DEGENERATE = (2, 14, 110, 276, 404, 414, 444, 624, 662, 795, 812, 829, 965, 973, 980, 990)


@pytest.mark.parametrize("kind", KINDS)
def test_no_problem_is_degenerate_or_unworkable_by_hand(kind):
    # Before the re-draw, 12 of seeds 0-999 gave a plain exercise a zero query and 16 uniform weights;
    # before the bounds, the median two-head problem had a score of 20 and 93% a weight above 0.98.
    # Here every fifth seed (every 25th for the other kinds) and the once degenerate ones; every seed
    # of every kind: the slow twin below.
    seeds = sorted({*range(0, 1000, 5), *ONCE_DEGENERATE}) if kind == "plain" else range(0, 1000, 25)
    for seed in seeds:
        made = build(options(seed, kind))
        found = _degenerate(made.trace, KINDS[kind].large_scores)
        assert not found, (kind, seed, found)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_no_problem_of_seeds_0_to_999_is_degenerate_or_unworkable(kind):
    for seed in range(1000):
        assert not _degenerate(build(options(seed, kind)).trace, KINDS[kind].large_scores), (kind, seed)


def test_two_head_problems_are_worked_by_hand_in_small_numbers():
    # The measure over seeds 0-499: the median largest score was 20, 93% had a weight > 0.98.
    largest = [np.abs(build(Options(seed, kind="multihead", heads=2)).trace.stage("scores")).max()
               for seed in range(0, 500, 5)]
    assert np.median(largest) <= 4 and max(largest) <= exercise.SCORE_BOUND


def test_the_score_bound_grows_with_d_k_as_the_scaled_scores_stay_put():
    # A fixed bound of 8 refused nearly every draw of a wide problem (--dim 32 took seconds, then failed).
    assert exercise.score_bound(1) == exercise.score_bound(2) == 8 and exercise.score_bound(32) == 32
    made = build(Options(0, kind="multihead", dim=16, keys=8, heads=2))
    assert np.abs(made.trace.stage("scores")).max() <= 8 * 8 ** 0.5


def test_a_problem_asked_at_more_decimals_may_lean_harder_on_one_key():
    # 0.996 is 1.00 at 2 decimals (re-drawn) and 0.9960 at 4 (kept): the bound is the decimals asked.
    weights = np.array([[[0.996, 0.004]]])
    trace = type("T", (), {"d_k": 2, "stage": lambda self, name: weights if name == "weights" else np.ones((1, 1, 2))})()
    assert not exercise.workable(trace, 2) and exercise.workable(trace, 4)


def test_a_sound_first_draw_keeps_its_problem_and_a_degenerate_one_is_redrawn():
    # Seed 2's first plain draw had a zero query (the issue's `attn exercise --seed 2`).
    assert any(not any(q) for q in _first_draw(2)["Q"])
    doc = build(Options(2)).doc
    assert all(any(q) for q in doc["Q"]) and doc != _first_draw(2) | {"ask": doc["ask"], "decimals": 2}
    assert {k: v for k, v in build(Options(42)).doc.items() if k not in ("ask", "decimals")} == _first_draw(42)


def _first_draw(seed: int) -> dict:
    import random

    doc, _ = exercise._draw(options(seed, "plain"), random.Random(seed))
    return doc


def test_find_the_slip_plants_one_mistake_and_check_marks_naming_it(run, tmp_path):
    made = build(options(3, "plain", slip=True))
    w = made.worked
    assert w.mistake in w.candidates and made.doc["ask"] == ["slip"]
    right = attend(build_problem(made.doc))
    differs = [name for name in w.stages if not np.allclose(np.round(w.stages[name], 4),
                                                            np.round(right.stage(name)[0], 4))]
    assert differs and differs[0] == w.stage  # the stages before the slip are right
    assert made.doc["worked"][w.stage] == np.round(w.stages[w.stage], 4).tolist()
    key = tmp_path / "key.json"
    key.write_text(run("exercise", "--seed", "3", "--find-the-slip", "--answers").stdout)
    assert json.loads(key.read_text())["slip"] == {"stage": w.stage, "mistake": w.mistake}
    assert run("check", str(key)).exit_code == 0  # the key marks itself right

    def marked(answer) -> dict:
        (tmp_path / "a.json").write_text(json.dumps(answer))
        result = run("check", str(tmp_path / "a.json"), str(key), "-f", "json")
        return json.loads(result.stdout)["stages"]["slip"]

    assert marked({"slip": {"stage": w.stage, "mistake": w.mistake}})["cells"] == [["correct", "correct"]]
    other = next(m for m in w.candidates if slip.MISTAKES[m].stage != w.stage)
    wrong = marked({"slip": {"stage": slip.MISTAKES[other].stage, "mistake": other}})
    assert wrong["cells"] == [["wrong", "wrong"]] and wrong["notes"][0].startswith("slip: you named")
    assert marked({"slip": {"stage": w.stage, "mistake": "mask_zero"}})["cells"] == [["correct", "wrong"]]
    (tmp_path / "bad.json").write_text(json.dumps({"slip": "no_scale"}))
    assert_error(run("check", str(tmp_path / "bad.json"), str(key)), "slip is", '"stage"')
    plain = tmp_path / "plain.json"
    plain.write_text(run("exercise", "--seed", "3", "--answers").stdout)
    assert_error(run("check", str(tmp_path / "a.json"), str(plain)), "plants no slip")


def test_two_names_for_one_slip_are_both_right():
    # Padding seed 23: the padded key's scaled score is 0, so writing 0 there (mask_zero) and not
    # masking at all (mask_ignored) give the same worked solution: only the first is planted, and
    # naming either is right.
    trace = build(options(23, "padding")).trace
    assert trace.stage("scaled")[0][0, -1] == 0
    assert "mask_ignored" in slip.candidates(trace) and "mask_zero" not in slip.candidates(trace)
    key = {"stage": "masked", "mistake": "mask_ignored"}
    assert slip.mark_slip(trace, {"stage": "masked", "mistake": "mask_zero"}, key).cells.tolist() == \
        [["correct", "correct"]]
    # A mistake that cannot be made here (one head: d_model is d_k) is not another name for it.
    assert slip.mark_slip(trace, {"stage": "scaled", "mistake": "scale_by_d_model"}, key).cells.tolist() == \
        [["wrong", "wrong"]]


def test_find_the_slip_sheets_show_the_worked_solution(run):
    sheet = run("exercise", "--seed", "3", "--find-the-slip", "--format", "markdown").stdout
    made = build(options(3, "plain", slip=True))
    assert "| bird | -3.7500 | 0.7500 | 0.2500 |" in sheet  # the worked grids are filled in
    assert 'answer: {"slip": {"stage": "<stage>", "mistake": "<mistake>"}}' in sheet
    assert f"- {made.worked.mistake}: " in sheet and "slip: stage" not in sheet
    key = run("exercise", "--seed", "3", "--find-the-slip", "--format", "latex", "--answers").stdout
    assert f"slip: stage {made.worked.stage}, mistake {made.worked.mistake.replace('_', chr(92) + '_')}" in key
    assert_error(run("exercise", "--kind", "multihead", "--find-the-slip"), "--find-the-slip", "one head")


def test_scaling_by_the_model_width_is_diagnosed_only_when_it_gives_the_numbers():
    doc = build(Options(6, kind="multihead", keys=3, heads=3)).doc  # d_k 2, d_model 6: √6 is neither 2 nor √2
    trace = attend(build_problem(doc))
    scores = trace.stage("scores")
    slipped = {"heads": [{"scores": s.round(4).tolist(), "scaled": (s / np.sqrt(6)).round(4).tolist()}
                         for s in scores]}
    marks = mark_document(trace, slipped)
    assert all(marks[f"heads[{h}].scaled"].diagnosis == ("scale_by_d_model",) for h in range(3))
    other = {"heads": [{"scores": s.round(4).tolist(), "scaled": (s / 2.3).round(4).tolist()} for s in scores]}
    marks = mark_document(trace, other)
    assert all("scale_by_d_model" not in marks[f"heads[{h}].scaled"].diagnosis for h in range(3))
    one_head = attend(build_problem(build(Options(6)).doc))  # d_model = d_k: the mistake cannot be made
    s = one_head.stage("scores")[0]
    assert "scale_by_d_model" not in mark_document(one_head, {"scores": s.tolist(), "scaled": (s / 2).round(4).tolist()}
                                                   )["scaled"].diagnosis


def test_no_function_of_the_exercise_modules_is_long(sources):
    for module in (exercise, kinds, slip):
        (tree,) = [found.tree for found in sources if found.name == module.__name__]
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno < 60, (module.__name__, node.name)


def test_a_two_stage_slip_is_right_at_either_stage():
    """Mutation: the stage must be the mistake's first (`==` rather than `in (stage, *also)`): RoPE
    left out shows in Q_rope and K_rope alike, and naming K_rope is as right."""
    from attncli.marking.slip import mark_slip

    trace = attend(build_problem(dict(SCOOTER, rope={"style": "half"})))
    key = {"stage": "Q_rope", "mistake": "rope_skipped"}
    for stage in ("Q_rope", "K_rope"):
        assert mark_slip(trace, {"stage": stage, "mistake": "rope_skipped"}, key).cells.tolist() == \
            [["correct", "correct"]]
    assert mark_slip(trace, {"stage": "scores", "mistake": "rope_skipped"}, key).cells.tolist() == \
        [["wrong", "correct"]]


# --- every kind's sheet shows its whole problem; a kind is one record ------------------------------

SHEETS = {"markdown": (worksheet.markdown, lambda cells: " | ".join(cells)),
          "latex": (worksheet.latex, lambda cells: " & ".join(f"${c}$" for c in cells))}
PLAIN_TEXT = {"\\_": "_", "{[}": "[", "{]}": "]"}  # LaTeX's escapes, read back


def _on_sheet(sheet: str, row, key: str, value, shown: dict) -> str | None:
    """Why `key` (= value) is not on `sheet`, or None when it is: a matrix as a table titled by its
    name with its values as written (or, when the sheet shows others in its place, as the grid the
    learner computes: X = E + PE); a mask as 1s and 0s; anything else named (case and _ aside) with
    each of its numbers."""
    matrix = isinstance(value, list) and value and isinstance(value[0], list)
    if key == "mask" and matrix:
        missing = [r for r in value if row([str(int(x)) for x in r]) not in sheet]
        return f"mask rows {missing}" if missing or "mask (1 = may attend)" not in sheet else None
    if matrix:
        if key not in shown:
            return None if f"{key} = " in sheet else f"{key}: no grid computes it"
        heads = value if isinstance(value[0][0], list) else [value]
        missing = [r for m in heads for r in m if row([worksheet.given_text(x) for x in r]) not in sheet]
        return f"{key}: rows {missing} not shown" if missing else None
    words = sheet.casefold().replace("_", " ")
    name = key.casefold().replace("_", " ")
    if name not in words and name.removesuffix("s") not in words:  # "1 kv head" names kv_heads too
        return f"{key} is not named"
    numbers = [x for x in np.ravel(np.array(value, dtype=object)).tolist()
               if isinstance(x, (int, float)) and not isinstance(x, bool)]
    missing = [x for x in numbers if f"{x:g}" not in sheet]
    return f"{key}: {missing} not shown" if missing else None


def _problems(kind: str):
    """A few problems of `kind`: seeds, a random mask, two heads, more keys (what the kind accepts)."""
    for seed, more in ((0, {}), (1, {"mask": "random"}), (2, {"keys": 4}), (3, {"heads": 2 * KINDS[kind].heads})):
        try:
            yield build(options(seed, kind, **more))
        except exercise.ExerciseError:
            continue


@pytest.mark.parametrize("kind", KINDS)
def test_every_input_key_of_every_kinds_problem_is_on_its_sheets(kind):
    """Each input and setting of the document (attncli/document/schema.py) is on the students'
    markdown and LaTeX sheets (gqa's sheets failed with an internal error: its Q is 3-D)."""
    for made in _problems(kind):
        for name, (write, row) in SHEETS.items():
            sheet = write([(made, made.trace)], False)
            for escape, text in PLAIN_TEXT.items():
                sheet = sheet.replace(escape, text)
            for key, value in made.doc.items():
                if schema.key(key).kind in (schema.INPUT, schema.SETTING):
                    assert _on_sheet(sheet, row, key, value, made.shown) is None, (kind, made.options, name)


def _bias(d: kinds.Draw) -> None:
    """A throwaway kind's settings: an additive bias of -1, 0 and 1 (drawn after the matrices)."""
    d.doc["bias"] = d.matrix(d.options.lq, d.options.keys, (-1, 0, 1))
    d.describe("; add the given bias to the scaled scores")


def test_a_kind_is_one_record(run, monkeypatch, tmp_path):
    """A throwaway `bias` kind added as one record runs through the problem, its sheets, its key
    and `attn check` of the key; its sheet prints the bias it asks the learner to add."""
    monkeypatch.setitem(kinds.KINDS, "bias", kinds.ExerciseKind("bias", "a given additive bias.", settings=_bias))
    doc = json.loads(run("exercise", "--seed", "5", "--kind", "bias", "--queries", "2").stdout)
    assert np.array(doc["bias"]).shape == (2, 3) and doc["ask"] == ["scores", "scaled", "masked", "weights", "output"]
    keys = doc["key_labels"]
    sheet = run("exercise", "--seed", "5", "--kind", "bias", "--queries", "2", "--format", "markdown").stdout
    assert f"**bias**\n\n| | {' | '.join(keys)} |" in sheet
    for label, bias in zip(doc["query_labels"], doc["bias"]):
        assert f"| {label} | {' | '.join(worksheet.given_text(x) for x in bias)} |" in sheet
    latex = run("exercise", "--seed", "5", "--kind", "bias", "--queries", "2", "--format", "latex").stdout
    assert r"\paragraph{bias}" in latex and "add the given bias" in latex
    key = run("exercise", "--seed", "5", "--kind", "bias", "--queries", "2", "--answers")
    (tmp_path / "key.json").write_text(key.stdout)
    assert json.loads(key.stdout)["reproduce"].endswith("--kind bias --queries 2 --keys 3 --dim 2 --value-dim 2 "
                                                          "--heads 1")
    marked = run("check", str(tmp_path / "key.json"), str(tmp_path / "key.json"), "-f", "json")
    assert marked.exit_code == 0 and json.loads(marked.stdout)["all_correct"]
    assert run("exercise", "--seed", "5", "--kind", "plain,bias", "--format", "latex").exit_code == 0


HOMEWORK = ("plain", "causal", "multihead", "window", "backward")


def test_a_homework_set_is_numbered_and_each_problem_has_its_kinds_sizes(run, tmp_path):
    # A real homework took five runs and sed: a mixed set shared Lq, Lk and d_k, every title was
    # "Exercise", and the key line on stderr named the first kind's sizes for the whole set.
    made = run("exercise", "--seed", "4", "--set", ",".join(HOMEWORK))
    problems = json.loads(made.stdout)["problems"]
    assert [p["title"] for p in problems] == [
        "Problem 1: attention", "Problem 2: causal self-attention", "Problem 3: multi-head self-attention",
        "Problem 4: a sliding window", "Problem 5: the backward pass"]
    assert [(len(p["query_labels"]), len(p["key_labels"])) for p in problems] == [(1, 3), (3, 3), (3, 3), (4, 4),
                                                                                   (1, 3)]
    assert problems[2]["heads"] == 2 and "dO" in problems[4] and problems[3]["window"] == [1, 0]
    for k, (p, kind) in enumerate(zip(problems, HOMEWORK)):  # so the seeds' tests above bound every set
        assert {**p, "title": None} == {**build(options(4 + k, kind)).doc, "title": None}
    keys = json.loads(run("exercise", "--seed", "4", "--set", ",".join(HOMEWORK), "--answers").stdout)["problems"]
    assert [k["reproduce"].split()[5] for k in keys] == list(HOMEWORK)
    for k, key in enumerate(keys):  # each key is a complete answer to its own problem
        (tmp_path / f"{k}.json").write_text(json.dumps(key))
        assert run("check", tmp_path / f"{k}.json", tmp_path / f"{k}.json").exit_code == 0
    sheet = run("exercise", "--seed", "4", "--set", ",".join(HOMEWORK), "--format", "latex").stdout
    assert sheet.count(r"\section*{Problem ") == 5 and "seed" not in sheet
    told = run("exercise", "--set", "plain,window", "--keys", "5", "--format", "markdown").stderr
    assert re.fullmatch(r"answer key: attn exercise --seed \d+ --set plain,window --keys 5 --format markdown "
                        r"--answers\n", told)
    assert [len(p["key_labels"]) for p in json.loads(run("exercise", "--set", "plain,window", "--keys", "5").stdout)[
        "problems"]] == [5, 5]  # a size given applies to every problem
    assert_error(run("exercise", "--set", "plain,heads2"), "--set", '"heads2" is not a kind')
    assert_error(run("exercise", "--kind", "causal", "--set", "plain"), "--set", "give one")



def _grid_path(title: str, several: bool) -> tuple[str, int | None]:
    """(answer key, head) a sheet's grid is the answer of: "output (head 1) = weights V" → (output, 1),
    "output = …" with several heads → the final output, "heads[0].tiles[q 0–1, k 0–2]" → tiles."""
    if ".tiles[" in title or title.startswith("tiles["):
        return "tiles", None
    name = title.split(" ", 1)[0]
    head = re.search(r"\((?:kv )?head (\d+)", title)
    return name, int(head.group(1)) if head else None


def _asked_paths(ask: list[str], heads: int, several: bool) -> set[tuple[str, int | None]]:
    """The key's ask, one (answer key, head) per grid it asks for: a stage named alone is every head's."""
    out = set()
    for word in ask:
        if word.startswith("heads["):
            out.add((word.split(".", 1)[1], int(word[len("heads["):word.index("]")])))
        elif word in ("Q", "K", "V", "tiles") or (word == "output" and several) or heads == 1:
            out.add((word, None))
        else:
            out |= {(word, h) for h in range(heads)}
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_keys_ask_is_every_grid_of_its_sheet(kind):
    """What the sheet gives a grid to, the key asks (and `attn check` requires): a two-head problem
    asks each head's output beside the final one (leaving both out scored full marks). X = E + PE is
    the problem's X (checked as an echo of it), not a stage."""
    for made in _problems(kind):
        if made.worked is not None:
            continue  # find-the-slip asks for the slip, not the grids
        p = made.trace.problem
        several = p.heads > 1 or "W_O" in p.inputs
        grids = {_grid_path(title, several) for title, *_ in worksheet._grids(made.trace, made)} - {("X", None)}
        if p.heads > 1:  # a grid titled "Q = X W_Q" holds every head's Q; gqa's "Q (head 0)" one head's
            grids = {(name, None if name in "QKV" else head) for name, head in grids}
        assert grids == _asked_paths(made.doc["ask"], p.heads, several), (kind, made.options)


def test_a_precision_exercise_is_float16_whose_rounded_scores_change_the_weights(run, tmp_path):
    """Issue 31: scores 2048 + a·b, an odd one rounded to even in float16; the key is float16's, marks
    itself, and marks a float64 answer wrong where the rounding moved it."""
    ex = build(Options(1, kind="precision", keys=4))
    assert ex.doc["dtype"] == "float16" and ex.doc["scale"] == 1 and "float16" in ex.doc["description"]
    exact = np.array(ex.doc["Q"], float) @ np.array(ex.doc["K"], float).T
    assert ((2048 <= exact) & (exact < 4096)).all() and (exact % 2 == 1).any()
    assert (ex.trace.stage("scores")[0] == 2 * np.round(exact / 2)).all()  # even, ties to even
    wide = attend(build_problem({k: v for k, v in ex.doc.items() if k not in ("dtype", "ask", "decimals")}))
    assert np.abs(wide.stage("weights") - ex.trace.stage("weights")).max() > 0.01  # the answer changes
    key = run("exercise", "--seed", "1", "--kind", "precision", "--keys", "4", "--answers").stdout
    (tmp_path / "key.json").write_text(key)
    heads = json.loads(key)["heads"][0]
    mine = {name: heads[name] for name in ("scores", "scaled", "weights", "output")}
    (tmp_path / "a.json").write_text(json.dumps(mine))
    assert json.loads(run("check", tmp_path / "a.json", tmp_path / "key.json", "-f", "json").stdout)["all_correct"]
    (tmp_path / "b.json").write_text(json.dumps(mine | {"scores": exact.tolist()}))
    marked = json.loads(run("check", tmp_path / "b.json", tmp_path / "key.json", "-f", "json").stdout)
    cells = marked["stages"]["scores"]["cells"][0]
    assert [c == "correct" for c in cells] == (exact[0] % 2 == 0).tolist()
    sheet = run("exercise", "--seed", "1", "--kind", "precision", "--format", "markdown").stdout
    assert "- dtype = float16\n- recipe: each stage computed in float32" in sheet


@pytest.mark.parametrize("seed", range(30))
def test_every_precision_exercise_has_a_score_float16_rounds(seed):
    ex = build(Options(seed, kind="precision", keys=2 + seed % 6))
    exact = np.array(ex.doc["Q"], float) @ np.array(ex.doc["K"], float).T
    assert (exact % 2 == 1).any()


def test_a_precision_answer_key_says_which_score_changed_and_the_float64_weights(run):
    key = run("exercise", "--seed", "1", "--kind", "precision", "--answers", "--format", "markdown").stdout
    assert ("rounding: float16 changed the score mat 2055 → 2056, so its weights are 0.02, 0.87, 0.12 where "
            "float64's are 0.04, 0.71, 0.26.") in key
    assert "rounding:" not in run("exercise", "--seed", "1", "--answers", "--format", "markdown").stdout
    doc = run.json("exercise", "--seed", "1", "--kind", "precision", "--answers", "--format", "json")
    assert doc["rounding"] == ("float16 changed the score mat 2055 → 2056, so its weights are 0.02, 0.87, 0.12 "
                               "where float64's are 0.04, 0.71, 0.26")  # the JSON key has it too
    assert "rounding" not in run.json("exercise", "--seed", "1", "--answers", "--format", "json")


def test_a_carried_slip_in_a_precision_exercise_is_followed_in_float16(run, tmp_path):
    """Issue 31: follow-through from the learner's scores runs in the exercise's dtype: their 2055 is 2056
    once float16 stores it, so a scaled 2055 is wrong, not carried, and 2056 earns the mark."""
    key = run("exercise", "--seed", "1", "--kind", "precision", "--answers").stdout  # scores 2052, 2056, 2054
    (tmp_path / "key.json").write_text(key)

    def scaled_cells(scaled):
        (tmp_path / "a.json").write_text(json.dumps({"scores": [[2052, 2055, 2054]], "scaled": [scaled]}))
        return json.loads(run("check", tmp_path / "a.json", tmp_path / "key.json", "-f", "json").stdout)[
            "stages"]["scaled"]["cells"][0]

    assert scaled_cells([2052, 2055, 2054]) == ["correct", "wrong", "correct"]
    assert scaled_cells([2052, 2056, 2054]) == ["correct", "correct", "correct"]


@pytest.mark.parametrize("seed", [9, 10, 15, 20, 31, 32])
def test_a_precision_exercise_s_float64_weights_are_marked_wrong_at_its_decimals(seed):
    """Issue 31: these seeds drew problems whose float64 weights, at 2 decimals, `attn check` marked right:
    the exercise re-draws until the rounding shows in the answer."""
    from attncli.marking import grading

    ex = build(Options(seed, kind="precision"))
    wide = np.round(ex.trace.precision.reference["weights"], ex.options.decimals)
    correct, _ = grading.grade(wide, np.full(wide.shape, ex.options.decimals), ex.trace.stage("weights"),
                               grading.Rule(ex.options.decimals))
    assert not correct.all()


@pytest.mark.parametrize("more, fragment", [({"heads": 2}, "heads 2"), ({"dim": 3}, "dim 3"),
                                            ({"keys": 8}, "at most 7 keys"), ({"keys": 1}, "at least 2 keys"),
                                            ({"queries": 2}, "one query")])
def test_a_precision_exercise_refuses_shapes_it_cannot_draw(more, fragment):
    with pytest.raises(kinds.ExerciseError, match=fragment):
        build(Options(1, kind="precision", **more))
