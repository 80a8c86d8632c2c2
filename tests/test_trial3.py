"""Issue 16, the third user trial of `attn check` (lane trial3): a file's own echoes checked, .npz
per-head answers marked, CSV keys sorted as JSON's, decimal-comma cells refused. One test (or a
few) per item, in the issue's order."""

import json

import numpy as np
from conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"


def _computed(run):
    return json.loads(run("compute", SCOOTER, "-f", "json").stdout)


# 1. a compute output whose echoes or per-head Q/K/V contradict its problem is refused, not 11/11
def test_tampered_compute_echoes_are_refused(run, problem_file):
    good = _computed(run)
    assert run("check", problem_file(good, "good.json"), "-p", SCOOTER).exit_code == 0
    tampers = {"K": lambda d: d["heads"][0]["K"][0].__setitem__(0, 9.0),
               "Q": lambda d: d["heads"][0]["Q"][0].__setitem__(0, 9.0),
               "d_k": lambda d: d.__setitem__("d_k", 3), "d_v": lambda d: d.__setitem__("d_v", 5),
               "mask_rule": lambda d: d.__setitem__("mask_rule", "causal"),
               "attncli": lambda d: d.__setitem__("attncli", 99)}
    for name, tamper in tampers.items():
        doc = json.loads(json.dumps(good))
        tamper(doc)
        path = problem_file(doc, f"{name}.json")
        for args in ((path, "-p", SCOOTER), (path,)):
            result = run("check", *args)
            assert result.exit_code == 2 and name in result.stderr and result.stdout == "", (name, args)
    # in a class, that file scores 0 with the reason; the others are marked
    bad = problem_file(dict(good, d_k=3), "bad.json")
    result = run("check", problem_file(good, "a.json"), bad, "-p", SCOOTER, "-f", "csv")
    rows = result.stdout.splitlines()
    assert result.exit_code == 2 and rows[1].split(",")[1:3] == ["11", "11"]
    assert rows[2].split(",")[1:3] == ["0", "11"] and "d_k is 3" in rows[2]


# 2. an .npz's heads/<stage> members are the per-head answers, marked as the JSON's heads are
def _npz(run, tmp_path, name, change=None, only=None):
    path = tmp_path / "c.npz"
    if not path.exists():
        assert run("compute", SCOOTER, "-o", path).exit_code == 0
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    if change:
        arrays = change(arrays)
    if only:
        arrays = {key: arrays[key] for key in only}
    out = tmp_path / name
    np.savez(out, **arrays)
    return out


def test_npz_heads_members_are_marked(run, tmp_path):
    good = _npz(run, tmp_path, "good.npz")
    result = run("check", good, "-p", SCOOTER, "-f", "csv")
    assert result.exit_code == 0 and result.stdout.splitlines()[1].split(",")[1:3] == ["11", "11"]
    half = _npz(run, tmp_path, "half.npz", lambda a: a | {"heads/weights": np.full_like(a["heads/weights"], 0.5)})
    result = run("check", half, "-p", SCOOTER, "-f", "csv")
    assert result.exit_code == 1 and result.stdout.splitlines()[1].split(",")[1:3] == ["8", "11"]
    nan = _npz(run, tmp_path, "nan.npz", lambda a: a | {"heads/weights": np.full_like(a["heads/weights"], np.nan)})
    result = run("check", nan, "-p", SCOOTER)
    assert result.exit_code == 2 and "heads[0].weights[0][0] is nan" in result.stderr
    only = _npz(run, tmp_path, "only.npz", only=("heads/weights",))
    result = run("check", only, "-p", SCOOTER, "-f", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["stages"]["weights"]["right"] == 3
    for files in ((only, SCOOTER), (SCOOTER, only)):  # told from the problem by its heads/ members
        assert run("check", *files, "-f", "csv").stdout.splitlines()[1].split(",")[1:3] == ["3", "3"], files
    tampered = _npz(run, tmp_path, "k.npz", lambda a: a | {"heads/K": a["heads/K"] + 1})
    result = run("check", tampered, "-p", SCOOTER)
    assert result.exit_code == 2 and "heads[0].K" in result.stderr


def test_npz_heads_member_headers_are_checked_before_reading(run, tmp_path):
    two = _npz(run, tmp_path, "two.npz", lambda a: a | {"heads/weights": np.zeros((2, 1, 3))})
    result = run("check", two, "-p", SCOOTER)
    assert result.exit_code == 2 and "heads/weights is declared float64 (2, 1, 3)" in result.stderr
    big = _npz(run, tmp_path, "big.npz", lambda a: a | {"heads/weights": np.zeros((1, 1, 500))})
    assert "heads/weights is declared" in run("check", big, "-p", SCOOTER).stderr


# 3. CSV answers sort their keys as JSON's do: aliases read with a note, metadata set aside
def test_csv_blocks_read_aliases_and_metadata_as_json_does(run, problem_file):
    weights = "0.0454,0.7679,0.1867\n"
    alias = problem_file("attention_weights\n" + weights, "alias.csv")
    doc = json.loads(run("check", alias, "-p", SCOOTER, "-f", "json").stdout)
    assert doc["all_correct"] and doc["stages"]["weights"]["notes"] == ['read "attention_weights" as weights']
    meta = problem_file("name,Ada\nweights\n" + weights + "student_id,12345\n", "meta.csv")
    result = run("check", meta, "-p", SCOOTER)
    assert result.exit_code == 0, result.stderr
    row = run("check", meta, meta, "-p", SCOOTER, "-f", "csv").stdout.splitlines()[1]
    assert row.endswith(",name: Ada; student_id: 12345")
    other_case = problem_file("weights\n" + weights + "Output\n0.2775,1.3491\n", "case.csv")
    doc = json.loads(run("check", other_case, "-p", SCOOTER, "-f", "json").stdout)
    assert doc["all_correct"] and doc["stages"]["output"]["notes"] == ['read "Output" as output']
    both = problem_file("Weights\n" + weights + "weights\n" + weights, "both.csv")
    assert "keep one" in run("check", both, "-p", SCOOTER).stderr
    # a block's first row is still a header, even when its corner is a metadata word (pandas' index name)
    header = problem_file("heads[0].probs\nid,mechanic,scooter,petrol\nit," + weights, "header.csv")
    assert run("check", header, "-p", SCOOTER).exit_code == 0


# 4. a decimal-comma cell in answers CSV is read as its decimal with a note naming its own cell (never
# taken as a label), as a JSON string's is (tests/test_check.py)
def test_csv_decimal_comma_cells_are_read_at_their_cell(run, problem_file):
    for text, cell in (('weights\n"0,0454","0,7679","0,1867"\n', 'weights[0][0] "0,0454"'),
                       ('weights\n0.0454,"0,7679",0.1867\n', 'weights[0][1] "0,7679"'),
                       ('weights\n,a,b,c\nit,0.0454,"0,7679",0.1867\n', 'weights[0][1] "0,7679"'),
                       ("weights\n0.0454\t0,7679\t0.1867\n", 'weights[0][1] "0,7679"')):
        name = "a.tsv" if "\t" in text else "a.csv"
        result = run("check", problem_file(text, name), "-p", SCOOTER, "-f", "json")
        assert result.exit_code == 0, (text, result.stderr)
        notes = json.loads(result.stdout)["stages"]["weights"]["notes"]
        assert notes == [f"read {cell} as {cell.split(chr(34))[1].replace(',', '.')}, a decimal written with a "
                         "comma; write decimals with a point"], text
