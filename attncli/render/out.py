"""Writing a whole document, however long, and stdout that never loses a short write.

A Python buffered writer hands a write larger than its buffer to one write(2) call, which Linux
caps just under 2 GiB, and a text stream drops the rest without a word (measured: a 2 GiB + 10
byte string to a file left 2,147,479,552 bytes). Writing in chunks makes every call complete.

The same loss happens far sooner on a disk that fills up: write(2) writes what fits and returns
that count, the buffered writer returns it too, and the text stream above it ignores it (measured:
`attn compute big.json -f json > full/out.json` on a 16 KB tmpfs exited 0 with the first 16,384
bytes). The CLI edge therefore writes stdout through `WholeWrites`, whose every write is complete
or raises `StdoutError` naming the reason (`no space left on device`); a reader that went away
(EPIPE) stays a BrokenPipeError, which the edge keeps quiet.
"""

import io
import os
import select
import sys

from attncli.base.errors import StdoutError
from attncli.render.target import reason

CHUNK = 1 << 26  # 64 MiB per call: far below the cap, large enough to cost nothing
SYSTEM_WRITE = os.write  # write(2), as WholeWrites calls it (a test fills a disk through this name alone)
BUFFER = 1 << 16  # stdout's buffer: 64 KiB, so that many small writes make few calls of WholeWrites


def write_all(text, stream=None) -> None:
    """Write all of `text` (str to a text stream, bytes to a binary one; default stdout)."""
    stream = sys.stdout if stream is None else stream
    for start in range(0, len(text), CHUNK):
        stream.write(text[start:start + CHUNK])


class WholeWrites(io.RawIOBase):
    """A file descriptor (stdout's) whose every write writes everything or raises: a short count
    from write(2) is followed by another call for the rest, which then fails with the reason."""

    def __init__(self, fd: int, owner=None):
        super().__init__()
        self._fd = fd
        self._owner = owner  # the stream that owns the descriptor, kept open while we write to it

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            try:
                done += SYSTEM_WRITE(self._fd, view[done:])
            except BlockingIOError:  # a descriptor someone else set non-blocking: wait until it takes more
                select.select([], [self._fd], [])
            except BrokenPipeError:
                raise  # the reader went away: the edge keeps quiet
            except OSError as error:
                raise StdoutError(f"cannot write stdout: {reason(error)}") from None
        return done

    def close(self) -> None:  # the descriptor stays open: it is the process's stdout, not ours
        super().close()


def whole_stdout(stream):
    """`stream` (sys.stdout) as a UTF-8 text stream over `WholeWrites` of its descriptor, keeping
    its line buffering, write-through (`python -u`) and error handler; a stream without a
    descriptor (a test's) is returned as it is."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    stream.flush()
    buffered = io.BufferedWriter(WholeWrites(fd, stream), buffer_size=BUFFER)
    return io.TextIOWrapper(buffered, encoding="utf-8", errors=getattr(stream, "errors", None) or "strict",
                            line_buffering=getattr(stream, "line_buffering", False),
                            write_through=getattr(stream, "write_through", False))
