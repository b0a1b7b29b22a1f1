"""Run a graph kernel by kernel on the cpu backend (for tests and benchmarks, independent of the runtime)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Op
from ..backend import Schedule
from ..kernel import Kernel
from ..partition import partition


def run_graph(graph: Graph, feeds: dict[str, np.ndarray], decisions: dict | None = None,
              schedules: list[Schedule | None] | None = None, kernels: list[Kernel] | None = None,
              backend=None) -> list[np.ndarray]:
    """Partition (or take ``kernels``), compile every kernel with its schedule (default when None), run."""
    from .backend import CPUBackend

    be = backend or CPUBackend()
    kernels = kernels if kernels is not None else partition(graph, decisions)
    scheds = schedules or [None] * len(kernels)
    fns = be.compile([(k, s if s is not None else be.default_schedule(k)) for k, s in zip(kernels, scheds)])
    vals: dict[int, np.ndarray] = {}
    for n in graph.inputs:
        vals[n.id] = be.from_numpy(np.asarray(feeds[n.attrs["name"]], n.dtype.np).reshape(n.shape))
    for n in graph.toposort():
        if n.op is Op.Constant:
            vals[n.id] = be.from_numpy(np.ascontiguousarray(n.attrs["value"]))
    for k, f in zip(kernels, fns):
        outs = [be.empty(b.shape, b.dtype.np) for _, b in k.outputs]
        f([vals[i] for i in k.input_nodes] + outs)
        for nid, o in zip(k.output_nodes, outs):
            vals[nid] = o
    return [be.to_numpy(vals[o.id]) for o in graph.outputs]
