"""`attn capture`'s memory guard, before the model is built or run: what loading the model, running
it with every layer's attention weights kept (`output_attentions`), and writing the document take,
from the config's sizes and the tokens, against the memory available (attncli/compute/limits.py's
`check_fits`, as `attn compute`'s guard). A config of 10,000,000 layers, or 20,000 tokens, is
refused at once instead of building layers or allocating until the system kills the process.

Measured (tiny Llama, GPT-2, BERT; peak RSS): each layer's modules cost about 40 KB of Python and
torch objects beside its weights; the eager path holds each layer's (batch × heads × L × L)
weights to the end of the call and about three more score-sized arrays (scores, their float32
softmax, the weights) while a layer runs.
"""

from __future__ import annotations

from types import SimpleNamespace

from attncli.base.errors import plural
from attncli.compute.limits import JSON_NUMBER, check_fits

LAYER_BYTES = 64 << 10  # a layer's modules, beside its weights (about 40 KB measured)
WORKING = 3  # score-sized arrays a layer's eager attention holds while it runs
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, None: 4}


def model_bytes(s: SimpleNamespace, dtype: str | None) -> dict[str, int]:
    """The model's weights (an upper estimate from the config's sizes; a GGUF's count of its
    tensors' numbers, `s.weights`) and its layers' modules. A GGUF's tensors are dequantized to
    float32 and held beside the model's copy while transformers loads them (`s.dequantized`)."""
    width = s.num_attention_heads * s.head_dim
    attention = s.hidden_size * (width + 2 * s.num_key_value_heads * s.head_dim) + width * s.hidden_size
    mlp = 3 * s.hidden_size * s.intermediate_size * s.experts
    layers = all_layers(s)
    numbers = layers * (attention + mlp) + (2 * s.vocab_size + (s.max_position_embeddings or 0)) * s.hidden_size
    numbers = getattr(s, "weights", None) or numbers
    needs = {f"its weights (about {numbers:,} numbers)": numbers * ITEMSIZE[dtype],
             _modules(layers): layers * LAYER_BYTES}
    if getattr(s, "dequantized", False):
        needs["its GGUF tensors dequantized to float32 while loading"] = numbers * 4
    return needs


def all_layers(s: SimpleNamespace) -> int:
    """The model's layers: an encoder-decoder's decoder layers (`s.decoder_layers`) beside its encoder's."""
    return s.num_hidden_layers + (getattr(s, "decoder_layers", 0) or 0)


def _modules(layers: int) -> str:
    return f"its {layers:,} layers' modules" if layers != 1 else "its layer's modules"


def run_bytes(s: SimpleNamespace, dtype: str | None, rows: int, length: int, captured: int = 1,
              binary: bool = False) -> dict[str, int]:
    """Running it on `rows` sequences of `length` tokens, and the document of `captured` layers:
    their arrays (float64) and their JSON text, or an .npz's members (`binary`)."""
    # every attention's weights: an encoder-decoder's decoder layers have two (self and cross)
    heads, layers = s.num_attention_heads, all_layers(s) + (getattr(s, "decoder_layers", 0) or 0)
    scores = rows * heads * length * length
    itemsize = max(ITEMSIZE[dtype], 4)  # the eager softmax is float32 at least
    numbers = layer_numbers(s, length)
    shape = (f"{plural(layers, 'layer')} × {plural(rows, 'sequence')} × {plural(heads, 'head')} × "
             f"{length:,} × {plural(length, 'token')}")
    document = "the document's .npz" if binary else "the document's JSON"
    if captured > 1:
        document += f" ({captured:,} layers)"
    return {f"every layer's attention weights ({shape})":
            layers * scores * itemsize,
            "a layer's scores while it runs": WORKING * scores * itemsize,
            "its hidden states": (layers + 1) * rows * length * s.hidden_size * itemsize * 4,
            "the captured layers' arrays": captured * numbers * 8,
            document: captured * numbers * (8 if binary else JSON_NUMBER)}


def layer_numbers(s: SimpleNamespace, length: int) -> int:
    """The numbers of one captured layer's document, at most: its weights (H × L × L), X and the
    output (L × d each), W_Q, W_K, W_V and W_O (d × H·d_k each, K and V fewer when grouped)."""
    heads = s.num_attention_heads
    return heads * length * length + 2 * length * s.hidden_size + 4 * s.hidden_size * heads * s.head_dim


def check(s: SimpleNamespace, dtype: str | None, rows: int = 0, length: int = 0, captured: int = 1,
          binary: bool = False) -> None:
    """Raise ResourceError when the model (and, given tokens, its run and `captured` layers' document)
    would not fit."""
    needs = model_bytes(s, dtype)
    if rows:
        needs |= run_bytes(s, dtype, rows, length, captured, binary)
    check_fits(needs, what="this capture")
