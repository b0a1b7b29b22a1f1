"""Helpers shared by the neural-network ops: errors, constant inputs, padding arithmetic, window views, takes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import LuminalError
from ..ir import DType, Tensor
from .ops_shape import concat
from .registry import OpContext, fail


class RandomOpError(LuminalError):
    """The node's output is random (training-mode Dropout, ...): no deterministic result exists."""


def window_ints(ctx: OpContext, name: str, default: Sequence[int], least: int = 1) -> list[int]:
    """A conv's or pool's int-list attribute: kernel_shape, strides and dilations at least 1, pads (``least`` 0) at
    least 0, as ONNX's shape inference and onnxruntime require."""
    values = [int(v) for v in ctx.attr(name) or default]
    if any(v < least for v in values):
        raise fail(ctx, f"{name} {values}: each must be at least {least}")
    return values


def channels_first(x: Tensor) -> Tensor:
    """An NHWC tensor (channels last, any spatial rank) as NCHW."""
    return x.permute([0, x.ndim - 1, *range(1, x.ndim - 1)])


def channels_last(x: Tensor) -> Tensor:
    """An NCHW tensor as NHWC."""
    return x.permute([0, *range(2, x.ndim), 1])


def spatial_pads(ctx: OpContext, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], ceil_mode: bool = False) -> tuple[list[tuple[int, int]], list[int]]:
    """(pads per spatial dim as (begin, end), output sizes) from pads/auto_pad, for conv and pooling.

    The end pad is grown so every output window fits (ceil_mode), never shrunk.
    """
    nd = len(in_sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    pads: list[tuple[int, int]] = []
    outs: list[int] = []
    raw = window_ints(ctx, "pads", [0] * (2 * nd), 0)
    if len(raw) != 2 * nd:
        raise fail(ctx, f"pads has {len(raw)} values, expected {2 * nd}")
    for d in range(nd):
        n, k, s, dl = in_sizes[d], kernel[d], strides[d], dilations[d]
        ek = (k - 1) * dl + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-n // s)
            total = max(0, (out - 1) * s + ek - n)
            small = total // 2
            pb, pe = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            pb = pe = 0
            out = (n - ek) // s + 1
        elif auto in ("NOTSET", ""):
            pb, pe = int(raw[d]), int(raw[d + nd])
            span = n + pb + pe - ek
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= n + pb:
                out -= 1
        else:
            raise fail(ctx, f"unknown auto_pad {auto!r}")
        if out <= 0:
            raise fail(ctx, f"spatial dim {d} of size {n} is too small for the kernel")
        pe = max(pe, (out - 1) * s + ek - n - pb)
        pads.append((pb, pe))
        outs.append(out)
    return pads, outs


def windows(x: Tensor, first: int, pads: Sequence[tuple[int, int]], outs: Sequence[int], kernel: Sequence[int],
            strides: Sequence[int], dilations: Sequence[int], value=0.0) -> Tensor:
    """Pad the spatial dims starting at ``first`` and replace each by (out, k) window dims.

    Returns the view with dims ``x.shape[:first] + (o1, k1, o2, k2, ...)``.
    """
    nd = len(kernel)
    full = [(0, 0)] * first + list(pads)
    x = x.pad(full, value=value) if any(p != (0, 0) for p in pads) else x
    # trim the tail windows never reach so window views stay in bounds
    for d in range(nd):
        dim = first + 2 * d
        need_len = (outs[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1
        if x.shape[dim] > need_len:
            x = x.shrink([(0, s) if j != dim else (0, need_len) for j, s in enumerate(x.shape)])
        x = x.window(dim, outs[d], kernel[d], strides[d], dilations[d])
    return x


def take(x: Tensor, idx: np.ndarray, axis: int) -> Tensor:
    """x indexed along ``axis`` by the constant 1-D integer array ``idx`` (a gather, or a view when affine)."""
    axis %= x.ndim
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    n = len(idx)
    if n == 0:
        return x.shrink([(0, 0) if k == axis else (0, s) for k, s in enumerate(x.shape)])
    step = int(idx[1] - idx[0]) if n > 1 else 1
    if (idx == idx[0] + step * np.arange(n)).all() and step != 0:
        starts = [int(idx[0]) if k == axis else 0 for k in range(x.ndim)]
        steps = [step if k == axis else 1 for k in range(x.ndim)]
        sizes = [n if k == axis else s for k, s in enumerate(x.shape)]
        return x.slice(starts, steps, sizes)
    rep = _repeats(idx)
    if rep is not None:
        # each source element r times in a row (nearest upsampling): a broadcast view, no gather
        start, count, r = rep
        t = take(x, np.arange(start, start + count), axis).unsqueeze([axis + 1])
        t = t.expand((*t.shape[:axis + 1], r, *t.shape[axis + 2:]))
        return t.reshape((*x.shape[:axis], n, *x.shape[axis + 1:]))
    ends = _clamped(idx)
    if ends is not None:
        # a progression whose first and last values repeat (an edge pad, a border clamped): three views joined
        a, b = ends
        return concat([take(x, part, axis) for part in (idx[:a], idx[a:n - b], idx[n - b:]) if len(part)], axis)
    shape = [n if k == axis else 1 for k in range(x.ndim)]
    out_shape = [n if k == axis else s for k, s in enumerate(x.shape)]
    index = Tensor.const(idx.reshape(shape), DType.int64).expand(out_shape)
    return x.gather(index, axis)


def _clamped(idx: np.ndarray) -> tuple[int, int] | None:
    """(a, b) where idx is its first value a more times, then an arithmetic progression of at least two values
    from it to its last value, then that b more times (a + b > 0); else None."""
    n = len(idx)
    a = int(np.argmax(idx != idx[0])) - 1 if (idx != idx[0]).any() else n
    b = int(np.argmax(idx[::-1] != idx[-1])) - 1 if (idx != idx[-1]).any() else n
    mid = idx[a:n - b]
    if a + b == 0 or len(mid) < 2 or mid[1] == mid[0]:
        return None
    return (a, b) if (mid == mid[0] + (mid[1] - mid[0]) * np.arange(len(mid))).all() else None


def _repeats(idx: np.ndarray) -> tuple[int, int, int] | None:
    """(start, count, r) when idx is start, .. (r times), start+1 (r times), ..; else None."""
    n = len(idx)
    r = int(np.argmax(idx != idx[0])) if (idx != idx[0]).any() else n
    if r < 2 or n % r:
        return None
    count = n // r
    if (idx == np.repeat(np.arange(idx[0], idx[0] + count), r)).all():
        return int(idx[0]), count, r
    return None
