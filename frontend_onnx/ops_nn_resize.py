"""Resize and Upsample: per-axis taps (index, weight) computed at import, applied by gathers and mul/add."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir import DType, Tensor
from .ops_nn_util import take
from .ops_shape import concat, norm_axis
from .registry import DataDependent, OpContext, fail, need, need_const, op

F32 = np.float32


def _source_coords(ctm: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """Output index -> fractional input coordinate, in float32 as the reference kernels compute it
    (align_corners in float64)."""
    x = np.arange(n_out, dtype=F32)
    s = F32(scale)
    if ctm == "half_pixel":
        return (x + F32(0.5)) / s - F32(0.5)
    if ctm == "half_pixel_symmetric":
        adjustment = F32(n_out) / (s * F32(n_in))
        center = F32(n_in) / F32(2)
        offset = center * (F32(1) - adjustment)
        return offset + (x + F32(0.5)) / s - F32(0.5)
    if ctm == "pytorch_half_pixel":
        return (x + F32(0.5)) / s - F32(0.5) if n_out > 1 else np.zeros(n_out, F32)
    if ctm == "align_corners":
        # the spec's resized length is scale * n_in, fractional when downsampling by a
        # non-integer factor, not the rounded output size; in float64 as the spec's reference
        # computes it, since float32 rounds a length such as 5 * 0.6 to an integer
        length = scale * n_in
        if length == 1:
            return np.zeros(n_out, np.float64)
        return np.arange(n_out, dtype=np.float64) * (n_in - 1) / (length - 1)
    if ctm == "asymmetric":
        return x / s
    if ctm == "tf_half_pixel_for_nn":
        return (x + F32(0.5)) / s
    if ctm == "tf_crop_and_resize":
        start, end = F32(roi[0]), F32(roi[1])
        if n_out > 1:
            return start * F32(n_in - 1) + x * (end - start) * F32(n_in - 1) / F32(n_out - 1)
        return np.full(n_out, F32(0.5) * (start + end) * F32(n_in - 1), F32)
    raise ValueError(ctm)


def _nearest(xo: np.ndarray, mode: str, downsampling: bool) -> np.ndarray:
    if mode == "round_prefer_floor":
        tie = xo == np.trunc(xo) + F32(0.5)
        return np.where(tie, np.floor(xo), _round_away(xo))
    if mode == "round_prefer_ceil":
        tie = xo == np.trunc(xo) + F32(0.5)
        return np.where(tie, np.ceil(xo), _round_away(xo))
    if mode == "floor":
        return np.floor(xo)
    if mode == "ceil":
        return np.ceil(xo)
    if mode == "simple":  # Upsample and Resize-10
        return np.ceil(xo) if downsampling else np.trunc(xo)
    raise ValueError(mode)


def _round_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + F32(0.5))


def _cubic_coeffs(s: np.ndarray, coeff: float) -> list[np.ndarray]:
    a = F32(coeff)
    one = F32(1)
    return [((a * (s + one) - 5 * a) * (s + one) + 8 * a) * (s + one) - 4 * a,
            ((a + 2) * s - (a + 3)) * s * s + one,
            ((a + 2) * (one - s) - (a + 3)) * (one - s) * (one - s) + one,
            ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a]


def _antialias_taps(mode: str, xo: np.ndarray, n_in: int, scale: float, a: float, exclude: bool):
    """Downsampling taps whose kernel is stretched by 1/scale, normalised to sum 1."""
    support = 1 if mode == "linear" else 2
    start = int(np.floor(-support / scale) + 1)
    n = 2 - 2 * start
    x = xo.astype(np.float64)
    base = np.floor(x)
    integer = x == base
    ratio = np.where(integer, 1.0, x - base)
    base = np.where(integer, base - 1, base).astype(np.int64)
    idxs, weights = [], []
    for k in range(n):
        t = np.abs((start + k - ratio) * scale)
        if mode == "linear":
            w = np.clip(1 - t, 0, 1)
        else:
            w = np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                         np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
        i = base + start + k
        if exclude:
            w = np.where((i >= 0) & (i < n_in), w, 0.0)
        idxs.append(np.clip(i, 0, n_in - 1))
        weights.append(w)
    total = sum(weights)
    total = np.where(total == 0, 1.0, total)
    return [(i, (w / total).astype(F32)) for i, w in zip(idxs, weights)]


def axis_taps(mode: str, ctm: str, nearest: str, n_in: int, n_out: int, scale: float, roi, a: float,
              exclude_outside: bool, antialias: bool = False
              ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
    """[(input index per output, weight per output)] and, for tf_crop_and_resize, the outside mask."""
    xo = _source_coords(ctm, n_in, n_out, scale, roi)
    outside = None
    if ctm == "tf_crop_and_resize":
        outside = (xo < 0) | (xo > F32(n_in - 1))
    if antialias and mode != "nearest" and scale < 1:
        return _antialias_taps(mode, xo, n_in, scale, a, exclude_outside), outside
    if mode == "nearest":
        idx = np.clip(_nearest(xo, nearest, scale < 1), 0, n_in - 1).astype(np.int64)
        return [(idx, np.ones(n_out, F32))], outside
    if mode == "linear":
        xc = np.clip(xo, F32(0), F32(n_in - 1))
        i0 = np.minimum(xc.astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        d0 = np.abs(xc - i0.astype(F32))
        d1 = np.abs(xc - i1.astype(F32))
        same = i0 == i1
        d0 = np.where(same, F32(0.5), d0)
        d1 = np.where(same, F32(0.5), d1)
        return [(i0, d1), (i1, d0)], outside
    # cubic
    base = np.floor(xo)
    s = (xo - base).astype(F32)
    coeffs = _cubic_coeffs(s, a)
    taps = []
    idxs = [base.astype(np.int64) + k for k in (-1, 0, 1, 2)]
    if exclude_outside:
        coeffs = [np.where((i >= 0) & (i < n_in), c, F32(0)) for i, c in zip(idxs, coeffs)]
        total = sum(coeffs)
        coeffs = [c / np.where(total == 0, F32(1), total) for c in coeffs]
    for i, c in zip(idxs, coeffs):
        taps.append((np.clip(i, 0, n_in - 1), c.astype(F32)))
    return taps, outside


def _phases(taps, n_in: int, n_out: int) -> tuple[int, int, list[tuple[int, np.ndarray]]] | None:
    """An upsampling by a whole factor r whose taps repeat with the output's phase: (r, s, [(c, W)]) such that
    output o reads, per tap, input (o + s) // r + c, clamped to the input, with weight W[(o + s) % r]; checked
    on the map itself (two seeded random inputs through both forms, to the float32 noise of the weights computed
    per output). A weighted sum of taps comes with s = 0 (``_at_phase_zero``). None where the taps do not repeat
    so."""
    if n_out % n_in or n_out == n_in or n_in < 3:
        return None
    r = n_out // n_in
    o = np.arange(n_out)
    probe = np.random.default_rng(0).standard_normal((2, n_in))
    want = sum(w.astype(np.float64) * probe[:, idx] for idx, w in taps)
    for s in range(r):
        base, phase = (o + s) // r, (o + s) % r
        form = []
        for idx, w in taps:
            inner = (idx > 0) & (idx < n_in - 1)
            if not inner.any():
                return None
            c = int(np.bincount(idx[inner] - base[inner] - (idx - base).min()).argmax() + (idx - base).min())
            # the weights of a block in the middle, away from the clamped borders
            form.append((c, w[np.arange(r) + (n_out // r // 2) * r - s].astype(F32)))
        got = sum(W[phase].astype(np.float64) * probe[:, np.clip(base + c, 0, n_in - 1)] for c, W in form)
        if np.allclose(got, want, rtol=0, atol=1e-5 * max(1.0, float(np.abs(want).max()))):
            return (r, 0, _at_phase_zero(r, s, form)) if s and len(form) > 1 else (r, s, form)
    return None


def _at_phase_zero(r: int, s: int, form: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    """The taps of ``form`` (blocks starting at output -s) for blocks starting at output 0, so that the blocks
    are the output itself, with nothing to cut and copy: output o = r * b + p reads what it read at phase p + s,
    from block b + c where p + s < r, from block b + c + 1 past it. Each tap splits in two, each zero on the
    other's phases (merging the two at one offset can leave one weight on every phase, a product the
    simplifier then computes once, in a kernel of its own). Bilinear 2x of 32 x 160x160: 1.43 -> 1.02 ms, 4x of
    96 x 40x40 0.80 -> 0.45."""
    wrapped = np.arange(r) + s >= r
    return [(off, np.where(on, np.roll(w, -s), F32(0)))
            for c, w in form for off, on in ((c, ~wrapped), (c + 1, wrapped))]


def _edge_weights(form: list[tuple[int, np.ndarray]], n_in: int, blocks: int
                  ) -> list[tuple[int, np.ndarray]]:
    """The taps of ``form`` as (offset, weight per block and phase) over zero-padded reads: where block b + c runs
    past the input, the tap's weight moves to the tap that reads the clamped index (a new one where none does), so
    the borders need no copy of the input with its edges repeated. Each tap keeps its own term: taps at one offset
    are not merged (see ``_at_phase_zero``)."""
    b = np.arange(blocks)
    terms = [(c, np.tile(w.astype(F32), (blocks, 1))) for c, w in form]
    for c, t in terms[:len(form)]:
        read = np.clip(b + c, 0, n_in - 1) - b
        for blk in np.flatnonzero(read != c):
            dest = next((u for d, u in terms if d == read[blk]), None)
            if dest is None:
                dest = np.zeros_like(t)
                terms.append((int(read[blk]), dest))
            dest[blk] += t[blk]
            t[blk] = 0
    return [(c, t) for c, t in terms if t.any()]


def _apply_phases(x: Tensor, axis: int, r: int, s: int, form: list[tuple[int, np.ndarray]], n_out: int) -> Tensor:
    """The upsampling ``_phases`` describes as views, in blocks of r phases: ``axis`` becomes (blocks, r), output
    o at block (o + s) // r, phase (o + s) % r; each tap a view of the input broadcast over the phases, times its
    weights per block and phase. Weighted taps read zeros past the input's borders (``_edge_weights``): a copy of
    the input with its borders repeated, read shifted by each tap, was a kernel of its own per axis (bilinear 2x of
    64 x 40x40: 4 kernels, 0.165 ms -> 2, 0.103)."""
    n_in = x.shape[axis]
    blocks = (n_out - 1 + s) // r + 1
    weighted = not all(np.all(w == 1) for _, w in form)
    terms = _edge_weights(form, n_in, blocks) if weighted else [(c, w[None, :]) for c, w in form]
    lo = max(0, -min(c for c, _ in terms))
    hi = max(0, max(blocks - 1 + c for c, _ in terms) - (n_in - 1))
    # taps of weight 1 (nearest) read the input with its borders repeated: views, and so is the upsampling
    xe = x.pad([(lo, hi) if k == axis else (0, 0) for k in range(x.ndim)]) if weighted else \
        take(x, np.clip(np.arange(-lo, n_in + hi), 0, n_in - 1), axis)
    shape = [*x.shape[:axis], blocks, r, *x.shape[axis + 1:]]
    out = None
    for c, w in terms:
        t = xe.shrink([(c + lo, c + lo + blocks) if k == axis else (0, n) for k, n in enumerate(xe.shape)])
        t = t.unsqueeze([axis + 1]).expand(tuple(shape))
        if not np.all(w == 1):
            # one weight per phase where the borders leave the tap alone, else per block and phase
            wb = w[:1] if np.all(w == w[:1]) else w
            # stored phase-major, so that along the blocks each phase's weights are read in order
            wt = Tensor.const(np.ascontiguousarray(wb.T).astype(x.dtype.np), x.dtype).permute([1, 0])
            wt = wt.reshape([len(wb) if k == axis else r if k == axis + 1 else 1 for k in range(len(shape))])
            t = t.mul(wt.expand(tuple(shape)))
        out = t if out is None else out.add(t)
    assert out is not None
    return out


def _apply(x: Tensor, axis: int, taps, outside, extrapolation: float) -> tuple[Tensor, tuple[int, int] | None]:
    """x resized along ``axis``, and where by phases (``_apply_phases``: the axis split into blocks and phases)
    the crop (s, n_out) of the merged axis."""
    n_out = len(taps[0][0])
    phases = _phases(taps, x.shape[axis], n_out) if outside is None and x.dtype.is_float else None
    # along the innermost dim too, where the elementwise emitter unrolls the phases under the loop over the blocks
    # (2 threads, in ms, gathers -> phases; onnxruntime in brackets): linear 2x 64 x 40x40 0.38 -> 0.24 (0.43),
    # 32 x 160x160 3.65 -> 1.49 (2.43), 4x 96 x 40x40 2.60 -> 0.96 (2.14), cubic 2x 64 x 40x40 0.90 -> 0.25,
    # nearest 2x 256 x 20x20 0.091 -> 0.085, linear 3x 32 x 50x50 at par
    if phases is not None:
        return _apply_phases(x, axis, *phases, n_out), (phases[1], n_out)
    out = None
    shape = [n_out if k == axis else 1 for k in range(x.ndim)]
    for idx, w in taps:
        if not np.any(w):
            continue
        g = take(x, idx, axis)
        if not np.all(w == 1):
            g = g.mul(Tensor.const(w.reshape(shape).astype(x.dtype.np), x.dtype).expand(g.shape))
        out = g if out is None else out.add(g)
    if out is None:
        out = Tensor.full((*x.shape[:axis], n_out, *x.shape[axis + 1:]), 0, x.dtype)
    if outside is not None and outside.any():
        mask = Tensor.const(outside.reshape(shape), DType.bool).expand(out.shape)
        out = mask.where(Tensor.full(out.shape, extrapolation, out.dtype), out)
    return out, None


def _modes(ctx: OpContext, legacy: bool) -> tuple[str, str, str]:
    """The interpolation mode, the coordinate transformation and the nearest rounding, checked."""
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise fail(ctx, f"unknown mode {mode!r}")
    ctm = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest = "simple" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
    known = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
             "tf_half_pixel_for_nn", "tf_crop_and_resize")
    if ctm not in known:
        raise fail(ctx, f"unknown coordinate_transformation_mode {ctm!r}")
    if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"):
        raise fail(ctx, f"unknown nearest_mode {nearest!r}")
    return mode, ctm, nearest


def _out_sizes(ctx: OpContext, in_sizes: list[int], scales, sizes) -> tuple[list[int], list[float]]:
    """The output size and the scale of every resized axis, from the sizes input (with its
    keep_aspect_ratio_policy) or the scales input."""
    if sizes is not None:
        if len(sizes) != len(in_sizes):
            raise fail(ctx, "sizes must have one value per axis")
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        sizes = [int(v) for v in sizes]
        if policy == "stretch":
            return sizes, [o / n for o, n in zip(sizes, in_sizes)]
        if policy not in ("not_larger", "not_smaller"):
            raise fail(ctx, f"unknown keep_aspect_ratio_policy {policy!r}")
        ratios = [o / n for o, n in zip(sizes, in_sizes)]
        s = min(ratios) if policy == "not_larger" else max(ratios)
        return [math.floor(s * n + 0.5) for n in in_sizes], [s] * len(in_sizes)
    if scales is None:
        raise fail(ctx, "one of scales and sizes is required")
    if len(scales) != len(in_sizes):
        raise fail(ctx, "scales must have one value per axis")
    sc = [float(v) for v in scales]
    if any(s <= 0 for s in sc):
        raise fail(ctx, "scales must be positive")
    return [math.floor(float(F32(n) * F32(s))) for n, s in zip(in_sizes, sc)], sc


def resize(ctx: OpContext, x: Tensor, scales, sizes, roi, legacy: bool) -> Tensor:
    r = x.ndim
    axes = [norm_axis(a, r) for a in (ctx.attr("axes") or range(r))]
    mode, ctm, nearest = _modes(ctx, legacy)
    in_sizes = [x.shape[a] for a in axes]
    outs, sc = _out_sizes(ctx, in_sizes, scales, sizes)
    antialias = bool(ctx.attr("antialias", 0))
    a = float(ctx.attr("cubic_coeff_a", -0.75))
    exclude = bool(ctx.attr("exclude_outside", 0))
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))
    work = x if x.dtype.is_float or mode == "nearest" else x.cast(DType.float32)
    # an upsampling runs its innermost axis first, on the fewest rows: gathered along it, each element is a load of
    # its own, where along an outer axis whole rows are (align_corners 2x, 64 x 80x80: 0.82 -> 0.48 ms)
    grows = all(o >= i for o, i in zip(outs, in_sizes))
    order = sorted(range(len(axes)), key=lambda j: -axes[j]) if grows else range(len(axes))
    # axes resized by phases stay split in (blocks, phases) until every axis is done, merged by one reshape: a
    # nearest upsampling is then one copy, not one per axis
    split: dict[int, tuple[int, int]] = {}
    for j in order:
        axis = axes[j]
        n_in, n_out = in_sizes[j], outs[j]
        if n_out <= 0:
            raise fail(ctx, "output size must be positive")
        rj = (0.0, 1.0)
        if roi is not None:
            rj = (float(roi[j]), float(roi[j + len(axes)]))
        if n_out == n_in and sc[j] == 1 and ctm != "tf_crop_and_resize":
            continue
        taps, outside = axis_taps(mode, ctm, nearest, n_in, n_out, sc[j], rj, a, exclude, antialias)
        work, crop = _apply(work, axis + sum(k < axis for k in split), taps, outside, extrapolation)
        if crop is not None:
            split[axis] = crop
    if split:
        dims = iter(work.shape)
        merged = [next(dims) * next(dims) if k in split else next(dims) for k in range(x.ndim)]
        work = work.reshape(merged)
        work = work.shrink([(split[k][0], split[k][0] + split[k][1]) if k in split else (0, n)
                            for k, n in enumerate(work.shape)])
    if work.dtype != x.dtype:
        work = work.round().cast(x.dtype)
    return work


def _maybe(ctx: OpContext, i: int) -> np.ndarray | None:
    t = ctx.input(i)
    if t is None or t.numel == 0:
        return None
    return need_const(ctx, i).reshape(-1)


@op("Resize")
def resize_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    if ctx.opset < 11:
        return resize(ctx, x, _maybe(ctx, 1), None, None, legacy=True)
    return resize(ctx, x, _maybe(ctx, 2), _maybe(ctx, 3), _maybe(ctx, 1), legacy=False)


@op("Upsample")
def upsample_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    scales = ctx.attr("scales") if ctx.opset < 9 else _maybe(ctx, 1)
    if scales is None:
        raise fail(ctx, "scales are required")
    return resize(ctx, x, list(scales), None, None, legacy=True)


# -- GridSample: sampling positions come from a runtime tensor, so indices are computed in the graph --------

def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """Fold x into [lo, hi] by reflecting at the borders as often as needed."""
    span = hi - lo
    below, above = x.lt(lo), x.gt(hi)
    dx = below.where(x.neg().add(lo), x.sub(hi))
    n = dx.mul(1.0 / span).floor() if span > 0 else dx.mul(0.0)
    r = dx.sub(n.mul(span))
    even = n.mod(2.0).eq(0)
    from_lo, from_hi = r.add(lo), r.neg().add(hi)
    folded = below.where(even.where(from_lo, from_hi), even.where(from_hi, from_lo))
    return (below | above).where(folded, x)


def _grid_taps(mode: str, xi: Tensor) -> list[tuple[Tensor, Tensor | None]]:
    """(float position of each tap, its weight) along one axis."""
    if mode == "nearest":
        return [(xi, None)]
    x0 = xi.floor()
    t = xi.sub(x0)
    if mode == "linear":
        return [(x0, t.neg().add(1)), (x0.add(1), t)]
    a = -0.75
    t1, t2, u, u1 = t.add(1), t.neg().add(2), t.neg().add(1), t
    c0 = t1.mul(a).sub(5 * a).mul(t1).add(8 * a).mul(t1).sub(4 * a)
    c1 = u1.mul(a + 2).sub(a + 3).mul(u1).mul(u1).add(1)
    c2 = u.mul(a + 2).sub(a + 3).mul(u).mul(u).add(1)
    c3 = t2.mul(a).sub(5 * a).mul(t2).add(8 * a).mul(t2).sub(4 * a)
    return [(x0.sub(1), c0), (x0, c1), (x0.add(1), c2), (x0.add(2), c3)]


@op("GridSample")
def grid_sample_op(ctx: OpContext) -> Tensor:
    x, grid = need(ctx, 0), need(ctx, 1)
    r = x.ndim - 2
    if r < 1 or grid.ndim != x.ndim or grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
        raise fail(ctx, "grid must be (N, *out_spatial, spatial_rank) for X (N, C, *spatial)")
    mode = ctx.attr("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = ctx.attr("padding_mode", "zeros")
    if mode not in ("linear", "nearest", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise fail(ctx, f"unsupported mode {mode!r} / padding_mode {padding!r}")
    align = bool(ctx.attr("align_corners", 0))
    n, c = x.shape[:2]
    dims = x.shape[2:]
    outs = grid.shape[1:-1]
    q = math.prod(outs)
    g = grid.cast(DType.float32).reshape((n, q, r))
    per_dim = []
    for i, d in enumerate(dims):
        gi = g.shrink([(0, n), (0, q), (r - 1 - i, r - i)]).reshape((n, q))
        xi = gi.add(1).mul((d - 1) / 2) if align else gi.add(1).mul(d / 2).sub(0.5)
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            xi = xi.round()
        outside = xi.lt(lo) | xi.gt(hi)
        if padding == "border":
            xi = outside.where(xi.maximum(0.0).minimum(d - 1.0), xi)
        elif padding == "reflection":
            xi = outside.where(_reflect(xi, lo, hi), xi)
        taps = []
        for pos, w in _grid_taps(mode, xi):
            if padding == "zeros":
                ok = pos.ge(0) & pos.lt(d)
                w = ok.cast(DType.float32) if w is None else ok.where(w, Tensor.full(w.shape, 0.0, w.dtype))
            elif padding == "reflection":
                pos = _reflect(pos, lo, hi).cast(DType.int64).cast(DType.float32)
            idx = pos.maximum(0.0).minimum(d - 1.0).cast(DType.int64)
            taps.append((idx, w))
        per_dim.append(taps)
    strides = [math.prod(dims[i + 1:]) for i in range(r)]
    flat = x.reshape((n, c, math.prod(dims)))
    out = None
    for combo in itertools.product(*per_dim):
        lin, w = None, None
        for (idx, wi), s in zip(combo, strides):
            term = idx.mul(s) if s != 1 else idx
            lin = term if lin is None else lin.add(term)
            if wi is not None:
                w = wi if w is None else w.mul(wi)
        assert lin is not None, "an index per spatial dim"
        sample = flat.gather(lin.reshape((n, 1, q)).expand((n, c, q)), 2)
        if w is not None:
            sample = sample.mul(w.cast(x.dtype).reshape((n, 1, q)).expand((n, c, q)))
        out = sample if out is None else out.add(sample)
    assert out is not None, "a grid sample has taps"
    return out.reshape((n, c, *outs))


@op("AffineGrid")
def affine_grid_op(ctx: OpContext) -> Tensor:
    theta = need(ctx, 0)
    given = ctx.const(1)
    if given is None or given.size not in (4, 5):
        raise fail(ctx, "size must be a constant (N, C, H, W) or (N, C, D, H, W)")
    size = [int(v) for v in given.reshape(-1)]
    r = len(size) - 2
    n, spatial = size[0], size[2:]
    if theta.shape != (n, r, r + 1):
        raise fail(ctx, f"theta must be ({n}, {r}, {r + 1})")
    align = bool(ctx.attr("align_corners", 0))
    axes = [np.linspace(-1, 1, d) if align else (2 * np.arange(d) + 1) / d - 1 for d in spatial]
    # homogeneous positions (x, y[, z], 1) with x along the last spatial dim
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(spatial))], axis=1)
    pts = Tensor.const(base.astype(np.float32)).cast(theta.dtype)
    grid = pts.reshape((1, *pts.shape)).expand((n, *pts.shape)).matmul(theta.transpose())
    return grid.reshape((n, *spatial, r))


@op("CenterCropPad")
def center_crop_pad_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    shape = ctx.const(1)
    if shape is None:
        raise fail(ctx, "shape must be constant")
    axes = [norm_axis(a, x.ndim) for a in (ctx.attr("axes") or range(x.ndim))]
    target = [int(v) for v in shape.reshape(-1)]
    if len(target) != len(axes):
        raise fail(ctx, "shape must have one value per axis")
    pads = [(0, 0)] * x.ndim
    for a, t in zip(axes, target):
        diff = t - x.shape[a]
        if diff >= 0:
            pads[a] = (diff // 2, diff - diff // 2)
        else:
            start = -diff // 2
            pads[a] = (-start, -(-diff - start))
    return x.pad(pads)


# -- RoiAlign: bilinear samples at positions computed from the boxes, gathered from the feature map --------------

def _roi_axis(start: Tensor, size: Tensor, bins: int, grid: int, extent: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The (rois, bins * grid) sample positions along one axis as onnxruntime takes them: low and high pixel, the
    high one's weight, and 0 where the position lies more than a pixel outside the map (else 1)."""
    r = start.shape[0]
    steps = (np.arange(bins)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(1, bins * grid)
    pos = start.reshape((r, 1)).add(size.reshape((r, 1)).mul(1.0 / bins).mul(Tensor.const(steps.astype(np.float32))))
    inside = (pos.ge(-1.0) & pos.le(float(extent))).cast(DType.float32)
    pos = pos.maximum(0.0)
    low = pos.floor().minimum(float(extent - 1))
    at_end = low.ge(float(extent - 1))
    high = at_end.where(low, low.add(1.0))
    frac = at_end.where(Tensor.full(pos.shape, 0.0, DType.float32), pos.sub(low))
    return low.cast(DType.int64), high.cast(DType.int64), frac, inside


def _roi_align(x: Tensor, x1: Tensor, y1: Tensor, bw: Tensor, bh: Tensor, batch: Tensor, out: tuple[int, int],
               grid: tuple[int, int], mode: str) -> Tensor:
    """(rois, C, oh, ow): each box's bins pooled over ``grid`` bilinear samples a bin."""
    n, c, h, w = x.shape
    (oh, ow), (gh, gw), r = out, grid, x1.shape[0]
    ylo, yhi, fy, yin = _roi_axis(y1, bh, oh, gh, h)
    xlo, xhi, fx, xin = _roi_axis(x1, bw, ow, gw, w)
    sy, sx = oh * gh, ow * gw
    base = batch.cast(DType.int64).reshape((r, 1, 1)).mul(h * w)
    flat = x.permute([1, 0, 2, 3]).reshape((c, n * h * w))
    inside = yin.reshape((r, sy, 1)).mul(xin.reshape((r, 1, sx)))
    pooled = None
    for yi, wy in ((ylo, fy.neg().add(1.0)), (yhi, fy)):
        for xi, wx in ((xlo, fx.neg().add(1.0)), (xhi, fx)):
            lin = base.add(yi.reshape((r, sy, 1)).mul(w)).add(xi.reshape((r, 1, sx)))
            v = flat.gather(lin.reshape((1, r * sy * sx)).expand((c, r * sy * sx)), 1).reshape((c, r, sy, sx))
            weight = wy.reshape((r, sy, 1)).mul(wx.reshape((r, 1, sx))).mul(inside)
            tap = v.mul(weight.cast(x.dtype).reshape((1, r, sy, sx)).expand((c, r, sy, sx)))
            pooled = tap if pooled is None else (pooled.maximum(tap) if mode == "max" else pooled.add(tap))
    assert pooled is not None, "four bilinear taps"
    bins = pooled.reshape((c, r, oh, gh, ow, gw))
    y = bins.max((3, 5)) if mode == "max" else bins.sum((3, 5)).mul(1.0 / (gh * gw))
    return y.permute([1, 0, 2, 3])


@op("RoiAlign")
def roi_align_op(ctx: OpContext) -> Tensor:
    """Each box's bins averaged (or maxed) over a grid of bilinear samples, as onnxruntime computes them; the grid
    is ``sampling_ratio`` samples a side, or (0) as many as a bin is pixels: read from constant boxes, boxes of one
    grid computed together; boxes computed at run time then run on the host."""
    x, rois, batch = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch.shape != (rois.shape[0],):
        raise fail(ctx, f"X {list(x.shape)}, rois {list(rois.shape)} and batch_indices {list(batch.shape)} do not fit")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio, scale = int(ctx.attr("sampling_ratio", 0)), float(ctx.attr("spatial_scale", 1.0))
    mode = ctx.attr("mode", "avg")
    half = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if oh < 1 or ow < 1 or ratio < 0 or mode not in ("avg", "max") or half not in ("half_pixel", "output_half_pixel"):
        raise fail(ctx, f"output {oh}x{ow}, sampling_ratio {ratio}, mode {mode!r}, {half!r} not supported")
    r = rois.shape[0]
    box = rois.cast(DType.float32).mul(scale).sub(0.5 if half == "half_pixel" else 0.0)
    x1, y1, x2, y2 = (box.shrink([(0, r), (k, k + 1)]).reshape((r,)) for k in range(4))
    bw, bh = x2.sub(x1), y2.sub(y1)
    if half == "output_half_pixel":
        bw, bh = bw.maximum(1.0), bh.maximum(1.0)
    if ratio:
        return _roi_align(x, x1, y1, bw, bh, batch, (oh, ow), (ratio, ratio), mode)
    if not (bh.is_const and bw.is_const):
        raise DataDependent(f"node {ctx.node.name or 'RoiAlign'!r} (RoiAlign): sampling_ratio 0 takes each box's "
                            "grid from its size, which the run decides", ctx.node)
    grids = np.maximum(np.ceil(np.stack([bh.numpy() / oh, bw.numpy() / ow], 1)), 1).astype(np.int64)
    parts, order = [], []
    for gh, gw in sorted({(int(a), int(b)) for a, b in grids}):
        idx = np.flatnonzero((grids[:, 0] == gh) & (grids[:, 1] == gw))
        bx, by, bwi, bhi, bb = (take(t, idx, 0) for t in (x1, y1, bw, bh, batch))
        parts.append(_roi_align(x, bx, by, bwi, bhi, bb, (oh, ow), (gh, gw), mode))
        order.extend(idx.tolist())
    if len(parts) == 1:
        return parts[0]
    return take(concat(parts, 0), np.argsort(np.array(order)), 0)
