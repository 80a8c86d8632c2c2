"""The import graph of attncli/: the layers are import-linter's contracts in pyproject.toml (the
packages in order, the core never importing a view, only attncli.capture importing torch), checked
by `lint-imports`; here, that the check passes, that it fails on an upward import, that
docs/architecture.md lists the same layers, and what import-linter does not look at: no module in
a circle (imports inside functions count: they hide a circle from Python, not from the reader) and
no import of another module's private name."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.conftest import ROOT

PACKAGE = ROOT / "attncli"
LINT = Path(sys.executable).parent / "lint-imports"
needs_linter = pytest.mark.skipif(not LINT.exists(), reason="import-linter is in the test extras")


@pytest.fixture(scope="module")
def graph(sources) -> tuple[dict[str, set[str]], list[str]]:
    """{module: modules it imports anywhere in it}, and "module imports other._name" findings, from
    the session's parsed modules (tests/conftest.py)."""
    known = {module.name for module in sources}
    edges, private = {}, []
    for module in sources:
        name = module.name
        edges[name] = set()
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    target = target if target in known else node.module
                    if target in known and target != name:
                        edges[name].add(target)
                        if target == node.module and alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append(f"{name} imports {target}.{alias.name}")
            elif isinstance(node, ast.Import):
                edges[name] |= {alias.name for alias in node.names if alias.name in known and alias.name != name}
    return edges, private


def reaches(edges, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def layers() -> list[str]:
    """The layer contract's packages, top first (`a | b` on one line: two packages side by side)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return contract["layers"]


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True)


@needs_linter
def test_the_contracts_hold():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout
    assert "3 kept, 0 broken" in done.stdout


@needs_linter
@pytest.mark.parametrize("module, upward, contract", [
    ("base/arrays.py", "from attncli.stages import table", "Each package imports only the packages below it"),
    ("compute/blocks.py", "from attncli.render import text", "The core never imports a view"),
    ("render/text.py", "import torch", "Only attncli.capture imports torch"),
])
def test_an_upward_import_breaks_a_contract(tmp_path, module, upward, contract):
    """On a copy of the package with one throwaway import added: lint-imports fails, naming it."""
    shutil.copytree(PACKAGE, tmp_path / "attncli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / "attncli" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{upward}  # throwaway\n", encoding="utf-8")
    done = lint(tmp_path)
    assert done.returncode == 1, done.stdout
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout
    assert "attncli." + module.removesuffix(".py").replace("/", ".") in done.stdout


def test_every_module_lives_in_a_layer(sources):
    """Nothing loose at the top of attncli/ but the package's entry points: the tree is the diagram."""
    packages = {part.strip() for line in layers() for part in line.split("|")}
    top = {"attncli.__init__", "attncli.__main__", "attncli.cli", "attncli.api"}
    homeless = [module.name for module in sources
                if not any(module.name.startswith(p + ".") or module.name == p for p in packages)
                and module.name not in top | {"attncli"}]
    assert homeless == []


def test_the_architecture_page_lists_the_layers_of_the_contract():
    """docs/architecture.md names each layer's package, in the contract's order (top last there:
    the page reads bottom up, as the code is built)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = [line.split("`")[1] for line in page.splitlines() if line.startswith(("1", "2", "3", "4", "5", "6", "7",
                                                                                    "8", "9")) and "`attncli/" in line]
    wanted = [part.strip().removeprefix("attncli.") for line in reversed(layers()) for part in line.split("|")]
    assert [name.removeprefix("attncli/").rstrip("/").removesuffix(".py") for name in named] == wanted


def test_no_circle_anywhere(graph):
    edges, _ = graph
    assert len(edges) > 70
    circles = [name for name in sorted(edges) if name in reaches(edges, name)]
    assert circles == []


def test_no_module_imports_a_private_name(graph):
    _, private = graph
    assert private == []


def test_the_trace_records_sit_below_the_stage_table(graph):
    """trace.py holds the frozen records and nothing that needs the tables: the stage table reads
    `Problem` from it, and attncli/document/writing.py (the JSON) sits above both."""
    edges, _ = graph
    below = reaches(edges, "attncli.problem.trace")
    assert not below & {"attncli.stages.table", "attncli.stages.grads", "attncli.document.writing"}
    assert {"attncli.problem.trace", "attncli.stages.table"} <= reaches(edges, "attncli.document.writing")
