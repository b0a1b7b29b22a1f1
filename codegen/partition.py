"""Group primitives into kernels.

The fusion decisions are data: ``fusible_edges(graph)`` lists every
producer->consumer edge that may fuse (the consumer reads the producer's value
at the same element, or a reduction row broadcast back over its row), and
``partition(graph, decisions)`` fuses the edges whose decision is True (all of
them by default) as far as kernel forms allow without creating a cycle.

Decisions may also choose an algorithm per convolution (``Winograd``) and the order its output is stored in
(``ChannelsLast``): ``lower(graph, decisions)`` rewrites the graph for them first (``apply_algorithms``), then
partitions it; without decisions it takes the untuned defaults (``default_algorithms``: Winograd where its cost
model prefers it, channels-last where ``layout.defaults`` does).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..ir import layout, winograd
from ..ir.dtypes import DType
from ..ir.graph import REDUCE, SOURCES, Graph, Node, Op
from ..ir.nogc import gc_paused
from ..ir.view import View, contiguous_strides, reads_dim, whole_parts
from .kernel import Buffer, Kernel, KOp, KOpName, Leaf, Space, multiplies_as_matmul

Edge = tuple[int, int, int]  # (producer position, consumer position, source slot) in toposort order


@dataclass(frozen=True)
class Winograd:
    """Compute the convolution whose SumReduce is node ``node`` of the toposort by Winograd F(tile x tile, 3 x 3)
    (``ir.winograd``); without one (or with its decision False) a convolution stays one contraction."""

    node: int
    tile: int  # one of ir.winograd.TILES


@dataclass(frozen=True)
class ChannelsLast:
    """Store the output of the convolution whose SumReduce is node ``node`` of the toposort with its channels
    innermost (``ir.layout``); a convolution computed by Winograd keeps the Winograd output's order."""

    node: int


@dataclass(frozen=True)
class ByImage:
    """Compute the convolution whose SumReduce is node ``node`` of the toposort, where a ``Winograd`` decision takes
    it over more than one image, one image at a time (``ir.winograd``); without one the images run together."""

    node: int


Flag = ChannelsLast | ByImage  # a yes/no decision per convolution
Decision = Edge | Winograd | Flag
Decisions = dict[Decision, bool]


def _same_order(v: View, producer: Node) -> bool:
    return v.is_contiguous and (v.shape == producer.shape or v.numel == producer.numel)


def _row_broadcast(v: View, producer: Node) -> bool:
    """v reads a reduction row value broadcast over the reduced dims."""
    if v.mask or v.offset:
        return False
    # drop the broadcast dims: what remains must be the producer's contiguous order
    kept = [(s, st) for s, st in zip(v.shape, v.strides) if st != 0 and s != 1]
    shape = tuple(s for s, _ in kept)
    return (math.prod(shape) == producer.numel < v.numel
            and tuple(st for _, st in kept) == contiguous_strides(shape))


def fusible_edges(graph: Graph) -> list[Edge]:
    order = graph.toposort()
    return _fusible_edges(order, {n.id: i for i, n in enumerate(order)})


def _fusible_edges(order: list[Node], pos: dict[int, int]) -> list[Edge]:
    edges = []
    sums: set[int] = set()  # the sums of the concatenations runtime/alias.py may write in place
    for n in order:
        if n.op in SOURCES:
            continue
        if n.op is Op.Add:
            parts = [(s, v) for s, v in n.srcs if not (s.id in sums and _same_order(v, s))]
            if all(s.op not in SOURCES for s, _ in parts) \
                    and whole_parts([(s.id, v, s.numel) for s, v in parts]) is not None:
                sums.add(n.id)
        for slot, (s, v) in enumerate(n.srcs):
            if s.op in SOURCES:
                continue
            if n.op is Op.Gather and slot == 0:
                continue
            # what reads a concatenation starts a kernel of its own: the copy is then elided, and the reader
            # reads the parts where their producers wrote them (DenseNet's batch norms after each concatenation)
            if s.id in sums and n.id not in sums:
                continue
            if _same_order(v, s) or _row_broadcast(v, s):
                edges.append((pos[s.id], pos[n.id], slot))
    return edges


# the most primitives one kernel fuses: a C compiler's time grows faster than the length of the function it
# compiles (a 100,000-op chain fused into one kernel did not compile in 10 minutes)
MAX_KERNEL_NODES = 512


@dataclass
class _Group:
    id: int
    full: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)
    reduce_axes: tuple[int, ...] | None = None
    deps: set[int] = field(default_factory=set)  # the groups this group's nodes read from
    contraction: bool = False  # holds a SumReduce over a Mul of two loaded operands (a matmul)

    @property
    def full_numel(self) -> int:
        return math.prod(self.full)

    @property
    def row_numel(self) -> int:
        if self.reduce_axes is None:
            return self.full_numel
        return math.prod(1 if k in self.reduce_axes else s for k, s in enumerate(self.full))


def _is_contraction_mul(red: Node, members: set[int]) -> bool:
    """SumReduce over a Mul of two loaded operands that broadcast against each other (a matmul)."""
    mul, v = red.srcs[0]
    if mul.op is not Op.Mul or not _same_order(v, mul) or any(s.id in members for s, _ in mul.srcs):
        return False
    if not multiplies_as_matmul(mul.dtype):
        return False
    (_, va), (_, vb) = mul.srcs
    return any(reads_dim(va, d) != reads_dim(vb, d) for d, size in enumerate(mul.shape) if size > 1)


def _accepts(g: _Group, n: Node, via: tuple[Node, View]) -> bool:
    """Can node n join group g, reading the group's node ``via`` (fusible view)?"""
    p, v = via
    if g.contraction:
        # contraction kernels take only an elementwise epilogue over the row space
        return n.op not in (Op.SumReduce, Op.MaxReduce, Op.Gather) and n.numel == g.row_numel and _same_order(v, p)
    if n.op in REDUCE:
        src_shape = n.srcs[0][1].shape
        if g.reduce_axes is None:
            return (math.prod(src_shape) == g.full_numel and _same_order(v, p) and n.srcs[0][0] is p
                    and _respaced(g, src_shape))
        return src_shape == g.full and tuple(n.attrs["axes"]) == g.reduce_axes and _same_order(v, p)
    if _same_order(v, p):
        return n.numel in (g.full_numel, g.row_numel)
    return g.reduce_axes is not None and n.numel == g.full_numel and p.numel == g.row_numel and _over_reduced(v, g)


def _respaced(g: _Group, shape: tuple[int, ...]) -> bool:
    """Whether every value elementwise group ``g`` reads is a view over ``shape``, the space of a reduction that
    would join it: a value read transposed within a dim the reduction's space merges (a channel shuffle's) would
    be read through the index arithmetic of another shape at every element (a ReLU and max pool over such a
    copy, fused: 18 + 8 -> 363 us)."""
    numel = math.prod(shape)
    return g.full == shape or all(v.numel != numel or v.reshape(shape) is not None for m in g.nodes for _, v in m.srcs)


def _over_reduced(v: View, g: _Group) -> bool:
    """v walks the group's own space, broadcast over exactly its reduced dims: a sum's row read back at every
    element it summed (a softmax's max, a norm's mean), not a row that another space of as many elements
    repeats along dims of its own (a global pool over 16x16 pixels read by a 1x1 conv to 256 channels)."""
    bcast = {d for d, (size, st) in enumerate(zip(v.shape, v.strides)) if st == 0 and size != 1}
    return v.shape == g.full and bcast == {d for d in g.reduce_axes or () if g.full[d] != 1}


@dataclass
class _Grouping:
    """Nodes taken in topological order into groups (the kernels to be)."""

    pos: dict[int, int]  # node id -> topological position
    allowed: set[Edge]
    group_of: dict[int, _Group] = field(default_factory=dict)
    groups: list[_Group] = field(default_factory=list)
    readers: dict[int, set[int]] = field(default_factory=dict)  # group id -> the groups whose deps hold it

    def reads_from(self, starts: set[int], g: _Group) -> bool:
        """Whether the groups ``starts`` read from ``g``, directly or through other groups. A group whose last
        node comes before g's first cannot, which keeps the walk short."""
        if not starts:
            return False
        first = self.pos[g.nodes[0].id]
        stack, seen = list(starts), set(starts)
        while stack:
            h = self.groups[stack.pop()]
            if h is g:
                return True
            if self.pos[h.nodes[-1].id] < first:
                continue
            for d in h.deps - seen:
                seen.add(d)
                stack.append(d)
        return False

    def joinable(self, n: Node, slot: int, s: Node) -> _Group | None:
        """The group of n's source ``s`` (read at ``slot``), where n may join it."""
        pos, allowed, group_of = self.pos, self.allowed, self.group_of
        g = group_of.get(s.id)
        at = pos[n.id]
        if g is None or (pos[s.id], at, slot) not in allowed or len(g.nodes) >= MAX_KERNEL_NODES:
            return None
        others: set[int] = set()  # the groups of n's other sources
        for k, src in enumerate(n.srcs):
            h = group_of.get(src[0].id)
            if h is g:  # every source inside g must be a fused edge g accepts
                if (pos[src[0].id], at, k) not in allowed or not _accepts(g, n, src):
                    return None
            elif h is not None:
                others.add(h.id)
        # joining g must not make g depend on itself through another source's group
        return None if self.reads_from(others, g) else g

    def _mergeable(self, h: _Group, g: _Group, n: Node) -> bool:
        """Whether elementwise group ``h``, which elementwise node ``n`` reads as it joins elementwise group
        ``g``, may join g too: every edge from h to n fused and read in the same order, both groups over the
        same space, neither reading the other, and no third group between them (an LSTM step's gates: each a
        sigmoid or tanh of its own slice of the gate product, combined into the cell state, one kernel rather
        than seven)."""
        at = self.pos[n.id]
        if any(self.group_of.get(s.id) is h and ((self.pos[s.id], at, k) not in self.allowed or not _same_order(v, s))
               for k, (s, v) in enumerate(n.srcs)):
            return False
        if n.op in REDUCE or n.op is Op.Gather or g.id in h.deps or h.id in g.deps:
            return False
        if any(x.reduce_axes is not None or x.contraction or x.full != g.full for x in (g, h)):
            return False
        if len(g.nodes) + len(h.nodes) >= MAX_KERNEL_NODES:
            return False
        # what g reads once n joins it (its own sources and n's) must not reach h through a third group, nor h's
        # sources g: joined, the kernel would read a kernel that reads it
        others = {x.id for s, _ in n.srcs if (x := self.group_of.get(s.id)) is not None}
        return not self.reads_from((g.deps | others) - {g.id, h.id}, h) and not self.reads_from(h.deps - {g.id}, g)

    def _depend(self, x: _Group, on: set[int]) -> None:
        """x reads the groups ``on`` too."""
        x.deps |= on
        for d in on:
            self.readers.setdefault(d, set()).add(x.id)

    def _merge(self, h: _Group, g: _Group) -> None:
        """h's nodes into g, in graph order; h left empty, every group that read from h reading from g."""
        g.nodes = sorted(g.nodes + h.nodes, key=lambda m: self.pos[m.id])
        for d in h.deps:
            self.readers[d].discard(h.id)
        self._depend(g, h.deps - {g.id})
        for m in h.nodes:
            self.group_of[m.id] = g
        h.nodes, h.deps = [], set()
        for xid in self.readers.pop(h.id, set()):
            x = self.groups[xid]
            x.deps.discard(h.id)
            if x is not g:
                self._depend(x, {g.id})

    def add(self, n: Node) -> None:
        target = None
        for slot, (s, _) in enumerate(n.srcs):
            if (target := self.joinable(n, slot, s)) is not None:
                break
        if target is None:
            target = _Group(len(self.groups), full=n.shape)
            self.groups.append(target)
        else:
            for s, _ in n.srcs:
                h = self.group_of.get(s.id)
                if h is not None and h is not target and h.nodes and self._mergeable(h, target, n):
                    self._merge(h, target)
        if n.op in REDUCE and target.reduce_axes is None:
            target.full = n.srcs[0][1].shape
            target.reduce_axes = tuple(n.attrs["axes"])
        if n.op is Op.SumReduce and _is_contraction_mul(n, {m.id for m in target.nodes}):
            target.contraction = True
        self._depend(target, {h.id for s, _ in n.srcs if (h := self.group_of.get(s.id)) is not None} - {target.id})
        target.nodes.append(n)
        self.group_of[n.id] = target


@gc_paused()
def partition(graph: Graph, decisions: dict[Edge, bool] | None = None) -> list[Kernel]:
    """Kernels in launch order. ``decisions`` maps fusible edges to yes/no (default yes); algorithm decisions are
    ``lower``'s."""
    order = graph.toposort()
    pos = {n.id: i for i, n in enumerate(order)}
    decided = decisions or {}
    grouping = _Grouping(pos, {e for e in _fusible_edges(order, pos) if decided.get(e, True)})
    for n in order:
        if n.op not in SOURCES:
            grouping.add(n)
    groups = grouping.groups

    users = graph.consumers(order)
    outputs = {o.id for o in graph.outputs}
    kernels = [_build(g, users, outputs) for g in groups if g.nodes]
    return _launch_order(kernels)


def graph_signature(graph: Graph, default_kernels: list[Kernel] | None = None) -> str:
    """Identifies a graph by the canonical text of its default kernels, an untuned compile's (``lower`` without
    decisions; no names, no weights); pass them when already lowered."""
    kernels = default_kernels if default_kernels is not None else lower(graph)[1]
    text = "\n".join(k.canonical() for k in kernels)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def fusion_key(graph: Graph, default_kernels: list[Kernel] | None = None) -> str:
    """The tuning-cache signature under which a graph's tuned fusion decisions are kept."""
    return f"fusion-{graph_signature(graph, default_kernels)}"


def decisions_from_config(graph: Graph, config: dict[str, Any]) -> Decisions:
    """Decode a fusion winner's config ({"unfused": [[producer, consumer, slot], ...], "winograd": [[node, tile],
    ...], "channels_last": [node, ...], "by_image": [node, ...]}; a record without "winograd" computes every
    convolution directly, one without "channels_last" stores every output in its logical order, one without
    "by_image" runs every Winograd convolution over all its images at once)."""
    edges = set(fusible_edges(graph))
    out: Decisions = {e: False for e in (tuple(x) for x in config.get("unfused", [])) if e in edges}
    chosen = config.get("winograd")
    if isinstance(chosen, list) and chosen:  # most records choose none: the graph need not be matched
        convs = set(winograd_convs(graph))
        for item in chosen:
            if isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item) \
                    and item[0] in convs and item[1] in winograd.TILES:
                out[Winograd(item[0], item[1])] = True
    for cls, (key, offered) in FLAGS.items():
        nodes = config.get(key)
        if isinstance(nodes, list) and nodes:
            convs = set(offered(graph))
            out |= {cls(p): True for p in nodes if type(p) is int and p in convs}
    return out


def decisions_config(decisions: Decisions) -> dict[str, list[Any]]:
    """A fusion winner's config: the edges left unfused, the convolutions computed by Winograd, those stored
    channels-last and those computed image by image (where any)."""
    config: dict[str, list[Any]] = {
        "unfused": sorted([list(e) for e, v in decisions.items() if isinstance(e, tuple) and not v])}
    chosen = sorted([[w.node, w.tile] for w, v in decisions.items() if isinstance(w, Winograd) and v])
    if chosen:
        config["winograd"] = chosen
    for cls, (key, _) in FLAGS.items():
        if nodes := sorted(c.node for c, v in decisions.items() if isinstance(c, cls) and v):
            config[key] = nodes
    return config


def winograd_convs(graph: Graph) -> list[int]:
    """The toposort positions of the convolutions a ``Winograd`` decision may take (3 x 3, unit steps)."""
    return [i for i, n in enumerate(graph.toposort()) if winograd.eligible(n)]


def image_convs(graph: Graph) -> list[int]:
    """The toposort positions of the convolutions a ``ByImage`` decision may take (a ``Winograd`` one's over a
    batch)."""
    return [i for i, n in enumerate(graph.toposort()) if winograd.by_images(n)]


def layout_convs(graph: Graph) -> list[int]:
    """The toposort positions of the convolutions a ``ChannelsLast`` decision may take."""
    return [i for i, n in enumerate(graph.toposort()) if layout.eligible(n)]


# each yes/no decision per convolution: its key in a fusion winner's config (the prefix of its search parameters
# too) and the convolutions of a graph it is offered for
FLAGS: dict[type[Flag], tuple[str, Callable[[Graph], list[int]]]] = {
    ChannelsLast: ("channels_last", layout_convs), ByImage: ("by_image", image_convs)}


def offered_flags(graph: Graph) -> list[Flag]:
    """Every yes/no decision per convolution ``graph`` offers the search (``FLAGS``)."""
    return [cls(p) for cls, (_, offered) in FLAGS.items() for p in offered(graph)]


def apply_algorithms(graph: Graph, decisions: Decisions | None) -> tuple[Graph, dict[Edge, bool]]:
    """The graph with the algorithms and layouts ``decisions`` choose, and their edge decisions on its nodes (an
    edge to or from a rewritten node holds for what it became; edges of the new nodes take the default)."""
    edges = {e: v for e, v in (decisions or {}).items() if isinstance(e, tuple)}
    algorithms = [w for w, v in (decisions or {}).items() if isinstance(w, Winograd) and v]
    last = [c.node for c, v in (decisions or {}).items() if isinstance(c, ChannelsLast) and v]
    order = graph.toposort()
    chosen: dict[int, int] = {}
    for w in algorithms:
        if w.node < len(order):
            chosen[order[w.node].id] = max(w.tile, chosen.get(order[w.node].id, 0))
    stored = {order[p].id for p in last if p < len(order) and order[p].id not in chosen}
    images = {order[c.node].id for c, v in (decisions or {}).items() if isinstance(c, ByImage) and v
              and c.node < len(order) and order[c.node].id in chosen}
    new, moved = winograd.rewrite(graph, chosen, images) if chosen else (graph, {n.id: n for n in order})
    new, again = layout.rewrite(new, {m.id for i in stored if (m := moved.get(i)) is not None})
    if new is graph:  # no algorithm, no layout: what most untuned compiles take
        return graph, edges
    moved = {k: m for k, v in moved.items() if (m := again.get(v.id)) is not None}
    pos = {n.id: i for i, n in enumerate(new.toposort())}
    at = [pos[m.id] if (m := moved.get(n.id)) is not None else None for n in order]
    out: dict[Edge, bool] = {}
    for (p, c, slot), v in edges.items():
        a, b = at[p] if p < len(at) else None, at[c] if c < len(at) else None
        if a is not None and b is not None:
            out[(a, b, slot)] = v
    return new, out


def default_algorithms(graph: Graph) -> Decisions:
    """The algorithms an untuned compile takes: Winograd for the convolutions whose cost model prefers it
    (``winograd.default_tile``; image by image where ``winograd.default_by_image`` does), every other one
    directly; channels-last where ``layout.defaults`` prefers it."""
    order = graph.toposort()
    tiles = {i: t for i, n in enumerate(order) if (t := winograd.default_tile(n))}
    last = {n.id for n in layout.defaults(graph, order)}
    out: Decisions = {Winograd(i, t): True for i, t in tiles.items()}
    out |= {ByImage(i): True for i in tiles if winograd.default_by_image(order[i])}
    return out | {ChannelsLast(i): True for i, n in enumerate(order) if n.id in last}


def lower(graph: Graph, decisions: Decisions | None = None) -> tuple[Graph, list[Kernel]]:
    """The graph as ``decisions`` rewrite it and its kernels in launch order: what runs. Without decisions, the
    untuned defaults: every edge fused, the ``default_algorithms``."""
    new, edges = apply_algorithms(graph, default_algorithms(graph) if decisions is None else decisions)
    return new, partition(new, edges)


def _space_view(v: View, shape: tuple[int, ...]) -> View:
    if v.shape == shape:
        return v
    r = v.reshape(shape)
    return r if r is not None else v


class _KernelBuilder:
    """The KOps of one group: each node in turn, its sources from outside the group as leaves (a load of a
    kernel input, a scalar constant, an iota), equal leaves once."""

    def __init__(self, g: _Group):
        self.full = g.full
        self.axes = g.reduce_axes or ()
        self.row = tuple(1 if k in self.axes else s for k, s in enumerate(self.full))
        self.full_n, self.row_n = math.prod(self.full), math.prod(self.row)
        self.members = {n.id for n in g.nodes}
        self.ops: list[KOp] = []
        self.index: dict[int, int] = {}  # graph node id -> KOp position
        self.inputs: list[Buffer] = []
        self.input_nodes: dict[int, int] = {}  # graph node id -> buffer position
        self._leaves: dict[tuple[object, ...], int] = {}

    def space_of(self, n: Node) -> Space:
        if n.op in REDUCE:
            return Space.row
        if self.axes and n.numel == self.row_n and n.numel != self.full_n:
            return Space.row
        return Space.full

    def leaf(self, op: KOpName, dtype: DType, space: Space, attrs: tuple[tuple[str, Any], ...]) -> int:
        """A leaf KOp (a load, a constant, an iota), made only where no equal one is there already."""
        key = (op, dtype, space, attrs)
        at = self._leaves.get(key)
        if at is None:
            at = self._leaves[key] = self.add(KOp(op, (), dtype, space, attrs))
        return at

    def add(self, op: KOp) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def buf(self, s: Node) -> int:
        if s.id not in self.input_nodes:
            self.input_nodes[s.id] = len(self.inputs)
            self.inputs.append(Buffer(s.shape, s.dtype, s.op is Op.Constant))
        return self.input_nodes[s.id]

    def operand(self, s: Node, v: View, space: Space) -> int:
        shape = self.full if space is Space.full else self.row
        if s.id in self.members:  # the same element, or a row value broadcast over the full space
            return self.index[s.id]
        if s.is_scalar_const and not v.mask:
            return self.leaf(Leaf.Const, s.dtype, space, (("value", s.attrs["value"].item()),))
        if s.op is Op.Iota:
            return self.leaf(Op.Iota, s.dtype, space,
                             (("view", _space_view(v, shape)), ("shape", s.shape), ("axis", s.attrs["axis"])))
        return self.leaf(Leaf.Load, s.dtype, space, (("buf", self.buf(s)), ("view", _space_view(v, shape))))

    def node(self, n: Node) -> None:
        sp = self.space_of(n)
        if n.op in REDUCE:
            s, v = n.srcs[0]
            a = self.operand(s, v, Space.full)
            self.index[n.id] = self.add(KOp(n.op, (a,), n.dtype, Space.row, (("axes", self.axes),)))
        elif n.op is Op.Gather:
            (d, dv), (ix, iv) = n.srcs
            i = self.operand(ix, iv, sp)
            # data view and axis are over the node's own shape; the emitter unravels if it differs
            self.index[n.id] = self.add(KOp(Op.Gather, (i,), n.dtype, sp, (("buf", self.buf(d)), ("view", dv),
                                                                          ("axis", n.attrs["axis"]),
                                                                          ("shape", n.shape))))
        else:
            args = tuple(self.operand(s, v, sp) for s, v in n.srcs)
            self.index[n.id] = self.add(KOp(n.op, args, n.dtype, sp))


def _build(g: _Group, users: dict[int, list[Node]], outputs: set[int]) -> Kernel:
    kb = _KernelBuilder(g)
    for n in g.nodes:
        kb.node(n)
    outs: list[tuple[int, Buffer]] = []
    out_nodes: list[int] = []
    for n in g.nodes:  # what the graph's outputs or other kernels read
        read = any(u.id not in kb.members for u in users.get(n.id, []))
        if n.id in outputs or read:
            outs.append((kb.index[n.id], Buffer(n.shape, n.dtype, final=not read)))
            out_nodes.append(n.id)
    sources = list(dict.fromkeys(n.origin for n in g.nodes if n.origin is not None))
    return Kernel.of(kb.full, kb.axes, kb.inputs, kb.ops, outs, list(kb.input_nodes), out_nodes, sources)


def _launch_order(kernels: list[Kernel]) -> list[Kernel]:
    produced_by = {nid: k for k, kern in enumerate(kernels) for nid in kern.output_nodes}
    done: set[int] = set()
    order: list[Kernel] = []
    for start in range(len(kernels)):  # depth first, iteratively: a chain of kernels is as deep as it is long
        stack = [(start, False)]
        while stack:
            k, ready = stack.pop()
            if ready:
                order.append(kernels[k])
                continue
            if k in done:
                continue
            done.add(k)
            stack.append((k, True))
            for nid in reversed(kernels[k].input_nodes):
                if nid in produced_by and produced_by[nid] not in done:
                    stack.append((produced_by[nid], False))
    return order
