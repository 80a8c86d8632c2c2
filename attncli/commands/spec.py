"""Options declared once: the machinery every command's option table goes through.

A command's options are a tuple of `Option`s (like httpie's parser spec): its flags, the input key
it sets (None for a view option: how the result is shown), its help, its help panel, its type or
choices, and the reader that turns its text into the key's value. From that one table come:
- the Typer parameters (`command(table)` gives the command function the signature Typer reads),
  so `--help`, parsing, usage errors and shell completion are Typer's own;
- the options as values (`chosen(table, values)`: choices as their words, defaults filled in);
- the settings a document gets from them (each command's options module maps keys with it);
- the README's option lists (`reference(table)`, written by commands/reference.py).

Light: no numpy, no rich; start-up builds the tables.
"""

import inspect
import math
from enum import Enum
from types import SimpleNamespace
from typing import Annotated, Callable, Optional

import typer

from attncli.base.errors import InputError
from attncli.commands.edge import choices as choice_enum

# What an option's value is read into, for Typer: its Python type (a choice is an Enum).
TYPES = (str, int, float, bool, list)


class Option:
    """One option (or the argument) of a command.

    name     the Python name Typer passes it by (and the options' attribute)
    help     its --help text
    flags    its flags; default `--name` with hyphens (`q_positions` -> `--q-positions`)
    key      the input document's key it sets (attncli/document/schema.py), or None: a view option
    read     text -> the key's value (commands/option_text.py); None: the value as Typer parsed it
    part     for keys set by several options (alibi, rope): which part of the key this one gives
    modifier changes how its key's given value is read (--invert-mask): no value of its own; the
             command passes it on
    matrix   a matrix option: a path or inline text, read by the loader as the key's matrix
    panel    its --help panel (None: "Options")
    type     str, int, float, bool (a flag) or list (repeatable str)
    choices  a tuple of words (the core's, attncli/base/choices.py) or an Enum (edge.formats)
    default  its default (a choice's default as its word)
    metavar, low, high   shown placeholder; Typer's min and max
    argument the command's positional argument instead of an option
    """

    __slots__ = ("name", "help", "flags", "key", "read", "part", "matrix", "panel", "type", "choices",
                 "default", "metavar", "low", "high", "argument", "enum", "modifier")

    def __init__(self, name: str, help: str, *, flags: tuple[str, ...] = (), key: str | None = None,
                 read: Callable | None = None, part: str | None = None, matrix: bool = False,
                 modifier: bool = False,
                 panel: str | None = None, type: type = str, choices=None, default=None,
                 metavar: str | None = None, low=None, high=None, argument: bool = False):
        if type not in TYPES:
            raise ValueError(f"{name}: type {type} is not one of {TYPES}")
        self.name, self.help, self.key, self.read, self.part, self.matrix = name, help, key, read, part, matrix
        self.modifier = modifier
        self.flags = flags or (() if argument else ("--" + name.replace("_", "-"),))
        self.panel, self.type, self.choices, self.metavar = panel, type, choices, metavar
        self.default = False if type is bool and default is None else default
        self.low, self.high, self.argument = low, high, argument
        self.enum = None
        if isinstance(choices, tuple):
            self.enum = choice_enum("".join(w.title() for w in name.split("_")), choices)
        elif choices is not None:
            self.enum = choices

    @property
    def flag(self) -> str:
        """The option's long flag, as errors and the README name it."""
        return self.flags[0] if self.flags else self.name.upper()

    @property
    def words(self) -> tuple[str, ...] | None:
        """A choice option's words, in order."""
        return None if self.enum is None else tuple(member.value for member in self.enum)

    def annotation(self):
        """The Typer annotation: the type (Optional when the default is None) and its Option."""
        kind = self.enum if self.enum is not None else list[str] if self.type is list else self.type
        if self.default is None:
            kind = Optional[kind]
        if self.argument:
            return Annotated[kind, typer.Argument(help=self.help, show_default=False)]
        bounds = {name: value for name, value in (("min", self.low), ("max", self.high)) if value is not None}
        if self.type is float:  # bounds checked with finiteness: nan passes no bound, and inf is no answer
            bounds = {"callback": self.finite}
        info = typer.Option(*self.flags, help=self.help, rich_help_panel=self.panel, metavar=self.metavar,
                            show_default=self.default is not None, **bounds)
        return Annotated[kind, info]

    def finite(self, value):
        """A float option's value: a finite number within its bounds. Typer's own bound check
        let `inf` and `1e400` (read as inf) through, and said of `nan` that it "should be greater
        than or equal to 0"; this says what was expected, naming the option."""
        if value is None or (math.isfinite(value) and (self.low is None or value >= self.low)
                             and (self.high is None or value <= self.high)):
            return value
        low, high = (None if bound is None else _number(bound) for bound in (self.low, self.high))
        within = f" from {low} to {high}" if low and high else f" ≥ {low}" if low else f" ≤ {high}" if high else ""
        raise InputError(f"expected a finite number{within}, found {_number(value)}", self.flag)

    def typer_default(self):
        """The default as Typer holds it: a choice's default as its Enum member."""
        return self.enum(self.default) if self.enum is not None and self.default is not None else self.default


def signature(table: tuple[Option, ...]) -> inspect.Signature:
    """The signature Typer reads: one keyword parameter per option, in the table's order (the
    order of --help)."""
    kind = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature([inspect.Parameter(o.name, kind, default=o.typer_default(), annotation=o.annotation())
                              for o in table])


def command(table: tuple[Option, ...]):
    """Decorate `def cmd(**values)`: Typer sees the table's options as its parameters."""
    def decorate(function):
        function.__signature__ = signature(table)
        return function
    return decorate


def _number(x: float) -> str:
    """1000000.0 → 1,000,000; 0.5 → 0.5; inf, nan."""
    return f"{int(x):,}" if math.isfinite(x) and float(x).is_integer() else f"{x:g}"


def chosen(table: tuple[Option, ...], values: dict) -> SimpleNamespace:
    """The options as Typer passed them (or a test names them), each choice as its word and each
    option not given at its default."""
    unknown = set(values) - {o.name for o in table}
    if unknown:
        raise TypeError(f"not options of this command: {', '.join(sorted(unknown))}")
    return SimpleNamespace(**{o.name: _word(values.get(o.name, o.default)) for o in table})


def _word(value):
    return value.value if isinstance(value, Enum) else value


def find(table: tuple[Option, ...], name: str) -> Option:
    return next(o for o in table if o.name == name)


def settings(table: tuple[Option, ...], o: SimpleNamespace, parts: dict[str, Callable]) -> tuple[dict, dict, dict]:
    """(matrices, settings, origin): what the given options set in the input document, by key.
    Matrix options pass their text on (the loader reads it); every other option with a key gives
    its `read` value; keys set by several options (`part`) are made by `parts[key]` from the given
    parts, which returns the key's value and where each part came from. `origin`: key -> flag."""
    matrices, values, origin = {}, {}, {}
    grouped: dict[str, dict] = {}
    for option in table:
        value = getattr(o, option.name)
        if option.key is None or option.argument or option.modifier:
            continue
        if option.matrix:
            matrices[option.key] = value
        elif option.part is not None:
            grouped.setdefault(option.key, {})[option.part] = (value, option.flag)
        elif value is not None and value is not False:
            values[option.key] = option.read(value) if option.read else value
            origin[option.key] = option.flag
    for key, given_parts in grouped.items():
        value, came_from = parts[key](given_parts)
        if value is not None:
            values[key] = value
            origin |= came_from
    return matrices, values, origin


def reference(table: tuple[Option, ...]) -> str:
    """The table as the README lists it: a Markdown table of flag (with its placeholder or choices),
    input key (a column only when some option sets one; — for none) and help, in --help's order."""
    keyed = any(option.key for option in table)
    lines = ["| option | input key | what it does |" if keyed else "| option | what it does |",
             "|---|---|---|" if keyed else "|---|---|"]
    for option in table:
        flags = ", ".join(f"`{flag}`" for flag in option.flags) or f"`{option.flag}` (argument)"
        if option.metavar:
            flags += f" `{option.metavar}`"
        elif option.enum is not None:
            flags += f" `{'|'.join(option.words)}`"
        default = "" if option.default in (None, False) else f" Default: `{option.default}`."
        cells = [flags] + ([f"`{option.key}`" if option.key else "—"] if keyed else [])
        cells.append(" ".join(option.help.split()) + default)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text in a Markdown table cell: a `|` would end the cell."""
    return text.replace("|", "\\|")
