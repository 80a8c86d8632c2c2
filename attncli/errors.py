"""The error types. The CLI edge turns each into one `error: …` line and exit code 2."""


class AttnError(Exception):
    """Base class: something about the input or the computation the user must fix."""

    def __init__(self, message: str, source: str | None = None):
        super().__init__(message)
        self.message = message
        self.source = source

    def __str__(self) -> str:
        return f"{self.source}: {self.message}" if self.source else self.message

    def at(self, source: str) -> "AttnError":
        """Name the file (or option) the problem came from, once, at the public boundary."""
        if self.source is None:
            self.source = source
        return self


class InputError(AttnError):
    """The input is malformed: wrong type, shape, value or key."""


class ReaderGone(Exception):
    """stdout's reader went away (`attn … | head`): not an error. `code` is the exit status the
    command had already decided (check's verdict). Not an OSError: typer turns an EPIPE OSError
    into exit 1."""

    def __init__(self, code: int = 0):
        super().__init__(code)
        self.code = code


class NumericError(AttnError):
    """The input is valid but the arithmetic cannot be carried out in the chosen dtype."""


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """` (did you mean "x"?)` for the closest choice, or "" (difflib is loaded only on errors)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f' (did you mean "{close[0]}"?)' if close else ""


def quote(text: str) -> str:
    """A user's string in a message: quoted, with control and line-breaking characters escaped,
    so that an error is always one line."""
    import json

    return one_line(json.dumps(text, ensure_ascii=False))


# Characters that must never reach a terminal raw: C0 controls (line breaks included), DEL, C1
# controls (U+009B is a one-byte CSI), the other line and paragraph separators, bidi embeddings,
# overrides and isolates (they reorder what is shown), and lone surrogates (not encodable).
_UNSAFE = frozenset(
    [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u2028", "\u2029", "\u200e", "\u200f", "\u061c"]
    + [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)])


def visible(text: str) -> str:
    """User text made safe for a terminal or a text file: every control, separator, bidi or
    surrogate character becomes a visible `\\uXXXX` escape; everything else is kept."""
    return "".join(f"\\u{ord(c):04x}" if c in _UNSAFE or "\ud800" <= c <= "\udfff" else c for c in text)


def one_line(message: str) -> str:
    """A message that is always one harmless line: see `visible`."""
    return visible(message)
