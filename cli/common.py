"""What every command shares: one-line errors with exit 2, JSON output, the console."""

from __future__ import annotations

import functools
import json
import sys
import traceback
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
MAX_MEMORY_OPT = typer.Option(None, "--max-memory", help="Refuse a model that needs more memory than this "
                                                         "(8G, 512M; default: the memory available).")


def max_memory_of(text: str | None) -> int | None:
    """``--max-memory`` in bytes (None: the memory available)."""
    from ..frontend_onnx.limits import parse_size

    return None if text is None else parse_size(text)


# exit code of a fault in luminal itself (1 is a failed check, 2 bad input)
INTERNAL_ERROR = 3


def printable(text: str) -> str:
    """``text`` with control characters (terminal escape sequences, newlines, bidi overrides) written as
    Python escapes, so that a name from a model or a file cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(text: object) -> str:
    """Text from a model or a file, for rich: control characters escaped, never read as markup."""
    return escape(printable(str(text)))


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {shown(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


_debug = {"trace": False}


def show_traces(on: bool) -> None:
    """``luminal --debug`` (or LUMINAL_DEBUG=1): an internal error prints its trace too."""
    _debug["trace"] = on


def handle_errors(fn: Callable) -> Callable:
    """Turn LuminalError (and any input-related failure) into one line and exit 2; any other fault
    into one line and exit 3 (its trace with ``--debug``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.TyperException, typer.Abort):
            raise
        except LuminalError as e:
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__, e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except (OSError, MemoryError) as e:
            fail(f"{type(e).__name__}: {e}")
        except Exception as e:
            if _debug["trace"]:
                traceback.print_exc()
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            fail(f"internal error: {type(e).__name__}{': ' + first if first else ''} (a bug in luminal; "
                 f"luminal --debug shows where)", INTERNAL_ERROR)

    return wrapper


def write_output(text: str, path: str | None) -> None:
    """A report into the file ``path``, or onto stdout where ``path`` is '-' or None."""
    if path and path != "-":
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def one_stdout(**paths: str | None) -> bool:
    """Whether one of the report options (name: path) is '-' (stdout, where the tables then must not go);
    two of them there would interleave, so that is refused."""
    dashes = [f"--{name}" for name, path in paths.items() if path == "-"]
    if len(dashes) > 1:
        raise LuminalError(f"{' and '.join(dashes)} both write to stdout ('-'): give one of them a file")
    return bool(dashes)


def emit_json(data: Any, path: str | None = None) -> None:
    write_output(json.dumps(data, indent=2, default=str) + "\n", path)
