"""Run a whole graph as a sequence of compiled kernels, to time fusion decisions end to end."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen.kernel import Kernel
from ..codegen.partition import Decisions, lower
from ..ir.graph import Graph, Op
from ..runtime.model import allocate
from ..runtime.plan import over_of, plan_run

if TYPE_CHECKING:
    from ..codegen.backend import Backend



class ModelRunner:
    """The graph lowered by ``decisions``, each kernel compiled with its schedule (by signature)."""

    def __init__(self, graph: Graph, backend: Backend, decisions: Decisions,
                 schedules: dict[str, dict[str, Any]], compile_one: Callable[[Kernel, dict], Any] | None = None):
        self.graph, lowered = lower(graph, decisions)
        graph = self.graph
        self.backend = backend
        # as a compiled model runs
        usable = [_usable(backend, k, schedules.get(k.signature)) for k in lowered]
        elision, self.kernels, plan = plan_run(lowered, {n.id for n in graph.outputs}, backend.threads(),
                                               over_of(backend, lowered, usable))
        items = list(zip(self.kernels, elision.pick(usable)))
        self.compiled = [compile_one(k, s) for k, s in items] if compile_one else backend.compile(items)
        self.bufs: dict[int, Any] = {}
        nodes = {n.id: n for n in graph.toposort()}
        for k in self.kernels:
            for nid in k.input_nodes:
                n = nodes[nid]
                if n.op is Op.Constant and nid not in self.bufs:
                    value = np.broadcast_to(n.attrs["value"], n.shape)
                    self.bufs[nid] = backend.from_numpy(np.ascontiguousarray(value))
        # in a compiled model's arena: a kernel reads what the one before it left in the caches
        self.bufs |= allocate(backend, self.kernels, plan, elision)
        self.launch: Callable[[], None] | None = None

    def feed(self, arrays: Sequence[np.ndarray]) -> None:
        """Upload the inputs and bind the kernels to the buffers through the backend's launcher (as the runtime
        does), so a plan is timed the way a compiled model runs."""
        for n, a in zip(self.graph.inputs, arrays):
            self.bufs[n.id] = self.backend.from_numpy(np.ascontiguousarray(a.astype(n.dtype.np).reshape(n.shape)))
        args = [[self.bufs[i] for i in k.input_nodes] + [self.bufs[i] for i in k.output_nodes] for k in self.kernels]
        self.launch = self.backend.launcher(self.compiled, args)

    def __call__(self) -> None:
        assert self.launch is not None, "feed() binds the kernels first"
        self.launch()

    def outputs(self) -> list[np.ndarray]:
        out = []
        for n in self.graph.outputs:
            if n.op is Op.Constant:
                out.append(np.broadcast_to(n.attrs["value"], n.shape))
            else:
                out.append(self.backend.to_numpy(self.bufs[n.id]).reshape(n.shape))
        return out


def _usable(backend: Backend, kernel: Kernel, schedule: dict[str, Any] | None) -> dict[str, Any]:
    """``schedule`` where the backend accepts it for ``kernel``, else the default (a winner kept in the storage
    by a resumed run may predate a change to what the kernel's schedules mean)."""
    return schedule if schedule is not None and backend.valid(kernel, schedule) else backend.default_schedule(kernel)
