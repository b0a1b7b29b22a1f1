"""The kernel IR that every backend emits code from.

A kernel iterates one index space ``full`` (F). Reduction and contraction
kernels also have ``reduce_axes`` (R); their per-row values live in the row
space O (F with the R dims set to 1). Each KOp lives in one space and refers to
earlier KOps by position (SSA). Loads read kernel inputs through Views whose
shape is the KOp's space shape (``View.reshape`` canonicalised), or, when that
is impossible, any shape of the same size (the emitter then unravels the
space's linear index by ``view.shape``).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..ir.dtypes import DType
from ..ir.graph import Op
from ..ir.view import View, reads_dim


class Form(StrEnum):
    """How backends emit a kernel: a contraction is one they can read as a GEMM."""

    elementwise = "elementwise"
    reduction = "reduction"
    contraction = "contraction"
    gather = "gather"


class Space(StrEnum):
    full = "full"  # F: the kernel's iteration space
    row = "row"  # O: F with the reduced dims set to 1


class Leaf(StrEnum):
    """KOps that read a kernel input (``Iota`` is the primitive's own name)."""

    Load = "Load"
    Const = "Const"


# a KOp's op: a primitive of the graph (never Input or Constant, which become leaves) or a leaf
KOpName = Op | Leaf

FORMS = tuple(Form)
REDUCE_OPS = (Op.SumReduce, Op.MaxReduce)  # the KOps that go from the full to the row space
LEAF_OPS = (Leaf.Load, Leaf.Const, Op.Iota)
_KOP_NAMES = (Op, Leaf)  # for isinstance: a tuple, where Op | Leaf would build a union on every call


def kop_name(name: str) -> KOpName:
    """The op of a KOp named ``name`` (ValueError when it is none)."""
    if name in Leaf.__members__:
        return Leaf(name)
    op = Op(name)
    if op in (Op.Input, Op.Constant):
        raise ValueError(f"{name} is not a kernel op")
    return op


@dataclass(frozen=True)
class KOp:
    """op: a primitive (Exp2 ... Where, SumReduce, MaxReduce, Gather) or a leaf:
    ``Load`` (attrs buf, view), ``Const`` (attrs value), ``Iota`` (attrs view, shape, axis:
    the value of an Iota buffer of ``shape`` read through ``view``).
    Gather: args (index,), attrs buf, view (data view over the space shape with
    ``axis`` taking the data's extent), axis. Reductions go from the full to the row space."""

    op: KOpName
    args: tuple[int, ...]
    dtype: DType
    space: Space
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # names given as text (a kernel read back from JSON) become the enums every reader compares with
        if not isinstance(self.op, _KOP_NAMES):
            object.__setattr__(self, "op", kop_name(self.op))
        if not isinstance(self.space, Space):
            object.__setattr__(self, "space", Space(self.space))

    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default


@dataclass(frozen=True)
class Buffer:
    shape: tuple[int, ...]
    dtype: DType
    constant: bool = False  # a model weight: the same values on every run (a backend may re-lay it out once)
    final: bool = False  # an output no other kernel reads, the model's result (a backend may store it past the caches)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class Kernel:
    """Build with ``Kernel.of``, which derives the form from the ops."""

    form: Form
    full: tuple[int, ...]
    reduce_axes: tuple[int, ...]
    inputs: tuple[Buffer, ...]
    ops: tuple[KOp, ...]
    # (op index, buffer written) per output; outputs are contiguous over the op's space
    outputs: tuple[tuple[int, Buffer], ...]
    # graph node ids behind inputs/outputs: used by the runtime, never part of the signature
    input_nodes: tuple[int, ...] = ()
    output_nodes: tuple[int, ...] = ()
    # the model nodes (name, op type) fused into it, in graph order: for people, never part of the signature
    sources: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, full: tuple[int, ...], reduce_axes: tuple[int, ...], inputs: Sequence[Buffer], ops: Sequence[KOp],
           outputs: Sequence[tuple[int, Buffer]], input_nodes: Sequence[int] = (),
           output_nodes: Sequence[int] = (), sources: Sequence[tuple[str, str]] = ()) -> Kernel:
        ops, outputs = tuple(ops), tuple(outputs)
        return cls(form_of(full, reduce_axes, ops, outputs), full, reduce_axes, tuple(inputs), ops, outputs,
                   tuple(input_nodes), tuple(output_nodes), tuple(sources))

    @property
    def row(self) -> tuple[int, ...]:
        return tuple(1 if k in self.reduce_axes else s for k, s in enumerate(self.full))

    @functools.cached_property
    def contraction(self) -> Contraction | None:
        """The matmul reading of the kernel, when it has one (every backend emits it as a GEMM)."""
        return contraction_of(self.full, self.reduce_axes, self.ops, self.outputs)

    def space_shape(self, space: Space) -> tuple[int, ...]:
        return self.full if space is Space.full else self.row

    def full_cone(self, roots: list[int], stop: frozenset[int] = frozenset()) -> list[int]:
        """The full-space ops that ``roots`` depend on through full-space ops (not past ``stop``), in SSA
        order: what a pass over the reduced dims must compute."""
        need: set[int] = set()
        stack = [r for r in roots if self.ops[r].space is Space.full]
        while stack:
            i = stack.pop()
            if i in need:
                continue
            need.add(i)
            if i not in stop:
                stack += [a for a in self.ops[i].args if self.ops[a].space is Space.full]
        return sorted(need)

    def canonical(self) -> str:
        """Text of the kernel with only structure: shapes, dtypes, views, ops."""
        lines = [f"{self.form} full={list(self.full)} reduce={list(self.reduce_axes)}"]
        lines += [f"in{i} {b.dtype.value}{list(b.shape)}{' const' if b.constant else ''}"
                  for i, b in enumerate(self.inputs)]
        for i, o in enumerate(self.ops):
            attrs = " ".join(f"{k}={_fmt(v)}" for k, v in o.attrs)
            lines.append(f"%{i} {o.space} {o.op}{list(o.args)} {o.dtype.value} {attrs}".rstrip())
        lines += [f"out %{i} -> {b.dtype.value}{list(b.shape)}{' final' if b.final else ''}" for i, b in self.outputs]
        return "\n".join(lines)

    @functools.cached_property
    def in_place_inputs(self) -> tuple[int, ...]:
        """The inputs the output may be written over (a residual its epilogue adds): of a contraction with one
        output, each input of the output's dtype and size that every load reads at the output's own index, in the
        output's space. Each of its elements is then read, after the whole sum, only by the store that writes the
        same element; a backend must not assume the two apart (no ``restrict``)."""
        if self.form != Form.contraction or len(self.outputs) != 1:
            return ()
        o, out = self.outputs[0]
        space = self.ops[o].space
        same = View.contiguous(self.space_shape(space))
        reads: dict[int, bool] = {}
        for op in self.ops:
            if op.op is Leaf.Load:
                b, v = op.attr("buf"), op.attr("view")
                reads[b] = reads.get(b, True) and op.space is space and v.offset == 0 and not v.mask \
                    and all(a == c or n == 1 for a, c, n in zip(v.strides, same.strides, v.shape))
        return tuple(b for b, ok in sorted(reads.items()) if ok and not self.inputs[b].constant
                     and self.inputs[b].dtype is out.dtype and self.inputs[b].numel == out.numel)

    @functools.cached_property
    def windowed(self) -> tuple[Kernel, tuple[int, ...]]:
        """The kernel as it reads its inputs' windows, and the element each window starts at (``codegen.window``):
        what a backend emits and binds."""
        from .window import windowed

        return windowed(self)

    @functools.cached_property
    def signature(self) -> str:
        """Hash of the canonical text of the kernel as it reads its inputs' windows, so the kernels that differ
        only in where they read a buffer (an unrolled recurrence's steps) are one to tune and to cache; kernels are
        not changed once built, so it is computed once."""
        return hashlib.sha256(self.windowed[0].canonical().encode()).hexdigest()[:20]

    @property
    def flops(self) -> int:
        n = 0
        for o in self.ops:
            if o.op in LEAF_OPS:
                continue
            n += math.prod(self.space_shape(Space.full if o.op in REDUCE_OPS else o.space))
        return n

    @property
    def bytes_moved(self) -> int:
        return sum(b.nbytes for b in self.inputs) + sum(b.nbytes for _, b in self.outputs)


def _fmt(v: Any) -> str:
    if isinstance(v, View):
        return f"V{list(v.shape)}/{list(v.strides)}+{v.offset}m{list(v.mask)}"
    if isinstance(v, float):
        return repr(v)
    return str(v)


@dataclass(frozen=True)
class Contraction:
    """A SumReduce over the Mul of two loads, read as a batched GEMM: the non-unit dims of the
    full space by role, each group flattened row-major. M dims are read only by operand ``a``,
    N dims only by ``b``, K dims are the reduced ones, batch dims are read by both."""

    mul: int
    red: int
    a: int
    b: int
    batch: tuple[int, ...]
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    full: tuple[int, ...]

    def size(self, group: str) -> int:
        return math.prod(self.full[d] for d in getattr(self, group))


def multiplies_as_matmul(dtype: DType) -> bool:
    """Products of this dtype form matmuls (contractions): floats, and int32 (quantised models' products)."""
    return dtype.is_float or dtype is DType.int32


def contraction_of(full: tuple[int, ...], reduce_axes: tuple[int, ...], ops: tuple[KOp, ...],
                   outputs: tuple[tuple[int, Buffer], ...]) -> Contraction | None:
    """The matmul reading of a kernel: a SumReduce of a float or int32 product of two loads."""
    reds = [i for i, o in enumerate(ops) if o.op in REDUCE_OPS]
    if len(reds) != 1 or ops[reds[0]].op is not Op.SumReduce:
        return None
    red = reds[0]
    mul = ops[red].args[0]
    mo = ops[mul]
    if mo.op is not Op.Mul or mo.space is not Space.full or len(set(mo.args)) != 2 \
            or not multiplies_as_matmul(mo.dtype):
        return None
    a, b = mo.args
    if any(ops[x].op is not Leaf.Load or ops[x].attr("view").shape != full for x in (a, b)):
        return None
    if {i for i, o in enumerate(ops) if o.space is Space.full} != {a, b, mul}:
        return None
    if any(ops[o].space is not Space.row for o, _ in outputs):
        return None
    va, vb = ops[a].attr("view"), ops[b].attr("view")
    groups: dict[str, list[int]] = {"batch": [], "m": [], "n": [], "k": []}
    for d, size in enumerate(full):
        if size == 1:
            continue
        da, db = reads_dim(va, d), reads_dim(vb, d)
        role = "k" if d in reduce_axes else "m" if da and not db else "n" if db and not da else "batch"
        groups[role].append(d)
    if not groups["m"] and not groups["n"]:
        return None
    return Contraction(mul, red, a, b, tuple(groups["batch"]), tuple(groups["m"]), tuple(groups["n"]),
                       tuple(groups["k"]), full)


def form_of(full: tuple[int, ...], reduce_axes: tuple[int, ...], ops: tuple[KOp, ...],
            outputs: tuple[tuple[int, Buffer], ...]) -> Form:
    if contraction_of(full, reduce_axes, ops, outputs) is not None:
        return Form.contraction
    if reduce_axes:
        return Form.reduction
    return Form.gather if any(o.op is Op.Gather for o in ops) else Form.elementwise
