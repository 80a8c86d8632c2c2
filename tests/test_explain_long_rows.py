"""--explain on a row longer than the hand calculation lists (render/explain.listed_keys, hand/handwriting.
shown_keys): the first and last keys, the picked ones (--key), the row's largest weights with the rest of their
words, always; the others' terms as one named remainder whose value is printed, so that the softmax's sum still
holds; --full lists every key."""

import re
from decimal import Decimal

import numpy as np
import pytest

TOKENS = ["[CLS]", "the", "mechanic", "fixed", "the", "sc", "##oot", "##er", "because", "it", "was", "leaking",
          "petrol", ".", "[SEP]"]


@pytest.fixture
def sentence(problem_file):
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(15, 4)), rng.normal(size=(15, 4))
    k[6] = q[9] * 2  # "it" attends "##oot" most: in the middle a short list elides
    return problem_file({"Q": q.round(3).tolist(), "K": k.round(3).tolist(), "V": rng.normal(size=(15, 2)).round(3).tolist(),
                         "query_labels": TOKENS, "key_labels": TOKENS,
                         "word_ids": [None, 0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 8, 9, 10, None]})


def softmax_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Step") and "softmax" in line)
    return lines[start + 1:next(i for i in range(start + 1, len(lines)) if lines[i].startswith("Step"))]


def listed(text: str) -> list[str]:
    return [line.split("=")[0].strip() for line in softmax_lines(text)[1:] if "=" in line]


@pytest.mark.parametrize("carry", ["exact", "rounded"])
def test_the_largest_weights_words_and_picked_keys_are_listed_and_the_sum_holds(run, sentence, carry):
    out = run("compute", sentence, "--explain", "--query", "it", "--carry", carry).stdout
    names = listed(out)
    assert {"sc", "##oot", "##er"} <= set(names)  # ##oot has the most weight; its word comes whole
    assert "… " in "\n".join(softmax_lines(out)) and len(names) < 15
    terms = softmax_lines(out)[0]
    values = [Decimal(v) for v in re.findall(r"= (-?[0-9.]+)(?=   |$)", terms.split("   sum")[0] + "   ")]
    values += [Decimal(v) for v in re.findall(r"more keys?: (-?[0-9.]+)\)", terms)]
    total = Decimal(re.search(r"sum = (-?[0-9.]+)", terms).group(1))
    assert abs(sum(values) - total) <= Decimal("0.0001") * len(values)  # at most a last digit per term
    if carry == "rounded":
        assert sum(values) == total  # every printed term re-typed: the sum of what is printed
    picked = listed(run("compute", sentence, "--explain", "--query", "it", "--key", "petrol").stdout)
    assert "petrol" in picked


def test_full_lists_every_key(run, sentence):
    out = run("compute", sentence, "--explain", "--query", "it", "--full").stdout
    assert listed(out) == TOKENS and "more key" not in out


def test_a_short_row_is_unchanged(run):
    out = run("compute", "--q", "0,4", "--k", "1,0; 0,1; .5,.5", "--v", "2,0; 0,2; 1,-1", "--explain").stdout
    assert "more key" not in out and "e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321" in out


@pytest.mark.slow
def test_minilm_it_lists_the_scooter_sub_tokens_and_every_sum_holds(run, minilm):
    for carry in ("exact", "rounded"):
        out = run("compute", minilm, "--layer", "4", "--head", "3", "--explain", "--query", "it", "--carry",
                  carry).stdout
        assert {"sc", "##oot", "##er"} <= set(listed(out)), carry
