"""Shared helper for the command tests: run some ``luminal`` subcommands in-process."""

from __future__ import annotations

from types import ModuleType

import typer
from typer.testing import CliRunner, Result


def invoke(*modules: ModuleType, args: list[str]) -> Result:
    """Run ``args`` on an app holding only the commands that ``modules`` register."""
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def root() -> None:
        """test root"""

    for module in modules:
        module.register(app)
    return CliRunner().invoke(app, args)
