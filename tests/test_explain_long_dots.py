"""Found by an engineer's trial on a captured layer (d_model 32): an elided dot product's line
`(x0)(w0) + … + (x31)(w31) (32 terms)` noted the unrounded value of all 64 operands, most of them not
on the line; it notes only those it prints (the first 3 terms and the last)."""

import json
import re

import numpy as np


def test_a_long_projection_notes_only_the_operands_it_prints(run, tmp_path):
    rng = np.random.default_rng(0)
    d_model = 32
    doc = {"X": rng.normal(size=(2, d_model)).tolist(), "W_Q": rng.normal(size=(d_model, 2)).tolist(),
           "W_K": rng.normal(size=(d_model, 2)).tolist(), "W_V": rng.normal(size=(d_model, 2)).tolist()}
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(doc))
    result = run("compute", path, "--explain", "--row", "0", "--stages", "weights", "--precision", "4")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if f"({d_model} terms)" in line and "unrounded)" in line]
    assert lines, result.stdout
    for line in lines:
        noted = re.search(r"\(([^()]*) unrounded\)", line).group(1).split(", ")
        assert len(noted) <= 8, line  # 4 printed terms: 4 x and 4 w at most
