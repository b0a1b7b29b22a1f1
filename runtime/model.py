"""CompiledModel: compiled kernels, a launch list, weights uploaded once, a buffer arena."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codegen.backend import Backend, Schedule
from ..codegen.kernel import Kernel
from ..errors import LuminalError
from ..ir.dtypes import DType
from .plan import BufferPlan, plan_buffers


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


def _arena_view(arena: Any, offset: int, nbytes: int, shape: tuple[int, ...], dtype: DType) -> Any:
    """A typed view into the byte arena (torch tensors and numpy arrays), or None when unsupported."""
    try:
        part = arena[offset:offset + nbytes]
        if isinstance(arena, np.ndarray):
            return part.view(dtype.np).reshape(shape)
        from ..codegen.triton.backend import torch_dtype

        return part.view(torch_dtype(dtype)).view(shape)
    except Exception:
        return None


class CompiledModel:
    def __init__(self, backend: Backend, kernels: list[Kernel], schedules: list[Schedule],
                 inputs: list[TensorSpec], outputs: list[TensorSpec], constants: dict[int, np.ndarray],
                 plan: BufferPlan | None = None, stats: CompileStats | None = None, compiled: list | None = None):
        self.backend = backend
        self.kernels = kernels
        self.schedules = schedules
        self.inputs = inputs
        self.outputs = outputs
        self.constants = constants
        self.stats = stats or CompileStats(kernels=len(kernels))
        keep = {o.node for o in outputs}
        self.plan = plan or plan_buffers(
            [(k.input_nodes, [(n, b.nbytes) for n, (_, b) in zip(k.output_nodes, k.outputs)]) for k in kernels], keep)
        self.sources = [backend.source(k, s) for k, s in zip(kernels, schedules)]
        self.compiled = compiled if compiled is not None else backend.compile(list(zip(kernels, schedules)))
        produced = {n for k in kernels for n in k.output_nodes}
        missing = [n for k in kernels for n in k.input_nodes
                   if n not in produced and n not in constants and n not in {i.node for i in inputs}]
        if missing:
            raise LuminalError(f"launch plan reads {len(missing)} value(s) that nothing provides")
        # weights go to the device once
        self._weights = {n: backend.from_numpy(v) for n, v in constants.items() if v.ndim > 0 or n in keep}
        self._buffers: dict[int, Any] = {}
        self._inputs: dict[int, Any] | None = None
        # (the compiled list it was made for, the backend's bound launch and buffers): rebuilt when replaced
        self._bound: tuple[list, Any] | None = None
        self._allocate()

    def _allocate(self) -> None:
        shapes = {n: (b.shape, b.dtype) for k in self.kernels for n, (_, b) in zip(k.output_nodes, k.outputs)}
        arena = None
        if self.plan.slots:
            try:
                arena = self.backend.empty((self.plan.arena_bytes,), np.dtype(np.uint8))
            except (TypeError, ValueError, KeyError):  # a backend without byte buffers: one buffer each
                arena = None
        for n, (shape, dt) in shapes.items():
            slot = self.plan.slots.get(n)
            buf = None if slot is None or arena is None else _arena_view(arena, slot.offset, slot.nbytes, shape, dt)
            self._buffers[n] = buf if buf is not None else self.backend.empty(shape, dt.np)
        self._arena = arena

    def _bind(self) -> tuple[Any, dict[int, Any]] | None:
        """Kernels bound to fixed buffers (inputs get buffers of their own) by a backend that offers it."""
        launcher = getattr(self.backend, "launcher", None)
        if launcher is None:
            return None
        if self._inputs is None:
            self._inputs = {s.node: self.backend.empty(s.shape, s.dtype.np) for s in self.inputs}
        values: dict[int, Any] = {**self._weights, **self._inputs, **self._buffers}
        launch = launcher(self.compiled, [[values[n] for n in k.input_nodes] + [values[n] for n in k.output_nodes]
                                          for k in self.kernels])
        return launch, values

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in graph order; ``feeds`` are already validated arrays of the input specs."""
        if self._bound is None or self._bound[0] is not self.compiled:
            self._bound = (self.compiled, self._bind())
        bound = self._bound[1]
        if bound is None:
            values = self._launch_each(feeds)
        else:
            launch, values = bound
            for spec in self.inputs:
                np.copyto(values[spec.node], np.asarray(feeds[spec.name]), casting="unsafe")
            launch()
        self.backend.synchronize()
        out = []
        for spec in self.outputs:
            if spec.node not in values:
                arr = self.constants[spec.node]
            elif bound is None:
                arr = self.backend.to_numpy(values[spec.node])
            else:
                arr = values[spec.node]
            out.append(np.array(np.broadcast_to(arr, spec.shape).astype(spec.dtype.np, copy=False)))
        return out

    def _launch_each(self, feeds: dict[str, np.ndarray]) -> dict[int, Any]:
        values: dict[int, Any] = dict(self._weights)
        for spec in self.inputs:
            values[spec.node] = self.backend.from_numpy(
                np.ascontiguousarray(np.asarray(feeds[spec.name]).astype(spec.dtype.np, copy=False)))
        values.update(self._buffers)
        for k, ck in zip(self.kernels, self.compiled):
            ck([values[n] for n in k.input_nodes] + [values[n] for n in k.output_nodes])
        return values

    @property
    def planned_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def intermediate_bytes(self) -> int:
        return self.plan.naive_bytes
