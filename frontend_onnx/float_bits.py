"""IEEE-754 binary32 fields from arithmetic: a float32's bits as an int32 and back, for BitCast (the IR has no
reinterpreting cast). Every step is exact: powers of two are products of exact powers, and a value divided by
the power of two below it keeps its 24 significant bits."""

from __future__ import annotations

import math
from functools import reduce

from ..ir import DType, Tensor

_MANTISSA = 1 << 23
_SIGN = 1 << 31
_NAN = 0x7FC00000  # the quiet NaN onnxruntime and numpy write


def _pow2(e: Tensor) -> Tensor:
    """2^e, exactly, for an int32 tensor e in [-126, 127]: 2^-126 times 2^(2^b) for each set bit b of e + 126
    (2^128, which float32 lacks, as 2^64 twice), smallest first so no product leaves the range."""
    j = e.add(126)
    out = Tensor.full(e.shape, 2.0 ** -126, DType.float32)
    one = Tensor.full(e.shape, 1.0, DType.float32)
    for b in range(8):
        bit = j.mod(1 << (b + 1)).lt(1 << b).logical_not()
        for factor in [2.0 ** 64] * 2 if b == 7 else [2.0 ** (1 << b)]:
            out = out.mul(bit.where(Tensor.full(e.shape, factor, DType.float32), one))
    return out


def bits_of_float32(x: Tensor) -> Tensor:
    """The int32 whose bits are float32 x's: sign, biased exponent and mantissa summed in their places."""
    x = x.cast(DType.float32)
    negative = x.lt(0) | (x.eq(0) & x.recip().lt(0))  # -0.0 is below nothing but its reciprocal is -inf
    a = x.abs()
    safe = (a.lt(2.0 ** -126) | a.eq(math.inf) | x.isnan()).where(Tensor.full(x.shape, 1.0, DType.float32), a)
    e = safe.log().mul(1 / math.log(2)).floor().cast(DType.int32)
    e = e.maximum(-126).minimum(127)
    p = _pow2(e)  # log2 may be one off near a power of two: put 2^e <= a < 2^(e+1)
    low = p.gt(safe)
    e, p = low.where(e.sub(1), e), low.where(p.mul(0.5), p)
    high = p.mul(2).le(safe) & e.lt(127)
    e, p = high.where(e.add(1), e), high.where(p.mul(2), p)
    normal = safe.div(p).sub(1).mul(float(_MANTISSA)).cast(DType.int32).add(e.add(127).mul(_MANTISSA))
    # 2^-149 is a subnormal's unit; the where keeps the two scalings from being folded into 2^149, beyond float32
    tiny = a.lt(2.0 ** -126)
    subnormal = tiny.where(a.mul(2.0 ** 126), Tensor.full(x.shape, 0.0, DType.float32)).mul(float(_MANTISSA))
    subnormal = subnormal.cast(DType.int32)
    inf = Tensor.full(x.shape, 255 * _MANTISSA, DType.int32)
    magnitude = reduce(lambda acc, case: case[0].where(case[1], acc),
                       [(tiny, subnormal), (a.eq(math.inf), inf)], normal)
    signed = negative.where(magnitude.add(-_SIGN), magnitude)
    return x.isnan().where(Tensor.full(x.shape, _NAN, DType.int32), signed)


def float32_of_bits(x: Tensor) -> Tensor:
    """The float32 whose bits are int32 x's."""
    x = x.cast(DType.int32)
    negative = x.lt(0)
    u = negative.where(x.sub(-_SIGN), x)  # the low 31 bits
    m = u.mod(_MANTISSA)
    biased = u.sub(m).cast(DType.float32).mul(1.0 / _MANTISSA).cast(DType.int32)  # exact: 8 significant bits
    fraction = m.cast(DType.float32).mul(1.0 / _MANTISSA)
    clamped = biased.maximum(1).minimum(254)
    normal = fraction.add(1.0).mul(_pow2(clamped.sub(127)))
    subnormal = m.cast(DType.float32).mul(2.0 ** -126).mul(1.0 / _MANTISSA)
    special = m.eq(0).where(Tensor.full(x.shape, math.inf, DType.float32), Tensor.full(x.shape, math.nan,
                                                                                          DType.float32))
    value = biased.eq(0).where(subnormal, biased.eq(255).where(special, normal))
    return negative.where(value.neg(), value)
