"""The error types. The CLI edge turns each into one `error: …` line and exit code 2.

Errors are data until the edge: an error carries the input key it is about (`field`) and a way
out (`advice`) as a setting and its values; the commands say them as options (`--dtype float64`),
the Python API as keyword arguments (`dtype='float64'`). Nothing here names an option.
"""

import difflib
import json
import math
from dataclasses import dataclass
from typing import Callable

# How a setting is said: (setting, values) -> text, e.g. ("dtype", ("float64",)) -> "dtype='float64'".
Say = Callable[[str, tuple], str]


def keyword(setting: str, values: tuple) -> str:
    """A setting as the Python API (and the input document) spells it: `masked_rows='zero' or 'uniform'`."""
    return f"{setting}=" + " or ".join(repr(v) for v in values)


@dataclass(frozen=True)
class Advice:
    """A way out: set `setting` (an input key, also the API's keyword) to one of `values`;
    `template` places the rendered setting in the sentence ("; use {} to allow it")."""

    setting: str
    values: tuple
    template: str

    def render(self, say: Say = keyword) -> str:
        return self.template.format(say(self.setting, self.values))


class AttnError(Exception):
    """Base class: something about the input or the computation the user must fix.
    `field`: the input key it is about ("mask", "q_positions", "heads[1].weights"), or None;
    `also`: other keys it is about (K against Q), so that the edge can name where those came from."""

    def __init__(self, message: str, source: str | None = None, field: str | None = None,
                 advice: Advice | None = None, also: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.source = source
        self.field = field
        self.advice = advice
        self.also = also

    def text(self, say: Say = keyword, source: bool = True) -> str:
        """The whole message, the advice said with `say`, after the file or option it came from."""
        message = self.message + (self.advice.render(say) if self.advice else "")
        return f"{self.source}: {message}" if self.source and source else message

    def __str__(self) -> str:
        return self.text()

    @property
    def key(self) -> str | None:
        """The top-level input key of `field`: "heads" for "heads[1].weights", "Q" for "Q[0][2]"."""
        return None if self.field is None else self.field.split("[", 1)[0].split(".", 1)[0]

    def at(self, source: str) -> "AttnError":
        """Name the file (or option) the problem came from, once, at the public boundary."""
        if self.source is None:
            self.source = source
        return self


class Notice(str):
    """A warning: its text with the advice said as a keyword (JSON and the API see this), and the
    parts (`text`, `advice`) for the CLI edge to say it as an option."""

    text: str
    advice: Advice | None

    def __new__(cls, text: str, advice: Advice | None = None):
        notice = super().__new__(cls, text + (advice.render() if advice else ""))
        notice.text, notice.advice = text, advice
        return notice

    def render(self, say: Say = keyword) -> str:
        return self.text + (self.advice.render(say) if self.advice else "")


class InputError(AttnError):
    """The input is malformed: wrong type, shape, value or key."""


class ReaderGone(Exception):
    """stdout's reader went away (`attn … | head`): not an error. `code` is the exit status the
    command had already decided (check's verdict). Not an OSError: typer turns an EPIPE OSError
    into exit 1."""

    def __init__(self, code: int = 0):
        super().__init__(code)
        self.code = code


class StdoutError(Exception):
    """stdout took less than was written (a full disk, /dev/full, `ulimit -f`): the edge says so
    (`error: cannot write stdout: no space left on device`) and exits 2, never 0 on a short write.
    Not an AttnError, which code on the way may catch and name a file in, nor an OSError, which
    typer treats as its own."""


class NumericError(AttnError):
    """The input is valid but the arithmetic cannot be carried out in the chosen dtype."""


def number_text(x: float) -> str:
    """1000000.0 → 1,000,000; 0.5 → 0.5; inf, nan."""
    return f"{int(x):,}" if math.isfinite(x) and float(x).is_integer() else f"{x:g}"


def out_of_bounds(value: float, low=None, high=None) -> str | None:
    """What is wrong with a numeric setting (an option's or the API's keyword's, read alike), or
    None: `expected a finite number ≥ 0, found inf` (nan passes no bound, inf is no answer)."""
    if math.isfinite(value) and (low is None or value >= low) and (high is None or value <= high):
        return None
    low, high = (None if bound is None else number_text(bound) for bound in (low, high))
    within = f" from {low} to {high}" if low and high else f" ≥ {low}" if low else f" ≤ {high}" if high else ""
    return f"expected a finite number{within}, found {number_text(value)}"


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """` (did you mean "x"?)` for the closest choice, or "". A choice that differs from the word only
    in its digits is another thing, not a typo (float16 is not float64): no suggestion."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    if close and _digits(close[0]) != _digits(word) and _letters(close[0]) == _letters(word):
        return ""
    return f' (did you mean "{close[0]}"?)' if close else ""


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _letters(text: str) -> str:
    return "".join(c for c in text if not c.isdigit())


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 key`, `3 keys`, `2 queries`, `1 entry`, `0 heads`, `1 kv head`: the count and its word,
    for every message and line that counts something; `many` for an irregular plural."""
    if n == 1:
        return f"{n:,} {word}"
    if many is None:
        consonant_y = word.endswith("y") and word[-2:-1] not in ("a", "e", "i", "o", "u")
        many = word[:-1] + "ies" if consonant_y else word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{n:,} {many}"


def comma_items(text: str, expected: str, source: str | None = None, field: str | None = None) -> list[str]:
    """An option's comma-separated list (`--cases scooter,random`), each item stripped. An empty
    value (`''`, `,`) or an empty item (`a,,b`: one left out) is refused, naming its position,
    never dropped: `expected` says what the list holds."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InputError(f"is {quote(text)}; expected {expected}", source, field)
    empty = next((i for i, item in enumerate(items, 1) if not item), None)
    if empty is not None:
        raise InputError(f"is {quote(text)}: item {empty} is empty; expected {expected}", source, field)
    return items


def quote(text: str) -> str:
    """A user's string in a message: quoted, with control and line-breaking characters escaped,
    so that an error is always one line."""
    return one_line(json.dumps(text, ensure_ascii=False))


# Characters that must never reach a terminal raw: C0 controls (line breaks included), DEL, C1
# controls (U+009B is a one-byte CSI), the other line and paragraph separators, bidi embeddings,
# overrides and isolates (they reorder what is shown), characters that show nothing (zero-width
# spaces and joiners, word joiner and invisible operators, the byte-order mark, the soft hyphen,
# tag characters: `\u200bok.json` must not look like `ok.json`), and lone surrogates (not encodable).
_UNSAFE = frozenset(
    [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u2028", "\u2029", "\u200e", "\u200f", "\u061c"]
    + [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)]
    + [chr(c) for c in range(0x200B, 0x200E)] + [chr(c) for c in range(0x2060, 0x2065)]
    + ["\ufeff", "\u00ad", "\u180e"] + [chr(c) for c in range(0xE0000, 0xE0080)])


def visible(text: str) -> str:
    """User text made safe for a terminal or a text file: every control, separator, bidi or
    surrogate character, and every character that shows nothing, becomes a visible `\\uXXXX`
    escape (`\\UXXXXXXXX` past U+FFFF); everything else is kept."""
    return "".join(_escape(c) if c in _UNSAFE or "\ud800" <= c <= "\udfff" else c for c in text)


def _escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def one_line(message: str) -> str:
    """A message that is always one harmless line: see `visible`."""
    return visible(message)
