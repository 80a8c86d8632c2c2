"""What a user trial (a learner, a teacher, a hostile user) found on main: each item of the lane's
list with the test that failed before its fix."""

import io
import json
import zipfile

import numpy as np
import pytest

from tests.conftest import SAMPLES, assert_error

ROPE_SAMPLE = json.loads((SAMPLES / "rope.json").read_text(encoding="utf-8"))


# 1. A --rope-… option replaces only its own field of the file's rope object.
def test_a_rope_option_keeps_the_files_other_rope_fields(run, problem_file):
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run.json("compute", path, "--rope-base", "500000")["rope"] == \
        {"style": "interleaved", "base": 500000.0, "dims": 2}
    assert run.json("compute", path, "--rope")["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 2}
    plain = problem_file({k: v for k, v in ROPE_SAMPLE.items() if k != "rope"}, "plain.json")
    assert run.json("compute", plain, "--rope")["rope"] == {"style": "half", "base": 10000.0, "dims": 4}
    assert run.json("compute", plain, "--rope-dims", "2")["rope"] == {"style": "half", "base": 10000.0, "dims": 2}


def test_a_rope_option_over_an_npz_keeps_its_rope_fields(run, problem_file, tmp_path):
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run("compute", path, "-o", tmp_path / "r.npz").exit_code == 0
    assert run.json("compute", tmp_path / "r.npz", "--rope-base", "100")["rope"] == \
        {"style": "interleaved", "base": 100.0, "dims": 2}
