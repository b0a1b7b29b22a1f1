"""Ops whose output's size the data decides: folded on the host at import when their inputs are constants;
otherwise a DataDependent cut, which a session runs on the host between compiled segments."""

from __future__ import annotations

import numpy as np

from ..ir import Tensor
from .host import HostNode
from .importer import const_tensor
from .registry import DataDependent, OpContext, op


def fold_on_host(ctx: OpContext) -> list[Tensor | None]:
    """The node's outputs computed by the host from its constant inputs; DataDependent where one is not constant."""
    values: dict[str, np.ndarray] = {}
    for i, (name, t) in enumerate(zip(ctx.node.input, ctx.inputs)):
        if not name or t is None:
            continue
        if not t.is_const:
            raise DataDependent(f"node {ctx.node.name or ctx.node.op_type!r} ({ctx.node.op_type}): its output's size "
                                f"depends on the data of input {i}", ctx.node)
        written = ctx.written(i)
        values[name] = np.asarray(t.numpy()).astype(written if written is not None else t.dtype.np, copy=False)
    opsets = ctx.importer.opsets if ctx.importer is not None else {"": ctx.opset}
    outs = HostNode(ctx.node, opsets, {}).run(values)
    return [const_tensor(outs[name]) if name in outs else None for name in ctx.node.output]


op("NonMaxSuppression", "Unique")(fold_on_host)
