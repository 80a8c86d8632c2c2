"""The command line's edge (attncli/cli.py) in real processes: a closed stdout is a normal end, and
a verdict is decided before anything is printed."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, fast_sample

READERS = [
    ["compute", "samples/scooter.json"],
    ["compute", "samples/scooter.json", "--format", "table"],
    ["posenc", "--positions", "2000"],
    ["example", "scooter"],
]


# A real process each: the fast suite runs a long output and `example` (which flushes its own), the
# slow profile every case.
@pytest.mark.parametrize("args", fast_sample(READERS, READERS[2], READERS[3]))
def test_a_reader_that_goes_away_is_not_an_error(args):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: a closed
    stdout is a normal end: exit 0, nothing on stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "attncli", *args], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the child has started up: every write meets a closed pipe
    stderr = child.stderr.read()
    assert child.wait() == 0 and stderr == b""


VERDICTS = [(weights, code, form) for form in ("json", "table", "csv")
            for weights, code in (("0.0454, 0.7679, 0.1867", 0), ("0.5, 0.25, 0.25", 1))]


# The fast suite: JSON with answers that differ (exit 1 kept) and a table's exit 0 (rich's own exit on a
# closed pipe would be 1); the slow profile every format with each.
@pytest.mark.parametrize("weights, code, form", fast_sample(VERDICTS, VERDICTS[1], VERDICTS[2]))
def test_check_keeps_its_verdict_when_the_reader_goes_away(weights, code, form):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: check's
    verdict is decided before it prints: a reader that leaves does not turn "differ" into 0."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "attncli", "check", "samples/scooter.json", "--weights",
                              weights, "--format", form], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read()
    assert child.wait() == code and stderr == b""


def test_check_code_keeps_its_verdict_when_the_reader_goes_away():
    """`attn check --code no_scale.py:attention … | head`: a failing function is exit 1 whether or not
    anyone reads the marks (a mutation that said 0 for a reader gone went unnoticed)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "attncli", "check", "--code", "tests/code_samples/no_scale.py:attention",
                              "--cases", "scooter", "--format", "json"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read()
    assert child.wait() == 1 and stderr == b""
