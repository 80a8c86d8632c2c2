"""`--output FILE` checked before any work is done, and before numpy loads (the output-only path
sets BLAS to one thread first): FILE's suffix (one of the formats' in render/formats.py), that it
can be written, and that it is no input of this run. Writing it is attncli/render/files.py.
"""

from __future__ import annotations

import errno
import os
import resource
import stat

from attncli.base.errors import AttnError, quote
from attncli.render.formats import listed, suffixes


class OutputError(AttnError):
    """FILE cannot be written; the CLI names --output."""


def check_target(path: str, inputs: list[str | None], expected: tuple[str, ...] | None = None) -> str:
    """FILE's suffix, after checking (before any work is done) that FILE can be written and is
    none of `inputs` (paths or inline text; the ones that name existing files are compared).
    `expected`: the suffixes the command writes, as an unknown suffix's error lists them (default:
    attn compute's, every format's)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in suffixes():
        raise OutputError(f"{quote(path)} has no known suffix; expected {listed(list(expected or suffixes()))}")
    refuse_planted_links(path)
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


MAX_LINKS = 40  # as Linux's limit on the links one path may follow (ELOOP past it)


def links_followed(path: str):
    """Each symbolic link that resolving `path` follows, in order, with its lstat: the links of
    its folders as well as its own, as the kernel meets them (`..` after a link is its target's
    parent). Stops where the path stops existing (a file still to be written)."""
    current = "/" if path.startswith("/") else os.getcwd()
    parts = [part for part in path.split("/") if part]
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            current = os.path.dirname(current) if part == ".." else current
            continue
        candidate = os.path.join(current, part)
        try:
            found = os.lstat(candidate)
        except OSError:  # not there (yet), or not a folder: nothing further is followed
            return
        if not stat.S_ISLNK(found.st_mode):
            current = candidate
            continue
        hops += 1
        if hops > MAX_LINKS:  # a loop: the write itself says "too many levels of symbolic links"
            return
        yield candidate, found
        try:
            target = os.readlink(candidate)
        except OSError:
            return
        current = "/" if target.startswith("/") else current
        parts = [p for p in target.split("/") if p] + parts


def refuse_planted_links(path: str) -> None:
    """Refuse a symbolic link that someone else planted in a sticky, world-writable folder (/tmp):
    the kernel's fs.protected_symlinks refuses to follow it for `open()` and for `> FILE` (a link
    owned by neither us nor the folder's owner), and renaming onto its target would get round
    that, replacing a file of the link owner's choosing. Other links are followed, as before."""
    for link, found in links_followed(path):
        folder = os.path.dirname(link) or "/"
        try:
            holder = os.stat(folder)
        except OSError:
            continue
        shared = holder.st_mode & stat.S_ISVTX and holder.st_mode & stat.S_IWOTH
        if shared and found.st_uid not in (os.geteuid(), holder.st_uid):
            raise OutputError(f"cannot write {quote(path)}: {quote(link)} is a symbolic link owned by someone else "
                              f"(uid {found.st_uid}) in the shared folder {quote(folder)} (sticky, world-writable); "
                              "refusing to follow it, as the kernel's fs.protected_symlinks does; remove the link "
                              "or write to another name")


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
