"""Quantised ops (QDQ and QOperator models): integer products accumulate exactly, in float32 where every
partial sum stays below 2^24 (an integer conv against constant weights, on the float kernels), else in int32;
scales and requantisation are elementwise float math. The IR computes 8- and 16-bit integers in int32, so a
quantised type is read from how the model wrote the zero point (or the input) it comes with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from onnx import TensorProto, helper

from ..ir import DType, Tensor
from .importer import onnx_dtype
from .ops_elementwise import activation
from .ops_nn_conv import average_pool_op, conv_node, global_average_pool_op, max_pool_op
from .ops_nn_index import gather_axis
from .ops_nn_norm import softmax_op
from .ops_nn_util import channels_first, channels_last
from .ops_shape import concat
from .registry import MS, OpContext, fail, need, need_const, op

# the saturation range of each quantised ONNX type
_QRANGE: dict[int, tuple[int, int]] = {
    TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
    TensorProto.INT16: (-32768, 32767), TensorProto.INT32: (-(2 ** 31), 2 ** 31 - 1)}


def _qtype(ctx: OpContext, *inputs: int, default: int | None = None) -> int:
    """The quantised ONNX type of the first of ``inputs`` whose written type the import knows."""
    for i in inputs:
        if ctx.input(i) is not None and (dt := ctx.written(i)) is not None:
            q = helper.np_dtype_to_tensor_dtype(dt)
            if q not in _QRANGE:
                raise fail(ctx, f"quantised type {TensorProto.DataType.Name(q)} is not supported")
            return q
    if default is None:
        raise fail(ctx, "the quantised type of the output is not known (no typed zero point)")
    return default


def _per_axis(p: Tensor, x: Tensor, axis: int, block: int = 0) -> Tensor:
    """A scale or zero point broadcast against x: scalar, 1-D along ``axis``, or blocked along it."""
    if p.ndim == 0 or p.numel == 1:
        return p.reshape(())
    axis %= x.ndim
    if block:
        rep = p.unsqueeze([axis + 1]).expand((*p.shape[:axis + 1], block, *p.shape[axis + 1:]))
        rep = rep.reshape((*p.shape[:axis], p.shape[axis] * block, *p.shape[axis + 1:]))
        return rep.shrink([(0, d) for d in x.shape])
    return p.reshape([p.numel if k == axis else 1 for k in range(x.ndim)])


def _centred(x: Tensor, zp: Tensor | None, axis: int = 0) -> Tensor:
    """x - zero point in int32 (the zero point a scalar or per ``axis``)."""
    v = x.cast(DType.int32)
    return v if zp is None else v.sub(_per_axis(zp, x, axis).cast(DType.int32))


def _dequant(x: Tensor, scale: Tensor, zp: Tensor | None, axis: int = 1, block: int = 0) -> Tensor:
    v = x.cast(DType.float32)
    if zp is not None:
        v = v.sub(_per_axis(zp, x, axis, block).cast(DType.float32))
    return v.mul(_per_axis(scale, x, axis, block).cast(DType.float32))


def _quant(y: Tensor, zp: Tensor | None, qtype: int, axis: int = 1, block: int = 0) -> Tensor:
    """Round half to even, add the zero point, saturate and cast: the tail of every quantisation."""
    lo, hi = _QRANGE[qtype]
    y = y.round()
    if zp is not None:
        y = y.add(_per_axis(zp, y, axis, block).cast(DType.float32))
    return y.maximum(float(lo)).minimum(float(hi)).cast(onnx_dtype(qtype))


@op("DequantizeLinear", domain=MS)  # onnxruntime's, for the 16-bit types before opset 21 had them
@op("DequantizeLinear")
def dequantize_linear(ctx: OpContext) -> Tensor:
    x, scale = need(ctx, 0), need(ctx, 1)
    out = _dequant(x, scale, ctx.input(2), int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0)))
    dt = int(ctx.attr("output_dtype", 0))
    return out.cast(onnx_dtype(dt) if dt else scale.dtype)


@op("QuantizeLinear", domain=MS)
@op("QuantizeLinear")
def quantize_linear(ctx: OpContext) -> Tensor:
    x, scale, zp = need(ctx, 0), need(ctx, 1), ctx.input(2)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if zp is not None and ctx.written(2) is None:
        raise fail(ctx, "the zero point's type is not known")
    qtype = _qtype(ctx, 2, default=int(ctx.attr("output_dtype", 0)) or TensorProto.UINT8)
    ctx.declare(0, helper.tensor_dtype_to_np_dtype(qtype))
    y = x.cast(DType.float32).div(_per_axis(scale, x, axis, block).cast(DType.float32))
    return _quant(y, zp, qtype, axis, block)


def _dynamic_quantised(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x in uint8 over the range of its values and 0: (the values and zero point as int32, the scale)."""
    x = x.cast(DType.float32)
    axes = tuple(range(x.ndim))
    hi, lo = x.max(axes).maximum(0.0), x.min(axes).minimum(0.0)
    span = hi.sub(lo)
    scale = span.eq(0.0).where(Tensor.full((), 1.0, DType.float32), span).div(255.0)
    zp = Tensor.full((), 0.0, DType.float32).sub(lo.div(scale)).maximum(0.0).minimum(255.0).round()
    y = x.div(scale).round().add(zp).maximum(0.0).minimum(255.0)
    return y.cast(DType.int32), scale, zp.cast(DType.int32)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: OpContext) -> list[Tensor]:
    y, scale, zp = _dynamic_quantised(need(ctx, 0))
    for k in range(3):
        ctx.declare(k, np.float32 if k == 1 else np.uint8)
    return [y, scale, zp]


def _scaled_product(acc: Tensor, a_scale: Tensor, b_scale: Tensor, bias: Tensor | None) -> Tensor:
    """An integer product in float: times A's scale (one) and B's (one or per column), plus the bias."""
    scale = _per_axis(b_scale, acc, -1).cast(DType.float32).mul(a_scale.reshape(()).cast(DType.float32))
    y = acc.cast(DType.float32).mul(scale)
    return y if bias is None else y.add(bias.cast(DType.float32).expand(y.shape))


@op("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(ctx: OpContext) -> Tensor:
    """onnxruntime's MatMulInteger with its scales and bias: (A - a_zp)(B - b_zp) a_scale b_scale + bias."""
    a, b, a_scale, b_scale = need(ctx, 0), need(ctx, 1), need(ctx, 2), need(ctx, 3)
    acc = _centred(a, ctx.input(4), -2).matmul(_centred(b, ctx.input(5), -1))
    return _scaled_product(acc, a_scale, b_scale, ctx.input(6))


@op("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(ctx: OpContext) -> Tensor:
    """onnxruntime's fusion of DynamicQuantizeLinear and MatMulInteger: A quantised to uint8 over its range, then
    the integer product scaled back, plus the bias."""
    a, b, b_scale = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    q, a_scale, a_zp = _dynamic_quantised(a)
    acc = q.sub(a_zp).matmul(_centred(b, ctx.input(3), -1))
    return _scaled_product(acc, a_scale, b_scale, ctx.input(4))


@op("MatMulInteger")
def matmul_integer(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    # a's zero point is per row (the second-last axis), b's per column (the last)
    return _centred(a, ctx.input(2), -2).matmul(_centred(b, ctx.input(3), -1))


def _spread(ctx: OpContext, at: int, zp_at: int) -> int | None:
    """The largest |x - zero point| input ``at`` can hold, by the 8-bit type the model writes it in; None where
    that is not known (or the type is wider)."""
    q = _qtype(ctx, at, default=TensorProto.UNDEFINED)
    if q not in (TensorProto.UINT8, TensorProto.INT8):
        return None
    lo, hi = _QRANGE[q]
    zp = ctx.input(zp_at)
    if zp is None:
        return max(-lo, hi)
    if not zp.is_const:
        return hi - lo
    z = zp.numpy().astype(np.int64)
    return int(max(np.max(np.abs(lo - z)), np.max(np.abs(hi - z))))


FLOAT_EXACT = 1 << 24  # integers of float32's exact range: sums below it add without rounding


def _int_conv(ctx: OpContext, w_at: int, w_zp_at: int, bias_at: int | None = None) -> Tensor:
    """The conv of input 0 and the weight ``w_at`` less their zero points (input 2, ``w_zp_at``), plus an int32
    bias: in float32 where every product and partial sum is an integer below FLOAT_EXACT whatever the input
    (|w - zp| summed per output channel, times the input's largest |x - zp|, plus |bias|), so the float GEMMs
    and stencils compute it exactly; else in int32."""
    x, w, bias = need(ctx, 0), need(ctx, w_at), ctx.input(bias_at) if bias_at is not None else None
    xs, wc = _centred(x, ctx.input(2)), _centred(w, ctx.input(w_zp_at), 0)
    spread = _spread(ctx, 0, 2)
    dt = DType.int32
    if spread is not None and wc.is_const and (bias is None or bias.is_const):
        bound = np.abs(wc.numpy().astype(np.int64)).reshape(wc.shape[0], -1).sum(axis=1) * spread
        if bias is not None:
            bound = bound + np.abs(bias.numpy().astype(np.int64)).reshape(-1)
        if int(bound.max(initial=0)) < FLOAT_EXACT:
            dt = DType.float32
    acc = conv_node(ctx, xs.cast(dt), wc.cast(dt))
    return acc if bias is None else acc.add(bias.cast(dt).reshape((1, -1) + (1,) * (acc.ndim - 2)))


@op("ConvInteger")
def conv_integer(ctx: OpContext) -> Tensor:
    return _int_conv(ctx, 1, 3).cast(DType.int32)


def _requant(ctx: OpContext, acc: Tensor, scale: Tensor, y_scale: Tensor, y_zp: Tensor | None, qtype: int) -> Tensor:
    """An int32 accumulator times (input scales, shaped to broadcast against it / output scale), quantised."""
    ctx.declare(0, helper.tensor_dtype_to_np_dtype(qtype))
    s = scale.cast(DType.float32).div(y_scale.cast(DType.float32).reshape(()))
    return _quant(acc.cast(DType.float32).mul(s.expand(acc.shape)), y_zp, qtype)


@op("QLinearMatMul")
def qlinear_matmul(ctx: OpContext) -> Tensor:
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (ctx.input(i) for i in range(8))
    if a is None or b is None or a_s is None or b_s is None or y_s is None:
        raise fail(ctx, "QLinearMatMul needs a, b and the three scales")
    acc = _centred(a, a_zp, -2).matmul(_centred(b, b_zp, -1))
    # a's scale is per row of a, b's per column of b; both broadcast against the product
    scale = _per_axis(a_s, acc, -2).cast(DType.float32).mul(_per_axis(b_s, acc, -1).cast(DType.float32))
    return _requant(ctx, acc, scale, y_s, y_zp, _qtype(ctx, 7, 0))


@op("QLinearConv")
def qlinear_conv(ctx: OpContext) -> Tensor:
    x, x_s, w, w_s, y_s, y_zp = (ctx.input(i) for i in (0, 1, 3, 4, 6, 7))
    if x is None or w is None or x_s is None or w_s is None or y_s is None:
        raise fail(ctx, "QLinearConv needs x, w and the three scales")
    acc = _int_conv(ctx, 3, 5, 8)
    scale = _per_axis(w_s, acc, 1).cast(DType.float32).mul(x_s.cast(DType.float32).reshape(()))
    return _requant(ctx, acc, scale, y_s, y_zp, _qtype(ctx, 7, 0))


@op("QLinearConv", domain=MS)
def ms_qlinear_conv(ctx: OpContext) -> Tensor:
    """onnxruntime's QLinearConv, whose input and output are NHWC where ``channels_last`` is set (its NHWC
    transformer's form; the weight stays OIHW)."""
    if not ctx.attr("channels_last", 0):
        return qlinear_conv(ctx)
    first = channels_first(need(ctx, 0))
    return channels_last(qlinear_conv(dataclasses.replace(ctx, inputs=[first, *ctx.inputs[1:]])))


@op("NhwcMaxPool", domain=MS)
def nhwc_max_pool(ctx: OpContext) -> Tensor:
    """onnxruntime's MaxPool over an NHWC (8-bit) tensor, what its NHWC transformer puts between quantised convs."""
    x = need(ctx, 0)
    if x.ndim < 3:
        raise fail(ctx, f"input rank {x.ndim} has no spatial dims")
    if (written := ctx.written(0)) is not None:
        ctx.declare(0, written)
    y = max_pool_op(_shim(ctx, channels_first(x)))[0]
    assert y is not None, "MaxPool gives its values"
    return channels_last(y)


# -- onnxruntime's QOperator contrib ops: dequantise the inputs, run the float op, quantise the output --

def _qlinear(float_op: Callable[..., Tensor], arity: int) -> Callable[[OpContext], Tensor]:
    """A com.microsoft QLinear<Op>: ``arity`` quantised inputs (x, scale, zero point each), then the
    output's scale and zero point."""

    def fn(ctx: OpContext) -> Tensor:
        xs = [_dequant(need(ctx, 3 * k), need(ctx, 3 * k + 1), ctx.input(3 * k + 2)) for k in range(arity)]
        return _requantise_float(ctx, float_op(ctx, *xs), 3 * arity, 2)

    return fn


def _requantise_float(ctx: OpContext, y: Tensor, at: int, x_zp: int) -> Tensor:
    """A float result quantised with the output scale and zero point at inputs ``at``, ``at + 1``."""
    qtype = _qtype(ctx, at + 1, x_zp)
    ctx.declare(0, helper.tensor_dtype_to_np_dtype(qtype))
    return _quant(y.div(need(ctx, at).cast(DType.float32).reshape(())), ctx.input(at + 1), qtype)


@op("QLinearConcat", domain=MS)
def qlinear_concat(ctx: OpContext) -> Tensor:
    n = (len(ctx.inputs) - 2) // 3
    xs = [_dequant(need(ctx, 2 + 3 * k), need(ctx, 3 + 3 * k), ctx.input(4 + 3 * k)) for k in range(n)]
    return _requantise_float(ctx, concat(xs, int(ctx.attr("axis"))), 0, 4)


def _shim(ctx: OpContext, x: Tensor) -> OpContext:
    """The node's context with a dequantised input 0 alone, for running a float op's function on it."""
    return dataclasses.replace(ctx, inputs=[x])


def _pool(f: Callable[[OpContext], Tensor]) -> Callable[..., Tensor]:
    """A pooling op's function on a dequantised input; ``channels_last=1`` inputs are NHWC."""

    def g(ctx: OpContext, x: Tensor) -> Tensor:
        if not ctx.attr("channels_last", 0):
            return f(_shim(ctx, x))
        return channels_last(f(_shim(ctx, channels_first(x))))

    return g


def _softmax(ctx: OpContext, x: Tensor) -> Tensor:
    """QLinearSoftmax: Softmax as the opset its ``opset`` attribute names defines it (before 13, over the dims
    from ``axis`` on, flattened)."""
    opset = int(ctx.attr("opset", 13))
    attrs = {"axis": ctx.attr("axis", -1 if opset >= 13 else 1)}
    return softmax_op(dataclasses.replace(ctx, inputs=[x], opset=opset, attrs=attrs))


_FLOAT_OPS: dict[str, tuple[Callable[..., Tensor], int]] = {
    "QLinearSoftmax": (_softmax, 1),
    "QLinearAdd": (lambda ctx, a, b: a.add(b), 2),
    "QLinearMul": (lambda ctx, a, b: a.mul(b), 2),
    "QLinearSigmoid": (lambda ctx, x: activation("Sigmoid", x), 1),
    "QLinearLeakyRelu": (lambda ctx, x: activation("LeakyRelu", x, ctx.attr("alpha")), 1),
    "QLinearGlobalAveragePool": (_pool(global_average_pool_op), 1),
    "QLinearAveragePool": (_pool(average_pool_op), 1),
}
for _name, (_f, _arity) in _FLOAT_OPS.items():
    op(_name, domain=MS)(_qlinear(_f, _arity))


@op("QGemm", domain=MS)
def qgemm(ctx: OpContext) -> Tensor:
    a, a_s, a_zp, b, b_s, b_zp, c, y_s, y_zp = (ctx.input(i) for i in range(9))
    if a is None or b is None or a_s is None or b_s is None:
        raise fail(ctx, "QGemm needs A, B and their scales")
    a = a.transpose() if ctx.attr("transA", 0) else a
    b = b.transpose() if ctx.attr("transB", 0) else b
    acc = _centred(a, a_zp, -2).matmul(_centred(b, b_zp, -1))  # b's zero point and scale are per column
    if c is not None:  # an int32 bias in the accumulator's scale
        acc = acc.add(c.cast(DType.int32).expand(acc.shape))
    alpha = float(ctx.attr("alpha", 1.0))
    scale = _per_axis(b_s, acc, -1).cast(DType.float32).mul(a_s.cast(DType.float32).reshape(())).mul(alpha)
    if y_s is None:  # a float output
        return acc.cast(DType.float32).mul(scale)
    return _requant(ctx, acc, scale, y_s, y_zp, _qtype(ctx, 8, 0))


def _n_bits(bits: int, block: int) -> bool:
    """Whether ``bits`` and ``block_size`` are ones onnxruntime's blocked n-bit ops take: 2, 4 or 8 bits in blocks of
    a power of two, at least 16."""
    return bits in (2, 4, 8) and block >= 16 and not block & (block - 1)


def _unpacked(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` unsigned ``bits``-bit values packed little-endian into each row of bytes."""
    shifts = (np.arange(8 // bits) * bits).astype(np.uint8)
    values = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


@op("MatMulNBits", domain=MS)
def matmul_nbits(ctx: OpContext) -> Tensor:
    """A @ B^T + bias over B of N rows of K values, 2, 4 or 8 bits each, in blocks of ``block_size`` along K with a
    scale and a zero point each (packed like B, or floats; 2^(bits-1) where absent): B is dequantised at import into
    a float weight (the products run as float32, onnxruntime's default accuracy level)."""
    a = need(ctx, 0)
    k, n, bits, block = (int(ctx.attr(name, 0)) for name in ("K", "N", "bits", "block_size"))
    if not _n_bits(bits, block) or k <= 0 or n <= 0 or a.shape[-1] != k:
        raise fail(ctx, f"K {k}, N {n}, bits {bits} and block_size {block} do not describe a weight for A "
                        f"{list(a.shape)}")
    if ctx.input(4) is not None:
        raise fail(ctx, "g_idx (act-order quantisation) is not supported")
    (_, blocks) = _blocked((n, k), 1, block)
    packed = need_const(ctx, 1)
    if packed.size != n * blocks * block * bits // 8:
        raise fail(ctx, f"B holds {packed.size} bytes, not {n} x {blocks} blocks of {block} {bits}-bit values")
    q = _unpacked(packed.astype(np.uint8).reshape(n, blocks, -1), bits, block).reshape(n, -1)[:, :k]
    zp = ctx.input(3)
    if zp is None:
        zero = Tensor.full((n, blocks), 1 << (bits - 1), DType.int32)
    elif zp.dtype.is_float:
        zero = zp.reshape((n, blocks))
    else:
        packed_zero = need_const(ctx, 3).astype(np.uint8).reshape(n, -1)
        zero = Tensor.const(_unpacked(packed_zero, bits, blocks).astype(np.int32))
    w = _dequant(Tensor.const(q.astype(np.int32)), need(ctx, 2).reshape((n, blocks)), zero, axis=1, block=block)
    y = a.matmul(w.cast(a.dtype).transpose().contiguous())
    bias = ctx.input(5)
    return y if bias is None else y.add(bias.cast(y.dtype).expand(y.shape))


@op("GatherBlockQuantized", domain=MS)
def gather_block_quantized(ctx: OpContext) -> Tensor:
    """Gather over a table quantised in blocks along ``quantize_axis`` (int4 / uint4, or uint8 holding 2-, 4- or
    8-bit values packed along its last axis), dequantised at import into a float table: (q - zero point) * scale,
    zero points 0 for int4 / uint4 and 2^(bits-1) for uint8 where absent; an index outside the axis gives zeros."""
    data, indices, scales = need_const(ctx, 0), need(ctx, 1), need(ctx, 2)
    bits, block = int(ctx.attr("bits", 4)), int(ctx.attr("block_size", 128))
    q_axis, g_axis = int(ctx.attr("quantize_axis", 1)), int(ctx.attr("gather_axis", 0))
    if not data.ndim or not _n_bits(bits, block) or not -data.ndim <= q_axis < data.ndim or \
            not -data.ndim <= g_axis < data.ndim:
        raise fail(ctx, f"bits {bits}, block_size {block}, quantize_axis {q_axis} and gather_axis {g_axis} do not "
                        f"describe a table of {data.ndim} dims")
    q_axis, g_axis = q_axis % data.ndim, g_axis % data.ndim
    written = ctx.written(0) or data.dtype
    if written.kind not in "iu":
        raise fail(ctx, f"data of {written} is not supported (int4, uint4 or uint8)")
    unsigned = written.kind == "u"
    packed = unsigned and bits < 8 and _packed_fits(data.shape, bits, block, q_axis, scales.shape, "bits" in ctx.attrs)
    q = _unpacked(data.astype(np.uint8), bits, data.shape[-1] * (8 // bits)) if packed else data
    blocks = _blocked(q.shape, q_axis, block)
    if tuple(scales.shape) != blocks:
        raise fail(ctx, f"scales {list(scales.shape)} are not one per block of {block}: {list(blocks)}")
    zero = None
    if ctx.input(3) is not None:
        zero = need_const(ctx, 3)
        zero = _unpacked(zero.astype(np.uint8), bits, blocks[-1]) if packed else zero
        if zero.shape != blocks:
            raise fail(ctx, f"zero_points {list(zero.shape)} are not one per block: {list(blocks)}")
    elif unsigned and (packed or bits == 8):
        zero = np.full(blocks, 1 << (bits - 1))
    zp = None if zero is None else Tensor.const(zero.astype(np.int32))
    table = _dequant(Tensor.const(q.astype(np.int32)), scales, zp, axis=q_axis, block=block).cast(scales.dtype)
    size = q.shape[g_axis]
    idx = indices.cast(DType.int64)
    inside = idx.ge(-size) & idx.lt(size)
    rows = gather_axis(table, inside.where(idx, Tensor.full(idx.shape, 0, DType.int64)), g_axis)
    keep = inside.reshape((1,) * g_axis + idx.shape + (1,) * (q.ndim - g_axis - 1)).expand(rows.shape)
    return keep.where(rows, Tensor.full(rows.shape, 0.0, rows.dtype))


def _blocked(shape: tuple[int, ...], axis: int, block: int) -> tuple[int, ...]:
    return tuple(-(-n // block) if k == axis else n for k, n in enumerate(shape))


def _packed_fits(shape: tuple[int, ...], bits: int, block: int, axis: int, scales: tuple[int, ...],
                 told: bool) -> bool:
    """Whether an unsigned table is uint8 holding ``bits``-bit values packed along its last axis (else uint4): the
    reading its scales fit, the packed one where both do and ``bits`` is given."""
    unpacked = (*shape[:-1], shape[-1] * (8 // bits))
    fits = [tuple(scales) == _blocked(s, axis, block) for s in (shape, unpacked)]
    return fits[1] and (told or not fits[0])
