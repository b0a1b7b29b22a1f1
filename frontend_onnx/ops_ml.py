"""The ai.onnx.ml ops that are plain tensor arithmetic: Binarizer and ArrayFeatureExtractor."""

from __future__ import annotations

from ..ir import Tensor
from .ops_nn_index import gather_axis
from .registry import OpContext, fail, need, op

ML = "ai.onnx.ml"


@op("Binarizer", domain=ML)
def binarizer(ctx: OpContext) -> Tensor:
    """1 where x exceeds the threshold, else 0, in x's type."""
    x = need(ctx, 0)
    return x.gt(float(ctx.attr("threshold", 0.0))).cast(x.dtype)


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx: OpContext) -> Tensor:
    """The entries of the last axis that the indices name; a 1-D input gives one row."""
    x, idx = need(ctx, 0), need(ctx, 1)
    if x.ndim == 0:
        raise fail(ctx, "needs an input of rank 1 or more")
    if x.ndim == 1:
        x = x.reshape((1, x.shape[0]))
    return gather_axis(x, idx.reshape((idx.numel,)), x.ndim - 1)
