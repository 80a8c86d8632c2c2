"""Start-up: what each command line loads, and the imports kept inside functions for it.

`attn --version` and `--help` load neither numpy nor rich; `attn compute --format json` loads
numpy but never rich. Imports sit at module top in every module of attncli/; the few kept inside a
function (a command's work, rich for the table views) say why, with "start-up" in the comment just
above them. The commands read the stage names from attncli/base/names.py, which imports nothing."""

import ast
import functools
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SAMPLES, fast_sample

HEAVY = ("numpy", "rich", "torch", "transformers", "ml_dtypes")
TABLES = ("attncli.stages.table", "attncli.stages.grads", "attncli.base.names")
COMMANDS = ("compute", "check", "learn", "capture")
# What `attn ARGS` loaded, printed by one process at its exit: the heavy packages, the stage tables
# and which commands were built (each test below reads its part; a command line shared by several
# tests runs once).
RUN = ("import atexit, json, sys\n"
       "def said():\n"
       "    loaded = set(sys.modules)\n"
       f"    print(json.dumps([sorted({{m.split('.')[0] for m in loaded}} & set({HEAVY!r})),\n"
       f"                      sorted(m for m in {TABLES!r} if m in loaded),\n"
       f"                      sorted(c for c in {COMMANDS!r} if 'attncli.commands.' + c in loaded)]),\n"
       "          file=sys.__stderr__)\n"
       "atexit.register(said)\n"
       "sys.argv[0] = 'attn'\n"
       "from attncli.cli import main\n"
       "main()\n")


@functools.cache
def loaded(*args: str) -> tuple[str, list[str], list[str]]:
    """What `attn ARGS` loaded, in a process of its own: (the heavy packages as a list's repr, the
    stage tables, the commands built)."""
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, cwd=ROOT)
    assert done.stderr.strip(), f"attn {' '.join(args)} said nothing at its exit"
    heavy, tables, commands = json.loads(done.stderr.strip().splitlines()[-1])
    return repr(heavy), tables, commands


COMMAND_LINES = [
    (("--version",), "[]"),
    (("compute", "--help"), "['rich']"),  # typer draws the help with rich, and nothing more
    (("compute", str(SAMPLES / "scooter.json"), "--format", "json"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "markdown"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "json", "--dtype", "float16"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "json", "--dtype", "bfloat16"), "['ml_dtypes', 'numpy']"),
    (("exercise", "--seed", "1"), "['numpy']"),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "table"), "['numpy', 'rich']"),
    (("check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "json"), "['numpy']"),
    (("check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "table"),
     "['numpy', 'rich']"),
]


# A process each: the command lines the other tests also run, markdown (no rich) and float16 (no
# ml_dtypes), in the fast suite; the rest in the slow profile.
@pytest.mark.parametrize("args, heavy", fast_sample(COMMAND_LINES, *COMMAND_LINES[:5], COMMAND_LINES[6],
                                                    COMMAND_LINES[9]))
def test_each_command_line_loads_only_what_it_needs(args, heavy):
    assert loaded(*args)[0] == heavy


def function_level_imports(tree: ast.Module):
    top = {id(node) for statement in tree.body if isinstance(statement, (ast.Try, ast.If))
           for node in ast.walk(statement)} | {id(statement) for statement in tree.body}
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top]


def test_an_import_inside_a_function_says_it_is_there_for_start_up(sources):
    """Every module of attncli/: an import inside a function is there for start-up, and a comment
    just above it says so (and why: what it would load)."""
    unexplained = []
    for module in sources:
        lines = module.text.splitlines()
        for node in function_level_imports(module.tree):
            above = lines[max(0, node.lineno - 6):node.lineno - 1]
            if not any("start-up" in line for line in above if line.strip().startswith("#")):
                unexplained.append(f"{module.path.relative_to(ROOT)}:{node.lineno}")
    assert unexplained == []


def test_the_core_imports_at_module_top(sources):
    """Below the commands and the views, no module keeps an import inside a function: the start-up
    ones belong to the commands (and to the views that load rich), which load the core lazily, and to
    the packages that load torch on one path only (attn capture, attn check --code --array torch), and
    to the precision lab's run, which loads ml_dtypes for bfloat16 alone (issue 31: the float64 path's
    start-up unchanged)."""
    core = [module for module in sources
            if module.path.parent.name not in ("attncli", "commands", "render", "capture", "code")
            and module.path != ROOT / "attncli" / "compute" / "precision.py"]
    assert len(core) > 40
    inside = [f"{module.path.relative_to(ROOT)}:{node.lineno}" for module in core
              for node in function_level_imports(module.tree)]
    assert inside == []


def test_the_names_module_loads_nothing(sources):
    """attncli/base/names.py is what `attn check` and `attn compute` read at start-up, before numpy."""
    (tree,) = [module.tree for module in sources if module.name == "attncli.base.names"]
    assert [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))] == []


@pytest.mark.parametrize("args, tables", [
    (("--version",), []),  # no command is built: not even the names its options read
    (("compute", "--help"), ["attncli.base.names"]),
])
def test_version_and_help_load_no_stage_table(args, tables):
    """`attn compute --help` reads the names (attncli/base/names.py), not the tables that load numpy;
    `attn --version` builds no command at all."""
    assert loaded(*args)[1] == tables


@pytest.mark.parametrize("args, modules", [
    (("--version",), []),
    (("compute", str(SAMPLES / "scooter.json"), "--format", "json"), ["compute"]),
    (("exercise", "--seed", "1"), ["learn"]),
    (("--help",), ["capture", "check", "compute", "learn"]),
])
def test_a_command_is_built_only_when_it_is_named(args, modules):
    """Typer builds every parameter of every command it is given; attn gives it the command on the
    line (cli.COMMANDS: its module, option table and choices loaded then), and --help all of them."""
    assert loaded(*args)[2] == modules
