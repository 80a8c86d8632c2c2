"""`--output FILE` checked before any work is done, and before numpy loads (the output-only path
sets BLAS to one thread first): FILE's suffix, that it can be written, and that it is no input of
this run. Writing it is attncli/render/files.py.
"""

from __future__ import annotations

import errno
import os
import resource
import stat

from attncli.base.errors import AttnError, quote

TEXT_SUFFIXES = (".json", ".md", ".tex", ".csv", ".html", ".svg")  # written as the text their format's view makes
SUFFIXES = TEXT_SUFFIXES + (".npy", ".npz")


class OutputError(AttnError):
    """FILE cannot be written; the CLI names --output."""


def check_target(path: str, inputs: list[str | None]) -> str:
    """FILE's suffix, after checking (before any work is done) that FILE can be written and is
    none of `inputs` (paths or inline text; the ones that name existing files are compared)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise OutputError(f"{quote(path)} has no known suffix; expected .json, .md, .tex, .csv, .html, .svg, .npy or .npz")
    try:
        existing = os.stat(path)  # follows links
    except FileNotFoundError:
        existing = None
    except OSError as error:  # a link loop, a file where a folder should be, a folder we may not enter
        raise OutputError(f"cannot write {quote(path)}: {reason(error)}") from None
    folder = os.path.dirname(os.path.realpath(path))
    if existing is None and not os.path.isdir(folder):
        raise OutputError(f"cannot write {quote(path)}: folder {quote(folder)} does not exist")
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise OutputError(f"cannot write {quote(path)}: it is a folder; name a file in it")
    for value in inputs:
        if existing is not None and value and _same_file(value, existing):
            alias = "" if value == path else " (as standard input)" if value == "-" else f" (as {quote(value)})"
            raise OutputError(f"{quote(path)} is an input of this run{alias}; refusing to overwrite it, "
                              "write to another file")
    regular = existing is None or stat.S_ISREG(existing.st_mode)
    if existing is not None and regular and not os.access(path, os.W_OK):
        raise OutputError(f"cannot write {quote(path)}: the file is read-only")
    if regular and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {quote(path)}: permission denied in folder {quote(folder)}")
    return suffix


def _same_file(value: str, target: os.stat_result) -> bool:
    """Is `value` (a path, inline text, or - for a regular file on stdin) the file `target`?"""
    try:
        found = os.fstat(0) if value == "-" else os.stat(value)
    except (OSError, ValueError):  # inline text, a name too long, no stdin
        return False
    return stat.S_ISREG(found.st_mode) and os.path.samestat(found, target)


def reason(error: OSError) -> str:
    """`No space left on device` → `no space left on device`; EFBIG names the limit."""
    text = (error.strerror or str(error)).rstrip(".")
    text = text[:1].lower() + text[1:]
    if error.errno == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            text += f" (the file-size limit, ulimit -f, is {limit} bytes)"
    return text
