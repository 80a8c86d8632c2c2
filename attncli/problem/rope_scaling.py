"""RoPE scaling: the `rope.scaling` input key, transformers' `rope_parameters` for the rope types
that change the inverse frequencies θ_i and the attention factor, computed as transformers 5.x's
`ROPE_INIT_FUNCTIONS` (modeling_rope_utils.py) do, in float64 (transformers computes them in float32).

    linear    θ'_i = θ_i / factor
    dynamic   θ'_i = base'^(−2i/dims),  base' = base · (factor · L'/M − (factor − 1))^(dims/(dims − 2)),
              M = max_position_embeddings, L' = max(L, M)
    llama3    wavelength λ_i = 2π/θ_i against O = original_max_position_embeddings:
              λ_i > O/low_freq_factor: θ_i / factor;  λ_i < O/high_freq_factor: θ_i;
              between: (1 − s) θ_i/factor + s θ_i,  s = (O/λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor)
    yarn      θ'_i = θ_i/factor · (1 − e_i) + θ_i · e_i,  e_i = 1 − ramp_i (ramp from the dims where
              beta_fast and beta_slow rotations fit in O); attention factor 0.1 · ln(factor) + 1
              (or mscale over mscale_all_dim, or attention_factor)
    longrope  θ'_i = θ_i / f_i,  f = long_factor when L > O, else short_factor;
              attention factor √(1 + ln(factor)/ln(O)) (or attention_factor)

L, the sequence length, is the largest position + 1 (q_positions and k_positions together): as
transformers' `dynamic_rope_update` takes max(position_ids) + 1 of one fresh forward call. The
attention factor multiplies cos and sin, so the rotated dims of Q_rope and K_rope (never the dims
partial rotary leaves alone). Parameter names are transformers'; `max_position_embeddings` is
the model config's (transformers reads it beside rope_parameters). Every message starts with the
field it is about (`rope.scaling.factor is …`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attncli.base.errors import InputError, did_you_mean, plural, quote
from attncli.base.values import HugeInt, describe

FIELD = "rope.scaling"
# What each parameter must be: its kind (below) and what is expected, in words.
_KINDS = {
    "factor": "positive", "low_freq_factor": "positive", "high_freq_factor": "positive",
    "attention_factor": "positive", "beta_fast": "beta", "beta_slow": "beta", "mscale": "number",
    "mscale_all_dim": "number", "original_max_position_embeddings": "length", "max_position_embeddings": "length",
    "short_factor": "factors", "long_factor": "factors", "truncate": "flag",
}
_EXPECTED = {"positive": "a finite number > 0", "beta": "a finite number ≥ 0 (0 or absent: the default)",
             "number": "a finite number", "length": "a whole number ≥ 1 (positions, as 4096)",
             "factors": "a list of one finite number > 0 per rotated pair", "flag": "true or false"}
_TESTS = {"positive": lambda x: x > 0, "beta": lambda x: x >= 0, "number": lambda x: True,
          "length": lambda x: x == int(x) and x >= 1}
# Model-config keys transformers keeps beside rope_parameters, and where attncli has them.
_ELSEWHERE = {"rope_theta": "rope.base", "partial_rotary_factor": "rope.dims (the rotated dims: head_dim · "
              "partial_rotary_factor)", "head_dim": "d_k (each head's width)",
              "rotary_dim": "rope.dims", "rotary_pct": "rope.dims"}
# What a missing parameter is, for its error.
_WHAT = {
    "factor": "the scaling factor, as 8 in Llama 3.1",
    "max_position_embeddings": "the model config's max_position_embeddings, the length past which the base grows",
    "original_max_position_embeddings": "the pre-training length, as 8192 in Llama 3.1 (transformers takes the "
                                        "config's max_position_embeddings when it is absent: give that as "
                                        "max_position_embeddings)",
    "low_freq_factor": "1 in Llama 3.1", "high_freq_factor": "4 in Llama 3.1",
    "short_factor": "one factor per rotated pair, for sequences up to original_max_position_embeddings",
    "long_factor": "one factor per rotated pair, for longer sequences",
}


@dataclass(frozen=True)
class Scaling:
    """`rope.scaling` as read: the rope type and its parameters as given (lists as tuples)."""

    rope_type: str
    params: tuple[tuple[str, object], ...] = ()

    def get(self, name: str, default=None):
        return dict(self.params).get(name, default)

    def __getitem__(self, name: str):
        return dict(self.params)[name]

    def to_json(self) -> dict:
        return {"rope_type": self.rope_type} | {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}

    @property
    def by_length(self) -> bool:
        """Whether θ' depends on the sequence length (dynamic, longrope)."""
        return TYPES[self.rope_type].by_length

    def original(self) -> int:
        """original_max_position_embeddings, or max_position_embeddings when absent (as transformers'
        standardize_rope_params sets it for llama3, yarn and longrope)."""
        return self.get("original_max_position_embeddings") or self["max_position_embeddings"]

    def trained(self) -> int:
        """dynamic's M: max_position_embeddings (the config's, which transformers reads), or
        original_max_position_embeddings when only that is given."""
        return self.get("max_position_embeddings") or self["original_max_position_embeddings"]

    def compute(self, base: float, dims: int, length: int | None = None) -> tuple[np.ndarray, float]:
        """(dims/2,) θ'_i and the attention factor for a sequence of `length` positions (None: as
        transformers at start-up, without a length)."""
        with np.errstate(all="ignore"):
            theta, factor = TYPES[self.rope_type].compute(self, np.float64(base), dims, length)
        return np.asarray(theta, dtype=np.float64), float(factor)

    def words(self, base: float, dims: int) -> str:
        """The scaling in words, for the table header and JSON's `rope_rule`."""
        shown = ", ".join(f"{k} {_short(v)}" for k, v in self.params)
        text = f"scaled by {self.rope_type} ({shown}): {TYPES[self.rope_type].rule}"
        factor = self.compute(base, dims)[1]
        return text + (f"; attention factor {factor:.6g} multiplies cos and sin" if factor != 1.0 else "")

    def applied(self, base: float, dims: int, length: int) -> str:
        """What the scaling did for this sequence length, in a few words (the explanation's)."""
        if self.rope_type == "dynamic":
            m = self.trained()
            if length <= m:
                return f"length {length} ≤ max_position_embeddings {m}: base stays {_short(base)}"
            factor, grown = self["factor"], _dynamic_base(self, base, dims, length)
            return (f"length {length} > max_position_embeddings {m}: base' = {_short(base)} · ({_short(factor)} · "
                    f"{length}/{m} − {_short(factor - 1)})^({dims}/{dims - 2}) = {grown:.6g}")
        if self.rope_type == "longrope":
            long = bool(length) and length > self.original()
            return (f"length {length} {'>' if long else '≤'} original_max_position_embeddings {self.original()}: "
                    f"{'long' if long else 'short'}_factor")
        return TYPES[self.rope_type].rule


def _short(value) -> str:
    if isinstance(value, tuple):
        return f"[{plural(len(value), 'number')}]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else repr(float(value))


# --- the rope types, as transformers computes them ------------------------------------------------

def _powers(base, dims: int) -> np.ndarray:
    """(dims/2,) base^(2i/dims), each by the C library's pow as torch computes it (numpy's array
    power may differ in the last bit, which far positions turn into 1e-12 in cos and sin)."""
    return np.array([math.pow(base, e) for e in np.arange(0, dims, 2, dtype=np.float64) / dims], dtype=np.float64)


def _inv_freq(base, dims: int) -> np.ndarray:
    """1 / base^(2i/dims), as transformers' `1.0 / (base ** (arange(0, dim, 2) / dim))`."""
    return 1.0 / _powers(base, dims)


def _linear(s: Scaling, base, dims: int, length):
    return _inv_freq(base, dims) / s["factor"], 1.0


def _dynamic_base(s: Scaling, base, dims: int, length) -> float:
    m, factor = s.trained(), s["factor"]
    seq = m if length is None else max(length, m)
    return base * ((factor * seq / m) - (factor - 1)) ** np.float64(dims / (dims - 2))


def _dynamic(s: Scaling, base, dims: int, length):
    return _inv_freq(_dynamic_base(s, base, dims, length), dims), 1.0


def _llama3(s: Scaling, base, dims: int, length):
    inv_freq = _inv_freq(base, dims)
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s.original()
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = (1 / inv_freq) * (2 * math.pi)  # torch takes number / tensor as 1/tensor · number
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)  # long wavelengths: / factor
    smooth = ((1 / wavelen) * old - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled), 1.0


def _mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _factor(s: Scaling) -> float:
    """yarn's and longrope's factor: as given, else max_position_embeddings / original (transformers)."""
    factor = s.get("factor")
    return s["max_position_embeddings"] / s.original() if factor is None else factor


def _yarn_attention(s: Scaling) -> float:
    factor, mscale, mscale_all_dim = _factor(s), s.get("mscale"), s.get("mscale_all_dim")
    if s.get("attention_factor") is not None:
        return s["attention_factor"]
    if mscale and mscale_all_dim:  # both given and not 0, as transformers tests them
        return float(_mscale(factor, mscale) / _mscale(factor, mscale_all_dim))
    return _mscale(factor)


def _yarn_range(s: Scaling, base, dims: int) -> tuple[float, float]:
    """The dims between full extrapolation and full interpolation (find_correction_range)."""
    original = s.original()
    def dim(rotations):  # the dim whose wavelength fits `rotations` times in the original length
        return (dims * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))
    low, high = dim(s.get("beta_fast") or 32), dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dims - 1)


def _yarn(s: Scaling, base, dims: int, length):
    low, high = _yarn_range(s, base, dims)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = np.clip((np.arange(dims // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = _powers(base, dims)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (_factor(s) * pos_freqs)
    extrapolation_factor = 1 - ramp
    theta = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return theta, _yarn_attention(s)


def _longrope(s: Scaling, base, dims: int, length):
    original, attention = s.original(), s.get("attention_factor")
    if attention is None:
        factor = _factor(s)
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = s["long_factor"] if length and length > original else s["short_factor"]
    return 1.0 / (np.array(ext, dtype=np.float64) * _powers(base, dims)), attention


@dataclass(frozen=True)
class RopeType:
    required: tuple[str, ...]
    optional: tuple[str, ...]
    compute: Callable  # (scaling, base, dims, length) → (θ', attention factor)
    rule: str  # what it does, in words
    by_length: bool = False
    one_of: tuple[str, ...] = ()  # of these optional ones, at least one is required


_ORIGINAL = ("original_max_position_embeddings",)
TYPES = {
    "linear": RopeType(("factor",), (), _linear, "θ'_i = θ_i / factor"),
    "dynamic": RopeType(("factor", "max_position_embeddings"), _ORIGINAL, _dynamic,
                        "θ'_i = base'^(−2i/dims), base' = base · (factor · L/max_position_embeddings − factor + 1)"
                        "^(dims/(dims − 2)) once the length L (largest position + 1) passes max_position_embeddings",
                        by_length=True),
    "llama3": RopeType(("factor", "low_freq_factor", "high_freq_factor") + _ORIGINAL, ("max_position_embeddings",),
                       _llama3, "θ'_i = θ_i / factor where the wavelength 2π/θ_i > original_max_position_embeddings"
                       "/low_freq_factor, θ_i where it is < original_max_position_embeddings/high_freq_factor, "
                       "smooth in between"),
    "yarn": RopeType(("factor",) + _ORIGINAL, ("attention_factor", "beta_fast", "beta_slow", "mscale",
                                               "mscale_all_dim", "truncate", "max_position_embeddings"),
                     _yarn, "θ'_i = θ_i for dims turning more than beta_fast times in original_max_position_embeddings, "
                     "θ_i / factor for those turning fewer than beta_slow times, a linear ramp between"),
    "longrope": RopeType(("short_factor", "long_factor") + _ORIGINAL, ("factor", "attention_factor",
                                                                      "max_position_embeddings"),
                         _longrope, "θ'_i = θ_i / short_factor_i while the length L (largest position + 1) ≤ "
                         "original_max_position_embeddings, θ_i / long_factor_i past it", by_length=True,
                         one_of=("factor", "attention_factor", "max_position_embeddings")),
}


# --- reading --------------------------------------------------------------------------------------

def read(value, base: float, dims: int, field: str = FIELD) -> Scaling | None:
    """`rope.scaling`: null, or {"rope_type": …, parameters as transformers names them}."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError(f"{field} is {describe(value)}; expected an object with rope_type ({_types()}) and "
                         "its parameters", field=field)
    rope_type = value.get("rope_type")
    if not isinstance(rope_type, str) or rope_type not in TYPES:
        raise InputError(_type_message(rope_type, field), field=f"{field}.rope_type")
    kind = TYPES[rope_type]
    params = []
    for key, given in value.items():
        if key == "rope_type" or given is None:  # null is absent, as transformers' .get reads it
            continue
        if key not in kind.required + kind.optional:
            raise InputError(_unknown(str(key), rope_type, kind, field), field=f"{field}.{key}")
        params.append((key, _parameter(given, f"{field}.{key}", dims)))
    scaling = Scaling(rope_type, tuple(params))
    _complete(scaling, kind, dims, field)
    _computable(scaling, base, dims, field)
    return scaling


def expected(key: str, value) -> str | None:
    """What the scaling parameter `key` must be, in words, when `value` is not that; None when it is
    (or is null, or `key` is no scaling parameter). The check `read` makes of each value, without the
    rope type's context: for a model's config, before anything is built from it (attn capture)."""
    kind = _KINDS.get(key)
    if kind is None or value is None:
        return None
    if kind == "factors":
        fits = isinstance(value, (list, tuple)) and all(_is_number(x) and x > 0 for x in value)
    elif kind == "flag":
        fits = isinstance(value, bool)
    else:
        fits = _is_number(value) and _TESTS[kind](value)
    return None if fits else _EXPECTED[kind]


def _types() -> str:
    return ", ".join(TYPES)


def _type_message(rope_type, field: str) -> str:
    if rope_type is None:
        return f"{field} has no rope_type; expected one of {_types()}"
    if rope_type == "default":
        return (f'{field}.rope_type is "default": that is RoPE without scaling (leave scaling out); '
                f"expected one of {_types()}")
    hint = did_you_mean(rope_type, TYPES, 0.4) if isinstance(rope_type, str) else ""
    return f"{field}.rope_type is {describe(rope_type)}{hint}; expected one of {_types()}"


def _unknown(key: str, rope_type: str, kind: RopeType, field: str) -> str:
    names = kind.required + kind.optional
    if key in _ELSEWHERE:
        return f"{field}.{key}: attncli takes it as {_ELSEWHERE[key]}, not under scaling; {rope_type} takes {', '.join(names)}"
    if key in _KINDS:
        return f"{field}.{key}: {rope_type} has no parameter {quote(key)}; it takes {', '.join(names)}"
    hint = did_you_mean(key, names + ("rope_type",), 0.4)
    return f"{field} has an unknown key {quote(key)}{hint}; {rope_type} takes {', '.join(names)}"


def _parameter(value, field: str, dims: int):
    kind = _KINDS[field.rsplit(".", 1)[1]]
    expected = _EXPECTED[kind]
    if kind == "factors":
        return _factors(value, field, dims, expected)
    if kind == "flag" and isinstance(value, bool):
        return value
    if kind == "flag" or not _is_number(value) or not _TESTS[kind](value):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    return int(value) if kind == "length" else float(value)


def _is_number(value) -> bool:
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, HugeInt))
            and math.isfinite(value))


def _factors(value, field: str, dims: int, expected: str) -> tuple[float, ...]:
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    if len(value) != dims // 2:
        raise InputError(f"{field} has {plural(len(value), 'number')}; expected one per rotated pair: rope.dims/2 = "
                         f"{dims // 2}", field=field)
    for i, x in enumerate(value):
        if not _is_number(x) or x <= 0:
            raise InputError(f"{field}[{i}] is {describe(x)}; expected a finite number > 0", field=field)
    return tuple(float(x) for x in value)


def _complete(s: Scaling, kind: RopeType, dims: int, field: str) -> None:
    given = dict(s.params)
    for name in kind.required:
        if name == "original_max_position_embeddings" and "max_position_embeddings" in given:
            continue  # transformers' standardize_rope_params takes max_position_embeddings for it
        if name == "factor" and s.rope_type == "yarn" and "max_position_embeddings" in given:
            continue  # transformers: max_position_embeddings / original_max_position_embeddings
        if name == "max_position_embeddings" and "original_max_position_embeddings" in given:
            continue  # dynamic: the pre-training length by its other name
        if name not in given:
            raise InputError(f"{field}: {s.rope_type} needs {name} ({_WHAT[name]})", field=f"{field}.{name}")
    if s.rope_type == "dynamic" and len({given.get(k) for k in ("max_position_embeddings", *_ORIGINAL)} - {None}) > 1:
        raise InputError(f"{field}: dynamic has max_position_embeddings {given['max_position_embeddings']} and "
                         f"original_max_position_embeddings {given['original_max_position_embeddings']}; expected "
                         "one length past which the base grows (transformers reads max_position_embeddings)",
                         field=f"{field}.original_max_position_embeddings")
    if kind.one_of and not set(kind.one_of) & set(given):  # longrope: its attention factor comes from one of them
        raise InputError(f"{field}: {s.rope_type} needs {', '.join(kind.one_of[:-1])} or {kind.one_of[-1]} "
                         "(transformers takes factor = max_position_embeddings / original_max_position_embeddings)",
                         field=f"{field}.{kind.one_of[0]}")
    if s.rope_type == "llama3" and given["high_freq_factor"] <= given["low_freq_factor"]:
        raise InputError(f"{field}.high_freq_factor is {_short(given['high_freq_factor'])}, not above "
                         f"low_freq_factor {_short(given['low_freq_factor'])}; expected high_freq_factor > "
                         "low_freq_factor (4 and 1 in Llama 3.1)", field=f"{field}.high_freq_factor")
    if s.rope_type == "dynamic" and dims < 4:
        raise InputError(f"{field}: dynamic raises the base to dims/(dims − 2), so it needs rope.dims ≥ 4; "
                         f"rope.dims is {dims}", field="rope.dims")


def _computable(s: Scaling, base: float, dims: int, field: str) -> None:
    """θ' and the attention factor are finite for these parameters (both longrope regimes)."""
    for length in (None, s.original() + 1) if s.rope_type == "longrope" else (None,):
        try:
            theta, factor = s.compute(base, dims, length)
        except (ZeroDivisionError, ValueError, OverflowError) as error:
            raise InputError(f"{field}: {s.rope_type} cannot be computed with these parameters and rope.base "
                             f"{_short(base)} ({error})", field=field) from None
        if not (np.isfinite(theta).all() and math.isfinite(factor)):
            raise InputError(f"{field}: {s.rope_type} with these parameters and rope.base {_short(base)} gives "
                             "θ or an attention factor beyond float64", field=field)
