"""Options are declared once (commands/spec.py): each command's table makes its --help, the
settings its options give the document, and the option lists of docs/reference/options.md."""

import re

import pytest

from attncli.commands import capture, check, compute, compute_options, heads, learn, reference, spec
from attncli.commands.spec import Option
from attncli.document import schema
from tests.conftest import ROOT

TABLES = [("compute", compute_options.OPTIONS), ("check", check.OPTIONS), ("exercise", learn.EXERCISE),
          ("example", learn.EXAMPLE), ("posenc", learn.POSENC), ("capture", capture.CAPTURE),
          ("heads", heads.HEADS)]


def help_flags(run, command: str) -> tuple[set[str], set[str]]:
    """(the flags, the argument names) --help lists, one per row of its panels."""
    result = run(command, "--help", env={"COLUMNS": "250", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    flags, arguments = set(), set()
    panel = None
    for line in result.stdout.splitlines():
        title = re.match(r"╭─ (.*?) ─", line)
        if title:
            panel = title.group(1)
        row = re.match(r"│ +(\S+)(?: +(-\w)\b)?", line)
        if not row or not row.group(1)[0].isalnum() and not row.group(1).startswith("-"):
            continue
        if row.group(1).startswith("--"):
            flags |= {row.group(1)} | ({row.group(2)} if row.group(2) else set())
        elif panel == "Arguments":
            arguments.add(row.group(1).removesuffix("..."))
    return flags, arguments


@pytest.mark.parametrize("command, table", TABLES)
def test_help_lists_every_option_of_the_table_and_nothing_else(run, command, table):
    flags, arguments = help_flags(run, command)
    assert flags == {flag for option in table if not option.argument for flag in option.flags} | {"--help"}
    assert arguments == {option.name for option in table if option.argument}


@pytest.mark.parametrize("command, table", TABLES)
def test_help_panels_and_placeholders_come_from_the_table(run, command, table):
    text = run(command, "--help", env={"COLUMNS": "250", "NO_COLOR": "1"}).stdout
    for option in table:
        if option.panel:
            assert f"╭─ {option.panel} ─" in text
        if option.metavar:
            assert re.search(rf"│ +{re.escape(option.flags[0])} .*{re.escape(option.metavar)}", text), option.name
        if option.words:
            assert f"<{'|'.join(option.words)}>" in text


def test_every_input_key_is_a_key_of_the_schema_or_none():
    for option in compute_options.OPTIONS:
        assert option.key is None or option.key in schema.top_names(schema.INPUT, schema.SETTING, schema.LABEL), \
            option.name
    answers = [o for o in check.OPTIONS if o.key and o.panel == check.ANSWERS]
    assert {o.key for o in answers} == set(schema.stage_names()) & {o.key for o in check.OPTIONS}
    assert all(o.key in schema.one_head() for o in answers)
    problem = [o for o in check.OPTIONS if o.key and o.panel != check.ANSWERS]  # --q, --k, --v: the problem's
    assert [o.key for o in problem] == ["Q", "K", "V"] and all(o.panel == check.PROBLEM for o in problem)
    assert not [o for _, table in TABLES[2:] for o in table if o.key]  # exercise, example, posenc set none


def test_view_options_are_exactly_the_ones_that_change_no_number():
    """An option that sets no key of the document (a view option) is shown under --help's output and
    learning panels (or, for the precision lab's --error, beside the precision keys it reports on),
    and every option of the output and learning panels sets none: the two declarations of the table
    agree, where a list restated here would only repeat one of them."""
    view = {o.name for o in compute_options.OPTIONS if o.key is None and not o.argument}
    shown_as_view = {o.name for o in compute_options.OPTIONS
                     if o.panel in (compute_options.OUTPUT, compute_options.LEARNING)}
    precision = {o.name for o in compute_options.OPTIONS if o.panel == compute_options.PRECISION}
    assert shown_as_view and shown_as_view <= view <= shown_as_view | precision
    assert "error" in view - shown_as_view


def test_each_option_sets_its_key_with_its_reader():
    o = compute.parse({"q": "1,0", "mask": "causal", "scale": "1/2", "window": "2,none", "key_mask": "1,0",
                       "alibi_slopes": "0.5,0.25", "rope_style": "interleaved", "rope_dims": 2, "softcap": "30",
                       "sinks": "1,-2", "masked_rows": "uniform", "query_labels": "a, b", "heads": 2})
    matrices, settings, origin = spec.settings(compute_options.OPTIONS, o, compute_options.PARTS)
    assert matrices["Q"] == "1,0" and matrices["mask"] == "causal" and matrices["K"] is None
    assert set(matrices) == {o.key for o in compute_options.OPTIONS if o.matrix} >= {"Q", "mask"}
    assert settings == {"scale": 0.5, "window": [2, None], "key_mask": [1, 0], "alibi": [0.5, 0.25],
                        "rope": {"style": "interleaved", "dims": 2}, "softcap": 30, "sinks": [1, -2],
                        "masked_rows": "uniform", "query_labels": ["a", "b"], "heads": 2}
    assert origin["alibi"] == "--alibi-slopes" and origin["rope"] == "--rope" and origin["rope.dims"] == "--rope-dims"
    assert origin["scale"] == "--scale" and origin["masked_rows"] == "--masked-rows"


def test_options_not_given_set_nothing_and_the_documented_overrides_hold():
    _, settings, origin = spec.settings(compute_options.OPTIONS, compute.parse({}), compute_options.PARTS)
    assert settings == {} and origin == {}
    _, settings, origin = spec.settings(compute_options.OPTIONS, compute.parse({"rope": True, "alibi": True}),
                                        compute_options.PARTS)
    assert settings == {"rope": True, "alibi": True} and origin == {"rope": "--rope", "alibi": "--alibi"}
    with pytest.raises(Exception, match="give one of them"):
        spec.settings(compute_options.OPTIONS, compute.parse({"alibi": True, "alibi_slopes": "1"}),
                      compute_options.PARTS)


def test_a_choice_option_offers_the_core_words_and_gives_its_word():
    from attncli.base.choices import MASKED_ROWS

    assert spec.find(compute_options.OPTIONS, "masked_rows").words == MASKED_ROWS
    assert compute.parse({"masked_rows": compute.MaskedRows("error")}).masked_rows == "error"
    assert compute.parse({}).format == "auto" and compute.parse({}).precision == 4


def test_the_table_refuses_what_it_cannot_declare():
    with pytest.raises(ValueError, match="type"):
        Option("n", "help", type=complex)
    with pytest.raises(TypeError, match="not options of this command: nope"):
        compute.parse({"nope": 1})


def test_reference_escapes_pipes_and_names_keys():
    text = spec.reference((Option("mask", "a | b", key="mask"), Option("full", "all", type=bool)))
    assert "| `--mask` | `mask` | a \\| b |" in text and "| `--full` | — | all |" in text


def test_the_options_page_lists_exactly_the_tables_options():
    text = (ROOT / "docs" / "reference" / "options.md").read_text(encoding="utf-8")
    assert reference.rewritten(text) == text, "the options page's lists differ from the tables: run " \
                                            "python -m attncli.commands.reference"
    for command, _ in TABLES:
        assert reference.block(command) in text


def test_reference_rewrites_only_the_marked_lists(tmp_path):
    readme = tmp_path / "README.md"
    start, end = reference.markers("compute")
    others = "".join(reference.block(c) for c, _ in TABLES[1:])
    readme.write_text(f"intro\n{start}stale\n{end}outro\n{others}", encoding="utf-8")
    assert reference.main(["x", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == f"intro\n{reference.block('compute')}outro\n{others}"
    with pytest.raises(ValueError, match="options: compute"):
        reference.rewritten("no lists here")


FLAG = r"(?<![\w-])--[A-Za-z][\w-]*"
# Not attn's flags: a placeholder, a flag said not to exist, sed's flag, a prefix (`--rope-…`), and
# benchmarks/bench.py's own flags (docs/performance.md).
NOT_FLAGS = {"--STAGE", "--d_Q", "--follow-symlinks", "--rope-", "--quick", "--rounds", "--write-docs",
             "--no-deps", "--dist", "--durations",  # pip's (for the real models) and pytest's
             "--long"}  # benchmarks/page.py's (docs/explorer.md)


def test_the_readme_and_docs_name_only_flags_that_exist():
    text = "".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    flags = {flag for _, table in TABLES for option in table for flag in option.flags}
    flags |= {"--help", "--version", "--install-completion", "--show-completion"}
    assert set(re.findall(FLAG, text)) - flags - NOT_FLAGS == set()


@pytest.mark.parametrize("command, table", TABLES)
def test_help_names_only_the_commands_own_flags(run, command, table):
    text = run(command, "--help", env={"COLUMNS": "250", "NO_COLOR": "1"}).stdout
    assert set(re.findall(FLAG, text)) <= {flag for option in table for flag in option.flags} | {"--help"}
