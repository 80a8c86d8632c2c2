"""What every command does at the CLI edge: say a core error's or warning's advice as options,
and decide what `--format auto` writes."""

import sys
from enum import Enum

from attncli.render import formats as registry


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum of `values` (the core's tuple, attncli.base.choices) for a Typer option: the choice
    list is written once, in the core."""
    return Enum(name, {value: value for value in values}, type=str, module=__name__)


def formats(name: str, *offered: str) -> type[Enum]:
    """A command's `--format` choices: `auto` and some of the registered formats
    (attncli/render/formats.py), in the registry's order."""
    family = ("auto",) + registry.names()
    unknown = set(offered) - set(family)
    if unknown:
        raise ValueError(f"not formats: {sorted(unknown)}")
    return choices(name, tuple(f for f in family if f in offered))


# The one auto-format rule, for every command with `--format auto` (compute, check, posenc).
AUTO_HELP = "auto: tables on a terminal, JSON when piped"


def auto_is_table(text_only: bool = False) -> bool:
    """`--format auto`: a table when stdout is a terminal, else JSON. `text_only`: the view has no
    JSON form (compute's --explain and --heatmap), so a table (as text) either way."""
    return text_only or sys.stdout.isatty()


def flag(setting: str, values: tuple) -> str:
    """A setting said as its option: ("masked_rows", ("zero", "uniform")) -> `--masked-rows zero or uniform`;
    a switch turned on, ("lenient_json", (True,)), is the bare flag `--lenient-json`."""
    if values == (True,):
        return f"--{setting.replace('_', '-')}"
    return f"--{setting.replace('_', '-')} " + " or ".join(str(v) for v in values)


def message(error, source: bool = True) -> str:
    """An `AttnError` as the CLI says it: its advice in options (after its file or option, unless
    `source` is False)."""
    return error.text(flag, source)


def warning(notice) -> str:
    """A warning (a `Notice`, or plain text) as the CLI says it."""
    return notice.render(flag) if hasattr(notice, "render") else str(notice)


def write_file(path: str, suffix: str, content) -> None:
    """--output FILE, as render/files.py writes it (atomically): `content`, a text or a binary
    writer; its errors one line naming --output; SIGTERM or SIGHUP mid-write dies of it, the
    temporary file gone. Every command's -o writes through here."""
    # Imported here, for start-up: only --output needs the careful writer.
    from attncli.render.files import Interrupted, write_output
    from attncli.render.target import OutputError

    try:
        write_output(path, suffix, content)
    except OutputError as error:
        raise error.at("--output")
    except Interrupted as stop:
        stop.die()
