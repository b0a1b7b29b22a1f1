"""Channels-last: a convolution's output written with its channels innermost, as a rewrite of the graph.

A convolution is a SumReduce over a Mul of an activation and a constant weight; the order of the Mul's axes is
the order its output is stored in (the batch, the output channels, then the pixels, as the frontend builds it).
``rewrite`` builds the chosen ones with the axes the weight reads (the output channels) after those it does not
(the pixels), so the contraction writes pixel rows of channels and its micro-kernel runs along the channels: a
7x7 map is 49 pixels, half-filled vectors in the one order and 512 full channels in the other.

The stored order then follows the value where it can (an elementwise node is computed in the stored order of
the latest of its operands computed from a contraction, so a bias, an activation and a residual add stay fused
into that contraction: ``_follows``; a pool is computed with its vectors along the dim stored innermost:
``_pool_follows``; a concatenation of parts stored in one order is computed in it; a copy of an upsample's
repeats is computed in the order it reads its value in: ``_copy_follows``; a depthwise convolution or a Winograd
transform over a channels-last value computes its channels innermost: ``_channelwise``); every other reader reads
the value in place through the view ``view.rebase`` gives (the next convolution's windows, a pool's, a global
average, a reshape that merges a grouped convolution's groups and channels), and a reader whose view merges the
channels with the pixels (a flatten) reads a copy in the logical order, made once: the conversions at a region's border
are kernels like any other, and the search times them with the rest. ``defaults`` is the untuned compile's
choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .graph import ELEMENTWISE, REDUCE, Graph, Node, Op, Src, weighted_sum
from .view import View, reads_dim, rebase

# the fewest outputs per input group for which the rewrite is offered: innermost, they are what the contraction's
# vectors run along (one 16-float vector); a depthwise convolution has one, and channels-last ran 5-50x slower
# for such convolutions (3x3, one or two outputs per group: 0.07 -> 3.8 ms at 56x56, 144 channels)
MIN_CHANNELS = 16


def _order(red: Node, least: int = MIN_CHANNELS) -> tuple[int, ...] | None:
    """The Mul's axes with the kept ones the weight reads last (the reduced ones after them), where the
    SumReduce ``red`` is a contraction of an activation with a constant weight that writes at least ``least``
    outputs per input group and that order is a new one. A kept dim the weight reads after a pixel (one only the
    activation reads) that follows the channels (a transposed convolution's phase, each output pixel row
    ``stride * h + phase``) stays where it is, beside that pixel: the larger map is then a reshape of the value
    stored channels-last, where with its phases beside its channels it was a transposition."""
    found = weighted_sum(red)
    if found is None:
        return None
    mul, (_, vx), (_, vw) = found
    axes = set(red.attrs["axes"])
    kept = [k for k in range(len(mul.shape)) if k not in axes]
    big = [k for k in kept if mul.shape[k] > 1]
    read = [reads_dim(vw, k) for k in big]
    first = read.index(True) if True in read else len(big)
    pixel = next((i for i in range(first, len(big)) if not read[i]), len(big))  # the first pixel after them
    phases = {k for k, r in zip(big[pixel:], read[pixel:]) if r}
    channels = [k for k in kept if reads_dim(vw, k) and k not in phases]
    if math.prod(mul.shape[k] for k in channels if not reads_dim(vx, k)) < least:
        return None
    order = (*[k for k in kept if k not in channels], *channels, *sorted(axes))
    return order if _moves(order, mul.shape) else None


def eligible(node: Node) -> bool:
    """Whether ``node`` is the SumReduce of a contraction a channels-last rewrite changes."""
    return _order(node) is not None


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(order.index(k) for k in range(len(order)))


def _stored(node: Node, order: tuple[int, ...]) -> Src:
    """A node computed in ``order`` as read in its logical order."""
    return node, View.contiguous(node.shape).permute(_inverse(order))


def _moves(order: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``order`` takes some dims of more than one element out of their logical order."""
    moved = [k for k in order if shape[k] > 1]
    return moved != sorted(moved)


def _by_stride(v: View, axes: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """``v``'s dims outside ``axes`` (ones first) by the stride it walks them at, innermost the smallest, then
    ``axes``: the order it reads its storage in where it is not that storage's logical one; None where that is
    the logical one. A broadcast dim stays after the dim before it (an upsample's repeats beside the pixels they
    repeat, so that the larger map is still a reshape of the value), outermost where none walks the storage
    before it."""
    units = [k for k in range(v.ndim) if k not in axes and v.shape[k] == 1]
    lead: list[int] = []
    runs: list[list[int]] = []
    for k in range(v.ndim):
        if k in axes or v.shape[k] == 1:
            continue
        if v.strides[k]:
            runs.append([k])
        else:
            (runs[-1] if runs else lead).append(k)
    runs.sort(key=lambda run: (-abs(v.strides[run[0]]), run[0]))
    order = (*units, *lead, *(k for run in runs for k in run), *axes)
    return order if _moves(order, v.shape) else None


def rewrite(graph: Graph, chosen: set[int]) -> tuple[Graph, dict[int, Node]]:
    """``graph`` with the contractions whose SumReduce node ids are in ``chosen`` (and ``_order`` has one for)
    computed channels-last; also the node each old node id became (nodes only they read are gone). ``graph``
    itself where nothing is chosen and no convolution follows a value of the graph's own stored channels-last
    (``_channelwise``: a ConvNeXt stage's first depthwise conv, after its stem's norm over channels moved last)."""
    order = graph.toposort()
    if not chosen and not any(n.op is Op.SumReduce and _channelwise(n, {}) is not None for n in order):
        return graph, {n.id: n for n in order}
    out, moved, _ = _rewrite(graph, order, chosen)
    return out, moved


def _rewrite(graph: Graph, order: list[Node], chosen: set[int]) -> tuple[Graph, dict[int, Node], set[int]]:
    """``rewrite`` (``order``: the graph's toposort), and the chosen ids whose values some reader (or a graph
    output) reads from a copy in the logical order."""
    users = graph.consumers(order)
    new: dict[int, Node] = {}
    stored: dict[int, Src] = {}  # old id -> (new node, the view that reads it in the old node's logical order)
    root: dict[int, int] = {}  # old id -> the chosen contraction whose order it has
    near: dict[int, int] = {}  # contractions and the elementwise nodes computed from them: old id -> toposort place
    copies: dict[int, Node] = {}
    out_ids = {o.id for o in graph.outputs}
    planned: dict[int, tuple[int, ...] | None] = {}

    def plan(red: Node) -> tuple[int, ...] | None:
        """The order the SumReduce ``red`` is computed in (None: its logical one), asked at its product's node
        (``_narrow``) and at its own."""
        if red.id not in planned:
            planned[red.id] = _order(red) if red.id in chosen else _channelwise(red, stored)
        return planned[red.id]

    def read(s: Node, v: View, logical: bool = False) -> Src:
        if s.id not in stored:
            return new[s.id], v
        x, vx = stored[s.id]
        moved = None if logical else rebase(v, s.shape, vx)
        if moved is not None:
            return x, moved
        if s.id not in copies:
            copies[s.id] = Node(Op.Contiguous, ((x, vx),), s.shape, s.dtype, {}, origin=s.origin)
        return copies[s.id], v

    for place, n in enumerate(order):
        narrow = _narrow(n, users.get(n.id, []), chosen, plan)
        srcs = tuple(read(s, v, narrow) for s, v in n.srcs)
        if (n.op is Op.SumReduce and n.srcs[0][0].op is Op.Mul) or (
                n.op in ELEMENTWISE and any(s.id in near and _full_size(v) for s, v in n.srcs)):
            near[n.id] = place
        perm = plan(n)
        if perm is not None:
            mul, _ = n.srcs[0]
            (a, va), (b, vb) = (read(s, v) for s, v in mul.srcs)
            shape = tuple(mul.shape[k] for k in perm)
            made = Node(Op.Mul, ((a, va.permute(perm)), (b, vb.permute(perm))), shape, mul.dtype, {},
                        origin=mul.origin)
            axes = tuple(sorted(perm.index(k) for k in n.attrs["axes"]))
            red = Node(Op.SumReduce, ((made, View.contiguous(shape)),), tuple(n.shape[k] for k in perm), n.dtype,
                       {**n.attrs, "axes": axes}, origin=n.origin)
            # a convolution that follows its input's order (``_channelwise``) has that input's root; over a value
            # of the graph's own read transposed, it is its own
            at = n.id if n.id in chosen else next((root[s.id] for s, _ in mul.srcs if s.id in root), n.id)
            new[n.id], stored[n.id], root[n.id] = red, _stored(red, perm), at
            continue
        # a contraction's product keeps its order; what a pool sums (an activation, a hardswish's product)
        # follows the layout
        product = n.op is Op.Mul and any(u.op is Op.SumReduce and weighted_sum(u) is not None
                                         for u in users.get(n.id, []))
        follow = None if product else _follows(n, srcs, [s.id in stored for s, _ in n.srcs],
                                               [near.get(s.id, -1) for s, _ in n.srcs])
        if follow is None and n.op in REDUCE and n.srcs[0][0].id in stored:
            follow = _pool_follows(n, srcs)
        if follow is None and n.op is Op.Contiguous and n.srcs[0][0].id in stored and n.id not in out_ids:
            follow = _copy_follows(n, srcs[0][1], users.get(n.id, []))
        if follow is not None:
            slot, follow_order = follow
            shape = tuple(n.shape[k] for k in follow_order)
            attrs = dict(n.attrs)
            if "axes" in attrs:
                attrs["axes"] = tuple(sorted(follow_order.index(k) for k in attrs["axes"]))
            made = Node(n.op, tuple((x, v.permute(follow_order)) for x, v in srcs), shape, n.dtype, attrs,
                        origin=n.origin)
            new[n.id], stored[n.id], root[n.id] = made, _stored(made, follow_order), root[n.srcs[slot][0].id]
            continue
        same = all(x is s and v is w for (x, v), (s, w) in zip(srcs, n.srcs))
        new[n.id] = n if same else Node(n.op, srcs, n.shape, n.dtype, dict(n.attrs), origin=n.origin)
    outputs = [read(o, View.contiguous(o.shape)) for o in graph.outputs]
    outs = [x if v.is_contiguous and x.shape == o.shape else Node(Op.Contiguous, ((x, v),), o.shape, o.dtype, {})
            for (x, v), o in zip(outputs, graph.outputs)]
    out = Graph(graph.inputs, outs, graph.output_names, graph.bindings, graph.declared)
    alive = {n.id for n in out.toposort()}
    copied = {root[i] for i in copies} | {root[o.id] for o in graph.outputs if o.id in stored}
    return out, {k: v for k, v in new.items() if v.id in alive}, copied


def _narrow(n: Node, readers: list[Node], chosen: set[int], plan: Callable[[Node], tuple[int, ...] | None]) -> bool:
    """Whether ``n`` is the product of convolutions over windows (summing more dims than the channels) that stay in
    the logical order with fewer than MIN_CHANNELS outputs per input group (a detection or segmentation head's
    16 -> 1): over a channels-last value their windows are packed by gathers along the pixels at the channels'
    stride, a cache line an element, where a copy of the value in the logical order, made once, is read along its
    rows (3x3 16 -> 1 at 320x320, 2 threads: 3.7 ms over the channels-last value, 0.39 over a logical-order one)."""
    if n.op is not Op.Mul:
        return False
    sums = [u for u in readers if u.op is Op.SumReduce and weighted_sum(u) is not None]
    return bool(sums) and all(
        u.id not in chosen and _order(u) is None and plan(u) is None
        and _summed(u) > 1 for u in sums)


def _full_size(v: View) -> bool:
    return not v.mask and not any(st == 0 and size > 1 for st, size in zip(v.strides, v.shape))


def _follows(n: Node, srcs: tuple[Src, ...], moved: list[bool], near: list[int]) -> tuple[int, tuple[int, ...]] | None:
    """The slot of an elementwise node's full-size operand stored in another order than the logical one that it
    follows, and the order it is then computed in (None: its logical order, reading stored operands through
    their views). Of the operands computed from a contraction (``near``: their place in the toposort, -1 for
    others) it follows the latest, the one whose kernel it may fuse into (a residual add into the convolution
    before it, not into the one its other operand skipped from), where that one is stored; without any, it
    follows where every full-size operand is stored. A Contiguous node is a copy into the logical order, which
    the rewrite keeps."""
    if n.op not in ELEMENTWISE or n.op is Op.Contiguous:
        return None
    full = [slot for slot, (_, v) in enumerate(srcs) if _full_size(v)]
    if not full:
        # a concatenation's sum of zero-padded parts, a max pool's input padded by a Where, an upsample's taps:
        # where every operand but constants is stored, all in one order, that order
        if not any(moved) or not all(m or x.op in (Op.Constant, Op.Iota) for (x, _), m in zip(srcs, moved)):
            return None
        orders = {_by_stride(v) for (_, v), m in zip(srcs, moved) if m}
        order = orders.pop() if len(orders) == 1 else None
        return None if order is None else (moved.index(True), order)
    latest = max(full, key=lambda slot: near[slot])
    slot = latest if near[latest] >= 0 else full[0]
    if not moved[slot] or (near[latest] < 0 and not all(moved[k] for k in full)):
        return None
    _, v = srcs[slot]
    found = _by_stride(v)
    return (slot, found) if found is not None and v.permute(found).is_contiguous else None


def _copy_follows(n: Node, v: View, readers: list[Node]) -> tuple[int, tuple[int, ...]] | None:
    """A copy of a stored value (an upsample's repeats made contiguous) computed in the order it reads that value
    in (``_by_stride``), where every reader then reads it in place: the larger map a reshape of it. A copy
    some reader needs in its logical order (a channel shuffle's, which merges what the storage keeps apart) stays
    the one conversion into that order."""
    order = _by_stride(v)
    if order is None:
        return None
    onto = View.contiguous(tuple(n.shape[k] for k in order)).permute(_inverse(order))
    reads = [w for u in readers for s, w in u.srcs if s is n]
    return (0, order) if all(rebase(w, n.shape, onto) is not None for w in reads) else None


def _channelwise(red: Node, stored: dict[int, Src]) -> tuple[int, ...] | None:
    """The order of a weighted sum over an activation stored in another order than its logical one whose kept
    dims include the one that activation is stored with innermost (its channels) and whose weight reads that dim
    as the activation does or not at all: that dim innermost, so that it reads and writes vectors of channels
    (``stencil.py``), where in its logical order it walked the pixels at the channels' stride. A depthwise
    convolution (no multiplier: a multiplier's outputs, innermost, would be what the vectors run along) and a
    Winograd transform (its constant matrix shared by every channel) over a channels-last value; a depthwise
    convolution too over a value of the graph's own that it reads transposed with the channels innermost (an
    NHWC value behind an exporter's Transpose: a tf2onnx MobileNetV3's, 64 channels 3x3 at stride 2 from 112x112
    0.55 -> 0.08 ms with its batch norm and ReLU)."""
    found = weighted_sum(red)
    if found is None:
        return None
    mul, (x, vx), (_, vw) = found
    axes = set(red.attrs["axes"])
    kept = _kept(red)
    # where the input is stored (or, a value of the graph's own, as it is read), the kept dim it walks at the
    # smallest stride
    moved = rebase(vx, x.shape, stored[x.id][1]) if x.id in stored else vx
    walked = [] if moved is None else [k for k in kept if reads_dim(moved, k)]
    if moved is None or not walked:
        return None
    inner = min(walked, key=lambda k: abs(moved.strides[k]))
    if not reads_dim(vw, inner):
        if x.id not in stored:  # the pixels innermost: the logical order
            return None
        shared = (*[k for k in range(len(mul.shape)) if k not in axes and k != inner], inner, *sorted(axes))
        return shared if _moves(shared, mul.shape) else None
    return _per_channel(red)


def _per_channel(red: Node) -> tuple[int, ...] | None:
    """The order of a contraction whose weight reads no kept dim its activation does not (a depthwise
    convolution without a multiplier: a multiplier's outputs, innermost, would be what the vectors run along)
    with the dims the weight reads innermost; None for any other."""
    found = weighted_sum(red)
    if found is None:
        return None
    _, (_, vx), (_, vw) = found
    if any(reads_dim(vw, k) and not reads_dim(vx, k) for k in _kept(red)):
        return None
    return _order(red, 1)


def _kept(red: Node) -> list[int]:
    """The kept dims of more than one element of the product the SumReduce ``red`` sums."""
    mul = red.srcs[0][0]
    return [k for k in range(len(mul.shape)) if k not in red.attrs["axes"] and mul.shape[k] > 1]


def _rows(red: Node) -> int:
    """A contraction's rows: the product of the kept dims its weight does not read (a convolution's pixels)."""
    found = weighted_sum(red)
    assert found is not None
    mul, _, (_, vw) = found
    return math.prod(mul.shape[k] for k in _kept(red) if not reads_dim(vw, k))


def _pool_follows(n: Node, srcs: tuple[Src, ...]) -> tuple[int, tuple[int, ...]] | None:
    """A pool (a reduction over windows of a stored value, no contraction) computed with its kept dims in the
    order they are stored in, innermost the one its input walks at the smallest stride, its reduced ones after
    them: a max pool over a channels-last value then runs along the channels, read and written contiguously, where
    in its logical order it walked the pixels at the channels' stride. (A contraction's product is never stored:
    ``_rewrite`` keeps a Mul a SumReduce reads in its order.)"""
    order = _by_stride(srcs[0][1], tuple(n.attrs["axes"]))
    return None if order is None else (0, order)


# which contractions an untuned compile stores channels-last: 1x1 convolutions on short pixel rows whose readers
# are all 1x1 convolutions (a sum over channels alone, which then reads the channels contiguously: the GEMM's K
# innermost) or global pools. The conv kernel alone, 2 threads, AMD Zen 5, its input and output in the logical
# order / both channels-last / input channels-last only, in ms: 1x1 2048 -> 512 at 7x7 0.42 / 0.31 / 0.32,
# 1024 -> 256 at 14x14 0.37 / 0.25 / 0.26, 512 -> 2048 at 7x7 0.29 / 0.26 / 0.28, 512 -> 128 at 28x28
# 0.25 / 0.23 / 0.38, 256 -> 64 at 56x56 0.25 / 0.24 / 0.36; a 3x3 reading a channels-last input is as fast
# computed directly (0.61 / 0.71 / 0.63 at 14x14, 256 channels) and 1.5-2x slower by Winograd (whose input
# transforms then walk the pixels at the channels' stride). The input channels-last only, as the next 1x1 reads
# it, ran slower there by gathering it against its grain; read in place (``contraction._gathered``), maps up to
# 28x28 gain in the model (2 threads, one process, interleaved, default at 14x14 / 28x28 rows: MobileNetV3 9.43 /
# 8.88 ms on two dies, 6.26 / 6.24 on one; SqueezeNet 7.93 / 7.54 and 5.78 / 5.84; Inception-v1 21.67 / 20.94,
# Inception-v2 27.10 / 26.67, ResNet-50 64.1 / 63.4, its light graph 63.9 / 63.0; DenseNet, YOLO-style, DeepLab
# at par)
SHORT_ROWS = 28 * 28  # the contraction's rows: the product of the kept axes the weight does not read


def _read_transposed(red: Node, users: dict[int, list[Node]], outputs: set[int]) -> bool:
    """Whether every reader of the convolution ``red``'s value reads it transposed with its channels innermost (an
    exporter's Transpose to NHWC before the bias, activation or batch norm that follows each convolution in
    tf2onnx's graphs of Keras models), so that stored channels-last it reads it in order: those then fuse into
    the convolution, where they ran as passes of their own over its value read across the channels' stride.
    Elementwise nodes that take its value along (``_follower``: a bias or an activation before the Transpose, as
    ONNX's Conv bias and a ReLU) follow the stored order (``_follows``), so their readers count in their place.
    Not a stem over an image's few channels (3 -> 16 at 112x112: its windows gathered three floats at a time,
    0.14 -> 0.28 ms)."""
    order = _order(red)
    if order is None or _channels_in(red) < MIN_CHANNELS:
        return False
    # the value's nodes: the conv, and the elementwise nodes that take it along (``_follower``), each with the view
    # its value would be stored as
    stored = {red.id: View.contiguous(tuple(red.shape[k] for k in order)).permute(_inverse(order))}
    nodes = {red.id: red}
    grown = True
    while grown:
        grown = False
        for f in list(nodes.values()):
            for u in users.get(f.id, []):
                if u.id not in nodes and _follower(u, red, nodes) \
                        and (view := stored[f.id].reshape(u.shape)) is not None:
                    stored[u.id], nodes[u.id] = view, u
                    grown = True
    reads = [(v, f) for f in nodes.values() for u in users.get(f.id, []) if u.id not in nodes
             for s, v in u.srcs if s is f]
    return bool(reads) and not any(f in outputs for f in nodes) \
        and all(not v.is_contiguous and (m := rebase(v, f.shape, stored[f.id])) is not None and m.is_contiguous
                for v, f in reads)


def _follower(u: Node, red: Node, nodes: dict[int, Node]) -> bool:
    """Whether the elementwise node ``u`` takes the value of ``nodes`` along: whole, each of its operands that is one
    of them read in its order, the others smaller (a bias, a scale, an activation's constants, a ReLU's test)."""
    return u.op in ELEMENTWISE and u.op is not Op.Contiguous and u.numel == red.numel and all(
        v.is_contiguous and v.numel == s.numel if s.id in nodes else s.numel < u.numel for s, v in u.srcs)


def _channel_axis(red: Node) -> int | None:
    """The dim of a convolution's product that walks the input channels: of the dims it sums, the one its weight
    walks at the largest stride (None: it sums none)."""
    found = weighted_sum(red)
    assert found is not None
    mul, _, (_, vw) = found
    summed = [k for k in red.attrs["axes"] if mul.shape[k] > 1]
    return max(summed, key=lambda k: abs(vw.strides[k])) if summed else None


def _channels_in(red: Node) -> int:
    """The input channels a convolution's window sums (per group)."""
    k = _channel_axis(red)
    return 1 if k is None else red.srcs[0][0].shape[k]


def _reads_channels_last(red: Node) -> bool:
    """Whether the convolution ``red`` reads its input with the channels innermost (a channels-last value)."""
    found = weighted_sum(red)
    assert found is not None
    k = _channel_axis(red)
    return k is not None and abs(found[1][1].strides[k]) == 1


def _one_by_one(red: Node) -> bool:
    """A contraction summing one axis (a 1x1 convolution's channels) that ``_order`` moves."""
    return _order(red) is not None and _summed(red) == 1


def _summed(red: Node) -> int:
    """How many dims of more than one element the SumReduce ``red`` sums (a 1x1 convolution's one, its channels)."""
    return sum(red.srcs[0][0].shape[k] > 1 for k in red.attrs["axes"])


def _depthwise(red: Node) -> int:
    """The output pixels of a depthwise convolution without a multiplier (``_per_channel``, too few outputs per
    group for ``_order``), which computes its channels innermost over a channels-last input (``_channelwise``);
    0 for any other node."""
    return _rows(red) if _order(red) is None and _per_channel(red) is not None else 0


def defaults(graph: Graph, order: list[Node]) -> list[Node]:
    """The SumReduce nodes an untuned compile stores channels-last, in topological order: 1x1 convolutions
    without groups (ShuffleNet's grouped ones ran 1-4% slower so) of at most SHORT_ROWS rows whose value
    (through elementwise nodes of its size) some 1x1 convolution reads and nothing else but 1x1 convolutions,
    global pools and depthwise convolutions whose own values are read so in turn, each in place (not through a
    channel shuffle, which reads a copy), and is not a graph output; and every convolution over more than a few
    input channels that its readers all read transposed with its channels innermost (``_read_transposed``: an
    exporter's NHWC values). ``order``: the graph's toposort.

    A depthwise convolution follows a channels-last input (``_channelwise``), its vectors along the channels: a
    MobileNetV3-style net's expansions at 28x28 and below, read by their depthwise convolutions, stored so
    with them (23 convolutions channels-last against 12), 2 threads, one process, interleaved: 5.03-5.33 ->
    4.44-4.79 ms; the DB and DeepLab-style nets (two more each) at par. Rows up to 56x56 as well gained that net
    as much more and cost ResNet-50 1-2%."""
    users = graph.consumers(order)
    outputs = {o.id for o in graph.outputs}
    known: dict[tuple[int, int], tuple[bool, bool]] = {}

    def readers(n: Node, numel: int, rows: int) -> tuple[bool, bool]:
        """Whether every reader of ``n`` gains from or is indifferent to its channels innermost, and whether
        some 1x1 convolution reads it."""
        if (n.id, rows) not in known:
            found = [read_by(u, numel, rows) for u in users.get(n.id, [])]
            known[(n.id, rows)] = (n.id not in outputs and all(ok for ok, _ in found), any(g for _, g in found))
        return known[(n.id, rows)]

    def read_by(u: Node, numel: int, rows: int) -> tuple[bool, bool]:
        sums = [r for r in users.get(u.id, []) if r.op is Op.SumReduce and r.srcs[0][0] is u]
        if u.op is Op.Mul and sums and all(_one_by_one(r) for r in sums):
            return True, True
        if u.op is Op.Mul and len(sums) == 1 and (pixels := _depthwise(sums[0])):
            return readers(sums[0], sums[0].numel, pixels)
        if u.op in (Op.SumReduce, Op.MaxReduce):  # a global pool: each value read once, all the rows summed
            return all(not v.mask and v.numel == numel for _, v in u.srcs) and u.numel * rows <= numel, False
        if u.op in ELEMENTWISE and u.op is not Op.Contiguous and u.numel == numel:
            return readers(u, numel, rows)
        return False, False

    chosen = []
    transposed: set[int] = set()
    for n in order:
        found = weighted_sum(n)
        if found is None:
            continue
        if _read_transposed(n, users, outputs):
            chosen.append(n)
            transposed.add(n.id)
            continue
        if not _one_by_one(n):
            continue
        _, (_, vx), (_, vw) = found
        rows = _rows(n)
        grouped = any(reads_dim(vw, k) and reads_dim(vx, k) for k in _kept(n))
        if rows <= SHORT_ROWS and not grouped and readers(n, n.numel, rows) == (True, True):
            chosen.append(n)
    if not chosen:  # most graphs: no rewrite to try
        return []
    return _kept_stored(graph, order, chosen, transposed)


def _kept_stored(graph: Graph, order: list[Node], chosen: list[Node], transposed: set[int]) -> list[Node]:
    """Of the ``chosen`` convolutions, those stored channels-last with the others (``_rewrite``): not one whose
    value some reader reads from a copy, nor one of the ``transposed`` (``_read_transposed``) whose input is not
    stored channels-last as well (an NHWC input, or a convolution stored so, through depthwise convolutions and
    elementwise nodes): over an NCHW input a 1x1 144 -> 24 at 56x56 packed its rows across the channels' stride,
    101 -> 171 us. Dropping one may change another's input, so until none is dropped."""
    ids = {n.id for n in chosen}
    while True:
        _, moved, copied = _rewrite(graph, order, ids)
        dropped = {i for i in transposed & ids if not _reads_channels_last(moved[i])}
        if not dropped:
            return [n for n in chosen if n.id in ids and n.id not in copied]
        ids -= dropped
