"""CompiledModel: compiled kernels, a launch list, weights uploaded once, a buffer arena."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codegen.backend import Backend, Schedule
from ..codegen.kernel import Buffer, Kernel
from ..errors import LuminalError
from ..ir.dtypes import DType, as_declared
from .alias import Elision
from .hostio import Bound, HostIO, Rebinding
from .plan import BufferPlan, over_of, plan_run

# the size from which a run writes an output into a fresh array bound for it rather than copying it out of its
# buffer: the aligned array and its binding and unbinding cost 5 us, the copy of 64 KiB 2 us
REBIND_MIN_BYTES = 1 << 16


@dataclass
class TensorSpec:
    name: str
    node: int
    shape: tuple[int, ...]
    dtype: DType
    declared: str | None = None  # the model's numpy dtype where the IR computes in another (Graph.declared)

    def to_json(self) -> dict:
        d = {"name": self.name, "node": self.node, "shape": list(self.shape), "dtype": self.dtype.value}
        return d | ({"declared": self.declared} if self.declared else {})

    @staticmethod
    def from_json(d: dict) -> TensorSpec:
        declared = d.get("declared")
        return TensorSpec(str(d["name"]), int(d["node"]), tuple(int(s) for s in d["shape"]), DType(d["dtype"]),
                          str(np.dtype(declared)) if declared else None)


@dataclass
class CompileStats:
    kernels: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    invalid_schedules: int = 0
    compile_s: float = 0.0
    forms: dict[str, int] = field(default_factory=dict)


class CompiledModel:
    def __init__(self, backend: Backend, kernels: list[Kernel], schedules: list[Schedule],
                 inputs: list[TensorSpec], outputs: list[TensorSpec], constants: dict[int, np.ndarray],
                 stats: CompileStats | None = None):
        self.backend = backend
        self.kernels = kernels
        self.schedules = schedules
        self.inputs = inputs
        self.outputs = outputs
        self.constants = constants
        self.stats = stats or CompileStats(kernels=len(kernels))
        keep = {o.node for o in outputs}
        # what runs: the kernels but the concatenations their parts' producers write in place
        self.elision, self.launched, self.plan = plan_run(kernels, keep, backend.threads(),
                                                          over_of(backend, kernels, schedules))
        place = self.elision.place
        read = {place(n)[0] for k in self.launched for n in k.input_nodes}
        written = {place(n)[0] for k in self.launched for n in k.output_nodes}
        if read - written - constants.keys() - {i.node for i in inputs}:
            raise LuminalError("launch plan reads a value that nothing provides")
        self.compiled = backend.compile(list(zip(self.launched, self.elision.pick(schedules))))
        # weights go to the device once; graph outputs that are constants are ready on the host
        self._weights = {n: backend.from_numpy(v) for n, v in constants.items() if n in read}
        self._const_outputs = {o.node: np.broadcast_to(constants[o.node], o.shape).astype(o.dtype.np)
                               for o in outputs if o.node in constants}
        buffers = allocate(backend, self.launched, self.plan, self.elision)
        values = {**self._weights, **{i.node: backend.empty(i.shape, i.dtype.np) for i in inputs}, **buffers}
        # every buffer by graph node: weights, inputs (written each run where not read in place), outputs
        self._values = values
        self._args = [[values[n] for n in (*k.input_nodes, *k.output_nodes)] for k in self.launched]
        self._launch = backend.launcher(self.compiled, self._args)
        self._host = self._host_io()

    @functools.cached_property
    def sources(self) -> list[str]:
        return [self.backend.source(k, s) for k, s in zip(self.kernels, self.schedules)]

    def _host_io(self) -> HostIO | None:
        """Where the launcher can rebind host buffers: the inputs no output passes through, and the outputs of
        REBIND_MIN_BYTES or more that one kernel writes (each node once)."""
        launch = self._launch
        if not isinstance(launch, Rebinding):
            return None
        writers = Counter(n for k in self.launched for n in k.output_nodes)
        fed = {s.node for s in self.inputs}
        passed = {o.node for o in self.outputs}
        v = self._values
        inputs = [(s.name, Bound(v[s.node], None if s.node in passed else launch.binder(v[s.node])))
                  for s in self.inputs]
        outputs = [(n, v[n], launch.binder(v[n])) for n in dict.fromkeys(o.node for o in self.outputs)
                   if writers[n] == 1 and n not in fed and n not in self._const_outputs
                   and v[n].nbytes >= REBIND_MIN_BYTES]
        return HostIO(launch, inputs, outputs)

    def _write_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        for spec in self.inputs:
            self.backend.write(self._values[spec.node], feeds[spec.name])

    def _outputs(self, written: dict[int, np.ndarray]) -> list[np.ndarray]:
        """Each output: a constant's copy, the array its kernel wrote this run (a copy where it is named twice),
        else a copy of its buffer."""
        self.backend.synchronize()
        taken: set[int] = set()

        def one(node: int) -> np.ndarray:
            if node in self._const_outputs:
                return self._const_outputs[node].copy()
            if node in written:
                x = written[node].copy() if node in taken else written[node]
                taken.add(node)
                return x
            return self.backend.to_numpy(self._values[node])

        return [as_declared(one(spec.node), spec.declared) for spec in self.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in graph order; ``feeds`` are already validated arrays of the input specs. On host buffers
        (``_host``) feeds are read in place where they can be and outputs are written into the arrays returned."""
        if self._host is not None:
            return self._outputs(self._host.run(self.backend, feeds))
        self._write_inputs(feeds)
        self._launch()
        return self._outputs({})

    def profile(self, feeds: dict[str, np.ndarray], repeats: int = 5) -> list[float]:
        """Median seconds of each kernel over ``repeats`` runs (``spans``; on a GPU each kernel fenced by device
        synchronisation, so the sum exceeds the pipelined end-to-end time)."""
        runs = self.spans(feeds, repeats)
        return [float(np.median([run[i][1] for run in runs])) / 1e9 for i in range(len(self.compiled))]

    def spans(self, feeds: dict[str, np.ndarray], repeats: int = 5) -> list[list[tuple[int, int]]]:
        """Per run, per kernel in launch order: (start, duration) in perf_counter nanoseconds: read by the launch
        between its kernels where it can (the C backend's), else each kernel fenced by device synchronisation."""
        stamped = getattr(self._launch, "spans", None)
        if stamped is None:
            return self._fenced(feeds, repeats)
        runs = []
        for _ in range(repeats):
            self._write_inputs(feeds)
            runs.append(stamped())
        return runs

    def _fenced(self, feeds: dict[str, np.ndarray], repeats: int) -> list[list[tuple[int, int]]]:
        be = self.backend
        runs: list[list[tuple[int, int]]] = []

        def timed(ck: Callable) -> Callable:
            def run(buffers) -> None:
                be.synchronize()
                t0 = time.perf_counter_ns()
                ck(buffers)
                be.synchronize()
                runs[-1].append((t0, time.perf_counter_ns() - t0))

            return run

        launch = be.launcher([timed(ck) for ck in self.compiled], self._args)
        for _ in range(repeats):
            self._write_inputs(feeds)
            runs.append([])
            launch()
        return runs

    @property
    def planned_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def intermediate_bytes(self) -> int:
        return self.plan.naive_bytes


def allocate(backend: Backend, launched: list[Kernel], plan: BufferPlan, elision: Elision) -> dict[int, Any]:
    """A buffer per output of the ``launched`` kernels: a typed view into one byte arena where ``plan`` gives it a
    slot; the part of a concatenation a view into the concatenation's."""
    arena = backend.empty((plan.arena_bytes,), np.dtype(np.uint8)) if plan.slots else None
    native: dict[DType, Any] = {}  # the backend's own dtype object (what .view() of its buffers takes)

    def buffer(n: int, b: Buffer) -> Any:
        slot = plan.slots.get(n)
        if slot is None or arena is None:
            return backend.empty(b.shape, b.dtype.np)
        if b.dtype not in native:
            native[b.dtype] = backend.empty((0,), b.dtype.np).dtype
        return arena[slot.offset:slot.offset + slot.nbytes].view(native[b.dtype]).reshape(b.shape)

    return elision.buffers({n: b for k in launched for n, (_, b) in zip(k.output_nodes, k.outputs)}, buffer)


def arena_offsets(launched: list[Kernel], plan: BufferPlan, elision: Elision) -> dict[int, int]:
    """The byte offset into the arena of each output of the ``launched`` kernels that ``allocate`` puts there
    (a part of a concatenation: where it lies in the concatenation's)."""
    out: dict[int, int] = {}
    for k in launched:
        for n, (_, b) in zip(k.output_nodes, k.outputs):
            root, first = elision.place(n)
            slot = plan.slots.get(root)
            if slot is not None:
                out[n] = slot.offset + first * b.dtype.itemsize
    return out
