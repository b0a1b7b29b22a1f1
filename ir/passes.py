"""Graph passes: constant folding, algebraic simplification, CSE, dead-code removal.

Each pass is a pure function Graph -> Graph that builds new nodes.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator

import numpy as np

from .graph import ELEMENTWISE, REDUCE, SOURCES, Graph, Node, Op
from .nogc import gc_paused
from .reference import eval_node, read
from .tensor import storable
from .view import View, contiguous_strides, reads_dim

Src = tuple[Node, View]


def _rebuild(graph: Graph, visit, order: list[Node] | None = None) -> Graph:
    """Copy the graph in topological order (``order``, where the caller has it); ``visit(node, new_srcs)`` returns a
    replacement node, or an alias ``(node, view)`` that readers use instead."""
    new: dict[int, Node] = {}
    alias: dict[int, Src] = {}

    def remap(s: Node, v: View) -> Src:
        x, vx = alias[s.id]
        if vx.is_contiguous and x.shape == s.shape:
            return x, v
        if v.is_contiguous and v.shape == s.shape:
            return x, vx
        if v.is_contiguous and v.numel == s.numel and (reshaped := vx.reshape(v.shape)) is not None:
            # a reshape of s: x read through the reshaped view, not copied out first
            return x, reshaped
        return _materialise(x, vx, s), v

    materialised: dict[int, Node] = {}

    def _materialise(x: Node, vx: View, s: Node) -> Node:
        if s.id not in materialised:
            materialised[s.id] = Node(Op.Contiguous, ((x, vx),), s.shape, s.dtype, {})
        return materialised[s.id]

    for n in order or graph.toposort():
        srcs = tuple([(new[s.id], v) if s.id not in alias else remap(s, v) for s, v in n.srcs])
        out = visit(n, srcs)
        if isinstance(out, tuple):
            alias[n.id] = out
        else:
            if out.origin is None:  # a rewritten node is still a piece of the same model node
                out.origin = n.origin
            new[n.id] = out
    outputs = []
    for o in graph.outputs:
        if o.id in alias:
            x, vx = alias[o.id]
            outputs.append(x if vx.is_contiguous and x.shape == o.shape else
                           Node(Op.Contiguous, ((x, vx),), o.shape, o.dtype, {}))
        else:
            outputs.append(new[o.id])
    inputs = [new[i.id] for i in graph.inputs]
    return Graph(inputs, outputs, list(graph.output_names), dict(graph.bindings), dict(graph.declared))


def _copy(n: Node, srcs) -> Node:
    return Node(n.op, srcs, n.shape, n.dtype, dict(n.attrs))


def _folded(n: Node, srcs: tuple[Src, ...]) -> Node | None:
    """A Constant of n's value where every source is a constant (and n is small enough to store)."""
    if not srcs or n.op in (Op.Input, Op.Constant):
        return None
    for s, _ in srcs:
        if s.op is not Op.Constant:
            return None
    if storable(n.numel, (s for s, _ in srcs)):
        val = eval_node(n, [read(s.attrs["value"], v) for s, v in srcs])
        return Node(Op.Constant, (), n.shape, n.dtype, {"value": np.ascontiguousarray(val).reshape(n.shape)})
    return None


def fold_constants(graph: Graph) -> Graph:
    return _rebuild(graph, lambda n, srcs: _folded(n, srcs) or _copy(n, srcs))


def _uniform_along(src: Src, d: int, depth: int = 8) -> bool:
    """Whether the values read through ``src`` are the same all along dim ``d``: its view does not move
    along d, or it is an elementwise node read in order whose sources are all uniform along d."""
    s, v = src
    if not reads_dim(v, d):
        return True
    if depth == 0 or s.op not in ELEMENTWISE or not (v.is_contiguous and v.shape == s.shape):
        return False
    return all(_uniform_along(x, d, depth - 1) for x in s.srcs)


def _narrowed(src: Src, dims: tuple[int, ...]) -> Src:
    """``src`` with ``dims`` (along which it is uniform) taken at index 0: elementwise nodes rebuilt smaller."""
    s, v = src
    ranges = tuple((0, 1) if d in dims else (0, size) for d, size in enumerate(v.shape))
    if not any(reads_dim(v, d) for d in dims):
        return s, v.shrink(ranges)
    shape = tuple(b - a for a, b in ranges)
    x = Node(s.op, tuple(_narrowed(y, dims) for y in s.srcs), shape, s.dtype, dict(s.attrs), origin=s.origin)
    return x, View.contiguous(shape)


def _reduced_once(n: Node, srcs: tuple[Src, ...]) -> Src | None:
    """A reduction whose source is the same all along a kept dim (a conv or matmul whose weight is one repeated
    value: every output channel sums the same products) reduces one slice and broadcasts it: fewer operations
    by the size of those dims, never more."""
    v = srcs[0][1]
    axes = tuple(n.attrs["axes"])
    dims = tuple(d for d, size in enumerate(v.shape) if size > 1 and d not in axes and _uniform_along(srcs[0], d))
    if not dims:
        return None
    shape = tuple(1 if d in dims else size for d, size in enumerate(n.shape))
    red = Node(n.op, (_narrowed(srcs[0], dims),), shape, n.dtype, dict(n.attrs), origin=n.origin)
    return red, View.contiguous(shape).expand(n.shape)


def _computed_once(n: Node, srcs: tuple[Src, ...]) -> Src | None:
    """An elementwise node whose sources all repeat along a dim, one of them a computed value broadcast there
    (as a reduction done once is), is computed once along it too, so what follows it reads the value it was."""
    if n.op is Op.Contiguous:
        return None
    computed = False
    for s, v in srcs:
        if v.is_contiguous:  # read in order: along every dim
            return None
        computed = computed or s.op not in SOURCES
    if not computed:
        return None
    dims = tuple(_unread_dims(n.shape, srcs))
    if not dims:
        return None
    shape = tuple(1 if d in dims else size for d, size in enumerate(n.shape))
    x = Node(n.op, tuple(_narrowed(s, dims) for s in srcs), shape, n.dtype, dict(n.attrs), origin=n.origin)
    return x, View.contiguous(shape).expand(n.shape)


def _unread_dims(shape: tuple[int, ...], srcs: tuple[Src, ...]) -> Iterator[int]:
    """The dims of more than one element that no source's view moves along."""
    for d, size in enumerate(shape):
        if size > 1:
            for _, v in srcs:
                if reads_dim(v, d):
                    break
            else:
                yield d


def _reduced_in_order(n: Node, srcs: tuple[Src, ...]) -> Src | None:
    """A reduction over a transposition of its source (a global average behind an exporter's NHWC Transpose)
    reduces the source in the order it is stored, where the kept dims keep their order: its output is the same,
    and it reads its source in order (and fuses with it) instead of across the strides of the transposed dims."""
    x, v = srcs[0]
    if v.offset or v.mask or v.numel != x.numel:
        return None
    stored = {s: e for e, s in enumerate(contiguous_strides(x.shape)) if x.shape[e] > 1}
    dim = {}  # a dim of more than one element of the view -> the source's dim it walks
    for d, (size, stride) in enumerate(zip(v.shape, v.strides)):
        if size > 1:
            e = stored.get(stride)
            if e is None or x.shape[e] != size:
                return None
            dim[d] = e
    axes = set(n.attrs["axes"])
    kept = [dim[d] for d in sorted(dim) if d not in axes]
    walked = list(dim.values())
    if kept != sorted(kept) or walked == sorted(walked) or len(set(walked)) < len(walked):
        return None
    new_axes = tuple(sorted(dim[d] for d in axes if d in dim))
    shape = tuple(1 if e in new_axes else s for e, s in enumerate(x.shape))
    red = Node(n.op, ((x, View.contiguous(x.shape)),), shape, n.dtype, {**n.attrs, "axes": new_axes},
               origin=n.origin)
    out = View.contiguous(shape).reshape(n.shape)
    return None if out is None else (red, out)


def _done_once(n: Node, srcs: tuple[Src, ...]) -> Src | None:
    if n.op in REDUCE:
        return _reduced_once(n, srcs)
    return _computed_once(n, srcs) if n.op in ELEMENTWISE else None


def _unit_or_combined(n: Node, srcs: tuple[Src, ...]) -> Node | Src | None:
    """x*1 and x+0 as x; (x*a)*b and (x+a)+b with one constant a*b or a+b."""
    unit = 1 if n.op is Op.Mul else 0
    for i in (0, 1):
        c = srcs[i][0].one_value(srcs[i][1])
        other = srcs[1 - i]
        if c is not None and c == unit and other[0].dtype == n.dtype and n.dtype.is_float:
            return other
        if c is not None and n.dtype.is_float:
            x, vx = other
            if x.op is n.op and vx.is_contiguous and vx.shape == n.shape and x.shape == n.shape:
                for j in (0, 1):
                    c2 = x.srcs[j][0].one_value(x.srcs[j][1])
                    if c2 is not None and x.dtype == n.dtype:
                        combined = c * c2 if n.op is Op.Mul else c + c2
                        k = Node(Op.Constant, (), (), n.dtype,
                                 {"value": np.asarray(combined).astype(n.dtype.np)})
                        kv = View.contiguous((1,) * len(n.shape)).expand(n.shape)
                        return Node(n.op, (x.srcs[1 - j], (k, kv)), n.shape, n.dtype, {})
    return None


def _simplified(n: Node, srcs: tuple[Src, ...]) -> Node | Src:
    out = _rewritten(n, srcs)
    return _copy(n, srcs) if out is None else out


def _rewritten(n: Node, srcs: tuple[Src, ...]) -> Node | Src | None:
    """x*1, x+0, Recip(Recip(x)), Log2(Exp2(x)), Cast to the same dtype, (x*a)*b, (x+a)+b; a reduction, or an
    elementwise node reading a computed value, over values repeated along a kept dim done once. None: n as it is."""
    if (once := _done_once(n, srcs)) is not None:
        return once
    if n.op in (Op.Mul, Op.Add) and len(srcs) == 2 and (out := _unit_or_combined(n, srcs)) is not None:
        return out
    if n.op is Op.Recip and srcs[0][0].op is Op.Recip and srcs[0][1].is_contiguous:
        inner = srcs[0][0]
        if inner.shape == n.shape:
            return inner.srcs[0]
    if n.op is Op.Log2 and srcs[0][0].op is Op.Exp2 and srcs[0][1].is_contiguous:
        inner = srcs[0][0]
        if inner.shape == n.shape:
            return inner.srcs[0]
    if n.op is Op.Cast and srcs[0][0].dtype == n.dtype:
        return srcs[0]
    if n.op is Op.Contiguous and srcs[0][1].is_contiguous and srcs[0][0].shape == n.shape:
        return srcs[0]
    return None


def simplify(graph: Graph) -> Graph:
    """x*1, x+0, Recip(Recip(x)), Log2(Exp2(x)), Cast to the same dtype, (x*a)*b, (x+a)+b."""
    return _rebuild(graph, _simplified)


def _key(n: Node, srcs) -> tuple:
    if n.op is Op.Constant:
        v = n.attrs["value"]
        if v.size > 4096:  # weights: the same array, not equal contents (hashing them all is slow)
            return ("C", n.dtype, v.shape, id(v))
        data = v.tobytes()  # short: itself, else its digest
        return ("C", n.dtype, v.shape, data if len(data) <= 64 else hashlib.sha1(data).hexdigest())
    if n.op is Op.Input:
        return ("I", n.attrs["name"])
    attrs = tuple(sorted(n.attrs.items())) if n.attrs else ()
    # a view by its fields: a tuple of them hashes and compares in C, a View in Python
    return (n.op, n.dtype, n.shape, attrs, tuple([(s.id, v.shape, v.strides, v.offset, v.mask) for s, v in srcs]))


class _Cse:
    """Equal nodes (same op, attributes and sources) made once."""

    def __init__(self) -> None:
        self.seen: dict[tuple, Node] = {}

    def keep(self, n: Node, made: Node) -> Node | Src:
        """``made`` (the copy or rewrite of ``n``), or the equal node kept before it."""
        kept = self.seen.setdefault(_key(made, made.srcs), made)
        return made if kept is made else (kept, View.contiguous(n.shape))


def cse(graph: Graph) -> Graph:
    kept = _Cse()
    return _rebuild(graph, lambda n, srcs: kept.keep(n, _copy(n, srcs)))


def dce(graph: Graph) -> Graph:
    """Nodes unreachable from the outputs vanish (toposort walks from the outputs)."""
    return _rebuild(graph, _copy)


def _optimise_once(graph: Graph) -> tuple[Graph, bool]:
    """fold_constants, simplify and cse in one walk: each node is folded, else simplified, then kept once; its
    sources were already through all three (and unreachable nodes vanish, as in every rebuild). Also whether
    some node was rewritten (simplified): without a rewrite, the graph is one the walk leaves as it is."""
    kept = _Cse()
    rewrote = False
    # values read through one view by more than one node: a reduction over such a transposition (a layer norm's or
    # softmax's) stays in that order, fused with the value's other readers there
    order = graph.toposort()
    reduced = {n.srcs[0][0].id for n in order if n.op in REDUCE}
    reads = Counter((s.id, v) for n in order for s, v in n.srcs if s.id in reduced)

    def visit(n: Node, srcs: tuple[Src, ...]) -> Node | Src:
        nonlocal rewrote
        if not srcs:  # an input, constant or iota: nothing to fold or simplify
            return kept.keep(n, _copy(n, srcs))
        out = _folded(n, srcs)
        if out is None:
            rewritten = _rewritten(n, srcs)
            if rewritten is None and n.op in REDUCE and reads[n.srcs[0][0].id, n.srcs[0][1]] == 1:
                rewritten = _reduced_in_order(n, srcs)
            if rewritten is None:
                out = _copy(n, srcs)
            else:
                rewrote = True
                if isinstance(rewritten, tuple):
                    return rewritten
                out = rewritten
        return kept.keep(n, out)

    return _rebuild(graph, visit, order), rewrote


@gc_paused()
def optimize(graph: Graph) -> Graph:
    """Folded, simplified and merged. A second walk where the first rewrote something: the nodes a rewrite makes
    (and the views it leaves to materialise) are merged and simplified only then. Without a rewrite the first
    walk's graph is its own fixed point: its nodes are copies and folds whose keys all differ."""
    once, rewrote = _optimise_once(graph)
    return _optimise_once(once)[0] if rewrote else once


__all__ = ["ELEMENTWISE", "REDUCE", "cse", "dce", "fold_constants", "optimize", "simplify"]
