"""The primitive graph: nodes whose sources are (node, view) pairs."""

from __future__ import annotations

import enum
import itertools
import math
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import DType
from .view import View


class Op(enum.StrEnum):  # str-valued: its names are the kernel IR's op names and canonical text
    # sources
    Input = "Input"
    Constant = "Constant"
    Iota = "Iota"
    # unary
    Exp2 = "Exp2"
    Log2 = "Log2"
    Sin = "Sin"
    Sqrt = "Sqrt"
    Recip = "Recip"
    Cast = "Cast"
    # binary
    Add = "Add"
    Mul = "Mul"
    Div = "Div"  # floats only: the correctly rounded quotient (integer division is built from Mod)
    Mod = "Mod"
    LessThan = "LessThan"
    # select
    Where = "Where"
    # reduce
    SumReduce = "SumReduce"
    MaxReduce = "MaxReduce"
    # data
    Gather = "Gather"
    Contiguous = "Contiguous"

    def __repr__(self) -> str:
        return self.value


SOURCES = frozenset({Op.Input, Op.Constant, Op.Iota})
UNARY = frozenset({Op.Exp2, Op.Log2, Op.Sin, Op.Sqrt, Op.Recip, Op.Cast})
BINARY = frozenset({Op.Add, Op.Mul, Op.Div, Op.Mod, Op.LessThan})
ELEMENTWISE = UNARY | BINARY | {Op.Where, Op.Contiguous}
REDUCE = frozenset({Op.SumReduce, Op.MaxReduce})

_ids = itertools.count()

# the model node (its name and op type) being imported: every primitive made meanwhile is one of its pieces
Origin = tuple[str, str]
_origin: ContextVar[Origin | None] = ContextVar("origin", default=None)


class origin:  # lower case: used as a function, ``with origin(name, op_type):``
    """Primitives made inside come from the model node ``name`` of type ``op_type``."""

    __slots__ = ("_token", "_value")

    def __init__(self, name: str, op_type: str) -> None:
        self._value: Origin = (name, op_type)

    def __enter__(self) -> None:
        self._token = _origin.set(self._value)

    def __exit__(self, *exc: object) -> None:
        _origin.reset(self._token)


@dataclass(eq=False, slots=True)
class Node:
    """One primitive. ``srcs`` are read through views whose shape is the node's
    iteration shape: ``shape`` for elementwise ops, the pre-reduction shape for
    reductions (``attrs['axes']``, kept as size-1 dims in ``shape``), and for
    Gather the output shape with ``attrs['axis']`` taking the data's extent.

    attrs by op: Input {name}; Constant {value: np.ndarray}; Iota {axis};
    Cast {}; SumReduce/MaxReduce {axes}; Gather {axis}.
    """

    op: Op
    srcs: tuple[tuple[Node, View], ...]
    shape: tuple[int, ...]
    dtype: DType
    attrs: dict[str, Any] = field(default_factory=dict)
    id: int = field(default_factory=_ids.__next__)
    # the model node this primitive is a piece of (None: made by luminal itself); never part of its meaning
    origin: Origin | None = field(default_factory=_origin.get, repr=False)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_scalar_const(self) -> bool:
        return self.op is Op.Constant and self.attrs["value"].ndim == 0

    def one_value(self, view: View):
        """The value every element read through ``view`` takes, where this is a constant of one element and no mask
        reads zeros around it (a padded constant is no one value); else None."""
        if self.op is not Op.Constant or view.mask or self.attrs["value"].size != 1:
            return None
        return self.attrs["value"].reshape(()).item()

    def __repr__(self) -> str:
        return f"%{self.id}={self.op.value}{list(self.shape)}:{self.dtype.value}"


@dataclass
class Graph:
    """A DAG with named inputs and outputs. Outputs are contiguous nodes."""

    inputs: list[Node]
    outputs: list[Node]
    output_names: list[str]
    # symbolic dims that were bound while importing: name -> value
    bindings: dict[str, int] = field(default_factory=dict)
    # inputs and outputs whose model type the IR computes in another dtype (uint8 as int32, double
    # as float32): name -> the numpy dtype name callers feed and get back
    declared: dict[str, str] = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        return [n.attrs["name"] for n in self.inputs]

    def toposort(self) -> list[Node]:
        order: list[Node] = []
        seen: set[Node] = set()  # met: a node is appended once all its sources are
        for out in self.outputs:
            if out in seen:
                continue
            seen.add(out)
            stack = [(out, iter(out.srcs))]
            while stack:
                n, rest = stack[-1]
                for s, _ in rest:
                    if s not in seen:
                        seen.add(s)
                        if not s.srcs:  # a leaf is done as soon as it is met
                            order.append(s)
                            continue
                        stack.append((s, iter(s.srcs)))
                        break
                else:
                    stack.pop()
                    order.append(n)
        for n in self.inputs:
            if n not in seen:
                seen.add(n)
                order.insert(0, n)
        return order

    def consumers(self, order: list[Node] | None = None) -> dict[int, list[Node]]:
        """Each node's readers by id (``order``: this graph's toposort, where the caller has it)."""
        users: dict[int, list[Node]] = {}
        for n in order if order is not None else self.toposort():
            for s, _ in n.srcs:
                users.setdefault(s.id, []).append(n)
        return users

    def primitive_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.toposort():
            counts[n.op.value] = counts.get(n.op.value, 0) + 1
        return dict(sorted(counts.items()))


Src = tuple[Node, View]


def weighted_sum(red: Node) -> tuple[Node, Src, Src] | None:
    """(the product, the activation read, the weight read) where ``red`` is a SumReduce over the whole of a Mul of
    an activation by a constant weight (a convolution's or a matmul's contraction)."""
    if red.op is not Op.SumReduce:
        return None
    mul, mv = red.srcs[0]
    if mul.op is not Op.Mul or not mv.is_contiguous or mv.shape != mul.shape:
        return None
    a, b = mul.srcs
    if (a[0].op is Op.Constant) == (b[0].op is Op.Constant):
        return None
    return (mul, b, a) if a[0].op is Op.Constant else (mul, a, b)


def const_value(node: Node) -> np.ndarray:
    assert node.op is Op.Constant
    return node.attrs["value"]
