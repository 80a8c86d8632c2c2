"""Two classes of 30 answer files, each marked in one run as a careful teacher marks them (the marks
written below per file, with the reasoning), through the command line and through the Python API:
issue 16's, made here, and issue 29's, hand-made files in tests/classes/causal/."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path, PurePath

import numpy as np
import pytest

from attncli import InputError, check
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
    # 1 decimal: too few decimals cost 1 point once per stage written so (issue 29): scaled, weights and
    # output; the scores are whole numbers (exact) and masked is the learner's own scaled, masked (carried)
    add("05_one_decimal.json", doc(EXACT, 1), (42 - 3, 42))
    # no_scale: the scaled stage is the scores (wrong where a score is not 0); the rest carried on
    no_scale = stages(scale=1)
    add("06_no_scale.json", doc(no_scale), (42 - wrong_cells(no_scale["scaled"], "scaled"), 42), ["scaled: no_scale"])
    by_dk = stages(scale=0.5)
    add("07_scale_by_dk.json", doc(by_dk), (42 - wrong_cells(by_dk["scaled"], "scaled"), 42), ["scaled: scale_by_dk"])
    # mask ignored: the 3 blocked cells of masked are wrong; weights and output follow (carried)
    add("08_mask_ignored.json", doc(stages(mask=False)), (39, 42), ["masked: mask_ignored"])
    add("09_mask_zero.json", doc(stages(masked_with=0.0)), (39, 42), ["masked: mask_zero"])
    # weights as percentages, or transposed: half the stage (9 points) is lost, whatever cells happen to
    # match (issue 29: percent=0.5, transposed=0.5 by default); the output is right
    percent = right | {"weights": written(EXACT["weights"] * 100, 2)}
    add("10_percent.json", percent, (37.5, 42), ["weights: percent"])
    add("11_transposed.json", right | {"weights": written(EXACT["weights"].T)}, (37.5, 42), ["weights: transposed"])
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
        if mark is None:
            continue
        marks = check(folder / name, folder / "problem.json", require=REQUIRE)  # unknown keys: notes, as in a class
        assert marks.points == mark, name


# Issue 29, "done when": a second class of 30 hand-made files, tests/classes/causal/ (written once by
# tests/classes/make_causal.py, numpy only), marked by hand as a careful teacher marks a sheet with
# this rubric: scores 3, scaled 3, masked 3, weights 6, output 5 (20 points; a stage's points shared
# by its cells); too few decimals −1 once per stage; a stage written as percentages or transposed
# half its points; a stage right from the learner's own earlier numbers earns them.
CLASS = Path(__file__).parent / "classes" / "causal"
RUBRIC = "scores=3,scaled=3,masked=3,weights=6,output=5"
TEACHER = {
    "01_ada.json": 20,  # every stage right, 4 decimals
    "02_ben.json": 20,  # 2 decimals, as asked
    "03_cai.json": 20,  # each stage rounded to 4 decimals and carried on: the textbook's method
    "04_dee.json": 20 - 3 * 7 / 9,  # scaled = scores: 7 of 9 cells wrong (the two 0s right); the rest follows
    "05_eve.json": 20 - 3 * 3 / 9,  # no mask: the 3 blocked cells of masked wrong; weights, output follow
    "06_fay.json": 20 - 3 * 3 / 9,  # 0 where −∞ belongs: the same 3 cells
    "07_gus.json": 20 - 6 / 2,  # weights as percentages: half the weights' 6 points; the output is right
    "08_hal.json": 20 - 6 / 2,  # weights transposed: half of 6
    "09_ivy.json": 20 - 2,  # one decimal: −1 on scaled, −1 on weights; masked is her scaled masked; the
    #                         output (0.2, 0.8; 0.8, 0.2) is exactly her one-decimal weights times V
    "10_jon.json": 20 - 1,  # 1/√2 rounded to 0.71: the scaled scores off in the third decimal, −1 once
    "11_kim.json": 20 - 6 * 6 / 9,  # e^x never divided by the sum: only the 3 blocked 0s right; output follows
    "12_lea.json": 20 - 5 * 4 / 6,  # Σ V of the keys seen: row 1 (1, 0) happens to be right, 4 cells wrong
    "13_max.json": 20 - 5 * 4 / 6,  # K for V: 0 and 0.8044 happen to be right, 4 cells wrong
    "14_ned.json": 20,  # masked with each row's max subtracted: the same weights, accepted
    "15_oli.json": 20,  # scaled_scores, attention_weights, context: the stages by other names
    "16_pam.csv": 20,  # the worksheet's grids in a spreadsheet, labels and all, blanks for −∞
    "17_quinn.json": 6 + 5,  # only weights and output, both right
    "18_rae.json": 0,  # an empty file
    "19_sam.json": 20,  # right, with a trailing comma (read with --lenient-json)
    "20_tia.json": 20 - 3 * 7 / 9,  # divided by d_k: 7 of 9 scaled cells wrong; the rest follows
    "21_uma.json": 20 - 3 / 9,  # one score miscomputed (2 for 1): one cell; everything after follows from it
    "22_vic.json": 20 - 6 * 6 / 9,  # softmax down the columns: only the 3 blocked 0s right; output follows
    "23_wes.json": 20,  # 2 decimals, −∞ written as -1e9
    "24_xia.json": 20 - 6 * 5 / 9,  # argmax weights (1, 0, 0 / 0, 1, 0 / 0.5, 0.5, 0): 4 of 9 right; output follows
    "25_yan.json": 20 - 5 / 2,  # output transposed: half of 5
    "26_zoe.json": 20 - 1,  # weights to 1 decimal (−1); the output is right from those weights
    "27_abe.json": 20 - 1,  # weights from masked rounded to 1 decimal (not shown): −1 once; output follows
    "28_bea.json": 20,  # right; a name and a "workings" key beside the answers
    "29_cy.json": 20,  # 2 decimals as strings ("0.80"), in the heads form attn compute writes
    "30_dot.json": 20 - 3,  # the mask inverted: all 9 masked cells wrong; weights and output follow from it
}


def test_a_class_of_thirty_marked_as_a_teacher_marks_it_on_the_command_line(run):
    files = sorted(str(CLASS / name) for name in TEACHER)
    result = run("check", *files, "-p", CLASS / "problem.json", "--points", RUBRIC, "--lenient-json", "-f", "csv")
    rows = {PurePath(row[0]).name: row for row in __import__("csv").reader(result.stdout.splitlines()[1:])}
    assert len(rows) == 30
    for name, mark in TEACHER.items():
        assert float(rows[name][2]) == 20, name
        assert abs(float(rows[name][1]) - mark) <= 1, (name, rows[name][1], mark, rows[name][-2:])
    scope = json.loads(run("check", *files, "-p", CLASS / "problem.json", "--points", RUBRIC, "--lenient-json",
                           "-f", "gradescope", "--max-score", "10").stdout)
    for entry in scope["files"]:
        mark = TEACHER[PurePath(entry["file"]).name]
        assert abs(entry["results"]["score"] - mark / 2) <= 0.5, entry["file"]


def test_a_class_of_thirty_marked_as_a_teacher_marks_it_through_the_api():
    for name, mark in TEACHER.items():
        if name == "18_rae.json":
            with pytest.raises(InputError):
                check(CLASS / name, CLASS / "problem.json", points=RUBRIC, lenient_json=True)
            continue
        got, most = check(CLASS / name, CLASS / "problem.json", points=RUBRIC, lenient_json=True).points
        assert most == 20 and abs(got - mark) <= 1, (name, got, mark)


def test_each_slip_of_the_class_is_named():
    named = {name: {d for m in check(CLASS / name, CLASS / "problem.json", lenient_json=True).values()
                    for d in m.diagnosis}
             for name in TEACHER if name != "18_rae.json"}
    assert named["04_dee.json"] == {"no_scale"} and named["20_tia.json"] == {"scale_by_dk"}
    assert named["11_kim.json"] == {"not_normalised"} and named["12_lea.json"] == {"unweighted_sum"}
    assert named["13_max.json"] == {"keys_as_values"} and named["24_xia.json"] == {"argmax"}
    assert named["30_dot.json"] == {"mask_inverted"} and named["22_vic.json"] == {"softmax_wrong_axis"}
    assert named["10_jon.json"] == named["27_abe.json"] == {"rounded_early"}
    assert named["07_gus.json"] == {"percent"} and named["08_hal.json"] == named["25_yan.json"] == {"transposed"}
    assert named["14_ned.json"] == set() and named["09_ivy.json"] == set()


def test_a_file_the_lenient_reading_would_read_says_so(run):
    result = run("check", CLASS / "19_sam.json", "-p", CLASS / "problem.json")
    assert result.exit_code == 2 and result.stderr.endswith("; it reads with --lenient-json (trailing commas)\n")
    with pytest.raises(InputError, match=r"it reads with lenient_json=True \(trailing commas\)"):
        check(CLASS / "19_sam.json", CLASS / "problem.json")



def test_the_teachers_class_exits_as_its_guide_says(run, tmp_path, monkeypatch):
    """docs/howto/teachers.md's class (Cy's file is not JSON) exits 2, as its sentence says, and
    writes its marks page."""
    guide = (SAMPLES.parent / "docs" / "howto" / "teachers.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name, text in re.findall(r"<!-- file: (answers/\w+\.json) -->\n```json\n(.*?)```", guide, re.S):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    key = run("exercise", "--seed", "5", "--queries", "2", "--keys", "3", "--answers")
    (tmp_path / "key.json").write_text(key.stdout, encoding="utf-8")
    files = sorted(str(path.relative_to(tmp_path)) for path in (tmp_path / "answers").iterdir())
    result = run("check", *files, "--problem", "key.json", "-o", "report.html")
    said = re.search(r"Expecting property name enclosed in double quotes[^\n]*\n```\n\nThe exit code is (\d)", guide)
    assert said and result.exit_code == int(said[1]) == 2, (said, result.exit_code)
    assert "answers/bob.json" in (tmp_path / "report.html").read_text(encoding="utf-8")


SCOOTER_FILE = SAMPLES / "scooter.json"


GOOD_WEIGHTS = {"weights": [0.05, 0.77, 0.19]}


def test_an_empty_tile_list_is_a_blank_file_and_the_class_goes_on(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): one hostile file
    never stops a class: an empty tile list is a blank file."""
    good, hostile = problem_file(GOOD_WEIGHTS, "good.json"), problem_file({"tiles": []}, "tiles.json")
    for fmt in ("csv", "gradescope", "json", "table"):
        result = run("check", good, hostile, "--problem", SCOOTER_FILE, "--format", fmt)
        assert result.exit_code == 1, (fmt, result.stdout, result.stderr)
    rows = run("check", good, hostile, "--problem", SCOOTER_FILE, "--format", "csv").stdout.splitlines()
    assert rows[1].startswith(f"{good},3,3,100.0") and rows[2].startswith(f"{hostile},0,3,0.0")
    tests = json.loads(run("check", good, hostile, "--problem", SCOOTER_FILE, "-f", "gradescope").stdout)
    assert [f["results"]["score"] for f in tests["files"]] == [3, 0]


def test_a_file_no_rule_foresaw_scores_0_with_its_reason(run, problem_file, monkeypatch):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): one hostile file
    never stops a class: a file no rule foresaw scores 0 with its reason."""
    from attncli.commands import check_run

    real = check_run.mark_document

    def fragile(trace, doc, **settings):
        if "boom" in doc:
            raise ZeroDivisionError("a slip in the marker")
        return real(trace, doc, **settings)

    monkeypatch.setattr(check_run, "mark_document", fragile)
    good, bad = problem_file(GOOD_WEIGHTS, "good.json"), problem_file(GOOD_WEIGHTS | {"boom": 1}, "bad.json")
    result = run("check", good, bad, "--problem", SCOOTER_FILE, "--format", "csv")
    assert result.exit_code == 2
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{good},3,3,100.0")
    assert rows[2].startswith(f"{bad},0,3,0.0") and "ZeroDivisionError: a slip in the marker" in rows[2]


SELF = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


def test_a_file_setting_its_own_easy_problem_is_flagged_in_a_class(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): a student's file
    setting its own easy problem is flagged in a class."""
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(3)]
    cheat = problem_file({"Q": [[0]], "K": [[0]], "V": [[0]], "weights": [[1]], "output": [[0]]}, "cheat.json")
    result = run("check", *files, cheat, "--format", "csv")
    row = result.stdout.splitlines()[4]
    assert row.startswith(f"{cheat},2,2,100.0") and "its problem differs from the class's (3 of 4 files share one)" in row
    assert f"warning: {cheat}: its problem differs" in result.stderr
    with_problem = run("check", *files, cheat, "--problem", SCOOTER_FILE, "--format", "csv").stdout.splitlines()[4]
    assert with_problem.startswith(f"{cheat},0,") and "hold their own problem" in with_problem


def test_a_files_own_problem_is_size_capped(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): a file's own
    problem is size-capped."""
    big = problem_file({"Q": [[0]] * 9000, "K": [[0]] * 9000, "V": [[0]] * 9000, "weights": [[1]]}, "big.json")
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(2)]
    result = run("check", *files, big, "--format", "csv")
    row = result.stdout.splitlines()[3]
    assert row.startswith(f"{big},0,") and "its own problem has 81,000,000 scores" in row


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


@pytest.mark.parametrize("how", [[], ["-f", "csv"], ["-f", "gradescope"], ["-f", "json"]])
@pytest.mark.parametrize("problem_option", [[], ["--problem"]])
def test_a_single_answers_file_given_as_a_pipe_is_read_once(run, how, problem_option):
    """`attn check <(echo '{…}') problem.json`, as check.md shows: the pipe is read once however
    often check looks at it (to tell it from the problem, to check its shapes, to mark it), in every
    format; only a class's files are refused as pipes. In-process: the pipe is this process's, read
    as /dev/fd/N as a shell's process substitution is (a real process each cost 0.5 s of CPU)."""
    read, write = os.pipe()
    os.write(write, json.dumps({"output": [0.2775, 1.3491]}).encode())
    os.close(write)
    try:
        done = run("check", f"/dev/fd/{read}", *problem_option, SAMPLES / "scooter.json", *how)
    finally:
        os.close(read)
    assert done.exit_code == 0 and done.stderr == "", done.stderr  # 0: all correct (an empty or refused file is 2)
    assert "named pipe" not in done.stdout and "empty file" not in done.stdout


def test_a_class_files_shapes_are_checked_before_the_problem_is_computed(run, problem_file, monkeypatch):
    """`attn check w1.json w2.json -p big.npz -f csv` computed the whole problem (381 MB at 1500²)
    before saying the answers' shape was wrong: now each file is checked first, a file of the wrong
    shape scores 0 with its error and the others are marked; with none left, nothing is computed."""
    from attncli.commands import check_run

    square = {"weights": [[0.5, 0.5], [0.5, 0.5]]}
    w1, w2 = problem_file(square, "w1.json"), problem_file(square, "w2.json")
    monkeypatch.setattr(check_run.attention, "attend", lambda *a, **k: pytest.fail("computed first"))
    for fmt in ("csv", "gradescope", "json", "table", "html"):
        result = run("check", w1, w2, "--problem", SCOOTER_FILE, "--format", fmt)
        assert result.exit_code == 2, (fmt, result.stdout, result.stderr)
        assert f"{w1}: weights has shape (2 × 2); expected (1 × 3)" in result.stderr
    rows = run("check", w1, w2, "--problem", SCOOTER_FILE, "--format", "csv").stdout.splitlines()
    assert rows[1].startswith(f"{w1},0,") and "weights has shape (2 × 2)" in rows[1] and rows[2].startswith(f"{w2},0,")
    monkeypatch.undo()
    good = problem_file(GOOD_WEIGHTS, "good.json")
    result = run("check", good, w1, "--problem", SCOOTER_FILE, "--format", "csv")
    assert result.exit_code == 2 and result.stderr.count("error:") == 1
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{good},3,3,100.0") and rows[2].startswith(f"{w1},0,3,0.0")
