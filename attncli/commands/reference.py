"""The option reference's lists (docs/reference/options.md), written from the commands' option
tables (commands/spec.py), so the docs and `--help` cannot disagree. tests/test_option_table.py
fails when they differ; then run

    python -m attncli.commands.reference            # rewrites docs/reference/options.md's lists

Each list stands between `<!-- options: COMMAND -->` and `<!-- end options: COMMAND -->`.
"""

import sys
from pathlib import Path

from attncli.commands import capture, check, compute_options, heads, learn, spec

OPTIONS_DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "reference" / "options.md"
TABLES = {"compute": compute_options.OPTIONS, "check": check.OPTIONS, "exercise": learn.EXERCISE,
          "example": learn.EXAMPLE, "posenc": learn.POSENC, "capture": capture.CAPTURE,
          "heads": heads.HEADS}


def markers(command: str) -> tuple[str, str]:
    return f"<!-- options: {command} -->\n", f"<!-- end options: {command} -->\n"


def block(command: str) -> str:
    """One command's list, with its markers: what the options page holds between them."""
    start, end = markers(command)
    return start + spec.reference(TABLES[command]) + end


def between(text: str, start: str, end: str, new: str, page: str) -> str:
    """`text` with what stands from marker `start` to marker `end` (both included) replaced by
    `new`; a missing marker is an error naming it and `page`. (docs/make_reference.py uses it too.)"""
    if start not in text or end not in text:
        raise ValueError(f"{page} has no {start.strip()} … {end.strip()} block")
    before, rest = text.split(start, 1)
    return before + new + rest.split(end, 1)[1]


def rewritten(text: str) -> str:
    """`text` (the options page) with every command's list rewritten from its table; a missing marker is
    an error naming it."""
    for command in TABLES:
        text = between(text, *markers(command), block(command), "the options page")
    return text


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else OPTIONS_DOC
    text = path.read_text(encoding="utf-8")
    new = rewritten(text)
    if new != text:
        path.write_text(new, encoding="utf-8")
        print(f"rewrote the option lists in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
