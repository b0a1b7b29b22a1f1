"""Elementwise ONNX ops: math, activations, comparisons, logic, casts."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np
from onnx import TensorProto, helper

from ..ir import DType, Tensor, broadcast_shape
from .float_bits import bits_of_float32, float32_of_bits
from .importer import const_tensor, onnx_dtype
from .registry import MS, OpContext, fail, need, op


def _x(ctx: OpContext) -> Tensor:
    return need(ctx, 0)


def _full_like(t: Tensor, value) -> Tensor:
    return Tensor.full(t.shape, value, t.dtype)


def _series(x: Tensor, coeffs: list[float]) -> Tensor:
    """x * (c0 + c1 x^2 + c2 x^4 + ...), for odd functions near 0."""
    x2 = x.mul(x)
    p = _full_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p.mul(x2).add(c)
    return x.mul(p)


def sinh(x: Tensor) -> Tensor:
    big = x.exp().sub(x.neg().exp()).mul(0.5)
    return x.abs().lt(0.25).where(_series(x, [1, 1 / 6, 1 / 120, 1 / 5040]), big)


def cosh(x: Tensor) -> Tensor:
    return x.exp().add(x.neg().exp()).mul(0.5)


def asinh(x: Tensor) -> Tensor:
    a = x.abs()
    big = a.add(a.mul(a).add(1).sqrt()).log()
    big = x.lt(0).where(big.neg(), big)
    return a.lt(0.125).where(_series(x, [1, -1 / 6, 3 / 40, -5 / 112]), big)


def acosh(x: Tensor) -> Tensor:
    return x.add(x.mul(x).sub(1).sqrt()).log()


def atanh(x: Tensor) -> Tensor:
    big = x.add(1).div(x.neg().add(1)).log().mul(0.5)
    return x.abs().lt(0.125).where(_series(x, [1, 1 / 3, 1 / 5, 1 / 7, 1 / 9]), big)


def expm1(x: Tensor) -> Tensor:
    return x.abs().lt(1e-3).where(x.mul(x.mul(0.5).add(1)), x.exp().sub(1))


def sign(x: Tensor) -> Tensor:
    """Tensor.sign, keeping NaN (as onnxruntime does)."""
    return x.isnan().where(x, x.sign()) if x.dtype.is_float else x.sign()


_UNARY = {
    "Abs": Tensor.abs, "Neg": Tensor.neg, "Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt,
    "Reciprocal": Tensor.recip, "Sin": Tensor.sin, "Cos": Tensor.cos, "Tan": Tensor.tan, "Asin": Tensor.asin,
    "Acos": Tensor.acos, "Atan": Tensor.atan, "Sinh": sinh, "Cosh": cosh, "Asinh": asinh, "Acosh": acosh,
    "Atanh": atanh, "Tanh": Tensor.tanh, "Erf": Tensor.erf, "Sigmoid": Tensor.sigmoid, "Relu": Tensor.relu,
    "Sign": sign, "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round,
    "Softplus": Tensor.softplus, "Not": Tensor.logical_not, "IsNaN": Tensor.isnan,
}


@op(*_UNARY)
def unary(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    if ctx.node.op_type == "Abs" and x.dtype is DType.bool:
        return x
    return _UNARY[ctx.node.op_type](x)


@op("Identity")
def identity(ctx: OpContext) -> list[Tensor]:
    """Its input, a tensor or (opset 14 on) a sequence: one output either way (a sequence is a list of tensors)."""
    return [_x(ctx)]


def _both_const_ints(a: Tensor, b: Tensor) -> bool:
    return a.is_const and b.is_const and a.dtype.is_int and b.dtype.is_int


def divide(a: Tensor, b: Tensor) -> Tensor:
    if _both_const_ints(a, b):
        # shape arithmetic: exact in int64 (the primitive form is exact only below 2**24)
        x, y = a.numpy().astype(np.int64), b.numpy().astype(np.int64)
        if (y == 0).any():
            raise ValueError("integer division by zero")
        q = np.abs(x) // np.abs(y) * np.sign(x) * np.sign(y)
        return const_tensor(q, a.dtype if a.dtype == b.dtype else DType.int64)
    return a.div(b)  # integers truncate toward zero (Tensor.int_div), exact while |a| < 2**24


@op("IsInf")
def isinf(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    if not x.dtype.is_float:
        return Tensor.full(x.shape, False, DType.bool)
    return x.isinf(bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1)))


def _or(v, default: float) -> float:
    return default if v is None else v


# activations by ONNX op name, lower case (RNN ops and FusedGemm name them so), as f(x, alpha, beta);
# an absent alpha or beta takes the op's default
ACTIVATIONS = {
    "relu": lambda x, a, b: x.relu(),
    "tanh": lambda x, a, b: x.tanh(),
    "sigmoid": lambda x, a, b: x.sigmoid(),
    "softplus": lambda x, a, b: x.softplus(),
    "softsign": lambda x, a, b: x.div(x.abs().add(1)),
    "affine": lambda x, a, b: x.mul(_or(a, 1.0)).add(_or(b, 0.0)),
    "scaledtanh": lambda x, a, b: x.mul(_or(b, 1.0)).tanh().mul(_or(a, 1.0)),
    "elu": lambda x, a, b: x.lt(0).where(expm1(x).mul(_or(a, 1.0)), x),
    "leakyrelu": lambda x, a, b: x.lt(0).where(x.mul(_or(a, 0.01)), x),
    "thresholdedrelu": lambda x, a, b: x.gt(_or(a, 1.0)).where(x, _full_like(x, 0)),
    "hardsigmoid": lambda x, a, b: x.mul(_or(a, 0.2)).add(_or(b, 0.5)).maximum(0).minimum(1),
    "hardswish": lambda x, a, b: x.mul(x.mul(1.0 / 6).add(0.5).maximum(0).minimum(1)),
}


def activation(name: str, x: Tensor, alpha: float | None = None, beta: float | None = None) -> Tensor:
    """The activation ``name`` (an ONNX op name, any case) applied to ``x``."""
    fn = ACTIVATIONS.get(name.lower())
    if fn is None:
        raise NotImplementedError(f"activation {name[:40]!r}")
    return fn(x, alpha, beta)


def fused_activation(ctx: OpContext, y: Tensor, params: list[float | None]) -> Tensor:
    """onnxruntime's activation fused into a node (FusedGemm, FusedConv), named by its ``activation`` attribute:
    ``params`` its alpha and beta, or Clip's bounds."""
    name = str(ctx.attr("activation") or "Identity")
    if name == "Identity":
        return y
    if name == "Clip":
        lo, hi = [*params, None, None][:2]
        return y.maximum(-math.inf if lo is None else lo).minimum(math.inf if hi is None else hi)
    if name.lower() not in ACTIVATIONS:
        raise fail(ctx, f"unsupported activation {name[:40]!r}")
    return activation(name, y, *params[:2])


@op("Softsign", "Elu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid")
def activation_op(ctx: OpContext) -> Tensor:
    return activation(ctx.node.op_type, _x(ctx), ctx.attr("alpha"), ctx.attr("beta"))


@op("Selu")
def selu(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return x.gt(0).where(x, expm1(x).mul(alpha)).mul(gamma)


@op("Celu")
def celu(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    alpha = ctx.attr("alpha", 1.0)
    return x.gt(0).where(x, expm1(x.mul(1.0 / alpha)).mul(alpha))


def _channel_slope(x: Tensor, slope: Tensor) -> Tensor:
    """PRelu's slope broadcast to ``x``. Numpy broadcasting first; failing that, a 1-D
    slope with one value per channel (PRelu before opset 7, and PyTorch's PReLU) applies
    along the channel axis, 1."""
    try:
        broadcast_shape(x.shape, slope.shape)
        return slope
    except ValueError:
        if slope.ndim == 1 and x.ndim >= 2 and x.shape[1] == slope.shape[0]:
            return slope.reshape((slope.shape[0],) + (1,) * (x.ndim - 2))
        raise ValueError(f"slope of shape {list(slope.shape)} neither broadcasts to the input's "
                         f"{list(x.shape)} nor has one value per channel") from None


@op("PRelu")
def prelu(ctx: OpContext) -> Tensor:
    x, slope = need(ctx, 0), need(ctx, 1)
    slope = _channel_slope(x, slope)
    return x.lt(0).where(x.mul(slope.cast(x.dtype)), x)


@op("HardSwish")
def hard_swish(ctx: OpContext) -> Tensor:
    return activation("HardSwish", _x(ctx))


@op("Shrink")
def shrink(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    zero = _full_like(x, 0)
    return x.lt(-lambd).where(x.add(bias), x.gt(lambd).where(x.sub(bias), zero))


# -- binary ----------------------------------------------------------------------

def remainder(a: Tensor, b: Tensor | int, fmod: bool = False) -> Tensor:
    """a mod b: C's truncated remainder with ``fmod``, else Python's, whose nonzero remainder takes the divisor's
    sign (for a positive int ``b``: in [0, b))."""
    r = a.mod(b)
    if fmod:
        return r
    if isinstance(b, int):
        if b > 0:
            return r.lt(0).where(r.add(b), r)
        b = Tensor.full(r.shape, b, r.dtype)
    b = b.cast(r.dtype).expand(r.shape)
    fix = r.ne(0) & r.lt(0).ne(b.lt(0))
    return fix.where(r.add(b), r)


_BINARY = {
    "Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul, "Div": divide, "Equal": Tensor.eq,
    "Less": Tensor.lt, "LessOrEqual": Tensor.le, "Greater": Tensor.gt,
    "GreaterOrEqual": Tensor.ge, "And": Tensor.__and__, "Or": Tensor.__or__, "Xor": Tensor.__xor__,
}


@op(*_BINARY)
def binary(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    return _BINARY[ctx.node.op_type](a, b)


def _int_width(ctx: OpContext, i: int) -> tuple[int, bool]:
    """Bits and signedness of integer input i as the model writes it (the IR computes the narrow ones wider)."""
    dt = ctx.written(i)
    if dt is None or dt.kind not in "iu":
        dt = need(ctx, i).dtype.np
    if dt.kind not in "iu":
        raise NotImplementedError(f"bitwise ops on {dt.name}")
    # uint64 lives in int64 with its bit pattern kept: its bits are read as a signed type's
    return dt.itemsize * 8, dt.kind == "i" or dt.itemsize == 8


def _bits(x: Tensor, width: int, signed: bool) -> list[Tensor]:
    """x's two's-complement bits, lowest first, as 0/1 tensors of x's dtype: bit k is whether x mod 2^(k+1) (floored)
    reaches 2^k; a signed type's top bit is its sign, and the one below it is read without 2^(width-1), which does
    not fit."""
    out = []
    for k in range(width):
        if signed and k == width - 1:
            b = x.lt(0)
        elif signed and k == width - 2:
            half = 1 << k
            b = x.lt(0).where(x.add(half).lt(0).logical_not(), x.lt(half).logical_not())
        else:
            b = remainder(x, 1 << (k + 1)).lt(1 << k).logical_not()
        out.append(b.cast(x.dtype))
    return out


def _from_bits(bits: list[Tensor], signed: bool) -> Tensor:
    top = len(bits) - 1
    terms = [b.mul(-(1 << k) if signed and k == top else 1 << k) for k, b in enumerate(bits)]
    return reduce(Tensor.add, terms)


_BITWISE = {"BitwiseAnd": lambda a, b: a.mul(b), "BitwiseOr": lambda a, b: a.add(b).sub(a.mul(b)),
            "BitwiseXor": lambda a, b: a.add(b).mod(2)}


@op(*_BITWISE)
def bitwise(ctx: OpContext) -> Tensor:
    """Integer bitwise ops bit by bit from Mod and LessThan: the IR has no bit operations."""
    a, b = need(ctx, 0), need(ctx, 1)
    if a.dtype != b.dtype or a.dtype.is_float or a.dtype is DType.bool:
        raise ValueError(f"needs two integer inputs of one type, got {a.dtype.name} and {b.dtype.name}")
    width, signed = _int_width(ctx, 0)
    f = _BITWISE[ctx.node.op_type]
    ctx.declare(0, ctx.written(0) or a.dtype.np)
    return _from_bits([f(x, y) for x, y in zip(_bits(a, width, signed), _bits(b, width, signed))], signed)


def _shift_left(x: Tensor, bits: list[Tensor], k: int, signed: bool) -> Tensor:
    """x << k for 0 < k < width, wrapped to width bits: the low width-k-1 bits move up k places and the bit above
    them becomes the top bit (the sign of a signed type), so no intermediate leaves the type."""
    width = len(bits)
    top = 1 << (width - 1)
    return remainder(x, 1 << (width - k - 1)).mul(1 << k).add(bits[width - k - 1].mul(-top if signed else top))


def _div_pow2(y: Tensor, k: int) -> Tensor:
    """y / 2^k for a multiple y of 2^k, exactly: 23 bits of the quotient at a time, as the IR's integer division
    is exact below 2^24 (it goes through float32)."""
    if k + 23 >= y.dtype.np.itemsize * 8 - 1:
        return y.div(1 << k)
    low = remainder(y, 1 << (k + 23))
    return low.div(1 << k).add(_div_pow2(y.sub(low), k + 23).mul(1 << 23))


def _shift_right(x: Tensor, k: int, logical: bool) -> Tensor:
    """x >> k for 0 < k < 63: floored (arithmetic); ``logical``: a uint64 held in int64, whose top bits enter as 0."""
    if logical and k == 63:
        return x.lt(0).cast(x.dtype)
    out = _div_pow2(x.sub(remainder(x, 1 << k)), k)
    if not logical:
        return out
    fill = x.lt(0).cast(x.dtype)  # the pattern's value is 2^64 more: 2^(64-k) more after the shift
    return out.add(fill.mul(1 << 62)).add(fill.mul(1 << 62)) if k == 1 else out.add(fill.mul(1 << (64 - k)))


@op("BitShift")
def bit_shift(ctx: OpContext) -> Tensor:
    """x shifted by s bits, one candidate per shift amount chosen by s: the IR has no bit operations. A shift
    below 0 or of the width or more leaves 0 to the left and the sign's fill to the right."""
    x, s = need(ctx, 0), need(ctx, 1)
    if x.dtype.is_float or x.dtype is DType.bool:
        raise ValueError(f"needs integer inputs, got {x.dtype.name}")
    width, signed = _int_width(ctx, 0)
    written = ctx.written(0)
    unsigned = written is not None and written.kind == "u"
    left = ctx.attr("direction") == "LEFT"
    shape = broadcast_shape(x.shape, s.shape)
    x, s = x.expand(shape), s.cast(x.dtype).expand(shape)
    ctx.declare(0, written or x.dtype.np)
    bits = _bits(x, width, signed) if left else []
    fill = _full_like(x, 0) if left or unsigned else x.lt(0).where(_full_like(x, -1), _full_like(x, 0))
    out = fill
    for k in range(width if left or unsigned else width - 1):
        if k == 0:
            shifted = x
        elif left:
            shifted = _shift_left(x, bits, k, signed)
        else:
            shifted = _shift_right(x, k, unsigned and width == 64)
        out = s.eq(k).where(shifted, out)
    return out


@op("BitwiseNot")
def bitwise_not(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    if x.dtype.is_float or x.dtype is DType.bool:
        raise ValueError(f"needs an integer input, got {x.dtype.name}")
    width, signed = _int_width(ctx, 0)
    ctx.declare(0, ctx.written(0) or x.dtype.np)
    return _full_like(x, -1 if signed else (1 << width) - 1).sub(x)  # no bit of -1 - x overflows


@op("Pow")
def power(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    if _both_const_ints(a, b) and (b.numpy() >= 0).all():
        return const_tensor(np.power(a.numpy().astype(np.int64), b.numpy().astype(np.int64)), a.dtype)
    return a.pow(b).cast(a.dtype)


@op("Mod")
def mod(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    return remainder(a, b, bool(ctx.attr("fmod", 0)))


@op("Max", "Min", "Sum", "Mean")
def variadic(ctx: OpContext) -> Tensor:
    xs = [t for t in ctx.inputs if t is not None]
    if not xs:
        raise ValueError("needs at least one input")
    kind = ctx.node.op_type
    f = {"Max": Tensor.maximum, "Min": Tensor.minimum, "Sum": Tensor.add, "Mean": Tensor.add}[kind]
    if len(xs) == 1:
        return xs[0]
    out = reduce(f, xs)
    return out.mul(1.0 / len(xs)) if kind == "Mean" else out


@op("Clip")
def clip(ctx: OpContext) -> Tensor:
    x = _x(ctx)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
    else:
        lo, hi = ctx.input(1), ctx.input(2)
    if lo is not None:
        x = x.maximum(lo if not isinstance(lo, Tensor) else lo.cast(x.dtype).reshape(()))
    if hi is not None:
        x = x.minimum(hi if not isinstance(hi, Tensor) else hi.cast(x.dtype).reshape(()))
    return x


@op("Where")
def where(ctx: OpContext) -> Tensor:
    c, a, b = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    return c.where(a, b)


@op("Cast")
def cast(ctx: OpContext) -> Tensor:
    to = ctx.attr("to")
    if to is None:
        raise ValueError("missing 'to'")
    if isinstance(to, str):  # opset 1-5 named the type
        if to.upper() not in TensorProto.DataType.keys():  # noqa: SIM118 (an enum wrapper, no __contains__)
            raise ValueError(f"unknown type {to[:20]!r}")
        to = TensorProto.DataType.Value(to.upper())
    return cast_wrapped(_x(ctx), ctx.written(0), int(to))


def cast_wrapped(x: Tensor, src: np.dtype | None, to: int) -> Tensor:
    """``x`` (of ONNX type ``src`` where known) cast to ONNX type ``to``; an integer type the IR computes wider (int8
    to uint32) takes the value modulo its range, as C's cast, numpy and onnxruntime do (300 as int8 is 44), where
    ``src``'s values may fall outside it (a float is truncated first)."""
    dtype = onnx_dtype(to)
    dst = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    if dst.kind not in "iu" or dtype.np.itemsize <= dst.itemsize or np.can_cast(src or x.dtype.np, dst, "safe"):
        return x.cast(dtype)
    if x.dtype.is_float:
        x = x.cast(DType.int64)
    x = x.cast(dtype)  # a wider int wraps at 2^32 or 2^64 first, a multiple of the span
    span = 1 << (8 * dst.itemsize)
    r = remainder(x, span)
    return r if dst.kind == "u" else r.ge(span >> 1).where(r.sub(span), r)


@op("BitCast")
def bit_cast(ctx: OpContext) -> Tensor:
    """An integer's bits read as the other integer type of its width: a signed value below 0 gains 2^width, an
    unsigned one from 2^(width-1) up loses it; float32 and the 32-bit integers through their IEEE fields."""
    x, to = need(ctx, 0), int(ctx.attr("to", 0))
    src = ctx.written(0) or x.dtype.np
    try:
        dst = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, ValueError, TypeError):
        raise fail(ctx, f"unknown type {to}") from None
    if src.kind == "b" and dst.kind in "iu" and dst.itemsize == 1:  # a bool's byte is 0 or 1
        ctx.declare(0, dst)
        return x.cast(onnx_dtype(to))
    if {src.name, dst.name} in ({"float32", "int32"}, {"float32", "uint32"}):
        ctx.declare(0, dst)
        if src.name == "float32":
            bits = bits_of_float32(x).cast(onnx_dtype(to))
            return bits if dst.kind == "i" else bits.lt(0).where(bits.add(1 << 32), bits)
        return float32_of_bits(x if src.kind == "i" else x.lt(1 << 31).where(x, x.sub(1 << 32)))
    if src.kind not in "iu" or dst.kind not in "iu" or src.itemsize != dst.itemsize:
        raise fail(ctx, f"{src.name} to {dst.name}: only between integer types of one width and between float32 "
                        "and 32-bit integers (double is computed as float32, whose bits are not the double's)")
    ctx.declare(0, dst)
    width, out = src.itemsize * 8, onnx_dtype(to)
    if width == 64 or src.kind == dst.kind:  # uint64 lives in int64 as its bit pattern
        return x.cast(out)
    if src.kind == "i":
        x = x.cast(out)
        return x.lt(0).where(x.add(1 << width), x)
    return x.lt(1 << (width - 1)).where(x, x.sub(1 << width)).cast(out)


@op("CastLike")
def cast_like(ctx: OpContext) -> Tensor:
    target = ctx.written(1)
    if target is None:
        return _x(ctx).cast(need(ctx, 1).dtype)
    ctx.declare(0, target)
    return cast_wrapped(_x(ctx), ctx.written(0), helper.np_dtype_to_tensor_dtype(target))


# -- com.microsoft activations (onnxruntime's fused forms) ------------------------------------


def gelu_erf(x: Tensor) -> Tensor:
    return x.mul(x.mul(0.7071067811865476).erf().add(1)).mul(0.5)


def gelu_tanh(x: Tensor) -> Tensor:
    inner = x.add(x.mul(x).mul(x).mul(0.044715)).mul(0.7978845608028654)
    return x.mul(inner.tanh().add(1)).mul(0.5)


def _biased(ctx: OpContext) -> Tensor:
    x, bias = need(ctx, 0), ctx.input(1)
    return x if bias is None else x.add(bias)


@op("Gelu", domain=MS)
def ms_gelu(ctx: OpContext) -> Tensor:
    return gelu_erf(need(ctx, 0))


@op("BiasGelu", domain=MS)
def ms_bias_gelu(ctx: OpContext) -> Tensor:
    return gelu_erf(_biased(ctx))


@op("FastGelu", domain=MS)
def ms_fast_gelu(ctx: OpContext) -> Tensor:
    return gelu_tanh(_biased(ctx))


def swish(x: Tensor, alpha: float) -> Tensor:
    return x.mul(x.mul(alpha).sigmoid())


@op("QuickGelu", domain=MS)
def ms_quick_gelu(ctx: OpContext) -> Tensor:
    return swish(need(ctx, 0), float(ctx.attr("alpha", 1.702)))


@op("BiasAdd", domain=MS)
def ms_bias_add(ctx: OpContext) -> Tensor:
    return need(ctx, 0).add(need(ctx, 1)).add(need(ctx, 2))


@op("Swish")
def swish_op(ctx: OpContext) -> Tensor:
    return swish(_x(ctx), float(ctx.attr("alpha", 1.0)))


@op("SwiGLU")
def swiglu_op(ctx: OpContext) -> Tensor:
    gate, value = need(ctx, 0), need(ctx, 1)
    if gate.shape != value.shape:
        raise ValueError(f"gate {list(gate.shape)} and value {list(value.shape)} must have one shape")
    return swish(gate, float(ctx.attr("alpha", 1.0))).mul(value)
