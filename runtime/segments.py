"""A model cut where an output's size depends on the data: static segments compiled for the sizes a run shows,
the cut nodes run on the host (onnx's reference implementation) between them.

The import says where to cut: a node that needs as a constant a value only the run knows raises DataDependent.
A segment starts after the previous cut and is imported with its inputs at the sizes of this run; the node that
stops its import is the next cut. Values the import knew (shapes folded to constants) are carried to the next
segment as constants, so a Reshape after a NonZero still folds its target from the sizes."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..codegen.backend import Backend
from ..errors import LuminalError
from ..frontend_onnx.host import HostNode, Value, node_inputs
from ..frontend_onnx.importer import element_of, sequence_element
from ..frontend_onnx.registry import DataDependent
from ..ir.dtypes import as_declared
from ..ir.graph import Graph, Op
from .model import CompiledModel

if TYPE_CHECKING:
    from ..cache import TuningCache

Key = tuple[object, ...]


@dataclass
class Segment:
    """Nodes ``start`` up to ``cut`` (None: to the end) compiled for one set of input sizes."""

    start: int
    model: CompiledModel | None  # None: nothing to compute (an empty segment, or only constants)
    constants: dict[str, np.ndarray]  # outputs the import knew
    cut: int | None  # the node run on the host after this segment
    carried: dict[str, np.ndarray] = field(default_factory=dict)  # constants the next segment imports as such
    carried_digest: str = ""
    sequences: dict[str, int] = field(default_factory=dict)  # sequence outputs, given element by element: lengths
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one run at a time: shared buffers

    def run(self, env: MutableMapping[str, Value]) -> None:
        if self.model is not None:
            feeds = {s.name: tensor(env, s.name) for s in self.model.inputs}
            with self.lock:
                outs = self.model.run(feeds)
            env.update(zip((o.name for o in self.model.outputs), outs))
        env.update(self.constants)
        gather(env, self.sequences)


def tensor(env: Mapping[str, Value], name: str) -> np.ndarray:
    """The tensor ``name`` in ``env``: a value, or an element of a sequence value (``sequence_element``)."""
    v = env[name] if name in env else _element(env, name)
    assert not isinstance(v, list), name
    return v


def _element(env: Mapping[str, Value], name: str) -> np.ndarray:
    seq, i = element_of(name)
    return env[seq][i]


def gather(env: MutableMapping[str, Value], sequences: Mapping[str, int]) -> None:
    """Each sequence output of a segment, given element by element, put together again as a list."""
    for name, n in sequences.items():
        elements = [sequence_element(name, i) for i in range(n)]
        env[name] = [tensor(env, e) for e in elements]
        for e in elements:
            del env[e]


@dataclass(frozen=True)
class Imported:
    """A segment's graph before it is compiled (None: nothing to compute), with what its import knew."""

    graph: Graph | None
    constants: dict[str, np.ndarray]  # outputs the import knew
    cut: int | None  # the node run on the host after it (None: it runs to the end)
    carried: dict[str, np.ndarray]  # constants the next segment imports as such
    sequences: dict[str, int]  # sequence outputs, given element by element: their lengths


def _shape(v: Value) -> tuple[object, ...]:
    """A value's shape, or its elements' shapes and types for a sequence (its segments are specialised on them)."""
    return ("seq", *((tuple(x.shape), x.dtype.str) for x in v)) if isinstance(v, list) else tuple(v.shape)


def digest(values: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(values):
        v = np.ascontiguousarray(values[name])
        h.update(f"{name}\0{v.dtype.str}\0{v.shape}\0".encode())
        h.update(v.tobytes())
    return h.hexdigest()


class Source:
    """The model as segments read it: its nodes in order, its weights, what each node reads."""

    def __init__(self, path: str | Path) -> None:
        from ..frontend_onnx.importer import _inline_functions, _toposort, load_external_data, read_model

        proto, base, weights = read_model(path)
        if proto.functions:
            proto = _inline_functions(proto)
        load_external_data(proto, base, weights)
        g = proto.graph
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
        self.ir_version = proto.ir_version
        self.nodes = _toposort(g)
        self.tensors = {t.name: t for t in g.initializer if t.name not in weights}
        self.weights = dict(weights)  # initializers read from the file, by name
        self.initializers: dict[str, np.ndarray] = {}  # filled as host steps read them
        self.outputs = [o.name for o in g.output]
        self.output_info = {o.name: o for o in g.output}
        self.reads = [node_inputs(n) for n in self.nodes]
        self.elems, self.sequence_types = _element_types(proto)
        self._live: dict[int, frozenset[str]] = {}
        self._hosts: dict[int, HostNode] = {}
        self._lock = threading.Lock()

    def is_initializer(self, name: str) -> bool:
        return name in self.tensors or name in self.weights

    def initializer(self, name: str) -> np.ndarray:
        with self._lock:
            if name not in self.initializers:
                self.initializers[name] = (np.asarray(self.weights[name]) if name in self.weights
                                           else numpy_helper.to_array(self.tensors[name]))
            return self.initializers[name]

    def live_in(self, start: int) -> frozenset[str]:
        """The values nodes ``start`` onwards (and the graph's outputs) read that are defined before ``start``."""
        with self._lock:
            if start not in self._live:
                needed: set[str] = set(self.outputs)
                for n, reads in zip(reversed(self.nodes[start:]), reversed(self.reads[start:])):
                    needed -= set(n.output)
                    needed |= set(reads)
                self._live[start] = frozenset(needed)
            return self._live[start]

    def host(self, index: int) -> HostNode:
        with self._lock:
            if index not in self._hosts:
                self._hosts[index] = HostNode(self.nodes[index], self.opsets, self.sequence_types)
            return self._hosts[index]

    def cut_index(self, start: int, inner: onnx.NodeProto) -> int:
        """The node from ``start`` on that is, or holds in a subgraph, the node ``inner`` that stopped an import."""
        key = (inner.op_type, tuple(inner.output))
        for j in range(start, len(self.nodes)):
            if _holds(self.nodes[j], key):
                return j
        raise LuminalError(f"node {inner.name or inner.op_type!r} ({inner.op_type}) needs a value only the run knows, "
                           "and no node of the model holds it")

    def key(self, start: int, env: Mapping[str, Value], carried_digest: str, carried: Mapping[str, object]
            ) -> Key:
        ins = sorted(n for n in self.live_in(start) if not self.is_initializer(n) and n not in carried)
        return ("segment", start, carried_digest,
                tuple((n, _shape(env[n]), _dtype(env[n])) for n in ins if n in env))

    # ------------------------------------------------------------ building

    def build(self, start: int, env: Mapping[str, Value], carried: Mapping[str, np.ndarray],
              backend: Backend, cache: TuningCache | None) -> Segment:
        """The segment from node ``start`` for the sizes of the values in ``env``."""
        from .compile import compile_graph

        part = self.imported(start, env, carried)
        model = compile_graph(part.graph, backend, cache=cache) if part.graph is not None else None
        return Segment(start, model, part.constants, part.cut, part.carried, digest(part.carried), part.sequences)

    def imported(self, start: int, env: Mapping[str, Value], carried: Mapping[str, np.ndarray]) -> Imported:
        """The segment from node ``start`` imported for the sizes of the values in ``env``, not yet compiled."""
        try:
            graph, constants, sequences = self._import(start, len(self.nodes), env, carried)
            cut = None
        except DataDependent as e:
            cut = self.cut_index(start, e.node)
            graph, constants, sequences = self._import(start, cut, env, carried) if cut > start else (None, {}, {})
        after = self.live_in(cut + 1) if cut is not None else frozenset()
        known = {**carried, **constants}
        return Imported(graph, constants, cut, {n: v for n, v in known.items() if n in after}, sequences)

    def _outputs(self, start: int, end: int) -> list[str]:
        defined = {o for n in self.nodes[start:end] for o in n.output if o}
        later = self.live_in(end) if end < len(self.nodes) else frozenset(self.outputs)
        return [o for n in self.nodes[start:end] for o in n.output if o and o in later and o in defined]

    def _import(self, start: int, end: int, env: Mapping[str, Value], carried: Mapping[str, np.ndarray]
                ) -> tuple[Graph | None, dict[str, np.ndarray], dict[str, int]]:
        from ..frontend_onnx.importer import load

        outputs = self._outputs(start, end)
        if not outputs:
            return None, {}, {}
        proto = self._proto(start, end, outputs, env, carried)
        res = load(proto, sequence_outputs=True)
        graph = res.graph
        constants = {name: as_declared(node.attrs["value"], graph.declared.get(name))
                     for name, node in zip(graph.output_names, graph.outputs) if node.op is Op.Constant}
        if len(constants) == len(graph.output_names):
            return None, constants, res.sequences
        return graph, constants, res.sequences

    def _proto(self, start: int, end: int, outputs: list[str], env: Mapping[str, Value],
               carried: Mapping[str, np.ndarray]) -> onnx.ModelProto:
        nodes = list(self.nodes[start:end])
        defined: set[str] = set()
        reads: list[str] = []
        for n, rs in zip(nodes, self.reads[start:end]):
            reads.extend(r for r in rs if r not in defined and r not in reads)
            defined.update(o for o in n.output if o)
        inits, inputs = [], []
        for name in reads:
            if name in carried:
                inits.append(numpy_helper.from_array(np.asarray(carried[name]), name))
            elif name in self.tensors:
                inits.append(self.tensors[name])
            elif name in self.weights:
                inits.append(numpy_helper.from_array(np.asarray(self.weights[name]), name))
            elif name in env and isinstance(v := env[name], list):
                # a sequence enters as its elements, put together again by the segment's first node
                made = self._sequence_input(name, v)
                inputs.extend(made.inputs)
                nodes.insert(0, made.node)
            elif name in env:
                v = env[name]
                assert not isinstance(v, list)
                inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
            else:
                raise LuminalError(f"value {name!r} is read before anything defines it")
        outs = [self.output_info[o] if o in self.output_info
                else helper.make_tensor_value_info(o, self.elems[o], None) if o in self.elems
                else helper.make_value_info(o, onnx.TypeProto()) for o in outputs]
        graph = helper.make_graph(nodes, f"segment{start}", inputs, outs, inits)
        return helper.make_model(graph, ir_version=self.ir_version,
                                 opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()])

    def _sequence_input(self, name: str, elements: list[np.ndarray]) -> _SequenceInput:
        names = [sequence_element(name, i) for i in range(len(elements))]
        ins = [helper.make_tensor_value_info(e, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
               for e, x in zip(names, elements)]
        if elements:
            return _SequenceInput(ins, helper.make_node("SequenceConstruct", names, [name]))
        elem = self.sequence_types.get(name, onnx.TensorProto.FLOAT)
        return _SequenceInput([], helper.make_node("SequenceEmpty", [], [name], dtype=elem))


@dataclass(frozen=True)
class _SequenceInput:
    inputs: list[onnx.ValueInfoProto]
    node: onnx.NodeProto


def _dtype(v: Value) -> str:
    return "seq" if isinstance(v, list) else v.dtype.str


def _holds(node: onnx.NodeProto, key: tuple[str, tuple[str, ...]]) -> bool:
    if (node.op_type, tuple(node.output)) == key:
        return True
    for a in node.attribute:
        subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        if any(_holds(n, key) for g in subs for n in g.node):
            return True
    return False


def _element_types(proto: onnx.ModelProto) -> tuple[dict[str, int], dict[str, int]]:
    """The element type of every tensor, and of every sequence's tensors, that onnx's shape inference can tell,
    from the graph without its weights."""
    src = proto.graph
    listed = {vi.name for vi in src.input}
    inits = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in src.initializer
             if t.name not in listed]
    g = helper.make_graph(list(src.node), "types", [*src.input, *inits], list(src.output),
                          value_info=list(src.value_info))
    light = helper.make_model(g, ir_version=proto.ir_version, opset_imports=list(proto.opset_import))
    try:
        inferred = onnx.shape_inference.infer_shapes(light).graph
    except Exception:  # the model's own types only, where inference cannot run
        inferred = g
    out, sequences = {}, {}
    for vi in [*inferred.value_info, *inferred.output, *inferred.input]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
        elif vi.type.HasField("sequence_type") and vi.type.sequence_type.elem_type.tensor_type.elem_type:
            sequences[vi.name] = vi.type.sequence_type.elem_type.tensor_type.elem_type
    return out, sequences


def segment_graphs(path: str | Path, feeds: Mapping[str, np.ndarray]) -> list[Graph]:
    """The graphs of the static segments a run of the model on ``feeds`` compiles, in order, each at the sizes that
    run gives it: the segments run on the reference executor and the cut nodes on the host between them, as a
    session runs them (what tune searches for a model cut by the data)."""
    from ..ir import run_reference

    src = Source(path)
    env: dict[str, Value] = dict(feeds)
    graphs: list[Graph] = []
    start, carried = 0, dict[str, np.ndarray]()
    while True:
        part = src.imported(start, env, carried)
        if part.graph is not None:
            graph = part.graph
            outs = run_reference(graph, {n: tensor(env, n) for n in graph.input_names})
            env.update((n, as_declared(v, graph.declared.get(n))) for n, v in zip(graph.output_names, outs))
            graphs.append(graph)
        env.update(part.constants)
        gather(env, part.sequences)
        if part.cut is None:
            return graphs
        host = src.host(part.cut)
        env.update(host.run({n: env[n] if n in env else src.initializer(n) for n in host.inputs}))
        start, carried = part.cut + 1, part.carried
