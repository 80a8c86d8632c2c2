"""Read-back (attncli/document/readback.py): a document's echoes and results checked against the
recomputation; every key the tool writes reads back."""

import json

from conftest import SAMPLES


def test_results_written_with_no_decimals_read_back(run):
    """Mutation: readback's `_disagree` tries 1 to 17 decimals but not 0, so `--round 0` output
    (weights 0, 1, 0 for 0.045, 0.768, 0.187) no longer reads back, though it is what the tool
    wrote: every key the tool writes must read back."""
    from tests.conftest import SCOOTER

    text = run("compute", "-", "--format", "json", "--round", "0", input=json.dumps(SCOOTER)).stdout
    assert json.loads(text)["heads"][0]["weights"] == [[0, 1, 0]]
    result = run("compute", "-", "--format", "json", input=text)
    assert result.exit_code == 0, result.stderr


SCOOTER_FILE = SAMPLES / "scooter.json"


def _computed(run):
    return json.loads(run("compute", SCOOTER_FILE, "-f", "json").stdout)


def test_tampered_compute_echoes_are_refused(run, problem_file):
    """Found by the third user trial of attn check (issue 16): a compute output whose echoes or per-head
    Q/K/V contradict its problem was marked 11/11; it is refused."""
    good = _computed(run)
    assert run("check", problem_file(good, "good.json"), "-p", SCOOTER_FILE).exit_code == 0
    tampers = {"K": lambda d: d["heads"][0]["K"][0].__setitem__(0, 9.0),
               "Q": lambda d: d["heads"][0]["Q"][0].__setitem__(0, 9.0),
               "d_k": lambda d: d.__setitem__("d_k", 3), "d_v": lambda d: d.__setitem__("d_v", 5),
               "mask_rule": lambda d: d.__setitem__("mask_rule", "causal"),
               "attncli": lambda d: d.__setitem__("attncli", 99)}
    for name, tamper in tampers.items():
        doc = json.loads(json.dumps(good))
        tamper(doc)
        path = problem_file(doc, f"{name}.json")
        for args in ((path, "-p", SCOOTER_FILE), (path,)):
            result = run("check", *args)
            assert result.exit_code == 2 and name in result.stderr and result.stdout == "", (name, args)
    # in a class, that file scores 0 with the reason; the others are marked
    bad = problem_file(dict(good, d_k=3), "bad.json")
    result = run("check", problem_file(good, "a.json"), bad, "-p", SCOOTER_FILE, "-f", "csv")
    rows = result.stdout.splitlines()
    assert result.exit_code == 2 and rows[1].split(",")[1:3] == ["11", "11"]
    assert rows[2].split(",")[1:3] == ["0", "11"] and "d_k is 3" in rows[2]
