"""onnxruntime's com.microsoft versions of standard ops, from before ONNX had them (what tf2onnx writes with
``--extra_opset com.microsoft:1`` and older onnxruntime tools): each is the default domain's op at the opset whose
form it has."""

from __future__ import annotations

import dataclasses

from ..ir import Tensor
from .ops_nn_index import gather_nd_op, pad_op, trilu_op
from .ops_nn_resize import grid_sample_op
from .ops_reduce import fused_matmul
from .ops_shape import range_op, unsqueeze
from .registry import MS, OpContext, OpFn, need, op


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
