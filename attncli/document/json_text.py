"""Strict JSON text to Python values: RFC 8259, no NaN/Infinity, no number that overflows float64,
no key twice in one object. The lowest reader: `loading` (files) and `text_input` (inline text)
both use it.
"""

from __future__ import annotations

import json
import math

from attncli.base.errors import InputError
from attncli.base.values import Typed, excerpt, json_int, unique_keys


def _reject_constant(token: str):
    raise ValueError(f"{token} is not valid JSON; write −∞ as null (a bias's blocked cells, or an answer's masked ones) and use finite numbers")


def _finite_float(token: str, kind=float) -> float:
    value = kind(token)
    if not math.isfinite(value):
        raise ValueError(f"the number {excerpt(token)} overflows float64")
    return value


def _typed_float(token: str) -> Typed:
    return _finite_float(token, Typed.parse)


class _Bad(str):
    """A token the strict reading refuses (NaN, Infinity, a number past float64), kept in place
    by `_where` to find the key it stands in."""


def _bad_float(token: str):
    value = float(token)
    return value if math.isfinite(value) else _Bad(token)


def _path(value, at: str = ""):
    """Where the first `_Bad` token lies in a parsed value: `kv_heads`, `rope.scaling.factor`,
    `K[1][0]`; None when there is none."""
    if isinstance(value, _Bad):
        return at
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _path(child, f"{at}.{key}" if isinstance(key, str) and at else
                      key if isinstance(key, str) else f"{at}[{key}]")
        if found is not None:
            return found
    return None


def _where(text: str) -> str:
    """ at KEY: where the refused token of a text is, when a lenient reading finds it."""
    try:
        found = _path(json.loads(text, parse_constant=_Bad, parse_float=_bad_float))
    except (ValueError, RecursionError):
        return ""
    return f" at {found}" if found else ""


def _json_hint(text: str, position: int) -> str:
    """Advice for the slips people make writing JSON numbers by hand (`.5`, `1.`, `−1`)."""
    if text[position:position + 1] == "\u2212":
        return " (JSON numbers take the ASCII minus: -1, not \u22121)"
    point = position + (text[position:position + 2] == "-.")
    if text[point:point + 1] != ".":
        return ""
    if not text[point - 1:point].isdigit():
        return " (JSON numbers need a leading zero: 0.5)"
    if not text[point + 1:point + 2].isdigit():
        return " (JSON numbers need a digit after the point: 1.0)"
    return ""


def parse_json(text: str, source: str, keep_decimals: bool = False):
    """Strict RFC 8259 JSON: no NaN/Infinity tokens, no numbers that overflow float64, no key
    twice in one object (at any depth). With `keep_decimals`, floats are `Typed`: they
    remember how many decimals they had."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=json_int,
                          object_pairs_hook=unique_keys,
                          parse_float=_typed_float if keep_decimals else _finite_float)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
                         + _json_hint(text, error.pos), source) from None
    except ValueError as error:  # raised by the hooks above
        raise InputError(f"invalid JSON{_where(text)}: {error}", source) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply; matrices have at most 3 dimensions",
                         source) from None


def repeated_key_at(text: str) -> tuple[int, int, str] | None:
    """(line, column, key) of the first key given twice in one object of a JSON text, by a scan of
    its strings and brackets alone: the text need not parse (a trailing comma, a comment blanked to
    spaces), so that a reader can say where the key is beside the slip the strict reading found."""
    stack: list[set | None] = []  # per open bracket: an object's keys so far, or None for a list
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = _string_end(text, i)
            after = end
            while after < n and text[after] in " \t\r\n":
                after += 1
            if stack and stack[-1] is not None and after < n and text[after] == ":":
                try:
                    key = json.loads(text[i:end])
                except ValueError:
                    key = text[i:end]
                if key in stack[-1]:
                    line = text.count("\n", 0, i) + 1
                    return line, i - (text.rfind("\n", 0, i) + 1) + 1, key
                stack[-1].add(key)
            i = end
            continue
        if c in "{[":
            stack.append(set() if c == "{" else None)
        elif c in "]}" and stack:
            stack.pop()
        i += 1
    return None


def _string_end(text: str, start: int) -> int:
    """The index after the string that opens at `start` (its end of text when it never closes)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return len(text)


def written_decimals(x) -> int:
    """The decimals a JSON number was written with: a `Typed` float's own; a plain float's from
    its shortest form (what json.dumps writes: 0.7679 → 4, 2.0 → 1, 1e-05 → 5); an int's 0."""
    if isinstance(x, Typed):
        return x.decimals
    if isinstance(x, float) and math.isfinite(x):
        return Typed.parse(repr(x)).decimals
    return 0
