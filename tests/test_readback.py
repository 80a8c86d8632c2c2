"""Read-back (attncli/document/readback.py): a document's echoes and results checked against the
recomputation; every key the tool writes reads back."""

import json


def test_results_written_with_no_decimals_read_back(run):
    """Mutation: readback's `_disagree` tries 1 to 17 decimals but not 0, so `--round 0` output
    (weights 0, 1, 0 for 0.045, 0.768, 0.187) no longer reads back, though it is what the tool
    wrote: every key the tool writes must read back."""
    from tests.conftest import SCOOTER

    text = run("compute", "-", "--format", "json", "--round", "0", input=json.dumps(SCOOTER)).stdout
    assert json.loads(text)["heads"][0]["weights"] == [[0, 1, 0]]
    result = run("compute", "-", "--format", "json", input=text)
    assert result.exit_code == 0, result.stderr
