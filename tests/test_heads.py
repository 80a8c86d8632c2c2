"""`attn heads`: every head of every layer ranked by the weight a query puts on some keys (compute/focus.py,
render/heads.py, commands/heads_run.py). The fast tests use a small made-up layer labelled like BERT's
tokens; the slow ones the real trained models (all-MiniLM-L6-v2, SmolLM2), checked against the models'
own weights as `attn capture` stored them (torch's, computed apart from attncli)."""

import json

import numpy as np
import pytest
from conftest import SAMPLES, assert_error

TOKENS = ["[CLS]", "the", "mechanic", "fixed", "the", "sc", "##oot", "##er", "because", "it", "was", "leaking",
          "petrol", ".", "[SEP]"]
WORD_IDS = [None, 0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 8, 9, 10, None]


def layer(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"Q": rng.normal(size=(15, 8)).round(3).tolist(), "K": rng.normal(size=(15, 8)).round(3).tolist(),
            "V": rng.normal(size=(15, 8)).round(3).tolist(), "heads": 2, "model": {"layer": seed}}


@pytest.fixture
def layered(problem_file):
    return problem_file({"query_labels": TOKENS, "key_labels": TOKENS, "word_ids": WORD_IDS,
                         "layers": [layer(0), layer(1), layer(2)]})


def softmax_weights(doc: dict, h: int) -> np.ndarray:
    """One head's weights, by the formula in plain numpy (not attncli's core)."""
    q, k = np.array(doc["Q"])[:, 4 * h:4 * h + 4], np.array(doc["K"])[:, 4 * h:4 * h + 4]
    s = q @ k.T / 2.0
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_heads_are_ranked_by_the_weight_on_the_word_as_numpy_computes_it(run, layered):
    rows = json.loads(run("heads", layered, "--query", "it", "--key", "scooter", "-f", "json").stdout)
    expected = sorted(((softmax_weights(layer(n), h)[9, 5:8].sum(), n, h) for n in range(3) for h in range(2)),
                      key=lambda t: (-t[0], t[1], t[2]))
    assert [(r["layer"], r["head"]) for r in rows] == [(n, h) for _, n, h in expected]
    assert [r["weight"] for r in rows] == pytest.approx([w for w, _, _ in expected], abs=1e-12)
    first = rows[0]
    w = softmax_weights(layer(first["layer"]), first["head"])[9]
    assert first["first_key"] == pytest.approx(w[0], abs=1e-12)
    assert first["entropy"] == pytest.approx(-(w * np.log(w)).sum(), abs=1e-12)
    assert first["top_keys"][0]["weight"] == pytest.approx(w.max(), abs=1e-12) and len(first["top_keys"]) == 3


def test_words_merge_sub_tokens_and_json_keeps_the_raw_tokens(run, layered):
    rows = json.loads(run("heads", layered, "--query", "#9", "--words", "--top", "13", "-f", "json").stdout)
    assert len(rows) == 6 and all(r["weight"] is None for r in rows)  # no --key: layer and head order
    assert [(r["layer"], r["head"]) for r in rows] == [(n, h) for n in range(3) for h in range(2)]
    scooter = next(t for t in rows[0]["top_keys"] if t["key"] == "scooter")
    assert scooter["tokens"] == ["sc", "##oot", "##er"] and scooter["positions"] == [5, 6, 7]
    assert scooter["weight"] == pytest.approx(softmax_weights(layer(0), 0)[9, 5:8].sum(), abs=1e-12)
    assert sum(t["weight"] for t in rows[0]["top_keys"]) == pytest.approx(1.0, abs=1e-12)  # 13 words: all of them


def test_rows_and_layer_and_the_table(run, layered):
    rows = json.loads(run("heads", layered, "--query", "it", "--key", "sc,##oot,##er", "--rows", "2", "--layer",
                          "1-2", "-f", "json").stdout)
    assert len(rows) == 2 and {r["layer"] for r in rows} <= {1, 2}
    table = run("heads", layered, "--query", "it", "--key", "scooter", "--words", "-f", "table").stdout
    assert "heads by the weight on scooter, per query (it)" in table and "scooter 0." in table


def test_a_label_found_twice_is_refused_naming_both_places(run, layered):
    assert_error(run("heads", layered, "--query", "the"), "--query", "#1", "#4")
    assert_error(run("heads", layered, "--query", "it", "--key", "bicycle"), "--key", 'no key "bicycle"')
    assert_error(run("heads", layered), "--query")
    assert json.loads(run("heads", layered, "--query", "#4", "-f", "json").stdout)[0]["query"] == "the"


def reference(path, place: int) -> np.ndarray:
    return np.load(path)[f"layers/{place}/reference/weights.npy"]


def model_ranking(path, query: int, keys: list[int]) -> list[tuple[int, int]]:
    """(layer, head) best first by the model's own weights (torch's, stored by attn capture)."""
    found = []
    count = sum(name.endswith("/reference/weights") for name in np.load(path).files)
    for place in range(count):
        w = reference(path, place)
        found += [(-w[h, query, keys].sum(), place, h) for h in range(w.shape[0])]
    return [(n, h) for _, n, h in sorted(found)]


@pytest.mark.slow
def test_minilm_finds_layer_4_head_3_for_it_and_scooter(run, minilm):
    rows = json.loads(run("heads", minilm, "--query", "it", "--key", "scooter", "--words", "-f", "json").stdout)
    assert len(rows) == 6 * 12
    assert [(r["layer"], r["head"]) for r in rows[:4]] == [(4, 3), (5, 7), (5, 10), (5, 5)]  # the issue's
    assert [(r["layer"], r["head"]) for r in rows[:3]] == model_ranking(minilm, 9, [5, 6, 7])[:3]
    assert rows[0]["weight"] == pytest.approx(reference(minilm, 4)[3, 9, 5:8].sum(), abs=1e-5)  # float32 model
    assert rows[0]["top_keys"][0]["key"] == "scooter"


@pytest.mark.slow
def test_smollm2_ranks_its_30_layers_as_its_own_weights_do(run, smollm2):
    rows = json.loads(run("heads", smollm2, "--query", "it", "--key", "scooter", "-f", "json").stdout)
    assert len({r["layer"] for r in rows}) == 30 and rows[0]["query"] == "it"  # Ġit read as it
    labels = [str(t) for t in np.load(smollm2)["key_labels.npy"]]
    words = list(np.load(smollm2)["word_ids.npy"])
    query, keys = labels.index("Ġit"), [i for i, word in enumerate(words) if word == words[labels.index("Ġscoot")]]
    assert [labels[i] for i in keys] == ["Ġscoot", "er"]
    assert [(r["layer"], r["head"]) for r in rows[:3]] == model_ranking(smollm2, query, keys)[:3]


def test_the_sink_is_what_a_sinks_variant_leaves_and_exactly_0_without_one(run, layered):
    rows = json.loads(run("heads", layered, "--query", "it", "-f", "json").stdout)
    assert [r["sink"] for r in rows] == [0.0] * 6  # not 1 − Σ w's rounding (2.2e-16 was printed)
    heads = json.loads(run("compute", SAMPLES / "sinks.json", "--stages", "weights", "-f", "json").stdout)["heads"]
    sinks = json.loads(run("heads", SAMPLES / "sinks.json", "--query", "cat", "-f", "json").stdout)
    assert [r["sink"] for r in sinks] == pytest.approx([1 - sum(h["weights"][1]) for h in heads], abs=1e-15)
    assert all(r["sink"] > 0.03 for r in sinks)
