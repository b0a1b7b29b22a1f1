"""What every command shares: one-line errors with exit 2, JSON output, the console."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import LuminalError

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)

# options several commands share
SHAPE_OPT = typer.Option(None, "--shape", help="Bind dims: batch=1,seq=128 or input=1x3x224x224.")
CACHE_OPT = typer.Option(None, "--cache", help="Tuning cache file (default: $LUMINAL_CACHE or "
                                               "~/.cache/luminal/tuning.db).")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of tables.")
JSON_FILE_OPT = typer.Option(None, "--json", help="Write the report as JSON to this file ('-': stdout).")


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(fn: Callable) -> Callable:
    """Turn LuminalError (and any input-related failure) into one line and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except LuminalError as e:
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__, e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except (OSError, MemoryError) as e:
            fail(f"{type(e).__name__}: {e}")

    return wrapper


def emit_json(data: Any, path: str | None = None) -> None:
    text = json.dumps(data, indent=2, default=str)
    if path and path != "-":
        with open(path, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


def parse_shapes(spec: list[str] | None) -> dict[str, Any]:
    """``--shape batch=1,seq=128`` and ``--shape x=1x3x48x320`` into {name: int | tuple}."""
    out: dict[str, Any] = {}
    for item in spec or []:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise LuminalError(f"bad --shape {part!r}: expected name=value or input=AxBxC")
            k, v = part.split("=", 1)
            try:
                dims = tuple(int(d) for d in v.lower().split("x"))
            except ValueError:
                raise LuminalError(f"bad --shape {part!r}: {v!r} is not an integer or AxBxC") from None
            if any(d < 0 for d in dims):
                raise LuminalError(f"bad --shape {part!r}: dimensions must be non-negative")
            out[k.strip()] = dims[0] if len(dims) == 1 and "x" not in v.lower() else dims
    return out
