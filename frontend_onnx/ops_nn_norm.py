"""Normalisations, softmax family and activation ops."""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, Tensor
from .ops_elementwise import gelu_erf, gelu_tanh
from .ops_nn_index import gather_axis
from .ops_nn_util import RandomOpError
from .ops_reduce import lp_norm, normalise
from .ops_shape import norm_axis
from .registry import OpContext, fail, need, op, wants


def _channel_affine(y: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    """y * scale + bias, with per-channel (C,) scale and bias broadcast over (N, C, *spatial)."""
    shape = (1, -1) + (1,) * (y.ndim - 2)
    return y.mul(scale.cast(y.dtype).reshape(shape).expand(y.shape)).add(
        bias.cast(y.dtype).reshape(shape).expand(y.shape))


@op("BatchNormalization")
def batch_norm_op(ctx: OpContext) -> list[Tensor | None]:
    x = need(ctx, 0)
    scale, bias, mean, var = (need(ctx, k) for k in range(1, 5))
    eps = float(ctx.attr("epsilon", 1e-5))
    if x.ndim < 2:
        raise fail(ctx, "input must have a channel dim")
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, x, scale, bias, mean, var, eps)
    if all(t.is_const for t in (scale, bias, mean, var)):
        s, b, m, v = (t.numpy().astype(np.float64).reshape(-1) for t in (scale, bias, mean, var))
        a = s / np.sqrt(v + eps)
        shift = b - m * a
        ca = Tensor.const(a.astype(x.dtype.np), x.dtype)
        cb = Tensor.const(shift.astype(x.dtype.np), x.dtype)
    else:
        ca = scale.cast(x.dtype).mul(var.cast(x.dtype).add(eps).rsqrt())
        cb = bias.cast(x.dtype).sub(mean.cast(x.dtype).mul(ca))
    y = _channel_affine(x, ca, cb)
    return [y] + [None] * (len(ctx.node.output) - 1)


def _batch_norm_training(ctx: OpContext, x: Tensor, scale, bias, mean, var, eps: float) -> list[Tensor | None]:
    """Normalise with the batch statistics; also the momentum-updated running mean and variance."""
    momentum = float(ctx.attr("momentum", 0.9))
    axes = (0, *range(2, x.ndim))
    y, bmean, _, bvar = normalise(x, axes, eps)
    y = _channel_affine(y, scale, bias)
    c = x.shape[1]
    keep = (1, c) + (1,) * (x.ndim - 2)
    run_mean = mean.cast(x.dtype).reshape(keep).mul(momentum).add(bmean.mul(1 - momentum)).reshape((c,))
    run_var = var.cast(x.dtype).reshape(keep).mul(momentum).add(bvar.mul(1 - momentum)).reshape((c,))
    return [y, run_mean if wants(ctx, 1) else None, run_var if wants(ctx, 2) else None]


@op("InstanceNormalization")
def instance_norm_op(ctx: OpContext) -> Tensor:
    x, scale, bias = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    eps = float(ctx.attr("epsilon", 1e-5))
    y = normalise(x, tuple(range(2, x.ndim)), eps)[0]
    return _channel_affine(y, scale, bias)


def _scaled_norm(ctx: OpContext, rms: bool) -> tuple[Tensor, Tensor, Tensor]:
    """LayerNormalization and its RMS forms: normalised over ``axis`` and after (in float32 when ``stash_type``
    is 1), then scaled; with the mean and inverse deviation."""
    x, scale = need(ctx, 0), need(ctx, 1)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.ndim)
    work = x.cast(DType.float32) if int(ctx.attr("stash_type", 1)) == 1 and x.dtype.is_float else x
    y, mean, inv, _ = normalise(work, tuple(range(axis, x.ndim)), float(ctx.attr("epsilon", 1e-5)), rms=rms)
    return y.cast(x.dtype).mul(scale.cast(x.dtype).expand(x.shape)), mean, inv


@op("LayerNormalization")
def layer_norm_op(ctx: OpContext) -> list[Tensor | None]:
    y, mean, inv = _scaled_norm(ctx, rms=False)
    if (bias := ctx.input(2)) is not None:
        y = y.add(bias.cast(y.dtype).expand(y.shape))
    return [y, mean if wants(ctx, 1) else None, inv if wants(ctx, 2) else None]


@op("LRN")
def lrn_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    size = int(ctx.attr("size"))
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    c = x.shape[1]
    sq = x.mul(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = sq.pad([(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2)).window(1, c, size)
    s = sq.sum((2,))
    return x.div(s.mul(alpha / size).add(bias).pow(beta))


def _coerced_2d(ctx: OpContext, x: Tensor, fn) -> Tensor:
    """Softmax-like op: opset < 13 flattens to 2-D at ``axis``; later opsets use ``axis`` alone."""
    if ctx.opset >= 13:
        return fn(x, int(ctx.attr("axis", -1)) % max(x.ndim, 1))
    axis = int(ctx.attr("axis", 1)) % max(x.ndim, 1)
    rows = math.prod(x.shape[:axis])
    flat = x.reshape((rows, -1))
    return fn(flat, 1).reshape(x.shape)


@op("Softmax")
def softmax_op(ctx: OpContext) -> Tensor:
    return _coerced_2d(ctx, need(ctx, 0), lambda t, a: t.softmax(a))


@op("LogSoftmax")
def log_softmax_op(ctx: OpContext) -> Tensor:
    return _coerced_2d(ctx, need(ctx, 0), lambda t, a: t.log_softmax(a))


def _hardmax(t: Tensor, axis: int) -> Tensor:
    am = t.argmax(axis, keepdim=True).expand(t.shape)
    hit = Tensor.iota(t.shape, axis, DType.int64).eq(am)
    return hit.where(Tensor.full(t.shape, 1, t.dtype), Tensor.full(t.shape, 0, t.dtype))


@op("Hardmax")
def hardmax_op(ctx: OpContext) -> Tensor:
    return _coerced_2d(ctx, need(ctx, 0), _hardmax)


@op("Gelu")
def gelu_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    approx = ctx.attr("approximate", "none")
    if approx == "tanh":
        return gelu_tanh(x)
    if approx != "none":
        raise fail(ctx, f"unknown approximate {approx!r}")
    return gelu_erf(x)


@op("Mish")
def mish_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    return x.mul(x.softplus().tanh())


@op("Dropout")
def dropout_op(ctx: OpContext) -> list[Tensor | None]:
    x = need(ctx, 0)
    training = ctx.input(2)
    ratio = ctx.input(1)
    if training is not None and bool(np.asarray(ctx.const(2)).reshape(-1)[0]):
        r = 0.5 if ratio is None else float(np.asarray(ctx.const(1)).reshape(-1)[0])
        if r != 0:
            raise fail(ctx, "training-mode Dropout with a non-zero ratio is random and not supported", RandomOpError)
    mask = Tensor.full(x.shape, True, DType.bool) if wants(ctx, 1) else None
    return [x, mask]


@op("RMSNormalization")
def rms_norm_op(ctx: OpContext) -> Tensor:
    return _scaled_norm(ctx, rms=True)[0]


@op("SimplifiedLayerNormalization")  # onnxruntime's name for RMS normalisation, with the inverse deviation
def simplified_layer_norm(ctx: OpContext) -> list[Tensor | None]:
    y, _, inv = _scaled_norm(ctx, rms=True)
    return [y, inv if wants(ctx, 1) else None]


@op("GroupNormalization")
def group_norm_op(ctx: OpContext) -> Tensor:
    x, scale, bias = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    g = int(ctx.attr("num_groups", 0))
    eps = float(ctx.attr("epsilon", 1e-5))
    n, c = x.shape[:2]
    if g <= 0 or c % g:
        raise fail(ctx, f"num_groups {g} does not divide {c} channels")
    work = x.cast(DType.float32) if int(ctx.attr("stash_type", 1)) == 1 and x.dtype.is_float else x
    grouped = work.reshape((n, g, -1))
    y = normalise(grouped, (2,), eps)[0]
    y = y.reshape(x.shape).cast(x.dtype)
    if scale.numel == g and g != c:  # opset 18: one scale and bias per group
        scale = scale.reshape((g, 1)).expand((g, c // g)).reshape((c,))
        bias = bias.reshape((g, 1)).expand((g, c // g)).reshape((c,))
    return _channel_affine(y, scale, bias)


@op("MeanVarianceNormalization")
def mean_variance_norm_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axes = tuple(norm_axis(a, x.ndim) for a in (ctx.attr("axes") or [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    var = x.mul(x).mean(axes, keepdim=True).sub(mean.mul(mean))
    std = var.relu().sqrt().add(1e-9)
    return x.sub(mean.expand(x.shape)).div(std.expand(x.shape))


@op("LpNormalization")
def lp_norm_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.ndim)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise fail(ctx, f"p must be 1 or 2, got {p}")
    norm = lp_norm(x, p, (axis,), True).expand(x.shape)
    zero = norm.eq(0)
    return zero.where(Tensor.full(x.shape, 0, x.dtype), x.div(zero.where(Tensor.full(x.shape, 1, x.dtype), norm)))


def _nll(ctx: OpContext, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """-logp[n, target[n, ...], ...] * weight[target], reduced as the node asks; ignore_index counts nothing."""
    if logp.ndim < 2 or target.shape != (logp.shape[0], *logp.shape[2:]):
        raise fail(ctx, "target must have the input's shape without the class dim")
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise fail(ctx, f"unknown reduction {reduction!r}")
    t = target if target.dtype in (DType.int64, DType.int32) else target.cast(DType.int64)
    ignore = ctx.attr("ignore_index")
    keep = None
    if ignore is not None:
        keep = t.ne(int(ignore))
        t = keep.where(t, Tensor.full(t.shape, 0, t.dtype))
    picked = logp.gather(t.unsqueeze([1]), 1).squeeze([1]).neg()
    w = None
    if weight is not None:
        w = gather_axis(weight.cast(logp.dtype), t, 0)
    if keep is not None:
        k = keep.cast(logp.dtype)
        w = k if w is None else w.mul(k)
    loss = picked if w is None else picked.mul(w)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    if w is None:
        return total.mul(1.0 / loss.numel)
    return total.div(w.sum())


@op("NegativeLogLikelihoodLoss")
def nll_loss_op(ctx: OpContext) -> Tensor:
    return _nll(ctx, need(ctx, 0), need(ctx, 1), ctx.input(2))


@op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_op(ctx: OpContext) -> list[Tensor | None]:
    scores = need(ctx, 0)
    logp = scores.log_softmax(1)
    return [_nll(ctx, logp, need(ctx, 1), ctx.input(2)), logp if wants(ctx, 1) else None]
