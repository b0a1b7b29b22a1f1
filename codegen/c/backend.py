"""The ``cpu`` backend: C kernels compiled by the system compiler, run through ctypes."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Knob, Schedule, register_backend
from ..kernel import Kernel
from . import build, schedule
from .blas import BlasKernel
from .contraction import emit_contraction, plan_contraction
from .emit import emit_elementwise, emit_reduction, emit_reduction_lanes, lanes_apply

ALIGN = 64


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n == 0:
        return np.empty(shape, dtype)
    raw = np.empty(n + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


class CKernel:
    """A compiled kernel: call with buffers ordered as kernel.inputs then kernel outputs."""

    def __init__(self, fn, nbuf: int, threads: int):
        self._fn = fn
        self._arr = ctypes.c_void_p * nbuf
        self.threads = threads

    def __call__(self, buffers: Sequence[Any]) -> None:
        if self._fn(self._arr(*[b.ctypes.data for b in buffers]), self.threads):
            raise MemoryError("a C kernel could not allocate its workspace")


def source(kernel: Kernel, sched: Schedule) -> str:
    plan = plan_contraction(kernel)
    if plan is not None:
        s = dict(sched)
        if s.get("impl") == "blas":
            return BlasKernel.epilogue_source(kernel, plan)
        return emit_contraction(kernel, s, plan, schedule.simd_width())
    if kernel.reduce_axes:
        if sched.get("lanes", 0) and lanes_apply(kernel):
            return emit_reduction_lanes(kernel, sched)
        return emit_reduction(kernel, sched)
    return emit_elementwise(kernel, sched)


class CPUBackend:
    name = "cpu"

    def available(self) -> str | None:
        return None if build.toolchain() is not None else build.missing_message()

    def space(self, kernel: Kernel) -> list[Knob]:
        return schedule.space(kernel)

    def default_schedule(self, kernel: Kernel) -> Schedule:
        return schedule.default_schedule(kernel)

    def valid(self, kernel: Kernel, sched: Schedule) -> bool:
        return schedule.valid(kernel, sched)

    def source(self, kernel: Kernel, sched: Schedule) -> str:
        return source(kernel, sched)

    def compile(self, items: Sequence[tuple[Kernel, Schedule]]) -> list[Any]:
        fns = build.build([source(k, s) for k, s in items])
        out: list[Any] = []
        for (k, s), fn in zip(items, fns):
            threads = s.get("threads", 0) or schedule.default_threads()
            plan = plan_contraction(k)
            blas = plan is not None and s.get("impl") == "blas"
            ck = CKernel(fn, len(k.inputs) + len(k.outputs) + int(blas), threads)
            if blas:
                ck = BlasKernel(k, plan, ck)
            out.append(ck)
        return out

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        a = np.asarray(array)
        out = aligned_empty(a.shape, a.dtype)
        np.copyto(out, a)
        return out

    def to_numpy(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        return aligned_empty(tuple(shape), dtype)

    def synchronize(self) -> None:
        return None

    def toolchain(self) -> dict[str, Any]:
        tc = build.toolchain()
        return {"backend": "cpu", **(tc.as_dict() if tc else {}), "simd_width": schedule.simd_width()}


register_backend("cpu", CPUBackend)
