"""onnxruntime's com.microsoft.nchwc ops, which its optimizer writes into a model it saves at its default (all)
level: ReorderInput / ReorderOutput around convs and pools on channel-blocked activations. A blocked activation is
read as NCHW with its channels rounded up to the block (the padding channels zero before any activation), the
blocked weights put back to OIHW at import; the ops are then Conv (with onnxruntime's fused sum and activation),
the pools and Resize, and the layout is luminal's own to choose again."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from ..ir import Tensor
from ..target import host_simd_width
from .ops_nn_conv import (
    average_pool_op,
    fused_conv_op,
    global_average_pool_op,
    global_max_pool_op,
    max_pool_op,
)
from .ops_nn_resize import resize
from .ops_nn_util import channels_first, channels_last
from .registry import OpContext, fail, need, need_const, op

NCHWC = "com.microsoft.nchwc"


def _host_block() -> int:
    """The block onnxruntime's NCHWc kernels take on this machine: 16 floats with AVX-512, else 8."""
    return 16 if host_simd_width() >= 16 else 8


def block_size(g: onnx.GraphProto) -> int:
    """The channel block of the model's nchwc ops: every blocked conv's output channels are a multiple of it, 16
    (AVX-512) or 8 (AVX2). Where both fit, the one onnxruntime would take on this machine (its own reading of
    such a model: the format is the machine's that saved it)."""
    dims = {t.name: list(t.dims) for t in g.initializer}
    outs = [dims[n.input[1]][0] for n in g.node
            if n.domain == NCHWC and n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in dims]
    return 8 if any(c % 16 for c in outs) else _host_block()


def _block(ctx: OpContext) -> int:
    block = ctx.importer.nchwc_block if ctx.importer is not None else 0
    return block or _host_block()


def _unblocked_weight(ctx: OpContext, x: Tensor) -> np.ndarray:
    """The conv's weight back in OIHW: stored [O/B][I][kh][kw][B] where the input is not blocked (a conv over the
    model's NCHW input) or the conv is depthwise, else [O/B][I/B][kh][kw][B in][B out]."""
    w = need_const(ctx, 1)
    b, group = _block(ctx), int(ctx.attr("group", 1))
    if w.ndim != 4 or w.shape[0] % b:
        raise fail(ctx, f"weight {list(w.shape)} is not blocked by {b} output channels")
    o, i, kh, kw = w.shape
    if group == 1 and i % b == 0 and x.shape[1] == i:
        return w.reshape(o // b, i // b, kh, kw, b, b).transpose(0, 5, 1, 4, 2, 3).reshape(o, i, kh, kw)
    if group not in (1, o):
        raise fail(ctx, f"group {group} is neither 1 nor depthwise")
    return w.reshape(o // b, i, kh, kw, b).transpose(0, 4, 1, 2, 3).reshape(o, i, kh, kw)


@op("Conv", domain=NCHWC)
def nchwc_conv(ctx: OpContext) -> Tensor:
    """activation(conv(X, W) + B + Sum) over the blocked channels."""
    x = need(ctx, 0)
    w = Tensor.const(_unblocked_weight(ctx, x).astype(x.dtype.np, copy=False))
    return fused_conv_op(dataclasses.replace(ctx, inputs=[x, w, *ctx.inputs[2:]]))


@op("ReorderInput", domain=NCHWC)
def reorder_input(ctx: OpContext) -> Tensor:
    """NCHW (NHWC with channels_last) to blocked: channels padded with zeros to a multiple of the block."""
    x = need(ctx, 0)
    if x.ndim < 3:
        raise fail(ctx, f"input rank {x.ndim} has no spatial dims")
    if int(ctx.attr("channels_last", 0)):
        x = channels_first(x)
    b = _block(ctx)
    extra = -x.shape[1] % b
    return x.pad([(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)) if extra else x


@op("ReorderOutput", domain=NCHWC)
def reorder_output(ctx: OpContext) -> Tensor:
    """Blocked to NCHW (NHWC with channels_last): the first ``channels`` channels."""
    x = need(ctx, 0)
    channels = int(ctx.attr("channels", x.shape[1]))
    if not 0 < channels <= x.shape[1]:
        raise fail(ctx, f"channels {channels} is not within the blocked {x.shape[1]}")
    y = x.shrink([(0, x.shape[0]), (0, channels)] + [(0, s) for s in x.shape[2:]])
    return channels_last(y) if int(ctx.attr("channels_last", 0)) else y


# the pools over blocked channels are the default domain's, channel by channel as over NCHW
for _name, _pool in (("MaxPool", max_pool_op), ("AveragePool", average_pool_op),
                     ("GlobalMaxPool", global_max_pool_op), ("GlobalAveragePool", global_average_pool_op)):
    op(_name, domain=NCHWC)(_pool)


@op("Upsample", domain=NCHWC)
def nchwc_upsample(ctx: OpContext) -> Tensor:
    """Resize by the integer ``scales`` (one per dim), nearest or linear, asymmetric coordinates unless named."""
    x = need(ctx, 0)
    scales = [float(s) for s in ctx.attr("scales") or []]
    if len(scales) != x.ndim:
        raise fail(ctx, f"scales {scales} do not give one per dim of the rank-{x.ndim} input")
    attrs = {"mode": ctx.attr("mode", "nearest"),
             "coordinate_transformation_mode": ctx.attr("coordinate_transformation_mode", "asymmetric"),
             "nearest_mode": "floor"}
    return resize(dataclasses.replace(ctx, attrs=attrs), x, scales, None, None, legacy=False)
