"""Evaluate a Kernel with numpy: the executable meaning of the kernel IR, for tests."""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node, Op
from ..ir.reference import eval_node, read
from ..ir.view import View
from .kernel import REDUCE_OPS, Kernel


def _through(view: View, buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return read(buf, view).reshape(shape)


def run_kernel(kernel: Kernel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    vals: list[np.ndarray] = []
    for op in kernel.ops:
        shape = kernel.space_shape(op.space)
        if op.op == "Load":
            vals.append(_through(op.attr("view"), inputs[op.attr("buf")], shape))
            continue
        if op.op == "Const":
            vals.append(np.full(shape, op.attr("value"), op.dtype.np))
            continue
        if op.op == "Iota":
            iota = eval_node(Node(Op.Iota, (), op.attr("shape"), op.dtype, {"axis": op.attr("axis")}), [])
            vals.append(_through(op.attr("view"), np.ascontiguousarray(iota), shape))
            continue
        args = [np.broadcast_to(vals[a], shape) if op.space == "full" else vals[a] for a in op.args]
        if op.op in REDUCE_OPS:
            node = Node(Op(op.op), (), kernel.row, op.dtype, {"axes": op.attr("axes")})
            vals.append(np.asarray(eval_node(node, [np.broadcast_to(vals[op.args[0]], kernel.full)])))
            continue
        if op.op == "Gather":
            nshape = op.attr("shape")
            data = read(inputs[op.attr("buf")], op.attr("view"))
            node = Node(Op.Gather, (), nshape, op.dtype, {"axis": op.attr("axis")})
            vals.append(np.asarray(eval_node(node, [data, args[0].reshape(nshape)])).reshape(shape))
            continue
        node = Node(Op(op.op), (), shape, op.dtype, {})
        vals.append(np.asarray(eval_node(node, args)))
    return [np.ascontiguousarray(np.broadcast_to(vals[i], kernel.space_shape(kernel.ops[i].space)))
            .reshape(b.shape) for i, b in kernel.outputs]
