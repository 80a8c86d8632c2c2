"""Help text and hints found by trying the CLI: nothing cut off, no placeholders on flags,
paragraphs wrapped as paragraphs, and hints that point somewhere real."""

import json
import re

import pytest

from attncli.base.errors import InputError
from attncli.cli import prose
from attncli.commands.compute import need_input, views
from tests.conftest import SAMPLES, assert_error

WIDTH = {"COLUMNS": "80", "NO_COLOR": "1"}


def help_text(run, *command):
    result = run(*command, "--help", env=WIDTH)
    assert result.exit_code == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    return result.stdout


def words(text: str) -> str:
    """The help's words in order, without the panels' borders and line breaks."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_stages_help_lists_every_stage_uncut(run):
    text = help_text(run, "compute")
    assert "…" not in text
    assert f"Comma-separated stages to show: {', '.join(views())}." in words(text)


@pytest.mark.parametrize("command", [(), ("compute",), ("check",), ("exercise",), ("example",), ("posenc",)])
def test_flags_show_no_bool_placeholder(run, command):
    text = help_text(run, *command)
    assert "<bool>" not in text
    assert "--help" in text


@pytest.mark.parametrize("command", ["check", "exercise"])
def test_help_wraps_paragraphs_not_lines(run, command):
    text = help_text(run, command)
    # In every paragraph of the description, each line but the last is filled (rich wrapped it at
    # 80): no line ends half-way through a sentence with the sentence going on below it.
    description = text.split("╭")[0].split("Usage:")[1].split("\n", 1)[1]
    paragraphs = [[line.strip() for line in p.splitlines() if line.strip()]
                  for p in re.split(r"\n\s*\n", description)]
    assert sum(len(p) > 1 for p in paragraphs) >= 2  # there are paragraphs that wrap at all
    for paragraph in paragraphs:
        assert all(len(line) > 65 for line in paragraph[:-1]), paragraph
    assert "Exit codes: 0 every given cell" in words(text) or command != "check"


def test_prose_joins_lines_within_paragraphs_and_keeps_marked_ones():
    doc = """First line
    goes on.

    \b
    kept
    as is
    """
    assert prose(doc) == "First line goes on.\n\nkept\nas is"


def test_no_input_hint_names_a_command_that_works_anywhere():
    with pytest.raises(InputError) as caught:
        need_input(None, {}, stdin_is_terminal=True)
    assert "attn example scooter | attn compute" in caught.value.message
    assert "samples/" not in caught.value.message


def test_causal_with_fewer_queries_than_keys_hints_at_lower_right(run):
    result = run("compute", "--q", "1;2", "--k", "1;2;3", "--v", "1;2;3", "--mask", "causal", "-f", "json")
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "causal_lower_right" in warnings[0] and "(2) than keys (3)" in warnings[0]
    # every warning goes to both stderr and the JSON (issue 17, trial 2 item 5)
    assert json.loads(result.stdout)["warnings"] == [warnings[0].removeprefix("warning: ")]


@pytest.mark.parametrize("mask, lq", [("causal", 3), ("causal_lower_right", 2), ("1,0,0;1,1,0", 2)])
def test_no_causal_hint_otherwise(run, mask, lq):
    q = ";".join(["1"] * lq)
    result = run("compute", "--q", q, "--k", "1;2;3", "--v", "1;2;3", "--mask", mask, "-f", "json")
    assert result.exit_code == 0 and "causal_lower_right" not in result.stderr


def test_row_gets_a_did_you_mean(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--explain", "--row", "iz"),
                 '--row: no query "iz" (did you mean "it"?); the queries are it')


@pytest.mark.parametrize("scale, value", [
    ("0.5", 0.5), ("1/1.4142", 1 / 1.4142), ("1/sqrt(2)", 1 / 2 ** 0.5), ("1 / √2", 1 / 2 ** 0.5),
    ("sqrt(0.25)", 0.5), ("-1", -1.0), ("3/4", 0.75),
])
def test_scale_takes_numbers_fractions_and_roots(run, scale, value):
    doc = run.json("compute", "--q", "1", "--k", "1;2", "--v", "1;2", "--scale", scale)
    assert doc["scale"] == value


@pytest.mark.parametrize("scale", ["abc", "1/0", "1/2/3", "sqrt(-1)", "1/", "√"])
def test_scale_errors_in_our_words(run, scale):
    assert_error(run("compute", "--q", "1", "--k", "1;2", "--v", "1;2", "--scale", scale),
                 "--scale: ", "is not a scale; expected a number (0.7071), a fraction (1/1.4142) "
                 "or a square root (1/sqrt(2), 1/√2)")


@pytest.mark.parametrize("mask, found", [
    (None, "there is no mask"),
    ("causal", 'the mask is the string "causal"'),
    ("causal_lower_right", 'the mask is the string "causal_lower_right"'),
])
def test_invert_mask_needs_a_mask_matrix(run, mask, found):
    # issue 9: --invert-mask was silently ignored here.
    args = ["compute", "--q", "1", "--k", "1;2", "--v", "1;2", "--invert-mask"] + (["--mask", mask] if mask else [])
    assert_error(run(*args), "--invert-mask: ", found, "only a true/false mask matrix")


def test_invert_mask_from_a_file_problem_without_mask(run):
    assert_error(run("compute", SAMPLES / "scooter.json", "--invert-mask"), "--invert-mask: ", "there is no mask")


def test_invert_mask_with_a_matrix_still_inverts(run):
    doc = run.json("compute", "--q", "1", "--k", "1;2", "--v", "1;2", "--mask", "true,false", "--invert-mask")
    assert doc["heads"][0]["weights"] == [[0.0, 1.0]]


def test_shell_completion_is_offered_and_completes():
    from typer.testing import CliRunner

    from attncli.cli import app

    runner = CliRunner()
    assert "--install-completion" in runner.invoke(app, ["--help"], env=WIDTH).stdout
    env = {"_ATTN_COMPLETE": "complete_bash", "COMP_WORDS": "attn compute --form", "COMP_CWORD": "2"}
    result = runner.invoke(app, [], env=env, prog_name="attn")
    assert result.exit_code == 0 and result.stdout.split() == ["--format"]


def test_check_on_a_terminal_with_no_problem_says_how_instead_of_waiting():
    # `attn check --weights …` with no file read the terminal and sat there, silent, until Ctrl-D.
    import os
    import pty
    import subprocess
    import sys

    main, terminal = pty.openpty()
    try:
        result = subprocess.run([sys.executable, "-m", "attncli", "check", "--weights", "0.1,0.2,0.7"],
                                stdin=terminal, capture_output=True, text=True, timeout=30)
    finally:
        os.close(main)
        os.close(terminal)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: no problem: name one") and result.stderr.count("\n") == 1
    assert "attn example scooter | attn check --weights" in result.stderr


@pytest.mark.parametrize("name", ["scooter", "scooter.json", "samples/causal.json"])
def test_a_missing_file_named_like_an_example_points_to_attn_example(run, tmp_path, monkeypatch, name):
    # A learner away from the repository types the README's `attn compute samples/scooter.json`.
    monkeypatch.chdir(tmp_path)
    stem = name.split("/")[-1].removesuffix(".json")
    assert_error(run("compute", name), f"{name}: no such file",
                 f"(a bundled example: attn example {stem} prints it)")
    assert_error(run("compute", "homework.json"), "homework.json: no such file")
    assert "example" not in run("compute", "homework.json").stderr


@pytest.mark.parametrize("command", [(), ("compute",), ("check",), ("exercise",)])
def test_no_color_help_has_no_style_at_all(run, command):
    # README: NO_COLOR turns off every style, bold and dim included; rich alone keeps those, and
    # Typer's help is rich. FORCE_COLOR and TERM stand in for a colour terminal (CI runs under TERM=dumb).
    colour = {"FORCE_COLOR": "1", "COLUMNS": "80", "TERM": "xterm-256color"}
    result = run(*command, "--help", env=colour | {"NO_COLOR": "1"})
    assert result.exit_code == 0 and "Usage" in result.stdout
    assert "\x1b[" not in result.stdout
    assert "\x1b[" in run(*command, "--help", env=colour | {"NO_COLOR": ""}).stdout


def test_require_help_names_the_missing_status_the_table_shows(run):
    # The table and JSON say "missing ?", not "wrong", for a required stage not answered.
    assert "a missing one counts its cells as missing (? in the table), not right." in words(help_text(run, "check"))


# Every example a --help shows runs (issue 29): each is run as written, in a folder holding the
# files it names, `attn` in-process and anything else (jq, printf) as a program.

COMMANDS = ("compute", "check", "exercise", "example", "posenc", "capture")
EXAMPLE_CUT = re.compile(r"\s{3,}\(.*\)$")  # `attn … --cost   (FLOPs and bytes, …)`: words after the command


def help_examples() -> list[tuple[str, str]]:
    """(command, example) for every line of every command's help that is a command line."""
    from typer.testing import CliRunner

    from attncli.cli import app

    found = []
    for command in COMMANDS:
        text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300", "NO_COLOR": "1"}).stdout
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("attn ") and "│" not in line:
                found.append((command, EXAMPLE_CUT.sub("", line)))
    return found


EXAMPLES = help_examples()


def _files(folder, example: str) -> None:
    """What the examples name: a problem, a learner's answers (to the exercise of seed 7 when the
    example makes its key), a class of answers, an .npz, a learner's function."""
    from typer.testing import CliRunner

    from attncli.cli import app

    (folder / "samples").symlink_to(SAMPLES)
    scooter = json.loads((SAMPLES / "scooter.json").read_text())
    (folder / "problem.json").write_text(json.dumps(scooter))
    answers = {"weights": [[0.0454, 0.7679, 0.1867]]}
    if "key.json" in example:
        answers = json.loads(CliRunner().invoke(app, ["exercise", "--seed", "7", "--answers"]).stdout)
    (folder / "answers.json").write_text(json.dumps(answers))
    (folder / "answers").mkdir()
    for name in ("ada.json", "ben.json"):
        (folder / "answers" / name).write_text(json.dumps(answers))
    CliRunner().invoke(app, ["compute", str(SAMPLES / "random_4x8.json"), "-o", str(folder / "big.npz")])
    (folder / "my_attention.py").write_text(
        "import numpy as np\n\n\ndef attention(Q, K, V):\n    s = Q @ K.T / np.sqrt(K.shape[-1])\n"
        "    e = np.exp(s - s.max(axis=-1, keepdims=True))\n    w = e / e.sum(axis=-1, keepdims=True)\n"
        "    return w @ V, w\n")


def run_example(run, example: str, folder) -> None:
    """Run `example` as a shell would (`&&`, `|`, `>`), in `folder`; every step must succeed
    (attn check may exit 1: the answers differ)."""
    import glob
    import shlex
    import subprocess

    for step in example.split(" && "):
        text = None
        for stage in step.split(" | "):
            words = shlex.split(stage)
            target = None
            if ">" in words:
                target, words = words[words.index(">") + 1], words[:words.index(">")]
            words = [w for word in words for w in (sorted(glob.glob(word, root_dir=folder)) or [word])]
            if words[0] == "attn":
                result = run(*words[1:], input=text)
                ok = result.exit_code == 0 or (words[1] == "check" and result.exit_code == 1)
                assert ok, (example, stage, result.exit_code, result.stderr)
                text = result.stdout
            else:
                done = subprocess.run(words, input=text, capture_output=True, text=True, cwd=folder)
                assert done.returncode == 0, (example, stage, done.stderr)
                text = done.stdout
            if target:
                (folder / target).write_text(text)
                text = None


def test_the_examples_are_found():
    assert {command for command, _ in EXAMPLES} == set(COMMANDS) and len(EXAMPLES) >= 12


@pytest.mark.parametrize("command, example", [
    pytest.param(c, e, marks=[pytest.mark.slow] if c == "capture" else []) for c, e in EXAMPLES])
def test_every_example_of_every_help_runs(run, tmp_path, monkeypatch, request, command, example):
    if command == "capture":
        (tmp_path / "tiny-llama").symlink_to(request.getfixturevalue("tiny_llama"))
        if "model.gguf" in example:  # a tiny quantized Llama laid out as llama.cpp writes one
            from tests.fixtures.make_tiny_gguf import make

            make(tmp_path / "model.gguf")
            example = example.replace('--text "…"', "--ids 3,1,4,1,5")  # "…" is the reader's text; no tokenizer here
    _files(tmp_path, example)
    monkeypatch.chdir(tmp_path)
    run_example(run, example, tmp_path)
