"""The parent's side of running a learner's function: one child process per case, and what came
back read as an `Outcome`.

A function named as `FILE.py:NAME` or `module:NAME` runs in children forked by a case server
(`zygote.py`, started once per `Runner`); a function object (the Python API) runs in children
forked from this process. Either way each case gets a fresh process with a time limit, a memory
limit and no stdin (child.py), and an exception, a hang, a crash or a forbidden import is that
case's outcome, never this process's.

Nothing the child wrote is trusted: the result is JSON (strict) and an `.npz` read without
pickle, each under a size cap; the learner's printed output is read up to a cap and kept as text
(the views escape it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np

from attncli.base.errors import AttnError, InputError, visible
from attncli.code import child
from attncli.code.supervise import GRACE, SLACK, fork_reaped_case

RESULT_CAP = 1 << 24  # bytes of result.json read
ARRAYS_CAP = 1 << 28  # bytes of returned arrays read (256 MiB)
PRINTED_CAP = 1 << 16  # bytes of printed output read
SHOWN = 600  # characters of printed output kept for the marks
SIGNALS = {"SIGSEGV": "segmentation fault", "SIGBUS": "bus error", "SIGABRT": "aborted", "SIGKILL": "killed",
           "SIGFPE": "floating-point exception", "SIGILL": "illegal instruction"}
FAULT_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


@dataclass(frozen=True)
class Frame:
    """Where in the learner's file it happened: the traceback's last frame there."""

    file: str  # the file's name (not its folders)
    line: int
    function: str
    code: str  # the line of source, stripped ("" when unreadable)

    def text(self) -> str:
        where = f"{self.file}, line {self.line}, in {self.function}"
        return f"{where}: {self.code}" if self.code else where


@dataclass(frozen=True)
class Outcome:
    """One call: the value returned (arrays as numpy; a `Returned` tree), or why there is none."""

    value: object = None
    failure: str | None = None  # "ZeroDivisionError: division by zero", "timed out after 2 s", …
    kind: str | None = None  # exception, timeout, crash, exit, memory
    loading: bool = False  # it failed before the call: loading the file (every case fails alike)
    frame: Frame | None = None
    printed: str = ""  # the learner's stdout and stderr, capped (not yet escaped)
    forbidden: tuple[str, ...] = ()
    seconds: float = 0.0
    file: str | None = None  # the learner's source file, as loaded


@dataclass(frozen=True)
class Returned:
    """A returned value other than an array: tuple, list, dict (`items`), a number, None or
    another type (`type` names it)."""

    kind: str
    items: object = None
    value: object = None
    type: str | None = None
    module: dict = field(default_factory=dict)  # array reference -> the library it came from (torch, jax, numpy)


class Runner:
    """Runs cases; a context manager that cleans up its folder and its case server."""

    def __init__(self, array: str = "numpy", timeout: float = 5.0, memory: int | None = 2048,
                 forbid: tuple[str, ...] = ()):
        if array != "numpy" and importlib.util.find_spec(array) is None:
            raise InputError(f"{array} is not installed, and the function is to be called with {array} arrays: "
                             f"pip install {array}", field="array")
        self.array, self.timeout, self.memory, self.forbid = array, timeout, memory, tuple(forbid)
        self.folder = tempfile.mkdtemp(prefix="attn-code-")
        self.server: subprocess.Popen | None = None
        self.count = 0

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """The server ends at the end of its input; one still running a case (the run interrupted: Ctrl-C)
        is told to end it, and what it started, now (SIGTERM), then killed if it does not."""
        if self.server is not None:
            try:
                self.server.stdin.close()
                self.server.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                self.server.terminate()
                self.server.send_signal(signal.SIGCONT)  # a server a case stopped takes its SIGTERM now
                try:
                    self.server.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.server.kill()
                    self.server.wait()
            self.server = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, target, arguments: list[tuple[str, object]]) -> Outcome:
        """Call `target` (a spec `FILE.py:NAME` / `module:NAME`, or a function) with `arguments`
        ((name, array or plain value), in order) in a child process."""
        self.count += 1
        folder = os.path.join(self.folder, f"case{self.count}")
        os.mkdir(folder)
        arrays = {f"x{i}": value for i, (_, value) in enumerate(arguments) if isinstance(value, np.ndarray)}
        np.savez(os.path.join(folder, child.INPUTS), **arrays)
        listed = [{"name": name, "array": f"x{i}"} if isinstance(value, np.ndarray) else {"name": name, "value": value}
                  for i, (name, value) in enumerate(arguments)]
        with open(os.path.join(folder, child.CALL), "w", encoding="utf-8") as call:
            json.dump(listed, call)
        request = {"folder": folder, "spec": target if isinstance(target, str) else None, "timeout": self.timeout,
                   "memory": self.memory, "array": self.array, "forbid": list(self.forbid)}
        if isinstance(target, str):
            status = self._served(request)
        else:
            sys.stdout.flush()
            sys.stderr.flush()
            status = fork_reaped_case(request, target)
        try:
            return read_outcome(folder, status, self.timeout, self.memory, _spec_path(target))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _served(self, request: dict) -> dict:
        """The case's status from the case server (started when there is none): a server that cannot
        load is an error; one a case stops (kills, or freezes past the case's limit) is that case's
        crash, and the next case starts another."""
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen([sys.executable, "-m", "attncli.code.zygote", self.array],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, text=True, start_new_session=True)
            if self.server.stdout.readline().strip() != "ready":
                self._end_server()
                raise AttnError("the case server stopped (attncli.code.zygote); "
                                + ("is torch installed? pip install torch" if self.array == "torch" else
                                   "is jax installed? pip install jax" if self.array == "jax" else
                                   "please report it"), field="array")
        try:
            self.server.stdin.write(json.dumps(request) + "\n")
            self.server.stdin.flush()
            # The server answers by the case's limit, its grace and slack; past that (and a margin for a
            # loaded machine) it was stopped (SIGSTOP) by the case.
            limit = self.timeout + GRACE + SLACK + 5
            if not select.select([self.server.stdout], [], [], limit)[0]:
                raise OSError("no answer")
            return json.loads(self.server.stdout.readline())
        except (OSError, ValueError):
            self._end_server()
            return {"status": "lost"}

    def _end_server(self) -> None:
        self.server.kill()
        self.server.wait()
        self.server = None


def _spec_path(target) -> str | None:
    if isinstance(target, str):
        where = target.rpartition(":")[0]
        return os.path.abspath(where) if where.endswith(".py") else None
    return None


def _read(path: str, cap: int) -> bytes | None:
    """A file's bytes, or None when it is absent or larger than `cap`."""
    try:
        if os.path.getsize(path) > cap:
            return None
        with open(path, "rb") as f:
            return f.read(cap)
    except OSError:
        return None


def _no_constants(name: str):
    raise ValueError(f"{name} in a result")


def read_outcome(folder: str, status: dict, timeout: float, memory: int | None, path: str | None) -> Outcome:
    """What the child left in `folder`, with the supervisor's `status`."""
    printed = (_read(os.path.join(folder, child.PRINTED), PRINTED_CAP) or b"").decode("utf-8", "replace")
    faults = (_read(os.path.join(folder, child.FAULTS), PRINTED_CAP) or b"").decode("utf-8", "replace")
    raw = _read(os.path.join(folder, child.RESULT), RESULT_CAP)
    try:
        result = json.loads(raw, parse_constant=_no_constants) if raw else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        result = None
    file = result.get("file") if result and isinstance(result.get("file"), str) else path
    forbidden = tuple(str(n) for n in (result or {}).get("forbidden") or () if isinstance(n, str))
    common = {"printed": _shown(printed), "forbidden": forbidden, "seconds": float(status.get("seconds", 0.0)),
              "file": file}
    loading = not os.path.exists(os.path.join(folder, child.LOADED))
    if status["status"] == "timeout" or (result is None and faults.lstrip().startswith("Timeout")):
        return Outcome(failure=f"timed out after {timeout:g} s", kind="timeout",
                       frame=_fault_frame(faults, file), loading=loading, **common)
    if status["status"] == "lost":
        return Outcome(failure="crashed: the process supervising it was stopped or killed (by the case?)", kind="crash",
                       frame=_fault_frame(faults, file), loading=loading, **common)
    if status["status"] == "signal":
        name = status.get("name", "")
        what = SIGNALS.get(name, name)
        if name == "SIGKILL" and memory is not None:
            what += f" (out of memory? the limit is {memory} MiB)"
        return Outcome(failure=f"crashed: {what} ({name})", kind="crash", frame=_fault_frame(faults, file),
                       loading=loading, **common)
    if result is None:
        return Outcome(failure=f"exited (status {status.get('code')}) without returning", kind="exit",
                       frame=_fault_frame(faults, file), loading=loading, **common)
    error = result.get("error")
    if isinstance(error, dict):
        kind = "memory" if error.get("memory") else "exception"
        failure = f"{error.get('type', 'Exception')}: {error.get('message', '')}".rstrip(": ")
        if kind == "memory":
            failure += f" (over the memory limit of {memory} MiB)" if memory is not None else ""
        return Outcome(failure=failure, kind=kind, frame=_error_frame(error.get("frames") or [], file),
                       loading=loading, **common)
    arrays = _arrays(folder)
    if arrays is None:
        return Outcome(failure=f"returned arrays larger than {ARRAYS_CAP >> 20} MiB, or unreadable", kind="exit",
                       **common)
    return Outcome(value=_rebuild(result.get("value"), arrays), **common)


def _arrays(folder: str) -> dict[str, np.ndarray] | None:
    path = os.path.join(folder, child.ARRAYS)
    try:
        if os.path.getsize(path) > ARRAYS_CAP:
            return None
        with np.load(path, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError):
        return None


def _rebuild(node, arrays: dict[str, np.ndarray]):
    """The child's JSON structure back into arrays and `Returned` records."""
    if not isinstance(node, dict):
        return Returned("other", type="an unreadable value")
    kind = node.get("kind")
    if kind == "array" and node.get("ref") in arrays:
        return arrays[node["ref"]]
    if kind in ("tuple", "list") and isinstance(node.get("items"), list):
        return Returned(kind, items=[_rebuild(item, arrays) for item in node["items"]])
    if kind == "dict" and isinstance(node.get("items"), dict):
        return Returned(kind, items={str(k): _rebuild(v, arrays) for k, v in node["items"].items()})
    if kind == "number":
        value = node.get("value")
        return Returned("number", value=float(value) if isinstance(value, str) else value)
    if kind == "none":
        return Returned("none")
    return Returned("other", type=str(node.get("type", "an unknown value")))


def _source_line(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for number, text in enumerate(source, 1):
                if number == line:
                    return text.strip()[:200]
                if number > line:
                    break
    except OSError:
        pass
    return ""


def _frame(path: str, line: int, function: str) -> Frame:
    return Frame(file=os.path.basename(path), line=line, function=visible(function)[:100],
                 code=_source_line(path, line))


def _same(a: str, b: str | None) -> bool:
    return b is not None and os.path.abspath(a) == os.path.abspath(b)


def _error_frame(frames: list, path: str | None) -> Frame | None:
    """The last frame of a traceback in the learner's file (else the last frame at all outside
    attncli's child)."""
    listed = [f for f in frames if isinstance(f, dict) and isinstance(f.get("file"), str)
              and isinstance(f.get("line"), int)]
    for wanted in (lambda f: _same(f["file"], path), lambda f: not f["file"].endswith(os.path.join("code", "child.py"))):
        found = [f for f in listed if wanted(f)]
        if found:
            last = found[-1]
            return _frame(last["file"], last["line"], str(last.get("function", "?")))
    return None


def _fault_frame(faults: str, path: str | None) -> Frame | None:
    """The learner's innermost frame in faulthandler's dump (most recent call first)."""
    for line in faults.splitlines():
        found = FAULT_FRAME.match(line)
        if found and _same(found.group(1), path):
            return _frame(found.group(1), int(found.group(2)), found.group(3))
    return None


def _shown(printed: str) -> str:
    """The learner's printed output, at most SHOWN characters (its start), as text."""
    printed = printed.rstrip()
    if len(printed) > SHOWN:
        return printed[:SHOWN] + f"… ({len(printed) - SHOWN} more characters)"
    return printed
