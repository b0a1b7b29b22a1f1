"""The ONNX op registry: one small function per ONNX op, written in primitives.

An op function takes an OpContext and returns a Tensor or a list of Tensors
(one per ONNX output; None for an output it does not produce).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..errors import LuminalError
from ..ir import Tensor


@dataclass
class OpContext:
    node: onnx.NodeProto
    opset: int
    inputs: list[Tensor | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    # the importer's context for ops with subgraphs (If): name -> Tensor
    scope: dict[str, Tensor] | None = None
    importer: Any = None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int) -> np.ndarray | None:
        """Input i as a numpy array; it must be constant after folding. None when absent."""
        t = self.input(i)
        if t is None:
            return None
        if not t.is_const:
            raise LuminalError(f"node {self.node.name or self.node.op_type!r} ({self.node.op_type}): input {i} "
                               "must be constant after shape folding")
        return t.numpy()

    def declare(self, k: int, dtype) -> None:
        """Record the element type output k has in the model (the IR computes uint8 and int8 in int32)."""
        if self.importer is not None and k < len(self.node.output):
            self.importer.written[self.node.output[k]] = np.dtype(dtype)

    def written(self, i: int) -> np.dtype | None:
        """The element type input i has in the model, where the import knows it."""
        if self.importer is None or i >= len(self.node.input):
            return None
        return self.importer.source_dtype(self.node.input[i])

    def ints(self, i: int) -> list[int] | None:
        """Constant input i as a flat list of ints; None when absent."""
        v = self.const(i)
        return None if v is None else [int(x) for x in v.reshape(-1)]


OpFn = Callable[[OpContext], "Tensor | list[Tensor | None]"]
MS = "com.microsoft"  # onnxruntime's contrib domain (its fused and quantised ops)
REGISTRY: dict[tuple[str, str], OpFn] = {}


def op(*names: str, domain: str = "") -> Callable[[OpFn], OpFn]:
    """Register ``fn`` for the ONNX op types ``names`` (default domain)."""

    def deco(fn: OpFn) -> OpFn:
        for n in names:
            REGISTRY[(domain, n)] = fn
        return fn

    return deco


def lookup(domain: str, op_type: str) -> OpFn | None:
    if domain == "ai.onnx":
        domain = ""
    return REGISTRY.get((domain, op_type))
