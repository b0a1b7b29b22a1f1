"""The ONNX op registry: one small function per ONNX op, written in primitives.

An op function takes an OpContext and returns a Tensor or a list of Tensors
(one per ONNX output; None for an output it does not produce).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import onnx

from ..errors import LuminalError
from ..ir import Tensor

if TYPE_CHECKING:
    from .importer import Importer


class DataDependent(LuminalError):
    """A node whose output's size or shape depends on values only a run knows: a static plan cannot hold it; a
    session cuts the graph there and runs ``node`` on the host."""

    def __init__(self, message: str, node: onnx.NodeProto) -> None:
        super().__init__(message)
        self.node = node


@dataclass
class OpContext:
    node: onnx.NodeProto
    opset: int
    inputs: list[Tensor | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    # the importer's context for ops with subgraphs (If, Loop, Scan): name -> value
    scope: ChainMap[str, Any] | None = None
    importer: Importer | None = None

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
            raise DataDependent(f"node {self.node.name or self.node.op_type!r} ({self.node.op_type}): input {i} "
                                "must be constant after shape folding (it is computed at run time)", self.node)
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

    def run_subgraph(self, g: onnx.GraphProto, inputs: list | None = None) -> list[Tensor | None]:
        """Import a subgraph attribute in a child of this node's scope; its outputs' values."""
        if self.importer is None or self.scope is None:
            raise fail(self, "a subgraph needs the importer's scope")
        return self.importer.run_graph(g, self.scope.new_child(), inputs)


def fail(ctx: OpContext, message: str, kind: type[LuminalError] = LuminalError) -> LuminalError:
    name = (ctx.node.name or ctx.node.op_type)[:80]
    return kind(f"node {name!r} ({ctx.node.op_type}, opset {ctx.opset}): {message}")


def need(ctx: OpContext, i: int) -> Tensor:
    """Input i, which the op requires."""
    t = ctx.input(i)
    if t is None:
        raise fail(ctx, f"input {i} is required")
    return t


def need_const(ctx: OpContext, i: int) -> np.ndarray:
    """Input i as a numpy array; it must be given and constant after folding."""
    v = ctx.const(i)
    if v is None:
        raise fail(ctx, f"input {i} is required")
    return v


def need_ints(ctx: OpContext, i: int) -> list[int]:
    """Constant input i as a flat list of ints; it must be given."""
    return [int(x) for x in need_const(ctx, i).reshape(-1)]


def wants(ctx: OpContext, k: int) -> bool:
    """Whether the node asks for output k."""
    return k < len(ctx.node.output) and bool(ctx.node.output[k])


OpFn = Callable[[OpContext], "Tensor | Sequence[Tensor | None]"]
MS = "com.microsoft"  # onnxruntime's contrib domain (its fused and quantised ops)
REGISTRY: dict[tuple[str, str], OpFn] = {}


F = TypeVar("F", bound=OpFn)


def op(*names: str, domain: str = "") -> Callable[[F], F]:
    """Register ``fn`` for the ONNX op types ``names`` (default domain)."""

    def deco(fn: F) -> F:
        for n in names:
            REGISTRY[(domain, n)] = fn
        return fn

    return deco


def lookup(domain: str, op_type: str) -> OpFn | None:
    if domain == "ai.onnx":
        domain = ""
    return REGISTRY.get((domain, op_type))
