"""Typer wiring only: options in, `error: …` lines and exit codes out.

Start-up: this module and the command modules (attncli/commands/*.py) import neither numpy nor
rich, so that `attn --version` and `attn --help` start fast; a command's module (its option table,
its choices) is loaded and its Typer command built only when the command is named (`COMMANDS`:
`attn compute …` builds compute alone; --help and completion build them all), and each command
imports its work (numpy, the core, the views: commands/*_run.py) when it runs. Imports inside
functions are kept for that reason only, and say so where they are.
"""

import importlib
import inspect
import os
import re
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Annotated, Callable

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandInfo

try:  # typer 0.2x vendors click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer on the real click
    from click.exceptions import ClickException

from attncli import __version__
from attncli.base.errors import AttnError, ReaderGone, StdoutError, did_you_mean, one_line
from attncli.commands.edge import message
from attncli.render.out import whole_stdout

EXIT_TROUBLE = 2  # as diff: 0 same/ok, 1 answers differ, 2 trouble
# What to try when memory runs out, per command: only the options that command has.
OUT_OF_MEMORY = {"compute": "try --stages output (without --do), --output FILE.npz (with --do: --output "
                            "grads.npz) or a smaller problem",
                 "check": "check keeps every stage of the problem in memory: try a smaller problem",
                 None: "try a smaller problem"}


def _command(args) -> str | None:
    """The command named on the command line (compute, check, …), if any."""
    words = [word for word in (sys.argv[1:] if args is None else args) if not word.startswith("-")]
    return words[0] if words else None


def fail(message: str) -> None:
    """One line on stderr, nothing on stdout, exit 2 (also when stderr cannot take the line:
    `2>/dev/full` or closed)."""
    try:
        sys.stderr.write(f"error: {one_line(message)}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass
    sys.exit(EXIT_TROUBLE)


class _PlainFlags:
    """Help without a type placeholder on plain on/off flags (Typer shows `<bool>` there), and
    without any style under NO_COLOR."""

    def format_help(self, ctx, formatter) -> None:
        # Imported here, for start-up: typer's rich help loads rich, which only --help needs.
        from typer import rich_utils

        # NO_COLOR (set and not empty) drops every style, as in the tables; rich alone keeps bold and dim.
        rich_utils.COLOR_SYSTEM = None if os.environ.get("NO_COLOR", "") else "auto"
        for param in self.get_params(ctx):
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""  # Typer's rich help prints the metavar, when set, as the type
        super().format_help(ctx, formatter)


class AttnCommand(_PlainFlags, TyperCommand):
    """A command whose help shows plain flags without a type."""


def prose(doc: str) -> str:
    """A docstring as help: lines within a paragraph are joined, so that rich wraps each paragraph
    at the terminal's width (Typer's rich mode keeps every line break as written). A paragraph
    whose first line is `\\b` keeps its lines (click's marker for "do not rewrap")."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p.removeprefix("\b\n") if p.startswith("\b\n") else " ".join(p.split("\n"))
                       for p in paragraphs)


def usage_message(error: ClickException) -> str:
    """Click's message without the "Value error, " its value conversion prepends, with the closest
    choice for a mistyped one (`--rope-style halff`), and where to look."""
    text = error.format_message().replace("Value error, ", "").rstrip(".")
    choice = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)$", text)
    if choice:
        text += did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)), 0.5)
    return text + "; see --help"


class AttnGroup(_PlainFlags, TyperGroup):
    """Turns every usage and input error into one `error: …` line and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise ReaderGone() from None

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            code = self._run(args, prog_name, extra)
        except SystemExit as done:  # a verdict (check's 0 or 1), or an error already said (2)
            code = done.code
        code = code if isinstance(code, int) else 0
        if code != EXIT_TROUBLE:
            _flush_stdout()  # here, where a full disk is still an error, not at interpreter exit
        sys.exit(code)

    def _run(self, args, prog_name, extra):
        """The command's exit code; every error said as one `error: …` line (exit 2)."""
        try:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except StdoutError as error:  # a write larger than the buffer, to a full disk
            _discard_stdout()
            fail(str(error))
        except AttnError as error:
            fail(message(error))
        except ClickException as error:
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `attn`: help, not an error
                print(error.format_message())
                return 0
            fail(usage_message(error))
        except typer.Abort:
            fail("aborted")
        except MemoryError:
            fail("out of memory; " + OUT_OF_MEMORY.get(_command(args), OUT_OF_MEMORY[None]))
        except BrokenPipeError:
            _discard_stdout()  # the reader went away (`attn … | head`): not an error
            return 0
        except ReaderGone as gone:
            _discard_stdout()
            return gone.code
        except Exception as error:  # a bug: still one line, but say so and how to see more
            if os.environ.get("ATTN_DEBUG"):
                raise
            fail(f"internal error ({type(error).__name__}: {error}); please report it, "
                 "and rerun with ATTN_DEBUG=1 for the traceback")


@dataclass(frozen=True)
class Command:
    """One command of `attn`: its function (`module`.`function`, imported when the command is named:
    for start-up, a command module's option table and choices cost about as much to load as Typer
    takes to build its command), and whether its help is its docstring as prose (paragraphs rewrapped)."""
    module: str
    function: str
    as_prose: bool = False

    def callback(self) -> Callable:
        return getattr(importlib.import_module(self.module), self.function)


# The commands, in --help's order.
COMMANDS: dict[str, Command] = {
    "compute": Command("attncli.commands.compute", "compute"),
    "check": Command("attncli.commands.check", "check", as_prose=True),
    "exercise": Command("attncli.commands.learn", "exercise", as_prose=True),
    "example": Command("attncli.commands.learn", "example"),
    "posenc": Command("attncli.commands.learn", "posenc"),
    "capture": Command("attncli.commands.capture", "capture"),
    "heads": Command("attncli.commands.heads", "heads"),
}


def build(name: str) -> TyperCommand:
    """The Typer command `name` of COMMANDS, as `app.command(...)` would make it."""
    command = COMMANDS[name]
    callback = command.callback()
    info = CommandInfo(name=name, cls=AttnCommand, callback=callback,
                       help=prose(callback.__doc__) if command.as_prose else None)
    return typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                            rich_markup_mode=app.rich_markup_mode)


class Commands(MutableMapping):
    """The group's commands by name: every name of COMMANDS, each built when it is first looked up
    (click looks up the command named on the line; --help and completion go through them all)."""

    def __init__(self):
        self.built: dict[str, TyperCommand] = {}

    def __getitem__(self, name: str) -> TyperCommand:
        if name not in self.built:
            if name not in COMMANDS:
                raise KeyError(name)
            self.built[name] = build(name)
        return self.built[name]

    def __setitem__(self, name: str, command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self):
        return iter(list(COMMANDS) + [name for name in self.built if name not in COMMANDS])

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self.built))


class AttnApp(AttnGroup):
    """attn's own group: its commands are `Commands`, built when named."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = Commands()


app = typer.Typer(cls=AttnApp, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  help="attn: scaled dot-product attention, softmax(Q Kᵀ · scale + bias) V, step by step.\n\n"
                       "Exit codes as diff: 0 ok, 1 answers differ (check), 2 trouble (bad input or usage).")


def _version(value: bool) -> None:
    if value:
        print(f"attn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """The group's own options; its help text is the Typer app's `help`."""


def main() -> None:
    """Console-script entry point. Output is UTF-8 whatever the locale (JSON is UTF-8 by
    RFC 8259, and the tables use √, ∞ and box drawing)."""
    if sys.stdin is None:  # closed at start (`<&-`): no stdin, as /dev/null, its descriptor held
        sys.stdin = open(os.open(os.devnull, os.O_RDONLY), encoding="utf-8")
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and stream.encoding.lower().replace("-", "") != "utf8":
            stream.reconfigure(encoding="utf-8")
    sys.stdout = whole_stdout(sys.stdout)  # UTF-8, and a short write (a full disk) is an error, not lost
    try:
        app()
    finally:
        # Output still buffered when the command ends is flushed here, not at interpreter exit,
        # where a reader that went away (`attn compute p.json | true`) would turn into exit 1.
        # (A command's own output was flushed in AttnGroup.main; what is left follows an error.)
        try:
            sys.stdout.flush()
        except (BrokenPipeError, StdoutError):
            _discard_stdout()


def _flush_stdout() -> None:
    """What the command printed, to stdout: a reader that went away is not an error; a full disk
    (or /dev/full, or `ulimit -f`) is one, exit 2, whatever the command had decided."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
    except StdoutError as error:
        _discard_stdout()
        fail(str(error))


def _discard_stdout() -> None:
    """The reader went away (or the disk is full): point stdout at /dev/null so that no later
    flush complains."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)
