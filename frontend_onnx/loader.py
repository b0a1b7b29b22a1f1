"""The one road from a model file to a graph, for every command and for ``tune()``: the same file checks, the
same binding of ``--shape`` values, and one rule for the dims nobody bound (the importer takes them as 1)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import LuminalError
from ..values import Shape
from .importer import ImportResult, load


class Unbound(enum.Enum):
    """What a dim nobody bound means to the caller."""

    REFUSE = "refuse"  # what is made is kept and used at other sizes (compiled kernels, tuning winners): refused
    WARN = "warn"  # a one-off run at 1 (check, bench, inspect): the result's warnings name the dims


def unbound_message(names: Iterable[str]) -> str:
    return (f"unbound dimensions {', '.join(names)} would be taken as 1: give them with --shape "
            f"(name=value, or an input's whole shape input=AxB)")


def load_model(path: str | Path, shapes: Mapping[str, Shape] | None, unbound: Unbound,
               optimize: bool = True, max_memory: int | None = None) -> ImportResult:
    """Import the ONNX file at ``path`` with ``shapes`` bound (optimised with ``ir.optimize`` unless
    ``optimize`` is False). LuminalError for a missing file, and for unbound dims under ``Unbound.REFUSE``."""
    if not Path(path).is_file():
        raise LuminalError(f"model {str(path)!r} not found")
    result = load(str(path), dict(shapes or {}), optimize=optimize, max_memory=max_memory)
    if result.unbound and unbound is Unbound.REFUSE:
        raise LuminalError(unbound_message(result.unbound))
    return result
