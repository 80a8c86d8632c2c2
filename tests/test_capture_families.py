"""attncli/capture/families.py, the registry of capture families by model type (issue 25), and what
`attn capture` refuses because `attn compute` would (issue 24 item 18). A throwaway family added as
one record is captured and agrees; a model type without a record, or with a setting its record says
attncli cannot express, is refused before the model is loaded; fused layouts split as documented."""

import json

import numpy as np
import pytest

from attncli.capture import families, layouts
from attncli.capture.families import FAMILIES, Cannot, Family, Rope
from attncli.document.reading import build_problem
from tests.conftest import MODELS, SAMPLES, Lazy, assert_error
from tests.test_capture import SMALL, build

torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs

GEMMA = {"gemma": ("GemmaConfig", "GemmaForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=1,
                                                            head_dim=8))}


@MODELS
def test_a_new_family_is_one_record(run, tmp_path, monkeypatch):
    """Gemma (1) has no record: refused, naming its model type. One Family(...) later it is captured,
    and attn compute agrees with the model to float64's precision."""
    directory = build("gemma", tmp_path, GEMMA)
    out = tmp_path / "layer.json"
    assert_error(run("capture", directory, "--ids", "3,1,4,1,5", "-o", out), 'model type "gemma" has no capture family')
    monkeypatch.setitem(FAMILIES, "gemma", Family("gemma", "Gemma"))
    captured = run("capture", directory, "--ids", "3,1,4,1,5; 2,6", "--batch-index", "1", "--dtype", "float64", "-o", out)
    assert captured.exit_code == 0, captured.stderr
    computed = run("compute", out, "--format", "json")
    assert computed.exit_code == 0, computed.stderr
    agreement = json.loads(computed.stdout)["agreement"]
    assert agreement["agrees"] and agreement["difference"] < 1e-12, agreement["line"]
    step = run("capture", directory, "--ids", "3,1,4,1,5", "--decode", "--dtype", "float64", "-o", out)
    assert step.exit_code == 0 and run("compute", out, "--format", "json").exit_code == 0


@MODELS
def test_a_record_whose_paths_miss_is_refused_naming_them(run, tmp_path, monkeypatch):
    directory = build("gemma", tmp_path, GEMMA)
    monkeypatch.setitem(FAMILIES, "gemma", Family("gemma", "Gemma", blocks="decoder.layers"))
    assert_error(run("capture", directory, "--ids", "3,1"),
                 "GemmaModel has no decoder (the layers of its family's record is decoder.layers)")
    monkeypatch.setitem(FAMILIES, "gemma", Family("gemma", "Gemma", output="self_attn.out_proj"))
    assert_error(run("capture", directory, "--ids", "3,1"),
                 "GemmaAttention has no out_proj (the output projection of its family's record is self_attn.out_proj)")


@MODELS
def test_a_record_that_misreads_the_family_is_caught_by_the_agreement(run, tmp_path, monkeypatch):
    """The record is what the capture believes: Gemma read with interleaved RoPE writes a document
    whose recomputation differs from the model (exit 1), never a silent agreement."""
    directory = build("gemma", tmp_path, GEMMA)
    monkeypatch.setitem(FAMILIES, "gemma", Family("gemma", "Gemma", rope=Rope("interleaved")))
    out = tmp_path / "layer.json"
    assert run("capture", directory, "--ids", "3,1,4,1,5", "--dtype", "float64", "-o", out).exit_code == 0
    assert run("compute", out, "--format", "json").exit_code == 1


@MODELS
def test_a_setting_attncli_cannot_express_is_refused_by_name(run, tmp_path, monkeypatch):
    """A record's `cannot`: the config key, what it does; refused before anything is loaded."""
    monkeypatch.setitem(FAMILIES, "llama", Family("llama", "Llama", cannot=(
        Cannot("attention_bias", "adds a bias the test pretends attncli lacks"),)))
    directory = tmp_path / "biased"
    import shutil

    shutil.copytree(SAMPLES / "models" / "tiny-llama", directory)
    assert run("capture", directory, "--ids", "3,1").exit_code == 0  # attention_bias false: nothing to refuse
    config = json.loads((directory / "config.json").read_text()) | {"attention_bias": True}
    (directory / "config.json").write_text(json.dumps(config))
    assert_error(run("capture", directory, "--ids", "3,1"), 'config.json: Llama with attention_bias "True" adds a bias '
                 "the test pretends attncli lacks, which attncli cannot express yet")


def test_unknown_model_types_name_the_known_ones():
    with pytest.raises(families.CaptureError, match='model type "mamba" has no capture family: .* attn capture reads '
                                                    "albert, bart, bert, blenderbot, blenderbot-small, bloom, codegen, "):
        families.family_of("mamba")
    with pytest.raises(families.CaptureError, match='model type "None" has no capture family'):
        families.family_of(None)


@MODELS
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_record_is_keyed_by_its_own_model_type_and_names_a_transformers_type(model_type):
    record = FAMILIES[model_type]
    assert record.model_type == model_type and record.label and record.exercises
    assert model_type in transformers.CONFIG_MAPPING


def test_rope_per_layer_is_the_records():
    """A record can turn RoPE off per layer (as SmolLM3's no_rope_layers will need) and choose the pairing."""
    from types import SimpleNamespace

    from attncli.capture.reading import rope

    config = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, no_rope_layers=[1, 0])
    record = Family("x", "X", rope=Rope("interleaved", on=lambda c, layer: bool(c.no_rope_layers[layer])))
    assert rope(record, config, 0, 8) == {"style": "interleaved", "base": 10000.0, "dims": 8}
    assert rope(record, config, 1, 8) is None
    assert rope(Family("y", "Y", rope=None), config, 0, 8) is None


def test_alibi_and_causal_may_follow_the_config():
    """As Falcon's `alibi` and BERT's `is_decoder` do: a record's value, or a function of the config."""
    from types import SimpleNamespace

    record = Family("x", "X", alibi=lambda c: c.alibi, causal=lambda c: c.is_decoder)
    assert record.has_alibi(SimpleNamespace(alibi=True)) and not record.has_alibi(SimpleNamespace(alibi=False))
    assert not record.is_causal(SimpleNamespace(is_decoder=False))
    assert FAMILIES["bloom"].has_alibi(None) and FAMILIES["llama"].is_causal(None)


@pytest.mark.parametrize("split, heads, kv_heads, d, q, k, v", [
    (layouts.stacked, 2, 1, 2, [0, 1, 2, 3], [4, 5], [6, 7]),  # Phi-3 qkv_proj, GPT-2 c_attn; multi-query: N = 1
    (layouts.per_head, 2, 2, 2, [0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]),  # GPT-NeoX, BLOOM
])
def test_fused_layouts_split_as_documented(split, heads, kv_heads, d, q, k, v):
    found = split(heads, kv_heads, d)
    for part, expected in zip(found, (q, k, v)):
        np.testing.assert_array_equal(part, expected)


@MODELS
def test_a_fused_module_of_the_wrong_width_is_refused(tmp_path):
    """A record whose layout does not fit the module (a fused [q; k; v] read with too many kv heads)."""
    from types import SimpleNamespace

    from attncli.capture.families import CaptureError
    from attncli.capture.reading import projections

    linear = torch.nn.Linear(8, 16)
    module = SimpleNamespace(qkv_proj=linear)
    record = Family("f", "F", layout=layouts.STACKED("qkv_proj"))
    with pytest.raises(CaptureError, match=r"qkv_proj has 16 output features; qkv_proj: \[q; k; v\] with 2 heads, 2 kv "
                                           "heads of width 4 expects 24"):
        projections(record, module, linear, 2, 2, 4)


def test_dynamic_scaling_takes_the_configs_max_position_embeddings():
    """Mutation: `rope` no longer adds the config's max_position_embeddings to a dynamic (or
    longrope) scaling, which transformers reads beside rope_parameters: attncli would refuse the
    captured layer (dynamic needs it) or grow the base at another length."""
    from types import SimpleNamespace

    from attncli.capture.reading import rope

    for kind, extra in (("dynamic", {"factor": 2.0}),
                        ("longrope", {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                                      "original_max_position_embeddings": 16})):
        config = SimpleNamespace(model_type="llama", max_position_embeddings=64,
                                 rope_parameters={"rope_type": kind, "rope_theta": 10000.0, **extra})
        found = rope(FAMILIES["llama"], config, 0, 8)
        assert found["scaling"]["max_position_embeddings"] == 64
        build_problem({"Q": np.ones((2, 8)).tolist(), "K": np.ones((2, 8)).tolist(), "V": np.ones((2, 2)).tolist(),
                       "rope": found})


def test_the_scale_is_the_modules_inv_norm_factor():
    """Mutation: `scale` reads `scaling` alone, not BLOOM's `inv_norm_factor` (equal to 1/√d in
    BLOOM itself, so the captured models cannot tell)."""
    from types import SimpleNamespace

    from attncli.capture.reading import scale

    assert scale(SimpleNamespace(inv_norm_factor=0.3), 4) == 0.3
    assert scale(SimpleNamespace(scaling=0.2, inv_norm_factor=0.3), 4) == 0.2
    assert scale(SimpleNamespace(), 4) == 0.5


# --- capture refuses what compute would (issue 24 item 18) ---------------------------------------

REFUSED = {
    "softcap": ("Gemma2Config", "Gemma2ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=1,
                                                          head_dim=8, attn_logit_softcapping=-2.0)),
    "scaling": ("LlamaConfig", "LlamaForCausalLM", dict(SMALL, num_attention_heads=2, rope_parameters={
        "rope_type": "linear", "rope_theta": 10000.0, "factor": -2.0})),
    "partial": ("PhiConfig", "PhiForCausalLM", dict(SMALL, num_attention_heads=2, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125})),
    "softcap0": ("Gemma2Config", "Gemma2ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=1,
                                                           head_dim=8, attn_logit_softcapping=0.0)),
    "scalar": ("Gemma2Config", "Gemma2ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=1,
                                                         head_dim=8, query_pre_attn_scalar=-4)),
}


@MODELS
@pytest.mark.parametrize("case, fragment", [
    ("softcap", "attn_logit_softcapping is the number -2.0; expected a finite number > 0, or null for no softcap"),
    ("scaling", "rope_parameters.factor is the number -2.0; expected a finite number > 0"),
    ("partial", "rope_parameters.partial_rotary_factor is the number 0.125, which turns 1 of the head's 8 dims; "
                "expected a factor that leaves an even number of dims, at least 2"),
    ("softcap0", "attn_logit_softcapping is the number 0.0; expected a finite number > 0, or null for no softcap "
                 "(transformers' eager attention divides the scores by it: 0 is not \"off\" there"),
    ("scalar", "query_pre_attn_scalar is the number -4; expected a finite number > 0"),
])
def test_capture_refuses_a_layer_compute_would_refuse(run, tmp_path, case, fragment, monkeypatch):
    """A negative softcap, a negative RoPE scaling factor, a partial rotary of 1 dim: the model runs,
    but attn compute would refuse the document; capture refuses its config first, naming the key,
    before the model is built. Gemma 2 with attn_logit_softcapping 0.0 (its eager path divides by
    it: every weight uniform) or a negative query_pre_attn_scalar was captured, and compute then said
    the document differs from the model (exit 1)."""
    from attncli.commands import capture_run

    directory = build(case, tmp_path, REFUSED)
    monkeypatch.setattr(capture_run, "load_config", lambda *a: pytest.fail("the config was built"))
    out = tmp_path / "layer.json"
    assert_error(run("capture", directory, "--ids", "3,1,4", "-o", out), f"{directory}/config.json: ", fragment)
    assert not out.exists()
