"""Run a graph kernel by kernel on the cpu backend (for tests and benchmarks, independent of the runtime)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir.graph import Graph, Op
from ..backend import Backend, Schedule
from ..kernel import Kernel
from ..partition import Decisions, lower


def bind(graph: Graph, feeds: dict[str, np.ndarray], decisions: Decisions | None = None,
         schedules: list[Schedule | None] | None = None, kernels: list[Kernel] | None = None,
         backend: Backend | None = None) -> tuple[Callable[[], None], list[Any], list[Kernel]]:
    """Lower the graph by ``decisions`` (or take ``kernels`` of ``graph`` as it is), compile every kernel with its
    schedule (default when None) and bind it to buffers holding the feeds, constants and every kernel output.
    Returns (run: one pass over the kernels, the graph's output buffers, the kernels)."""
    from .backend import CPUBackend

    be = backend or CPUBackend()
    if kernels is None:
        graph, kernels = lower(graph, decisions)
    scheds = schedules or [None] * len(kernels)
    fns = be.compile([(k, s if s is not None else be.default_schedule(k)) for k, s in zip(kernels, scheds)])
    vals: dict[int, Any] = {}  # the backend's buffers
    for n in graph.inputs:
        vals[n.id] = be.from_numpy(np.asarray(feeds[n.attrs["name"]], n.dtype.np).reshape(n.shape))
    for n in graph.toposort():
        if n.op is Op.Constant:
            vals[n.id] = be.from_numpy(np.ascontiguousarray(n.attrs["value"]))
    steps = []
    for k, f in zip(kernels, fns):
        outs = [be.empty(b.shape, b.dtype.np) for _, b in k.outputs]
        steps.append((f, [vals[i] for i in k.input_nodes] + outs))
        vals.update(zip(k.output_nodes, outs))

    run = be.launcher([f for f, _ in steps], [bufs for _, bufs in steps])  # the runtime's launch path
    return run, [vals[o.id] for o in graph.outputs], kernels


def run_graph(graph: Graph, feeds: dict[str, np.ndarray], decisions: Decisions | None = None,
              schedules: list[Schedule | None] | None = None, kernels: list[Kernel] | None = None,
              backend: Backend | None = None) -> list[np.ndarray]:
    """Lower the graph by ``decisions`` (or take ``kernels``), compile every kernel with its schedule (default
    when None), run."""
    from .backend import CPUBackend

    be = backend or CPUBackend()
    run, outs, _ = bind(graph, feeds, decisions, schedules, kernels, be)
    run()
    return [be.to_numpy(o) for o in outs]
