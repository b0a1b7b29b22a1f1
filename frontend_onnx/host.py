"""One ONNX node run on the host by onnx's reference implementation: the ops whose output's size the data decides
(NonZero, NonMaxSuppression, Unique, Compress, ...) when the import folds them on constants, and when a session runs
them between its compiled segments."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from ..errors import LuminalError
from .structure import clean

if TYPE_CHECKING:
    from onnx.reference import ReferenceEvaluator


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """The values ``node`` reads: its inputs, then the names its subgraphs read from the enclosing scope."""
    from .importer import _deps

    named = [i for i in node.input if i]
    return named + sorted(_deps(node) - set(named))


class HostNode:
    """``node`` as a one-node model for onnx's reference evaluator (one evaluator per input dtypes, made once)."""

    def __init__(self, node: onnx.NodeProto, opsets: Mapping[str, int]) -> None:
        self.node, self.absent = _with_absent(node)
        self.opsets = dict(opsets)
        self.inputs = node_inputs(node)
        self._evaluators: dict[tuple[str, ...], ReferenceEvaluator] = {}
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        n = self.node
        return f"node {clean(n.name or (n.output[0] if n.output else ''))!r} ({clean(n.op_type)})"

    def _model(self, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
        ins = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(values[name].dtype), None)
               for name in [*self.inputs, *self.absent]]
        outs = [helper.make_value_info(name, onnx.TypeProto()) for name in self.node.output if name]
        graph = helper.make_graph([self.node], "host", ins, outs)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()])

    def _evaluator(self, values: Mapping[str, np.ndarray]) -> ReferenceEvaluator:
        from onnx.reference import ReferenceEvaluator

        key = tuple(values[name].dtype.str for name in self.inputs)
        with self._lock:
            ev = self._evaluators.get(key)
            if ev is None:
                try:
                    ev = self._evaluators[key] = ReferenceEvaluator(self._model(values))
                except Exception as e:  # the evaluator words unknown ops and bad attributes its own way
                    raise LuminalError(f"{self.label}: cannot run on the host: {_first_line(e)}") from None
            return ev

    def run(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The node's outputs by name, from ``values`` (every name in ``inputs``)."""
        missing = [name for name in self.inputs if name not in values]
        if missing:
            raise LuminalError(f"{self.label}: input {clean(missing[0])!r} is not defined")
        arrays = {name: np.asarray(values[name]) for name in self.inputs} | self.absent
        ev = self._evaluator(arrays)
        try:
            outs = ev.run(None, arrays)
        except Exception as e:  # the reference ops raise whatever numpy raises on bad data
            raise LuminalError(f"{self.label}: {_first_line(e)}") from None
        names = [name for name in self.node.output if name]
        return {name: np.asarray(v) for name, v in zip(names, outs)}


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
