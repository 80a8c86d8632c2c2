"""A parsed document (a dict of keys) to a validated `Problem`: keys, types and shapes.

Shape errors name the field and both sizes, e.g. `K has 3 columns but Q has 2: d_k must match`.
"""

from __future__ import annotations

import numpy as np

from attncli.base.choices import ACCUMULATE, DTYPES, LOW_DTYPES, MASKED_ROWS, STORE
from attncli.base.errors import InputError, plural
from attncli.base.values import HugeInt, as_array, describe, scalar, whole_count
from attncli.compute.backward import final_shape
from attncli.document import schema
from attncli.document.json_text import written_decimals
from attncli.problem import groups, variants
from attncli.problem.qk_norm import read as read_norm
from attncli.problem.rope import read as read_rope
from attncli.problem.rules import Reading
from attncli.problem.rules import read as read_rules
from attncli.problem.trace import Problem
from attncli.problem.variant_input import Reading as VariantReading

QKV = ("Q", "K", "V")
PROJECTIONS = ("X", "X_kv", "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
ALIASES = schema.ALIASES
MAX_HEADS = 1_000_000  # more heads than any matrix has columns; larger counts are refused as such


def input_keys() -> tuple[str, ...]:
    """The keys a problem is made of (attncli/document/schema.py: inputs, settings and labels, the
    mask rules' and the variants' among them)."""
    return schema.top_names(schema.INPUT, schema.SETTING, schema.LABEL)


def output_keys() -> tuple[str, ...]:
    """Every key `attn compute` writes beside the input keys: the schema's echoes and results,
    and one head's stages and tiles (a learner's answers file holds them at the top level)."""
    return schema.top_names(schema.ECHO, schema.RESULT) + schema.one_head()


def _as_2d(value, field: str) -> np.ndarray:
    """A matrix; a 1-D list is one row."""
    array = as_array(value, field, max_dims=2)
    return array.reshape(1, -1) if array.ndim == 1 else array


def _as_vector(value, field: str, length: int, of: str) -> np.ndarray:
    array = as_array(value, field, max_dims=1)
    if array.ndim != 1 or array.shape[0] != length:
        found = plural(array.shape[0], "entry") if array.ndim == 1 else f"{array.ndim} dimensions"
        raise InputError(f"{field} has {found}; expected {plural(length, 'entry')}, one per column of {of}",
                         field=field)
    return array


def _as_heads_matrix(value, field: str) -> np.ndarray:
    """Q, K or V: 1-D is one row, 2-D is (L, d), 3-D is (H, L, d)."""
    array = as_array(value, field, max_dims=3)
    return array.reshape(1, -1) if array.ndim == 1 else array


def _heads_count(value) -> int | None:
    """`heads`: a whole number ≥ 1, or the list of per-head stages that `attn compute` writes."""
    if value is None:
        return None
    if isinstance(value, list):
        if not value or not all(isinstance(h, dict) for h in value):
            raise InputError("heads is a list, but not of per-head objects; expected a whole number ≥ 1",
                             field="heads")
        return len(value)
    if isinstance(value, HugeInt) or (isinstance(value, (int, float)) and value > MAX_HEADS):
        raise InputError(f"heads is {describe(value)}; expected a whole number from 1 to {MAX_HEADS:,} "
                         "(at most one head per column)", field="heads")
    return whole_count(value, "heads")


def _labels(value, field: str, length: int, axis: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
            isinstance(x, str) or (type(x) in (int, float)) for x in value):
        raise InputError(f"{field} is {describe(value)}; expected a list of strings", field=field)
    if len(value) != length:
        raise InputError(f"{field} has {plural(len(value), 'label')} but there {'is' if length == 1 else 'are'} "
                         f"{plural(length, axis)}", field=field, also=({"query": "Q", "key": "K"}[axis],))
    return [_unicode(str(x), f"{field}[{i}]") for i, x in enumerate(value)]


def _head_keys_at_top(doc: dict) -> None:
    """A key only a head holds (lse, d_V, …) at the top level: say where it goes (not a near name)."""
    for key in doc:
        if isinstance(key, str) and key in schema.head_names() and key not in schema.known():
            raise InputError(f"{key} is one head's result: it goes in heads[i].{key}, as attn compute writes "
                             "it; drop it to compute afresh", field=key)


def _text(value, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InputError(f"{field} is {describe(value)}; expected a string", field=field)
    return value if value is None else _unicode(value, field)


def _unicode(text: str, field: str) -> str:
    """Text that can be written as UTF-8. JSON's `\\ud800` escapes (and undecodable bytes in
    command-line arguments) give lone surrogates, which no output could encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        # U+DC80 … U+DCFF: a byte that is not UTF-8, as Python reads undecodable arguments and names
        found = f"the byte 0x{code - 0xDC00:02x}, which is not UTF-8," if 0xDC80 <= code <= 0xDCFF \
            else f"a lone surrogate \\u{code:04x}"
        raise InputError(f"{field} holds {found} at character {error.start + 1}; expected text that is valid "
                         "Unicode (UTF-8)", field=field) from None
    return text


def _choice(value, field: str, choices: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in choices:
        raise InputError(f"{field} is {describe(value)}; expected one of {', '.join(choices)}", field=field)
    return value


def _precision(doc: dict, origin: dict[str, str] | None = None) -> dict:
    """The precision lab's settings (attncli/problem/recipes.py), checked against the dtype: a recipe's
    keys are a low dtype's; the fill is −∞, "min" or a finite number (one past the dtype's range, −1e9
    in float16, is −∞ once stored: the run warns)."""
    dtype = _choice(doc.get("dtype"), "dtype", DTYPES, "float64")
    accumulate = _choice(doc.get("accumulate"), "accumulate", ACCUMULATE, None)
    store = _choice(doc.get("store"), "store", STORE, "stages")
    # Named as the learner gave them: --accumulate and --dtype on the command line, keys in a file (a
    # key not given, as the key it is named beside).
    def name(key: str, beside: str) -> str:
        given = (origin or {}).get(key) or (origin or {}).get(beside, "")
        return f"--{key}" if given.startswith("--") else key

    for key in ("accumulate", "store"):
        if doc.get(key) is not None and dtype not in LOW_DTYPES:
            given = "given as" if name(key, key).startswith("--") else f"{key} is"  # --store: the error's place
            raise InputError(f"{given} {describe(doc[key])}, but {name('dtype', key)} is {dtype}: a recipe is for "
                             f"{' and '.join(LOW_DTYPES)}, whose stages are stored in 16 bits; drop {name(key, key)}, "
                             f"or set {name('dtype', key)}", field=key, also=("dtype",))
    if accumulate == "same" and store == "output":
        store_name, same = name("store", "store"), name("accumulate", "store")
        given = "given as output" if store_name.startswith("--") else "store is output"
        raise InputError(f"{given}, but {same} is same: with no wider accumulator every stage is in the dtype "
                         f"already; use {same} float32, or {store_name} stages", field="store", also=("accumulate",))
    subtract = doc.get("max_subtraction", True)
    if not isinstance(subtract, bool):
        raise InputError(f"max_subtraction is {describe(subtract)}; expected true or false", field="max_subtraction")
    return {"accumulate": accumulate, "store": store, "max_subtraction": subtract,
            "mask_fill": _mask_fill(doc.get("mask_fill"), dtype)}


def _mask_fill(value, dtype: str):
    """"-inf" (or absent) -> −∞; "min" as it is; a finite number as a float."""
    if value is None or value == "-inf":
        return -np.inf
    if value == "min":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise InputError(f'mask_fill is {describe(value)}; expected "-inf", "min" or a finite number such as '
                         "-1e4", field="mask_fill")
    return float(value)


def _qkv_shapes(inputs: dict, heads: int | None, kv_heads: int | None = None) -> tuple[int, int, int]:
    """Check Q, K, V against each other (and `kv_heads`: attncli/problem/groups.py); return (query heads, Lq, Lk)."""
    Q, K, V = inputs["Q"], inputs["K"], inputs["V"]
    if K.ndim != V.ndim:
        raise InputError(f"K is {K.ndim}-D but V is {V.ndim}-D; give both with heads split (3-D) or neither", field="K")
    if Q.ndim == 2 and K.ndim == 3:
        raise InputError("Q is 2-D but K and V are 3-D (heads split); give Q as 3-D too, "
                         "or K and V as 2-D with `heads`", field="Q")
    if Q.shape[-1] != K.shape[-1] and not (Q.ndim == 2 and kv_heads is not None):
        raise InputError(f"K has {plural(K.shape[-1], 'column')} but Q has {Q.shape[-1]}: d_k must match"
                         + groups.hint("K", Q, K), field="K", also=("Q",))
    if K.shape[-2] != V.shape[-2]:
        raise InputError(f"V has {plural(V.shape[-2], 'row')} but K has {K.shape[-2]}: every key needs one value", field="V",
                         also=("K",))
    if Q.ndim == 3:
        hq, hkv = Q.shape[0], K.shape[0] if K.ndim == 3 else 1
        if K.ndim == 3 and K.shape[0] != V.shape[0]:
            raise InputError(f"K has {plural(K.shape[0], 'head')} but V has {V.shape[0]}", field="K", also=("V",))
        if heads is not None and heads != hq:
            raise InputError(f"heads is {heads} but Q has {plural(hq, 'head')} (its first axis)", field="heads", also=("Q",))
        if hq % hkv:
            raise InputError(f"Q has {plural(hq, 'head')} but K and V have {hkv}: the query head count must be "
                             "a multiple of the key/value head count (grouped-query attention)", field="Q",
                             also=("K", "V"))
        groups.check_split(hq, kv_heads, K)
        return hq, Q.shape[1], K.shape[-2]
    heads = heads or 1
    if kv_heads is not None:
        groups.check_columns(inputs, QKV, heads, kv_heads)
    for name in QKV if kv_heads is None else ():
        if inputs[name].shape[1] % heads:
            raise InputError(f"heads = {heads} does not divide the {plural(inputs[name].shape[1], 'column')} of {name}",
                             field="heads")
    return heads, Q.shape[0], K.shape[0]


def _projection_shapes(inputs: dict, heads: int | None, kv_heads: int | None = None) -> tuple[int, int, int]:
    """Check X, X_kv and W_Q/W_K/W_V (d_in × d_out, Q = X W_Q) and their biases; with `kv_heads`,
    W_K and W_V have kv_heads · d columns (attncli/problem/groups.py)."""
    X = inputs["X"]
    X_kv = inputs.get("X_kv", X)
    kv = "X_kv" if "X_kv" in inputs else "X"
    for w, x, name in (("W_Q", X, "X"), ("W_K", X_kv, kv), ("W_V", X_kv, kv)):
        if inputs[w].shape[0] != x.shape[1]:
            raise InputError(f"{w} has {plural(inputs[w].shape[0], 'row')} but {name} has {plural(x.shape[1], 'column')}: "
                             f"{w} must be (d_model × d_out) so that {w[-1]} = {name} {w}", field=w,
                             also=(name,))
    heads = heads or 1
    if kv_heads is not None:
        groups.check_columns(inputs, ("W_Q", "W_K", "W_V"), heads, kv_heads)
    elif inputs["W_K"].shape[1] != inputs["W_Q"].shape[1]:
        raise InputError(f"W_K has {plural(inputs['W_K'].shape[1], 'column')} but W_Q has "
                         f"{inputs['W_Q'].shape[1]}: d_k must match"
                         + groups.hint("W_K", inputs["W_Q"], inputs["W_K"]),
                         field="W_K", also=("W_Q",))
    for w in ("W_Q", "W_K", "W_V") if kv_heads is None else ():
        if inputs[w].shape[1] % heads:
            raise InputError(f"heads = {heads} does not divide the {plural(inputs[w].shape[1], 'column')} of {w}", field="heads")
    return heads, X.shape[0], X_kv.shape[0]


def _grid(value, field: str, kind: str, heads: int, lq: int, lk: int) -> np.ndarray:
    """A mask or bias: (Lq × Lk) for every head, or (H × Lq × Lk); 1-D when there is one query."""
    array = as_array(value, field, kind=kind, max_dims=3)
    found = array.shape
    if array.ndim == 1 and lq == 1:
        array = array.reshape(1, -1)
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or array.shape[1:] != (lq, lk) or array.shape[0] not in (1, heads):
        expected = f"({lq} × {lk})" + (f" or ({heads} × {lq} × {lk})" if heads > 1 else "")
        raise InputError(f"{field} has shape ({' × '.join(map(str, found))}); expected {expected}: "
                         "queries × keys", field=field)
    return array


def _d_output(value, inputs: dict, heads: int, lq: int, kv_heads: int) -> np.ndarray:
    """dO: the shape of the final output, or "ones" for all ones (the gradient of its sum)."""
    shape = final_shape(inputs, heads, lq, kv_heads)
    if isinstance(value, str):
        if value.strip().lower() != "ones":
            raise InputError(f"dO is {describe(value)}; expected a matrix ({shape[0]} × {shape[1]}), "
                             "the shape of the final output, or \"ones\"", field="dO")
        return np.ones(shape)
    array = as_array(value, "dO", max_dims=2)
    if array.ndim == 1 and shape[0] == 1:
        array = array.reshape(1, -1)
    if array.shape != shape:
        raise InputError(f"dO has shape ({' × '.join(map(str, array.shape))}); expected ({shape[0]} × "
                         f"{shape[1]}), the shape of the final output (queries × "
                         + ("W_O's columns)" if "W_O" in inputs else "the heads' outputs side by side)"), field="dO")
    return array


def _d_k(inputs: dict, heads: int, projected: bool) -> int:
    """Each head's query/key width."""
    if projected:
        return inputs["W_Q"].shape[1] // heads
    Q = inputs["Q"]
    return Q.shape[-1] if Q.ndim == 3 else Q.shape[1] // heads


def _scale(value, d_k: int) -> float | None:
    """`scale`: None (the default) when absent, or when it is the default 1/√d_k to the last bit:
    `attn compute` writes the scale it used, and read back that is still the default."""
    if value is None:
        return None
    scale = scalar(value, "scale")
    return None if scale == float(1.0 / np.sqrt(d_k)) else scale


def _inputs(doc: dict) -> tuple[dict, int, int, int, bool, int]:
    """The matrices (Q, K, V, or X with W_Q, W_K, W_V; X_kv, W_O and the biases) checked against
    each other: (inputs, query heads, Lq, Lk, whether they are projections, kv heads)."""
    has_qkv = [k for k in QKV if doc.get(k) is not None]
    has_proj = [k for k in PROJECTIONS if doc.get(k) is not None]
    if has_qkv and has_proj:
        raise InputError(f"both {has_qkv[0]} and {has_proj[0]} are given: give Q, K and V, "
                         "or X with W_Q, W_K and W_V, not both")
    needed = ("X", "W_Q", "W_K", "W_V") if has_proj else QKV
    missing = [k for k in needed if doc.get(k) is None]
    if missing:
        raise InputError(f"missing {', '.join(missing)}: give Q, K and V, or X with W_Q, W_K and W_V")
    heads = _heads_count(doc.get("heads"))
    inputs = {}
    for key in needed + tuple(k for k in ("X_kv", "W_O") if doc.get(k) is not None):
        inputs[key] = _as_heads_matrix(doc[key], key) if key in QKV else _as_2d(doc[key], key)
    kv_heads = groups.read_count(doc.get("kv_heads"))
    heads, lq, lk = (_projection_shapes if has_proj else _qkv_shapes)(inputs, heads, kv_heads)
    kv_heads = groups.from_inputs(inputs, heads, kv_heads)
    for b, w in (("b_Q", "W_Q"), ("b_K", "W_K"), ("b_V", "W_V"), ("b_O", "W_O")):
        if doc.get(b) is not None:
            if w not in inputs:
                raise InputError(f"{b} is given without {w}", field=b)
            inputs[b] = _as_vector(doc[b], b, inputs[w].shape[1], w)
    if "W_O" in inputs:
        d_v = groups.value_width(inputs, heads, kv_heads)
        if inputs["W_O"].shape[0] != d_v:
            raise InputError(f"W_O has {plural(inputs['W_O'].shape[0], 'row')} but the heads' outputs side by "
                             f"side have {plural(d_v, 'column')}: W_O must be (heads·d_v × d_out)", field="W_O")
    return inputs, heads, lq, lk, bool(has_proj), kv_heads


def _norms(doc: dict, heads: int, kv_heads: int, d_k: int) -> dict:
    """The Problem's q_norm and k_norm (attncli/problem/qk_norm.py): over "all", a row of Q holds the query
    heads, a row of K its kv heads."""
    return {"q_norm": read_norm(doc.get("q_norm"), "q_norm", d_k, heads),
            "k_norm": read_norm(doc.get("k_norm"), "k_norm", d_k, kv_heads)}


def build_problem(doc, origin: dict[str, str] | None = None, source: str | None = None,
                  invert_mask: bool = False) -> Problem:
    """Validate a document's keys, types and shapes.

    `origin` maps a key to where its value came from (a file or an option such as `--k`) so that
    an error names it; other keys are attributed to `source`.
    """
    try:
        if not isinstance(doc, dict):
            raise InputError(f"the top level is {describe(doc)}; expected a JSON object with Q, K and V")
        _head_keys_at_top(doc)
        doc = schema.check_keys(doc)
        schema.asked(doc)  # an exercise's ask and decimals, refused as attn check refuses them
        inputs, heads, lq, lk, has_proj, kv_heads = _inputs(doc)
        if invert_mask and not isinstance(doc.get("mask"), (list, np.ndarray)):
            found = "there is no mask" if doc.get("mask") is None else f"the mask is {describe(doc['mask'])}"
            raise InputError(f"invert_mask is on but {found}: only a true/false mask matrix can be "
                             "read with true as blocked", field="invert_mask")
        rules = read_rules(doc, Reading(_grid, heads, lq, lk, invert_mask))
        bias = None if doc.get("bias") is None else _grid(doc["bias"], "bias", "bias", heads, lq, lk)
        scale = _scale(doc.get("scale"), _d_k(inputs, heads, has_proj))
        dO = None if doc.get("dO") is None else _d_output(doc["dO"], inputs, heads, lq, kv_heads)
        rope = None if doc.get("rope") is None else read_rope(doc["rope"], _d_k(inputs, heads, has_proj))
        norms = _norms(doc, heads, kv_heads, _d_k(inputs, heads, has_proj))
        query_labels = _labels(doc.get("query_labels"), "query_labels", lq, "query")
        key_labels = _labels(doc.get("key_labels"), "key_labels", lk, "key")
        problem = Problem(
            inputs=inputs, heads=heads, lq=lq, lk=lk, kv_heads=kv_heads, **rules, bias=bias,
            variants=variants.read(doc, VariantReading(doc, heads, written_decimals)),
            scale=scale, rope=rope, **norms, dO=dO,
            masked_rows=_choice(doc.get("masked_rows"), "masked_rows", MASKED_ROWS, "zero"),
            dtype=_choice(doc.get("dtype"), "dtype", DTYPES, "float64"), **_precision(doc, origin),
            query_labels=query_labels, key_labels=key_labels,
            title=_text(doc.get("title"), "title"), description=_text(doc.get("description"), "description"))
    except InputError as error:
        # Attribute the error to where its field or key came from (a file, or an option such as `--k`;
        # rope.dims to --rope-dims when that option gave it).
        # A key from the file checked against one from an option (K against --q's Q): the option.
        key, origin = error.key, origin or {}
        came_from = (origin.get(error.field) or origin.get(ALIASES.get(key, key))) if key else None
        came_from = came_from or next((origin[other] for other in error.also if other in origin), None)
        raise error.at(came_from or source)
    return problem
