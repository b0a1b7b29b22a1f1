"""The ``luminal`` command. Each subcommand lives in its own module and registers here."""

from __future__ import annotations

import typer

from .. import __version__

app = typer.Typer(
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
