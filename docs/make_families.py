"""Writes the families table of docs/real-models.md from the capture family registry
(attncli/capture/families.py: `table()`), so the page cannot drift from the records.
tests/test_capture_docs.py fails when the table is stale; then run

    python docs/make_families.py

The table follows the line `<!-- families: … -->` and ends at the first blank line.
"""

import sys
from pathlib import Path

from attncli.capture.families import table

PAGE = Path(__file__).resolve().parent / "real-models.md"
MARKER = "<!-- families:"


def rewritten(text: str) -> str:
    head, rest = text.split(MARKER, 1)
    marker, rest = rest.split("\n", 1)
    tail = rest.split("\n\n", 1)[1]
    return f"{head}{MARKER}{marker}\n" + "\n".join(table()) + "\n\n" + tail


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = rewritten(text)
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"rewrote the families table in {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
