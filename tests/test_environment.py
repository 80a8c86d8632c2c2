"""Output does not depend on the locale or the terminal: the same bytes under LANG=C, LC_ALL=C,
a Latin-1 stdout encoding, NO_COLOR and TERM=dumb (each run as a real process)."""

import os
import subprocess
import sys

import pytest

from tests.conftest import SAMPLES

ENVIRONMENTS = [{"LANG": "C"}, {"LC_ALL": "C"}, {"LC_ALL": "POSIX", "LANG": "C"}, {"NO_COLOR": "1"},
                {"TERM": "dumb"}, {"PYTHONIOENCODING": "latin-1"}, {"COLUMNS": "30", "LINES": "5"}]
COMMANDS = [
    ["compute", str(SAMPLES / "scooter.json"), "--format", "table"],
    ["compute", str(SAMPLES / "causal.json"), "--explain", "--heatmap"],
    ["compute", str(SAMPLES / "multihead.json")],
    ["check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "--format", "table"],
    ["compute", str(SAMPLES / "scooter.json"), "--q", "0,x"],
]


def run(args, extra):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    env.update(extra)
    done = subprocess.run([sys.executable, "-m", "attncli", *args], env=env, capture_output=True)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=["table", "explain", "json", "check", "error"])
def test_same_bytes_in_every_environment(args):
    baseline = run(args, {})
    assert baseline[0] in (0, 2) and (baseline[1] or baseline[2])
    for extra in ENVIRONMENTS:
        assert run(args, extra) == baseline, extra
    assert b"\x1b[" not in baseline[1]  # never colour codes through a pipe
