"""Seeded random inputs for a kernel or a model, and the dtype-aware comparison with the reference."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..ir.dtypes import DType

# (rtol, atol as a fraction of the largest expected magnitude) per dtype
TOLERANCE = {
    DType.float32: (1e-4, 1e-5),
    DType.float16: (1e-2, 2e-3),
    DType.bfloat16: (4e-2, 1e-2),
}


def random_array(shape: Sequence[int], dtype: DType, rng: np.random.Generator) -> np.ndarray:
    if dtype.is_float:
        return rng.standard_normal(tuple(shape), dtype=np.float32).astype(dtype.np)
    if dtype is DType.bool:
        return rng.random(tuple(shape)) < 0.5
    # small positive integers: valid as indices (kernels clamp) and as divisors
    return rng.integers(1, 8, size=tuple(shape)).astype(dtype.np)


def random_inputs(shapes: Sequence[tuple[tuple[int, ...], DType]], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [random_array(s, d, rng) for s, d in shapes]


def mismatch(actual: np.ndarray, expected: np.ndarray, dtype: DType, reduce_len: int = 1) -> str | None:
    """None when ``actual`` matches ``expected`` within the dtype's tolerance, else why not."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} instead of {list(expected.shape)}"
    if not dtype.is_float:
        bad = int(np.count_nonzero(actual != expected))
        return f"{bad} of {expected.size} values differ" if bad else None
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if (nan_a != nan_e).any():
        return f"{int(np.count_nonzero(nan_a != nan_e))} NaNs differ"
    inf_e = np.isinf(e)
    if (a[inf_e] != e[inf_e]).any():
        return "infinities differ"
    ok = ~nan_e & ~inf_e
    if not ok.any():
        return None
    rtol, afrac = TOLERANCE[dtype]
    # a long reduction may round differently in another summation order
    grow = math.sqrt(max(1, reduce_len))
    scale = float(np.max(np.abs(e[ok]))) or 1.0
    err = np.abs(a[ok] - e[ok])
    limit = afrac * grow * scale + rtol * grow * np.abs(e[ok])
    if (err > limit).any() or not np.isfinite(a[ok]).all():
        k = int(np.argmax(err - limit))
        return f"max error {float(err[k]):.3g} where {float(limit[k]):.3g} is allowed"
    return None
