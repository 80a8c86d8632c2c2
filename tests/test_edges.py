"""Errors are data until the CLI edge: a field and advice on the error, options said only by the
commands; one `--format auto` rule; the masked-rows claim about JAX said exactly."""

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

import attncli
from attncli import api
from attncli.base.errors import AttnError, InputError, NumericError
from attncli.commands import edge
from attncli.document import reading as problem_module
from attncli.document.reading import build_problem
from attncli.marking.exercise import ExerciseError, Options, build
from tests.conftest import ROOT, SCOOTER, assert_error

PACKAGE = Path(attncli.__file__).parent
EDGE = ("commands", "cli.py", "render")  # where option names may be written
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """Every string constant that is not a docstring (a docstring may cite an option: it is help
    for people reading the code, not text the core says) nor the help of a variant's option (a
    `Flag(...)` of attncli/problem/variants.py: the --help text the commands show, kept with the record)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Flag":
            skipped |= {id(inner) for arg in node.args for inner in ast.walk(arg)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in skipped]


def test_no_module_outside_the_cli_edge_names_an_option(sources):
    found = []
    for module in sources:
        relative = module.relative
        if relative.split("/")[0] in EDGE:
            continue
        for node in _strings(module.tree):
            found += [f"{relative}:{node.lineno}: {m}" for m in OPTION.findall(node.value)]
    assert found == []


def test_the_scan_would_see_an_option_in_a_message():
    tree = ast.parse('def f():\n    """Use --dtype."""\n    raise ValueError("or use --dtype float64")\n')
    assert [OPTION.findall(n.value) for n in _strings(tree)] == [["--dtype"]]


@pytest.mark.parametrize("doc, field", [
    ({"Q": [[1, 2]], "K": [[1]], "V": [[1]]}, "K"),
    ({"Q": [[1, "a"]], "K": [[1, 0]], "V": [[1]]}, "Q[0][1]"),
    (SCOOTER | {"mask": "causl"}, "mask"),
    (SCOOTER | {"query_labels": ["a", "b"]}, "query_labels"),
    (SCOOTER | {"heads": 0}, "heads"),
    (SCOOTER | {"masked_rows": "nan"}, "masked_rows"),
    ({"X": [[1, 0]], "W_Q": [[1], [0]], "W_K": [[1], [0]], "W_V": [[1], [0]], "b_O": [1]}, "b_O"),
])
def test_an_input_error_carries_its_field(doc, field):
    with pytest.raises(InputError) as caught:
        build_problem(doc)
    assert caught.value.field == field and caught.value.key == field.split("[")[0]


def test_an_answer_error_carries_its_path_as_field():
    trace = api.attend(**SCOOTER)
    with pytest.raises(InputError) as caught:
        api.check({"heads": [{"weights": [[1, 2]]}]}, trace)
    assert caught.value.field == "heads[0].weights" and caught.value.key == "heads"


def test_attribution_reads_the_field_not_the_message(monkeypatch):
    def refuse(value):
        raise InputError("a message that starts with another word", field="heads")

    monkeypatch.setattr(problem_module, "_heads_count", refuse)
    with pytest.raises(InputError) as caught:
        build_problem(SCOOTER | {"heads": 1}, {"heads": "--heads"}, "p.json")
    assert caught.value.source == "--heads"


def test_an_exercise_error_names_the_option_of_its_field(run):
    with pytest.raises(ExerciseError) as caught:
        build(Options(1, "causal", queries=2, keys=3))
    assert caught.value.field == "queries" and "--" not in str(caught.value)
    assert_error(run("exercise", "--kind", "causal", "--queries", "2"), "error: --queries: ", "must equal keys")


OVERFLOW = {"Q": [[1e30]], "K": [[1e30]], "V": [[1]], "dtype": "float32"}
BLOCKED = {"Q": [[1], [2]], "K": [[1], [2]], "V": [[1], [2]], "mask": [[True, True], [False, False]]}


def test_overflow_advice_is_a_keyword_in_python_and_an_option_on_the_command_line(run):
    with pytest.raises(NumericError) as caught:
        api.attend(**OVERFLOW)
    assert str(caught.value).endswith("scale the inputs down or use dtype='float64'")
    assert caught.value.advice.setting == "dtype" and caught.value.message.endswith("scale the inputs down")
    assert_error(run("compute", "--q", "1e30", "--k", "1e30", "--v", "1", "--dtype", "float32"),
                 "scale the inputs down or use --dtype float64")


def test_float64_overflow_has_no_dtype_advice():
    with pytest.raises(NumericError) as caught:
        api.attend(Q=[[1e300]], K=[[1e300]], V=[[1]])
    assert caught.value.advice is None and "dtype" not in str(caught.value)


def test_masked_rows_error_advice_is_said_where_it_is_read(run):
    with pytest.raises(InputError) as caught:
        api.attend(**BLOCKED, masked_rows="error")
    assert str(caught.value).endswith("every key is masked for query 1; use masked_rows='zero' or 'uniform' "
                                      "to allow it")
    assert_error(run("compute", "--q", "1;2", "--k", "1;2", "--v", "1;2", "--mask", "1,1;0,0",
                     "--masked-rows", "error"),
                 "every key is masked for query 1; use --masked-rows zero or uniform to allow it")


def test_masked_rows_warning_says_the_policy_as_a_keyword_in_python_and_an_option_in_the_cli(run):
    said = "uniform weights 1/Lk, output = mean of V ({}, as JAX when a boolean mask blocks the row)"
    trace = api.attend(**BLOCKED, masked_rows="uniform")
    assert trace.warnings == ("head 0: every key is masked for query 1; " + said.format("masked_rows='uniform'"),)
    result = run("compute", "--q", "1;2", "--k", "1;2", "--v", "1;2", "--mask", "1,1;0,0",
                 "--masked-rows", "uniform", "--format", "json")
    cli = "head 0: every key is masked for query 1; " + said.format("--masked-rows uniform")
    assert result.exit_code == 0 and result.stderr == f"warning: {cli}\n"
    assert json.loads(result.stdout)["warnings"] == [cli]  # the JSON says what stderr says


def test_an_error_without_advice_reads_as_its_message():
    error = AttnError("K has 3 columns", "p.json", field="K")
    assert str(error) == edge.message(error) == "p.json: K has 3 columns"
    assert edge.message(error, source=False) == "K has 3 columns"


def _format_helps() -> dict[str, str]:
    import typer.main

    from attncli.cli import app

    group = typer.main.get_command(app)
    return {name: param.help for name, command in group.commands.items() for param in command.params
            if param.name == "format" and getattr(param.default, "value", None) == "auto"}


def test_every_auto_format_help_says_the_one_rule():
    import typer.main

    from attncli.cli import app

    helps = _format_helps()
    offering = {name for name, command in typer.main.get_command(app).commands.items() for param in command.params
                if param.name == "format" and "auto" in [word.value for word in type(param.default)]}
    assert "compute" in helps and set(helps) == offering  # every command that offers auto has it by default
    assert all(help.startswith(edge.AUTO_HELP) for help in helps.values())
    output_page = ROOT / "docs" / "reference" / "output.md"
    assert "tables on a terminal, JSON when stdout is piped" in output_page.read_text(encoding="utf-8")


class _Terminal:
    """Stands in for `sys` in commands/edge.py: stdout is a terminal."""

    class stdout:
        @staticmethod
        def isatty() -> bool:
            return True


@pytest.mark.parametrize("args", [
    ("compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "2,0;0,2"),
    ("check", "samples/scooter.json", "--weights", "0.05,0.77,0.19"),
    ("posenc", "--positions", "2", "--dim", "2"),
])
def test_auto_format_is_tables_on_a_terminal_and_json_through_a_pipe(run, monkeypatch, args):
    piped = run(*args)
    json.loads(piped.stdout)  # not a terminal: JSON
    monkeypatch.setattr(edge, "sys", _Terminal)
    shown = run(*args)
    assert shown.stdout.strip() and not shown.stdout.lstrip().startswith("{")


def test_auto_format_keeps_a_text_only_view_as_text_through_a_pipe(run):
    result = run("compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "2,0;0,2", "--explain")
    assert result.exit_code == 0 and not result.stdout.lstrip().startswith("{")
    assert edge.auto_is_table(text_only=True)


def test_the_jax_claim_is_said_exactly(sources):
    exact = ("matches JAX (`jax.nn.dot_product_attention`) exactly when a boolean\nmask blocks the row. "
             "JAX returns NaN for a row blocked by a −∞ bias alone")
    conventions = (ROOT / "docs" / "explanations" / "conventions.md").read_text(encoding="utf-8")
    assert exact in conventions and "only the mask-blocked keys" in conventions
    docs = [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]]
    texts = [module.text for module in sources] + docs
    assert not [s for s in texts if "as JAX)" in s or "(mean of V, as JAX)" in s]


def test_compute_help_states_the_jax_claim_exactly():
    import typer.main

    from attncli.cli import app

    compute = typer.main.get_command(app).commands["compute"]
    help = next(p.help for p in compute.params if p.name == "masked_rows")
    assert "as JAX when a boolean mask blocks the row, but JAX gives NaN for a row blocked by a −∞ bias " \
           "alone, and averages only the mask-blocked keys when a mask and a bias block the row together" in help


def test_a_notice_compares_as_its_text():
    trace = api.attend(**BLOCKED)
    assert trace.warnings[0] == str(trace.warnings[0]) and isinstance(np.asarray(trace.weights), np.ndarray)


# Errors about the whole document (not one key) in the modules that check keys: no field.
DOCUMENT_LEVEL = ("unknown key", "both ", "the top level", "missing ", "row ", "not valid CSV")


@pytest.mark.parametrize("module", ["document/reading.py", "base/values.py", "marking/answers.py", "problem/mask_input.py"])
def test_every_raise_that_knows_its_key_passes_it_as_field(sources, module):
    (parsed,) = [found for found in sources if found.relative == module]
    source = parsed.text
    missing = []
    for node in ast.walk(parsed.tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                and getattr(node.exc.func, "id", "") == "InputError" \
                and not any(keyword.arg == "field" for keyword in node.exc.keywords):
            first = node.exc.args[0]
            text = first.value if isinstance(first, ast.Constant) else "".join(
                part.value for part in getattr(first, "values", [])[:1] if isinstance(part, ast.Constant))
            if not text.startswith(DOCUMENT_LEVEL):
                missing.append(f"{module}:{node.lineno}: {ast.get_source_segment(source, first)[:60]}")
    assert missing == []


@pytest.mark.parametrize("text, empty", [(",it", 1), ("it,", 2), ("a,,b", 2), ("a, ,b", 2)])
def test_an_empty_item_of_a_comma_list_is_refused_by_its_position(text, empty):
    """An empty item anywhere, the first included, is named by its position, never dropped."""
    from attncli.base.errors import comma_items

    with pytest.raises(InputError, match=f"item {empty} is empty; expected words"):
        comma_items(text, "words", field="--query")
    assert comma_items(" a , b ", "words") == ["a", "b"]
