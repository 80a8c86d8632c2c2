"""Output does not depend on the locale or the terminal: the same bytes under LANG=C, LC_ALL=C,
a Latin-1 stdout encoding, NO_COLOR (also on a colour terminal), TERM=dumb and a tiny COLUMNS.

The matrix runs in-process: the console-script entry point `attncli.cli.main` with exactly the
environment a real process would get (rich, shutil and attncli read the variables when a command
runs, not at import) and stdout/stderr in the encoding and error handler that a real interpreter
picks under that environment (asked once per environment, without importing attncli). Two real
`python -m attncli` runs prove that the in-process runs give the same bytes."""

import functools
import io
import os
import subprocess
import sys

import pytest

from attncli import cli
from tests.conftest import SAMPLES

# A colour terminal through a pipe: rich colours its output under FORCE_COLOR and a colour TERM.
COLOUR = {"FORCE_COLOR": "1", "TERM": "xterm-256color"}
ENVIRONMENTS = [{"LANG": "C"}, {"LC_ALL": "C"}, {"LC_ALL": "POSIX", "LANG": "C"}, {"NO_COLOR": "1"},
                {"TERM": "dumb"}, {"PYTHONIOENCODING": "latin-1"}, {"COLUMNS": "30", "LINES": "5"},
                COLOUR | {"NO_COLOR": "1"}]
COMMANDS = {
    "table": ["compute", str(SAMPLES / "scooter.json"), "--format", "table"],
    "explain": ["compute", str(SAMPLES / "causal.json"), "--explain", "--heatmap"],
    "json": ["compute", str(SAMPLES / "multihead.json")],
    "check": ["check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "table"],
    "error": ["compute", str(SAMPLES / "scooter.json"), "--q", "0,x"],
}
STREAMS = "import sys; print(sys.stdout.encoding, sys.stdout.errors, sys.stderr.encoding, sys.stderr.errors)"


def environment(extra: dict) -> dict:
    """The whole environment of a run: nothing inherited but PATH and HOME, UTF-8 unless `extra` says."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    return env | extra


def real(args: list[str], extra: dict) -> tuple[int, bytes, bytes]:
    done = subprocess.run([sys.executable, "-m", "attncli", *args], env=environment(extra), capture_output=True)
    return done.returncode, done.stdout, done.stderr


@functools.cache
def streams(extra: tuple) -> list[str]:
    """stdout's and stderr's encoding and error handler in a real interpreter under `extra`
    (the locale and PYTHONIOENCODING decide them at start-up, which an in-process run cannot redo)."""
    done = subprocess.run([sys.executable, "-c", STREAMS], env=environment(dict(extra)), capture_output=True,
                          check=True)
    return done.stdout.decode().split()


def in_process(args: list[str], extra: dict) -> tuple[int, bytes, bytes]:
    """`attn ARGS` through the console-script entry point, in this process, as a real process would
    run it under `extra`; the environment, argv and standard streams are restored afterwards."""
    out_encoding, out_errors, err_encoding, err_errors = streams(tuple(sorted(extra.items())))
    out, err = io.BytesIO(), io.BytesIO()
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            patch.delenv(name)
        for name, value in environment(extra).items():
            patch.setenv(name, value)
        patch.setattr(sys, "argv", ["attn", *args])
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(), encoding=out_encoding))
        patch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding=out_encoding, errors=out_errors))
        patch.setattr(sys, "stderr", io.TextIOWrapper(err, encoding=err_encoding, errors=err_errors,
                                                      line_buffering=True))
        try:
            cli.main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue(), err.getvalue()  # before the wrappers, dropped, close their buffers


@pytest.mark.parametrize("name", COMMANDS)
def test_same_bytes_in_every_environment(name):
    args = COMMANDS[name]
    baseline = in_process(args, {})
    assert baseline[0] in (0, 2) and (baseline[1] or baseline[2])
    for extra in ENVIRONMENTS:
        assert in_process(args, extra) == baseline, extra
    assert b"\x1b[" not in baseline[1]  # never colour codes through a pipe


def test_the_colour_terminal_is_coloured_without_no_color():
    """Else the NO_COLOR run on it would prove nothing."""
    assert b"\x1b[" in in_process(COMMANDS["table"], COLOUR)[1]
    assert b"\x1b[" in in_process(COMMANDS["check"], COLOUR)[1]


@pytest.mark.parametrize(("name", "extra"), [("explain", {"PYTHONIOENCODING": "latin-1"}),
                                             ("error", {"LC_ALL": "C", **COLOUR, "NO_COLOR": "1"})],
                         ids=["explain-latin-1", "error-C-no-color"])
def test_in_process_runs_give_the_bytes_of_a_real_process(name, extra):
    assert in_process(COMMANDS[name], extra) == real(COMMANDS[name], extra)
