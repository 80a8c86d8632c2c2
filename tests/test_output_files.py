"""--output (.json, .npy, .npz) written atomically, .npy/.npz read back, output-only stages."""

import json
import os

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render import arrays, files
from attncli.render.target import OutputError
from tests.conftest import SAMPLES, assert_error, fast_sample


def test_npy_holds_the_final_output(run, tmp_path):
    path = tmp_path / "out.npy"
    result = run("compute", SAMPLES / "multihead.json", "--output", path)
    assert result.exit_code == 0 and result.stdout == ""
    expected = run.json("compute", SAMPLES / "multihead.json")["output"]
    np.testing.assert_allclose(np.load(path), expected, rtol=0, atol=1e-12)


def test_npz_holds_every_stage_and_reads_back_as_a_problem(run, tmp_path):
    path = tmp_path / "all.npz"
    assert run("compute", SAMPLES / "causal.json", "-o", path).exit_code == 0
    with np.load(path) as archive:
        assert {"heads/scores", "heads/scaled", "heads/masked", "heads/weights", "heads/output", "output",
                "Q", "K", "V", "mask", "scale"} <= set(archive.files)
        weights = archive["heads/weights"]
    again = run.json("compute", path)
    np.testing.assert_array_equal(again["heads"][0]["weights"], weights[0])
    assert again["mask"] == "causal" and again["query_labels"] == ["the", "cat", "sat", "down"]


def test_npz_round_trips_projections_and_heads(run, tmp_path):
    path = tmp_path / "mh.npz"
    assert run("compute", SAMPLES / "multihead.json", "-o", path).exit_code == 0
    assert run.json("compute", path)["output"] == run.json("compute", SAMPLES / "multihead.json")["output"]


@pytest.mark.parametrize("name, stages", [("o.npy", "output"), ("o.npz", "weights,output"), ("all.npz", None)])
def test_a_binary_file_builds_no_text(run, tmp_path, monkeypatch, name, stages):
    """An .npy or .npz is written from the trace: no JSON (or other text) is built and thrown away
    (a captured layer's JSON echoes its weights: megabytes nobody asked for)."""
    from attncli.render import export, json, page

    def refuse(*args, **kwargs):
        raise AssertionError("a text document was built for a binary file")

    for view, writer in ((json, "document"), (export, "markdown"), (export, "latex"), (export, "csv_stage"),
                         (page, "page")):  # every text format's view (render/formats.py's writers import them)
        monkeypatch.setattr(view, writer, refuse)
    result = run("compute", SAMPLES / "scooter.json", *(("--stages", stages) if stages else ()), "-o", tmp_path / name)
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / name).stat().st_size > 0


def test_json_output_file_is_the_stdout_document(run, tmp_path):
    path = tmp_path / "out.json"
    assert run("compute", SAMPLES / "scooter.json", "-o", path).exit_code == 0
    assert path.read_text() == run("compute", SAMPLES / "scooter.json").stdout


def test_an_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    trace = attend(build_problem({"Q": [1.0], "K": [1.0], "V": [1.0]}))
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(KeyboardInterrupt):
        files.write_output(str(target), ".npz", lambda handle: arrays.save_npz(trace, handle))
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.npz"]


def test_output_errors(run, tmp_path):
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "x.txt"),
                 '--output: "', 'has no known suffix; expected .json, .md, .tex, .csv, .html, .svg, .npy or .npz')
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "no" / "x.npy"), "does not exist")


def test_npz_input_errors(run, tmp_path):
    np.savez(tmp_path / "p.npz", Q=np.array([[1.0, 2.0]]), K=np.array([[1.0, 2.0, 3.0]]), V=np.array([[1.0]]))
    assert_error(run("compute", tmp_path / "p.npz"), "p.npz: K has 3 columns but Q has 2")
    np.savez(tmp_path / "o.npz", Q=np.array([{"a": 1}], dtype=object))
    assert_error(run("compute", tmp_path / "o.npz"), "pickles are refused")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert_error(run("compute", tmp_path / "bad.npz"), "bad.npz: cannot read .npz")


def test_stages_output_uses_the_blocked_path_and_agrees(run):
    blocked = run.json("compute", SAMPLES / "random_4x8.json", "--stages", "output")
    full = run.json("compute", SAMPLES / "random_4x8.json")
    assert set(blocked["heads"][0]) == {"output", "lse"}
    np.testing.assert_allclose(blocked["output"], full["output"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(blocked["heads"][0]["lse"], full["heads"][0]["lse"], rtol=0, atol=1e-12)
    table = run("compute", SAMPLES / "scooter.json", "--stages", "output", "-f", "table").stdout
    assert "0.2775" in table and "1.3491" in table


def test_npy_and_npz_must_hold_what_their_names_say(run, tmp_path):
    np.save(tmp_path / "one.npy", np.ones(3))
    (tmp_path / "one.npz").write_bytes((tmp_path / "one.npy").read_bytes())
    assert_error(run("compute", tmp_path / "one.npz"), "one.npz: cannot read .npz: it holds one array")
    np.savez(tmp_path / "many.npz", Q=np.ones(2))
    assert_error(run("compute", "--q", tmp_path / "many.npz", "--k", "1", "--v", "1"),
                 "many.npz: an .npz archive holds several arrays")


# --- Files written like a careful Unix tool ---------------------------------------------------------
# Subprocess cases run attn as a user would; root's powers to write anywhere are dropped there
# (CAP_DAC_OVERRIDE), so read-only folders mean what they say also when the tests run as root.

import signal  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

SCOOTER_FILE = str(SAMPLES / "scooter.json")
ROOT = str(Path(__file__).resolve().parent.parent)


def _no_root_powers():
    """In the child: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so that
    the python it executes, even as root, obeys file permissions."""
    if os.geteuid() != 0:
        return  # permissions already apply
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP


def attn(*args, preexec_fn=None, code=None, stdin=subprocess.DEVNULL):
    """Run attn in a fresh process (or `code`, a script that ends by calling attn's main)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    command = [sys.executable, "-c", code, *map(str, args)] if code else [sys.executable, "-m", "attncli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, preexec_fn=preexec_fn, stdin=stdin)


def assert_process_error(done, *fragments):
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --output: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def temporaries(folder):
    return [name for name in os.listdir(folder) if name.startswith(".attn-")]


def test_a_new_file_honours_the_umask(run, tmp_path):
    old = os.umask(0o027)
    try:
        assert run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "out.npz").exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "out.npz").st_mode) == 0o640  # 0666 minus the umask


@pytest.mark.parametrize("mode", [0o600, 0o664, 0o604])
def test_an_existing_file_keeps_its_mode(run, tmp_path, mode):
    path = tmp_path / "out.json"
    path.write_text("old")
    path.chmod(mode)
    assert run("compute", SAMPLES / "scooter.json", "-o", path).exit_code == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == mode and path.read_text().startswith("{")


def test_the_file_is_synced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    trace = attend(build_problem({"Q": [1.0], "K": [1.0], "V": [1.0]}))
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(
        "fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    files.write_output(str(tmp_path / "out.npy"), ".npy", lambda handle: arrays.save_npy(trace, handle))
    assert events == ["fsync file", "rename", "fsync folder"]


def test_a_symlink_is_followed_and_kept(run, tmp_path):
    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "run3.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    assert run("compute", SAMPLES / "scooter.json", "-o", link).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == run("compute", SAMPLES / "scooter.json").stdout
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640
    assert temporaries(tmp_path) == temporaries(tmp_path / "runs") == []
    dangling = tmp_path / "next.npy"
    dangling.symlink_to(tmp_path / "runs" / "run4.npy")  # a dangling link creates what it names
    assert run("compute", SAMPLES / "scooter.json", "-o", dangling).exit_code == 0
    assert dangling.is_symlink() and (tmp_path / "runs" / "run4.npy").is_file()


# A link planted by someone else in a shared folder (/tmp: sticky, world-writable): the kernel's
# fs.protected_symlinks refuses `> FILE` and open() through it; renaming onto its target got round
# that and replaced the file the link's owner chose. Making such a link takes root (lchown).
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")
STRANGER = 54321  # a uid that is neither ours nor the shared folder's owner


def shared_folder(tmp_path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    return shared


@needs_root
@pytest.mark.parametrize("as_folder", [False, True])
def test_a_link_someone_else_planted_in_a_shared_folder_is_never_followed(run, tmp_path, as_folder):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "bashrc.json").write_text("precious")
    shared = shared_folder(tmp_path)
    link = shared / ("dir" if as_folder else "out.json")
    link.symlink_to(victim if as_folder else victim / "bashrc.json")
    os.lchown(link, STRANGER, STRANGER)
    target = link / "bashrc.json" if as_folder else link
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", target), "--output: cannot write",
                 f'"{link}" is a symbolic link owned by someone else (uid {STRANGER}) in the shared folder',
                 "as the kernel's fs.protected_symlinks does")
    page = target.with_suffix(".html")
    if not as_folder:
        link.unlink()
        link.symlink_to(victim / "bashrc.html")
        os.lchown(link, STRANGER, STRANGER)
        page = link
    (victim / "bashrc.html").write_text("precious")
    assert_error(run("check", SAMPLES / "scooter.json", "--weights", "0.05,0.77,0.19", "--report", page),
                 "--report: cannot write", "is a symbolic link owned by someone else")
    assert (victim / "bashrc.json").read_text() == (victim / "bashrc.html").read_text() == "precious"
    assert temporaries(victim) == temporaries(shared) == []


@needs_root
def test_the_writer_itself_refuses_a_link_planted_after_the_check(tmp_path):
    """Between the check before any work and the write, someone plants the link: write_output
    (which attn capture -o calls too) looks again."""
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    link = shared_folder(tmp_path) / "out.json"
    link.symlink_to(victim)
    os.lchown(link, STRANGER, STRANGER)
    with pytest.raises(OutputError, match="is a symbolic link owned by someone else"):
        files.write_output(str(link), ".json", "{}")
    assert victim.read_text() == "precious"


@needs_root
def test_links_in_a_shared_folder_that_the_kernel_follows_are_followed(run, tmp_path):
    """Ours, or owned by the folder's owner (as the kernel allows): followed as before; so is a
    stranger's link in a folder that is not shared."""
    shared = shared_folder(tmp_path)
    for name, owner in (("ours.json", os.geteuid()), ("owners.json", None)):
        real = tmp_path / f"real-{name}"
        link = shared / name
        link.symlink_to(real)
        if owner is None:  # the folder's owner made it
            os.chown(shared, STRANGER, STRANGER)
            os.lchown(link, STRANGER, STRANGER)
        assert run("compute", SAMPLES / "scooter.json", "-o", link).exit_code == 0, name
        assert json.loads(real.read_text())["output"] and link.is_symlink()
    private = tmp_path / "private"
    private.mkdir()
    (private / "out.json").symlink_to(tmp_path / "real-private.json")
    os.lchown(private / "out.json", STRANGER, STRANGER)
    assert run("compute", SAMPLES / "scooter.json", "-o", private / "out.json").exit_code == 0


@pytest.mark.parametrize("as_input", ["FILE", "--q", "link", "hard link"])
def test_an_input_of_the_same_run_is_never_overwritten(run, tmp_path, as_input):
    problem = tmp_path / "p.npz"
    assert run("compute", SAMPLES / "scooter.json", "-o", problem).exit_code == 0
    q = tmp_path / "Q.npy"
    np.save(q, np.array([[0.0, 4.0]]))
    before = problem.read_bytes(), q.read_bytes()
    if as_input == "FILE":
        result = run("compute", problem, "-o", problem)
    else:
        given = q
        if as_input == "link":
            given = tmp_path / "alias.npy"
            given.symlink_to(q)
        elif as_input == "hard link":
            given = tmp_path / "hard.npy"
            os.link(q, given)
        result = run("compute", "--q", given, "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1", "-o", q)
    assert_error(result, "--output: ", "is an input of this run; refusing to overwrite it"
                 if as_input in ("FILE", "--q") else "is an input of this run (as ")
    assert (problem.read_bytes(), q.read_bytes()) == before


def test_a_problem_file_on_standard_input_is_never_overwritten(tmp_path):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps({"Q": [[0, 4]], "K": [[1, 0], [0, 1]], "V": [[1], [2]]}))
    before = problem.read_bytes()
    with open(problem) as stdin:
        done = attn("compute", "-o", problem, stdin=stdin)
    assert_process_error(done, f'"{problem}" is an input of this run (as standard input); refusing to overwrite it')
    assert problem.read_bytes() == before


def test_unwritable_targets_are_one_clear_error(run, tmp_path):
    scooter = SAMPLES / "scooter.json"
    (tmp_path / "folder.npz").mkdir()
    assert_error(run("compute", scooter, "-o", tmp_path / "folder.npz"),
                 "--output: cannot write", 'folder.npz": it is a folder; name a file in it')
    assert_error(run("compute", scooter, "-o", tmp_path / "no" / "x.npy"),
                 "--output: cannot write", "x.npy\": folder ", '/no" does not exist')
    (tmp_path / "loop.npz").symlink_to(tmp_path / "loop.npz")
    assert_error(run("compute", scooter, "-o", tmp_path / "loop.npz"),
                 "--output: cannot write", 'loop.npz": too many levels of symbolic links')
    (tmp_path / "file").write_text("")
    assert_error(run("compute", scooter, "-o", tmp_path / "file" / "x.json"),
                 "--output: cannot write", 'x.json": not a directory')
    assert temporaries(tmp_path) == []


def device(path, name):
    """A character device like /dev/NAME at `path`, reached through a link: as root, a node of
    our own in tmp_path (so that no bug can ever replace the machine's /dev/NAME); otherwise a
    link to /dev/NAME itself (which only root could replace)."""
    if os.geteuid() == 0:
        node = path.with_name(name + "-device")
        os.mknod(node, 0o666 | stat.S_IFCHR, os.stat(f"/dev/{name}").st_rdev)
        path.symlink_to(node)
    else:
        path.symlink_to(f"/dev/{name}")
    return Path(os.path.realpath(path))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_is_one_clear_error(run, tmp_path):
    node = device(tmp_path / "full.npy", "full")
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "full.npy"),
                 "--output: cannot write", 'full.npy": no space left on device')
    assert stat.S_ISCHR(os.stat(node).st_mode) and temporaries(tmp_path) == []


def test_devices_and_fifos_are_written_directly_never_replaced(run, tmp_path):
    node = device(tmp_path / "null.npz", "null")
    assert run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "null.npz").exit_code == 0
    assert stat.S_ISCHR(os.stat(node).st_mode) and temporaries(tmp_path) == []
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    assert run("compute", SAMPLES / "scooter.json", "-o", fifo).exit_code == 0
    assert json.loads(reader.communicate()[0])["output"] == run.json("compute", SAMPLES / "scooter.json")["output"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and temporaries(tmp_path) == []


@pytest.mark.parametrize("what", ["folder", "file"])
def test_read_only_folders_and_files_are_one_clear_error(tmp_path, what):
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "out.npz"
    if what == "file":
        target.write_bytes(b"old")
        target.chmod(0o444)
    else:
        folder.chmod(0o555)
    try:
        done = attn("compute", SCOOTER_FILE, "-o", target, preexec_fn=_no_root_powers)
    finally:
        folder.chmod(0o755)
    expected = "the file is read-only" if what == "file" else "permission denied in folder"
    assert_process_error(done, f'cannot write "{target}": {expected}')
    assert temporaries(folder) == [] and (what == "folder" or target.read_bytes() == b"old")


def test_a_write_past_the_file_size_limit_is_one_clear_error(tmp_path):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    target = tmp_path / "big.npz"
    done = attn("compute", SCOOTER_FILE, "-o", target, preexec_fn=limit)
    assert_process_error(done, f'cannot write "{target}": file too large (the file-size limit, ulimit -f, '
                               "is 2000 bytes)")
    assert os.listdir(tmp_path) == []


SIGNAL_MID_WRITE = """
import os, signal, sys
import numpy as np
real, signum = np.savez, getattr(signal, sys.argv.pop(1))
signal.signal(signum, signal.SIG_DFL)  # as started from a shell: under nohup SIGHUP comes ignored, and stays so
def savez(handle, **arrays):  # half the archive is on disk when the signal comes
    handle.write(b"PK" * 50_000)
    handle.flush()
    os.kill(os.getpid(), signum)
    real(handle, **arrays)
np.savez = savez
from attncli.cli import main
main()
"""


@pytest.mark.parametrize("name", fast_sample(["SIGTERM", "SIGHUP", "SIGUSR1", "SIGALRM"],  # SIGUSR1, SIGALRM: issue 17
                                             "SIGTERM", "SIGUSR1"))  # item 13; a real process each
def test_a_signal_during_the_write_leaves_no_temporary_file(tmp_path, name):
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")
    done = attn(name, "compute", SCOOTER_FILE, "-o", target, code=SIGNAL_MID_WRITE)
    assert done.returncode == -getattr(signal, name), (done.returncode, done.stderr)  # died of it
    assert done.stdout == done.stderr == ""
    assert os.listdir(tmp_path) == ["out.npz"] and target.read_bytes() == b"old"


def test_the_signal_handlers_remove_the_temporary_and_are_restored(tmp_path, monkeypatch):
    trace = attend(build_problem({"Q": [1.0], "K": [1.0], "V": [1.0]}))
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def savez(handle, **arrays):
        handle.write(b"partial")
        seen.extend(temporaries(tmp_path))
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # what Python runs when SIGTERM arrives

    monkeypatch.setattr(np, "savez", savez)
    with pytest.raises(files.Interrupted) as stopped:  # any case of suffix: temporaries are named alike
        files.write_output(str(tmp_path / "out.NPZ"), ".npz", lambda handle: arrays.save_npz(trace, handle))
    assert stopped.value.signum == signal.SIGTERM
    assert len(seen) == 1 and files.temporary().fullmatch(seen[0]) and seen[0].startswith(f".attn-tmp-{os.getpid()}-")
    assert os.listdir(tmp_path) == [] and signal.getsignal(signal.SIGTERM) == before


def test_stale_temporaries_of_dead_processes_are_removed(run, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is no longer running
    stale = tmp_path / f".attn-tmp-{dead.pid}-0123abcd.npz"
    live = tmp_path / f".attn-tmp-{os.getppid()}-89abcdef.json"  # pytest's parent is still running
    other = tmp_path / ".attn-tmp-notes.npz"  # not a name attn makes
    for path in (stale, live, other):
        path.write_bytes(b"partial")
    assert run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "out.npy").exit_code == 0
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, other.name, "out.npy"])


@pytest.mark.parametrize("suffix, options, flag", [
    (".npy", ["--stages", "weights"], "--stages"),
    (".npy", ["--explain"], "--explain"),
    (".npy", ["--round", "2"], "--round"),
    (".npz", ["--explain"], "--explain"),
    (".npz", ["--round", "2"], "--round"),
    (".npz", ["--heatmap"], "--heatmap"),
])
def test_a_binary_file_refuses_what_it_cannot_hold(run, tmp_path, suffix, options, flag):
    # Found by a user trial: -o x.npy --stages weights wrote the output, not the weights, exit 0.
    target = tmp_path / f"out{suffix}"
    result = run("compute", SAMPLES / "scooter.json", "-o", target, *options)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {flag}: an {suffix} file holds") and "would be lost" in result.stderr
    assert not target.exists()


def test_a_binary_file_takes_what_it_holds(run, tmp_path):
    assert run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "a.npy", "--stages", "output").exit_code == 0
    assert run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "b.npz", "--stages", "weights").exit_code == 0


QKV = ("--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1,0;0,1")


def test_npy_with_heatmap_in_stages_names_heatmap_alone(run, problem_file, tmp_path):
    """Mutation: _binary_holds counts `heatmap` in --stages as a stage an .npy drops, naming
    --stages beside --heatmap."""
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]]})
    result = run("compute", path, "--stages", "output,heatmap", "-o", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert "--heatmap would be lost" in result.stderr and "--stages" not in result.stderr


def test_round_0_is_refused_beside_an_npy_file(run, tmp_path):
    """Mutation: _binary_holds tests `--round` by truth, so --round 0 (a value, not off) slips by
    and the .npy silently drops it."""
    result = run("compute", *QKV, "--round", "0", "-o", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --round: ") and "would be lost" in result.stderr
    assert not (tmp_path / "x.npy").exists()


def test_output_over_the_do_file_is_refused(run, tmp_path):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): -o never
    writes over an input: the dO file."""
    d_o = tmp_path / "dO.json"
    d_o.write_text("[[1, 1]]")
    assert_error(run("compute", str(SAMPLES / "scooter.json"), "--do", str(d_o), "-o", str(d_o)),
                 "is an input of this run", "refusing to overwrite it")
    assert d_o.read_text() == "[[1, 1]]"


@pytest.mark.parametrize("option, text", [("--mask", "true,false\n"), ("--bias", "0,-inf\n"),
                                          ("--q", "[[1, 0]]"), ("--wo", "[[1]]")])
def test_output_over_any_matrix_file_is_refused(run, tmp_path, option, text):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): -o never
    writes over an input: any matrix file."""
    path = tmp_path / ("m.csv" if option in ("--mask", "--bias") else "m.json")
    path.write_text(text)
    args = {"--q": ["--k", "1,0;0,1", "--v", "1;2"], "--wo": ["--q", "1,0", "--k", "1,0;0,1", "--v", "1;2"]}
    base = args.get(option, ["--q", "1,0", "--k", "1,0;0,1", "--v", "1;2"])
    assert_error(run("compute", *base, option, str(path), "-o", str(path)), "is an input of this run")
    assert path.read_text() == text
