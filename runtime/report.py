"""Per-kernel facts for ``luminal inspect --kernels`` and benchmark reports."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..codegen.kernel import LEAF_OPS, Kernel
from ..codegen.partition import Decisions, lower
from ..ir.graph import Graph


def node_label(sources: Sequence[Sequence[str]], width: int = 48) -> str:
    """A kernel named after the model nodes fused into it: the first one's name, "+N" for the others
    ("/layers.0/conv1/Conv +2"), the name's start cut to ``width``; "" when it has none."""
    if not sources:
        return ""
    name = str(sources[0][0]) or "?"
    more = f" +{len(sources) - 1}" if len(sources) > 1 else ""
    room = max(8, width - len(more))
    if len(name) > room:
        name = "…" + name[len(name) - room + 1:]
    return name + more


def op_label(sources: Sequence[Sequence[str]]) -> str:
    """The op types of the model nodes fused into a kernel, each once, in order: "Conv+BatchNormalization+Relu"."""
    return "+".join(dict.fromkeys(str(s[1]) for s in sources))


def kernel_row(k: Kernel) -> dict:
    counts = Counter(o.op for o in k.ops if o.op not in LEAF_OPS)
    return {"signature": k.signature, "nodes": [list(s) for s in k.sources], "form": k.form, "full": list(k.full),
            "reduce_axes": list(k.reduce_axes),
            "inputs": len(k.inputs), "outputs": len(k.outputs), "primitives": dict(sorted(counts.items())),
            "fused": counts.total(), "bytes": k.bytes_moved, "flops": k.flops}


def kernel_table(graph: Graph, decisions: Decisions | None = None) -> list[dict]:
    """One row per kernel in launch order: form, fused primitive counts, bytes moved, FLOPs."""
    return [kernel_row(k) for k in lower(graph, decisions)[1]]
