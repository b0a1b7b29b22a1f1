"""Evaluate a Kernel with numpy: the executable meaning of the kernel IR, which tests and every tuning
candidate are checked against."""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node, Op
from ..ir.reference import eval_node, read, sum_of_product
from ..ir.view import View
from .kernel import REDUCE_OPS, Kernel, Leaf, Space


def _through(view: View, buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return read(buf, view).reshape(shape)


def run_kernel(kernel: Kernel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    # a contraction's sum is one einsum over its two loads' own dims: its product over the whole space (a conv's
    # is its output times its taps) is never made
    c = kernel.contraction
    skip = {c.a, c.b, c.mul} if c is not None else set()
    vals: list[np.ndarray | None] = []

    def val(i: int) -> np.ndarray:
        v = vals[i]
        assert v is not None, "a contraction's product is read only by its sum"
        return v

    for n, op in enumerate(kernel.ops):
        shape = kernel.space_shape(op.space)
        if c is not None and n == c.red:
            a, b = kernel.ops[c.a], kernel.ops[c.b]
            r = sum_of_product(inputs[a.attr("buf")], a.attr("view"), inputs[b.attr("buf")], b.attr("view"),
                               op.attr("axes"), kernel.ops[c.mul].dtype)
            vals.append(np.broadcast_to(r, shape).astype(op.dtype.np))
            continue
        if n in skip:
            vals.append(None)
            continue
        if op.op is Leaf.Load:
            vals.append(_through(op.attr("view"), inputs[op.attr("buf")], shape))
            continue
        if op.op is Leaf.Const:
            vals.append(np.full(shape, op.attr("value"), op.dtype.np))
            continue
        if op.op is Op.Iota:
            iota = eval_node(Node(Op.Iota, (), op.attr("shape"), op.dtype, {"axis": op.attr("axis")}), [])
            vals.append(_through(op.attr("view"), np.ascontiguousarray(iota), shape))
            continue
        args = [np.broadcast_to(val(a), shape) if op.space is Space.full else val(a) for a in op.args]
        if op.op in REDUCE_OPS:
            node = Node(Op(op.op), (), kernel.row, op.dtype, {"axes": op.attr("axes")})
            vals.append(np.asarray(eval_node(node, [np.broadcast_to(val(op.args[0]), kernel.full)])))
            continue
        if op.op is Op.Gather:
            nshape = op.attr("shape")
            data = read(inputs[op.attr("buf")], op.attr("view"))
            node = Node(Op.Gather, (), nshape, op.dtype, {"axis": op.attr("axis")})
            vals.append(np.asarray(eval_node(node, [data, args[0].reshape(nshape)])).reshape(shape))
            continue
        node = Node(Op(op.op), (), shape, op.dtype, {})
        vals.append(np.asarray(eval_node(node, args)))
    return [np.ascontiguousarray(np.broadcast_to(val(i), kernel.space_shape(kernel.ops[i].space)))
            .reshape(b.shape) for i, b in kernel.outputs]
