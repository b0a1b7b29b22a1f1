"""Indexing and rearranging ops: gathers, one-hot, tile, trilu, pad, depth/space, cumsum."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ..ir import DType, Tensor
from .ops_elementwise import remainder
from .ops_nn_util import take
from .ops_shape import norm_axis
from .registry import DataDependent, OpContext, fail, need, need_const, op

# Pad's modes that numpy's pad names alike
_NP_PAD: dict[str, Literal["reflect", "edge", "wrap"]] = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _index(t: Tensor) -> Tensor:
    return t if t.dtype in (DType.int64, DType.int32) else t.cast(DType.int64)


def gather_axis(data: Tensor, indices: Tensor, axis: int) -> Tensor:
    """ONNX Gather: out shape data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
    axis %= data.ndim
    pre, post = data.shape[:axis], data.shape[axis + 1:]
    k = indices.numel
    flat = indices.reshape((1,) * axis + (k,) + (1,) * len(post))
    out = data.gather(flat.expand((*pre, k, *post)), axis)
    return out.reshape(pre + indices.shape + post)


@op("Gather")
def gather_op(ctx: OpContext) -> Tensor:
    data, idx = need(ctx, 0), need(ctx, 1)
    axis = int(ctx.attr("axis", 0))
    if not -data.ndim <= axis < data.ndim:
        raise fail(ctx, f"axis {axis} out of range for rank {data.ndim}")
    return gather_axis(data, idx, axis)


@op("Compress")
def compress_op(ctx: OpContext) -> Tensor:
    """The slices where a constant condition holds: a gather at its true positions (a condition computed
    from the inputs would give the output a shape the data decides)."""
    data = need(ctx, 0)
    if not need(ctx, 1).is_const:
        raise DataDependent(f"node {ctx.node.name or 'Compress'!r} (Compress): its output's size depends on the "
                            "data of its condition", ctx.node)
    cond = np.asarray(ctx.const(1)).reshape(-1).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        data, axis = data.reshape((data.numel,)), 0
    elif not -data.ndim <= int(axis) < data.ndim:
        raise fail(ctx, f"axis {axis} out of range for rank {data.ndim}")
    axis = int(axis) % data.ndim
    keep = np.flatnonzero(cond)
    if keep.size and keep[-1] >= data.shape[axis]:
        raise fail(ctx, f"condition of {cond.size} is true past the {data.shape[axis]} slices of axis {axis}")
    return gather_axis(data, Tensor.const(keep.astype(np.int64), DType.int64), axis)


@op("GatherElements")
def gather_elements_op(ctx: OpContext) -> Tensor:
    data, idx = need(ctx, 0), need(ctx, 1)
    axis = norm_axis(int(ctx.attr("axis", 0)), data.ndim)
    if idx.ndim != data.ndim:
        raise fail(ctx, "indices must have the rank of data")
    ranges = [(0, s) if k == axis else (0, idx.shape[k]) for k, s in enumerate(data.shape)]
    return data.shrink(ranges).gather(idx, axis)


def _flat_index(idx: Tensor, dims: tuple[int, ...]) -> Tensor:
    """The row-major position in ``dims`` of each index tuple along idx's last axis (negative
    indices wrap), shaped ``idx.shape[:-1] + (1,)``."""
    lin = None
    for j, n in enumerate(dims):
        part = idx.shrink([(0, s) for s in idx.shape[:-1]] + [(j, j + 1)])
        part = part.lt(0).where(part.add(n), part).mul(int(math.prod(dims[j + 1:])))
        lin = part if lin is None else lin.add(part)
    return Tensor.full((*idx.shape[:-1], 1), 0, idx.dtype) if lin is None else lin


@op("GatherND")
def gather_nd_op(ctx: OpContext) -> Tensor:
    data, idx = need(ctx, 0), _index(need(ctx, 1))
    b = int(ctx.attr("batch_dims", 0))
    m = idx.shape[-1]
    if b + m > data.ndim or idx.shape[:b] != data.shape[:b]:
        raise fail(ctx, "indices do not fit data")
    dims = data.shape[b:b + m]
    lin = _flat_index(idx, dims)
    batch, post = data.shape[:b], data.shape[b + m:]
    p = int(math.prod(dims))
    flat = data.reshape((*batch, p, *post))
    ib = idx.shape[b:-1]
    kb = int(math.prod(ib))
    lin = lin.reshape(batch + (kb,) + (1,) * len(post)).expand((*batch, kb, *post))
    out = flat.gather(lin, b)
    return out.reshape(idx.shape[:-1] + post)


@op("OneHot")
def one_hot_op(ctx: OpContext) -> Tensor:
    idx, values = need(ctx, 0), need(ctx, 2)
    depth = int(need_const(ctx, 1).reshape(-1)[0])
    axis = int(ctx.attr("axis", -1))
    axis = axis % (idx.ndim + 1)
    shape = (*idx.shape[:axis], depth, *idx.shape[axis:])
    i = idx.cast(DType.int64) if idx.dtype.is_float else _index(idx)
    i = i.lt(0).where(i.add(depth), i)
    i = i.unsqueeze([axis]).expand(shape)
    hit = Tensor.iota(shape, axis, i.dtype).eq(i)
    off = values.reshape((2,)).shrink([(0, 1)]).reshape((1,) * len(shape)).expand(shape)
    on = values.reshape((2,)).shrink([(1, 2)]).reshape((1,) * len(shape)).expand(shape)
    return hit.where(on, off)


@op("Tile")
def tile_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    reps = ctx.ints(1) or []
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise fail(ctx, "repeats must have one non-negative value per dim")
    t = x.reshape(tuple(v for s in x.shape for v in (1, s)))
    t = t.expand(tuple(v for r, s in zip(reps, x.shape) for v in (r, s)))
    return t.reshape(tuple(r * s for r, s in zip(reps, x.shape)))


@op("Trilu")
def trilu_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    given = ctx.ints(1)
    k = given[0] if given else 0
    upper = bool(ctx.attr("upper", 1))
    if x.ndim < 2:
        raise fail(ctx, "input must be at least 2-D")
    n, m = x.shape[-2:]
    rows = np.arange(n)[:, None]
    cols = np.arange(m)[None, :]
    keep = (cols - rows >= k) if upper else (cols - rows <= k)
    mask = Tensor.const(keep, DType.bool).expand(x.shape)
    return mask.where(x, Tensor.full(x.shape, 0, x.dtype))


@op("Pad")
def pad_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    r = x.ndim
    if ctx.opset < 11:
        pads = list(ctx.attr("pads") or ctx.attr("paddings") or [])
        value = float(ctx.attr("value", 0.0))
        axes = list(range(r))
    else:
        pads = ctx.ints(1) or []
        cv = ctx.input(2)
        value = 0
        if cv is not None and cv.numel:
            value = np.asarray(ctx.const(2)).reshape(-1)[0].item()
        ax = ctx.ints(3)
        axes = [norm_axis(a, r) for a in ax] if ax else list(range(r))
    if len(pads) != 2 * len(axes):
        raise fail(ctx, f"pads has {len(pads)} values for {len(axes)} axes")
    per = [(0, 0)] * r
    for j, a in enumerate(axes):
        per[a] = (pads[j], pads[j + len(axes)])
    mode = ctx.attr("mode", "constant")
    if mode == "constant":
        if not x.dtype.is_float:
            value = int(value)
        return x.pad(per, value=value)
    if mode not in ("reflect", "edge", "wrap"):
        raise fail(ctx, f"unknown mode {mode!r}")
    # negative pads crop first; the positive part indexes the cropped input
    x = x.pad([(min(0, a), min(0, b)) for a, b in per])
    for a, (pb, pe) in enumerate(per):
        pb, pe = max(0, pb), max(0, pe)
        if not pb and not pe:
            continue
        n = x.shape[a]
        if n == 0 or (mode == "reflect" and n == 1 and (pb or pe)):
            if mode == "reflect" and n == 1:
                idx = np.zeros(n + pb + pe, dtype=np.int64)
            else:
                raise fail(ctx, f"cannot {mode}-pad an empty axis")
        else:
            idx = np.pad(np.arange(n), (pb, pe), mode=_NP_PAD[mode])
        x = take(x, idx, a)
    return x


@op("DepthToSpace")
def depth_to_space_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if c % (b * b):
        raise fail(ctx, f"channels {c} not divisible by blocksize^2")
    mode = ctx.attr("mode", "DCR")
    if mode == "DCR":
        t = x.reshape((n, b, b, c // (b * b), h, w)).permute([0, 3, 4, 1, 5, 2])
    else:
        t = x.reshape((n, c // (b * b), b, b, h, w)).permute([0, 1, 4, 2, 5, 3])
    return t.reshape((n, c // (b * b), h * b, w * b))


@op("SpaceToDepth")
def space_to_depth_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if h % b or w % b:
        raise fail(ctx, "spatial dims not divisible by blocksize")
    mode = ctx.attr("mode", "DCR")
    order = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    t = x.reshape((n, c, h // b, b, w // b, b)).permute(order)
    return t.reshape((n, c * b * b, h // b, w // b))


def _scan_axis(ctx: OpContext, x: Tensor) -> int:
    ax = ctx.ints(1)
    if not ax:
        raise fail(ctx, "axis is required")
    return norm_axis(ax[0], x.ndim)


@op("CumSum")
def cumsum_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    return cumsum(x, _scan_axis(ctx, x), bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)))


@op("CumProd")
def cumprod_op(ctx: OpContext) -> Tensor:
    """A running product as running sums in the log domain: of log|x|, of negatives (sign), of zeros."""
    x = need(ctx, 0)
    axis = _scan_axis(ctx, x)
    exclusive, reverse = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))
    f = x if x.dtype.is_float else x.cast(DType.float32)
    zeros = cumsum(f.eq(0).cast(DType.float32), axis, exclusive, reverse).gt(0.5)
    odd = cumsum(f.lt(0).cast(DType.float32), axis, exclusive, reverse).mod(2.0).gt(0.5)
    safe = f.eq(0).where(Tensor.full(f.shape, 1.0, f.dtype), f.abs())
    mag = cumsum(safe.log(), axis, exclusive, reverse).exp()
    out = zeros.where(Tensor.full(f.shape, 0.0, f.dtype), odd.where(mag.neg(), mag))
    return out if x.dtype.is_float else out.round().cast(x.dtype)


def cumsum(x: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    n = x.shape[axis]
    # out[i] = sum_j x[j] * M[i, j], with M the (strict) lower or upper triangle
    i = Tensor.iota((n, n), 0)
    j = Tensor.iota((n, n), 1)
    a, b = (i, j) if reverse else (j, i)
    keep = a.lt(b) if exclusive else a.le(b)
    mask = keep.cast(x.dtype)
    order = [k for k in range(x.ndim) if k != axis] + [axis]
    xt = x.permute(order)
    full = (*xt.shape[:-1], n, n)
    prodt = xt.unsqueeze([-2]).expand(full).mul(mask.reshape((1,) * (len(full) - 2) + (n, n)).expand(full))
    return prodt.sum((-1,)).permute([int(k) for k in np.argsort(order)])


def _scatter(ctx: OpContext, data: Tensor, onehot: Tensor, upd: Tensor, hit_axes: tuple[int, ...]) -> Tensor:
    """Combine ``data`` with updates routed by ``onehot`` (bool, broadcast against ``upd``), summed over
    ``hit_axes``; the result has ``data``'s shape."""
    reduction = ctx.attr("reduction", "none")
    full = onehot.shape
    hits = onehot.cast(DType.int64).sum(hit_axes)
    hit = hits.gt(0)
    if reduction in ("none", "add"):
        routed = onehot.cast(upd.dtype).mul(upd.expand(full)).sum(hit_axes)
        if reduction == "add":
            return data.add(routed)
        return hit.where(routed, data)
    if reduction in ("max", "min"):
        sign = 1 if reduction == "max" else -1
        lowest = float("-inf") if data.dtype.is_float else int(np.iinfo(data.dtype.np).min)
        cand = onehot.where(upd.expand(full).mul(sign), Tensor.full(full, lowest, upd.dtype)).max(hit_axes).mul(sign)
        best = data.maximum(cand) if reduction == "max" else data.minimum(cand)
        return hit.where(best, data)
    if reduction == "mul":
        # a product over the hits, in the log domain: sign from the count of negatives, zero if any zero
        u = upd.expand(full)
        u = u if u.dtype.is_float else u.cast(DType.float32)
        zero = (onehot & u.eq(0)).cast(DType.int64).sum(hit_axes).gt(0)
        odd = (onehot & u.lt(0)).cast(DType.int64).sum(hit_axes).mod(2).eq(1)
        logs = onehot.where(u.abs().log(), Tensor.full(full, 0.0, u.dtype)).sum(hit_axes)
        mag = logs.exp()
        prod = zero.where(Tensor.full(mag.shape, 0.0, mag.dtype), odd.where(mag.neg(), mag))
        if not data.dtype.is_float:
            return data.cast(DType.float32).mul(prod).round().cast(data.dtype)
        return data.mul(prod.cast(data.dtype))
    raise fail(ctx, f"reduction {reduction!r} is not supported")


@op("ScatterElements", "Scatter")
def scatter_elements_op(ctx: OpContext) -> Tensor:
    data, idx, upd = need(ctx, 0), _index(need(ctx, 1)), need(ctx, 2)
    r = data.ndim
    axis = norm_axis(int(ctx.attr("axis", 0)), r)
    if idx.shape != upd.shape or idx.ndim != r:
        raise fail(ctx, "indices and updates must have data's rank and one shape")
    n = data.shape[axis]
    idx = idx.lt(0).where(idx.add(n), idx)
    # move the scatter axis last, then route each update k to output j where idx[.., k] == j
    order = [k for k in range(r) if k != axis] + [axis]
    it, ut = idx.permute(order), upd.permute(order).cast(data.dtype)
    full = (*it.shape, n)
    onehot = it.unsqueeze([r]).expand(full).eq(Tensor.iota(full, r, it.dtype))
    lead = it.shape[:-1]
    dt = data.permute(order)
    pad = [(0, b - a) for a, b in zip(lead, dt.shape[:-1])] + [(0, 0)]
    corner = dt.shrink([(0, s) for s in lead] + [(0, n)])
    out = _scatter(ctx, corner, onehot, ut.unsqueeze([r]), (r - 1,)).reshape((*lead, n))
    if any(p != (0, 0) for p in pad):
        # updates cover only a corner of data on the other axes
        inside = Tensor.full((*lead, n), True, DType.bool).pad(pad)
        out = inside.where(out.pad(pad), dt)
    return out.permute([int(k) for k in np.argsort(order)])


@op("ScatterND")
def scatter_nd_op(ctx: OpContext) -> Tensor:
    data, idx, upd = need(ctx, 0), _index(need(ctx, 1)), need(ctx, 2)
    m = idx.shape[-1]
    if m > data.ndim or upd.shape != idx.shape[:-1] + data.shape[m:]:
        raise fail(ctx, "indices and updates do not fit data")
    dims = data.shape[:m]
    p = int(math.prod(dims))
    k = int(math.prod(idx.shape[:-1]))
    rest = data.shape[m:]
    lin = _flat_index(idx, dims).reshape((1, k) + (1,) * len(rest))
    full = (p, k) + (1,) * len(rest)
    onehot = lin.expand(full).eq(Tensor.iota(full, 0, lin.dtype))
    u = upd.cast(data.dtype).reshape((1, k, *rest))
    onehot = onehot.expand((p, k, *rest)) if rest else onehot
    flat = data.reshape((p, *rest))
    out = _scatter(ctx, flat, onehot, u, (1,))
    return out.reshape(data.shape)


@op("TensorScatter")
def tensor_scatter_op(ctx: OpContext) -> Tensor:
    """A KV-cache write: each batch entry's update rows land at its write index along ``axis`` (wrapping in
    circular mode). As a gather: cache row s takes update row s - w[b] where that is a row of the update."""
    past, upd = need(ctx, 0), need(ctx, 1)
    axis = int(ctx.attr("axis", -2))
    if not -past.ndim <= axis < past.ndim or axis % past.ndim == 0:
        raise fail(ctx, f"axis {axis} must be a non-batch axis of rank {past.ndim}")
    axis %= past.ndim
    if upd.ndim != past.ndim or upd.shape[axis] > past.shape[axis] or any(
            a != b for k, (a, b) in enumerate(zip(past.shape, upd.shape)) if k != axis):
        raise fail(ctx, f"update {list(upd.shape)} does not fit cache {list(past.shape)} along axis {axis}")
    m, n = past.shape[axis], upd.shape[axis]
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise fail(ctx, f"mode {str(mode)[:20]!r} is not linear or circular")
    if n == 0:
        return past
    row = Tensor.iota(past.shape, axis, DType.int64)
    w = ctx.input(2)
    if w is not None:
        if w.shape != (past.shape[0],):
            raise fail(ctx, f"write_indices must hold one index per batch entry, got {list(w.shape)}")
        row = row.sub(_index(w).reshape((past.shape[0],) + (1,) * (past.ndim - 1)).expand(past.shape))
    if mode == "circular":
        row = remainder(row, m)
    hit = row.lt(0).logical_not() & row.lt(n)
    return hit.where(upd.gather(hit.where(row, 0), axis), past)


@op("ReverseSequence")
def reverse_sequence_op(ctx: OpContext) -> Tensor:
    """Reverse the first ``sequence_lens[b]`` steps of each batch entry: a gather along the time axis."""
    x, lens = need(ctx, 0), need(ctx, 1)
    t_axis, b_axis = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    if x.ndim < 2 or {t_axis, b_axis} != {0, 1} or lens.shape != (x.shape[b_axis],):
        raise fail(ctx, "time and batch axes must be 0 and 1, with one length per batch entry")
    shape = [1] * x.ndim
    shape[b_axis] = x.shape[b_axis]
    n = lens.cast(DType.int64).reshape(shape).expand(x.shape)
    t = Tensor.iota(x.shape, t_axis, DType.int64)
    return x.gather(t.lt(n).where(n.sub(t).sub(1), t), t_axis)
