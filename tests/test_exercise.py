"""`attn exercise`: exact reproduction, the key only for the teacher, problem sets, worksheets,
kinds of problem, distinct keys, and seeds that never alias."""

import json
from dataclasses import replace

import numpy as np
import pytest

from attncli.commands.learn_run import command_line
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.marking.exercise import KINDS, ExerciseError, Options, build
from attncli.render import worksheet
from tests.conftest import assert_error

COMMAND = ("attn exercise --seed 5 --kind plain --queries 2 --keys 3 --dim 2 --value-dim 2 --heads 1")


def test_the_key_reproduces_the_exact_problem_and_the_sheet_never_shows_it(run):
    sheet = run("exercise", "--seed", "5", "--queries", "2", "--keys", "3")
    assert sheet.exit_code == 0 and sheet.stderr == ""
    assert "reproduce" not in sheet.stdout and "5" not in json.loads(sheet.stdout)["title"]
    key = json.loads(run("exercise", "--seed", "5", "--queries", "2", "--keys", "3", "--answers").stdout)
    assert key["reproduce"] == COMMAND and "reproduce" not in key["description"]
    again = run(*COMMAND.split()[1:])
    assert json.loads(again.stdout) == json.loads(sheet.stdout)
    assert run(*COMMAND.split()[1:], "--answers").stdout == run(
        "exercise", "--seed", "5", "--queries", "2", "--keys", "3", "--answers").stdout
    for fmt in ("markdown", "latex"):
        text = run("exercise", "--seed", "5", "--queries", "2", "--format", fmt).stdout
        assert "reproduce" not in text and "seed" not in text
        assert "reproduce with" in run("exercise", "--seed", "5", "--queries", "2", "--format", fmt, "--answers").stdout


def test_every_option_is_in_the_reproduce_line():
    options = Options(9, "cross", 2, 4, 3, 1, 2, "random")
    command = command_line(build(options).options)
    assert command == ("attn exercise --seed 9 --kind cross --queries 2 --keys 4 --dim 3 --value-dim 1 "
                       "--heads 2 --mask random")


def test_without_a_seed_the_teacher_is_told_the_key_command_on_stderr(run):
    result = run("exercise")
    assert result.exit_code == 0 and result.stderr.startswith("answer key: attn exercise --seed ")
    seed = result.stderr.split()[5]
    assert json.loads(run("exercise", "--seed", seed).stdout) == json.loads(result.stdout)


def test_negative_seeds_are_refused_not_aliased(run):
    # random.Random(-7) is random.Random(7): a negative seed would silently repeat a problem.
    assert_error(run("exercise", "--seed", "-7"), "--seed")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_computes_and_its_key_checks(run, kind):
    problem = run("exercise", "--seed", "3", "--kind", kind, "--keys", "4")
    assert problem.exit_code == 0, problem.stderr
    doc = json.loads(problem.stdout)
    key = run("exercise", "--seed", "3", "--kind", kind, "--keys", "4", "--answers").stdout
    assert run("check", "-", input=key).exit_code == 0
    if KINDS[kind].sentence == "one":
        assert doc["query_labels"] == doc["key_labels"] and len(doc["key_labels"]) == 4
    elif kind == "decode":  # the newest word over the sentence so far
        assert doc["query_labels"] == doc["key_labels"][-1:]
    else:
        assert not set(doc["query_labels"]) & set(doc["key_labels"])
    if kind in ("causal", "alibi"):
        assert doc["mask"] == "causal"
    assert ("alibi" in doc) == (kind == "alibi")
    if kind in ("multihead", "cross", "posenc"):
        assert "X" in doc and "W_Q" in doc and "Q" not in doc
    assert ("X_kv" in doc) == (kind == "cross")
    assert ("W_O" in doc and json.loads(key)["heads"].__len__() == 2) == (kind == "multihead")


def test_a_causal_mask_is_self_attention_over_one_sentence():
    doc = build(Options(11, keys=4, mask="causal")).doc
    assert doc["query_labels"] == doc["key_labels"] and len(doc["Q"]) == 4
    with pytest.raises(ExerciseError, match="queries \\(2\\) must equal keys \\(4\\)"):
        build(Options(11, queries=2, keys=4, kind="causal"))


def test_posenc_adds_the_rounded_sinusoidal_encoding_to_the_embeddings():
    from attncli.problem.posenc import positional_encoding

    exercise = build(Options(4, "posenc", keys=5, dim=2, heads=2))
    E, PE = np.array(exercise.shown["E"]), np.array(exercise.shown["PE"])
    assert np.array_equal(PE, np.round(positional_encoding(5, 4), 2))
    assert np.allclose(exercise.doc["X"], E + PE)
    assert "X" not in exercise.shown


@pytest.mark.parametrize("seed", range(40))
def test_no_two_keys_are_identical(seed):
    for kind in ("plain", "causal"):
        K = build(Options(seed, keys=6, dim=1, kind=kind)).doc["K"]
        assert len({tuple(k) for k in K}) == 6
    for kind in ("multihead", "cross", "posenc"):
        doc = build(Options(seed, keys=5, kind=kind, heads=2)).doc
        X = np.array(doc.get("X_kv", doc["X"]))
        K = X @ np.array(doc["W_K"])
        assert len({tuple(k) for k in K.tolist()}) == 5, (kind, seed)
    with pytest.raises(ExerciseError, match="different keys"):
        build(Options(seed, keys=12, dim=1))  # only 9 values for 12 one-number keys


def test_a_problem_set_is_one_json_document_of_reproducible_problems(run):
    result = run("exercise", "--seed", "20", "--count", "3", "--kind", "causal")
    problems = json.loads(result.stdout)["problems"]
    assert [p["title"] for p in problems] == [f"Problem {k}: causal self-attention" for k in (1, 2, 3)]
    for k, p in enumerate(problems):
        alone = json.loads(run("exercise", "--seed", 20 + k, "--kind", "causal").stdout)
        assert {**p, "title": None} == {**alone, "title": None}
        assert run("compute", "-", "--format", "json", input=json.dumps(p)).exit_code == 0
    keys = json.loads(run("exercise", "--seed", "20", "--count", "3", "--kind", "causal", "--answers").stdout)
    assert len(keys["problems"]) == 3 and all(k["reproduce"].startswith("attn exercise --seed 2")
                                              for k in keys["problems"])


def test_markdown_worksheet_values_as_written_and_blank_grids(run):
    sheet = run("exercise", "--seed", "42", "--format", "markdown").stdout
    assert sheet == (GOLDEN_SHEET)
    key = run("exercise", "--seed", "42", "--format", "markdown", "--answers").stdout
    assert "| home | 0.0431 | 0.0873 | 0.8696 |" in key  # weights filled in
    assert "**output = weights V**" in key and key.rstrip().endswith(
        "reproduce with: `attn exercise --seed 42 --kind plain --queries 1 --keys 3 --dim 2 --value-dim 2 --heads 1`")


def test_latex_worksheet_has_ruled_blank_grids_and_a_key(run):
    sheet = run("exercise", "--seed", "42", "--format", "latex").stdout
    assert r"\section*{Exercise}" in sheet and r"\paragraph{Q}" in sheet
    assert r"home & $-0.5$ & $-1$ \\" in sheet
    assert r"\rule[-1em]{0pt}{2.6em}home & \hspace{5em} & \hspace{5em} & \hspace{5em} \\ \hline" in sheet
    assert r"\paragraph{scores = Q K$^\top$}" in sheet and "1.5000" not in sheet
    key = run("exercise", "--seed", "42", "--format", "latex", "--answers").stdout
    assert r"\section*{Exercise --- answer key}" in key and r"\hspace" not in key
    assert r"\begin{flushleft}reproduce with: \texttt{attn exercise --seed 42" in key


def test_latex_sheets_set_subscripts_as_math_and_rule_off_the_row_labels(run):
    # LaTeX printed d\_k and W\_Q with literal underscores, the weight matrices' row numbers ran
    # into the values, the answer boxes were a line high and the key's reproduce line ran off the
    # margin (typewriter spaces do not stretch in a justified line).
    sheet = run("exercise", "--seed", "3", "--kind", "multihead", "--format", "latex").stdout
    assert r"scale = 1/$\surd d_{k}$, $d_{k}$ = 2" in sheet
    assert r"\paragraph{$W_{Q}$}" in sheet and r"\paragraph{Q = X $W_{Q}$}" in sheet
    assert r"d\_k" not in sheet and r"W\_" not in sheet and "$$" not in sheet
    assert sheet.count(r"\begin{tabular}{l|rrrr}") == 5  # X, W_Q, W_K, W_V, W_O: labels ruled off
    tiles = run("exercise", "--seed", "3", "--kind", "tiles", "--format", "latex").stdout
    assert r" & m & alpha & l & $O_{0}$ & $O_{1}$ \\ \hline" in tiles
    window = run("exercise", "--seed", "3", "--kind", "window", "--keys", "4", "--format", "latex").stdout
    assert r"sliding\_window = 2" in window  # a name keeps its underscore
    cross = run("exercise", "--seed", "3", "--kind", "cross", "--format", "latex", "--answers").stdout
    assert r"K = $X_{\mathrm{kv}}$ $W_{K}$" in cross


GOLDEN_SHEET = """\
## Exercise

Compute the attention weights and output for the query.

- scale = 1/√d_k, d_k = 2
- answer: scores, scaled, weights, output; write each value with at least 2 decimals (or the exact value)

**Q**

| | 0 | 1 |
|---|---:|---:|
| home | -0.5 | -1 |

**K**

| | 0 | 1 |
|---|---:|---:|
| cat | -1.5 | 2 |
| we | -1.5 | 1 |
| bird | -2 | -2 |

**V**

| | 0 | 1 |
|---|---:|---:|
| cat | -3 | -2 |
| we | -2 | 1 |
| bird | 1 | -3 |

**scores = Q Kᵀ**

| | cat | we | bird |
|---|---:|---:|---:|
| home |   |   |   |

**scaled = scores · scale**

| | cat | we | bird |
|---|---:|---:|---:|
| home |   |   |   |

**weights = softmax(scaled) over keys**

| | cat | we | bird |
|---|---:|---:|---:|
| home |   |   |   |

**output = weights V**

| | 0 | 1 |
|---|---:|---:|
| home |   |   |
"""


def test_worksheets_for_heads_projections_and_a_mask(run):
    key = run("exercise", "--seed", "8", "--kind", "multihead", "--keys", "2", "--format", "markdown",
              "--answers").stdout
    titles = [line for line in key.splitlines() if line.startswith("**")]
    assert titles == ["**X**", "**W_Q**", "**W_K**", "**W_V**", "**W_O**", "**Q = X W_Q**", "**K = X W_K**",
                      "**V = X W_V**"] + [f"**{stage} (head {h}) = {formula}**" for h in (0, 1) for stage, formula in (
                          ("scores", "Q Kᵀ"), ("scaled", "scores · scale"), ("weights", "softmax(scaled) over keys"),
                          ("output", "weights V"))] + ["**output = concat W_O**"]
    sheet = run("exercise", "--seed", "8", "--keys", "2", "--queries", "2", "--mask", "random",
                "--format", "markdown").stdout
    assert "**mask (1 = may attend)**\n\n| | sun | she |\n|---|---:|---:|\n| it | 1 | 1 |\n| fast | 1 | 0 |" in sheet
    assert "**masked = scaled, −∞ where masked**" in sheet  # a mask and no bias
    cross = run("exercise", "--seed", "8", "--kind", "cross", "--format", "markdown").stdout
    assert "**K = X_kv W_K**" in cross and "**Q = X W_Q**" in cross
    posenc = run("exercise", "--seed", "8", "--kind", "posenc", "--format", "markdown").stdout
    assert "**E (token embeddings)**" in posenc and "**X = E + PE**" in posenc


def test_impossible_exercises_are_one_line_errors(run):
    assert_error(run("exercise", "--kind", "causal", "--queries", "2", "--keys", "4"),
                 "--queries: a causal exercise is self-attention over one sentence, so queries (2) must equal keys (4)")
    assert_error(run("exercise", "--keys", "12", "--dim", "1"), "--keys: could not draw 12 different keys")
    assert_error(run("exercise", "--kind", "posenc", "--dim", "1"), "--dim: a posenc exercise pairs sin and cos")


def test_an_alibi_exercise_has_easy_slopes_and_its_key_holds_the_masked_stage(run):
    doc = build(Options(5, keys=3, heads=2, kind="alibi")).doc
    assert doc["alibi"] == [0.5, 0.25] and doc["mask"] == "causal"
    key = json.loads(run("exercise", "--seed", "5", "--kind", "alibi", "--heads", "2", "--answers").stdout)
    assert key["alibi_slopes"] == [0.5, 0.25] and all("masked" in head for head in key["heads"])
    sheet = run("exercise", "--seed", "5", "--kind", "alibi", "--format", "markdown").stdout
    assert "- ALiBi: −slope · |q_pos − k_pos| added to the logits of each head, with any bias; given slopes: 0.5" \
        in sheet
    assert "**masked = scaled + ALiBi, −∞ where masked**" in sheet


def test_a_rope_exercise_starts_its_positions_at_1_so_every_row_turns(run):
    key = json.loads(run("exercise", "--kind", "rope", "--seed", "2", "--answers").stdout)
    assert key["q_positions"] == key["k_positions"] == [1, 2, 3]
    for name, given in (("Q_rope", key["Q"]), ("K_rope", key["K"])):
        assert all(row != plain for row, plain in zip(key["heads"][0][name], given))


def test_a_worksheets_gradient_grids_are_titled_by_what_the_scores_read():
    """A RoPE problem's backward pass: d_Q is by K_rope, rotated back (grads.title), on the sheet too."""
    rope = build(Options(3, "rope", dim=4))
    doc = rope.doc | {"dO": "ones"}
    trace = attend(build_problem(doc))
    sheet = worksheet.markdown([(replace(rope, doc=doc, trace=trace), trace)], False)
    assert "**d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹)**" in sheet
    assert "**d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹)**" in sheet


def test_the_pages_students_get_from_a_key_never_show_its_seed(run, tmp_path):
    # The class page made against the key showed "reproduce with: attn exercise --seed 171 …" in its
    # header (the description): with the seed, a student makes the key.
    key = tmp_path / "key.json"
    key.write_text(run("exercise", "--seed", "171", "--answers").stdout)
    answers = tmp_path / "ada.json"
    answers.write_text(json.dumps({"weights": [[0.1, 0.2, 0.7]]}))
    assert json.loads(key.read_text())["reproduce"].startswith("attn exercise --seed 171 ")
    page = tmp_path / "page.html"
    assert run("check", answers, key, "-o", page).exit_code == 1
    shown = [page.read_text()] + [run("check", answers, key, "-f", fmt).stdout
                                  for fmt in ("table", "markdown", "json", "gradescope", "csv")]
    for text in shown:
        assert "--seed" not in text and "reproduce" not in text
    assert run("compute", key, "-f", "json").exit_code == 0  # the key is still attn compute input


def test_a_one_head_backward_sheet_labels_do_by_query_and_asks_no_copy_of_it(run):
    sheet = run("exercise", "--kind", "backward", "--seed", "0", "--format", "markdown").stdout
    query = sheet.split("**Q**")[1].split("|---:|\n| ")[1].split(" |")[0]  # the query's label, as Q's row shows it
    assert f"**dO**\n\n| | 0 | 1 |\n|---|---:|---:|\n| {query} |" in sheet
    assert "**d_output = dO split into heads**" not in sheet and "d_output = dO (one head)" in sheet
    assert "d_output" not in json.loads(run("exercise", "--kind", "backward", "--seed", "0").stdout)["ask"]
    two = run("exercise", "--kind", "backward", "--seed", "0", "--heads", "2", "--format", "markdown").stdout
    assert "**d_output = dO split into heads (head 1)**" in two


def test_latex_sets_every_gradient_name_one_way_as_math(run):
    sheet = run("exercise", "--kind", "backward", "--seed", "0", "--heads", "2", "--format", "latex").stdout
    assert "d\\_" not in sheet  # d\_output as text beside $d_{V}$ as math
    for name in ("output", "weights", "scores"):
        assert f"$d_{{\\mathrm{{{name}}}}}$" in sheet
    assert "$d_{V}$" in sheet and "$d_{Q}$" in sheet
