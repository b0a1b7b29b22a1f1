"""Input shapes from the model's declared dims and the user's ``--shape``.

Exporters write a name for every unknown dim, and some of those names say nothing: Paddle2ONNX
writes ``?`` on every axis, tf2onnx ``unk__123``, Keras ``None``, others ``-1``, ``DynamicDimension.0``
or nothing. Such placeholders never tie two axes together. A whole shape the user gives for an input
wins over its declared names; a real name that two inputs (or two axes) share takes one value where
their shapes agree, and where they do not, onnxruntime still runs the model, so it is a warning.
A dim fixed to a number in the model must be given that number, as onnxruntime requires.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import LuminalError

# a declared dim: a fixed size, a name, or None where the model says nothing
Dim = int | str | None
Given = Mapping[str, "int | tuple[int, ...]"]

_PLACEHOLDER = re.compile(r"\?|-1|None|none|unk__\d+|unk_\d+|DynamicDimension\.\d+")


def is_placeholder(name: str) -> bool:
    """A dim name an exporter writes for "unknown", which does not name a dim shared with others."""
    return not name.strip() or _PLACEHOLDER.fullmatch(name.strip()) is not None


@dataclass(frozen=True)
class InputDecl:
    name: str
    dims: tuple[Dim, ...] | None  # None: the model does not give the rank


@dataclass(frozen=True)
class Binding:
    shapes: dict[str, tuple[int, ...]]  # every input's shape
    symbols: dict[str, int]  # the value each named dim took
    unbound: list[str]  # dims nothing bound, defaulted to 1: a name, or ``input[axis]``
    warnings: list[str]


def declared_dims(vi: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return tuple(out)


def dim_value(name: str, v: object) -> int:
    """The value given for dimension ``name`` (an int, or a 1-tuple or 1-list from ``name=N`` parsing)."""
    if isinstance(v, tuple | list):
        if len(v) != 1:
            raise LuminalError(f"dimension {name!r} takes one integer, got {list(v)}")
        v = v[0]
    if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 0:
        raise LuminalError(f"dimension {name!r} must be a non-negative integer")
    return int(v)


def whole_shape(decl: InputDecl, value: object) -> tuple[int, ...]:
    """An input's whole shape as given (an int for rank 1), checked against its declared rank and fixed dims."""
    if not isinstance(value, int | np.integer | tuple | list):
        raise LuminalError(f"shape for input {decl.name!r} must be non-negative integers")
    whole = (value,) if isinstance(value, int | np.integer) else tuple(value)
    if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0 for d in whole):
        raise LuminalError(f"shape for input {decl.name!r} must be non-negative integers")
    if decl.dims is not None and len(decl.dims) != len(whole):
        raise LuminalError(f"input {decl.name!r} has rank {len(decl.dims)}, but the shape given has rank {len(whole)}")
    for k, (d, v) in enumerate(zip(decl.dims or (), whole)):
        if isinstance(d, int) and d != v:
            raise LuminalError(f"input {decl.name!r} dim {k} is fixed to {d}, but {v} was given")
    return tuple(int(v) for v in whole)


def _from_whole_shapes(decls: Sequence[InputDecl], given: Given, by_name: Mapping[str, int],
                       warnings: list[str]) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """The inputs given whole, and the value each real dim name took in the first of them that has it."""
    shapes: dict[str, tuple[int, ...]] = {}
    seen: dict[str, tuple[int, str]] = {}
    for decl in decls:
        if decl.name not in given:
            continue
        shapes[decl.name] = whole = whole_shape(decl, given[decl.name])
        for k, (d, v) in enumerate(zip(decl.dims or (), whole)):
            if not isinstance(d, str) or is_placeholder(d):
                continue
            where = f"input {decl.name!r} dim {k}"
            if d in by_name and by_name[d] != v:
                warnings.append(f"dimension {d!r} is given as {by_name[d]}, but the shape given for {where} is {v}; "
                                f"that input takes the shape given")
            elif d in seen and seen[d][0] != v:
                warnings.append(f"dimension {d!r} is {seen[d][0]} in {seen[d][1]} but {v} in {where}; each input "
                                f"takes the shape given")
            seen.setdefault(d, (v, where))
    return shapes, {d: v for d, (v, _) in seen.items()}


def bind(decls: Sequence[InputDecl], given: Given) -> Binding:
    """Every input's shape: its whole shape where given, else its dims, named ones by the value given
    for the name or else the one an input's whole shape showed, the rest 1 (listed as unbound)."""
    inputs = {d.name for d in decls}
    names = {d for decl in decls for d in decl.dims or () if isinstance(d, str)}
    unknown = sorted(set(given) - inputs - names)
    if unknown:
        known = sorted(inputs | {n for n in names if not is_placeholder(n)})
        raise LuminalError(f"shape given for {', '.join(map(repr, unknown))}, which is neither an input nor a "
                           f"dimension name of this model (known: {', '.join(map(repr, known)) or 'none'})")
    by_name = {n: dim_value(n, given[n]) for n in names if n in given and n not in inputs}
    warnings: list[str] = []
    shapes, symbols = _from_whole_shapes(decls, given, by_name, warnings)
    unbound: list[str] = []
    for decl in decls:
        if decl.name in shapes:
            continue
        shapes[decl.name] = _declared_shape(decl, by_name, symbols, unbound)
    return Binding(shapes, symbols, unbound, warnings)


def _declared_shape(decl: InputDecl, by_name: Mapping[str, int], symbols: dict[str, int],
                    unbound: list[str]) -> tuple[int, ...]:
    """An input's shape from its declared dims: a named dim takes the value given for its name or seen before,
    else 1 (recorded in ``symbols`` and listed in ``unbound``); a placeholder dim is 1, listed by position."""
    if decl.dims is None:
        raise LuminalError(f"input {decl.name!r} has no known rank; give its whole shape, e.g. "
                           f"{decl.name}=1x3x224x224")
    shape: list[int] = []
    for k, d in enumerate(decl.dims):
        if isinstance(d, int):
            shape.append(d)
        elif d is not None and d in by_name:
            symbols[d] = by_name[d]
            shape.append(by_name[d])
        elif d is not None and not is_placeholder(d):
            if d not in symbols:
                unbound.append(d)
                symbols[d] = 1
            shape.append(symbols[d])
        else:
            unbound.append(f"{decl.name}[{k}]")
            shape.append(1)
    return tuple(shape)
