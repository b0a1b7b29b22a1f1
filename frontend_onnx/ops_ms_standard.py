"""onnxruntime's com.microsoft versions of standard ops, from before ONNX had them (what tf2onnx writes with
``--extra_opset com.microsoft:1`` and older onnxruntime tools): each is the default domain's op at the opset whose
form it has; and CDist, which skl2onnx's nearest-neighbour models use."""

from __future__ import annotations

import dataclasses

from ..ir import Tensor
from .ops_nn_index import gather_nd_op, pad_op, trilu_op
from .ops_nn_resize import grid_sample_op
from .ops_reduce import fused_matmul
from .ops_shape import range_op, unsqueeze
from .registry import MS, OpContext, OpFn, fail, need, op
from .structure import clean


def _at_opset(fn: OpFn, opset: int) -> OpFn:
    def run(ctx: OpContext):
        return fn(dataclasses.replace(ctx, opset=opset))

    return run


op("ExpandDims", domain=MS)(_at_opset(unsqueeze, 13))  # the axis an input, as Unsqueeze's axes from opset 13
op("GatherND", domain=MS)(_at_opset(gather_nd_op, 11))
op("Pad", domain=MS)(_at_opset(pad_op, 11))  # pads (and the value) inputs
op("Trilu", domain=MS)(trilu_op)
op("GridSample", domain=MS)(_at_opset(grid_sample_op, 16))
op("TransposeMatMul", domain=MS)(fused_matmul)  # FusedMatMul's earlier name


@op("Range", domain=MS)
def ms_range(ctx: OpContext) -> Tensor:
    """Range whose delta may be left out (1)."""
    if ctx.input(2) is not None:
        return range_op(ctx)
    start = need(ctx, 0)
    one = Tensor.full((), 1, start.dtype)
    return range_op(dataclasses.replace(ctx, inputs=[start, need(ctx, 1), one]))


@op("CDist", domain=MS)
def cdist(ctx: OpContext) -> Tensor:
    """Distances between the rows of A (n, d) and B (m, d), (n, m): euclidean or squared euclidean (the metrics
    onnxruntime's kernel computes), each pair's differences summed directly."""
    a, b = need(ctx, 0), need(ctx, 1)
    metric = str(ctx.attr("metric", "sqeuclidean"))
    if metric not in ("sqeuclidean", "euclidean"):
        raise fail(ctx, f"metric {clean(metric)!r} is not supported (sqeuclidean, euclidean)")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise fail(ctx, f"A {list(a.shape)} and B {list(b.shape)} are not (n, d) and (m, d)")
    (n, d), m = a.shape, b.shape[0]
    diff = a.reshape((n, 1, d)).expand((n, m, d)).sub(b.reshape((1, m, d)).expand((n, m, d)))
    squared = diff.mul(diff).sum((2,))
    return squared.sqrt() if metric == "euclidean" else squared
