"""`attn capture`: one layer of each family's tiny random model (built from its config here, no
network), captured in float64, recomputed by attncli and compared with the model's own eager
attention weights and o_proj output: a whole sequence, a left-padded batch row, and a decode step;
and the families attncli cannot express refused before anything is written, with the reason.

Each model is built once per module, when first used (`models`). The fast suite captures one
left-padded row of each family but those whose layout another one has (SAME_LAYOUT), in float64 (at
the layer that makes it that family: SmolLM3's layer without RoPE, say); the
slow profile (`-m slow`, as CI runs it) adds the whole sequence at layers 0 and 1, a decode step
against the cache and the model's own float32, and three RoPE scaling types."""

import copy
import json

import pytest

from tests.conftest import MODELS, Lazy, fast_sample

pytestmark = MODELS
torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs
capture, capture_layers, listed, pad_left = (Lazy("attncli.capture.driver", name)
                                             for name in ("capture", "capture_layers", "listed", "pad_left"))
load = Lazy("attncli.capture.loading", "load")

from attncli.capture.families import FAMILIES as REGISTERED  # noqa: E402
from attncli.capture.families import CaptureError  # noqa: E402
from attncli.compute.attention import attend  # noqa: E402
from attncli.document.agreement import compare  # noqa: E402
from attncli.document.reading import build_problem  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, intermediate_size=32, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
GPT = dict(vocab_size=64, n_embd=16, n_head=2, n_layer=2, n_positions=64, pad_token_id=0, bos_token_id=1,
           eos_token_id=2)
ENCODER = dict(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=2, intermediate_size=32,
               max_position_embeddings=64, pad_token_id=0)
GQA = dict(SMALL, num_attention_heads=4, num_key_value_heads=2)
HALF_ROTARY = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
FALCON = dict(vocab_size=64, hidden_size=16, num_attention_heads=4, num_hidden_layers=2, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)
LATENT = dict(GQA, num_key_value_heads=4, kv_lora_rank=8, q_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4,
              v_head_dim=2, n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=8, first_k_dense_replace=1)
T5_SIZES = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
                relative_attention_max_distance=12, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
SEQ2SEQ_SIZES = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
SPECIAL_IDS = dict(bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
# family: (config class, model class, settings) — the variants each one exercises in its comment
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",  # GQA (4 heads over 2 kv heads), q/k/v/o biases
              dict(GQA, attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "mistral": ("MistralConfig", "MistralForCausalLM",  # sliding window of 3 keys
                dict(GQA, head_dim=4, sliding_window=3)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",  # q/k/v biases, sliding layers
              dict(SMALL, num_attention_heads=2, num_key_value_heads=2, use_sliding_window=True, sliding_window=3,
                   max_window_layers=0)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",  # softcap, query_pre_attn_scalar, alternating windows
               dict(SMALL, num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=3,
                    attn_logit_softcapping=2.0, query_pre_attn_scalar=6)),
    "phi": ("PhiConfig", "PhiForCausalLM",  # partial rotary, q/k/v/dense biases
            dict(SMALL, num_attention_heads=2, rope_parameters=HALF_ROTARY)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",  # fused qkv_proj rows [q; k; v]
             dict(GQA)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",  # fused per-head [q_h; k_h; v_h], rotary_pct
                 dict(SMALL, num_attention_heads=2, rope_parameters=HALF_ROTARY)),
    "gptj": ("GPTJConfig", "GPTJForCausalLM",  # interleaved rotary on the first rotary_dim dims
             dict(GPT, rotary_dim=4)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",  # Conv1D c_attn columns [q | k | v]
             dict(GPT)),
    "bert": ("BertConfig", "BertModel",  # bidirectional, post-norm: X is the layer's input
             dict(ENCODER)),
    "bert_decoder": ("BertConfig", "BertModel",  # is_decoder: BERT's layers made causal, with a cache
                     dict(ENCODER, is_decoder=True)),
    "bloom": ("BloomConfig", "BloomForCausalLM",  # ALiBi with 4 heads, fused per-head qkv
              dict(vocab_size=64, hidden_size=16, n_head=4, n_layer=2, pad_token_id=0)),
    "bloom6": ("BloomConfig", "BloomForCausalLM",  # ALiBi with 6 heads: 4 slopes, then every other of 8
               dict(vocab_size=64, hidden_size=24, n_head=6, n_layer=2, pad_token_id=0)),
    "phi_qk": ("PhiConfig", "PhiForCausalLM",  # Phi's qk_layernorm: a LayerNorm per head, with bias
               dict(SMALL, num_attention_heads=2, qk_layernorm=True)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",  # sinks, GQA, sliding layers (default RoPE here)
                dict(GQA, head_dim=4, sliding_window=3, num_local_experts=2, num_experts_per_tok=1,
                     rope_parameters={"rope_type": "default", "rope_theta": 150000.0})),
    # issue 27: every architecture right, or refused with the reason
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",  # the config's window, experts after the attention
                dict(GQA, sliding_window=3, num_local_experts=2, num_experts_per_tok=1)),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM",  # the config's window, biases
                   dict(GQA, sliding_window=3)),
    "helium": ("HeliumConfig", "HeliumForCausalLM",  # interleaved RoPE
               dict(GQA, head_dim=4)),
    "glm": ("GlmConfig", "GlmForCausalLM",  # interleaved RoPE on half of each head
            dict(GQA, head_dim=8)),
    "glm4": ("Glm4Config", "Glm4ForCausalLM",  # the same, with norms after the attention
             dict(GQA, head_dim=8)),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM",  # interleaved RoPE, rotated in float32
                 dict(GQA, head_dim=4)),
    "cohere": ("CohereConfig", "CohereForCausalLM",  # interleaved RoPE, parallel block
               dict(GQA)),
    "cohere_qk": ("CohereConfig", "CohereForCausalLM",  # QK-norm: a LayerNorm per head with a (heads × d) weight
                  dict(GQA, use_qk_norm=True)),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM",  # layer 1 full attention without RoPE
                dict(GQA, sliding_window=3, layer_types=["sliding_attention", "full_attention"])),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",  # layer 1 without RoPE
                dict(GQA, no_rope_layer_interval=2)),
    "exaone4": ("Exaone4Config", "Exaone4ForCausalLM",  # layer 0 sliding with RoPE, layer 1 global without
                dict(GQA, head_dim=4, sliding_window=3, sliding_window_pattern=2)),
    "stablelm_qk": ("StableLmConfig", "StableLmForCausalLM",  # one LayerNorm per head, partial rotary
                    dict(GQA, qk_layernorm=True, rope_parameters=HALF_ROTARY)),
    "opt": ("OPTConfig", "OPTForCausalLM",  # learned positions, Q scaled first, out_proj
            dict(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=2, ffn_dim=32,
                 max_position_embeddings=64, word_embed_proj_dim=16, pad_token_id=1, bos_token_id=2,
                 eos_token_id=2)),
    "roberta": ("RobertaConfig", "RobertaModel", dict(ENCODER, bos_token_id=1, eos_token_id=2)),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel", dict(ENCODER, bos_token_id=1, eos_token_id=2)),
    "electra": ("ElectraConfig", "ElectraModel", dict(ENCODER, embedding_size=8)),  # embeddings projected up
    "albert": ("AlbertConfig", "AlbertModel",  # 2 layers over 1 shared module: layer 1 is its second call
               dict(ENCODER, embedding_size=8, bos_token_id=1, eos_token_id=2)),
    "distilbert": ("DistilBertConfig", "DistilBertModel",  # q_lin, k_lin, v_lin, out_lin
                   dict(vocab_size=64, dim=16, n_heads=2, n_layers=2, hidden_dim=32, max_position_embeddings=64,
                        pad_token_id=0)),
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM",  # 4-shard [q | v | k], interleaved rotary_dim
                dict(GPT, n_head=4, rotary_dim=2)),
    "falcon": ("FalconConfig", "FalconForCausalLM",  # rotary, per-head [q_h; k_h; v_h]
               dict(FALCON, multi_query=False)),
    "falcon_alibi": ("FalconConfig", "FalconForCausalLM",  # ALiBi in bfloat16 ÷ √d, 4 heads: exact
                     dict(FALCON, alibi=True)),
    "falcon_alibi6": ("FalconConfig", "FalconForCausalLM",  # ALiBi with 6 heads (bfloat16 slopes, exact here)
                      dict(FALCON, hidden_size=24, num_attention_heads=6, alibi=True)),
    "falcon_mq": ("FalconConfig", "FalconForCausalLM",  # multi_query: [q; k; v] with one kv head
                  dict(FALCON, multi_query=True)),
    "falcon_new": ("FalconConfig", "FalconForCausalLM",  # new_decoder_architecture: per kv head [q q; k; v]
                   dict(FALCON, num_kv_heads=2, new_decoder_architecture=True)),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM",  # multi-query c_attn
                    dict(GPT, n_head=4)),
    "gpt_bigcode_mha": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM",  # multi_query off: c_attn per head [q_h; k_h; v_h]
                        dict(GPT, n_head=4, multi_query=False)),
    "mpt": ("MptConfig", "MptForCausalLM",  # ALiBi, fused Wqkv
            dict(vocab_size=64, d_model=16, n_heads=4, n_layers=2, max_seq_len=64, pad_token_id=0)),
    "mpt6": ("MptConfig", "MptForCausalLM",  # 6 heads: MPT's own slopes (odd, then even, of 8)
             dict(vocab_size=64, d_model=24, n_heads=6, n_layers=2, max_seq_len=64, pad_token_id=0)),
    "dbrx": ("DbrxConfig", "DbrxForCausalLM",  # fused Wqkv, GQA, a clip_qkv that never bites
             dict(vocab_size=64, d_model=16, n_heads=4, n_layers=2, max_seq_len=64, pad_token_id=0,
                  attn_config=dict(kv_n_heads=2, clip_qkv=100.0, rope_theta=10000.0),
                  ffn_config=dict(ffn_hidden_size=32, moe_num_experts=2, moe_top_k=1))),
    "olmo": ("OlmoConfig", "OlmoForCausalLM",  # a clip_qkv that never bites
             dict(GQA, clip_qkv=100.0)),
    "xglm": ("XGLMConfig", "XGLMForCausalLM",  # sinusoidal positions, Q scaled first (float32 only)
             dict(vocab_size=64, d_model=16, attention_heads=4, num_layers=2, ffn_dim=32, max_position_embeddings=64,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    "modernbert": ("ModernBertConfig", "ModernBertModel",  # layer 1 local: |i − j| ≤ 2
                   dict(ENCODER, num_hidden_layers=3, local_attention=4, global_attn_every_n_layers=2,
                        **SPECIAL_IDS)),
    "llama4_text": ("Llama4TextConfig", "Llama4ForCausalLM",  # layer 0 RoPE + weightless QK-norm, layer 1 NoPE
                    dict(GQA, head_dim=4, num_local_experts=2, intermediate_size_mlp=32, attention_chunk_size=64,
                         no_rope_layer_interval=2)),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM",  # latent attention, complex RoPE, d_v 2
                    dict(LATENT)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",  # latent attention, interleaved RoPE
                    dict(LATENT, n_group=1, topk_group=1)),
    "t5": ("T5Config", "T5ForConditionalGeneration",  # relative position bias by buckets, scale 1
           dict(T5_SIZES)),
    "bart": ("BartConfig", "BartForConditionalGeneration",  # encoder-decoder, learned positions
             dict(SEQ2SEQ_SIZES)),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration", dict(SEQ2SEQ_SIZES, scale_embedding=True)),  # pre-norm
    "marian": ("MarianConfig", "MarianMTModel", dict(SEQ2SEQ_SIZES, decoder_start_token_id=0)),  # sinusoidal
    "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration", dict(SEQ2SEQ_SIZES)),  # sinusoidal, pre-norm
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", dict(SEQ2SEQ_SIZES)),  # sinusoidal, pre-norm
    "plbart": ("PLBartConfig", "PLBartForConditionalGeneration", dict(SEQ2SEQ_SIZES)),
    "blenderbot": ("BlenderbotConfig", "BlenderbotForConditionalGeneration", dict(SEQ2SEQ_SIZES)),
    "blenderbot-small": ("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", dict(SEQ2SEQ_SIZES)),
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", dict(T5_SIZES)),  # T5's attention, gated feed-forward
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", dict(T5_SIZES)),  # each layer its own relative bias
    "whisper": ("WhisperConfig", "WhisperForConditionalGeneration",  # an audio encoder: 6 frames of noise features
                dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
                     max_source_positions=6, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                     decoder_start_token_id=1)),
}
# their decoder's self-attention (--decoder) and cross-attention (--cross)
SEQ2SEQ = ("t5", "bart", "whisper", "mbart", "marian", "m2m_100", "pegasus", "plbart", "blenderbot",
           "blenderbot-small", "mt5", "umt5")
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
# The families attncli cannot express (yet), each refused before writing: (config class, model class,
# settings, the words of the refusal). Refused at the directory (the record's `cannot`) or by a limit
# the document reaches (the record's `limits`, or a dtype transformers cannot run the model in).
REFUSED = {
    "hunyuan_v1_dense": ("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", dict(GQA, head_dim=4),
                         "normalises Q and K (query_layernorm, key_layernorm) after RoPE"),
    "diffllama": ("DiffLlamaConfig", "DiffLlamaForCausalLM", dict(GQA), "computes differential attention"),
    "bitnet": ("BitNetConfig", "BitNetForCausalLM", dict(GQA), "normalises the heads' output (attn_sub_norm"),
    "jetmoe": ("JetMoeConfig", "JetMoeForCausalLM",
               dict(GQA, kv_channels=4, num_local_experts=2, num_experts_per_tok=1),
               "picks each token's query and output projections among experts"),
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", dict(ENCODER, relative_attention=True,
                                                             pos_att_type=["p2c", "c2p"]),
                   "adds disentangled relative-position scores"),
    "olmo_clip": ("OlmoConfig", "OlmoForCausalLM", dict(GQA, clip_qkv=0.01),
                  "clamps Q, K and V to ±0.01 (clip_qkv), which changes"),
    "mpt_clip": ("MptConfig", "MptForCausalLM", dict(FAMILIES["mpt"][2], attn_config=dict(clip_qkv=0.01)),
                 "clamps Q, K and V to ±0.01 (attn_config.clip_qkv)"),
    "falcon_alibi32": ("FalconConfig", "FalconForCausalLM", dict(FALCON, hidden_size=64,
                                                                 num_attention_heads=32, alibi=True),
                       "rounds its ALiBi terms slope · j to bfloat16 (head 0: 2.51953125 at key position 3"),
    "llama4_chunk": ("Llama4TextConfig", "Llama4ForCausalLM", dict(FAMILIES["llama4_text"][2], attention_chunk_size=3),
                     "attends in chunks of 3 tokens (attention_chunk_size), and these 7 positions cross a chunk"),
}
# The layer that makes a family that family, captured by the fast suite (else layer 0).
LAYER = {"cohere2": 1, "smollm3": 1, "exaone4": 1, "albert": 1, "modernbert": 1, "llama4_text": 1, "umt5": 1}
FLOAT32_ONLY = {"xglm"}  # transformers' XGLM cannot run in float64 (refused: test_capture_refusals)
UNPADDED_IN_FLOAT64 = {"mpt", "mpt6"}  # MPT's own padded rows are NaN in float64 (refused, with the reason)
IDS = [[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5]]  # the second row is left-padded to the first's length
# Families whose layout and variants a family of the fast suite already has (RoBERTa's is BERT's, mBART's
# BART's, Mixtral's Llama's, GLM's interleaved RoPE GPT-J's and CodeGen's, …): the fast suite captures
# the others, the slow profile every family.
SAME_LAYOUT = {"mixtral", "starcoder2", "olmo", "helium", "glm", "glm4", "ernie4_5", "cohere", "smollm3", "stablelm_qk",
               "roberta", "xlm-roberta", "electra", "falcon_alibi6", "mpt6", "gpt_bigcode_mha", "mbart", "marian",
               "m2m_100", "pegasus", "plbart", "blenderbot", "blenderbot-small", "mt5"}


def test_every_registered_family_is_built_here():
    """Each record of the registry (attncli/capture/families.py) is captured, or refused, by a test of
    this module."""
    built = {getattr(transformers, config)(**settings).model_type
             for config, _, settings, *_ in (FAMILIES | NEEDS_QK_NORM | REFUSED).values()}
    assert set(REGISTERED) <= built, set(REGISTERED) - built


def build(family: str, path, spec=FAMILIES) -> str:
    config_name, model_name, settings, *_ = spec[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**settings)
    model = getattr(transformers, model_name)(config)
    with torch.no_grad():  # sinks and norms start at 0 or 1: give them values that matter
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("sinks", "q_norm", "k_norm", "q_layernorm", "k_layernorm",
                                             "_a_layernorm")):
                parameter.normal_()
    directory = path / family
    model.save_pretrained(directory)
    return str(directory)


class Models(dict):
    """Each family's tiny model, saved and loaded back in float64 (XGLM in float32), built when a test
    first asks for it (the fast suite builds only the families it captures)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, family):
        self[family] = load(build(family, self.root), "float32" if family in FLOAT32_ONLY else "float64")[0]
        return self[family]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return Models(tmp_path_factory.mktemp("models"))


def agreement(doc):
    trace = attend(build_problem(doc))
    return compare(doc, trace)


def assert_agrees(doc, family=None):
    """Agreement to float64's precision (1e-12), or to float32's where the model computes part of the
    layer in float32 whatever the dtype (its reference says so)."""
    found = agreement(doc)
    assert found.agrees, found.line()
    assert found.difference < (1e-6 if doc["reference"]["dtype"] == "float32" else 1e-12), found.line()
    return found


def _rows(family: str) -> int:
    return 0 if family in UNPADDED_IN_FLOAT64 else 1


@pytest.mark.parametrize("family", fast_sample(sorted(FAMILIES), *sorted(set(FAMILIES) - SAME_LAYOUT)))
def test_each_family_agrees_with_the_model(models, family):
    """The fast suite's one capture per family: a left-padded row (padding keys masked, the padded queries'
    uniform rows) in float64, at the layer that makes the family what it is."""
    ids, mask = pad_left(IDS, 0)
    doc = capture(models[family], ids, mask, LAYER.get(family, 0), batch_index=_rows(family), name=family)
    assert doc["model"] == {"name": family, "class": type(models[family]).__name__, "layer": LAYER.get(family, 0)}
    assert_agrees(doc, family)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("layer", [0, 1])
def test_a_whole_sequence_agrees_with_the_model(models, family, layer):
    ids, mask = pad_left(IDS[:1], 0)
    assert_agrees(capture(models[family], ids, mask, layer, name=family), family)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(set(FAMILIES) - UNPADDED_IN_FLOAT64))
def test_a_left_padded_row_agrees_with_the_model(models, family):
    ids, mask = pad_left(IDS, 0)
    doc = capture(models[family], ids, mask, 0, batch_index=1, name=family)
    if family == "whisper":  # its encoder reads mel features (a fixed input of noise), never padded ids
        assert "key_mask" not in doc and len(doc["X"]) == 6
    else:
        assert doc["key_mask"] == [False] * 3 + [True] * 4
        assert doc["masked_rows"] == "uniform"
    assert_agrees(doc, family)


ENCODERS = {"bert", "roberta", "xlm-roberta", "electra", "albert", "distilbert", "modernbert", *SEQ2SEQ}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(set(FAMILIES) - ENCODERS))
@pytest.mark.parametrize("layer", [0, 1])
def test_a_decode_step_agrees_with_the_model(models, family, layer):
    ids, mask = pad_left(IDS, 0)
    row = _rows(family)
    doc = capture(models[family], ids, mask, layer, batch_index=row, decode=True, name=family)
    assert doc["q_positions"] == [6] and doc["k_positions"][-1] == 6
    assert_agrees(doc, family)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_model_in_float32_agrees_too(models, family):
    """Without the float64 run's exact softmax, RoPE and norms (capture.exact_float64): the model's own
    float32 path, so that a patch that changed what the model computes cannot hide a misread layer."""
    model = copy.deepcopy(models[family]).to(torch.float32)
    ids, mask = pad_left(IDS, 0)
    found = agreement(capture(model, ids, mask, LAYER.get(family, 0), batch_index=1))
    assert found.agrees and found.dtype == "float32", found.line()


@pytest.mark.parametrize("family, part, decode", [("albert", "self", False), ("llama", "self", True),
                                                  ("t5", "cross", False), ("bart", "decoder", True)])
def test_several_layers_captured_together_are_each_layer_captured_alone(models, family, part, decode):
    """capture_layers over several layers (one run of the model; an encoder-decoder's, one run a layer)
    gives each layer the document capturing it alone gives, and it agrees: ALBERT's one shared module
    is layer i at its i-th call, a decode step's cache is the same layer's call of the run before."""
    ids, mask = pad_left(IDS, 0)
    docs = capture_layers(models[family], ids, mask, [0, 1], 1, decode, name=family, part=part)
    assert [doc["model"]["layer"] for doc in docs] == [0, 1]
    for layer, doc in enumerate(docs):
        alone = capture(models[family], ids, mask, layer, 1, decode, name=family, part=part)
        assert listed(doc) == alone
        assert_agrees(alone)
    if family == "albert":  # one module, two calls: not the same input twice
        assert listed(docs[0]["X"]) != listed(docs[1]["X"])


@pytest.mark.parametrize("family", fast_sample(SEQ2SEQ, *sorted(set(SEQ2SEQ) - SAME_LAYOUT)))
@pytest.mark.parametrize("part", ["decoder", "cross"])
def test_an_encoder_decoder_s_decoder_agrees(models, family, part):
    """The decoder's self-attention (causal; T5's causal buckets) and its cross-attention (Q from the
    decoder, K and V from the encoder's output as X_kv), on a left-padded row in float64."""
    ids, mask = pad_left(IDS, 0)
    doc = capture(models[family], ids, mask, 1, batch_index=1, name=family, part=part)
    assert doc["model"]["part"] == part and doc["title"] == f"{family} {part} layer 1 ({type(models[family]).__name__})"
    assert doc.get("causal", False) is (part == "decoder")
    if part == "cross":
        assert len(doc["X_kv"]) == (6 if family == "whisper" else 7) and len(doc["X"]) == 7
    found = assert_agrees(doc)
    assert found.line().startswith(f"agrees with {family} {'decoder' if part == 'decoder' else 'decoder cross-attention'}"
                                   " layer 1 to ")


@pytest.mark.slow
@pytest.mark.parametrize("family", SEQ2SEQ)
@pytest.mark.parametrize("part", ["decoder", "cross"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_encoder_decoder_s_decode_step_and_float32_agree(models, family, part, dtype):
    model = models[family] if dtype == "float64" else copy.deepcopy(models[family]).to(torch.float32)
    ids, mask = pad_left(IDS, 0)
    for layer, index, decode in ((0, 0, False), (0, 1, True), (1, 1, True)):
        doc = capture(model, ids, mask, layer, batch_index=index, decode=decode, part=part)
        assert agreement(doc).agrees, agreement(doc).line()


def test_t5_writes_its_relative_bias_and_scale_one(models):
    ids, mask = pad_left(IDS[:1], 0)
    encoder, decoder = (capture(models["t5"], ids, mask, 1, part=part) for part in ("self", "decoder"))
    cross = capture(models["t5"], ids, mask, 1, part="cross")
    assert encoder["scale"] == decoder["scale"] == cross["scale"] == 1.0
    assert encoder["relative_bias"]["bidirectional"] is True and decoder["relative_bias"]["bidirectional"] is False
    assert encoder["relative_bias"]["buckets"] == 8 and encoder["relative_bias"]["max_distance"] == 12
    assert len(encoder["relative_bias"]["embedding"]) == 8 and len(encoder["relative_bias"]["embedding"][0]) == 4
    assert encoder["relative_bias"]["embedding"] != decoder["relative_bias"]["embedding"]  # each stack its own
    assert "relative_bias" not in cross and "causal" not in encoder and decoder["causal"] is True


def test_decoder_and_cross_are_refused_where_they_do_not_apply(run, models, tmp_path):
    ids, mask = pad_left(IDS[:1], 0)
    with pytest.raises(CaptureError, match=r"Llama has no decoder: the decoder's self-attention and its cross-attention "
                                           r"are an encoder-decoder model's \(T5, BART, mBART, Marian \(Opus-MT\), "
                                           r"M2M-100, Pegasus, PLBART, Blenderbot, Blenderbot Small, mT5, UMT5, Whisper\)"):
        capture(models["llama"], ids, mask, 0, part="cross")
    directory = build("t5", tmp_path)
    assert_error_line = run("capture", directory, "--ids", "3,1", "--decoder", "--cross")
    assert assert_error_line.exit_code == 2 and "--cross: --decoder and --cross are both given" in assert_error_line.stderr
    out = tmp_path / "cross.json"
    captured = run("capture", directory, "--ids", "3,1,4,1,5; 9,2", "--batch-index", "1", "--cross", "--decode",
                   "--dtype", "float64", "-o", out)
    assert captured.exit_code == 0, captured.stderr
    computed = run("compute", out, "--format", "json")
    assert computed.exit_code == 0, computed.stderr
    assert json.loads(computed.stdout)["agreement"]["difference"] < 1e-12


def test_a_decoder_s_layers_are_the_decoder_s_own_on_the_command_line(run, tmp_path):
    """--cross with --layer all: the decoder's layers as the loaded model has them (here 3, over an
    encoder of 2), in one document that names the part and reads back, every layer agreeing; a
    decoder layer past them is refused by --layer."""
    directory = build("bart", tmp_path, {"bart": ("BartConfig", "BartForConditionalGeneration",
                                                  dict(SEQ2SEQ_SIZES, decoder_layers=3))})
    out = tmp_path / "cross.json"
    result = run("capture", directory, "--ids", "3,1,4,1,5", "--cross", "--layer", "all", "--dtype", "float64",
                 "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == f"wrote {out}: cross layers 0-2 of bart, 5 queries; attn compute {out}"
    doc = json.loads(out.read_text())
    assert doc["title"] == "bart cross layers 0-2 (BartForConditionalGeneration)"
    assert [entry["model"] for entry in doc["layers"]] == [{"layer": n, "part": "cross"} for n in range(3)]
    computed = run("compute", out, "--format", "json")
    assert computed.exit_code == 0, computed.stderr
    lines = computed.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"agrees with bart decoder cross-attention layer {n} to ")
                                   for n, line in enumerate(lines)), lines
    refused = run("capture", directory, "--ids", "3,1", "--decoder", "--layer", "3")
    assert refused.exit_code == 2 and refused.stderr == "error: --layer: is '3', but there are 3 layers (0 to 2)\n"


class Captured(dict):
    """Each family's document, captured when first looked up."""

    def __init__(self, capture_one):
        super().__init__()
        self.capture_one = capture_one

    def __missing__(self, family):
        assert family in FAMILIES, family
        self[family] = self.capture_one(family)
        return self[family]


def test_each_family_writes_its_variants(models):
    """What each family's document holds: the keys that make it that family."""
    ids, mask = pad_left(IDS[:1], 0)
    docs = Captured(lambda family: capture(models[family], ids, mask, LAYER.get(family, 0)))
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
    # issue 27's families
    for family in ("mixtral", "starcoder2"):
        assert docs[family]["window"] == [2, 0]
    for family in ("helium", "glm", "glm4", "ernie4_5", "cohere", "codegen"):
        assert docs[family]["rope"]["style"] == "interleaved", family
    assert docs["glm"]["rope"]["dims"] == 4 and docs["codegen"]["rope"]["dims"] == 2
    for family in ("cohere2", "smollm3", "exaone4"):  # the layers without RoPE
        assert "rope" not in docs[family] and "window" not in docs[family], family
    assert len(docs["cohere_qk"]["q_norm"]["weight"]) == 4 and len(docs["cohere_qk"]["k_norm"]["weight"]) == 2
    assert docs["cohere_qk"]["q_norm"]["type"] == "layer" and len(docs["stablelm_qk"]["k_norm"]["weight"][0]) == 4
    assert docs["falcon_mq"]["kv_heads"] == 1 and docs["gpt_bigcode"]["kv_heads"] == 1
    assert docs["falcon_new"]["kv_heads"] == 2 and "rope" not in docs["falcon_alibi"]
    assert docs["falcon_alibi"]["alibi"] == [0.25 / 2, 0.0625 / 2, 0.015625 / 2, 0.00390625 / 2]  # ÷ √4
    assert docs["mpt"]["alibi"] == [0.25, 0.0625, 0.015625, 0.00390625]
    assert docs["mpt6"]["alibi"] == [2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]  # of 8 slopes: the odd ones first
    assert docs["modernbert"]["window"] == [2, 2] and "causal" not in docs["modernbert"]
    assert docs["llama4_text"].get("q_norm") is None and "rope" not in docs["llama4_text"]  # layer 1: NoPE
    assert len(docs["deepseek_v3"]["Q"]) == 4 and "X" not in docs["deepseek_v3"]
    assert docs["deepseek_v3"]["description"].startswith("Q, K, V: DeepSeek's multi-head latent attention")
    assert docs["deepseek_v2"]["rope"]["dims"] == 4 and len(docs["deepseek_v2"]["V"][0][0]) == 2


def test_the_reference_of_a_float64_run_says_float32_where_the_model_computes_in_float32(models):
    """Mutation round 4: the reference's dtype is the model's (float64) even for GPT-J, whose eager
    path computes Q Kᵀ in float32 (FLOAT32_INSIDE): the agreement would hold it to 1e-9."""
    ids, mask = pad_left(IDS[:1], 0)
    assert capture(models["gptj"], ids, mask, 0)["reference"]["dtype"] == "float32"
    assert capture(models["llama"], ids, mask, 0)["reference"]["dtype"] == "float64"
    for family in ("cohere", "ernie4_5", "codegen", "deepseek_v3", "mpt"):
        assert capture(models[family], ids, mask, 0)["reference"]["dtype"] == "float32", family


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
    """LongT5 (local and transient-global attention) has no capture family: one error naming its model
    type, before the model is loaded."""
    config = transformers.LongT5Config(**T5_SIZES)
    transformers.LongT5Model(config).save_pretrained(tmp_path / "longt5")
    with pytest.raises(CaptureError, match='model type "longt5" has no capture family'):
        load(str(tmp_path / "longt5"), "float64")
    result = run("capture", tmp_path / "longt5", "--ids", "1,2")
    assert result.exit_code == 2 and result.stderr.startswith(
        f"error: {tmp_path / 'longt5' / 'config.json'}: model type ")
    assert result.stderr.count("\n") == 1  # the error alone: no warning before it


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_each_family_attncli_cannot_express_is_refused_before_writing(run, tmp_path, family):
    """`attn capture` of each: exit 2, one `error:` line naming what attncli cannot express, nothing
    on stdout and no file written (refused at the directory's check, or by a limit this input reaches)."""
    directory = build(family, tmp_path, REFUSED)
    out = tmp_path / "layer.json"
    result = run("capture", directory, "--ids", "3,1,4,1,5,9,2", "-o", out)
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert REFUSED[family][3] in result.stderr and "cannot express" in result.stderr, result.stderr
    assert not out.exists()


def test_a_limit_refuses_only_the_inputs_that_reach_it(tmp_path):
    """Llama 4's chunks of 3 tokens: a sequence of 3 tokens stays within one chunk and agrees; 7 tokens
    cross one and are refused. Falcon with 32 heads: 3 tokens are exact in bfloat16, 4 are not."""
    for family, short in (("llama4_chunk", [3, 1, 4]), ("falcon_alibi32", [3, 1, 4])):
        model = load(build(family, tmp_path, REFUSED), "float64")[0]
        assert_agrees(capture(model, [short], [[1] * len(short)], 0))
        with pytest.raises(CaptureError, match=REFUSED[family][3].split(" (")[0]):
            capture(model, [short + [1, 5, 9, 2]], [[1] * 7], 0)


def test_the_library_s_own_float64_failures_are_refused_with_the_reason(models, tmp_path):
    """XGLM cannot run in float64 in transformers; MPT's padded rows are NaN in float64 in the model itself:
    each refused naming why, never an internal error or a document blaming the weights."""
    model = load(build("xglm", tmp_path), "float64")[0]
    with pytest.raises(CaptureError, match="XGLM cannot run in float64: its attention clamps the scores"):
        capture(model, [[3, 1, 4]], [[1, 1, 1]], 0)
    ids, mask = pad_left(IDS, 0)
    with pytest.raises(CaptureError, match="MPT layer 0 fills masked scores with float64's minimum, −∞ once its "
                                           "softmax casts them to float32: the padded queries"):
        capture(models["mpt"], ids, mask, 0, batch_index=1)
    float32 = copy.deepcopy(models["mpt"]).to(torch.float32)
    assert agreement(capture(float32, ids, mask, 0, batch_index=1)).agrees


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
