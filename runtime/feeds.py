"""A model's inputs and outputs as onnxruntime describes them (symbolic dims as their names), and the checks of a
run's feeds against them: names, element types, and shapes that bind each symbolic dim to one size."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import LuminalError
from ..frontend_onnx.dims import Dim, InputDecl, declared_dims, dim_value, is_placeholder, whole_shape
from ..frontend_onnx.importer import inferred_elems
from ..frontend_onnx.structure import clean
from .model import TensorSpec


@dataclass(frozen=True)
class IOSpec:
    """An input or output: ``dims`` as declared (a size, a dim name, None where unknown; None for no known rank)."""

    name: str
    dims: tuple[Dim, ...] | None
    elem: int  # its ONNX element type

    @functools.cached_property
    def dtype(self) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem))

    @functools.cached_property
    def sized(self) -> tuple[tuple[int, int], ...]:
        """(axis, size) of each dim declared by its size."""
        return tuple((k, d) for k, d in enumerate(self.dims or ()) if isinstance(d, int))

    @functools.cached_property
    def shared(self) -> tuple[tuple[int, str], ...]:
        """(axis, name) of each dim declared by a name, one size across the inputs in a run (not a placeholder)."""
        return tuple((k, d) for k, d in enumerate(self.dims or ()) if isinstance(d, str) and not is_placeholder(d))

    @property
    def type(self) -> str:
        """onnxruntime's name of its type, e.g. ``tensor(float)``."""
        return f"tensor({TensorProto.DataType.Name(self.elem).lower()})"

    @property
    def shape(self) -> list[int | str | None]:
        return list(self.dims) if self.dims is not None else []

    @staticmethod
    def of_value(vi: onnx.ValueInfoProto) -> IOSpec:
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else TensorProto.UNDEFINED
        if elem not in TensorProto.DataType.values():
            raise LuminalError(f"{clean(vi.name)!r} declares element type {elem}, which ONNX does not define")
        return IOSpec(vi.name, declared_dims(vi), elem or TensorProto.FLOAT)

    @staticmethod
    def of_spec(spec: TensorSpec) -> IOSpec:
        dtype = np.dtype(spec.declared) if spec.declared else spec.dtype.np
        return IOSpec(spec.name, tuple(spec.shape), helper.np_dtype_to_tensor_dtype(dtype))


def model_io(proto: onnx.ModelProto) -> tuple[list[IOSpec], list[IOSpec]]:
    """The graph's real inputs (initializers listed as inputs left out) and its outputs."""
    g = proto.graph
    inits = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer}
    inferred = inferred_elems(proto, {})  # an output's type where the model declares none, as the run returns it
    outputs = [IOSpec.of_value(vi) for vi in g.output]
    outputs = [dataclasses.replace(o, elem=inferred[o.name])
               if not vi.type.tensor_type.elem_type and o.name in inferred else o for o, vi in zip(outputs, g.output)]
    return [IOSpec.of_value(vi) for vi in g.input if vi.name not in inits], outputs


def constrain(specs: Sequence[IOSpec], shapes: Mapping[str, Any]) -> list[IOSpec]:
    """``specs`` with the sizes given in ``shapes`` (a dim name -> size, or an input's name -> its whole shape)
    written into their dims."""
    by_input = {s.name: s for s in specs}
    names = {d for s in specs for d in s.dims or () if isinstance(d, str) and not is_placeholder(d)}
    unknown = sorted(set(shapes) - set(by_input) - names)
    if unknown:
        known = sorted(set(by_input) | names)
        raise LuminalError(f"shapes names {', '.join(map(repr, unknown))}, which is neither an input nor a dimension "
                           f"name of this model (known: {', '.join(map(repr, known)) or 'none'})")
    sizes = {k: _size(k, v) for k, v in shapes.items() if k not in by_input}
    out = []
    for s in specs:
        if s.name in shapes:
            whole = _whole(s, shapes[s.name])
            out.append(IOSpec(s.name, whole, s.elem))
        else:
            dims = None if s.dims is None else tuple(sizes.get(d, d) if isinstance(d, str) else d for d in s.dims)
            out.append(IOSpec(s.name, dims, s.elem))
    return out


def _size(name: str, value: Any) -> int:
    try:
        return dim_value(name, value)
    except LuminalError as e:
        raise LuminalError(f"shapes[{name!r}]: {e}") from None


def _whole(spec: IOSpec, value: Any) -> tuple[int, ...]:
    try:
        return whole_shape(InputDecl(spec.name, spec.dims), value)
    except LuminalError as e:
        raise LuminalError(f"shapes[{spec.name!r}]: {e}") from None


def check_feeds(specs: Sequence[IOSpec], input_feed: object) -> dict[str, np.ndarray]:
    """The feeds as arrays, every input given once with its element type (or an integer type that widens to it)
    and a shape that fits its dims, each dim name taking one size across the inputs."""
    if not isinstance(input_feed, dict):
        raise LuminalError("input_feed must be a dict of input name -> array")
    if len(input_feed) != len(specs):
        _refuse_names(specs, input_feed)
    feeds: dict[str, np.ndarray] = {}
    seen: dict[str, tuple[int, str, int]] = {}  # a dim name's size, where it was read
    for s in specs:
        arr = input_feed.get(s.name, _MISSING)
        if arr is _MISSING:
            _refuse_names(specs, input_feed)
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        want = s.dtype
        if arr.dtype != want:
            if not (arr.dtype.kind in "biu" and np.can_cast(arr.dtype, want, "safe")):
                raise LuminalError(f"input {s.name!r}: expected {want.name}, got {arr.dtype}")
            arr = arr.astype(want)
        _check_shape(s, arr.shape, seen)
        feeds[s.name] = arr
    return feeds


_MISSING = object()


def _refuse_names(specs: Sequence[IOSpec], input_feed: dict) -> NoReturn:
    """Refuse feeds that name an input the model lacks, or lack one it has."""
    by_name = {s.name: s for s in specs}
    unknown = [k for k in input_feed if k not in by_name]
    if unknown:
        raise LuminalError(f"unknown input name(s) {', '.join(map(repr, unknown))}; "
                           f"expected {', '.join(map(repr, by_name))}")
    missing = [k for k in by_name if k not in input_feed]
    raise LuminalError(f"missing input(s) {', '.join(map(repr, missing))}")


def _check_shape(spec: IOSpec, shape: tuple[int, ...], seen: dict[str, tuple[int, str, int]]) -> None:
    if spec.dims is None:
        return
    if len(spec.dims) != len(shape):
        raise LuminalError(f"input {spec.name!r}: expected rank {len(spec.dims)} (shape {_written(spec.dims)}), "
                           f"got shape {list(shape)}")
    if spec.dims == shape:  # every dim fixed and matching: the steady state of a static model
        return
    for k, size in spec.sized:
        if shape[k] != size:
            raise LuminalError(f"input {spec.name!r} dim {k}: expected {size} (shape {_written(spec.dims)}), "
                               f"got shape {list(shape)}")
    for k, dim in spec.shared:
        v = shape[k]
        if dim not in seen:
            seen[dim] = (v, spec.name, k)
        elif seen[dim][0] != v:
            was, name, axis = seen[dim]
            raise LuminalError(f"input {spec.name!r} dim {k} is dimension {dim!r} = {v}, but input {name!r} dim "
                               f"{axis} makes it {was}: a dimension takes one size in a run")


def _written(dims: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
