"""`attn capture`'s run, in the order that does no work before it can be refused: the model directory
checked (attncli/capture/directory.py: no code of its own, no pickles, a config that holds), --output
checked (never an input of the run), the memory guard on the model's size (capture/guard.py), the
config and tokenizer, the tokens, the guard again with them, then the model loaded and run
(capture/loading.py, capture/driver.py), and the document written as JSON: atomically, as
`attn compute -o` writes (attncli/render/files.py)."""

import re
import sys
from types import SimpleNamespace

from attncli.base.errors import one_line, quote
from attncli.capture import guard
from attncli.capture.directory import ModelDir, open_model
from attncli.capture.driver import capture, pad_left
from attncli.capture.families import CaptureError
from attncli.capture.loading import load_config, load_model, load_tokenizer
from attncli.compute.limits import ResourceError
from attncli.render import out
from attncli.render.files import Interrupted, write_output
from attncli.render.json import dumps
from attncli.render.target import OutputError, check_target

FLAGS = {"layer": "--layer", "decode": "--decode", "MODEL": "MODEL", "decoder": "--decoder", "cross": "--cross"}
ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit takes ², and int() reads ٣ as 3


def ids_rows(text: str) -> list[list[int]]:
    """`3,1,4; 1,5`: one list of ids per sequence."""
    rows = []
    for part in text.split(";"):
        words = [w.strip() for w in part.split(",") if w.strip()]
        if not words or not all(ID.fullmatch(w) for w in words):
            raise CaptureError(f"is {quote(text)}; expected whole numbers ≥ 0 (digits 0-9) separated by commas "
                               "(sequences separated by ;)", "--ids")
        rows.append([int(w) for w in words])
    return rows


def tokens(o: SimpleNamespace, tokenizer, vocab: int) -> tuple[list[list[int]], list[str] | None]:
    """(id rows, labels of the first row or None) from --ids or --text."""
    if (o.ids is None) == (o.text is None):
        raise CaptureError("give the tokens: --ids 3,1,4,1,5 or --text \"…\" (one of the two)", "--ids")
    if o.text is not None:
        if not o.text.strip():
            raise CaptureError(f"is {quote(o.text)}; expected some text to tokenize", "--text")
        if tokenizer is None:
            raise CaptureError(f"needs a tokenizer saved in {o.model} (tokenizer.json); give --ids instead", "--text")
        rows = [list(tokenizer(o.text)["input_ids"])]
        if not rows[0]:
            raise CaptureError(f"is {quote(o.text)}, which the tokenizer makes no tokens of; expected text with words",
                               "--text")
        labels = [str(t) for t in tokenizer.convert_ids_to_tokens(rows[0])]
    else:
        rows, labels = ids_rows(o.ids), None
    big = max(max(r) for r in rows)
    if big >= vocab:
        given = "--ids" if o.text is None else "--text"
        raise CaptureError(f"has id {big}, but the model's vocabulary has {vocab} ids (0 to {vocab - 1})", given)
    return rows, labels


def _guard(found: ModelDir, dtype: str | None, rows: int = 0, length: int = 0) -> None:
    try:
        guard.check(found.sizes, dtype or found.dtype, rows, length)
    except ResourceError as error:
        error.message += "; give fewer tokens" if rows else "; attn capture cannot load this model here"
        raise error.at(found.path)


def run(o: SimpleNamespace) -> None:
    """Check, load, capture, write."""
    if o.model is None:
        raise CaptureError("MODEL is missing: a save_pretrained directory or a cached model id", "MODEL")
    if o.output_file is not None and not o.output_file.endswith(".json"):
        raise CaptureError(f"is {o.output_file!r}; attn capture writes JSON: name a .json file", "--output")
    if o.decoder and o.cross:
        raise CaptureError("--decoder and --cross are both given; give one: the decoder's self-attention, or its "
                           "cross-attention", "--cross")
    found = open_model(o.model)
    if o.output_file is not None:
        try:
            check_target(o.output_file, list(found.files))
        except OutputError as error:
            raise error.at("--output")
    layers = found.sizes.num_hidden_layers
    if o.layer >= layers:
        raise CaptureError(f"layer is {o.layer}; expected 0 to {layers - 1} ({layers} layer{'s' * (layers != 1)})",
                           "--layer")
    _guard(found, o.dtype)
    config = load_config(found)
    tokenizer = load_tokenizer(found)
    rows, labels = tokens(o, tokenizer, found.sizes.vocab_size)
    if o.batch_index >= len(rows):
        raise CaptureError(f"is {o.batch_index}, but there {'is' if len(rows) == 1 else 'are'} {len(rows)} "
                           f"sequence{'s' * (len(rows) != 1)} (from 0)", "--batch-index")
    text = getattr(config, "text_config", None) or config
    pad = getattr(text, "pad_token_id", None) or 0
    ids, mask = pad_left(rows, pad if isinstance(pad, int) and 0 <= pad < found.sizes.vocab_size else 0)
    _guard(found, o.dtype, len(ids), len(ids[0]))
    model = load_model(found, config, o.dtype)
    if labels is None:  # the tokens when MODEL has a tokenizer, else the ids
        words = tokenizer.convert_ids_to_tokens(ids[o.batch_index]) if tokenizer is not None else ids[o.batch_index]
        labels = [("pad" if not m else str(i) if w is None else str(w))
                  for i, w, m in zip(ids[o.batch_index], words, mask[o.batch_index])]
    else:
        labels = ["pad"] * (len(ids[0]) - len(labels)) + labels
    try:
        doc = capture(model, ids, mask, o.layer, o.batch_index, o.decode, labels, found.name,
                      part="cross" if o.cross else "decoder" if o.decoder else "self")
    except CaptureError as error:  # the core's field, named by its option
        raise error.at(FLAGS.get(error.field, o.model))
    text = dumps(doc) + "\n"
    if o.output_file is None:
        out.write_all(text)
        return
    _write(o.output_file, text)
    rows = len(doc["X"]) if "X" in doc else len(doc["Q"][0])  # Q given directly (DeepSeek's latent): heads × rows
    queries = f"{rows} quer{'y' if rows == 1 else 'ies'}"
    # The file's and the model's names are text (an unpacked download's directory, say), not controls.
    sys.stderr.write(one_line(f"wrote {o.output_file}: layer {o.layer} of {found.name}, {queries}; "
                              f"attn compute {o.output_file}") + "\n")


def _write(path: str, text: str) -> None:
    """--output FILE as `attn compute -o` writes it: atomically, its errors one line naming the file."""
    try:
        write_output(None, path, ".json", lambda: text)
    except OutputError as error:
        raise error.at("--output")
    except Interrupted as stop:  # SIGTERM or SIGHUP: the temporary file is gone; die of it
        stop.die()
