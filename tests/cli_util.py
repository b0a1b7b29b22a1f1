"""Shared helpers for the command tests: run some ``luminal`` subcommands in-process; whether C kernels build here."""

from __future__ import annotations

from types import ModuleType

import pytest
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


def cpu_ready() -> bool:
    """Whether the C backend can build kernels on this machine (a C compiler)."""
    try:
        from luminal.codegen.backend import get_backend

        get_backend("cpu")
        return True
    except Exception:
        return False


needs_cpu = pytest.mark.skipif(not cpu_ready(), reason="no C compiler on this machine")
