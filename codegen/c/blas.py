"""The library schedule of a contraction: numpy's BLAS on the packed operands, then a generated epilogue.

Operands are packed to (batch, M, K) and (batch, K, N) by reading their views
with numpy, multiplied with ``numpy.matmul``, and the row-space epilogue runs
as a generated elementwise C kernel that reads the product as one more input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ...ir.dtypes import DType
from ...ir.reference import read
from ...ir.view import View
from ..kernel import Buffer, Kernel, KOp, Leaf, Space
from .contraction import Plan


def _contiguous_in(shape: tuple[int, ...], dims: tuple[int, ...], scale: int) -> dict[int, int]:
    out, acc = {}, scale
    for d in reversed(dims):
        out[d] = acc
        acc *= shape[d]
    return out


def epilogue_kernel(kernel: Kernel, plan: Plan) -> Kernel:
    """The row-space part of a contraction as an elementwise kernel reading the product buffer."""
    nb, M, N, _ = plan.sizes
    row = kernel.row
    strides = {**_contiguous_in(row, plan.batch, M * N), **_contiguous_in(row, plan.m, N),
               **_contiguous_in(row, plan.n, 1)}
    view = View(row, tuple(strides.get(d, 0) for d in range(len(row))))
    ops = []
    for i, op in enumerate(kernel.ops):
        if i == plan.red:
            op = KOp(Leaf.Load, (), DType.float32, Space.full, (("buf", len(kernel.inputs)), ("view", view)))
        elif op.space is Space.full:
            op = KOp(Leaf.Const, (), op.dtype, Space.full, (("value", 0),))
        else:
            op = replace(op, space=Space.full)
        ops.append(op)
    inputs = [*kernel.inputs, Buffer((nb, M, N), DType.float32)]
    return Kernel.of(row, (), inputs, ops, kernel.outputs)


def _operand(arr: np.ndarray, view: View, outer: tuple[int, ...], inner: tuple[int, ...], nb: int, a: int,
             b: int, shape: tuple[int, ...]) -> np.ndarray:
    keep = set(outer) | set(inner)
    v = view.shrink(tuple((0, s) if d in keep else (0, 1) for d, s in enumerate(shape)))
    x = read(arr, v)
    order = list(outer) + list(inner)
    x = np.transpose(x, order + [d for d in range(len(shape)) if d not in keep])
    return np.ascontiguousarray(x.reshape(nb, a, b), dtype=np.float32)


class BlasKernel:
    def __init__(self, kernel: Kernel, plan: Plan, epilogue, starts: Sequence[int] = ()):
        """``starts``: per input, the element its window begins at (``codegen.window``)."""
        self.kernel, self.plan, self.epilogue = kernel, plan, epilogue
        self.threads = epilogue.threads
        self._starts = tuple(starts) or (0,) * len(kernel.inputs)

    @staticmethod
    def epilogue_source(kernel: Kernel, plan: Plan, threads: int) -> str:
        from .emit import emit_elementwise
        from .knobs import ElementwiseSchedule
        from .schedule import simd_width, typed_default

        epi = epilogue_kernel(kernel, plan)
        default = typed_default(epi, threads)
        assert isinstance(default, ElementwiseSchedule)
        return emit_elementwise(epi, default, simd_width())

    def __call__(self, buffers) -> None:
        k, p = self.kernel, self.plan
        buffers = [*(b if b.shape == w.shape else b.reshape(-1)[s:s + w.numel].reshape(w.shape)
                     for b, w, s in zip(buffers, k.inputs, self._starts)), *buffers[len(k.inputs):]]
        nb, M, N, K = p.sizes
        oa, ob = k.ops[p.a], k.ops[p.b]
        a = _operand(buffers[oa.attr("buf")], oa.attr("view"), p.batch + p.m, p.k, nb, M, K, k.full)
        b = _operand(buffers[ob.attr("buf")], ob.attr("view"), p.batch + p.k, p.n, nb, K, N, k.full)
        c = np.matmul(a, b) if p.batch else np.matmul(a[0], b[0]).reshape(1, M, N)
        c = np.ascontiguousarray(c, dtype=np.float32)
        n_in = len(k.inputs)
        self.epilogue([*buffers[:n_in], c, *buffers[n_in:]])
