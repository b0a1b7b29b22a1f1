"""The dtypes the IR knows and how each maps to numpy, Triton and C."""

from __future__ import annotations

import builtins
import enum

import ml_dtypes
import numpy as np

# the class below has members named bool and np, which shadow these names in its annotations
NumpyDType = np.dtype


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int64 = "int64"
    int32 = "int32"
    bool = "bool"

    @property
    def np(self) -> NumpyDType:
        return _NUMPY_OF_VALUE[self._value_]  # by value: a str key hashes in C, a member in Python

    @property
    def is_float(self) -> builtins.bool:
        return self in (DType.float32, DType.float16, DType.bfloat16)

    @property
    def is_int(self) -> builtins.bool:
        return self in (DType.int64, DType.int32)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def compute(self) -> DType:
        """The dtype arithmetic happens in: half precisions compute in float32."""
        return DType.float32 if self in (DType.float16, DType.bfloat16) else self

    def __repr__(self) -> str:
        return self.value

    @staticmethod
    def from_numpy(dt: NumpyDType) -> DType:
        dt = np.dtype(dt)
        for k, v in _NUMPY.items():
            if v == dt:
                return k
        raise TypeError(f"unsupported dtype {dt}")


_NUMPY = {
    DType.float32: np.dtype(np.float32),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.int64: np.dtype(np.int64),
    DType.int32: np.dtype(np.int32),
    DType.bool: np.dtype(np.bool_),
}
_NUMPY_OF_VALUE = {k.value: v for k, v in _NUMPY.items()}


def as_declared(x: np.ndarray, declared: str | None) -> np.ndarray:
    """An output in the dtype its model declares (narrow integers wrap, as the model's own arithmetic would)."""
    return x if declared is None or x.dtype == declared else x.astype(declared)


def promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    order = [DType.bool, DType.int32, DType.int64, DType.bfloat16, DType.float16, DType.float32]
    return max(a, b, key=order.index)
