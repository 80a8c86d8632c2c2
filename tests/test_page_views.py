"""The page of a document of several layers (render/page_views.py, render/page_layers.py,
commands/compute_layers.py), without a browser: what it embeds (every layer's weights, scores,
logits, q and k, exactly), the tokens and words its pickers offer, --query and --key chosen, the
policy over its two scripts, escaping, and its refusals. tests/test_page_browser.py drives it."""

import base64
import hashlib
import json
import re
import shlex

import numpy as np
import pytest
from conftest import assert_error

from attncli import api
from attncli.render import page_views
from attncli.render.page_assets import CSS, JS
from attncli.render.page_views import VIEWS_CSS, VIEWS_JS, unpacked
from tests.test_heads import TOKENS, WORD_IDS, layer, softmax_weights

HOSTILE = '<img src=x onerror="document.title=\'PWNED\'">'


def two_layers(**top) -> dict:
    """Two made-up layers of two heads (tests/test_heads.py's, BERT-like labels: sc ##oot ##er)."""
    return {"title": "two layers", "query_labels": TOKENS, "key_labels": TOKENS, "word_ids": WORD_IDS,
            "layers": [layer(0), layer(1)]} | top


def views(text: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="attn-views">(.*?)</script>', text, re.S)[1])


@pytest.fixture
def layers_page(run, problem_file, tmp_path):
    def write(*args, doc=None):
        path = tmp_path / "layers.html"
        result = run("compute", problem_file(doc or two_layers()), *args, "-o", path)
        assert result.exit_code == 0, result.stderr
        return path.read_text(encoding="utf-8")
    return write


def test_every_layers_arrays_are_embedded_exactly(layers_page):
    data = views(layers_page())
    assert [d["layer"] for d in data["layers"]] == [0, 1] and (data["lq"], data["lk"]) == (15, 15)
    for n, found in enumerate(data["layers"]):
        doc = layer(n)
        trace = api.attend(np.array(doc["Q"]), np.array(doc["K"]), np.array(doc["V"]), heads=2)
        shape = (2, 15, 15)
        assert np.array_equal(unpacked(found["weights"], shape), trace.weights)  # bit for bit
        assert np.array_equal(unpacked(found["scores"], shape), trace.scores)
        assert np.array_equal(unpacked(found["logits"], shape), trace.stage("scaled"))  # no mask: scaled
        assert np.array_equal(unpacked(found["q"], (2, 15, 4)), trace.Q)
        assert np.array_equal(unpacked(found["k"], (2, 15, 4)), trace.K)
        for h in range(2):  # and as plain numpy computes them
            assert np.allclose(unpacked(found["weights"], shape)[h], softmax_weights(doc, h), rtol=0, atol=1e-15)
        assert found["stages"] == ["scores", "scaled"] and found["scale"] == 0.5 and found["rope"] is None


def test_words_are_offered_and_query_and_key_choose_them(layers_page):
    data = views(layers_page("--query", "it", "--key", "scooter"))
    words = [name for name, _ in data["keyWords"]]
    assert words[data["key"]] == "scooter" and data["keyWords"][data["key"]][1] == [5, 6, 7]
    assert data["queryWords"][data["query"]] == ["it", [9]]
    assert data["queries"] == TOKENS and words.count("the") == 2 and len(words) == 13
    assert views(layers_page())["query"] is None  # nothing chosen: the page's pickers choose


def test_one_layer_chosen_is_the_tables_page_and_several_limit_the_views(layers_page):
    one = layers_page("--layer", "1")
    assert 'id="attn-views"' not in one and 'data-stage="weights"' in one
    chosen = layers_page("--layer", "1,0")  # rows down the model, whatever order was typed
    assert [d["layer"] for d in views(chosen)["layers"]] == [0, 1]


def test_a_page_of_chosen_layers_is_titled_by_them(layers_page):
    """A capture's title names its layers: the page of some of them names those (issue 28's trial:
    --layer 3,4 kept "layers 0-5"); a document's own title otherwise, never the file's name."""
    doc = two_layers(title="MiniLM layers 0-2 (BertModel)")
    doc["layers"].append(layer(0) | {"model": {"layer": 2}})
    text = layers_page("--layer", "2,1", doc=doc)
    assert "<title>MiniLM layers 1-2 (BertModel)</title>" in text
    assert [d["layer"] for d in views(text)["layers"]] == [1, 2]
    assert "<title>two layers</title>" in layers_page()


def test_the_policy_allows_both_scripts_and_styles_and_nothing_loads(layers_page):
    text = layers_page()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)[1]
    digest = lambda s: "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"  # noqa: E731
    assert f"script-src {digest(JS)} {digest(VIEWS_JS)};" in policy
    assert f"style-src {digest(CSS)} {digest(VIEWS_CSS)};" in policy and "unsafe" not in policy
    assert f"<script>{VIEWS_JS}</script>" in text and f"<style>{VIEWS_CSS}</style>" in text
    assert re.findall(r"https?:[^\"]*", text) == ["http://www.w3.org/2000/svg"]  # a name, never fetched
    assert not re.search(r"<(link|img|iframe|object|embed)\b|\ssrc=", text)
    assert text.count("<table") == 1  # the model view's grid, filled by the script: no table is HTML


def test_hostile_labels_stay_text(layers_page):
    labels = [HOSTILE, "</script><script>alert(1)</script>"] + TOKENS[2:]
    text = layers_page(doc=two_layers(title=HOSTILE, query_labels=labels, key_labels=labels))
    assert HOSTILE not in text and "</script><script>alert" not in text
    assert views(text)["queries"][:2] == labels[:2]  # read back as they were


def test_rope_and_grouped_heads_are_embedded_per_kv_head(run, problem_file, tmp_path):
    rng = np.random.default_rng(3)
    doc = {"X": rng.normal(size=(5, 8)).tolist(), "W_Q": rng.normal(size=(8, 8)).tolist(),
           "W_K": rng.normal(size=(8, 4)).tolist(), "W_V": rng.normal(size=(8, 4)).tolist(), "heads": 4,
           "kv_heads": 2, "mask": "causal", "rope": {"style": "half", "base": 100}}
    path = tmp_path / "gqa.html"
    assert run("compute", problem_file({"layers": [doc, doc]}), "-o", path).exit_code == 0
    found = views(path.read_text())["layers"][0]
    k = unpacked(found["k"], (2, 5, 2))
    assert found["kv"] == 2 and found["rope"]["pairs"] == [[0, 1]] and found["stages"][-1] == "masked"
    logits = unpacked(found["logits"], (4, 5, 5))
    assert np.isneginf(logits[:, 0, 1:]).all() and np.isfinite(np.tril(logits)).all()
    q = unpacked(found["q"], (4, 5, 2))
    scores = unpacked(found["scores"], (4, 5, 5))
    assert np.allclose(np.einsum("hid,hjd->hij", q, np.repeat(k, 2, axis=0)), scores, rtol=0, atol=1e-12)


def test_a_page_past_its_size_is_refused_naming_layer(run, problem_file, tmp_path, monkeypatch):
    monkeypatch.setattr(page_views, "MOST_NUMBERS", 1000)
    path = tmp_path / "big.html"
    assert_error(run("compute", problem_file(two_layers()), "-o", path), "--layer", "1,000")
    assert not path.exists()
    # refused before any layer is computed (counted from the shapes), and naming --layer without -o too
    monkeypatch.setattr("attncli.commands.compute_layers.computed", lambda *a: pytest.fail("computed"))
    assert_error(run("compute", problem_file(two_layers()), "--format", "html"), "error: --layer:", "1,000")


def test_tiles_and_the_output_alone_are_refused_for_the_layers_page(run, problem_file, tmp_path):
    source = problem_file(two_layers())
    assert_error(run("compute", source, "--tiles", "4,4", "-o", tmp_path / "t.html"), "--tiles", "--layer 0")
    assert_error(run("compute", source, "--stages", "output", "-o", tmp_path / "t.html"), "--stages", "--layer 0")


def test_head_and_precision_reach_the_page_and_explain_is_refused(run, problem_file, tmp_path, layers_page):
    data = views(layers_page("--head", "1", "--precision", "6"))
    assert (data["head"], data["precision"]) == (1, 6)
    source = problem_file(two_layers())
    assert_error(run("compute", source, "--head", "2", "-o", tmp_path / "h.html"), "--head", "0 to 1")
    assert_error(run("compute", source, "--explain", "-o", tmp_path / "e.html"), "--explain", "beside the page",
                 "--layer 0")


def test_the_page_goes_to_stdout_and_layers_of_other_lengths_are_refused(run, problem_file, layers_page):
    assert run("compute", problem_file(two_layers()), "--format", "html").stdout == layers_page()
    short = layer(1) | {k: layer(1)[k][:14] for k in ("Q", "K", "V")}
    doc = {"title": "two lengths", "layers": [layer(0), short]}
    assert_error(run("compute", problem_file(doc), "--format", "html"), "--layer", "layer 1 has 14 × 14", "15 × 15")


def captured_layer(number: int = 2) -> dict:
    """A made-up layer of 8 tokens as attn capture writes one: the model's weights beside it (here attncli's
    own). Small: its tables page explains every row by hand."""
    doc = {k: v[:8] for k, v in layer(0).items() if k in ("Q", "K", "V")} | {"heads": 2}
    trace = api.attend(np.array(doc["Q"]), np.array(doc["K"]), np.array(doc["V"]), heads=2)
    return doc | {"query_labels": TOKENS[:8], "key_labels": TOKENS[:8], "word_ids": WORD_IDS[:8],
                  "model": {"name": "made-up", "layer": number},
                  "reference": {"weights": trace.weights.tolist(), "dtype": "float64"}}


def test_a_captured_layers_tables_page_has_a_views_tab_first(run, problem_file, tmp_path):
    path, source = tmp_path / "one.html", problem_file(captured_layer())
    result = run("compute", source, "--query", "mechanic", "--key", "scooter", "-o", path)
    assert result.exit_code == 0, result.stderr
    text = path.read_text()
    tabs = re.findall(r'<button role="tab" id="(tab-[^"]+)"', text)
    assert tabs[:2] == ["tab-views", "tab-0"] and 'data-stage="weights"' in text  # the tables as before
    data = views(text)
    assert [d["layer"] for d in data["layers"]] == [2] and data["keyWords"][data["key"]][0] == "scooter"
    assert data["command"] == "attn compute " + shlex.quote(str(source))  # the derivation's, as the tables' say
    assert f"<script>{VIEWS_JS}</script>" in text and f"<script>{JS}</script>" in text
    plain = tmp_path / "plain.html"  # not a capture (no model's weights beside it): the tables alone
    doc = captured_layer()
    del doc["reference"]
    assert run("compute", problem_file(doc), "-o", plain).exit_code == 0
    assert 'id="attn-views"' not in plain.read_text() and "tab-views" not in plain.read_text()


@pytest.mark.parametrize("args, flag, said", [
    (("--dtype", "float32"), "--dtype", "--layer 0"), (("--do", "ones"), "--do", "--layer 0"),
    (("--full",), "--full", "--layer 0"), (("--query", "it,was"), "--query", "2 (it, was)")])
def test_what_the_page_does_not_apply_is_refused_by_name(run, problem_file, tmp_path, args, flag, said):
    """Issue 28's trial: --dtype float32 (the page derives in float64 beside float32 weights), --do, --full
    and a second query were accepted and ignored."""
    path = tmp_path / "p.html"
    assert_error(run("compute", problem_file(two_layers()), *args, "-o", path), f"error: {flag}:", said)
    assert not path.exists()


def test_picked_keys_and_sub_tokens_are_chosen_as_attn_heads_sums_them(layers_page):
    """--key scooter,petrol is the four tokens (heads sums them), --key '##oot' the sub-token alone, each a
    choice of its own beside the words; a word is still the word."""
    data = views(layers_page("--query", "it", "--key", "scooter,petrol"))
    assert data["keyWords"][data["key"]] == ["scooter + petrol", [5, 6, 7, 12]]
    data = views(layers_page("--query", "it", "--key", "##oot"))
    assert data["keyWords"][data["key"]] == ["##oot", [6]] and len(data["keyWords"]) == 14
    data = views(layers_page("--query", "it", "--key", "scooter"))
    assert data["keyWords"][data["key"]] == ["scooter", [5, 6, 7]] and len(data["keyWords"]) == 13


def test_layers_that_agree_are_one_header_line_and_the_file_names_the_command(run, problem_file, tmp_path):
    """SmolLM2's header was 30 "agrees with … layer N" lines: the layers that agree are one line; the
    derivation's suggested command names the file (shell-quoted), not FILE."""
    source = tmp_path / "it's here.json"
    source.write_text(json.dumps({"title": "captured", "layers": [captured_layer(0), captured_layer(1)]}))
    path = tmp_path / "p.html"
    result = run("compute", source, "-o", path)
    assert result.exit_code == 0, result.stderr
    header = re.search(r'<pre class="header">(.*?)</pre>', path.read_text(), re.S)[1].splitlines()
    assert len(header) == 2 and re.fullmatch(r"layers 0-1 agree with made-up to ≤ \de[-+]\d\d \(.*\)", header[1])
    assert views(path.read_text())["command"] == "attn compute " + shlex.quote(str(source))


def test_a_document_of_one_layer_is_titled_by_its_title(run, problem_file, tmp_path):
    path = tmp_path / "one.html"
    assert run("compute", problem_file({"title": "one", "layers": [layer(0)]}), "-o", path).exit_code == 0
    assert "<title>one</title>" in path.read_text()


def test_the_size_counted_is_the_numbers_a_grouped_layer_embeds():
    """count (the page's size guard) counts what layer_data packs: k once per kv head, not per query head."""
    rng = np.random.default_rng(5)
    trace = api.attend(rng.normal(size=(4, 3, 2)), rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 5, 2)),
                       heads=4, kv_heads=2)
    data = page_views.layer_data(0, trace, None)
    embedded = sum(len(base64.b64decode(data[name])) // 8 for name in ("weights", "scores", "logits", "q", "k"))
    assert embedded == page_views.count(trace) == 4 * 3 * (3 * 5 + 2) + 2 * 5 * 2


def test_a_layer_that_differs_from_its_model_has_its_own_header_line(run, tmp_path):
    """Fewer than two layers agree: each layer's agreement line is in the header, the one that differs too."""
    differs = captured_layer(1)
    differs["reference"]["weights"][0][0][0] += 1e-3
    source = tmp_path / "layers.json"
    source.write_text(json.dumps({"title": "captured", "layers": [captured_layer(0), differs]}))
    path = tmp_path / "p.html"
    result = run("compute", source, "-o", path)
    assert result.exit_code == 1, result.stderr
    header = re.search(r'<pre class="header">(.*?)</pre>', path.read_text(), re.S)[1].splitlines()
    assert len(header) == 3 and header[1].startswith("agrees with made-up layer 0")
    assert "made-up layer 1" in header[2] and not header[2].startswith("agrees")
