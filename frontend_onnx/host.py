"""One ONNX node run on the host by onnx's reference implementation: the ops whose output's size the data decides
(NonZero, NonMaxSuppression, Unique, Compress, ...) when the import folds them on constants, and when a session runs
them between its compiled segments."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import LuminalError
from .host_ops import HOST_OPS
from .structure import clean

if TYPE_CHECKING:
    from onnx.reference import ReferenceEvaluator


Value = np.ndarray | list[np.ndarray]  # a tensor, or a sequence of them


def _signature(v: Value) -> str:
    """The type of a value as an evaluator is made for it."""
    return f"seq({','.join(sorted({x.dtype.str for x in v}))})" if isinstance(v, list) else v.dtype.str


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """The values ``node`` reads: its inputs, then the names its subgraphs read from the enclosing scope."""
    from .importer import _deps

    named = [i for i in node.input if i]
    return named + sorted(_deps(node) - set(named))


class HostNode:
    """``node`` as a one-node model for onnx's reference evaluator (one evaluator per input dtypes, made once)."""

    def __init__(self, node: onnx.NodeProto, opsets: Mapping[str, int], sequence_types: Mapping[str, int]) -> None:
        self.node, self.absent = _with_absent(node)
        self.opsets = dict(opsets)
        self.sequence_types = sequence_types  # the element type of each sequence value, where a model tells it
        self.inputs = node_inputs(node)
        self._evaluators: dict[tuple[str, ...], ReferenceEvaluator] = {}
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        n = self.node
        return f"node {clean(n.name or (n.output[0] if n.output else ''))!r} ({clean(n.op_type)})"

    def _input(self, name: str, v: Value) -> onnx.ValueInfoProto:
        if not isinstance(v, list):
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), None)
        elem = helper.np_dtype_to_tensor_dtype(v[0].dtype) if v else self.sequence_types.get(name, TensorProto.FLOAT)
        return helper.make_tensor_sequence_value_info(name, elem, None)

    def _model(self, values: Mapping[str, Value]) -> onnx.ModelProto:
        ins = [self._input(name, values[name]) for name in [*self.inputs, *self.absent]]
        outs = [helper.make_value_info(name, onnx.TypeProto()) for name in self.node.output if name]
        graph = helper.make_graph([self.node], "host", ins, outs)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()])

    def _evaluator(self, values: Mapping[str, Value]) -> ReferenceEvaluator:
        from onnx.reference import ReferenceEvaluator

        key = tuple(_signature(values[name]) for name in self.inputs)
        with self._lock:
            ev = self._evaluators.get(key)
            if ev is None:
                try:
                    ev = self._evaluators[key] = ReferenceEvaluator(self._model(values), new_ops=HOST_OPS)
                except Exception as e:  # the evaluator words unknown ops and bad attributes its own way
                    raise LuminalError(f"{self.label}: cannot run on the host: {_first_line(e)}") from None
            return ev

    def run(self, values: Mapping[str, Value]) -> dict[str, Value]:
        """The node's outputs by name, from ``values`` (every name in ``inputs``); a sequence is a list."""
        missing = [name for name in self.inputs if name not in values]
        if missing:
            raise LuminalError(f"{self.label}: input {clean(missing[0])!r} is not defined")
        arrays = {name: _value(values[name]) for name in self.inputs} | self.absent
        ev = self._evaluator(arrays)
        try:
            outs = ev.run(None, arrays)
        except Exception as e:  # the reference ops raise whatever numpy raises on bad data
            raise LuminalError(f"{self.label}: {_first_line(e)}") from None
        names = [name for name in self.node.output if name]
        return {name: _value(v) for name, v in zip(names, outs)}


def _value(v: object) -> Value:
    return [np.asarray(x) for x in v] if isinstance(v, list) else np.asarray(v)


# optional inputs the reference implementation needs given when the node leaves them out: NonMaxSuppression's
# reads an empty array as absent, Loop's runs no iteration without a condition
_ABSENT: dict[str, dict[int, np.ndarray]] = {
    "NonMaxSuppression": {2: np.zeros(0, np.int64), 3: np.zeros(0, np.float32), 4: np.zeros(0, np.float32)},
    "Loop": {1: np.array(True)}}


def _with_absent(node: onnx.NodeProto) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    """``node`` with its absent optional inputs named, and the arrays that stand for them."""
    wanted = _ABSENT.get(node.op_type, {})
    absent = {k: v for k, v in wanted.items() if k >= len(node.input) or not node.input[k]}
    if not absent:
        return node, {}
    filled = onnx.NodeProto()
    filled.CopyFrom(node)
    names = list(node.input) + [""] * (max(absent) + 1 - len(node.input))
    values = {}
    for k, v in absent.items():
        names[k] = f"absent input {k}"
        values[names[k]] = v
    del filled.input[:]
    filled.input.extend(names)
    return filled, values


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return clean(text[0][:200]) if text else type(e).__name__
