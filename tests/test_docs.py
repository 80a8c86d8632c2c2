"""The docs are tested: every shell example in README.md and docs/**/*.md runs, and every relative
link resolves.

A fenced block whose language is `console` is a session: each line starting `$ ` is a command
(`attn …` is the installed CLI, run in-process through its click command), and the lines after it,
up to the next `$ ` or the block's end, are exactly what it prints (compared after stripping
trailing spaces per line and trailing blank lines). The rules, so a doc can say what a reader
would type:

- `NAME=value attn …` sets environment variables for that command; `attn … | attn …` pipes one
  command into the next; `attn … < FILE` reads FILE on stdin, `> FILE` writes stdout to FILE;
  a word with `*` is the files it matches, sorted; a line ending ` \\` goes on.
- Every command runs with COLUMNS=100, NO_COLOR=1 and TERM=dumb, on a terminal: stdin and the
  last command's stdout are terminals (so `--format auto` shows tables), stdout piped into a
  next command is not. What it prints is stdout and stderr as they came, as a terminal shows
  them (a piped command's stderr first).
- Commands run in a fresh folder per document, with `samples/` and `docs/` there, so `-o out.json` writes
  into it and a later block may read it. A fenced block right after a line
  `<!-- file: PATH -->` is not run: its text is written to PATH in that folder first.
- A line that is `…` alone stands for one or more lines not shown.
- A block right after the line `<!-- needs: models -->` runs only when torch and transformers
  import (it is skipped otherwise).
- Blocks in ```sh, ```text and any other language are not run.

`python tests/test_docs.py FILE…` rewrites the files' console outputs with what attn prints now
(an output that elides lines with `…` is kept, and named when it no longer matches).
"""

import contextlib
import glob
import importlib.util
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from conftest import SAMPLES
from typer.testing import CliRunner

from attncli.cli import app

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TERMINAL = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
NEEDS_MODELS = "<!-- needs: models -->"
FILE = re.compile(r"<!-- file: (\S+) -->")
FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)")
ELIDED = "…"


@dataclass
class Block:
    path: Path
    line: int  # the fence's line, from 1
    language: str
    text: list[str]
    needs_models: bool = False
    writes: str | None = None  # <!-- file: PATH -->


@dataclass
class Command:
    line: int
    text: str
    expected: list[str] = field(default_factory=list)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the directive on the line before it."""
    found, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, mark, language = len(fence.group(1)), fence.group(2), fence.group(3)
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(mark[0] * len(mark))
                    and not lines[j].strip().strip(mark[0])), len(lines))
        text = [line[indent:] if not line[:indent].strip() else line.lstrip() for line in lines[i + 1:end]]
        writes = FILE.fullmatch(before)
        found.append(Block(path, i + 1, language, text, before == NEEDS_MODELS, writes and writes.group(1)))
        i = end + 1
    return found


def commands(block: Block) -> list[Command]:
    """A console block's commands, each with the lines it shows."""
    found: list[Command] = []
    going_on = False
    for offset, line in enumerate(block.text):
        if going_on:
            found[-1].text = found[-1].text[:-1] + " " + line.strip()
        elif line.startswith("$ "):
            found.append(Command(block.line + 1 + offset, line[2:]))
        elif found:
            found[-1].expected.append(line)
        else:
            raise AssertionError(f"{block.path.name}:{block.line}: a console block starts with a `$ ` command")
        going_on = (found[-1].text.endswith("\\") and found[-1].expected == [])
    return found


def cleaned(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """`actual` is `expected`, a line `…` standing for one or more lines."""
    pattern = r"\n".join(r"[^\n]*(?:\n[^\n]*)*?" if line == ELIDED else re.escape(line) for line in expected)
    return re.fullmatch(pattern, "\n".join(actual)) is not None


class _Terminal(CliRunner):
    """CliRunner whose stdin and stdout say they are terminals when asked to."""

    def __init__(self, stdin_tty: bool, stdout_tty: bool):
        super().__init__()
        self.ttys = stdin_tty, stdout_tty

    @contextlib.contextmanager
    def isolation(self, *args, **kwargs):
        with super().isolation(*args, **kwargs) as streams:
            stdin_tty, stdout_tty = self.ttys
            sys.stdin.isatty = lambda: stdin_tty
            sys.stdout.isatty = lambda: stdout_tty
            yield streams


def split(text: str) -> tuple[dict, list[list[str]], str | None, str | None]:
    """`A=1 attn x | attn y < IN > OUT` -> ({"A": "1"}, [["x"], ["y"]], "IN", "OUT")."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|<>")
    lexer.whitespace_split = True
    words = list(lexer)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    stdin = stdout = None
    if "<" in words:
        at = words.index("<")
        stdin, words = words[at + 1], words[:at] + words[at + 2:]
    if ">" in words:
        at = words.index(">")
        stdout, words = words[at + 1], words[:at] + words[at + 2:]
    pipeline, segment = [], []
    for word in words + ["|"]:
        if word == "|":
            pipeline.append(segment)
            segment = []
        else:
            segment.append(word)
    for segment in pipeline:
        if not segment or segment[0] != "attn":
            raise AssertionError(f"not an attn command (use ```sh for other commands): {text}")
    return env, [segment[1:] for segment in pipeline], stdin, stdout


def expanded(args: list[str]) -> list[str]:
    """Words with `*` that match files are the files, sorted, as a shell expands them."""
    return [name for arg in args for name in (sorted(glob.glob(arg)) if "*" in arg and glob.glob(arg) else [arg])]


def run(text: str) -> list[str]:
    """What `text` shows on a terminal, in the current folder."""
    env, pipeline, stdin, stdout = split(text)
    data = Path(stdin).read_text(encoding="utf-8") if stdin else None
    shown = []
    for number, args in enumerate(pipeline):
        last = number == len(pipeline) - 1
        runner = _Terminal(stdin_tty=number == 0 and stdin is None, stdout_tty=last and stdout is None)
        result = runner.invoke(app, expanded(args), input=data, env={**TERMINAL, **env}, prog_name="attn")
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        shown.append(result.output if last and stdout is None else result.stderr)  # as they came
        data = result.stdout
    if stdout:
        Path(stdout).write_text(data, encoding="utf-8")
    return "".join(shown).splitlines()


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def models() -> bool:
    return all(importlib.util.find_spec(name) for name in ("torch", "transformers"))


def beside(folder: Path) -> None:
    """What a document's commands find in their folder: samples/, and docs/ for example inputs
    kept beside the page that shows them."""
    for name in ("samples", "docs"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)


def session(path: Path, folder: Path) -> list[str]:
    """Run every console block of `path` in `folder`; the differences found, in words."""
    beside(folder)
    failures = []
    for block in blocks(path):
        if block.writes:
            target = folder / block.writes
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(block.text) + "\n", encoding="utf-8")
            continue
        if block.language != "console" or (block.needs_models and not models()):
            continue
        for command in commands(block):
            actual, expected = cleaned(run(command.text)), cleaned(command.expected)
            if not matches(expected, actual):
                failures.append(f"{shown(path)}:{command.line}: $ {command.text}\n  shows:\n"
                                + "\n".join(expected) + "\n  prints:\n" + "\n".join(actual))
    return failures


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_console_example_prints_what_it_shows(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failures = session(path, tmp_path)
    assert not failures, "\n\n".join(failures)


def test_the_readme_and_the_tutorial_show_commands():
    for name in ("README.md", "docs/tutorial.md"):
        assert any(b.language == "console" and commands(b) for b in blocks(ROOT / name)), name


def test_a_wrong_number_fails_and_an_elision_stands_for_lines(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ attn compute samples/scooter.json --stages weights --precision 2\n…\n"
                   "│ it │     0.05 │    0.77 │   0.18 │ 1.00 │ 3.09 │\n…\n```\n", encoding="utf-8")
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.chdir(folder)
    failures = session(doc, folder)
    assert len(failures) == 1 and "0.19" in failures[0]  # the weight is 0.1867: 0.19, not 0.18
    assert matches(["a", ELIDED, "d"], ["a", "b", "c", "d"]) and not matches(["a", ELIDED, "d"], ["a", "d"])
    assert not matches(["a"], ["a", "b"])


def test_a_block_that_needs_the_models_runs_only_when_they_import(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- needs: models -->\n\n```console\n$ attn example scooter\nnot this\n```\n", encoding="utf-8")
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys.modules[__name__], "models", lambda: False)
    assert session(doc, folder) == []  # skipped
    (folder / "samples").unlink()
    monkeypatch.setattr(sys.modules[__name__], "models", lambda: True)
    assert len(session(doc, folder)) == 1  # run, and its output is not "not this"


def test_refreshing_rewrites_a_stale_output_and_names_a_stale_elided_one(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ attn compute --q 1 --k 1 --v 7 \\\n    --stages output\nstale\n"
                   "$ attn example scooter\n…\nnot there\n```\n", encoding="utf-8")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "samples").symlink_to(ROOT / "samples")
    monkeypatch.chdir(folder)
    text, stale = refreshed(doc, folder)
    assert "stale" not in text and "│ 0 │ 7.0000 │" in text and "--stages output\nattn · softmax" in text
    assert text.endswith("$ attn example scooter\n…\nnot there\n```\n")
    assert stale == ["doc.md:5: $ attn example scooter"]


def test_commands_split_into_env_pipes_and_stdin():
    assert split("COLUMNS=60 attn compute a.json --q '1, 2' | attn check x.json < in.json > out.json") == (
        {"COLUMNS": "60"}, [["compute", "a.json", "--q", "1, 2"], ["check", "x.json"]], "in.json", "out.json")
    with pytest.raises(AssertionError, match="not an attn command"):
        split("jq . out.json")


# ---- links ----------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|<a href=\"([^\"]+)\"")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def unfenced(path: Path) -> str:
    """The file without its fenced blocks."""
    return re.sub(r"^( *)(`{3,}|~{3,}).*?^\1\2 *$", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def prose(path: Path) -> str:
    """The file without fenced blocks and inline code: where links can be."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", unfenced(path), flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation but - and _ dropped, spaces
    as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in unfenced(path).splitlines():
        heading = HEADING.match(line)
        if heading:
            name = slug(heading.group(2))
            found.add(name if name not in seen else f"{name}-{seen[name]}")
            seen[name] = seen.get(name, 0) + 1
    found |= set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
    return frozenset(found)


def broken_links(path: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(prose(path)):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {shown(resolved)}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_and_anchor_resolves(path):
    assert broken_links(path) == []


def test_the_link_check_finds_a_broken_file_and_anchor(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Rotary positions (RoPE)\n## `attn check`: marking\n[a](#rotary-positions-rope) "
                   "[b](#attn-check-marking) [c](#nope) [d](missing.md) `[e](#in-code)`\n", encoding="utf-8")
    assert broken_links(doc) == ["#nope: no heading #nope in doc.md", "missing.md: no such file"]


def test_every_fenced_block_names_its_language():
    unnamed = [f"{b.path.relative_to(ROOT)}:{b.line}" for path in DOCS for b in blocks(path) if not b.language]
    assert unnamed == []


def test_no_console_block_needs_a_shell():
    """A console block holds attn commands only: other programs (jq, python, pip) go in ```sh."""
    for path in DOCS:
        for block in blocks(path):
            if block.language == "console":
                for command in commands(block):
                    split(command.text)


def test_the_harness_runs_in_the_terminal_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    lines = run("attn compute samples/scooter.json --stages weights")
    assert lines[0].startswith("attn · softmax") and any("│ it │" in line for line in lines)  # tables, not JSON
    piped = run("attn compute samples/scooter.json --stages weights | attn compute --stages output")
    assert piped[0].startswith("attn · softmax") and any(line.startswith("│ it │") for line in piped)
    assert run("COLUMNS=50 attn compute samples/scooter.json --stages weights") != lines  # narrower
    assert "COLUMNS" not in os.environ or os.environ["COLUMNS"] != "100"  # set for the command only


# ---- the reference cannot drift from the code --------------------------------------------------

REFERENCE = ROOT / "docs" / "reference"


def reference_text() -> str:
    return "".join(path.read_text(encoding="utf-8") for path in sorted(REFERENCE.glob("*.md")))


def test_every_key_of_the_document_is_in_the_reference():
    """Every key attncli/document/schema.py knows (top level, per head, the stages of both passes and the
    aliases) is written as `key` in some docs/reference/*.md page."""
    from attncli.document import schema

    names = set(schema.top_names()) | set(schema.head_names()) | set(schema.one_head()) | set(schema.ALIASES)
    text = reference_text()
    assert sorted(name for name in names if f"`{name}`" not in text) == []


def test_every_input_key_is_on_the_input_page_or_the_model_keys_page():
    from attncli.document import schema

    text = "".join((REFERENCE / name).read_text(encoding="utf-8") for name in ("input.md", "masks-and-variants.md")
                   ) + "".join(p.read_text(encoding="utf-8") for p in REFERENCE.glob("model-keys.md"))
    inputs = schema.top_names(schema.INPUT, schema.SETTING, schema.LABEL)
    assert sorted(name for name in inputs if f"`{name}`" not in text) == []


def test_every_option_of_every_command_is_on_the_options_page():
    from attncli.commands import reference

    text = (REFERENCE / "options.md").read_text(encoding="utf-8")
    assert reference.rewritten(text) == text, "run python -m attncli.commands.reference"
    flags = {flag for table in reference.TABLES.values() for option in table for flag in option.flags}
    assert sorted(flag for flag in flags if f"`{flag}`" not in text) == []


EXIT_ROW = re.compile(r"^\| \*\*(\d+)\*\* \| .* \| `(attn [^`]*)` \|$", re.M)


def test_every_exit_code_is_on_its_page_with_an_example_that_gives_it(tmp_path, monkeypatch):
    """docs/reference/exit-codes.md has a row per exit code, `| **N** | meaning | `attn …` |`; each
    example, run, ends with that code, and the codes are the CLI's own constants."""
    from attncli import cli
    from attncli.commands import check_run

    rows = EXIT_ROW.findall((REFERENCE / "exit-codes.md").read_text(encoding="utf-8"))
    assert sorted({int(code) for code, _ in rows}) == sorted({0, check_run.EXIT_DIFFER, cli.EXIT_TROUBLE})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    for code, example in rows:
        env, pipeline, _, _ = split(example)
        assert len(pipeline) == 1, example
        result = CliRunner().invoke(app, pipeline[0], env={**TERMINAL, **env})
        assert result.exit_code == int(code), (example, result.output)


def test_the_key_table_on_the_output_page_is_made_from_the_schema():
    spec = importlib.util.spec_from_file_location("make_reference", ROOT / "docs" / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.PAGE.read_text(encoding="utf-8")
    assert module.rewritten(text) == text, "run python docs/make_reference.py"
    assert module.table().count("\n| `") == len(module.rows())


# ---- refreshing the examples -------------------------------------------------------------------

def refreshed(path: Path, folder: Path) -> tuple[str, list[str]]:
    """`path`'s text with each console command's shown output replaced by what it prints, except
    where the shown output elides lines (`…`): those are kept, and listed when they no longer
    match. Run in `folder` (with samples/ in it), in order, as the test runs them."""
    lines = path.read_text(encoding="utf-8").split("\n")
    stale = []
    for command, actual in reversed(session_commands(path, folder)):  # from the end: line numbers hold
        last = command.line  # the `$ ` line, from 1; a command may go on over lines ending in \\
        while lines[last - 1].rstrip().endswith("\\"):
            last += 1
        if ELIDED in command.expected:
            if not matches(cleaned(command.expected), actual):
                stale.append(f"{shown(path)}:{command.line}: $ {command.text}")
            continue
        lines[last:last + len(command.expected)] = actual
    return "\n".join(lines), stale


def session_commands(path: Path, folder: Path) -> list[tuple[Command, list[str]]]:
    """Every console command of `path` with what it prints, run in order in `folder`."""
    found = []
    for block in blocks(path):
        if block.writes:
            target = folder / block.writes
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(block.text) + "\n", encoding="utf-8")
        elif block.language == "console" and (models() or not block.needs_models):
            found += [(command, cleaned(run(command.text))) for command in commands(block)]
    return found


def main(names: list[str]) -> int:
    """python tests/test_docs.py FILE…: rewrite the files' console outputs with what attn prints
    (outputs that elide lines with `…` are kept, and named when they no longer match)."""
    import tempfile

    status = 0
    for name in names:
        path = Path(name).resolve()
        with tempfile.TemporaryDirectory() as folder:
            beside(Path(folder))
            here = os.getcwd()
            os.chdir(folder)
            try:
                text, stale = refreshed(path, Path(folder))
            finally:
                os.chdir(here)
        path.write_text(text, encoding="utf-8")
        for line in stale:
            print(f"{line}: its elided output no longer matches; edit it by hand")
            status = 1
    return status


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))


def test_the_docs_name_only_sections_the_readme_has():
    """The README is a front door now: a page under docs/ that sends the reader to a README
    section by name ("the README's "Guarantees"") names one that is still there."""
    root = SAMPLES.parent
    headings = {line.lstrip("#").strip() for line in (root / "README.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    named = [(path.name, name) for path in sorted((root / "docs").rglob("*.md"))
             for name in re.findall(r"README(?:'s|’s)? \"([^\"]+)\"", path.read_text(encoding="utf-8"))]
    assert [(page, name) for page, name in named if name not in headings] == []
