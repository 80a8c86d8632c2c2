"""The parent's side of one forked case: wait for the child, and stop it at the time limit.

The child (child.py) arms its own watchdog, which writes the stack and exits at the limit; this is
the backstop: at the limit plus a grace period the child's whole process group (it calls setsid)
is killed, whatever it is doing, and so is anything it left running when it ended.
"""

from __future__ import annotations

import os
import signal
import time

from attncli.code import child

GRACE = 1.0  # seconds past the limit before the kill: the watchdog's stack is written first
SLACK = 4.0  # more seconds, while the watchdog has written nothing yet (a loaded machine is slow to run it)


def fork_case(request: dict, function=None) -> dict:
    """Fork, run `request` in the child (`child.run`, which never returns) and supervise it."""
    pid = os.fork()
    if pid == 0:  # the child
        child.run(request, function)
    return supervise(pid, request["timeout"], os.path.join(request["folder"], child.FAULTS))


def supervise(pid: int, timeout: float, faults: str | None = None) -> dict:
    """{"status": "exit", "code": n} | {"status": "signal", "signal": n, "name": "SIGSEGV"} |
    {"status": "timeout"}, and "seconds" the child took. Past the limit and its grace, the child is
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
