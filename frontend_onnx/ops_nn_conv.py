"""Convolutions and pooling: pad + strided window views + one contraction or reduction."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..ir import DType, Tensor
from .ops_elementwise import fused_activation
from .ops_nn_util import spatial_pads, window_ints, windows
from .ops_reduce import lp_norm
from .ops_shape import concat
from .registry import MS, OpContext, fail, need, op, wants


def _geometry(ctx: OpContext, x: Tensor, kernel: list[int], ceil_mode: bool = False):
    nd = x.ndim - 2
    strides = window_ints(ctx, "strides", [1] * nd)
    dilations = window_ints(ctx, "dilations", [1] * nd)
    if len(kernel) != nd or len(strides) != nd or len(dilations) != nd:
        raise fail(ctx, f"kernel/strides/dilations do not match {nd} spatial dims")
    pads, outs = spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, ceil_mode)
    return strides, dilations, pads, outs


# a convolution splits by taps along a dim where its live (position, tap) pairs there are at most this share of all
# and the pairs it drops hold at least SPLIT_MIN_MACS multiply-adds (see conv)
SPLIT_LIVE = 0.8
SPLIT_MIN_MACS = 1 << 20


def _shift(x: Tensor, pads: list[tuple[int, int]], d: int, by: int) -> tuple[Tensor, list[tuple[int, int]]]:
    """``x`` and its pads with the windows along spatial dim ``d`` starting ``by`` later: less padding before,
    or the input's start cropped where that goes below none."""
    pads = list(pads)
    a, b = pads[d][0] - by, pads[d][1]
    if a < 0:
        x = x.pad([(0, 0)] * (2 + d) + [(a, 0)] + [(0, 0)] * (x.ndim - 3 - d))
        a = 0
    pads[d] = (a, b)
    return x, pads


def _tap_slice(w: Tensor, d: int, lo: int, hi: int) -> Tensor:
    """The weight's taps [lo, hi) along spatial dim ``d``, a weight of their own (a constant's fold to one the GEMM
    reads in place, not a strided view of the whole it would pack on every call)."""
    return w.shrink([(lo, hi) if j == 2 + d else (0, s) for j, s in enumerate(w.shape)]).contiguous()


def _live_taps(size: int, pad: int, out: int, k: int, stride: int, dilation: int) -> list[tuple[int, int, int]]:
    """Per tap that reads the input at some output position along a dim: (tap, o0, o1), the run [o0, o1) of output
    positions whose window position at that tap lies inside the input (not its zero padding)."""
    taps = []
    for t in range(k):
        o0 = max(0, -(-(pad - t * dilation) // stride))
        o1 = min(out, (size - 1 + pad - t * dilation) // stride + 1)
        if o1 > o0:
            taps.append((t, o0, o1))
    return taps


def _by_taps(x: Tensor, w: Tensor, group: int, strides, dilations, pads, outs, d: int,
             taps: list[tuple[int, int, int]]) -> Tensor:
    """The convolution as the sum over the live ``taps`` along spatial dim ``d`` of convolutions one tap wide
    there, each over the output positions where its tap reads the input (zeros elsewhere)."""
    parts = []
    for t, o0, o1 in taps:
        start = o0 * strides[d] + t * dilations[d] - pads[d][0]
        at = [(0, s) for s in x.shape]
        at[2 + d] = (start, start + (o1 - o0 - 1) * strides[d] + 1)
        part = conv(x.shrink(at), _tap_slice(w, d, t, t + 1), group, strides, dilations,
                    [*pads[:d], (0, 0), *pads[d + 1:]], [*outs[:d], o1 - o0, *outs[d + 1:]])
        parts.append(part.pad([(0, 0)] * (2 + d) + [(o0, outs[d] - o1)] + [(0, 0)] * (len(outs) - 1 - d)))
    return functools.reduce(Tensor.add, parts)


def conv(x: Tensor, w: Tensor, group: int, strides, dilations, pads, outs) -> Tensor:
    """N-d grouped convolution as one broadcast Mul + SumReduce over (C/group, k...), over the taps that read
    the input somewhere: a dilated kernel over a small map (an atrous pyramid's rates 6-36 over 16-33 pixels), or
    a kernel not much smaller than its map, reads only zero padding at its outer taps near the borders. Taps that
    do so at every output position leave the contraction (the weight sliced); where the live (position, tap)
    pairs along a dim are at most SPLIT_LIVE of all and the others hold at least SPLIT_MIN_MACS multiply-adds,
    the convolution splits there by taps: one contraction per tap over the positions it reads the input at, its
    slice of the weight read once, the parts summed."""
    nd = len(outs)
    pads = [tuple(p) for p in pads]
    macs = x.shape[0] * math.prod(w.shape) * math.prod(outs)
    for d in range(nd):
        k = w.shape[2 + d]
        taps = _live_taps(x.shape[2 + d], pads[d][0], outs[d], k, strides[d], dilations[d])
        if not taps:  # every window over the padding
            return Tensor.full((x.shape[0], w.shape[0], *outs), 0, x.dtype)
        live = sum(o1 - o0 for _, o0, o1 in taps)
        dead = macs * (outs[d] * k - live) // (outs[d] * k)
        if dead and dead >= SPLIT_MIN_MACS and live <= SPLIT_LIVE * outs[d] * k:
            return _by_taps(x, w, group, strides, dilations, pads, outs, d, taps)
        lo, hi = taps[0][0], taps[-1][0] + 1
        if (lo, hi) != (0, k):
            w = _tap_slice(w, d, lo, hi)
            x, pads = _shift(x, pads, d, lo * dilations[d])
            macs = macs * (hi - lo) // k
    n = x.shape[0]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    mg = m // group
    xg = x.reshape((n, group, cg, *x.shape[2:]))
    xw = windows(xg, 3, pads, outs, kernel, strides, dilations)
    # (N, g, Cg, o1, k1, o2, k2, ...) -> (N, g, 1, o1.., Cg, k1..)
    order = [0, 1] + [3 + 2 * d for d in range(nd)] + [2] + [4 + 2 * d for d in range(nd)]
    xw = xw.permute(order).unsqueeze([2])
    wg = w.reshape((1, group, mg) + (1,) * nd + (cg,) + tuple(kernel))
    full = (n, group, mg, *outs, cg, *kernel)
    prodt = xw.expand(full).mul(wg.expand(full))
    red = tuple(range(3 + nd, 4 + 2 * nd))
    return prodt.sum(red).reshape((n, m, *outs))


def _bias(y: Tensor, b: Tensor | None) -> Tensor:
    if b is None:
        return y
    return y.add(b.reshape((1, -1) + (1,) * (y.ndim - 2)).expand(y.shape))


@op("Conv")
def conv_op(ctx: OpContext) -> Tensor:
    return _bias(conv_node(ctx, need(ctx, 0), need(ctx, 1)), ctx.input(2))


@op("FusedConv", domain=MS)
def fused_conv_op(ctx: OpContext) -> Tensor:
    """onnxruntime's Conv + optional sum Z + activation, as its graph optimizer saves them: activation(conv + B +
    Z), the activation's alpha (LeakyRelu), alpha and beta (HardSigmoid) or bounds (Clip) in activation_params."""
    y = conv_op(ctx)
    z = ctx.input(3)
    if z is not None:
        y = y.add(z)
    return fused_activation(ctx, y, [float(v) for v in ctx.attr("activation_params") or []])


def conv_node(ctx: OpContext, x: Tensor, w: Tensor) -> Tensor:
    """The convolution a Conv-like node's attributes describe, without bias."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise fail(ctx, f"input rank {x.ndim} and weight rank {w.ndim} do not fit a convolution")
    group = int(ctx.attr("group", 1))
    kernel = window_ints(ctx, "kernel_shape", w.shape[2:])
    if tuple(kernel) != tuple(w.shape[2:]):
        raise fail(ctx, "kernel_shape does not match the weight")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise fail(ctx, f"channels {x.shape[1]} / weight {list(w.shape)} do not fit group {group}")
    strides, dilations, pads, outs = _geometry(ctx, x, kernel)
    if w.dtype != x.dtype:
        w = w.cast(x.dtype)
    return conv(x, w, group, strides, dilations, pads, outs)


@op("ConvTranspose")
def conv_transpose_op(ctx: OpContext) -> Tensor:
    x, w = need(ctx, 0), need(ctx, 1)
    nd = x.ndim - 2
    if nd < 1 or w.ndim != x.ndim:
        raise fail(ctx, f"input rank {x.ndim} and weight rank {w.ndim} do not fit a convolution")
    group = int(ctx.attr("group", 1))
    c = x.shape[1]
    if c != w.shape[0] or c % group:
        raise fail(ctx, f"channels {c} / weight {list(w.shape)} do not fit group {group}")
    kernel = window_ints(ctx, "kernel_shape", w.shape[2:])
    strides = window_ints(ctx, "strides", [1] * nd)
    dilations = window_ints(ctx, "dilations", [1] * nd)
    out_pad = list(ctx.attr("output_padding") or [0] * nd)
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    raw = window_ints(ctx, "pads", [0] * (2 * nd), 0)
    pads = []
    for d in range(nd):
        n_in = x.shape[2 + d]
        ek = (kernel[d] - 1) * dilations[d] + 1
        if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
            target = out_shape[-nd + d] if out_shape is not None else n_in * strides[d]
            total = strides[d] * (n_in - 1) + out_pad[d] + ek - target
            if out_shape is not None and total < 0:
                # an output_shape past the whole result: the rest at the end, as onnxruntime and TensorFlow
                # (the spec's equations would put it on both sides)
                pads.append((0, total))
            else:
                half = total // 2
                pads.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
        elif auto == "VALID":
            pads.append((0, 0))
        else:
            pads.append((int(raw[d]), int(raw[d + nd])))
    outs = [strides[d] * (x.shape[2 + d] - 1) + out_pad[d] + (kernel[d] - 1) * dilations[d] + 1 - sum(pads[d])
            for d in range(nd)]
    if any(o <= 0 for o in outs):
        raise fail(ctx, "output size is not positive")
    if w.dtype != x.dtype:
        w = w.cast(x.dtype)
    if all(d == 1 and k <= st for d, k, st in zip(dilations, kernel, strides)) and any(st > 1 for st in strides):
        return _bias(_conv_transpose_phases(x, w, group, strides, pads, outs), ctx.input(2))
    return _bias(_conv_transpose_by_phase(x, w, group, strides, dilations, pads, outs), ctx.input(2))


def _interleave(a, b) -> tuple[int, ...]:
    return tuple(v for pair in zip(a, b) for v in pair)


def _conv_transpose_phases(x: Tensor, w: Tensor, group: int, strides, pads, outs) -> Tensor:
    """ConvTranspose whose taps never overlap (kernel <= stride, no dilation: a 2x2 stride-2 upsampling): output
    position i*s + p takes tap p of input i alone, so one contraction writes the output in its own layout,
    y[n, m, i1, p1, i2, p2, ...] = sum_c x[n, c, i1, i2, ...] * w[c, m, p1, p2, ...], with no overlap-add
    (phases past the kernel multiply the weight's zero padding)."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    kernel = w.shape[2:]
    cg, mg = c // group, w.shape[1]
    ones = (1,) * nd
    w = w.pad([(0, 0), (0, 0)] + [(0, st - k) for k, st in zip(kernel, strides)])
    xv = x.reshape((n, group, cg, *sp)).permute([0, 1, *range(3, 3 + nd), 2])
    xv = xv.reshape((n, group, 1, *_interleave(sp, ones), cg))
    wv = w.reshape((group, cg, mg, *strides)).permute([0, 2, *range(3, 3 + nd), 1])
    wv = wv.reshape((1, group, mg, *_interleave(ones, strides), cg))
    full = (n, group, mg, *_interleave(sp, strides), cg)
    y = xv.expand(full).mul(wv.expand(full)).sum((len(full) - 1,))
    y = y.reshape((n, group * mg, *(i * st for i, st in zip(sp, strides))))
    # positions before the begin pads are cropped; past the output's end cropped, or zero (output_padding)
    return y.pad([(0, 0), (0, 0)] + [(-pb, o + pb - i * st) for (pb, _), o, i, st in zip(pads, outs, sp, strides)])


def _taps(w: Tensor, axis: int, first: int, step: int) -> Tensor:
    """``w``'s taps ``first``, ``first + step``, ... along ``axis``, last first."""
    n = len(range(first, w.shape[axis], step))
    return w.slice([first + (n - 1) * step if j == axis else 0 for j in range(w.ndim)],
                   [-step if j == axis else 1 for j in range(w.ndim)],
                   [n if j == axis else s for j, s in enumerate(w.shape)])


def _conv_transpose_by_phase(x: Tensor, w: Tensor, group: int, strides, dilations, pads, outs) -> Tensor:
    """ConvTranspose as one convolution per output phase: output o = i*s + k*d - pb, at the positions o = p + s*q
    of one phase p, takes only the taps with k*d = r (mod s), r = (p + pb) mod s: with g = gcd(d, s) none unless g
    divides r, else k = k0 + (s/g)*j, reading inputs i = q + a - a0 - (d/g)*j (a = (p + pb - r) / s, a0 = (k0*d -
    r) / s). So each phase is a conv of the input with those taps, last first, at dilation d/g, and no product is
    formed twice or of a zero; the phases are then interleaved. Stride 1 is one phase over every tap."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    kernel = w.shape[2:]
    cg, mg = c // group, w.shape[1]
    m = group * mg
    wt = w.reshape((group, cg, mg, *kernel)).permute([0, 2, 1, *range(3, 3 + nd)]).reshape((m, cg, *kernel))
    parts: dict[tuple[int, ...], Tensor] = {}
    for phase in itertools.product(*(range(st) for st in strides)):
        wp, cpads, louts, dils = wt, [], [], []
        for d, (p, st, dl) in enumerate(zip(phase, strides, dilations)):
            g = math.gcd(dl, st)
            r = (p + pads[d][0]) % st
            count = len(range(p, outs[d], st))
            if r % g or not count:
                break
            k0 = r // g * pow(dl // g, -1, st // g) % (st // g)
            taps = len(range(k0, kernel[d], st // g))
            if not taps:
                break
            before = (taps - 1) * (dl // g) + (k0 * dl - r) // st - (p + pads[d][0] - r) // st
            cpads.append((before, count - sp[d] - before + (taps - 1) * (dl // g)))
            louts.append(count)
            dils.append(dl // g)
            wp = _taps(wp, 2 + d, k0, st // g)
        else:
            parts[phase] = _conv_signed_pads(x, wp, group, dils, cpads, louts)
    return _weave(parts, (n, m), strides, outs, x.dtype)


def _weave(parts: dict[tuple[int, ...], Tensor], lead: tuple[int, int], strides, outs, dtype) -> Tensor:
    """y[n, m, p + s*q] = parts[p][n, m, q] over each spatial dim, zero at the phases no part has, cut to ``outs``
    (a part may be shorter than ceil(outs / s) at its end)."""
    qs = [-(-o // st) for o, st in zip(outs, strides)]
    y = None
    for phase, b in parts.items():
        b = b.pad([(0, 0), (0, 0)] + [(0, q - o) for q, o in zip(qs, b.shape[2:])])
        b = b.reshape((*lead, *(v for q in qs for v in (q, 1))))
        b = b.pad([(0, 0), (0, 0)] + [e for p, st in zip(phase, strides) for e in ((0, 0), (p, st - 1 - p))])
        y = b if y is None else y.add(b)
    if y is None:
        y = Tensor.full((*lead, *(v for q, st in zip(qs, strides) for v in (q, st))), 0, dtype)
    y = y.reshape((*lead, *(q * st for q, st in zip(qs, strides))))
    return y.shrink([(0, lead[0]), (0, lead[1])] + [(0, o) for o in outs])


def overlap_add(cols: Tensor, strides, dilations, pads_begin, outs) -> Tensor:
    """y[n, m, o] = sum of cols[n, m, k, i] over o = i*stride + k*dilation - pad (col2im), for
    cols (N, M, *kernel, *positions): each tap is a shifted view added into its residue class o mod s."""
    nd = len(outs)
    n, m = cols.shape[:2]
    kernel, sp = cols.shape[2:2 + nd], cols.shape[2 + nd:]
    qs = [-(-outs[d] // strides[d]) for d in range(nd)]
    buckets: dict[tuple[int, ...], Tensor] = {}
    for taps in itertools.product(*(range(k) for k in kernel)):
        tap = cols.shrink([(0, n), (0, m)] + [(t, t + 1) for t in taps] + [(0, s) for s in sp])
        tap = tap.reshape((n, m, *sp))
        res, shifts = [], []
        for d, t in enumerate(taps):
            e = t * dilations[d] - pads_begin[d]
            r = e % strides[d]
            res.append(r)
            q0 = (e - r) // strides[d]
            shifts.append((q0, qs[d] - sp[d] - q0))
        if any(q0 >= qs[d] or q0 + sp[d] <= 0 for d, (q0, _) in enumerate(shifts)):
            continue  # this tap lands entirely in the cropped padding
        view = tap.pad([(0, 0), (0, 0), *shifts])
        key = tuple(res)
        buckets[key] = view if key not in buckets else buckets[key].add(view)
    return _weave(buckets, (n, m), strides, outs, cols.dtype)


def _conv_signed_pads(x: Tensor, w: Tensor, group: int, dilations, pads, outs) -> Tensor:
    nd = len(pads)
    # negative pads crop the input first; the conv itself then only pads
    crop = [(0, 0), (0, 0)] + [(min(0, a), min(0, b)) for a, b in pads]
    if any(p != (0, 0) for p in crop):
        x = x.pad(crop)
    pos = [(max(0, a), max(0, b)) for a, b in pads]
    return conv(x, w, group, [1] * nd, dilations, pos, outs)


# -- pooling -----------------------------------------------------------------

def _pool_geometry(ctx: OpContext, x: Tensor):
    """(kernel, strides, dilations, pads, outs) of a pooling node over ``x``."""
    if x.ndim < 3:
        raise fail(ctx, f"input rank {x.ndim} has no spatial dims")
    kernel = window_ints(ctx, "kernel_shape", [])
    if len(kernel) != x.ndim - 2:
        raise fail(ctx, "kernel_shape is required and must match the spatial dims")
    return kernel, *_geometry(ctx, x, kernel, bool(ctx.attr("ceil_mode", 0)))


def _pool_windows(ctx: OpContext, x: Tensor, value, geometry=None):
    kernel, strides, dilations, pads, outs = geometry = geometry or _pool_geometry(ctx, x)
    xw = windows(x, 2, pads, outs, kernel, strides, dilations, value=value)
    nd = len(kernel)
    order = [0, 1] + [2 + 2 * d for d in range(nd)] + [3 + 2 * d for d in range(nd)]
    return xw.permute(order), geometry


@op("MaxPool")
def max_pool_op(ctx: OpContext) -> list[Tensor | None]:
    x = need(ctx, 0)
    geometry = _pool_geometry(ctx, x)
    lowest = -np.inf if x.dtype.is_float else np.iinfo(x.dtype.np).min
    # over values of at least 0 the padding may be 0, which a view reads without a padded copy, where every
    # window holds a value of the input (and no index of a maximum is asked for: it could land on the padding)
    pad = 0 if x.nonnegative() and not wants(ctx, 1) and _windows_meet_input(x, geometry) else lowest
    xw, (kernel, strides, dilations, pads, outs) = _pool_windows(ctx, x, pad, geometry)
    nd = len(kernel)
    red = tuple(range(2 + nd, 2 + 2 * nd))
    y = xw.max(red, keepdim=True)
    idx = _max_indices(ctx, x, xw, y, kernel, strides, dilations, pads, outs) if wants(ctx, 1) else None
    return [y.reshape(y.shape[:2 + nd]), idx]


def _windows_meet_input(x: Tensor, geometry) -> bool:
    """Whether every pooling window holds at least one element of the input."""
    kernel, strides, dilations, pads, outs = geometry
    return all(any(0 <= o * s - p[0] + j * dl < n for j in range(k)) for n, k, s, dl, p, out
               in zip(x.shape[2:], kernel, strides, dilations, pads, outs) for o in range(out))


def _max_indices(ctx, x, xw, y, kernel, strides, dilations, pads, outs) -> Tensor:
    """Flat input index of the first maximum of each window (row- or column-major spatial order)."""
    nd = len(kernel)
    sp = x.shape[2:]
    col = int(ctx.attr("storage_order", 0)) == 1
    place = np.ones(nd, dtype=np.int64)
    for d in range(nd):
        place[d] = int(np.prod(sp[:d] if col else sp[d + 1:]))
    # spatial flat position of window element (o..., k...), separable per dim
    pos = np.zeros((1,) * (2 * nd), dtype=np.int64)
    for d in range(nd):
        o = np.arange(outs[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] * dilations[d] - pads[d][0]
        shape = [1] * (2 * nd)
        shape[d], shape[nd + d] = outs[d], kernel[d]
        pos = pos + (o * place[d]).reshape(shape)
    total = int(np.prod(sp))
    big = np.iinfo(np.int64).max // 4
    posc = Tensor.const(pos.reshape((1, 1, *pos.shape)), DType.int64).expand(xw.shape)
    hit = xw.eq(y.expand(xw.shape))
    red = tuple(range(2 + nd, 2 + 2 * nd))
    first = hit.where(posc, Tensor.full(xw.shape, big, DType.int64)).min(red)
    n, c = x.shape[:2]
    base = np.arange(n * c, dtype=np.int64).reshape(n, c) * total
    return first.add(Tensor.const(base.reshape((n, c) + (1,) * nd), DType.int64).expand(first.shape))


@op("AveragePool")
def average_pool_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    xw, (kernel, strides, dilations, pads, outs) = _pool_windows(ctx, x, 0.0)
    nd = len(kernel)
    s = xw.sum(tuple(range(2 + nd, 2 + 2 * nd)))
    include = bool(ctx.attr("count_include_pad", 0))
    raw = ctx.attr("pads") or [0] * (2 * nd)
    auto = ctx.attr("auto_pad", "NOTSET")
    count = np.ones((1,) * nd, dtype=np.float64)
    for d in range(nd):
        n = x.shape[2 + d]
        pb = pads[d][0]
        lo, hi = 0, n
        if include:
            # explicit pads count, the extra tail of ceil_mode does not
            pe = int(raw[d + nd]) if auto in ("NOTSET", "") else pads[d][1]
            lo, hi = -pb, n + pe
        p = np.arange(outs[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] * dilations[d] - pb
        cnt = ((p >= lo) & (p < hi)).sum(axis=1).astype(np.float64)
        shape = [1] * nd
        shape[d] = outs[d]
        count = count * cnt.reshape(shape)
    inv = (1.0 / np.maximum(count, 1.0)).astype(s.dtype.compute.np)
    return s.mul(Tensor.const(inv.reshape((1, 1, *inv.shape)), s.dtype).expand(s.shape))


@op("GlobalAveragePool")
def global_average_pool_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalMaxPool")
def global_max_pool_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@op("LpPool")
def lp_pool_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    p = float(ctx.attr("p", 2))
    if p <= 0:
        raise fail(ctx, f"p must be positive, got {p}")
    xw, (kernel, *_rest) = _pool_windows(ctx, x, 0.0)
    nd = len(kernel)
    return lp_norm(xw, p, tuple(range(2 + nd, 2 + 2 * nd)), False)


@op("GlobalLpPool")
def global_lp_pool_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    return lp_norm(x, float(ctx.attr("p", 2)), tuple(range(2, x.ndim)), True)


@op("DeformConv")
def deform_conv_op(ctx: OpContext) -> Tensor:
    """2-D deformable convolution: bilinear samples at offset kernel positions, then the conv contraction."""
    x, w, off, b, mask = need(ctx, 0), need(ctx, 1), need(ctx, 2), ctx.input(3), ctx.input(4)
    if x.ndim != 4 or w.ndim != 4:
        raise fail(ctx, "only 2-D deformable convolution is supported")
    n, c, ih, iw = x.shape
    m, cg = w.shape[:2]
    kh, kw = window_ints(ctx, "kernel_shape", w.shape[2:])
    group = int(ctx.attr("group", 1))
    og = int(ctx.attr("offset_group", 1))
    sh, sw = window_ints(ctx, "strides", [1, 1])
    dh, dw = window_ints(ctx, "dilations", [1, 1])
    pt, pl, pb, pr = window_ints(ctx, "pads", [0, 0, 0, 0], 0)
    oh, ow = off.shape[2:]
    if (oh, ow) != ((ih + pt + pb - (kh - 1) * dh - 1) // sh + 1, (iw + pl + pr - (kw - 1) * dw - 1) // sw + 1):
        raise fail(ctx, "offset's spatial shape does not match the convolution's output")
    k, p = kh * kw, oh * ow
    if c != cg * group or m % group or c % og or off.shape[:2] != (n, og * k * 2):
        raise fail(ctx, "X, W and offset shapes do not fit group, offset_group and the kernel")
    f32 = DType.float32
    off = off.cast(f32).reshape((n, og, k, 2, p))
    # base sampling position of kernel element (a, b) for output (i, j)
    base_h = (np.arange(kh)[:, None, None, None] * dh + np.arange(oh)[None, None, :, None] * sh - pt)
    base_w = (np.arange(kw)[None, :, None, None] * dw + np.arange(ow)[None, None, None, :] * sw - pl)
    base_h = np.broadcast_to(base_h, (kh, kw, oh, ow)).reshape(1, 1, k, p).astype(np.float32)
    base_w = np.broadcast_to(base_w, (kh, kw, oh, ow)).reshape(1, 1, k, p).astype(np.float32)
    shape = (n, og, k, p)
    hpos = off.shrink([(0, n), (0, og), (0, k), (0, 1), (0, p)]).reshape(shape).add(Tensor.const(base_h).expand(shape))
    wpos = off.shrink([(0, n), (0, og), (0, k), (1, 2), (0, p)]).reshape(shape).add(Tensor.const(base_w).expand(shape))
    weight_mask = None if mask is None else mask.cast(f32).reshape(shape)
    cpo = c // og
    flat = x.reshape((n, og, cpo, ih * iw))
    h0, w0 = hpos.floor(), wpos.floor()
    th, tw = hpos.sub(h0), wpos.sub(w0)
    cols = None
    for hh, wh in ((h0, th.neg().add(1)), (h0.add(1), th)):
        for ww, wwt in ((w0, tw.neg().add(1)), (w0.add(1), tw)):
            ok = hh.ge(0) & hh.lt(ih) & ww.ge(0) & ww.lt(iw)
            wt = ok.where(wh.mul(wwt), Tensor.full(shape, 0.0, f32))
            if weight_mask is not None:
                wt = wt.mul(weight_mask)
            lin = hh.maximum(0.0).minimum(ih - 1.0).mul(iw).add(ww.maximum(0.0).minimum(iw - 1.0)).cast(DType.int64)
            idx = lin.reshape((n, og, 1, k * p)).expand((n, og, cpo, k * p))
            s = flat.gather(idx, 3).mul(wt.cast(x.dtype).reshape((n, og, 1, k * p)).expand((n, og, cpo, k * p)))
            cols = s if cols is None else cols.add(s)
    assert cols is not None, "four bilinear taps"
    # columns (N, C, K, P) -> grouped contraction with W (M, C/g, K)
    mg = m // group
    cols = cols.reshape((n, group, 1, cg, k, p)).permute([0, 1, 2, 5, 3, 4])
    full = (n, group, mg, p, cg, k)
    wg = w.cast(x.dtype).reshape((1, group, mg, 1, cg, k))
    y = cols.expand(full).mul(wg.expand(full)).sum((4, 5)).reshape((n, m, oh, ow))
    return _bias(y, b)


@op("Col2Im")
def col2im_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    image_c, block_c = ctx.const(1), ctx.const(2)
    if image_c is None or block_c is None:
        raise fail(ctx, "image_shape and block_shape must be constant")
    image = [int(v) for v in image_c.reshape(-1)]
    block = [int(v) for v in block_c.reshape(-1)]
    nd = len(image)
    strides = window_ints(ctx, "strides", [1] * nd)
    dilations = window_ints(ctx, "dilations", [1] * nd)
    pads = window_ints(ctx, "pads", [0] * (2 * nd), 0)
    counts = [(image[d] + pads[d] + pads[d + nd] - (block[d] - 1) * dilations[d] - 1) // strides[d] + 1
              for d in range(nd)]
    n, cb, length = x.shape
    kb = int(np.prod(block))
    if len(block) != nd or cb % kb or length != int(np.prod(counts)) or min(counts) <= 0:
        raise fail(ctx, "input shape does not match image_shape, block_shape, strides, pads and dilations")
    cols = x.reshape((n, cb // kb, *block, *counts))
    return overlap_add(cols, strides, dilations, pads[:nd], image)


@op("CausalConvWithState")
def causal_conv_with_state_op(ctx: OpContext) -> list[Tensor | None]:
    """A depthwise 1-D convolution over the carried state (zeros where absent) followed by the input, so each
    position sees the k-1 before it; the state after is the last k-1 positions of that sequence."""
    x, w, b, past = need(ctx, 0), need(ctx, 1), ctx.input(2), ctx.input(3)
    if x.ndim != 3 or w.ndim != 3 or w.shape[1] != 1 or w.shape[0] != x.shape[1]:
        raise fail(ctx, f"input {list(x.shape)} and weight {list(w.shape)}: expected (N, C, L) and (C, 1, k)")
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise fail(ctx, f"activation {str(activation)[:20]!r}: expected none, silu or swish")
    n, c, length = x.shape
    k = w.shape[2]
    seq = x.pad([(0, 0), (0, 0), (k - 1, 0)]) if past is None else concat([past.cast(x.dtype), x], 2)
    y = _bias(conv(seq, w.cast(x.dtype), c, [1], [1], [(0, 0)], [length]), b)
    if activation != "none":
        y = y.mul(y.sigmoid())
    state = seq.shrink([(0, n), (0, c), (length, length + k - 1)])
    return [y, state]


def _unpool_outs(ctx: OpContext, sp, kernel, strides, pads) -> list[int]:
    default = [(s - 1) * st + k - p[0] - p[1] for s, k, st, p in zip(sp, kernel, strides, pads)]
    shape = ctx.ints(2)
    if shape is None:
        return default
    outs = shape[2:]
    if len(outs) != len(sp) or any(o < d for o, d in zip(outs, default)):
        raise fail(ctx, f"output_shape {shape} does not fit the default size {default}")
    return outs


@op("MaxUnpool")
def max_unpool_op(ctx: OpContext) -> Tensor:
    """Each value put back where its index points, within the window it was pooled from: per kernel tap, the
    values whose index is that tap's position, overlap-added as a strided ConvTranspose adds (values that several
    overlapping windows picked count once). An index outside its window, which MaxPool never gives, is dropped."""
    x, idx = need(ctx, 0), need(ctx, 1)
    n, c, *sp = x.shape
    nd = len(sp)
    kernel = window_ints(ctx, "kernel_shape", [])
    if len(kernel) != nd or tuple(idx.shape) != tuple(x.shape):
        raise fail(ctx, f"kernel_shape {kernel}, X {list(x.shape)} and I {list(idx.shape)} do not fit")
    strides = window_ints(ctx, "strides", [1] * nd)
    raw = window_ints(ctx, "pads", [0] * (2 * nd), 0)
    pads = [(raw[d], raw[d + nd]) for d in range(nd)]
    outs = _unpool_outs(ctx, sp, kernel, strides, pads)
    plane = int(np.prod(outs))
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape(n, c, *([1] * nd))
    grid = np.meshgrid(*(np.arange(s) for s in sp), indexing="ij")
    idx = idx.cast(DType.int64)
    hits, vals = [], []
    for taps in itertools.product(*(range(k) for k in kernel)):
        pos = [g * st + t - p[0] for g, st, t, p in zip(grid, strides, taps, pads)]
        inside = np.logical_and.reduce([(q >= 0) & (q < o) for q, o in zip(pos, outs)])
        flat = np.where(inside, np.ravel_multi_index([np.clip(q, 0, o - 1) for q, o in zip(pos, outs)], outs), -1)
        target = np.where(inside, base + flat, -1)
        hit = idx.eq(Tensor.const(np.broadcast_to(target, x.shape).copy(), DType.int64)).cast(x.dtype)
        hits.append(hit.unsqueeze([2]))
        vals.append(hit.mul(x).unsqueeze([2]))

    def spread(cols: list[Tensor]) -> Tensor:
        stacked = concat(cols, 2).reshape((n, c, *kernel, *sp))
        return overlap_add(stacked, strides, [1] * nd, [p[0] for p in pads], outs)

    count, total = spread(hits), spread(vals)
    return count.gt(0).where(total.div(count.gt(0).where(count, count.add(1))), Tensor.full(count.shape, 0, x.dtype))
