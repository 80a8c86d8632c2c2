"""docs/contributing.md's map of where each module's tests are: every module of attncli/ has a row
naming the test file(s) that hold its tests, no row names a module that is gone, and every test file
named exists.

After adding, moving or removing a module or a test file, rewrite the map:

    python tests/test_module_map.py

It keeps each row's test files that still exist, drops the rows of modules that are gone, and gives
a new module the test files named for it (tests/test_<module>.py, tests/test_<package>_<module>.py)
and the ones that import it: check what it guessed (it prints it), and name the tests of a module it
could not guess by hand, in the row it leaves empty. A test file of the package as a whole (the
docs, the fuzzers, the import graph) is named in the paragraph after the map instead; the script
prints any test file named in neither.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "contributing.md"
START = "<!-- module map: python tests/test_module_map.py rewrites the table below -->"
END = "<!-- end of the module map -->"
REWRITE = "python tests/test_module_map.py"
HEADER = "| module | its tests |\n|---|---|"
ROW = re.compile(r"^\| \[`([^`]+)`\]\([^)]*\) \| (.*) \|$")
FILE = re.compile(r"\[`?([^`\]]+?)`?\]\(\.\./tests/([^)]+)\)")
MOST_IMPORTERS = 4  # a new module imported by more test files than this is a helper, not their subject
WHOLE = "Tests of the package as a whole rather than of one module:"  # the paragraph after the map
# Words of a file name that say when its tests were written, not what they are about.
WHEN = re.compile(r"(?:trials?|rounds?|leftovers?|more|fixes|new|newer|misc|extra|again|old|later|latest"
                  r"|mutations|honesty|fair|hostile)\d*|\d+")


def modules(root: Path = ROOT) -> list[str]:
    """Every module of attncli/ as a path from the repository root, but the empty package markers."""
    found = (path for path in (root / "attncli").rglob("*.py")
             if not (path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip()))
    return sorted(path.relative_to(root).as_posix() for path in found)


def suite_files(root: Path = ROOT) -> list[str]:
    """Every test file as a path under tests/ (tests/test_x.py, or tests/<folder>/test_x.py)."""
    return sorted(path.relative_to(root / "tests").as_posix() for path in (root / "tests").rglob("test_*.py"))


def section(text: str) -> tuple[int, int]:
    """Where the map's table starts and ends in the page's text."""
    start, end = text.find(START), text.find(END)
    assert 0 <= start < end, f"docs/contributing.md has lost its module map's markers ({START!r} … {END!r})"
    return start + len(START), end


def read(text: str) -> dict[str, list[str]]:
    """The map in the page: module → the test files its row names (paths under tests/)."""
    start, end = section(text)
    rows = {}
    for line in text[start:end].splitlines():
        found = ROW.match(line.strip())
        if found:
            rows[found[1]] = [path for _, path in FILE.findall(found[2])]
    return rows


def write(text: str, rows: dict[str, list[str]]) -> str:
    """The page with its map's table made from `rows`."""
    lines = [HEADER]
    for module in sorted(rows):
        files = ", ".join(f"[`{Path(path).name}`](../tests/{path})" for path in rows[module]) or "—"
        lines.append(f"| [`{module}`](../{module}) | {files} |")
    start, end = section(text)
    return text[:start] + "\n" + "\n".join(lines) + "\n" + text[end:]


def whole(text: str) -> list[str]:
    """The test files the paragraph after the map names: tests of the package, not of one module."""
    start = text.find(WHOLE, section(text)[1])
    assert start >= 0, f"docs/contributing.md has lost its paragraph {WHOLE!r} after the module map"
    return [path for _, path in FILE.findall(text[start:text.find("\n\n", start)])]


def unnamed(rows: dict[str, list[str]], whole: list[str], tests: list[str]) -> list[str]:
    """The test files that neither a module's row nor the paragraph of whole-package tests names."""
    named = {path for paths in rows.values() for path in paths} | set(whole)
    return [f"tests/{path} is named neither in the map nor in its paragraph {WHOLE!r}" for path in tests
            if path not in named] + [f"the paragraph {WHOLE!r} names tests/{path}, which does not exist"
                                     for path in whole if path not in tests]


def named_for_when(tests: list[str]) -> list[str]:
    """The test files whose name says when they were written (test_trial3.py, test_errors_more.py)."""
    return [f"tests/{path}: {word!r} says when its tests were written, not what they are about"
            for path in tests for word in Path(path).stem.split("_")[1:] if WHEN.fullmatch(word)]


def problems(rows: dict[str, list[str]], modules: list[str], tests: list[str]) -> list[str]:
    """What is wrong with the map, one line each: a module without a row or without tests, a row of a
    module that is gone, a test file named that does not exist."""
    found = [f"{module} is not in the map" for module in modules if module not in rows]
    found += [f"{module} has a row but is no module of attncli/" for module in rows if module not in modules]
    found += [f"{module}'s row names no test file" for module in modules if module in rows and not rows[module]]
    found += [f"{module}'s row names tests/{path}, which does not exist"
              for module, paths in rows.items() for path in paths if path not in tests]
    return found


def importers(module: str, root: Path = ROOT) -> list[str]:
    """The test files that import `module` (attncli/a/b.py: `attncli.a.b`, or `b` from `attncli.a`)."""
    dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    parent, _, name = dotted.rpartition(".")
    found = []
    for path in suite_files(root):
        for node in ast.walk(ast.parse((root / "tests" / path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(alias.name == dotted for alias in node.names) or \
                    isinstance(node, ast.ImportFrom) and (node.module == dotted or node.module == parent
                                                          and any(alias.name == name for alias in node.names)):
                found.append(path)
                break
    return found


def guess(module: str, root: Path = ROOT) -> list[str]:
    """A new module's test files: the ones named for it, and the ones that import it (unless many do)."""
    package, name = Path(module).parent.name, Path(module).stem
    named = [path for path in suite_files(root)
             if Path(path).stem in (f"test_{name}", f"test_{package}_{name}")
             and Path(path).parent.name in (".", package, "tests", "")]
    users = importers(module, root)
    return sorted(set(named) | (set(users) if len(users) <= MOST_IMPORTERS else set()))


def regenerate(text: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """The page with its map brought up to date, and what was guessed or left out, in words."""
    rows, tests, said = read(text), suite_files(root), []
    current = {}
    for module in modules(root):
        kept = [path for path in rows.get(module, []) if path in tests]
        if not kept:
            kept = guess(module, root)
            said.append(f"{module}: guessed {', '.join(kept)}" if kept else
                        f"{module}: no test file found; name its tests in docs/contributing.md's map")
        current[module] = kept
    said += [f"{module}: dropped (no such module)" for module in rows if module not in current]
    return write(text, current), said


def test_every_module_has_its_tests_named_and_they_exist():
    text = DOC.read_text(encoding="utf-8")
    found = problems(read(text), modules(), suite_files())
    assert not found, (f"docs/contributing.md's module map is out of date; run `{REWRITE}` (it names a new "
                       "module's tests by guess: check them):\n  " + "\n  ".join(found))


def test_every_test_file_is_named_in_the_map_or_as_a_test_of_the_whole_package():
    text = DOC.read_text(encoding="utf-8")
    found = unnamed(read(text), whole(text), suite_files())
    assert not found, "name each test file in the row of the module it tests (docs/contributing.md):\n  " + \
        "\n  ".join(found)


def test_no_test_file_is_named_for_when_it_was_written():
    found = named_for_when(suite_files())
    assert not found, "move its tests to the file of their subject, each docstring naming the bug:\n  " + \
        "\n  ".join(found)


def test_a_file_in_no_row_and_a_file_named_for_a_trial_are_each_found():
    rows = {"attncli/a.py": ["test_a.py"]}
    assert unnamed(rows, ["test_docs.py", "test_gone.py"], ["test_a.py", "test_b.py", "test_docs.py"]) == [
        f"tests/test_b.py is named neither in the map nor in its paragraph {WHOLE!r}",
        f"the paragraph {WHOLE!r} names tests/test_gone.py, which does not exist"]
    names = ["test_trial3.py", "test_mutations_round2.py", "test_leftovers.py", "test_errors_more.py",
             "test_check_fair.py", "test_capture_honesty.py", "test_rounding.py", "test_fixtures.py",
             "test_float32.py", "test_errors_2.py", "test_backward_fixtures.py"]
    assert [line.split(":")[0] for line in named_for_when(names)] == [
        "tests/test_trial3.py", "tests/test_mutations_round2.py", "tests/test_mutations_round2.py",
        "tests/test_leftovers.py", "tests/test_errors_more.py", "tests/test_check_fair.py",
        "tests/test_capture_honesty.py", "tests/test_errors_2.py"]


def test_a_module_without_a_row_a_gone_module_and_a_missing_file_are_each_found():
    rows = {"attncli/a.py": ["test_a.py"], "attncli/gone.py": ["test_a.py"], "attncli/c.py": ["test_gone.py"],
            "attncli/d.py": []}
    assert problems(rows, ["attncli/a.py", "attncli/b.py", "attncli/c.py", "attncli/d.py"], ["test_a.py"]) == [
        "attncli/b.py is not in the map", "attncli/gone.py has a row but is no module of attncli/",
        "attncli/d.py's row names no test file", "attncli/c.py's row names tests/test_gone.py, which does not exist"]


def test_the_script_keeps_the_rows_drops_the_gone_and_guesses_the_new(tmp_path):
    for path, text in {"attncli/__init__.py": "", "attncli/pkg/__init__.py": "", "attncli/pkg/kept.py": "x = 1",
                       "attncli/pkg/new.py": "x = 1", "attncli/pkg/lone.py": "x = 1",
                       "tests/test_kept.py": "", "tests/test_other.py": "from attncli.pkg import new\n",
                       "tests/test_new.py": ""}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    page = f"# Page\n\n{START}\n{HEADER}\n" \
           "| [`attncli/pkg/kept.py`](../attncli/pkg/kept.py) | [`test_other.py`](../tests/test_other.py), " \
           "[`test_gone.py`](../tests/test_gone.py) |\n" \
           "| [`attncli/pkg/gone.py`](../attncli/pkg/gone.py) | [`test_kept.py`](../tests/test_kept.py) |\n" \
           f"{END}\n\nAfter.\n"
    written, said = regenerate(page, tmp_path)
    assert read(written) == {"attncli/pkg/kept.py": ["test_other.py"], "attncli/pkg/lone.py": [],
                             "attncli/pkg/new.py": ["test_new.py", "test_other.py"]}
    assert written.startswith("# Page\n\n") and written.endswith(f"{END}\n\nAfter.\n")
    assert said == ["attncli/pkg/lone.py: no test file found; name its tests in docs/contributing.md's map",
                    "attncli/pkg/new.py: guessed test_new.py, test_other.py", "attncli/pkg/gone.py: dropped (no such module)"]
    assert problems(read(written), modules(tmp_path), suite_files(tmp_path)) == ["attncli/pkg/lone.py's row names no test file"]
    assert regenerate(written, tmp_path)[0] == written


if __name__ == "__main__":
    text, said = regenerate(DOC.read_text(encoding="utf-8"))
    DOC.write_text(text, encoding="utf-8")
    said += unnamed(read(text), whole(text), suite_files()) + named_for_when(suite_files())
    print("\n".join(said) or "docs/contributing.md's module map: every row kept", file=sys.stderr)
