"""`--output FILE`: the trace as .json, .md, .tex or .csv (text), .npy (the final output) or .npz
(every stage), written
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
import json
import os
import re
import signal
import stat
import sys
import threading
from contextlib import contextmanager, suppress

import numpy as np

from attncli.base.errors import quote
from attncli.document.writing import mask_and_bias
from attncli.problem.groups import count, grouped
from attncli.problem.trace import Trace
from attncli.problem.variants import input_keys as variant_keys
from attncli.render import out
from attncli.render.target import TEXT_SUFFIXES, OutputError, reason, refuse_planted_links
from attncli.stages.table import names

TEMPORARY = re.compile(r"\.attn-tmp-(\d{1,10})-[0-9a-f]{8}\.(json|md|tex|csv|html|npy|npz)")
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


def npz_arrays(trace: Trace) -> dict:
    """Every stage under its JSON path (`heads/weights` is (H, Lq, Lk)), the inputs as given,
    and what is needed to read the file back as a problem."""
    p = trace.problem
    arrays = dict(p.inputs)
    for name in ("Q", "K", "V") + names():
        if trace.stage(name) is not None:
            arrays[f"heads/{name}"] = trace.stage(name)
    arrays["output"] = trace.final
    if "W_O" in p.inputs:  # as in JSON: the heads side by side before W_O
        arrays["concat"] = trace.concat
    arrays.update({key: np.asarray(value) for key, value in mask_and_bias(p).items()})
    arrays.update({key: np.asarray(value) for key, value in variant_keys(p).items()})  # alibi, softcap, sinks
    if p.window is not None:  # an array holds no null: NaN stands for an unbounded side
        arrays["window"] = np.array([np.nan if b is None else b for b in p.window])
    if p.rope is not None:  # an array holds no object: the rope object as JSON text (rope.read takes it)
        arrays["rope"] = np.array(json.dumps(p.rope.to_json()))
    for norm in (p.q_norm, p.k_norm):  # QK-norm, as JSON text too (qk_norm.read takes it)
        if norm is not None:
            arrays[norm.name] = np.array(json.dumps(norm.to_json()))
    arrays["scale"] = np.array(trace.scale)
    arrays["masked_rows"] = np.array(p.masked_rows)
    arrays["dtype"] = np.array(p.dtype)
    if p.heads > 1 and not any(a.ndim == 3 for a in p.inputs.values()):
        arrays["heads"] = np.array(p.heads)
    if grouped(p):  # grouped-query attention: W_K and W_V (2-D K and V) hold kv_heads · d columns
        arrays["kv_heads"] = np.array(count(p))
    for key in ("query_labels", "key_labels", "title", "description"):
        if getattr(p, key) is not None:
            arrays[key] = np.array(getattr(p, key))
    if trace.gradients is not None:  # the backward pass: dO (input again), heads/d_Q …, grads/Q …
        arrays["dO"] = p.dO
        arrays.update({f"heads/{name}": array for name, array in trace.gradients.heads.items()})
        arrays.update({f"grads/{name}": array for name, array in trace.gradients.grads.items()})
    return arrays


def write_output(trace: Trace, path: str, suffix: str, json_text=None, arrays=None) -> None:
    """Write FILE as the module docstring says. `json_text()` gives the text of a .json,
    .md, .tex or .csv file; `arrays()` an .npz's members, when not the trace's (attn capture's documents).
    Raises OutputError for what the system refused, Interrupted on a signal of CLEAN_UP_ON."""
    def content(handle) -> None:
        if suffix in TEXT_SUFFIXES:
            out.write_all(json_text().encode("utf-8"), handle)
        elif suffix == ".npy":
            np.save(handle, trace.final)
        else:
            np.savez(handle, **(arrays() if arrays is not None else npz_arrays(trace)))

    try:
        refuse_planted_links(path)  # again, at the moment of writing: a link planted since the check
        target = os.path.realpath(path)
        with _signals_clean_up():
            if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
                with open(target, "wb") as handle:  # a device or a FIFO
                    content(handle)
            else:
                _replace(target, content, suffix)
    except OSError as error:
        raise OutputError(f"cannot write {quote(path)}: {reason(error)}") from None


def _replace(target: str, content, suffix: str) -> None:
    """Write a temporary file beside `target`, then rename it over `target`."""
    folder = os.path.dirname(target)
    remove_stale(folder)
    existing = os.stat(target) if os.path.exists(target) else None
    temporary = os.path.join(folder, f".attn-tmp-{os.getpid()}-{os.urandom(4).hex()}{suffix}")  # TEMPORARY
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


def remove_stale(folder: str) -> list[str]:
    """Remove the temporary files in `folder` whose writer is no longer running; return their names."""
    removed = []
    with suppress(OSError):
        for name in os.listdir(folder):
            match = TEMPORARY.fullmatch(name)
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
