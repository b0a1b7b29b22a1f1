"""ONNX -> primitive IR. Importing this package registers every op function."""

from . import (  # noqa: F401
    ops_control,
    ops_data,
    ops_elementwise,
    ops_ml,
    ops_ms_standard,
    ops_nn,
    ops_reduce,
    ops_shape,
    ops_signal,
    ops_text,
)
from .importer import ImportResult, IOInfo, check_supported, load, onnx_dtype

__all__ = ["IOInfo", "ImportResult", "check_supported", "load", "onnx_dtype"]
