"""`--output FILE`: a format's text (.json, .md, .tex, .csv, .html: render/formats.py), or the trace's
arrays straight from it (.npy, the final output, or .npz, every stage: render/arrays.py), written
like a careful Unix tool (the README's Guarantees say the same):

- Atomically: the content goes to a temporary file `.attn-tmp-<pid>-<random><suffix>` in FILE's
  folder, is flushed and fsynced, renamed over FILE, and then the folder is fsynced: FILE is
  either complete or as it was, also after a power cut.
- Modes: a new FILE gets 0666 minus the umask, as `attn … > FILE` would; an existing FILE keeps
  its mode (and its owner and group, where we may set them). A read-only FILE is refused.
- Symbolic links are followed: the file a link points to is replaced and the link kept (what
  editors and `sed -i --follow-symlinks` do; a link such as `latest.npz -> run3.npz` keeps
  pointing where it did). A dangling link creates the file it names. A link someone else planted
  in a sticky world-writable folder (/tmp) is refused, in FILE's own name or its folders', as the
  kernel's fs.protected_symlinks refuses `open()` through it (`target.refuse_planted_links`).
- Devices and named pipes (a link to /dev/null, a FIFO named out.json) cannot be replaced: they
  are written directly, without a temporary file.
- A file that is an input of the same run (the problem FILE, --q …, a file redirected to stdin;
  by any name or link) is never overwritten.
- SIGTERM, SIGHUP and every other catchable signal that would end the process (SIGQUIT, SIGUSR1,
  SIGUSR2, SIGALRM, …: `CLEAN_UP_ON`) during the write remove the temporary file; the process then dies of the
  same signal (exit status 128 + n in a shell), as if attn had not caught it.
- A temporary file left by SIGKILL or a crash is recognised by its name: each write removes the
  ones in its folder whose process is no longer running.

FILE is checked before any work is done by attncli/render/target.py, which does not load numpy.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import sys
import threading
from contextlib import contextmanager, suppress
from functools import partial

from attncli.base.errors import quote
from attncli.render import out
from attncli.render.formats import suffixes
from attncli.render.target import OutputError, reason, refuse_planted_links

# Every catchable signal whose default ends the process: SIGINT already raises KeyboardInterrupt,
# which cleans up; SIGPIPE is ignored by Python, SIGXFSZ by the write (EFBIG instead).
CLEAN_UP_ON = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
               "SIGXCPU", "SIGIO", "SIGPWR")


class Interrupted(BaseException):
    """A signal arrived during the write; the temporary file is gone, the process should die of it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def die(self) -> None:
        signal.signal(self.signum, signal.SIG_DFL)
        os.kill(os.getpid(), self.signum)
        sys.exit(128 + self.signum)  # not reached unless the signal is blocked


def write_output(path: str, suffix: str, content) -> None:
    """Write FILE as the module docstring says: `content` is a text format's text (str), or
    `content(handle)` writes a binary format's bytes. Raises OutputError for what the system
    refused, Interrupted on a signal of CLEAN_UP_ON."""
    write = content if callable(content) else partial(out.write_all, content.encode("utf-8"))
    try:
        refuse_planted_links(path)  # again, at the moment of writing: a link planted since the check
        target = os.path.realpath(path)
        with _signals_clean_up():
            if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
                with open(target, "wb") as handle:  # a device or a FIFO
                    write(handle)
            else:
                _replace(target, write, suffix)
    except OSError as error:
        raise OutputError(f"cannot write {quote(path)}: {reason(error)}") from None


def _replace(target: str, content, suffix: str) -> None:
    """Write a temporary file beside `target`, then rename it over `target`."""
    folder = os.path.dirname(target)
    remove_stale(folder)
    existing = os.stat(target) if os.path.exists(target) else None
    temporary = os.path.join(folder, f".attn-tmp-{os.getpid()}-{os.urandom(4).hex()}{suffix}")  # temporary()
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as handle:  # created 0666 minus the umask
            if existing is not None:
                _keep_owner_and_mode(fd, existing)
            content(handle)
            handle.flush()
            os.fsync(fd)  # the data is on disk before the name points to it
        os.replace(temporary, target)
    except BaseException:  # an error, Ctrl-C, or Interrupted by SIGTERM/SIGHUP
        with suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)  # the rename itself is on disk


def _keep_owner_and_mode(fd: int, existing: os.stat_result) -> None:
    ours = os.fstat(fd)
    if (ours.st_uid, ours.st_gid) != (existing.st_uid, existing.st_gid):
        with suppress(PermissionError):  # only root may give a file away; the group may still work
            os.fchown(fd, existing.st_uid, existing.st_gid)
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))  # after chown, which clears set-id bits


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # folders some systems cannot fsync
            raise
    finally:
        os.close(fd)


def temporary() -> re.Pattern:
    """A temporary file's name: its writer's pid and a registered format's suffix (render/formats.py)."""
    return re.compile(r"\.attn-tmp-(\d{1,10})-[0-9a-f]{8}(" + "|".join(re.escape(s) for s in suffixes()) + ")")


def remove_stale(folder: str) -> list[str]:
    """Remove the temporary files in `folder` whose writer is no longer running; return their names."""
    removed, pattern = [], temporary()
    with suppress(OSError):
        for name in os.listdir(folder):
            match = pattern.fullmatch(name)
            if match and not _running(int(match[1])):
                with suppress(OSError):
                    os.unlink(os.path.join(folder, name))
                    removed.append(name)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # someone else's process, or not a pid
        return True
    return True


@contextmanager
def _signals_clean_up():
    """While writing: the signals of CLEAN_UP_ON raise Interrupted (so the temporary file is removed),
    and SIGXFSZ is ignored (so a write past `ulimit -f` fails with EFBIG instead of killing us)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def interrupt(signum, frame):
        raise Interrupted(signum)

    wanted = {getattr(signal, name): interrupt for name in CLEAN_UP_ON if hasattr(signal, name)
              and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN}  # nohup stays nohup
    if hasattr(signal, "SIGXFSZ"):
        wanted[signal.SIGXFSZ] = signal.SIG_IGN
    previous = {signum: signal.signal(signum, handler) for signum, handler in wanted.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
