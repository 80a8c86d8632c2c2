"""The case server: `python -m attncli.code.zygote ARRAY` loads numpy (and torch for torch
arrays) once, then forks one child per case it is sent, so that each case starts in a fresh
process without paying for those imports again (a fork takes milliseconds; a new Python with
numpy a tenth of a second, with torch over a second).

Protocol: `ready` on stdout once loaded; then one JSON request per line on stdin (child.run's
`request`), one JSON status per line on stdout (supervise.supervise's). SIGTERM ends the case
being run, what it started, and the server (supervise.stop). It runs none of the learner's code
itself: only its forked children do, after pointing their own stdin, stdout and stderr elsewhere.
"""

from __future__ import annotations

import json
import signal
import sys

import numpy  # noqa: F401 (loaded once, before the forks: the reason this server exists)

from attncli.code import child  # noqa: F401 (loaded before the forks)
from attncli.code.supervise import become_subreaper, fork_case, kill_strays, stop


def main(array: str) -> None:
    if array == "torch":
        # Imported here, for start-up: torch (1.5 s) is loaded once, before the forks, on the torch arrays' path only.
        import torch  # noqa: F401
    replies = sys.stdout
    reaper = become_subreaper()  # what a case leaves running in a session of its own comes here
    signal.signal(signal.SIGTERM, stop)  # interrupted: the case and what it started end now
    replies.write("ready\n")  # loaded: from here on, a server that stops was stopped by a case
    replies.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        status = fork_case(json.loads(line))
        if reaper:
            kill_strays()
        replies.write(json.dumps(status) + "\n")
        replies.flush()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "numpy")
