"""ONNX model -> ir.Graph: read the file safely, bind shapes, run one op function per node."""

from __future__ import annotations

import functools
import math
import os
from collections import ChainMap, Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsInt, cast

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .. import ir
from ..errors import LuminalError
from ..ir import DType, Tensor
from ..ir.graph import origin
from ..ir.nogc import gc_paused
from ..ir.tensor import storable
from . import dims, registry
from .contrib_schema import check_contrib_node
from .limits import MemoryGuard
from .structure import NodeFields, check_graph, clean, read_nodes
from .weights import external_view, map_model

Shapes = Mapping[str, "int | tuple[int, ...]"]


@dataclass
class IOInfo:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    declared: str | None = None  # the model's numpy dtype where the IR computes in another (uint8 as int32)


@dataclass
class ImportResult:
    graph: ir.Graph
    opset: int
    onnx_op_counts: dict[str, int]
    inputs: list[IOInfo]
    outputs: list[IOInfo]
    warnings: list[str] = field(default_factory=list)
    unbound: list[str] = field(default_factory=list)
    sequences: dict[str, int] = field(default_factory=dict)  # a sequence output's length (load(sequence_outputs=))


def sequence_element(name: str, i: int) -> str:
    """The output (or input) that holds element ``i`` of sequence value ``name`` where graphs pass sequences."""
    return f"{name}::{i}"


def element_of(name: str) -> tuple[str, int]:
    """The sequence value and the position a ``sequence_element`` name stands for."""
    seq, _, i = name.rpartition("::")
    return seq, int(i)


# ONNX element types and the IR dtype each computes in (double narrows to float32,
# small ints widen to int32); anything else is refused
_ELEM: dict[int, DType] = {
    TensorProto.FLOAT: DType.float32,
    TensorProto.FLOAT16: DType.float16,
    TensorProto.BFLOAT16: DType.bfloat16,
    TensorProto.DOUBLE: DType.float32,
    TensorProto.INT64: DType.int64,
    TensorProto.INT32: DType.int32,
    TensorProto.INT16: DType.int32,
    TensorProto.INT8: DType.int32,
    TensorProto.UINT8: DType.int32,
    TensorProto.UINT16: DType.int32,
    TensorProto.UINT32: DType.int64,
    TensorProto.UINT64: DType.int64,
    TensorProto.BOOL: DType.bool,
}


def _type_name(elem: int) -> str:
    return TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)


def onnx_dtype(elem_type: int) -> DType:
    """The IR dtype an ONNX element type computes in (double as float32, small ints as int32)."""
    if elem_type not in _ELEM:
        raise LuminalError(f"unsupported ONNX element type {_type_name(elem_type)}")
    return _ELEM[elem_type]


# packed sub-byte integers (4-bit weights of block-wise quantised models): constants read as 8-bit
_SUB_BYTE: dict[int, type[np.integer]] = {TensorProto.INT4: np.int8, TensorProto.UINT4: np.uint8,
                                          TensorProto.INT2: np.int8, TensorProto.UINT2: np.uint8}


def tensor_value(t: TensorProto) -> np.ndarray:
    """An ONNX tensor (initializer or attribute) as a numpy array; 4- and 2-bit integers as 8-bit ones."""
    if t.data_type not in _ELEM and t.data_type not in _SUB_BYTE:
        onnx_dtype(t.data_type)
    if t.data_location == TensorProto.EXTERNAL:
        raise LuminalError(f"tensor {clean(t.name)!r} has external data that was not loaded")
    if any(d < 0 for d in t.dims):
        raise LuminalError(f"tensor {clean(t.name)!r} has a negative dim: {list(t.dims)}")
    try:
        value = numpy_helper.to_array(t)
    except (ValueError, TypeError) as e:
        raise LuminalError(f"tensor {clean(t.name)!r} is malformed: {e}") from None
    return value.astype(_SUB_BYTE[t.data_type]) if t.data_type in _SUB_BYTE else value


def sparse_value(sp: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse tensor (COO, linear or per-dim indices) as a dense numpy array."""
    values = tensor_value(sp.values).reshape(-1)
    indices = tensor_value(sp.indices).astype(np.int64)
    dims = tuple(int(d) for d in sp.dims)
    if any(d < 0 for d in dims):
        raise LuminalError(f"sparse tensor {clean(sp.values.name)!r} has a negative dim: {list(dims)}")
    size = math.prod(dims)
    if indices.ndim == 2:
        if indices.shape[1] != len(dims) or (indices < 0).any() or (indices >= np.array(dims)).any():
            raise LuminalError("sparse tensor indices out of range")
        indices = np.ravel_multi_index(tuple(indices.T), dims) if size else indices[:, 0]
    indices = indices.reshape(-1)
    if indices.size != values.size or (indices < 0).any() or (indices >= size).any():
        raise LuminalError("sparse tensor indices out of range")
    dense = np.zeros(size, dtype=values.dtype)
    dense[indices] = values
    return dense.reshape(dims)


def array_dtype(dt: np.dtype) -> DType:
    """The IR dtype a numpy array from a model computes in."""
    dt = np.dtype(dt)
    if dt.kind in "USO":
        raise LuminalError("string tensors are not supported")
    try:
        return onnx_dtype(onnx.helper.np_dtype_to_tensor_dtype(dt))
    except (KeyError, ValueError, TypeError):
        raise LuminalError(f"unsupported tensor element type {dt}") from None


def _declared(g: onnx.GraphProto, computed: Mapping[str, DType], outputs: bool = False,
              inferred: Mapping[str, int] | None = None) -> dict[str, str]:
    """The graph inputs (or outputs) whose declared element type (else ``inferred``'s) the IR computes in another
    dtype."""
    out = {}
    for vi in g.output if outputs else g.input:
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        elem = elem or (inferred or {}).get(vi.name, 0)
        if vi.name in computed and _ELEM.get(elem) is computed[vi.name]:
            written = onnx.helper.tensor_dtype_to_np_dtype(elem)
            if written != computed[vi.name].np:
                out[vi.name] = written.name
    return out


# initializers up to this size keep their values for type inference (shape tensors a Reshape's inference reads)
INFERENCE_VALUES = 1 << 12


def inferred_elems(proto: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> dict[str, int]:
    """ONNX's type inference for the graph outputs that declare no element type (what onnxruntime returns them
    as: an int16 Abs is int16, where the IR computes int32), over the graph without its larger weights."""
    g = proto.graph
    if all(o.type.tensor_type.elem_type for o in g.output):
        return {}
    try:
        light = onnx.GraphProto(name=g.name, node=g.node, input=g.input, output=g.output, value_info=g.value_info,
                                sparse_initializer=g.sparse_initializer)
        for t in g.initializer:
            if t.name in weights and weights[t.name].nbytes <= INFERENCE_VALUES:
                light.initializer.add().CopyFrom(t)
                light.initializer[-1].raw_data = np.ascontiguousarray(weights[t.name]).tobytes()
            elif t.name in weights or t.ByteSize() <= INFERENCE_VALUES:
                light.initializer.add().CopyFrom(t)  # a mapped weight's proto holds no data
            else:
                light.initializer.append(TensorProto(name=t.name, dims=t.dims, data_type=t.data_type))
        model = onnx.helper.make_model(light, opset_imports=proto.opset_import, ir_version=proto.ir_version)
        g = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # the inference's own failures (a model onnx does not know, names not UTF-8): the IR's types
        return {}
    return {o.name: o.type.tensor_type.elem_type for o in g.output if o.type.tensor_type.elem_type}


def const_tensor(arr, dtype: DType | None = None) -> Tensor:
    """A constant of an ONNX-typed array (narrow ints and doubles widened as the IR computes them)."""
    arr = np.asarray(arr)
    return Tensor.const(arr, dtype or array_dtype(arr.dtype))


def materialise(t: Tensor) -> Tensor:
    """A tensor backed by its own contiguous node of its own shape (graph outputs need one)."""
    if t.is_const:
        if t.node.shape == t.shape and t.view.is_contiguous:
            return t
        if not storable(t.numel, [t.node]):  # filled by a kernel at run time, not stored in the graph
            return Tensor(ir.Node(ir.Op.Contiguous, ((t.node, t.view),), t.shape, t.dtype, {}))
        value = np.array(t.numpy(), dtype=t.dtype.np, order="C").reshape(t.shape)
        return Tensor(ir.Node(ir.Op.Constant, (), t.shape, t.dtype, {"value": value}))
    return t.contiguous()


# -- reading -------------------------------------------------------------------

ReadModel = tuple[onnx.ModelProto, Path | None, dict[str, np.ndarray]]


def read_model(model: str | Path | onnx.ModelProto) -> ReadModel:
    """The model, the folder its external data is relative to (None for a ModelProto), and its
    main-graph weights by name as read-only views of the file's bytes (their raw_data is left out
    of the proto); a ModelProto or a text-format file keeps its weights in the proto."""
    if isinstance(model, onnx.ModelProto):
        return model, None, {}
    path = Path(model)
    if not path.exists():
        raise LuminalError(f"model file not found: {path}")
    if not path.is_file():
        raise LuminalError(f"not a file: {path}")
    mapped = None
    if onnx.serialization.registry.get_format_from_file_extension(path.suffix) in (None, "protobuf"):
        try:
            mapped = map_model(path)
        except OSError as e:
            raise LuminalError(f"cannot read {path}: {e.strerror or e}") from None
    if mapped is not None:
        proto, weights = mapped.proto, mapped.weights
    else:  # other formats, and files the scanner refuses: onnx's own reader names the problem
        proto, weights = _onnx_load(path), {}
    if not proto.HasField("graph") or not proto.opset_import:
        raise LuminalError(f"{path} is not a valid ONNX model (truncated or not ONNX): no graph or opset import")
    return proto, path.parent, weights


def _onnx_load(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load(str(path), load_external_data=False)
    except OSError as e:
        raise LuminalError(f"cannot read {path}: {e.strerror or e}") from None
    except MemoryError:
        raise
    except Exception as e:  # protobuf, text and json parsers each raise their own error types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LuminalError(f"{path} is not a valid ONNX model (truncated or not ONNX): {first[:200]}") from None


def all_graphs(g: onnx.GraphProto):
    """``g`` and every subgraph nested in its nodes' attributes, at any depth."""
    yield g
    for n in g.node:
        if not len(n.attribute):  # most nodes have none: len is cheap, a walk over the field is not
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from all_graphs(sub)


def _external_tensors(model: onnx.ModelProto):
    for g in all_graphs(model.graph):
        for t in g.initializer:
            if t.data_location == TensorProto.EXTERNAL:
                yield t
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_location == TensorProto.EXTERNAL:
                    yield a.t


def _safe_location(base: Path, location: str, tensor: str) -> Path:
    if not location:
        raise LuminalError(f"tensor {tensor!r}: external data without a location")
    if (os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":")
            or "\x00" in location):
        raise LuminalError(f"tensor {tensor!r}: external data location must be relative to the model's folder")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise LuminalError(f"tensor {tensor!r}: external data location leaves the model's folder")
    root = base.resolve()
    target = (root / location).resolve()
    if target != root and root not in target.parents:
        raise LuminalError(f"tensor {tensor!r}: external data location leaves the model's folder")
    return target


def _external_ref(t: TensorProto, base: Path | None) -> tuple[Path, int, int]:
    """Where an external tensor's bytes lie: file, offset, length (-1: to the end)."""
    info = {e.key: e.value for e in t.external_data}
    if base is None:
        raise LuminalError(f"tensor {t.name!r} has external data; load the model from its file path")
    path = _safe_location(base, info.get("location", ""), t.name)
    try:
        offset = int(info.get("offset", 0) or 0)
        length = int(info["length"]) if info.get("length") else -1
        if info.get("length") and length < 0:
            length = -2
    except ValueError:
        raise LuminalError(f"tensor {t.name!r}: bad external data offset or length") from None
    if not path.is_file():
        raise LuminalError(f"tensor {t.name!r}: external data file missing")
    if offset < 0 or length < -1:
        raise LuminalError(f"tensor {t.name!r}: bad external data offset or length")
    size = path.stat().st_size
    if offset > size or (length >= 0 and offset + length > size):
        raise LuminalError(f"tensor {t.name!r}: its external data file ({size} bytes) is shorter than its offset "
                           f"{offset} + length {max(length, 0)}")
    return path, offset, length


def load_external_data(model: onnx.ModelProto, base: Path | None,
                       weights: dict[str, np.ndarray] | None = None) -> None:
    """Read every external tensor in place, refusing locations outside ``base``. Given
    ``weights``, main-graph initializers go there instead, as views of their data file's bytes."""
    if weights is not None:
        files: dict[Path, bytes] = {}
        names = Counter(t.name for t in model.graph.initializer)
        for t in model.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL or names[t.name] > 1 or t.name in weights:
                continue
            try:
                arr = external_view(t, *_external_ref(t, base), files)
            except OSError:  # the ordinary read below words it
                arr = None
            if arr is not None:
                weights[t.name] = arr
                del t.external_data[:]
                t.data_location = TensorProto.DEFAULT
    for t in _external_tensors(model):
        path, offset, length = _external_ref(t, base)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(length) if length >= 0 else f.read()
        except OSError as e:
            raise LuminalError(f"tensor {t.name!r}: cannot read its external data: {e.strerror or e}") from None
        if length >= 0 and len(data) != length:
            raise LuminalError(f"tensor {t.name!r}: external data file is shorter than its declared length")
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = data


CHECKER_LIMIT = 64 << 20


def _check(model: onnx.ModelProto | Path, warnings: list[str], size: int) -> None:
    """onnx.checker, only where cheap: it serializes the whole model, weights included (a file
    is checked from its path: the proto read from it lacks its weights)."""
    if size > CHECKER_LIMIT:
        return
    try:
        onnx.checker.check_model(model if isinstance(model, onnx.ModelProto) else str(model))
    except onnx.checker.ValidationError as e:
        msg = str(e).strip().splitlines()
        warnings.append(f"onnx checker: {msg[0] if msg else 'invalid model'}")
    except Exception as e:  # the checker itself can fail on very new or very large models
        warnings.append(f"onnx checker did not run: {type(e).__name__}")


# -- support check -------------------------------------------------------------

def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in model.opset_import:
        out["" if o.domain == "ai.onnx" else o.domain] = o.version
    return out


def check_supported(model: str | Path | onnx.ModelProto) -> None:
    """Raise one LuminalError listing every op type the frontend does not know."""
    if not isinstance(model, onnx.ModelProto):
        model = read_model(model)[0]  # a mapped file: cheap
    opsets = _opsets(model)
    local = {(f.domain, f.name) for f in model.functions}
    bodies = [n for g in all_graphs(model.graph) for n in g.node]
    for f in model.functions:
        for n in f.node:
            bodies.append(n)
            for a in n.attribute:
                subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
                bodies.extend(m for sub in subs for g in all_graphs(sub) for m in g.node)
    missing: dict[tuple[str, str], list[str]] = {}
    for i, n in enumerate(bodies):
        if registry.lookup(n.domain, n.op_type) is None and (n.domain, n.op_type) not in local:
            key = ("" if n.domain == "ai.onnx" else n.domain, n.op_type)
            missing.setdefault(key, []).append(clean(n.name or (n.output[0] if n.output else "")) or f"#{i}")
    if not missing:
        return
    parts = []
    for (dom, op_type), names in missing.items():
        shown = ", ".join(names[:5]) + (f", +{len(names) - 5} more" if len(names) > 5 else "")
        parts.append(f"{clean(op_type)} (domain {clean(dom) or 'ai.onnx'!r}, opset {opsets.get(dom, '?')}; "
                     f"nodes: {shown})")
    raise LuminalError(f"unsupported ONNX ops ({len(missing)}): " + "; ".join(parts))


def _inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Model-local functions (some exporters emit them) become plain nodes."""
    import onnx.inliner

    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as e:  # the inliner reports malformed functions with its own error types
        msg = str(e).strip().splitlines()
        raise LuminalError(f"cannot inline the model's local functions: {msg[0][:200] if msg else type(e).__name__}") \
            from None


# -- the import ----------------------------------------------------------------

# the work of unrolling loops, over the whole model: a Loop's own bound (ops_control.MAX_UNROLL) multiplies
# when Loops nest
MAX_UNROLLED = 1 << 17


@dataclass
class Importer:
    opsets: dict[str, int]
    warnings: list[str]
    guard: MemoryGuard
    # numpy dtypes of constants as the model wrote them (the IR widens int8/uint8/int16/...)
    written: dict[str, np.dtype] = field(default_factory=dict)
    # body runs of Loops and Scans (unrolled) over the whole model, each counted as its nodes + 1
    unrolled: int = 0
    # the channel block of onnxruntime's com.microsoft.nchwc ops in the model (0: none)
    nchwc_block: int = 0

    @functools.cached_property
    def _checker(self) -> onnx.checker.C.CheckerContext:
        ctx = onnx.checker.C.CheckerContext()
        ctx.ir_version = onnx.IR_VERSION
        ctx.opset_imports = self.opsets
        return ctx

    def _check_schema(self, n: onnx.NodeProto) -> None:
        """Refuse what onnxruntime refuses in a node its op's schema defines: inputs or outputs past the schema's
        count, a required one left empty, an attribute the op does not have or a required one missing. Left to the
        op: nodes with a graph or tensor attribute (a subgraph is checked in its own scope, a big constant is not
        copied), and ops the schema registry lacks at the model's opset (the registry decides what is supported)."""
        if any(a.type in _UNCHECKED_ATTRS for a in n.attribute):
            return
        if n.domain == registry.MS:
            check_contrib_node(n, self.opsets.get(registry.MS, 1), _label(n))
            return
        try:
            onnx.checker.check_node(n, self._checker)
        except onnx.checker.ValidationError as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else "invalid node"
            if not msg.startswith(("No Op registered", "No opset import", "Op registered for")):
                raise LuminalError(f"{_label(n)}: {clean(msg, 200)}") from None

    def source_dtype(self, name: str) -> np.dtype | None:
        return self.written.get(name)

    def run_graph(self, g: onnx.GraphProto, scope: ChainMap, inputs: list | None = None,
                  weights: Mapping[str, np.ndarray] | None = None,
                  nodes: list[NodeFields] | None = None) -> list[Tensor | None]:
        """Import the nodes of ``g`` into ``scope``; returns the tensors of its outputs.
        ``inputs`` bind a subgraph's declared inputs (a Loop body's) by position; ``weights``
        are initializers of ``g`` read elsewhere (the mapped file's), by name; ``nodes``: ``read_nodes(g)``
        where the caller has them."""
        if inputs is not None:
            self.unrolled += len(g.node) + 1
            if self.unrolled > MAX_UNROLLED:
                raise LuminalError(f"unrolling the model's loops imports more than {MAX_UNROLLED} nodes in all "
                                   f"(nested loops multiply)")
            if len(inputs) != len(g.input):
                raise LuminalError(f"subgraph {clean(g.name)!r} takes {len(g.input)} inputs, got {len(inputs)}")
            for vi, t in zip(g.input, inputs):
                scope[vi.name] = t
        weights = weights or {}
        for t in g.initializer:
            value = weights[t.name] if t.name in weights else tensor_value(t)
            self.written[t.name] = value.dtype
            scope[t.name] = const_tensor(value)
        for sp in g.sparse_initializer:  # stored dense: its declared size is checked before it is made
            size = onnx_dtype(sp.values.data_type).np.itemsize * math.prod(sp.dims)
            self.guard.allocation(f"sparse initializer {clean(sp.values.name)!r}", size)
            scope[sp.values.name] = const_tensor(sparse_value(sp))
        for n in _ordered(read_nodes(g) if nodes is None else nodes):
            self.run_node(n, scope)
        outs = []
        for o in g.output:
            if o.name not in scope:
                raise LuminalError(f"graph output {clean(o.name)!r} is never produced")
            outs.append(scope[o.name])
        return outs

    def run_node(self, fields: NodeFields, scope: ChainMap) -> None:
        n, op_type, domain, output = fields.proto, fields.op_type, fields.domain, fields.outputs
        fn = registry.lookup(domain, op_type)
        if fn is None:
            raise LuminalError(f"{_label(n)}: unsupported op")
        inputs: list[Tensor | None] = []
        for name in fields.inputs:
            if not name:
                inputs.append(None)
            elif (t := scope.get(name)) is None:
                raise LuminalError(f"{_label(n)}: input {clean(name)!r} is not defined")
            else:
                inputs.append(t)
        dom = "" if domain == "ai.onnx" else domain
        opset = self.opsets.get(dom, 1)
        attrs: dict[str, Any] = {}
        if fields.attributes:
            _check_attr_types(n, dom, opset)
            attrs = {a.name: _attr_value(a) for a in n.attribute}
        self._check_schema(n)
        if op_type == "Constant" and isinstance(attrs.get("value"), np.ndarray) and output:
            self.written[output[0]] = attrs["value"].dtype
        elif op_type == "Cast" and attrs.get("to") in _ELEM and output:
            self.written[output[0]] = onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])
        ctx = registry.OpContext(n, opset, inputs, attrs, scope, self)
        try:
            with origin(n.name or (output[0] if output else ""), op_type):
                out = fn(ctx)
        except LuminalError as e:
            msg = str(e)
            if msg.startswith("node "):
                raise
            raise LuminalError(f"{_label(n)}: {msg}") from None
        except (ValueError, TypeError, IndexError, KeyError, AssertionError, NotImplementedError,
                ZeroDivisionError, OverflowError, AttributeError) as e:
            first = str(e).splitlines()[0] if str(e) else ""
            raise LuminalError(f"{_label(n)}: {type(e).__name__}: {first}") from None
        outs = [out] if isinstance(out, Tensor) else list(out)
        made = {name: t for name, t in zip(output, outs) if name and isinstance(t, Tensor)}
        self.guard.node(lambda: _label(n), [t for t in inputs if isinstance(t, Tensor)], made)
        for k, name in enumerate(output):
            if not name:
                continue
            if k < len(outs) and outs[k] is not None:
                scope[name] = outs[k]
            else:
                scope[name] = None  # an output this op does not produce; an error only if used


def _label(n: onnx.NodeProto) -> str:
    """How a message names a node: by its name, else its first output."""
    return f"node {clean(n.name or n.output[0] if n.output else n.name)!r} ({clean(n.op_type)})"


_UNCHECKED_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSOR,
                    onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)


@functools.cache
def _attr_types(domain: str, op_type: str, opset: int) -> dict[str, int]:
    """The type ONNX declares for each attribute of the op at that opset; empty for an op it does not define."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return {}
    return {name: int(cast(SupportsInt, a.type)) for name, a in schema.attributes.items()}  # stubs: no __int__


def _check_attr_types(n: onnx.NodeProto, domain: str, opset: int) -> None:
    """Refuse an attribute of another type than its op declares (a tensor where Cast's ``to`` is an int)."""
    expected = _attr_types(domain, n.op_type, opset)
    for a in n.attribute:
        want = expected.get(a.name)
        if want is not None and a.type not in (want, onnx.AttributeProto.UNDEFINED):
            type_name = onnx.AttributeProto.AttributeType.Name
            raise LuminalError(f"{_label(n)}: attribute {clean(a.name)!r} is {type_name(a.type)}, "
                               f"{n.op_type} takes {type_name(want)}")


def _attr_value(a: onnx.AttributeProto) -> Any:
    if a.type == onnx.AttributeProto.TENSOR:
        return tensor_value(a.t)
    if a.type == onnx.AttributeProto.TENSORS:
        return [tensor_value(t) for t in a.tensors]
    if a.type == onnx.AttributeProto.SPARSE_TENSOR:
        return a.sparse_tensor
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", "replace") for x in v]
    return v


def _free_names(g: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from its enclosing scope."""
    defined = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer} | \
        {i.name for i in g.input}
    free: set[str] = set()
    for n in g.node:
        for name in n.input:
            if name and name not in defined:
                free.add(name)
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                free |= _free_names(sub) - defined
        defined.update(o for o in n.output if o)
    return free


def _deps(n: onnx.NodeProto) -> set[str]:
    return _reads(n.input, n.attribute)


def _reads(inputs: Iterable[str], attributes: Iterable[onnx.AttributeProto]) -> set[str]:
    """The names a node reads: its inputs and its subgraphs' free names."""
    deps = {i for i in inputs if i}
    for a in attributes:
        subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for sub in subs:
            deps |= _free_names(sub)
    return deps


def _toposort(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes in an order where each one's inputs exist; keeps the file's order when it is valid."""
    return [n.proto for n in _ordered(read_nodes(g))]


def _ordered(nodes: list[NodeFields]) -> list[NodeFields]:
    """``_toposort`` of nodes read out of their protos."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                if o in producer:
                    raise LuminalError(f"value {clean(o)!r} is produced by more than one node")
                producer[o] = i
    deps: list[set[int]] = []
    ordered = True  # every node after the nodes it reads
    for i, n in enumerate(nodes):
        reads = _reads(n.inputs, n.proto.attribute if n.attributes else ())
        ds = {p for d in reads if (p := producer.get(d)) is not None}
        deps.append(ds)
        ordered = ordered and max(ds, default=-1) < i
    if ordered:
        return nodes
    order, state = [], [0] * len(nodes)
    for start in range(len(nodes)):
        stack = [(start, False)]
        while stack:
            i, done = stack.pop()
            if done:
                state[i] = 2
                order.append(nodes[i])
                continue
            if state[i] == 2:
                continue
            if state[i] == 1:
                raise LuminalError("the graph has a cycle")
            state[i] = 1
            stack.append((i, True))
            for d in sorted(deps[i], reverse=True):
                if state[d] == 1:
                    raise LuminalError("the graph has a cycle")
                if state[d] == 0:
                    stack.append((d, False))
    return order


def _default_opset(opsets: Mapping[str, int], warnings: list[str], graph: onnx.GraphProto) -> int:
    if "" not in opsets:
        if any(n.domain in ("", "ai.onnx") for g in all_graphs(graph) for n in g.node):
            raise LuminalError("the model has no opset import for the default ONNX domain")
        return onnx.defs.onnx_opset_version()  # only other domains' ops (ai.onnx.ml): nothing reads it
    opset, newest = opsets[""], onnx.defs.onnx_opset_version()
    if opset > newest:
        warnings.append(f"model opset {opset} is newer than this onnx ({newest}); ops are read as opset {newest}")
    return opset


def _nchwc_block(g: onnx.GraphProto) -> int:
    """The channel block of onnxruntime's com.microsoft.nchwc ops in ``g``; 0 where it holds none."""
    if not any(n.domain == "com.microsoft.nchwc" for n in g.node):
        return 0
    from .ops_nn_nchwc import block_size

    return block_size(g)


def _check_listed_initializers(g: onnx.GraphProto) -> None:
    """Refuse an initializer listed as an input whose declared type or shape is not its own (onnxruntime does)."""
    inits = {t.name: t for t in g.initializer}
    for vi in g.input:
        t = inits.get(vi.name)
        if t is None or not vi.type.HasField("tensor_type"):
            continue
        elem, declared = vi.type.tensor_type.elem_type, dims.declared_dims(vi)
        if elem and elem != t.data_type:
            raise LuminalError(f"input {clean(vi.name)!r} declares element type {_type_name(elem)}, its initializer "
                               f"is {_type_name(t.data_type)}")
        if declared is not None and (len(declared) != len(t.dims) or any(
                isinstance(d, int) and d != s for d, s in zip(declared, t.dims))):
            raise LuminalError(f"input {clean(vi.name)!r} declares shape {list(declared)}, its initializer is "
                               f"{list(t.dims)}")


def _bind_inputs(g: onnx.GraphProto, shapes: Shapes | None,
                 warnings: list[str]) -> tuple[list[tuple[str, DType, tuple[int, ...]]], dims.Binding]:
    """The graph's inputs (initializers listed as inputs are constants) with their dtypes and shapes."""
    init_names = {t.name for t in g.initializer} | {sp.values.name for sp in g.sparse_initializer}
    real_inputs = [vi for vi in g.input if vi.name not in init_names]
    _check_listed_initializers(g)
    dtypes = []
    for vi in real_inputs:
        if not vi.type.HasField("tensor_type"):
            raise LuminalError(f"input {clean(vi.name)!r} is not a tensor")
        elem = vi.type.tensor_type.elem_type
        dtypes.append(onnx_dtype(elem))
        if elem == TensorProto.DOUBLE:
            warnings.append(f"input {clean(vi.name)!r} is double; computed as float32")
    given = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in (shapes or {}).items()}
    bound = dims.bind([dims.InputDecl(vi.name, dims.declared_dims(vi)) for vi in real_inputs], given)
    warnings.extend(bound.warnings)
    if bound.unbound:
        warnings.append(f"unbound dimensions default to 1: {', '.join(clean(u) for u in bound.unbound)}")
    return [(vi.name, dt, bound.shapes[vi.name]) for vi, dt in zip(real_inputs, dtypes)], bound


@gc_paused()
def load(model: str | Path | onnx.ModelProto, shapes: Shapes | None = None, optimize: bool = True,
         max_memory: int | None = None, read: ReadModel | None = None, sequence_outputs: bool = False
         ) -> ImportResult:
    """Import an ONNX model (a path or a ModelProto) into a primitive Graph, optimised
    with ``ir.optimize`` unless ``optimize`` is False. A model whose inputs, or some node's inputs and
    outputs, need more than ``max_memory`` bytes (default: the memory available) is refused. ``read``: what
    ``read_model(model)`` returned, where the caller has read the file already. A sequence output is refused, or
    with ``sequence_outputs`` given as its elements (``sequence_element``), its length in ``sequences``."""
    proto, base, weights = read if read is not None else read_model(model)
    check_supported(proto)
    warnings: list[str] = []
    if base is None:
        _check(proto, warnings, proto.ByteSize())
    else:
        _check(Path(model), warnings, Path(model).stat().st_size)
    if proto.functions:
        proto = _inline_functions(proto)
    load_external_data(proto, base, weights)
    opsets = _opsets(proto)
    opset = _default_opset(opsets, warnings, proto.graph)

    g = proto.graph
    nodes = read_nodes(g)
    check_graph(g, nodes)
    resolved, bound = _bind_inputs(g, shapes, warnings)
    unbound = bound.unbound

    declared = _declared(g, {name: dt for name, dt, _ in resolved})
    scope: ChainMap = ChainMap()
    inputs, in_nodes = [], []
    for name, dt, shape in resolved:
        t = Tensor.input(name, shape, dt)
        scope[name] = t
        in_nodes.append(t.node)
        inputs.append(IOInfo(name, dt, shape, declared.get(name)))
    guard = MemoryGuard.of(max_memory)
    guard.inputs({name: scope[name] for name, _, _ in resolved})
    imp = Importer(opsets, warnings, guard, nchwc_block=_nchwc_block(g))
    for vi in list(g.input) + list(g.value_info):
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if elem in _ELEM:
            imp.written[vi.name] = onnx.helper.tensor_dtype_to_np_dtype(elem)
    try:
        outs = imp.run_graph(g, scope, weights=weights, nodes=nodes)
    except LuminalError as e:
        if not unbound:
            raise
        # a model exported with dynamic dims often still holds the traced sizes in its Reshape targets
        listed = ", ".join(clean(u) for u in unbound)
        raise LuminalError(f"{e} (unbound dimensions default to 1: {listed}; give them with --shape)") from None
    out_tensors: list[Tensor] = []
    names: list[str] = []
    sequences: dict[str, int] = {}
    for o, value in zip(g.output, outs):
        if value is None:
            raise LuminalError(f"graph output {clean(o.name)!r} is never produced")
        if isinstance(value, list) and sequence_outputs:
            sequences[o.name] = len(value)
            out_tensors.extend(materialise(t) for t in value)
            names.extend(sequence_element(o.name, i) for i in range(len(value)))
            continue
        if not isinstance(value, Tensor):
            raise LuminalError(f"graph output {clean(o.name)!r} is a sequence; only tensor outputs are supported")
        out_tensors.append(materialise(value))
        names.append(o.name)
    guard.node(lambda: "the graph", [scope[name] for name, _, _ in resolved], dict(zip(names, out_tensors)))
    known = {o.name: onnx.helper.np_dtype_to_tensor_dtype(imp.written[o.name]) for o in g.output
             if o.name in imp.written}  # what the import knows, where ONNX's inference does not (contrib ops)
    declared.update(_declared(g, {nm: t.dtype for nm, t in zip(names, out_tensors)}, outputs=True,
                              inferred=known | inferred_elems(proto, weights)))
    graph = ir.Graph(in_nodes, [t.node for t in out_tensors], names, dict(bound.symbols), declared)
    if optimize:
        graph = ir.optimize(graph)
    outputs = [IOInfo(nm, n.dtype, tuple(n.shape), declared.get(nm)) for nm, n in zip(names, graph.outputs)]
    counts: dict[str, int] = {}
    for sub in all_graphs(g):
        for n in sub.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return ImportResult(graph, opset, dict(sorted(counts.items())), inputs, outputs, warnings, unbound, sequences)
