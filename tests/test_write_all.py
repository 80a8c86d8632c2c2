"""Documents are written in chunks: one write(2) call takes at most ~2 GiB on Linux, and a text
stream silently drops what a larger call leaves (a 2 GiB + 10 byte JSON lost its end)."""

import errno
import io
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, SAMPLES, fast_sample

from attncli.base.errors import StdoutError
from attncli.render import out


class Recording(io.StringIO):
    def __init__(self):
        super().__init__()
        self.sizes = []

    def write(self, text):
        self.sizes.append(len(text))
        return super().write(text)


def test_write_all_splits_into_chunks_and_loses_nothing(monkeypatch):
    monkeypatch.setattr(out, "CHUNK", 4)
    stream = Recording()
    out.write_all("abcdefghij", stream)
    assert stream.getvalue() == "abcdefghij" and stream.sizes == [4, 4, 2]
    binary = io.BytesIO()
    out.write_all(b"0123456789", binary)
    assert binary.getvalue() == b"0123456789"


def test_compute_and_output_files_go_through_write_all(run, monkeypatch, tmp_path):
    whole = run("compute", SAMPLES / "scooter.json", "-f", "json").stdout
    calls = []
    real = out.write_all
    monkeypatch.setattr(out, "CHUNK", 7)
    monkeypatch.setattr(out, "write_all", lambda text, stream=None: (calls.append(len(text)), real(text, stream)))
    assert run("compute", SAMPLES / "scooter.json", "-f", "json").stdout == whole
    target = tmp_path / "t.json"
    assert run("compute", SAMPLES / "scooter.json", "-o", target).exit_code == 0
    assert json.loads(target.read_text()) == json.loads(whole)
    assert len(calls) == 2


# stdout that cannot take everything: a full disk writes what fits and says so only on the next
# write(2); CPython's text stream dropped that short count, so `attn compute big.json -f json >
# full/out.json` exited 0 with a truncated document. Every command says so and exits 2.
FULL_MESSAGE = "error: cannot write stdout: no space left on device\n"
COMMANDS = {
    "compute": ["compute", str(SAMPLES / "scooter.json"), "-f", "json"],
    "table": ["compute", str(SAMPLES / "scooter.json"), "-f", "table"],
    "explain": ["compute", str(SAMPLES / "scooter.json"), "--explain"],
    "check": ["check", str(SAMPLES / "scooter.json"), "--weights", "0.05,0.77,0.19", "-f", "json"],
    "check-differs": ["check", str(SAMPLES / "scooter.json"), "--weights", "0.1,0.2,0.7"],
    "page": ["check", str(SAMPLES / "scooter.json"), "--weights", "0.1,0.2,0.7", "-f", "html"],
    "exercise": ["exercise", "--seed", "3"],
    "posenc": ["posenc", "--positions", "3", "--dim", "4"],
    "example": ["example"],
    "help": ["compute", "--help"],
    "version": ["--version"],
}


def attn(args, stdout, **more):
    return subprocess.run([sys.executable, "-m", "attncli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT, **more)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
# A real process each: the fast suite writes a table and a differing check (exit 1 turned into 2); the
# slow profile every command.
@pytest.mark.parametrize("name", fast_sample(list(COMMANDS), "table", "check-differs"))
def test_stdout_to_dev_full_is_one_error_line_for_every_command(name):
    with open("/dev/full", "w") as full:
        done = attn(COMMANDS[name], full)
    assert (done.returncode, done.stderr) == (2, FULL_MESSAGE)


def big_problem(tmp_path) -> str:
    rng = np.random.default_rng(0)
    doc = {name: rng.normal(size=(40, 8)).tolist() for name in "QKV"}
    (tmp_path / "big.json").write_text(json.dumps(doc))
    return str(tmp_path / "big.json")


def test_a_short_write_at_the_file_size_limit_is_an_error_not_exit_0(tmp_path):
    """write(2) past `ulimit -f` writes what fits, then fails (EFBIG): the short write a full disk
    makes, without root. The old stream exited 0 with the first 8,192 bytes."""
    problem = big_problem(tmp_path)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))  # noqa: E731
    with open(tmp_path / "out.json", "w") as target:
        done = attn(["compute", problem, "-f", "json"], target, preexec_fn=limit)
    assert done.returncode == 2
    assert done.stderr == ("error: cannot write stdout: file too large (the file-size limit, ulimit -f, is 8192 "
                           "bytes)\n")


@pytest.fixture
def full_disk(tmp_path):
    """A 16 KiB tmpfs (root only: skipped elsewhere), unmounted afterwards."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_stdout_to_a_disk_that_fills_up_is_an_error_not_exit_0(tmp_path, full_disk):
    problem = big_problem(tmp_path)
    with open(full_disk / "out.json", "w") as target:
        done = attn(["compute", problem, "-f", "json"], target)
    assert (done.returncode, done.stderr) == (2, FULL_MESSAGE)
    assert (full_disk / "out.json").stat().st_size == 16384  # what fitted; the exit status says it is not all


def test_whole_writes_writes_the_rest_of_a_short_write_then_names_the_failure(monkeypatch):
    """The stream under stdout: a short count is followed by a write of the rest; the failure of
    that one is a StdoutError naming the reason (a fake write(2): 5 bytes fit, then ENOSPC)."""
    written = []

    def write(fd, data):
        if sum(map(len, written)) >= 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(bytes(data[:5 - sum(map(len, written))]))
        return len(written[-1])

    monkeypatch.setattr(out, "SYSTEM_WRITE", write)
    stream = out.whole_stdout(io.TextIOWrapper(io.FileIO(os.devnull, "w"), encoding="utf-8"))
    with pytest.raises(StdoutError, match="^cannot write stdout: no space left on device$"):
        stream.write("x" * 20_000)  # past the buffer: written at once
        stream.flush()
    assert b"".join(written) == b"xxxxx"
    monkeypatch.setattr(out, "SYSTEM_WRITE", lambda fd, data: (_ for _ in ()).throw(BrokenPipeError(errno.EPIPE, "")))
    with pytest.raises(BrokenPipeError):  # a reader that went away stays quiet at the edge
        out.WholeWrites(1).write(b"x")


def test_a_reader_that_goes_away_is_still_not_an_error():
    child = subprocess.Popen([sys.executable, "-m", "attncli", "check", str(SAMPLES / "scooter.json"), "--weights",
                              "0.1,0.2,0.7"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    assert child.wait() == 1 and child.stderr.read() == b""  # check's verdict, nothing said


def _closed(fd):
    return lambda: os.close(fd)


@pytest.mark.parametrize("name", fast_sample(["compute", "table", "check", "exercise", "posenc", "help"],
                                             "compute"))
def test_a_closed_stdout_is_one_error_line_for_every_command(name):
    """`attn compute s.json -f json >&-`: Python starts with sys.stdout None (was: an internal error
    and a traceback, exit 1)."""
    done = attn(COMMANDS[name], None, preexec_fn=_closed(1))
    assert (done.returncode, done.stderr) == (2, "error: cannot write stdout: it is closed\n")


def test_a_closed_stdout_is_no_error_when_nothing_goes_to_it(tmp_path):
    target = tmp_path / "out.json"
    done = attn(["compute", str(SAMPLES / "scooter.json"), "-o", str(target)], None, preexec_fn=_closed(1))
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(target.read_text())["output"]


def test_a_closed_stdin_is_no_stdin():
    done = attn(COMMANDS["compute"], subprocess.PIPE, stdin=None, preexec_fn=_closed(0))
    assert done.returncode == 0 and json.loads(done.stdout)["output"]
    done = attn(["compute", "-f", "json"], subprocess.PIPE, stdin=None, preexec_fn=_closed(0))
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.startswith("error: <stdin>: empty input")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_an_error_line_that_stderr_cannot_take_still_exits_2(tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "attncli", "compute", str(tmp_path / "absent.json")],
                              stdout=subprocess.PIPE, stderr=full, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == b""
    done = subprocess.run([sys.executable, "-m", "attncli", "compute", str(tmp_path / "absent.json")],
                          stdout=subprocess.PIPE, preexec_fn=_closed(2), cwd=ROOT)
    assert done.returncode == 2 and done.stdout == b""
