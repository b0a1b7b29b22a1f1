"""Control flow: If with a condition known at import time is inlined; otherwise both branches run under Where."""

from __future__ import annotations

from ..errors import LuminalError
from ..ir import Tensor
from .registry import OpContext, op


def _branch(ctx: OpContext, name: str) -> list[Tensor | None]:
    g = ctx.attr(name)
    if g is None:
        raise ValueError(f"If without {name}")
    outs = ctx.importer.run_graph(g, ctx.scope.new_child())
    if len(outs) != len(ctx.node.output):
        raise ValueError(f"{name} has {len(outs)} outputs, the node {len(ctx.node.output)}")
    return outs


@op("If")
def if_op(ctx: OpContext) -> list[Tensor | None]:
    cond = ctx.inputs[0]
    if cond.numel != 1:
        raise ValueError(f"If condition has {cond.numel} elements")
    if cond.is_const:
        taken = bool(cond.numpy().reshape(-1)[0])
        return _branch(ctx, "then_branch" if taken else "else_branch")
    then, other = _branch(ctx, "then_branch"), _branch(ctx, "else_branch")
    c = cond.reshape(())
    outs = []
    for a, b in zip(then, other):
        if a is None or b is None:
            outs.append(None)
            continue
        if a.shape != b.shape:
            raise LuminalError(f"node {ctx.node.name!r} (If): the condition is only known at run time and the "
                               f"branches give different shapes {list(a.shape)} and {list(b.shape)}")
        outs.append(c.where(a, b))
    return outs
