"""Evaluate a Kernel with numpy: the executable meaning of the kernel IR, which tests and every tuning
candidate are checked against."""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node, Op
from ..ir.reference import eval_node, read, sum_of_product
from ..ir.view import View
from .kernel import REDUCE_OPS, Kernel


def _through(view: View, buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return read(buf, view).reshape(shape)


def _products(kernel: Kernel) -> tuple[dict[int, int], set[int]]:
    """{SumReduce: Mul} for each sum of a product of two loads that nothing else reads, which ``sum_of_product``
    takes without making the product over the whole space (a conv's is its output times its taps); and the ops
    left unevaluated: those products and the loads only they read."""
    users: dict[int, list[int]] = {}
    for j, op in enumerate(kernel.ops):
        for a in op.args:
            users.setdefault(a, []).append(j)
    outs = {i for i, _ in kernel.outputs}

    def whole_load(a: int) -> bool:
        o = kernel.ops[a]
        return o.op == "Load" and o.space == "full" and o.attr("view").shape == kernel.full

    found = {}
    for r, op in enumerate(kernel.ops):
        m = op.args[0] if op.op == "SumReduce" else None
        if m is not None and op.dtype.is_float and kernel.ops[m].op == "Mul" and users[m] == [r] \
                and m not in outs and all(whole_load(a) for a in kernel.ops[m].args):
            found[r] = m
    skip = set(found.values())
    skip |= {n for n, op in enumerate(kernel.ops)
             if op.op == "Load" and n not in outs and users.get(n) and all(j in skip for j in users[n])}
    return found, skip


def run_kernel(kernel: Kernel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    products, skip = _products(kernel)
    vals: list[np.ndarray | None] = []
    for n, op in enumerate(kernel.ops):
        shape = kernel.space_shape(op.space)
        if n in products:
            a, b = (kernel.ops[i] for i in kernel.ops[products[n]].args)
            r = sum_of_product(inputs[a.attr("buf")], a.attr("view"), inputs[b.attr("buf")], b.attr("view"),
                               op.attr("axes"), kernel.ops[products[n]].dtype)
            vals.append(np.broadcast_to(r, shape).astype(op.dtype.np))
            continue
        if n in skip:
            vals.append(None)
            continue
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
