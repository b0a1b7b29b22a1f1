"""Per-kernel facts for ``luminal inspect --kernels`` and benchmark reports."""

from __future__ import annotations

from collections import Counter

from ..codegen.kernel import LEAF_OPS, Kernel
from ..codegen.partition import partition
from ..ir.graph import Graph


def kernel_row(k: Kernel) -> dict:
    counts = Counter(o.op for o in k.ops if o.op not in LEAF_OPS)
    return {"signature": k.signature, "form": k.form, "full": list(k.full), "reduce_axes": list(k.reduce_axes),
            "inputs": len(k.inputs), "outputs": len(k.outputs), "primitives": dict(sorted(counts.items())),
            "fused": counts.total(), "bytes": k.bytes_moved, "flops": k.flops}


def kernel_table(graph: Graph, decisions: dict | None = None) -> list[dict]:
    """One row per kernel in launch order: form, fused primitive counts, bytes moved, FLOPs."""
    return [kernel_row(k) for k in partition(graph, decisions)]
