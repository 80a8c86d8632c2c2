"""attncli/capture/guard.py: `attn capture` refuses, before building or running the model, what would
not fit in memory (issue 24 item 14): a config of 10,000,000 layers (which built layers until killed),
20,000 ids or 100 kB of text (torch allocated 3 GB for one layer's scores). The memory available is
fixed here (8 GiB), so the tests do not depend on the machine."""

import json
import shutil
from types import SimpleNamespace

import pytest

from attncli.capture import guard
from attncli.compute import limits
from tests.conftest import MODELS, SAMPLES, assert_error

pytestmark = MODELS

TINY = SAMPLES / "models" / "tiny-llama"
SIZES = SimpleNamespace(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4, num_hidden_layers=1,
                        intermediate_size=16, vocab_size=16, max_position_embeddings=32, experts=1)


@pytest.fixture
def eight_gib(monkeypatch):
    monkeypatch.setattr(limits, "available_bytes", lambda: 8 << 30)


def test_ten_million_layers_are_refused_before_a_layer_is_built(run, tmp_path, eight_gib, monkeypatch):
    from attncli.commands import capture_run

    monkeypatch.setattr(capture_run, "load_config", lambda *a: pytest.fail("the config was built"))
    shutil.copytree(TINY, tmp_path / "deep")
    config = json.loads((tmp_path / "deep" / "config.json").read_text()) | {"num_hidden_layers": 10_000_000}
    (tmp_path / "deep" / "config.json").write_text(json.dumps(config))
    assert_error(run("capture", tmp_path / "deep", "--ids", "3,1"),
                 f"error: {tmp_path / 'deep'}: this capture would need ", "its 10,000,000 layers' modules 610 GiB",
                 "and 8.0 GiB is available; attn capture cannot load this model here")


def test_twenty_thousand_ids_are_refused_before_the_model_runs(run, eight_gib, monkeypatch):
    from attncli.commands import capture_run

    monkeypatch.setattr(capture_run, "load_model", lambda *a: pytest.fail("the model was loaded"))
    assert_error(run("capture", TINY, "--ids", ",".join(["3"] * 20_000), "-o", "big.json"),
                 "this capture would need ", "every layer's attention weights (1 layer × 1 sequence × 2 heads × 20,000 × 20,000 tokens) "
                 "3.0 GiB", "the document's JSON 72 GiB", "is available; give fewer tokens")
    # without -o, a document past 32 MiB of JSON would be an .npz: the guard counts that
    assert_error(run("capture", TINY, "--ids", ",".join(["3"] * 20_000)), "the document's .npz 6.0 GiB")


def test_a_hundred_kilobytes_of_text_are_refused_before_the_model_runs(run, eight_gib, monkeypatch):
    from attncli.commands import capture_run

    monkeypatch.setattr(capture_run, "load_model", lambda *a: pytest.fail("the model was loaded"))
    assert_error(run("capture", TINY, "--text", "the cat sat on a mat " * 5000),
                 "this capture would need ", "(1 layer × 1 sequence × 2 heads × 30,000 × 30,000 tokens)", "; give fewer tokens")


def test_the_estimate_grows_with_each_part():
    """Layers, tokens, heads and the dtype each count (a guard that ignored one would let it through)."""
    base = sum(guard.model_bytes(SIZES, None).values()) + sum(guard.run_bytes(SIZES, None, 1, 100).values())
    for change, run in (({"num_hidden_layers": 2}, (1, 100)), ({}, (2, 100)), ({}, (1, 200)),
                        ({"num_attention_heads": 4, "num_key_value_heads": 2}, (1, 100))):
        sizes = SimpleNamespace(**vars(SIZES) | change)
        assert sum(guard.model_bytes(sizes, None).values()) + sum(guard.run_bytes(sizes, None, *run).values()) > base
    assert sum(guard.model_bytes(SIZES, "float64").values()) > sum(guard.model_bytes(SIZES, "float32").values())


def test_a_small_capture_passes(run, tmp_path, eight_gib):
    assert run("capture", TINY, "--ids", "3,1,4", "-o", tmp_path / "x.json").exit_code == 0


def test_the_guards_shape_counts_in_words():
    sizes = SimpleNamespace(**vars(SIZES) | {"num_attention_heads": 1, "num_key_value_heads": 1})
    assert "(1 layer × 1 sequence × 1 head × 1 × 1 token)" in " ".join(guard.run_bytes(sizes, None, 1, 1))


GPTJ = {"model_type": "gptj", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 64}


@pytest.mark.parametrize("config, key", [
    (GPTJ, "n_inner"),
    (GPTJ | {"model_type": "gpt2"}, "n_inner"),
    ({"model_type": "opt", "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2, "vocab_size": 64}, "ffn_dim"),
    ({"model_type": "t5", "d_model": 16, "d_kv": 8, "num_heads": 2, "num_layers": 2, "vocab_size": 64}, "d_ff"),
    ({"model_type": "bart", "d_model": 16, "encoder_attention_heads": 2, "encoder_layers": 2, "vocab_size": 64},
     "decoder_ffn_dim"),
    ({"model_type": "falcon", "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2, "vocab_size": 64},
     "ffn_hidden_size"),
    ({"model_type": "distilbert", "dim": 16, "n_heads": 2, "n_layers": 2, "vocab_size": 64}, "hidden_dim"),
])
def test_the_mlps_width_counts_by_each_name_a_family_gives_it(eight_gib, config, key):
    """GPT-J's n_inner (the MLP's width) was outside the guard: a config of n_inner 100,000,000 went to
    transformers to allocate 12.8 GB. Each family's name for the width counts as intermediate_size does."""
    from attncli.capture.directory import check_config

    _, sizes, *_ = check_config(config | {key: 32})
    guard.check(sizes, None)  # a small width fits
    _, sizes, *_ = check_config(config | {key: 10**9})
    assert sizes.intermediate_size == 10**9
    with pytest.raises(limits.ResourceError, match="this capture would need"):
        guard.check(sizes, None)


def test_an_encoder_decoders_decoder_layers_count(eight_gib):
    """BART's num_hidden_layers is its encoder_layers: 10,000,000 decoder_layers were not counted."""
    from attncli.capture.directory import check_config

    bart = {"model_type": "bart", "d_model": 16, "encoder_attention_heads": 2, "encoder_layers": 2, "vocab_size": 64}
    _, sizes, *_ = check_config(bart | {"decoder_layers": 10_000_000})
    with pytest.raises(limits.ResourceError, match="its 10,000,002 layers' modules"):
        guard.check(sizes, None)


def test_a_width_that_is_no_size_is_named(run, tmp_path):
    shutil.copytree(TINY, tmp_path / "gptj")
    (tmp_path / "gptj" / "config.json").write_text(json.dumps(GPTJ | {"n_inner": -5}))
    assert_error(run("capture", tmp_path / "gptj", "--ids", "3,1"),
                 "gptj/config.json: n_inner is the number -5; expected a whole number from 1 to 2,147,483,647 (or null)")


def test_a_mixture_of_experts_weighs_each_experts_mlp():
    """Eight experts hold eight MLPs a layer: seven more than the dense config's (3 × hidden × width each)."""
    def weights(sizes):
        return next(v for k, v in guard.model_bytes(sizes, "float32").items() if k.startswith("its weights"))

    moe = SimpleNamespace(**vars(SIZES) | {"experts": 8, "num_hidden_layers": 2})
    dense = SimpleNamespace(**vars(SIZES) | {"num_hidden_layers": 2})
    assert weights(moe) - weights(dense) == 2 * 7 * 3 * 8 * 16 * 4


def test_an_encoder_decoders_decoder_layers_keep_self_and_cross_attention_weights():
    """Each decoder layer keeps two attentions' weights (self and cross), each encoder layer one."""
    sizes = SimpleNamespace(**vars(SIZES) | {"num_hidden_layers": 2, "decoder_layers": 3})
    found = guard.run_bytes(sizes, None, 1, 10)
    key = next(k for k in found if k.startswith("every layer's attention weights"))
    assert key.startswith("every layer's attention weights (8 layers × 1 sequence × 2 heads × 10 × 10 tokens)")
    assert found[key] == 8 * 2 * 10 * 10 * 4
