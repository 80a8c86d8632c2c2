"""`attn capture MODEL`: one attention layer of a Hugging Face model as an attncli document, with
the model's own attention weights and output beside it (the `models` extra: torch, transformers,
safetensors). Its options are here; capture_run.py (which loads torch) does the work."""

from attncli.base.errors import AttnError
from attncli.commands import spec
from attncli.commands.spec import Option

EXTRA = ("attn capture needs the models extra (torch, transformers): pip install 'attncli[models]', "
         "or pip install -e '.[models]' in a clone")
EXTRA_MODULES = ("torch", "transformers", "safetensors", "tokenizers", "gguf", "accelerate")
DTYPES = ("float32", "float64", "bfloat16", "float16")

CAPTURE: tuple[Option, ...] = (
    Option("model", "A save_pretrained directory (config, safetensors weights), a GGUF file (or a directory "
           "holding one; dequantized) or a model id in the local Hugging Face cache (never downloaded); its "
           "auto_map code and pickles never run.", argument=True, default=None),
    Option("ids", "Token ids, comma-separated (3,1,4,1,5); several sequences separated by ; are a batch, "
           "left-padded as generate() pads them (pick one with --batch-index).", metavar="IDS"),
    Option("text", "Text to tokenize with the tokenizer saved in MODEL's directory (labels are then the tokens).",
           metavar="TEXT"),
    Option("layer", "The layers to capture, from 0: one (3), several (3,7-9) or all; the model runs once and "
           "every layer goes into one document.", metavar="N", default="0"),
    Option("batch_index", "Which sequence of the batch the document holds, from 0.", type=int, low=0, default=0),
    Option("decode", "The last token as a decode step against the cache of the others: one query, "
           "q_positions and k_positions.", type=bool),
    Option("decoder", "An encoder-decoder model's (T5, BART, Whisper) decoder self-attention instead of its encoder's: "
           "--ids are the decoder's tokens, and the encoder reads the same ids (Whisper's: a fixed input of noise "
           "features).", type=bool),
    Option("cross", "An encoder-decoder model's cross-attention: queries from the decoder's tokens (--ids), keys and "
           "values from the encoder's output on the same ids, as X_kv.", type=bool),
    Option("dtype", "The model's dtype (default: as saved). float64 also runs the eager path's float32 "
           "softmax and RoPE angles in float64, for an exact comparison.", choices=DTYPES),
    Option("output_file", "Write the document to this .json or .npz file (binary: a quarter of the size, read "
           "faster), atomically as attn compute -o does; never over a file of MODEL. Default: JSON on stdout, or, "
           "past 32 MiB of JSON, an .npz named after the model in the current folder.",
           flags=("--output", "-o"), metavar="FILE"),
)


class MissingExtra(AttnError):
    """torch or transformers is not installed."""


@spec.command(CAPTURE)
def capture(**values) -> None:
    """Capture attention layers of a Hugging Face model (or a GGUF file) as an attncli document.

    attn capture ./tiny-llama --ids 3,1,4,1,5 -o layer0.json && attn compute layer0.json

    attn capture model.gguf --text "…" --layer all -o model.npz && attn compute model.npz

    The document is ordinary attncli input: X (the layer's input after its input norm), W_Q, W_K,
    W_V, W_O and biases (as x W), heads, scale, rope, window, softcap, sinks, ALiBi, the mask
    (causal by index, key_mask from the attention mask), masked_rows uniform (the library's eager
    path), and the model's own results under "reference": attn compute prints whether it agrees.
    Several layers are one document with a "layers" list.
    """
    o = spec.chosen(CAPTURE, values)
    try:
        # Imported here, for start-up: capture_run loads torch and transformers (seconds), which no
        # other command needs, and which are an optional extra.
        from attncli.commands.capture_run import run
    except ImportError as error:
        if (error.name or "").split(".")[0] in EXTRA_MODULES:
            raise MissingExtra(EXTRA)
        raise
    run(o)
