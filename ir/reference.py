"""The numpy reference executor: runs a Graph one primitive at a time.

Slow and exact; the ground truth for every test. Half precisions are computed
in float32 and rounded to the node's dtype after every primitive.
"""

from __future__ import annotations

import string

import numpy as np

from .dtypes import DType, as_declared
from .graph import Graph, Node, Op
from .view import View, reads_dim


def read(arr: np.ndarray, view: View) -> np.ndarray:
    """Materialise ``view`` over the contiguous buffer ``arr``."""
    flat = arr.reshape(-1)
    if view.is_contiguous and view.numel == flat.size:
        return flat.reshape(view.shape)
    if view.numel == 0:
        return np.zeros(view.shape, arr.dtype)
    if view.never_valid:
        return np.zeros(view.shape, arr.dtype)
    if not view.mask and all(s >= 0 for s in view.strides):
        return np.lib.stride_tricks.as_strided(
            flat[view.offset:], view.shape, tuple(s * flat.itemsize for s in view.strides), writeable=False)
    idx, valid = view.index_arrays()
    if valid is None:
        return flat[idx]
    out = flat[np.clip(idx, 0, flat.size - 1)]
    return np.where(valid, out, np.zeros((), arr.dtype))


def _compact(arr: np.ndarray, view: View) -> tuple[np.ndarray, list[int]]:
    """Read a view without its broadcast dims; returns the array and the dims it kept."""
    keep = [k for k in range(view.ndim)
            if view.shape[k] != 1 and reads_dim(view, k)]
    v = view.shrink(tuple((0, s) if k in keep else (0, 1) for k, s in enumerate(view.shape)))
    data = read(arr, v).reshape(tuple(view.shape[k] for k in keep))
    return data, keep


def _compute(x: np.ndarray) -> np.ndarray:
    if x.dtype in (DType.float16.np, DType.bfloat16.np):
        return x.astype(np.float32)
    return x


def _contract(node: Node, mul: Node, vals: dict[int, np.ndarray], mul_view: View) -> np.ndarray | None:
    (a, va), (b, vb) = mul.srcs
    if mul.numel == 0:
        return np.zeros(node.shape, node.dtype.np)
    if not mul_view.is_contiguous or mul_view.shape != mul.shape:
        return None
    return np.broadcast_to(sum_of_product(vals[a.id], va, vals[b.id], vb, node.attrs["axes"], mul.dtype), node.shape)


def sum_of_product(a: np.ndarray, va: View, b: np.ndarray, vb: View, axes: tuple[int, ...],
                   dtype: DType) -> np.ndarray:
    """The sum over ``axes`` of the product of ``a`` read through ``va`` and ``b`` through ``vb`` (views of one
    shape), by einsum over each operand's non-broadcast dims: the product itself is never made (a conv's is its
    output times its taps). The result keeps the summed dims as 1s."""
    da, ka = _compact(a, va)
    db, kb = _compact(b, vb)
    shape = va.shape
    letters = string.ascii_letters
    out_dims = [k for k in range(len(shape)) if k not in axes and (k in ka or k in kb)]
    eq = f"{''.join(letters[k] for k in ka)},{''.join(letters[k] for k in kb)}->{''.join(letters[k] for k in out_dims)}"
    ct = dtype.compute.np
    r = np.einsum(eq, _compute(da).astype(ct, copy=False), _compute(db).astype(ct, copy=False), optimize=True)
    # summed dims that neither operand reads add up copies of the same product
    copies = int(np.prod([shape[k] for k in axes if k not in ka and k not in kb]))
    if copies != 1:
        r = r * np.asarray(copies, ct)
    return r.reshape(tuple(shape[k] if k in out_dims else 1 for k in range(len(shape))))


_UNARY = {Op.Exp2: np.exp2, Op.Log2: np.log2, Op.Sin: np.sin, Op.Sqrt: np.sqrt, Op.Recip: np.reciprocal}


def _iota(node: Node) -> np.ndarray:
    ax = node.attrs["axis"]
    r = np.arange(node.shape[ax], dtype=np.int64).reshape([-1 if k == ax else 1 for k in range(len(node.shape))])
    return np.broadcast_to(r, node.shape).astype(node.dtype.np)


def _cast(x: np.ndarray, dt: DType) -> np.ndarray:
    if dt is DType.bool:
        return x != 0
    if dt.is_int and x.dtype.kind == "f":
        x = np.where(np.isfinite(x), x, 0)
        info = np.iinfo(dt.np)
        x = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max)
    return x.astype(dt.np)


def _combine(node: Node, srcs: list[np.ndarray], xs: list[np.ndarray]) -> np.ndarray:
    """A primitive of several sources (or a reduction), over the sources in their compute dtype ``xs``."""
    op, dt = node.op, node.dtype
    if op is Op.Add:
        return np.logical_or(*xs) if dt is DType.bool else xs[0] + xs[1]
    if op is Op.Mul:
        return np.logical_and(*xs) if dt is DType.bool else xs[0] * xs[1]
    if op is Op.Div:
        return xs[0] / xs[1]
    if op is Op.Mod:
        if not dt.is_int:
            return np.fmod(*xs)
        a, b = xs
        return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))
    if op is Op.LessThan:
        return xs[0] < xs[1]
    if op is Op.Where:
        return np.where(srcs[0], xs[1], xs[2])
    if op is Op.SumReduce:
        return np.sum(xs[0], axis=node.attrs["axes"], keepdims=True, dtype=dt.compute.np)
    if op is Op.MaxReduce:
        return np.max(xs[0], axis=node.attrs["axes"], keepdims=True)
    if op is Op.Gather:
        data, idx = srcs
        ax = node.attrs["axis"]
        idx = np.clip(idx.astype(np.int64), 0, data.shape[ax] - 1)
        return np.take_along_axis(data, idx, axis=ax)
    if op is Op.Contiguous:
        return srcs[0]
    raise NotImplementedError(op)


def eval_node(node: Node, srcs: list[np.ndarray]) -> np.ndarray:
    """One primitive over already-materialised source arrays (of the node's view shapes)."""
    op, dt = node.op, node.dtype
    with np.errstate(all="ignore"):
        if op is Op.Constant:
            return node.attrs["value"]
        if op is Op.Iota:
            return _iota(node)
        if op is Op.Cast:
            return _cast(srcs[0], dt)
        xs = [_compute(s) for s in srcs]
        unary = _UNARY.get(op)
        r = unary(xs[0]) if unary is not None else _combine(node, srcs, xs)
        return np.broadcast_to(np.asarray(r).astype(dt.np, copy=False), node.shape)


def run(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run the graph; ``feeds`` maps input names to arrays of the input's shape and dtype."""
    order = graph.toposort()
    users = graph.consumers()
    outputs = {n.id for n in graph.outputs}
    remaining = {k: len(v) for k, v in users.items()}
    contraction_only = {
        n.id for n in order
        if n.op is Op.Mul and len(n.srcs) == 2 and n.id not in outputs and n.dtype.is_float
        and all(u.op is Op.SumReduce for u in users.get(n.id, []))
    }
    vals: dict[int, np.ndarray] = {}
    for n in order:
        if n.op is Op.Input:
            x = np.asarray(feeds[n.attrs["name"]])
            vals[n.id] = np.ascontiguousarray(x.astype(n.dtype.np, copy=False)).reshape(n.shape)
        elif n.id in contraction_only:
            continue
        else:
            r = None
            if n.op is Op.SumReduce and n.srcs[0][0].id in contraction_only:
                mul, mv = n.srcs[0]
                r = _contract(n, mul, vals, mv)
                if r is None:
                    vals[mul.id] = np.ascontiguousarray(eval_node(mul, [read(vals[s.id], v) for s, v in mul.srcs]))
            if r is None:
                r = eval_node(n, [read(vals[s.id], v) for s, v in n.srcs])
            vals[n.id] = np.ascontiguousarray(r).reshape(n.shape)
        for s, _ in n.srcs:
            if s.id in vals and s.id not in outputs:
                remaining[s.id] -= 1
                if remaining[s.id] == 0:
                    del vals[s.id]
        if n.id in contraction_only:
            continue
    return [as_declared(vals[n.id], graph.declared.get(name)) for n, name in zip(graph.outputs, graph.output_names)]
