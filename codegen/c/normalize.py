"""Simplify a kernel's index space before emitting loops: drop size-1 dims, merge adjacent dims.

Two neighbouring dims merge when every view over the space walks them as one
(stride[k] == stride[k+1] * size[k+1], the same for mask coefficients) and both
are reduced or both are kept. The space's linear order is unchanged, so views
that are read by unravelling the linear index stay valid as they are.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...ir.graph import Op
from ...ir.view import View
from ..index import run_coeff
from ..kernel import REDUCE_OPS, Form, Kernel, KOp, Leaf, Space


def _views(kernel: Kernel) -> list[tuple[View, Space]]:
    out = []
    for op in kernel.ops:
        if op.op in (Leaf.Load, Op.Iota):
            v = op.attr("view")
            if v.shape == kernel.space_shape(op.space):
                out.append((v, op.space))
    return out


def _mergeable(v: View, a: int, b: int) -> bool:
    return all(run_coeff(co, (a, b), v.shape) is not None for co in (v.strides, *(c for c, _, _ in v.mask)))


def _regroup(v: View, groups: list[list[int]]) -> View:
    shape = tuple(math.prod(v.shape[d] for d in g) for g in groups)
    strides = tuple(v.strides[g[-1]] if shape[i] != 1 else 0 for i, g in enumerate(groups))
    mask = tuple((tuple(c[g[-1]] if shape[i] != 1 else 0 for i, g in enumerate(groups)), lo, hi)
                 for c, lo, hi in v.mask)
    return View(shape, strides, v.offset, mask)


def normalize(kernel: Kernel) -> Kernel:
    if kernel.form is Form.gather:
        return kernel
    red = set(kernel.reduce_axes)
    views = _views(kernel)
    groups: list[list[int]] = []
    for d, s in enumerate(kernel.full):
        if s == 1:
            continue
        if groups:
            prev = groups[-1][-1]
            if (prev in red) == (d in red) and all(_mergeable(v, prev, d) for v, _ in views):
                groups[-1].append(d)
                continue
        groups.append([d])
    full = tuple(math.prod(kernel.full[d] for d in g) for g in groups)
    if full == kernel.full:
        return kernel
    new_red = tuple(i for i, g in enumerate(groups) if g[0] in red)
    probe = replace(kernel, full=full, reduce_axes=new_red)
    ops = []
    for op in kernel.ops:
        if op.op in (Leaf.Load, Op.Iota) and op.attr("view").shape == kernel.space_shape(op.space):
            nv = _regroup(op.attr("view"), groups)
            assert nv.shape == probe.space_shape(op.space)
            op = KOp(op.op, op.args, op.dtype, op.space,
                     tuple((k, nv if k == "view" else v) for k, v in op.attrs))
        elif op.op in REDUCE_OPS:
            op = KOp(op.op, op.args, op.dtype, op.space, (("axes", new_red),))
        ops.append(op)
    return replace(kernel, full=full, reduce_axes=new_red, ops=tuple(ops))
