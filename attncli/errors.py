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


def one_line(message: str) -> str:
    """Escape every character that str.splitlines() would break a line at."""
    return "".join(f"\\u{ord(c):04x}" if c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029" or ord(c) < 32 else c
                   for c in message)
