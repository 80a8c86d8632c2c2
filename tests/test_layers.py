"""The import graph of every module of attncli/: imports go down the layers (core → render →
commands, cli, api), no module imports another's private name, and no module is in a circle
(imports inside functions count: they hide a circle from Python, not from the reader)."""

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "attncli"


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """{module: modules it imports anywhere in it}, and "module imports other._name" findings."""
    known = {module_name(path) for path in PACKAGE.rglob("*.py")}
    edges, private = {}, []
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        edges[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


def layer(name: str) -> int:
    if name.startswith(("attncli.commands", "attncli.cli", "attncli.api", "attncli.__main__")):
        return 3
    if name.startswith("attncli.render"):
        return 2
    return 0 if name == "attncli" else 1


def reaches(edges, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_imports_go_down_the_layers():
    edges, _ = graph()
    upward = [f"{a} -> {b}" for a, targets in edges.items() for b in targets if layer(b) > layer(a)]
    assert upward == []


def test_the_core_never_imports_a_view():
    edges, _ = graph()
    assert not any(t.startswith("attncli.render") for t in reaches(edges, "attncli.trace"))


def test_no_circle_anywhere():
    edges, _ = graph()
    assert len(edges) > 70
    circles = [name for name in sorted(edges) if name in reaches(edges, name)]
    assert circles == []


def test_no_module_imports_a_private_name():
    _, private = graph()
    assert private == []


def test_the_trace_records_sit_below_the_stage_table():
    """trace.py holds the frozen records and nothing that needs the tables: the stage table reads
    `Problem` from it, and attncli/document.py (the JSON) sits above both."""
    edges, _ = graph()
    below = reaches(edges, "attncli.trace")
    assert not below & {"attncli.stages", "attncli.grads", "attncli.document"}
    assert {"attncli.trace", "attncli.stages"} <= reaches(edges, "attncli.document")
