"""The slips of code that a hand calculation does not make, as `attn check`'s mistakes are made:
each a stage recomputed the learner's way (`marking.mistakes.Mistake`), named only when it gives
the function's numbers. `ALL` is the table the code marks try: `attn check`'s own and these.

Also here, the diagnoses that are not one stage recomputed: the whole case computed in float32,
and the batch and head axes mixed.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from attncli.base.rule_words import MASKED_ROWS_LIKE, MASKED_ROWS_WORDS
from attncli.marking.mistakes import MISTAKES, Mistake
from attncli.stages.table import mask_scores

FILL = -1e9  # the finite fill code often writes where −∞ belongs


def _no_max(block, x):
    """softmax without the max subtracted: e^x overflows to inf past 709 (float64), inf/inf is NaN."""
    e = np.exp(x)  # −∞ → 0
    return e / e.sum(axis=-1, keepdims=True)


def _dead_rows(x) -> np.ndarray:
    return np.isneginf(x).all(axis=-1)  # (…, b): every key masked


def _nan_rows(block, x):
    """The textbook's stable softmax, unguarded: a row whose every key is −∞ is NaN."""
    if not _dead_rows(x).any():
        return None
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _unnormalised(block, x):
    shift = x.max(axis=-1, keepdims=True)
    return np.exp(x - np.where(np.isneginf(shift), 0.0, shift))


def _fill_finite(block, x):
    visible = block.visible()
    if visible is None:
        return None
    return np.where(visible, mask_scores(x, None, block.bias()), FILL)


CODE_MISTAKES = {
    "softmax_no_max": Mistake("weights", "overflow: took e^x of the scores without subtracting the row max first; "
                                         "e^x is inf past x = 709 in float64 (88.7 in float32), and inf / inf is NaN",
                              _no_max),
    "masked_row_nan": Mistake("weights", "a query whose every key is masked came out NaN (e^(−∞ − (−∞)) is e^NaN) "
                                         f"where it gets {MASKED_ROWS_WORDS['zero']} ({MASKED_ROWS_LIKE['zero']}); "
                                         "look for rows with no key left", _nan_rows),
    "weights_unnormalised": Mistake("weights", "returned the weights before normalising: e^(x − max), not yet "
                                               "divided by the row's sum", _unnormalised),
    "mask_fill_finite": Mistake("masked", "filled the masked scores with −1e9 where −∞ belongs: the same weights "
                                          "while a row keeps a key, but a row whose every key is masked gets "
                                          f"{MASKED_ROWS_WORDS['uniform']} instead of {MASKED_ROWS_WORDS['zero']}, and "
                                          "a real score below −1e9 would outrank a masked key", _fill_finite),
}
ALL = MappingProxyType({**MISTAKES, **CODE_MISTAKES})

FLOAT32 = "float32"
FLOAT32_TEXT = ("computed in float32 (about 7 significant digits) where the inputs are float64: the numbers are "
                "float32's (an accumulator or a cast to float32?)")
MIXED = "batch_heads_mixed"
MIXED_TEXT = "mixed the batch and head axes: {pairs} (a reshape or .T where a transpose of two axes was needed?)"
SHAPE = "wrong_shape"
FAILED = {"exception": "raised an exception", "timeout": "did not finish in time",
          "crash": "crashed the process", "exit": "ended the process without returning",
          "memory": "ran out of memory", "unreadable": "returned something that is not an answer",
          "forbidden": "imports a module the teacher forbids"}
