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
