"""How IR dtypes and constants are spelled in C: storage types, compute types, conversions."""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType

# what a buffer element is in memory
STORAGE = {
    DType.float32: "float", DType.float16: "uint16_t", DType.bfloat16: "uint16_t",
    DType.int64: "int64_t", DType.int32: "int32_t", DType.bool: "uint8_t",
}
# what arithmetic happens in: half precisions compute in float
COMPUTE = {
    DType.float32: "float", DType.float16: "float", DType.bfloat16: "float",
    DType.int64: "int64_t", DType.int32: "int32_t", DType.bool: "uint8_t",
}


# half precisions: the prelude's conversions from and to their float compute value, and its rounding
_LOAD = {DType.float16: "lum_h2f", DType.bfloat16: "lum_bf2f"}
_STORE = {DType.float16: "lum_f2h", DType.bfloat16: "lum_f2bf"}
_ROUND = {DType.float16: "lum_rf16", DType.bfloat16: "lum_rbf"}


def load(dt: DType, x: str) -> str:
    if dt is DType.bool:
        return f"(uint8_t)({x} != 0)"
    return f"{_LOAD[dt]}({x})" if dt in _LOAD else x


def store(dt: DType, x: str) -> str:
    return f"{_STORE[dt]}({x})" if dt in _STORE else x


def round_to(dt: DType, x: str) -> str:
    """Round a float compute value to the precision of ``dt`` (the reference rounds after every primitive)."""
    return f"{_ROUND[dt]}({x})" if dt in _ROUND else x


def literal(value, dt: DType) -> str:
    """A number formatted by us: exact hex floats, INFINITY/NAN, exact integers."""
    if dt.is_float:
        v = float(np.float32(value))
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return f"({v.hex()}f)"
    if dt is DType.bool:
        return "1" if bool(value) else "0"
    v = int(value)
    if dt is DType.int32:
        v = int(np.int64(v).astype(np.int32))
        return f"((int32_t){v})" if v != -2**31 else "INT32_MIN"
    if v == -2**63:
        return "INT64_MIN"
    return f"((int64_t){v}LL)"


def cast(src: DType, dst: DType, x: str) -> str:
    """Cast with the reference's meaning: to bool is != 0; float to int truncates, NaN/inf -> 0, clipped."""
    if dst is DType.bool:
        return f"(uint8_t)({x} != 0)"
    if src.is_float and dst is DType.int64:
        return f"lum_f2i64({x})"
    if src.is_float and dst is DType.int32:
        return f"lum_f2i32({x})"
    if dst.is_float:
        return round_to(dst, f"(float)({x})")
    return f"({COMPUTE[dst]})({x})"
