"""Issues 16 and 17, the second user trial: what a teacher and a hostile user found (lane
trial2-fixes). One test (or a few) per item, most severe first."""

import json

from conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"
GOOD = {"weights": [0.05, 0.77, 0.19], "output": [0.28, 1.35]}


# 1. --points and --max-score are bounded: finite, above 0, at most 1,000,000 (no OverflowError)
def test_points_and_max_score_are_bounded(run, problem_file):
    good = problem_file(GOOD, "a.json")
    for options, flag in ((("--points", "weights=1e308,output=1e308", "-f", "csv"), "--points"),
                          (("--points", "weights=inf"), "--points"), (("--points", "weights=1000001"), "--points"),
                          (("--max-score", "inf", "-f", "gradescope"), "--max-score"),
                          (("--max-score", "1e308", "-f", "gradescope"), "--max-score"),
                          (("--max-score", "0", "-f", "gradescope"), "--max-score")):
        result = run("check", good, "-p", SCOOTER, *options)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, options
        assert result.stderr.startswith(f"error: {flag}: ") and "at most 1,000,000" in result.stderr, options
    scope = json.loads(run("check", good, "-p", SCOOTER, "--max-score", "1e6", "--points", "weights=1e6",
                           "-f", "gradescope").stdout)
    assert scope["score"] == 1e6
