"""Signal-processing ONNX ops: DFT and STFT as products with constant cosine and sine bases, MelWeightMatrix
folded to a constant."""

from __future__ import annotations

from typing import overload

import numpy as np

from ..ir import DType, Tensor
from ..ir.tensor import FOLD_LIMIT
from .importer import const_tensor, onnx_dtype
from .ops_shape import concat, norm_axis
from .registry import OpContext, need, need_ints, op


def _basis(used: int, n: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k t / n for t < ``used`` (rows) and k < ``bins`` (columns), in float64."""
    if used * bins > FOLD_LIMIT:
        raise ValueError(f"a DFT of {used} points to {bins} bins is too large")
    phase = 2 * np.pi * (np.outer(np.arange(used), np.arange(bins)) % n) / n
    return np.cos(phase), np.sin(phase)


def _times(x: Tensor | None, m: np.ndarray, dtype: DType) -> Tensor | None:
    return None if x is None or not m.any() else x.matmul(const_tensor(m.astype(dtype.np), dtype))


def _sum(shape: tuple[int, ...], dtype: DType, *terms: Tensor | None) -> Tensor:
    out = [t for t in terms if t is not None]
    if not out:  # every basis entry zero (the sine of a DFT of one or two points)
        return Tensor.full(shape, 0, dtype)
    total = out[0]
    for t in out[1:]:
        total = total.add(t)
    return total


@overload
def _first(x: Tensor, used: int) -> Tensor: ...
@overload
def _first(x: None, used: int) -> None: ...
def _first(x: Tensor | None, used: int) -> Tensor | None:
    """The first ``used`` points of the last axis."""
    if x is None or used == x.shape[-1]:
        return x
    return x.shrink([(0, s) for s in x.shape[:-1]] + [(0, used)])


def dft_last(re: Tensor, im: Tensor | None, n: int, inverse: bool, onesided: bool) -> tuple[Tensor, Tensor | None]:
    """The DFT of length ``n`` over the last axis of the signal ``re + i im`` (truncated or zero-padded to
    ``n``); forward, ``onesided`` keeps bins 0..n/2. Inverse and ``onesided`` reads a half spectrum and
    returns a real signal (im None), as numpy's irfft."""
    if n < 1:
        raise ValueError(f"DFT length {n} must be positive")
    dtype = re.dtype
    if inverse and onesided:
        used = min(re.shape[-1], n // 2 + 1)
        cos, sin = _basis(used, n, n)
        # bins 1..(n-1)/2 stand for their mirror images too; bin 0 (and n/2) for themselves
        weight = np.where((np.arange(used) == 0) | (2 * np.arange(used) == n), 1.0, 2.0)[:, None] / n
        re, im = _first(re, used), _first(im, used)
        real = _sum((*re.shape[:-1], n), dtype, _times(re, weight * cos, dtype), _times(im, -weight * sin, dtype))
        return real, None
    used = min(re.shape[-1], n)
    bins = n // 2 + 1 if onesided else n
    cos, sin = _basis(used, n, bins)
    re, im = _first(re, used), _first(im, used)
    shape = (*re.shape[:-1], bins)
    if inverse:  # (re + i im)(cos + i sin) / n
        cos, sin = cos / n, sin / n
        return (_sum(shape, dtype, _times(re, cos, dtype), _times(im, -sin, dtype)),
                _sum(shape, dtype, _times(re, sin, dtype), _times(im, cos, dtype)))
    # (re + i im)(cos - i sin)
    return (_sum(shape, dtype, _times(re, cos, dtype), _times(im, sin, dtype)),
            _sum(shape, dtype, _times(re, -sin, dtype), _times(im, cos, dtype)))


def _parts(x: Tensor) -> tuple[Tensor, Tensor | None]:
    """The real and imaginary parts of an ONNX signal, whose last axis holds 1 (real) or 2 (complex) values."""
    c = x.shape[-1] if x.ndim else 0
    if c not in (1, 2) or x.ndim < 2:
        raise ValueError(f"a signal's last axis holds 1 (real) or 2 (complex) values, not shape {list(x.shape)}")
    if not x.dtype.is_float:
        raise ValueError(f"DFT of {x.dtype.value} values")
    # half precisions sum in float32
    part = [x.slice((0,) * (x.ndim - 1) + (k,), (1,) * x.ndim, (*x.shape[:-1], 1)).squeeze([-1]).cast(DType.float32)
            for k in range(c)]
    return part[0], part[1] if c == 2 else None


def _joined(re: Tensor, im: Tensor | None, dtype: DType) -> Tensor:
    """The signal's ONNX form, in the input's ``dtype``: real and imaginary parts along a last axis."""
    out = re.unsqueeze([-1]) if im is None else concat([re.unsqueeze([-1]), im.unsqueeze([-1])], -1)
    return out.cast(dtype)


@op("DFT")
def dft(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axis = ctx.attr("axis", 1) if ctx.opset < 20 else (ctx.ints(2) or [-2])[0]
    axis = norm_axis(int(axis), x.ndim)
    if axis == x.ndim - 1:
        raise ValueError("DFT over the axis of real and imaginary parts")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    length = ctx.ints(1)
    re, im = _parts(x)
    order = [d for d in range(re.ndim) if d != axis] + [axis]
    back = [int(d) for d in np.argsort(order)]
    re, im = re.permute(order), None if im is None else im.permute(order)
    n = re.shape[-1]
    if length:
        n = length[0]
    elif inverse and onesided:
        n = 2 * (n - 1)
    re, im = dft_last(re, im, n, inverse, onesided)
    return _joined(re.permute(back), None if im is None else im.permute(back), x.dtype)


@op("STFT")
def stft(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    step = need_ints(ctx, 1)[0]
    window = ctx.input(2)
    given = ctx.ints(3)
    # [batch, length] is a real signal too (torch's exporter writes it so; onnxruntime reads it)
    re, im = (x.cast(DType.float32), None) if x.ndim == 2 and x.dtype.is_float else _parts(x)
    if re.ndim != 2:
        raise ValueError(f"STFT of a signal of shape {list(x.shape)}: [batch, length, 1 or 2] expected")
    length = given[0] if given else window.shape[0] if window is not None else re.shape[1]
    if window is not None and (window.ndim != 1 or window.shape[0] != length):
        raise ValueError(f"STFT window of shape {list(window.shape)} for frames of {length}")
    if step < 1 or not 1 <= length <= re.shape[1]:
        raise ValueError(f"STFT frames of {length} every {step} over a signal of {re.shape[1]}")
    frames = 1 + (re.shape[1] - length) // step

    def framed(t: Tensor) -> Tensor:
        t = t.window(1, frames, length, step)
        return t if window is None else t.mul(window.cast(t.dtype))

    re, im = dft_last(framed(re), None if im is None else framed(im), length, False, bool(ctx.attr("onesided", 1)))
    return _joined(re, im, x.dtype)


def _hz_to_mel(hz: float) -> float:
    return float(2595 * np.log1p(hz / 700) / np.log(10))


@op("MelWeightMatrix")
def mel_weight_matrix(ctx: OpContext) -> Tensor:
    """Triangular filters over the spectrogram's bins, folded to a constant as ONNX's reference builds them."""
    mels, n, rate = (need_ints(ctx, i)[0] for i in range(3))
    low, high = (float(np.asarray(ctx.const(i)).reshape(-1)[0]) for i in (3, 4))
    if mels < 1 or n < 1 or rate < 1 or not 0 <= low < high or (n // 2 + 1) * mels > FOLD_LIMIT:
        raise ValueError(f"MelWeightMatrix of {mels} bins over a DFT of {n} at {rate} Hz, {low}-{high} Hz")
    edges = np.arange(mels + 2) * (_hz_to_mel(high) - _hz_to_mel(low)) / (mels + 2) + _hz_to_mel(low)
    bins = ((n + 1) * 700 * np.expm1(edges / 2595 * np.log(10)) // rate).astype(np.int64)
    spectrum = n // 2 + 1
    if bins.min() < 0 or bins.max() >= spectrum + 1:
        raise ValueError(f"MelWeightMatrix: {high} Hz lies past the DFT's bins at {rate} Hz")
    out = np.zeros((spectrum + 1, mels))
    j = np.arange(spectrum + 1)
    for i in range(mels):
        lo, mid, hi = bins[i], bins[i + 1], bins[i + 2]
        if mid == lo:
            out[mid, i] = 1
        else:
            rise = (j >= lo) & (j <= mid)
            out[rise, i] = (j[rise] - lo) / (mid - lo)
        if hi > mid:
            fall = (j >= mid) & (j < hi)
            out[fall, i] = (hi - j[fall]) / (hi - mid)
    dtype = onnx_dtype(int(ctx.attr("output_datatype", 1)))
    return const_tensor(out[:spectrum].astype(dtype.np), dtype)
