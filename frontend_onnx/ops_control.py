"""Control flow and sequences, resolved while importing.

If with a condition known at import time is inlined, otherwise both branches run under
Where; Loop is unrolled when its trip count and condition are known (else it runs on the
host), Scan over its scan axis; sequences are lists of tensors that exist only during the
import.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import LuminalError
from ..ir import DType, Tensor
from .ops_shape import concat, norm_axis, split_sizes, stack
from .registry import DataDependent, OpContext, fail, need, need_const, need_ints, op


def _branch(ctx: OpContext, name: str) -> list[Tensor | None]:
    g = ctx.attr(name)
    if g is None:
        raise ValueError(f"If without {name}")
    outs = ctx.run_subgraph(g)
    if len(outs) != len(ctx.node.output):
        raise ValueError(f"{name} has {len(outs)} outputs, the node {len(ctx.node.output)}")
    return outs


@op("If")
def if_op(ctx: OpContext) -> list[Tensor | None]:
    cond = need(ctx, 0)
    if cond.numel != 1:
        raise ValueError(f"If condition has {cond.numel} elements")
    if cond.is_const:
        taken = bool(cond.numpy().reshape(-1)[0])
        return _branch(ctx, "then_branch" if taken else "else_branch")
    then, other = _branch(ctx, "then_branch"), _branch(ctx, "else_branch")
    c = cond.reshape(())
    outs: list[Tensor | None] = []
    for a, b in zip(then, other):
        if a is None or b is None:
            outs.append(None)
            continue
        if not isinstance(a, Tensor) or not isinstance(b, Tensor):
            raise LuminalError(f"node {ctx.node.name!r} (If): sequence outputs need a condition known at import time")
        if a.shape != b.shape:
            raise DataDependent(f"node {ctx.node.name!r} (If): the condition is only known at run time and the "
                                f"branches give different shapes {list(a.shape)} and {list(b.shape)}", ctx.node)
        outs.append(c.where(a, b))
    return outs


# -- Loop: unrolled when its trip count and condition are known at import time ------------

MAX_UNROLL = 1024


def _known_bool(ctx: OpContext, t: Tensor) -> bool:
    """The condition a Loop's body computes, where the import knows it; else the whole Loop runs on the host."""
    if t.numel != 1:
        raise fail(ctx, f"the body's condition has {t.numel} elements")
    if not t.is_const:
        raise DataDependent(f"node {ctx.node.name or 'Loop'!r} (Loop): the condition its body computes is only known "
                            "at run time", ctx.node)
    return bool(t.numpy().reshape(-1)[0])


def _run_body(ctx: OpContext, body: onnx.GraphProto, inputs: list, what: str) -> list[Tensor]:
    """One iteration of a Loop or Scan body: its outputs, every one of which must be produced."""
    outs = ctx.run_subgraph(body, inputs)
    produced = [o for o in outs if o is not None]
    if len(produced) != len(outs):
        raise ValueError(f"{what} body output is never produced")
    return produced


@op("Loop")
def loop_op(ctx: OpContext) -> list[Tensor | None]:
    trip_t, cond_t = ctx.input(0), ctx.input(1)
    carried: list[Tensor | None] = list(ctx.inputs[2:])
    body = ctx.attr("body")
    trip = None if trip_t is None else need_ints(ctx, 0)[0]
    go = True if cond_t is None else bool(need_const(ctx, 1).reshape(-1)[0])
    if trip is None and cond_t is None:
        raise LuminalError(f"node {ctx.node.name!r} (Loop): runs forever (no trip count, no condition)")
    n_scan = len(body.output) - 1 - len(carried)
    scans: list[list[Tensor]] = [[] for _ in range(n_scan)]
    i = 0
    while go and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise LuminalError(f"node {ctx.node.name!r} (Loop): more than {MAX_UNROLL} iterations to unroll")
        it = Tensor.const(np.array([i], np.int64)).reshape(())
        cond_in = Tensor.full((), True, DType.bool)
        outs = _run_body(ctx, body, [it, cond_in, *carried], "Loop")
        go = _known_bool(ctx, outs[0])
        carried = list(outs[1:1 + len(carried)])
        for k in range(n_scan):
            scans[k].append(outs[1 + len(carried) + k])
        i += 1
    if i == 0 and n_scan:  # no iteration: each scan output is empty, of the shape one iteration would give it
        it = Tensor.const(np.array(0, np.int64))
        once = _run_body(ctx, body, [it, Tensor.full((), True, DType.bool), *carried], "Loop")[1 + len(carried):]
        return [*carried, *(Tensor.const(np.zeros((0, *t.shape), t.dtype.np)) for t in once)]
    return [*carried, *(stack(parts, 0) for parts in scans)]


def _scan(ctx: OpContext, states: list[Tensor], scans: list[Tensor], in_axes: list[int], in_dirs: list[int],
          out_axes: list[int], out_dirs: list[int]) -> list[Tensor]:
    body = ctx.attr("body")
    n_out = len(body.output) - len(states)
    in_axes = [a % t.ndim for a, t in zip(in_axes, scans)]
    lengths = {t.shape[a] for t, a in zip(scans, in_axes)}
    if len(lengths) != 1:
        raise ValueError(f"scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps > MAX_UNROLL:
        raise LuminalError(f"node {ctx.node.name!r} (Scan): more than {MAX_UNROLL} iterations to unroll")
    if steps == 0 and n_out:
        raise LuminalError(f"node {ctx.node.name!r} (Scan): scan outputs of an empty scan")
    collected: list[list[Tensor]] = [[] for _ in range(n_out)]
    for i in range(steps):
        slices = []
        for t, a, d in zip(scans, in_axes, in_dirs):
            k = steps - 1 - i if d else i
            ranges = [(0, e) for e in t.shape]
            ranges[a] = (k, k + 1)
            slices.append(t.shrink(ranges).squeeze([a]))
        outs = _run_body(ctx, body, [*states, *slices], "Scan")
        states = outs[:len(states)]
        for k in range(n_out):
            collected[k].append(outs[len(states) + k])
    stacked = []
    for parts, axis, d in zip(collected, out_axes, out_dirs):
        parts = parts[::-1] if d else parts
        axis = axis % (parts[0].ndim + 1)
        stacked.append(stack(parts, axis))
    return [*states, *stacked]


@op("Scan")
def scan_op(ctx: OpContext) -> list[Tensor]:
    """Scan, unrolled over the scan axis; opset 8's form has a leading batch axis and sequence_lens."""
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:
        if ctx.input(0) is not None:
            lens = need_const(ctx, 0)
            if not (lens == need(ctx, len(ctx.inputs) - 1).shape[1]).all():
                raise NotImplementedError("Scan with sequence_lens shorter than the sequence")
        xs = [t for t in ctx.inputs[1:] if t is not None]
        states, scans = xs[:len(xs) - m], xs[len(xs) - m:]
        dirs = [int(d) for d in ctx.attr("directions", [0] * m)]
        n_out = len(body.output) - len(states)
        per_batch = []
        for b in range(xs[0].shape[0]):
            pick = [t.shrink([(b, b + 1)] + [(0, e) for e in t.shape[1:]]).squeeze([0]) for t in xs]
            per_batch.append(_scan(ctx, pick[:len(states)], pick[len(states):], [0] * m, dirs, [0] * n_out,
                                   [0] * n_out))
        return [stack([outs[k] for outs in per_batch], 0) for k in range(len(per_batch[0]))]
    xs = [t for t in ctx.inputs if t is not None]
    states, scans = xs[:len(xs) - m], xs[len(xs) - m:]
    n_out = len(body.output) - len(states)
    return _scan(ctx, states, scans, [int(a) for a in ctx.attr("scan_input_axes", [0] * m)],
                 [int(d) for d in ctx.attr("scan_input_directions", [0] * m)],
                 [int(a) for a in ctx.attr("scan_output_axes", [0] * n_out)],
                 [int(d) for d in ctx.attr("scan_output_directions", [0] * n_out)])


# -- sequences: a Python list of tensors while importing; never a graph output ---------------

class Sequence(list):
    """An ONNX sequence value: the tensors it holds, known at import time."""


def _seq(ctx: OpContext, i: int = 0) -> Sequence:
    s = ctx.input(i)
    if not isinstance(s, Sequence):
        raise ValueError(f"input {i} is not a sequence")
    return s


def _position(ctx: OpContext, i: int, n: int, default: int, insert: bool = False) -> int:
    p = ctx.input(i)
    pos = default if p is None else need_ints(ctx, i)[0]
    hi = n + 1 if insert else n
    if not -hi <= pos < hi:
        raise ValueError(f"sequence position {pos} out of range for length {n}")
    return pos % hi if hi else 0


@op("SequenceConstruct")
def sequence_construct(ctx: OpContext) -> list:
    return [Sequence(t for t in ctx.inputs)]


@op("SequenceEmpty")
def sequence_empty(ctx: OpContext) -> list:
    return [Sequence()]


@op("SequenceLength")
def sequence_length(ctx: OpContext) -> Tensor:
    return Tensor.const(np.array([len(_seq(ctx))], np.int64)).reshape(())


@op("SequenceAt")
def sequence_at(ctx: OpContext) -> Tensor:
    s = _seq(ctx)
    return s[_position(ctx, 1, len(s), 0)]


@op("SequenceInsert")
def sequence_insert(ctx: OpContext) -> list:
    s = Sequence(_seq(ctx))
    s.insert(_position(ctx, 2, len(s), len(s), insert=True), need(ctx, 1))
    return [s]


@op("SequenceErase")
def sequence_erase(ctx: OpContext) -> list:
    s = Sequence(_seq(ctx))
    del s[_position(ctx, 1, len(s), -1)]
    return [s]


@op("SplitToSequence")
def split_to_sequence(ctx: OpContext) -> list:
    x = need(ctx, 0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.ndim)
    d = x.shape[axis]
    split = ctx.const(1)
    if split is None:
        sizes, squeeze = [1] * d, not ctx.attr("keepdims", 1)
    elif np.ndim(split) == 0:
        n = int(split)
        sizes, squeeze = [n] * (d // n) + ([d % n] if d % n else []), False
    else:
        sizes, squeeze = [int(v) for v in split], False
    parts = split_sizes(x, axis, sizes)
    return [Sequence(p.squeeze([axis]) for p in parts) if squeeze else Sequence(parts)]


@op("ConcatFromSequence")
def concat_from_sequence(ctx: OpContext) -> Tensor:
    s = _seq(ctx)
    if not s:
        raise ValueError("ConcatFromSequence of an empty sequence")
    axis = int(ctx.attr("axis"))
    if ctx.attr("new_axis", 0):
        axis = axis % (s[0].ndim + 1)
        return stack(s, axis)
    return concat(list(s), axis)
