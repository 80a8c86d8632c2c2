"""`--explain` with mask rules: the explained row says which keys it may see and why, with its
q_pos, each key's k_pos and the rule that hides a key."""

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render.explain import explain
from tests.conftest import SAMPLES

RULES = {"Q": [[1, 0], [0, 1], [1, 1]], "K": [[1, 0], [0, 1], [1, 1], [2, 0]], "V": [[1], [2], [3], [4]],
         "mask": "causal", "window": [1, 0], "key_mask": [1, 1, 0, 1], "q_positions": [1, 2, 3],
         "key_labels": ["the", "cat", "sat", "down"]}


def lines(doc: dict, row: int) -> list[str]:
    return explain(attend(build_problem(doc)), rows=[row])


def test_each_hidden_key_names_the_rule_that_hides_it():
    text = lines(RULES, 2)
    assert ("  query 2 (q_pos 3) may attend a key when k_pos ≤ 3 (causal) and 3 − 1 ≤ k_pos ≤ 3 + 0 "
            "(window [1, 0]) and key_mask is true (not padding)") in text
    assert "  the:  masked → −∞, excluded (window [1, 0]: k_pos 0 < 3 − 1)" in text
    assert "  sat:  masked → −∞, excluded (key_mask false: padding)" in text
    assert "  down: 1.4142" in text
    assert not any(line.startswith("  k_pos:") for line in text)  # the default key positions go unsaid


def test_key_positions_are_listed_when_not_the_default_and_every_reason_is_given():
    text = lines(RULES | {"k_positions": [0, 2, 4, 6], "window": [None, 0]}, 0)
    assert "  k_pos: the=0, cat=2, sat=4, down=6" in text
    assert ("  sat:  masked → −∞, excluded (causal: k_pos 4 > q_pos 1; window [∞, 0]: k_pos 4 > 1 + 0; "
            "key_mask false: padding)") in text


def test_a_decoding_step_sees_every_cached_key_and_says_so(run):
    text = run("compute", SAMPLES / "decode_step.json", "--explain").stdout.splitlines()
    assert '  query "down" (q_pos 3) may attend a key when k_pos ≤ 3 (causal); every key does' in text


def test_a_matrix_and_a_minus_infinity_bias_are_reasons_too():
    doc = {"Q": [[1, 0]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "mask": [[True, False, True]],
           "bias": [[0, 0, None]]}
    text = lines(doc, 0)
    assert "  query 0 (q_pos 0) may attend a key when the mask matrix is true" in text
    assert "  1: masked → −∞, excluded (the mask matrix is false)" in text
    assert "  2: masked → −∞, excluded (bias −∞)" in text


def test_without_rules_a_minus_infinity_bias_is_explained_as_before():
    doc = {"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "bias": [[0, None]]}
    text = lines(doc, 0)
    assert "  1: masked → −∞, excluded" in text and not any("may attend" in line for line in text)
