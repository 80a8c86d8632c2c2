"""`attn capture`'s run: options to token ids, the model loaded and run (attncli/capture/driver.py), the
document written as JSON."""

import os
import sys
from types import SimpleNamespace

from attncli.base.errors import one_line
from attncli.capture.driver import capture, load, pad_left
from attncli.capture.families import TESTED, CaptureError
from attncli.render import out
from attncli.render.json import dumps

FLAGS = {"layer": "--layer", "decode": "--decode"}


def ids_rows(text: str) -> list[list[int]]:
    """`3,1,4; 1,5`: one list of ids per sequence."""
    rows = []
    for part in text.split(";"):
        words = [w.strip() for w in part.split(",") if w.strip()]
        if not words or not all(w.isdigit() for w in words):
            raise CaptureError(f"is {text!r}; expected whole numbers ≥ 0 separated by commas "
                               "(sequences separated by ;)", "--ids")
        rows.append([int(w) for w in words])
    return rows


def tokens(o: SimpleNamespace, tokenizer, vocab: int) -> tuple[list[list[int]], list[str] | None]:
    """(id rows, labels of the first row or None) from --ids or --text."""
    if (o.ids is None) == (o.text is None):
        raise CaptureError("give the tokens: --ids 3,1,4,1,5 or --text \"…\" (one of the two)", "--ids")
    if o.text is not None:
        if tokenizer is None:
            raise CaptureError(f"needs a tokenizer saved in {o.model} (tokenizer.json); give --ids instead", "--text")
        rows = [tokenizer(o.text)["input_ids"]]
        return rows, [str(t) for t in tokenizer.convert_ids_to_tokens(rows[0])]
    rows = ids_rows(o.ids)
    big = max(max(r) for r in rows)
    if big >= vocab:
        raise CaptureError(f"has id {big}, but the model's vocabulary has {vocab} ids (0 to {vocab - 1})", "--ids")
    return rows, None


def run(o: SimpleNamespace) -> None:
    """Load, capture, write."""
    if o.model is None:
        raise CaptureError("MODEL is missing: a save_pretrained directory or a cached model id", "MODEL")
    if o.output_file is not None and not o.output_file.endswith(".json"):
        raise CaptureError(f"is {o.output_file!r}; attn capture writes JSON: name a .json file", "--output")
    model, tokenizer = load(o.model, o.dtype)
    config = getattr(model.config, "text_config", None) or model.config
    rows, labels = tokens(o, tokenizer, config.vocab_size)
    if o.batch_index >= len(rows):
        raise CaptureError(f"is {o.batch_index}, but there {'is' if len(rows) == 1 else 'are'} {len(rows)} "
                           f"sequence{'s' * (len(rows) != 1)} (from 0)", "--batch-index")
    pad = getattr(config, "pad_token_id", None) or 0
    ids, mask = pad_left(rows, pad)
    if labels is None:  # the tokens when MODEL has a tokenizer, else the ids
        words = tokenizer.convert_ids_to_tokens(ids[o.batch_index]) if tokenizer is not None else ids[o.batch_index]
        labels = [("pad" if not m else str(i) if w is None else str(w))
                  for i, w, m in zip(ids[o.batch_index], words, mask[o.batch_index])]
    else:
        labels = ["pad"] * (len(ids[0]) - len(labels)) + labels
    name = os.path.basename(os.path.normpath(o.model)) if os.path.isdir(o.model) else o.model
    try:
        doc = capture(model, ids, mask, o.layer, o.batch_index, o.decode, labels, name)
    except CaptureError as error:  # the core's field, named by its option
        raise error.at(FLAGS.get(error.field, o.model))
    text = dumps(doc) + "\n"
    if o.output_file is None:
        out.write_all(text)
    else:
        with open(o.output_file, "w", encoding="utf-8") as file:
            file.write(text)
        queries = f"{len(doc['X'])} quer{'y' if len(doc['X']) == 1 else 'ies'}"
        # The file's and the model's names are text (an unpacked download's directory, say), not controls.
        sys.stderr.write(one_line(f"wrote {o.output_file}: layer {o.layer} of {name}, {queries}; "
                                  f"attn compute {o.output_file}") + "\n")
    if config.model_type not in TESTED:  # after success: an error is the only line on stderr
        sys.stderr.write(f"warning: attn capture is not tested on {config.model_type} models (it is on "
                         f"{', '.join(TESTED)}); attn compute's agreement line says whether it read the layer right\n")
