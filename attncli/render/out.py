"""Writing a whole document, however long.

A Python buffered writer hands a write larger than its buffer to one write(2) call, which Linux
caps just under 2 GiB, and a text stream drops the rest without a word (measured: a 2 GiB + 10
byte string to a file left 2,147,479,552 bytes). Writing in chunks makes every call complete.
"""

import sys

CHUNK = 1 << 26  # 64 MiB per call: far below the cap, large enough to cost nothing


def write_all(text, stream=None) -> None:
    """Write all of `text` (str to a text stream, bytes to a binary one; default stdout)."""
    stream = sys.stdout if stream is None else stream
    for start in range(0, len(text), CHUNK):
        stream.write(text[start:start + CHUNK])
