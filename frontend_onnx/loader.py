"""The one road from a model file to a graph, for every command and for ``tune()``: the same file checks, the
same binding of ``--shape`` values, and one rule for the dims nobody bound (the importer takes them as 1)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from pathlib import Path

import onnx

from ..errors import LuminalError, require_file
from ..values import Shape
from .dims import InputDecl, bind, declared_dims
from .importer import ImportResult, load, read_model


class Unbound(enum.Enum):
    """What a dim nobody bound means to the caller."""

    REFUSE = "refuse"  # what is made is kept and used at other sizes (compiled kernels, tuning winners): refused
    WARN = "warn"  # a one-off run at 1 (check, bench, inspect): the result's warnings name the dims


# how the caller gives sizes, for the refusal of unbound dims: the command line's words, or Python's
CLI_HINT = "give them with --shape (name=value, or an input's whole shape input=AxB)"
API_HINT = "give them in shapes= ({name: value}, or an input's name and its whole shape)"


def unbound_message(names: Iterable[str], hint: str = CLI_HINT) -> str:
    return f"unbound dimensions {', '.join(names)} would be taken as 1: {hint}"


def unbound_dims(model: str | Path | onnx.ModelProto, shapes: Mapping[str, Shape] | None) -> list[str]:
    """The dims of ``model`` (a file or a read proto) that ``shapes`` leaves unbound (named, or ``input[axis]``),
    read from its declared inputs without importing it."""
    proto = read_model(model)[0]
    inits = {t.name for t in proto.graph.initializer} | {sp.values.name for sp in proto.graph.sparse_initializer}
    decls = [InputDecl(vi.name, declared_dims(vi)) for vi in proto.graph.input if vi.name not in inits]
    given = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in (shapes or {}).items()}
    try:
        return bind(decls, given).unbound
    except LuminalError:  # the import words a bad binding in full
        return []


def load_model(path: str | Path, shapes: Mapping[str, Shape] | None, unbound: Unbound,
               optimize: bool = True, max_memory: int | None = None, hint: str = CLI_HINT) -> ImportResult:
    """Import the ONNX file at ``path`` with ``shapes`` bound (optimised with ``ir.optimize`` unless
    ``optimize`` is False). LuminalError for a missing file, and for unbound dims under ``Unbound.REFUSE``
    (before importing; ``hint`` says how to give them)."""
    require_file(path, "model")
    read = read_model(path)  # once: the refusal below and the import both use it
    if unbound is Unbound.REFUSE and (names := unbound_dims(read[0], shapes)):
        raise LuminalError(unbound_message(names, hint))
    result = load(str(path), dict(shapes or {}), optimize=optimize, max_memory=max_memory, read=read)
    if result.unbound and unbound is Unbound.REFUSE:
        raise LuminalError(unbound_message(result.unbound, hint))
    return result
