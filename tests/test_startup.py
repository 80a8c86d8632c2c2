"""Start-up: what each command line loads, and the imports kept inside functions for it.

`attn --version` and `--help` load neither numpy nor rich; `attn compute --format json` loads
numpy but never rich. Imports sit at module top; the few kept inside a function (a command's work,
rich for the table views) say why, with "start-up" in the comment just above them."""

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SAMPLES

RUN = "import sys; sys.argv[0] = 'attn'; from attncli.cli import main; main()"
LOADED = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(repr(sorted("
          "{m.split('.')[0] for m in sys.modules} & {'numpy', 'rich'})) + '\\n')); ")


def loaded(*args: str) -> str:
    """The heavy packages `attn ARGS` loaded, as printed at exit."""
    done = subprocess.run([sys.executable, "-c", LOADED + RUN, *args], capture_output=True, text=True, cwd=ROOT)
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args, heavy", [
    (("--version",), "[]"),
    (("compute", "--help"), "['rich']"),  # typer draws the help with rich, and nothing more
    (("compute", str(SAMPLES / "scooter.json"), "--format", "json"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "markdown"), "['numpy']"),
    (("exercise", "--seed", "1"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "table"), "['numpy', 'rich']"),
    (("check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "json"), "['numpy']"),
    (("check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "table"),
     "['numpy', 'rich']"),
])
def test_each_command_line_loads_only_what_it_needs(args, heavy):
    assert loaded(*args) == heavy


# Files whose imports this lane keeps at module top (the rest of attncli/ is checked the same way
# once every module follows the rule).
CHECKED = ["attncli/cli.py", "attncli/api.py", "attncli/__init__.py", "attncli/answers.py", "attncli/marking.py",
           "attncli/marking_backward.py", "attncli/tile_marks.py", "attncli/grading.py", "attncli/exercise.py",
           "attncli/posenc.py", "attncli/errors.py", "attncli/variants.py", "attncli/rope.py", "attncli/values.py",
           "attncli/choices.py", "attncli/commands/*.py", "attncli/render/[!e]*.py", "attncli/render/export.py"]


def function_level_imports(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for statement in tree.body if isinstance(statement, (ast.Try, ast.If))
           for node in ast.walk(statement)} | {id(statement) for statement in tree.body}
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top]


def test_an_import_inside_a_function_says_it_is_there_for_start_up():
    unexplained = []
    for pattern in CHECKED:
        for path in sorted(ROOT.glob(pattern)):
            lines = path.read_text(encoding="utf-8").splitlines()
            for node in function_level_imports(path):
                above = lines[max(0, node.lineno - 6):node.lineno - 1]
                if not any("start-up" in line for line in above if line.strip().startswith("#")):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert unexplained == []
