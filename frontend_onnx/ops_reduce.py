"""Reduce* and ArgMax/ArgMin."""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, Tensor
from .importer import with_shape
from .ops_shape import _axes, _norm_axis
from .registry import OpContext, op

# the opset where each op's axes moved from an attribute to an input
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def prod(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    """Exact product: pairwise multiplication of halves along the flattened reduced axes."""
    rest = [k for k in range(x.ndim) if k not in axes]
    n = math.prod(x.shape[a] for a in axes)
    y = x.permute(rest + list(axes)).reshape([x.shape[k] for k in rest] + [n])
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        y = y.pad([(0, 0)] * len(rest) + [(size - n, 0)], value=1)
    lead = [(0, x.shape[k]) for k in rest]
    while size > 1:
        size //= 2
        y = y.shrink(lead + [(0, size)]).mul(y.shrink(lead + [(size, 2 * size)]))
    out_shape = [1 if k in axes else s for k, s in enumerate(x.shape)] if keepdim else [x.shape[k] for k in rest]
    return y.reshape(out_shape)


def _empty_identity(kind: str, dtype: DType):
    big = float("inf") if dtype.is_float else np.iinfo(dtype.np).max if dtype.is_int else 1
    return {
        "ReduceSum": 0, "ReduceSumSquare": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceProd": 1,
        "ReduceMax": -big if dtype is not DType.bool else 0, "ReduceMin": big,
        "ReduceLogSum": float("-inf"), "ReduceLogSumExp": float("-inf"), "ReduceMean": float("nan"),
    }[kind]


def logsumexp(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    m = x.max(axes, keepdim=True)
    m = m.isinf().where(Tensor.full(m.shape, 0, m.dtype), m)
    s = x.sub(m.expand(x.shape)).exp().sum(axes, keepdim=True).log().add(m)
    return s if keepdim else s.reshape([d for k, d in enumerate(x.shape) if k not in axes])


_REDUCE = {
    "ReduceSum": lambda x, a, k: x.sum(a, k),
    "ReduceMean": lambda x, a, k: x.mean(a, k),
    "ReduceMax": lambda x, a, k: x.max(a, k),
    "ReduceMin": lambda x, a, k: x.min(a, k),
    "ReduceProd": prod,
    "ReduceSumSquare": lambda x, a, k: x.mul(x).sum(a, k),
    "ReduceL1": lambda x, a, k: x.abs().sum(a, k),
    "ReduceL2": lambda x, a, k: x.mul(x).sum(a, k).sqrt(),
    "ReduceLogSum": lambda x, a, k: x.sum(a, k).log(),
    "ReduceLogSumExp": logsumexp,
}


@op(*_REDUCE)
def reduce_op(ctx: OpContext) -> Tensor:
    kind = ctx.node.op_type
    x = ctx.inputs[0]
    axes = _axes(ctx, _AXES_INPUT_SINCE.get(kind, 18))
    keepdim = bool(ctx.attr("keepdims", 1))
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.ndim))
    axes = tuple(sorted({_norm_axis(a, x.ndim) for a in axes}))
    shape = [1 if k in axes else s for k, s in enumerate(x.shape)] if keepdim else \
        [s for k, s in enumerate(x.shape) if k not in axes]
    if any(x.shape[a] == 0 for a in axes):
        dtype = x.dtype
        value = _empty_identity(kind, dtype)
        if dtype.is_int and isinstance(value, float) and not math.isfinite(value):
            dtype = DType.float32
        return Tensor.full(shape, value, dtype)
    return with_shape(_REDUCE[kind](x, axes, keepdim), shape)


@op("ArgMax", "ArgMin")
def arg_op(ctx: OpContext) -> Tensor:
    x = ctx.inputs[0]
    axis = _norm_axis(int(ctx.attr("axis", 0)), x.ndim)
    keepdim = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    if x.dtype is DType.bool:
        x = x.cast(DType.int32)
    if ctx.node.op_type == "ArgMin":
        x = x.neg()
    shape = [1 if k == axis else s for k, s in enumerate(x.shape)] if keepdim else \
        [s for k, s in enumerate(x.shape) if k != axis]
    return with_shape(x.argmax(axis, keepdim, last), shape)
