"""Issue 16, "done when": a class of 30 realistic answer files marked in one run, with a gradebook
and a Gradescope results.json for every file, each mark the one a careful teacher gives (written
below per file, with the reasoning), and the same marks through the Python API."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from attncli import check
from tests.conftest import ROOT, SAMPLES

# The exercise: 3 tokens, d_k = 2, causal. Exact values by hand (numpy, not attncli).
Q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
V = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
PROBLEM = {"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "mask": "causal"}
CAUSAL = np.tril(np.ones((3, 3), bool))
REQUIRE = "scores,scaled,masked,weights,output"
CELLS = 9 + 9 + 9 + 9 + 6  # 42


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def stages(scale=1 / math.sqrt(2), masked_with=-np.inf, mask=True, rounded=None):
    """Every stage, optionally with a slip, each stage rounded to `rounded` decimals and carried."""
    r = (lambda x: np.round(x, rounded)) if rounded is not None else (lambda x: x)
    scores = r(Q @ K.T)
    scaled = r(scores * scale)
    masked = r(np.where(CAUSAL | (not mask), scaled, masked_with))
    weights = r(softmax(masked))
    return {"scores": scores, "scaled": scaled, "masked": masked, "weights": weights, "output": r(weights @ V)}


EXACT = stages()


class Fixed(float):
    """A number written with a fixed number of decimals (0.50, not 0.5), as learners write them."""

    def __new__(cls, value, decimals):
        number = super().__new__(cls, round(value, decimals))
        number.text = f"{value:.{decimals}f}"
        return number


def to_json(content) -> str:
    """JSON with every Fixed number as written."""
    def encode(x):
        if isinstance(x, Fixed):
            return f"@{x.text}@"
        if isinstance(x, dict):
            return {k: encode(v) for k, v in x.items()}
        return [encode(v) for v in x] if isinstance(x, list) else x
    return json.dumps(encode(content)).replace('"@', "").replace('@"', "")


def written(values, decimals=4):
    """Cells as a learner writes them: fixed decimals, −∞ as "-inf"."""
    return [[("-inf" if np.isneginf(x) else Fixed(float(x), decimals)) for x in row] for row in values]


def doc(values, decimals=4):
    return {name: written(v, decimals) for name, v in values.items()}


def wrong_cells(given, stage, decimals=4):
    """How many cells of `given` are not the exact value at those decimals (a teacher's count)."""
    a, b = np.asarray(given, float), EXACT[stage]
    same = (np.isneginf(a) & np.isneginf(b)) | (np.isfinite(a) & np.isfinite(b) & (np.abs(a - np.round(b, decimals))
                                                                                    <= 1.01 * 10.0 ** -decimals))
    return int((~same).sum())


def class_files():
    """(file name, content, expected (right, max) or None when it cannot be marked, diagnoses)."""
    right = doc(EXACT)
    files = []

    def add(name, content, mark, diagnoses=()):
        files.append((name, content, mark, tuple(diagnoses)))

    add("01_correct.json", right, (42, 42))
    add("02_textbook_carried.json", doc(stages(rounded=4)), (42, 42))  # each stage rounded, carried on
    add("03_two_decimals.json", doc(EXACT, 2), (42, 42))
    add("04_three_decimals.json", doc(EXACT, 3), (42, 42))
    # 1 decimal: only the cells whose exact value has at most 1 decimal (0, 1, 2, −∞) earn the mark
    exact_at_one = sum(int(((np.round(v, 1) == v) | np.isneginf(v)).sum()) for v in EXACT.values())
    add("05_one_decimal.json", doc(EXACT, 1), (exact_at_one, 42))
    # no_scale: the scaled stage is the scores (wrong where a score is not 0); the rest carried on
    no_scale = stages(scale=1)
    add("06_no_scale.json", doc(no_scale), (42 - wrong_cells(no_scale["scaled"], "scaled"), 42), ["scaled: no_scale"])
    by_dk = stages(scale=0.5)
    add("07_scale_by_dk.json", doc(by_dk), (42 - wrong_cells(by_dk["scaled"], "scaled"), 42), ["scaled: scale_by_dk"])
    # mask ignored: the 3 blocked cells of masked are wrong; weights and output follow (carried)
    add("08_mask_ignored.json", doc(stages(mask=False)), (39, 42), ["masked: mask_ignored"])
    add("09_mask_zero.json", doc(stages(masked_with=0.0)), (39, 42), ["masked: mask_zero"])
    # weights as percentages: every nonzero weight wrong (6 of 9); the output is right
    percent = right | {"weights": written(EXACT["weights"] * 100, 2)}
    add("10_percent.json", percent, (36, 42), ["weights: percent"])
    # weights written transposed: the whole stage is wrong, diagnosed; the output is still right
    # weights written transposed: the diagonal is right, the 6 other cells wrong, diagnosed; output right
    add("11_transposed.json", right | {"weights": written(EXACT["weights"].T)}, (36, 42), ["weights: transposed"])
    slip = [row[:] for row in right["output"]]
    slip[2][1] = Fixed(slip[2][1] + 0.1, 4)
    add("12_output_slip.json", right | {"output": slip}, (41, 42))  # one cell wrong, nothing to diagnose
    add("13_blank.json", {}, None)
    add("14_partial.json", {"weights": right["weights"]}, (9, 42))  # 33 cells required but missing
    add("15_syntax_error.json", '{"scores": [[1, 0, 1]\n [0, 1, 1]]}', None)
    csv_text = "".join(f"{name}\n" + "".join(",".join(getattr(x, "text", str(x)) for x in row) + "\n" for row in rows)
                       for name, rows in right.items())
    add("16_sheet.csv", csv_text, (42, 42))
    add("17_metadata.json", {"name": "Ada L.", "student_id": "s17", "comment": "hard!"} | right, (42, 42))
    aliases = {k: v for k, v in right.items() if k not in ("masked", "weights")}
    aliases |= {"logits": right["masked"], "attention_weights": right["weights"]}
    add("18_aliases.json", aliases, (42, 42))
    spellings = [[row[0], "−∞", None] for row in right["masked"][:1]] + [[*right["masked"][1][:2], -1e9]] \
        + [right["masked"][2]]
    add("19_minus_infinity_spellings.json", right | {"masked": spellings}, (42, 42))
    add("20_empty_tiles.json", {"tiles": []}, None)
    add("21_empty_file.json", "", None)
    # A student who set their own problem: refused against the class's, 0 with the reason
    add("22_own_problem.json", {"Q": [[0, 0]], "K": [[0, 0]], "V": [[0, 0]], "weights": [[1]]}, None)
    add("23_unknown_key.json", right | {"workings": "see paper"}, (42, 42))
    add("24_integer_scores.json", right | {"scores": EXACT["scores"].astype(int).tolist()}, (42, 42))
    # a wrong value written with 1 decimal is wrong, not imprecise: 0.4 for 0.3302 (0.3)
    one = [row[:] for row in right["weights"]]
    one[2][0] = Fixed(0.4, 1)
    add("25_wrong_one_decimal.json", right | {"weights": one, "output": written(np.array(one) @ V)}, (41, 42))
    add("26_strings.json", {k: [[getattr(x, "text", x) for x in row] for row in v] for k, v in right.items()}, (42, 42))
    add("27_bare_inf.json", to_json(right).replace('"-inf"', "-Infinity"), (42, 42))
    add("28_heads_form.json", {"heads": [right]}, (42, 42))
    add("29_only_output.json", {"output": right["output"]}, (6, 42))
    add("30_two_decimals_carried.json", doc(stages(rounded=2), 2), (42, 42))
    return files


@pytest.fixture(scope="module")
def marked_class(tmp_path_factory):
    from typer.testing import CliRunner

    from attncli.cli import app

    folder = tmp_path_factory.mktemp("class")
    (folder / "problem.json").write_text(json.dumps(PROBLEM))
    files = class_files()
    for name, content, _, _ in files:
        (folder / name).write_text(content if isinstance(content, str) else to_json(content))
    paths = [str(folder / name) for name, _, _, _ in files]
    runner = CliRunner()
    args = ["check", *paths, "--problem", str(folder / "problem.json"), "--require", REQUIRE]
    book = runner.invoke(app, [*args, "--format", "csv"])
    scope = runner.invoke(app, [*args, "--format", "gradescope"])
    return folder, files, book, scope


def test_thirty_files_marked_in_one_run_as_a_teacher_would(marked_class):
    folder, files, book, _ = marked_class
    assert book.exit_code == 2  # some files could not be read (the syntax error); the class went on
    rows = {row[0]: row for row in __import__("csv").reader(book.stdout.splitlines()[1:])}
    assert len(rows) == 30
    header = book.stdout.splitlines()[0].split(",")
    for name, _, mark, diagnoses in files:
        row = rows[str(folder / name)]
        got = (float(row[1]), float(row[2]))
        expected = mark if mark is not None else (0, CELLS)
        assert got == expected, (name, got, expected, row[-1])
        found = tuple(d for d in row[header.index("diagnoses")].split("; ") if d)
        assert set(diagnoses) <= set(found), (name, found)
    notes = {name: rows[str(folder / name)][-1] for name, *_ in files}
    assert "line 2, column 2" in notes["15_syntax_error.json"]
    assert notes["17_metadata.json"] == "name: Ada L.; student_id: s17; comment: hard!"
    assert notes["21_empty_file.json"].startswith("empty file")
    assert "their own problem" in notes["22_own_problem.json"]
    assert 'unknown key "workings" not marked' in notes["23_unknown_key.json"]


def test_gradescope_has_results_for_every_file(marked_class):
    folder, files, _, scope = marked_class
    results = json.loads(scope.stdout)["files"]
    assert [r["file"] for r in results] == [str(folder / name) for name, *_ in files]
    for (name, _, mark, _), r in zip(files, results):
        assert r["results"]["score"] == (mark[0] if mark else 0), name


def test_the_api_gives_the_same_marks(marked_class):
    folder, files, _, _ = marked_class
    for name, _, mark, _ in files:
        if mark is None or name == "23_unknown_key.json":  # the API, like a single file, refuses unknown keys
            continue
        marks = check(folder / name, folder / "problem.json", require=REQUIRE)
        assert marks.score == mark, name


# A named pipe among a class's files (answers/*): open() waited for a writer forever, so the whole
# class never finished; other special files were refused per file. Run as a process, with a timeout.
def attn_within(args, cwd, timeout=60, **more):
    return subprocess.run([sys.executable, "-m", "attncli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, **more)


def test_a_fifo_among_a_classs_files_is_refused_for_itself_and_never_blocks(tmp_path):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps({"weights": [[0.0454, 0.7679, 0.1867]]}))
    for name in ("fifo.json", "fifo.npz", "fifo.csv"):
        os.mkfifo(tmp_path / name)
    done = attn_within(["check", "a.json", "fifo.json", "fifo.npz", "fifo.csv", "b.json", "--problem",
                        str(SAMPLES / "scooter.json"), "-f", "json"], tmp_path)
    files = {f["file"]: f for f in json.loads(done.stdout)["files"]}
    assert done.returncode == 2 and files["a.json"]["right"] == files["b.json"]["right"] == 3
    for name in ("fifo.json", "fifo.npz", "fifo.csv"):
        assert files[name]["error"] == "is a named pipe, not a regular file; each file of a class is read from a regular file"
    assert done.stderr.count("error: fifo.") == 3 and done.stderr.count("\n") == 3
    alone = attn_within(["check", "fifo.npz", "--problem", str(SAMPLES / "scooter.json")], tmp_path)  # its zip index
    assert alone.stderr == "error: fifo.npz: not a regular file; .npz input is read from a file\n"


def test_a_pipe_that_is_written_to_is_still_read(tmp_path):
    """Process substitution (`--q <(printf '1,2,3\\n')`) is a pipe as /dev/fd/N: still read."""
    read, write = os.pipe()
    os.write(write, b"1,2,3\n")
    os.close(write)
    try:
        done = attn_within(["compute", "--q", f"/dev/fd/{read}", "--k", "1,0,0;0,1,0", "--v", "1;2", "-f", "json"],
                           tmp_path, pass_fds=(read,))
    finally:
        os.close(read)
    assert done.returncode == 0 and json.loads(done.stdout)["Q"] == [[1.0, 2.0, 3.0]]
