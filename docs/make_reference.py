"""Writes the document's key table in docs/reference/output.md from attncli/document/schema.py and the
stage tables (attncli/stages/table.py, attncli/stages/grads.py), so the reference cannot drift from the code.
tests/test_docs.py fails when the table is stale; then run

    python docs/make_reference.py

The table stands between `<!-- keys: document -->` and `<!-- end keys: document -->`.
"""

import sys
from pathlib import Path
from string import Template

from attncli.commands.reference import between
from attncli.document import schema
from attncli.stages import grads
from attncli.stages import table as stages

PAGE = Path(__file__).resolve().parent / "reference" / "output.md"
START, END = "<!-- keys: document -->\n", "<!-- end keys: document -->\n"
# A template's fields (attncli/stages/table.py's `fields`) in general words.
WORDS = {"q": "Q", "k": "K", "qin": "Q", "kin": "K", "qnorm": "norm(Q)", "knorm": "norm(K)",
         "previous": "the stage before", "scale": "scale", "softcap": "c", "bias": " + bias",
         "sink": " (and the head's sink)", "chain": ""}


def plain(template: str) -> str:
    return Template(template).safe_substitute(WORDS)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows() -> list[tuple[str, str, str, str]]:
    """(key, where, kind, what it is) for every key of the document."""
    found = []
    for key in schema.keys():
        about = key.about + (f" (from {key.source})" if key.kind == schema.ECHO else "")
        found.append((key.name, "top level", key.kind, about))
    found += [(alias, "top level", "alias", f"the same as {name}") for alias, name in schema.ALIASES.items()]
    found += [(key.name, "heads[h]", key.kind, key.about) for key in schema.HEAD_KEYS]
    found += [(stage.name, "heads[h]", "result (stage)", plain(stage.title)) for stage in stages.STAGES]
    found += [(gradient.name, "heads[h]", "result (gradient)", plain(gradient.title))
              for gradient in grads.GRADIENTS]
    return found


def table() -> str:
    lines = ["| key | where | kind | what it is |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {where} | {kind} | {cell(about)} |" for name, where, kind, about in rows()]
    return START + "\n".join(lines) + "\n" + END


def rewritten(text: str) -> str:
    return between(text, START, END, table(), PAGE.name)


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = rewritten(text)
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"rewrote the key table in {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
