"""CompiledModel: compiled kernels, a launch list, weights uploaded once, a buffer arena."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codegen.backend import Backend, Schedule
from ..codegen.kernel import Kernel
from ..errors import LuminalError
from ..ir.dtypes import DType
from .plan import plan_kernels


@dataclass
class TensorSpec:
    name: str
    node: int
    shape: tuple[int, ...]
    dtype: DType

    def to_json(self) -> dict:
        return {"name": self.name, "node": self.node, "shape": list(self.shape), "dtype": self.dtype.value}

    @staticmethod
    def from_json(d: dict) -> TensorSpec:
        return TensorSpec(str(d["name"]), int(d["node"]), tuple(int(s) for s in d["shape"]), DType(d["dtype"]))


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
        self.plan = plan_kernels(kernels, {o.node for o in outputs})
        read = {n for k in kernels for n in k.input_nodes}
        if read - {n for k in kernels for n in k.output_nodes} - constants.keys() - {i.node for i in inputs}:
            raise LuminalError("launch plan reads a value that nothing provides")
        self.compiled = backend.compile(list(zip(kernels, schedules)))
        # weights go to the device once; graph outputs that are constants are ready on the host
        self._weights = {n: backend.from_numpy(v) for n, v in constants.items() if n in read}
        self._const_outputs = {o.node: np.broadcast_to(constants[o.node], o.shape).astype(o.dtype.np)
                               for o in outputs if o.node in constants}
        self._buffers = self._allocate()
        # (the compiled list it was made for, (launch, buffers by node, input writers)): rebuilt when replaced
        self._bound: tuple[list, tuple[Callable[[], None], dict[int, Any], list]] | None = None

    @functools.cached_property
    def sources(self) -> list[str]:
        return [self.backend.source(k, s) for k, s in zip(self.kernels, self.schedules)]

    def _allocate(self) -> dict[int, Any]:
        """A buffer per kernel output: a typed view into one byte arena where the plan gives it a slot."""
        be = self.backend
        arena = be.empty((self.plan.arena_bytes,), np.dtype(np.uint8)) if self.plan.slots else None
        native: dict[DType, Any] = {}  # the backend's own dtype object (what .view() of its buffers takes)
        buffers = {}
        for k in self.kernels:
            for n, (_, b) in zip(k.output_nodes, k.outputs):
                slot = self.plan.slots.get(n)
                if slot is None:
                    buffers[n] = be.empty(b.shape, b.dtype.np)
                    continue
                if b.dtype not in native:
                    native[b.dtype] = be.empty((0,), b.dtype.np).dtype
                buffers[n] = arena[slot.offset:slot.offset + slot.nbytes].view(native[b.dtype]).reshape(b.shape)
        return buffers

    def _bind(self) -> tuple[Callable[[], None], dict[int, Any], list]:
        """The kernels' argument lists, made once, and how each run's inputs get into them: host (numpy)
        buffers of their own that each run overwrites, bound by the backend's launcher where it has one;
        else buffers uploaded on each run and put in place of the inputs in the argument lists."""
        be = self.backend
        values: dict[int, Any] = {**self._weights, **{s.node: be.empty(s.shape, s.dtype.np) for s in self.inputs},
                                  **self._buffers}
        args = [[values[n] for n in (*k.input_nodes, *k.output_nodes)] for k in self.kernels]
        if all(isinstance(values[s.node], np.ndarray) for s in self.inputs):
            writers = [(s, values[s.node], None) for s in self.inputs]
            launcher = getattr(be, "launcher", None)
            if launcher is not None:
                return launcher(self.compiled, args), values, writers
        else:
            writers = [(s, None, [(a, i) for a, k in zip(args, self.kernels)
                                  for i, n in enumerate((*k.input_nodes, *k.output_nodes)) if n == s.node])
                       for s in self.inputs]
        steps = list(zip(self.compiled, args))

        def launch() -> None:
            for ck, a in steps:
                ck(a)

        return launch, values, writers

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in graph order; ``feeds`` are already validated arrays of the input specs."""
        if self._bound is None or self._bound[0] is not self.compiled:
            self._bound = (self.compiled, self._bind())
        launch, values, writers = self._bound[1]
        for spec, host, places in writers:
            if host is not None:
                np.copyto(host, feeds[spec.name], casting="unsafe")
            else:
                buf = values[spec.node] = self.backend.from_numpy(
                    np.asarray(feeds[spec.name]).astype(spec.dtype.np, copy=False))
                for a, i in places:
                    a[i] = buf
        launch()
        self.backend.synchronize()
        out = []
        for spec in self.outputs:
            if spec.node in self._const_outputs:
                out.append(self._const_outputs[spec.node].copy())
                continue
            buf = values[spec.node]
            out.append(np.array(buf if isinstance(buf, np.ndarray) else self.backend.to_numpy(buf)))
        return out

    @property
    def planned_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def intermediate_bytes(self) -> int:
        return self.plan.naive_bytes
