"""The parent's side of one forked case: wait for the child, and stop it at the time limit.

The child (child.py) arms its own watchdog, which writes the stack and exits at the limit; this is
the backstop: at the limit plus a grace period the child's whole process group (it calls setsid)
is killed, whatever it is doing, and so is anything it left running when it ended. The case server
(zygote.py), and for a function object the case's own supervisor (`fork_reaped_case`), is also, on
Linux, its descendants' subreaper: what a case left running in a session of its own is re-parented
to it, not to init, and `kill_strays` ends it after the case.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time

from attncli.code import child

GRACE = 1.0  # seconds past the limit before the kill: the watchdog's stack is written first
SLACK = 4.0  # more seconds, while the watchdog has written nothing yet (a loaded machine is slow to run it)


RUNNING: list[int] = []  # the case being supervised (for `stop`, when the server is told to end)


def fork_case(request: dict, function=None) -> dict:
    """Fork, run `request` in the child (`child.run`, which never returns) and supervise it."""
    pid = os.fork()
    if pid == 0:  # the child
        child.run(request, function)
    RUNNING[:] = [pid]
    try:
        return supervise(pid, request["timeout"], os.path.join(request["folder"], child.FAULTS))
    finally:
        RUNNING.clear()


def stop(*_) -> None:
    """The case server told to end (SIGTERM: `attn check --code` interrupted): the case being run and
    all it started are killed now, not at its time limit, and the server exits."""
    for pid in RUNNING:
        _kill(pid)
    kill_strays()
    os._exit(1)


def fork_reaped_case(request: dict, function) -> dict:
    """`fork_case` for a function object, whose case forks from the caller's own process (a notebook's,
    which is never made a subreaper): a child of its own forks the case as the case server does, is
    the subreaper of what the case starts, kills it all when the case ends, and hands the status
    back through a pipe. Where there is no subreaper (not Linux), `fork_case` itself."""
    if not sys.platform.startswith("linux"):
        return fork_case(request, function)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the case's own supervisor
        os.close(read)
        try:
            become_subreaper()
            status = fork_case(request, function)
            kill_strays()
            os.write(write, json.dumps(status).encode())
        finally:
            os._exit(0)  # never the caller's atexit handlers
    os.close(write)
    # Its answer comes by the case's limit, grace and slack; past that (and a margin) the case stopped it.
    limit = request["timeout"] + GRACE + SLACK + 5
    with os.fdopen(read, "rb") as said:
        text = said.read() if select.select([said], [], [], limit)[0] else b""
    if not text:
        _kill(pid)
    os.waitpid(pid, 0)
    return json.loads(text) if text else {"status": "lost"}  # the case killed or stopped its supervisor


def supervise(pid: int, timeout: float, faults: str | None = None) -> dict:
    """{"status": "exit", "code": n} | {"status": "signal", "signal": n, "name": "SIGSEGV"} |
    {"status": "timeout"}, and "seconds" the child took ({"status": "lost"} from `fork_reaped_case`
    when the case killed its supervisor). Past the limit and its grace, the child is
    killed at once if its watchdog has written the stack to `faults`, else after SLACK more seconds
    (the stack names the learner's line: worth waiting for on a busy machine)."""
    start = time.monotonic()
    deadline = start + timeout + GRACE
    pause = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = time.monotonic()
        if now > deadline and (now > deadline + SLACK or faults is None or _written(faults)):
            _kill(pid)
            os.waitpid(pid, 0)
            return {"status": "timeout", "seconds": round(time.monotonic() - start, 3)}
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    _kill(pid)  # what the child started and left behind
    seconds = round(time.monotonic() - start, 3)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return {"status": "signal", "signal": number, "name": name, "seconds": seconds}
    return {"status": "exit", "code": os.WEXITSTATUS(status), "seconds": seconds}


def _written(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Linux: the orphans of this process's descendants are re-parented to it, not to init (a case
    that starts `setsid sleep 60 &` and returns leaves a process killpg cannot reach: it comes here).
    False where the system has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def kill_strays() -> int:
    """Kill and reap every child this process has: called by the case server between cases, when
    each case has been reaped, so a child now is what a case left running (re-parented here, as
    its subreaper). Killing one can orphan its own children to here: repeat until none is left.
    How many were killed."""
    killed = 0
    for _ in range(100):
        strays = _children()
        if not strays:
            break
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
                killed += 1
            except ChildProcessError:
                pass
    return killed


def _children() -> list[int]:
    """This process's children, from /proc (Linux): each thread's `children` list where the kernel
    has it, else every process's parent in its `stat`."""
    me = os.getpid()
    try:
        found = set()
        for task in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{task}/children") as listed:
                found.update(int(pid) for pid in listed.read().split())
        return sorted(found)
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue
        if name.isdigit() and int(fields[1]) == me:
            found.append(int(name))
    return found
