"""Read-back (attncli/document/readback.py): a document's echoes and results checked against the
recomputation; every key the tool writes reads back."""

import json

import numpy as np
import pytest
from conftest import SAMPLES

from tests.conftest import assert_error


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


def _npz_with(tmp_path, run, change, *options):
    first = tmp_path / "out.npz"
    assert run("compute", SAMPLES / "scooter.json", *options, "-o", first).exit_code == 0
    arrays = dict(np.load(first))
    change(arrays)
    np.savez(tmp_path / "changed.npz", **arrays)
    return tmp_path / "changed.npz"


def test_an_npz_reads_back_its_own_results(run, tmp_path):
    """Found by a user trial: an .npz's heads/… and grads/… members read back like JSON's results."""
    same = _npz_with(tmp_path, run, lambda a: None, "--do", "ones")
    assert run("compute", same, "-f", "json").exit_code == 0


@pytest.mark.parametrize("change, fragments", [
    (lambda a: a.update({"heads/foo": np.zeros(2)}), ['unknown member "heads/foo.npy"']),
    (lambda a: a.update({"extra/weights": np.zeros(2)}), ['unknown member "extra/weights.npy"']),
    (lambda a: a.update({"heads/Q": a["heads/Q"] + 1}), ["heads/Q[0][0][0] is 1.0 but recomputing gives 0.0",
                                                          "to mark answers, use attn check"]),
    (lambda a: a.update({"grads/Q": a["grads/Q"] * 2}), ["grads/Q[0][0] is", "but recomputing gives"]),
    (lambda a: a.update({"heads/weights": np.zeros((1, 2, 3))}),
     ["heads/weights is declared float64 (1, 2, 3), but this problem's weights is (1, 1, 3)"]),
    (lambda a: a.update({"heads/Q_rope": np.zeros((1, 1, 2))}), ["heads/Q_rope is given, but this problem has no Q_rope"]),
])
def test_an_npz_refuses_unknown_or_altered_results(run, tmp_path, change, fragments):
    """Found by a user trial: an .npz's unknown or altered heads/… and grads/… members are refused, as
    JSON's are."""
    assert_error(run("compute", _npz_with(tmp_path, run, change, "--do", "ones")), *fragments)


def test_a_changed_mask_rule_shows_where_the_rules_differ(run, problem_file):
    """Found by a user trial: two long rules that differ are shown where they differ, with how to
    recompute."""
    out = run("compute", SAMPLES / "causal.json", "--alibi", "-f", "json").stdout
    result = run("compute", problem_file(out, "al_out.json"), "--window", "1,0")
    assert_error(result, 'mask_rule is "… 1, as PyTorch is_causal=True)", but from',
                 'it is "… 1, as PyTorch is_causal=True); window [1, 0]: query i may attend',
                 "--window changed the problem these came from; to recompute it with them, drop its results: "
                 "jq 'del(.attncli, .d_k, .d_v, .alibi_slopes, .mask_rule, .heads, .output, .warnings)' FILE")
    dropped = {k: v for k, v in json.loads(out).items()
               if k not in ("attncli", "d_k", "d_v", "alibi_slopes", "mask_rule", "heads", "output", "warnings")}
    assert run.json("compute", problem_file(dropped), "--window", "1,0")["window"] == [1, 0]


def test_short_echoes_are_shown_whole(run, problem_file):
    """Found by a user trial: an echo that differs is shown whole when it is short."""
    doc = run.json("compute", SAMPLES / "scooter.json")
    assert_error(run("compute", problem_file(dict(doc, d_k=3))), "d_k is 3, but from")


def test_messages_an_echo_without_its_source(run, problem_file):
    """Found by a user trial (messages that said the wrong thing): an echo without the key it echoes."""
    doc = run.json("compute", SAMPLES / "rope.json")
    del doc["rope"]
    assert_error(run("compute", problem_file(doc)), "rope_rule is given, but rope gives none")
