"""`attn capture`: one layer of each family's tiny random model (built from its config here, no
network), captured in float64, recomputed by attncli and compared with the model's own eager
attention weights and o_proj output: a whole sequence, a left-padded batch row, and a decode step.

Each model is built once per module (`models`): the fast suite's part takes about 15 s of CPU (half of
it importing torch and building the models); layer 1 and three RoPE scaling types run in the slow
profile (`-m slow`), as CI runs it."""

import copy
import json

import pytest

from tests.conftest import MODELS, Lazy

pytestmark = MODELS
torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs
capture, pad_left = (Lazy("attncli.capture.driver", name) for name in ("capture", "pad_left"))
load = Lazy("attncli.capture.loading", "load")

from attncli.capture.families import CaptureError  # noqa: E402
from attncli.compute.attention import attend  # noqa: E402
from attncli.document.agreement import compare  # noqa: E402
from attncli.document.reading import build_problem  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, intermediate_size=32, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
# family: (config class, model class, settings) — the variants each one exercises in its comment
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",  # GQA (4 heads over 2 kv heads), q/k/v/o biases
              dict(SMALL, num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "mistral": ("MistralConfig", "MistralForCausalLM",  # sliding window of 3 keys
                dict(SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=4, sliding_window=3)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",  # q/k/v biases, sliding layers
              dict(SMALL, num_attention_heads=2, num_key_value_heads=2, use_sliding_window=True, sliding_window=3,
                   max_window_layers=0)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",  # softcap, query_pre_attn_scalar, alternating windows
               dict(SMALL, num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=3,
                    attn_logit_softcapping=2.0, query_pre_attn_scalar=6)),
    "phi": ("PhiConfig", "PhiForCausalLM",  # partial rotary, q/k/v/dense biases
            dict(SMALL, num_attention_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                 "partial_rotary_factor": 0.5})),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",  # fused qkv_proj rows [q; k; v]
             dict(SMALL, num_attention_heads=4, num_key_value_heads=2)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",  # fused per-head [q_h; k_h; v_h], rotary_pct
                 dict(SMALL, num_attention_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                      "partial_rotary_factor": 0.5})),
    "gptj": ("GPTJConfig", "GPTJForCausalLM",  # interleaved rotary on the first rotary_dim dims
             dict(vocab_size=64, n_embd=16, n_head=2, n_layer=2, n_positions=64, rotary_dim=4, pad_token_id=0)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",  # Conv1D c_attn columns [q | k | v]
             dict(vocab_size=64, n_embd=16, n_head=2, n_layer=2, n_positions=64, pad_token_id=0)),
    "bert": ("BertConfig", "BertModel",  # bidirectional, post-norm: X is the layer's input
             dict(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=2, intermediate_size=32,
                  max_position_embeddings=64, pad_token_id=0)),
    "bert_decoder": ("BertConfig", "BertModel",  # is_decoder: BERT's layers made causal, with a cache
                     dict(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                          intermediate_size=32, max_position_embeddings=64, pad_token_id=0, is_decoder=True)),
    "bloom": ("BloomConfig", "BloomForCausalLM",  # ALiBi with 4 heads, fused per-head qkv
              dict(vocab_size=64, hidden_size=16, n_head=4, n_layer=2, pad_token_id=0)),
    "bloom6": ("BloomConfig", "BloomForCausalLM",  # ALiBi with 6 heads: 4 slopes, then every other of 8
               dict(vocab_size=64, hidden_size=24, n_head=6, n_layer=2, pad_token_id=0)),
    "phi_qk": ("PhiConfig", "PhiForCausalLM",  # Phi's qk_layernorm: a LayerNorm per head, with bias
               dict(SMALL, num_attention_heads=2, qk_layernorm=True)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",  # sinks, GQA, sliding layers (default RoPE here)
                dict(SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=4, sliding_window=3,
                     num_local_experts=2, num_experts_per_tok=1,
                     rope_parameters={"rope_type": "default", "rope_theta": 150000.0})),
}
NEEDS_QK_NORM = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=2,
                                                        head_dim=8)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=2)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(SMALL, num_attention_heads=2, num_key_value_heads=1,
                                                              head_dim=8, sliding_window=3)),
    "gemma3_mm": ("Gemma3Config", "Gemma3ForConditionalGeneration", dict(  # its text model, under language_model
        text_config=dict(SMALL, num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=3),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=16, patch_size=8), mm_tokens_per_image=4)),
}
# GPT-J computes Q Kᵀ in float32 whatever the dtype (its eager path casts).
TOLERANCE = {"gptj": 1e-6}
IDS = [[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5]]  # the second row is left-padded to the first's length


def test_every_registered_family_is_built_here():
    """Each record of the registry (attncli/capture/families.py) is captured by a test of this module."""
    from attncli.capture.families import FAMILIES as REGISTERED

    built = {getattr(transformers, config)(**settings).model_type
             for config, _, settings in (FAMILIES | NEEDS_QK_NORM).values()}
    assert set(REGISTERED) <= built, set(REGISTERED) - built


def build(family: str, path, spec=FAMILIES) -> str:
    config_name, model_name, settings = spec[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**settings)
    model = getattr(transformers, model_name)(config)
    with torch.no_grad():  # sinks and QK-norms start at 0 or 1: give them values that matter
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("sinks", "q_norm", "k_norm", "q_layernorm", "k_layernorm")):
                parameter.normal_()
    directory = path / family
    model.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each family's tiny model, saved and loaded back in float64, once."""
    root = tmp_path_factory.mktemp("models")
    return {family: load(build(family, root), "float64")[0] for family in FAMILIES}


def agreement(doc):
    trace = attend(build_problem(doc))
    return compare(doc, trace)


def assert_agrees(doc, family):
    found = agreement(doc)
    assert found.agrees, found.line()
    assert found.difference < TOLERANCE.get(family, 1e-12), found.line()
    return found


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("layer", [0, pytest.param(1, marks=pytest.mark.slow)])  # layer 1: in CI's slow run
def test_a_whole_sequence_agrees_with_the_model(models, family, layer):
    ids, mask = pad_left(IDS[:1], 0)
    doc = capture(models[family], ids, mask, layer, name=family)
    assert doc["model"] == {"name": family, "class": type(models[family]).__name__, "layer": layer}
    assert_agrees(doc, family)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_left_padded_row_agrees_with_the_model(models, family):
    ids, mask = pad_left(IDS, 0)
    doc = capture(models[family], ids, mask, 0, batch_index=1, name=family)
    assert doc["key_mask"] == [False] * 3 + [True] * 4
    assert doc["masked_rows"] == "uniform"
    assert_agrees(doc, family)


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"bert"}))
def test_a_decode_step_agrees_with_the_model(models, family):
    ids, mask = pad_left(IDS, 0)
    doc = capture(models[family], ids, mask, 0, batch_index=1, decode=True, name=family)
    assert len(doc["X"]) == 1 and doc["q_positions"] == [6]
    assert doc["k_positions"] == list(range(7 - len(doc["X_kv"]), 7))
    assert_agrees(doc, family)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_model_in_float32_agrees_too(models, family):
    """Without the float64 run's exact softmax, RoPE and norms (capture.exact_float64): the model's own
    float32 path, so that a patch that changed what the model computes cannot hide a misread layer."""
    model = copy.deepcopy(models[family]).to(torch.float32)
    ids, mask = pad_left(IDS, 0)
    found = agreement(capture(model, ids, mask, 0, batch_index=1))
    assert found.agrees and found.dtype == "float32", found.line()


def test_each_family_writes_its_variants(models):
    """What each family's document holds: the keys that make it that family."""
    ids, mask = pad_left(IDS[:1], 0)
    docs = {family: capture(models[family], ids, mask, 0) for family in FAMILIES}
    assert docs["gemma2"]["softcap"] == 2.0 and docs["gemma2"]["scale"] == 6 ** -0.5
    assert docs["gemma2"]["window"] == [2, 0] and docs["mistral"]["window"] == [2, 0]
    assert docs["bloom"]["alibi"] is True and "rope" not in docs["bloom"]
    assert docs["gptj"]["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 4}
    assert docs["gpt_neox"]["rope"]["dims"] == 4 and docs["phi"]["rope"]["dims"] == 4
    assert docs["llama"]["rope"]["base"] == 500000.0 and "b_O" in docs["llama"]
    assert len(docs["gpt_oss"]["sinks"]) == 4
    assert "causal" not in docs["bert"] and docs["gpt2"]["causal"] is True and docs["bert_decoder"]["causal"] is True
    for family in ("llama", "gpt_oss", "phi3"):  # GQA: 4 query heads over 2 kv heads of width 4
        assert docs[family]["kv_heads"] == 2 and len(docs[family]["W_K"][0]) == 8 and len(docs[family]["W_Q"][0]) == 16
    assert "kv_heads" not in docs["qwen2"] and "kv_heads" not in docs["gpt2"]


def test_the_reference_of_a_float64_run_says_float32_where_the_model_computes_in_float32(models):
    """Mutation round 4: the reference's dtype is the model's (float64) even for GPT-J, whose eager
    path computes Q Kᵀ in float32 (FLOAT32_INSIDE): the agreement would hold it to 1e-9."""
    ids, mask = pad_left(IDS[:1], 0)
    assert capture(models["gptj"], ids, mask, 0)["reference"]["dtype"] == "float32"
    assert capture(models["llama"], ids, mask, 0)["reference"]["dtype"] == "float64"


def test_float32_agrees_to_float32_rounding(models, tmp_path):
    """The model in float32 (its own dtype): agreement within 1e-5 of each stage's scale, and the line says so."""
    directory = build("llama", tmp_path)
    model = load(directory, None)[0]
    ids, mask = pad_left(IDS[:1], 0)
    found = agreement(capture(model, ids, mask, 0, name="tiny"))
    assert found.agrees and 0 < found.difference < 1e-5
    assert found.line().startswith("agrees with tiny layer 0 to ") and found.line().endswith(
        "(the model computes in float32)")


def test_a_wrong_weight_is_named_with_its_head_row_and_key(models):
    ids, mask = pad_left(IDS[:1], 0)
    doc = capture(models["llama"], ids, mask, 0, name="tiny")
    doc["reference"]["weights"][1][2][0] += 0.01
    found = agreement(doc)
    assert not found.agrees
    assert found.line().startswith("differs from tiny layer 0: weights, head 1, row 2, column 0: attncli ")
    doc = capture(models["llama"], ids, mask, 0, name="tiny")
    doc["W_O"][0][3] += 0.01  # the output alone differs
    assert agreement(doc).first["stage"] == "output"


def test_phi3s_sliding_window_from_its_config_is_captured(tmp_path):
    """Mutation round 4 found it: Phi-3 (as Mistral) keeps its sliding window in the config alone
    (Phi-3-mini: 2047 keys) and masks by it; the capture read it for Mistral only."""
    spec = {"phi3": ("Phi3Config", "Phi3ForCausalLM", dict(SMALL, num_attention_heads=4, num_key_value_heads=2,
                                                            sliding_window=3))}
    model = load(build("phi3", tmp_path, spec), "float64")[0]
    ids, mask = pad_left(IDS, 0)
    doc = capture(model, ids, mask, 0)
    assert doc["window"] == [2, 0]
    assert_agrees(doc, "phi3")


@pytest.mark.parametrize("family", sorted(NEEDS_QK_NORM))
def test_qk_norm_families_agree(tmp_path, family):
    if family.startswith("gemma3") and not hasattr(transformers, "Gemma3TextConfig"):
        pytest.skip("Gemma 3 is not in the installed transformers")
    model = load(build(family, tmp_path, NEEDS_QK_NORM), "float64")[0]
    ids, mask = pad_left(IDS, 0)
    for index, decode in ((0, False), (1, False), (1, True)):
        assert_agrees(capture(model, ids, mask, 0, index, decode), family)
    found = agreement(capture(model.to(torch.float32), ids, mask, 0, 1))  # the model's own float32 norms
    assert found.agrees and found.dtype == "float32", found.line()


SCALINGS = {  # head_dim 4 in the tiny Llama: 2 rotated pairs
    "linear": {"factor": 2.0},
    "dynamic": {"factor": 2.0},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0},
    "longrope": {"short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0], "original_max_position_embeddings": 4,
                 "factor": 4.0},
}


@pytest.mark.parametrize("kind", [kind if kind in ("yarn", "longrope") else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in sorted(SCALINGS)])  # the others in CI's slow run
def test_rope_scaling_agrees(tmp_path, kind):
    """Each RoPE scaling type (llama3's bands, yarn's attention factor, longrope's long factors: the
    sequence is longer than original_max_position_embeddings) with a decode step; transformers computes
    the scaled frequencies in float32, so the agreement is float32's."""
    parameters = {"rope_type": kind, "rope_theta": 10000.0, **SCALINGS[kind]}
    settings = dict(FAMILIES["llama"][2], rope_parameters=parameters)
    model = load(build("llama", tmp_path, {"llama": ("LlamaConfig", "LlamaForCausalLM", settings)}), "float64")[0]
    ids, mask = pad_left(IDS, 0)
    for index, decode in ((0, False), (1, True)):
        doc = capture(model, ids, mask, 0, index, decode)
        assert doc["rope"]["scaling"]["rope_type"] == kind
        assert agreement(doc).difference < 1e-6, agreement(doc).line()


def test_a_model_type_without_a_family_is_refused_before_loading(tmp_path, run):
    """T5 (relative position bias, no 1/√d scale) has no capture family yet: one error naming its
    model type, before the model is loaded."""
    config = transformers.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5")
    with pytest.raises(CaptureError, match='model type "t5" has no capture family'):
        load(str(tmp_path / "t5"), "float64")
    result = run("capture", tmp_path / "t5", "--ids", "1,2")
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {tmp_path / 't5' / 'config.json'}: model type ")
    assert result.stderr.count("\n") == 1  # the error alone: no warning before it


def test_a_layer_past_the_last_is_refused(models):
    ids, mask = pad_left(IDS[:1], 0)
    with pytest.raises(CaptureError, match="layer is 2; expected 0 to 1 \\(2 layers\\)"):
        capture(models["llama"], ids, mask, 2)


def test_every_stage_of_a_captured_layer_is_shown_explained_and_checked(tmp_path, run):
    """Qwen3's layer (QK-norm, RoPE, GQA off): every stage in the JSON, --explain of one row, the JSON
    marked by attn check as all right, and the tiles agreeing."""
    model = load(build("qwen3", tmp_path, NEEDS_QK_NORM), "float64")[0]
    ids, mask = pad_left(IDS[:1], 0)
    problem = tmp_path / "layer.json"
    problem.write_text(json.dumps(capture(model, ids, mask, 0, name="qwen3")))
    computed = run("compute", problem, "--format", "json")
    assert computed.exit_code == 0, computed.stderr
    heads = json.loads(computed.stdout)["heads"]
    assert {"Q_normed", "K_normed", "Q_rope", "K_rope", "scores", "weights", "output"} <= set(heads[0])
    answers = tmp_path / "answers.json"
    answers.write_text(computed.stdout)
    checked = run("check", problem, answers, "--format", "json")
    assert checked.exit_code == 0, checked.stdout[-400:] + checked.stderr
    explained = run("compute", problem, "--explain", "--row", "3", "--head", "1", "--stages", "weights",
                    "--format", "table")
    assert explained.exit_code == 0 and "q_norm" in explained.stdout.lower()
    assert explained.stdout.strip().splitlines()[-1].startswith("agrees with qwen3 layer 0 to ")
    tiled = run("compute", problem, "--tiles", "2,4", "--format", "json")
    assert tiled.exit_code == 0 and json.loads(tiled.stdout)["tiled_max_difference"] < 1e-12


SMALL_SCALED = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=32,
                    max_position_embeddings=64, pad_token_id=0)
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.2, 1.3],
            "long_factor": [2.0, 3.0, 4.0, 5.0]}


def _saved_scaled(tmp_path, config, model_class):
    torch.manual_seed(1)
    model = model_class(config)
    with torch.no_grad():  # weights large enough that float32 frequencies show past float64's tolerance
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(5.0)
    model.save_pretrained(tmp_path / "model")
    return load(str(tmp_path / "model"), "float64")[0]


def test_a_float64_capture_with_scaled_rope_says_float32_and_agrees(tmp_path):
    """Found by an engineer's trial of `attn capture`: a float64 capture of a layer with scaled RoPE says
    float32 (transformers computes the scaled frequencies in float32 whatever the dtype), so that it
    agrees instead of failing at float64's tolerance."""
    config = transformers.Phi3Config(**SMALL_SCALED, num_key_value_heads=2, original_max_position_embeddings=4,
                                     rope_parameters=LONGROPE)
    model = _saved_scaled(tmp_path, config, transformers.Phi3ForCausalLM)
    ids, mask = pad_left([[3, 1, 4, 1, 5, 9, 2, 6]], 0)
    for decode in (False, True):
        doc = capture(model, ids, mask, decode=decode)
        found = compare(doc, attend(build_problem(doc)))
        assert doc["reference"]["dtype"] == "float32"
        assert found.agrees and found.difference > 1e-12, found.line()


def test_decode_on_an_encoder_is_refused(tmp_path):
    """Found by an engineer's trial of `attn capture`: --decode on an encoder is refused, not captured as a
    one-token sequence or a torch error."""
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                     intermediate_size=32, max_position_embeddings=64, pad_token_id=0)
    model = _saved_scaled(tmp_path, config, transformers.BertModel)
    for rows in ([[3, 1, 4, 1]], [[3, 1, 4, 1], [7, 5]]):
        ids, mask = pad_left(rows, 0)
        with pytest.raises(CaptureError, match="decode is a step of a causal model's generation, but BERT is an "
                                               "encoder"):
            capture(model, ids, mask, batch_index=len(rows) - 1, decode=True)


@pytest.mark.parametrize("kind, parameters, edge", [
    ("longrope", LONGROPE, dict(original_max_position_embeddings=4)),
    ("dynamic", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, dict(max_position_embeddings=4))])
def test_decode_past_a_length_that_changes_the_scaling_is_refused(tmp_path, kind, parameters, edge):
    """The model rotates the cached keys at one length's frequencies and the step's query at the next
    one's: refused with the reason, where before the agreement line named a cell that differed. A
    decode step that stays on one side agrees, as does the whole sequence."""
    settings = dict(SMALL_SCALED, num_key_value_heads=2, rope_parameters=parameters) | edge
    config_class, model_class = (transformers.Phi3Config, transformers.Phi3ForCausalLM) if kind == "longrope" else \
        (transformers.LlamaConfig, transformers.LlamaForCausalLM)
    model = _saved_scaled(tmp_path, config_class(**settings), model_class)
    ids, mask = pad_left([[3, 1, 4, 1, 5, 9]], 0)
    with pytest.raises(CaptureError, match=f"decode with {kind} RoPE past "):
        capture(model, [ids[0][:5]], [mask[0][:5]], decode=True)
    for doc in (capture(model, [ids[0][:4]], [mask[0][:4]], decode=True), capture(model, ids, mask)):
        found = compare(doc, attend(build_problem(doc)))
        assert found.agrees, found.line()
