"""The ``luminal`` command. Each subcommand lives in its own module and registers here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer vendors its own click from 0.2x: its commands raise these, not the click package's
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - an older typer
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from .. import __version__


def usage_line(e: ClickException) -> str:
    """A usage error (bad option value, unknown option, missing argument) as one line: the command, what is
    wrong, and where the help is."""
    ctx = e.ctx if isinstance(e, UsageError) else None
    where = f"{ctx.command_path}: " if ctx is not None else ""
    message = " ".join(e.format_message().split())
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"{where}{message}{hint}"


class OneLineUsage(TyperGroup):
    """The root command: typer's usage errors, which it prints as a framed box of five lines or more, become
    one line on stderr and exit 2, on every subcommand; ``--help`` and a bare ``luminal`` still show the help."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage():
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line_usage() -> Iterator[None]:
    from .common import fail

    try:
        yield
    except NoArgsIsHelpError:
        raise
    except ClickException as e:
        fail(usage_line(e), 2)


app = typer.Typer(
    cls=OneLineUsage,
    name="luminal",
    help="An autotuning compiler for ONNX models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"luminal {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
         debug: bool = typer.Option(False, "--debug", envvar="LUMINAL_DEBUG",
                                    help="Print the trace of an internal error (exit 3).")) -> None:
    """An autotuning compiler for ONNX models."""
    from .common import show_traces

    show_traces(debug)


# each module defines register(app); add a line when you add a command
COMMANDS: list[str] = [
    "cache_cmd",
    "doctor_cmd",
    "check_cmd",
    "inspect_cmd",
    "bench_cmd",
    "compile_cmd",
    "tune_cmd",
]


def _register() -> None:
    # one line per command module; each module defines register(app)
    import importlib

    for name in COMMANDS:
        importlib.import_module(f"{__package__}.{name}").register(app)


def main() -> None:
    _register()
    app()
