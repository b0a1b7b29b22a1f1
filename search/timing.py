"""Timers that run inside the timing worker: wall clock on the CPU, CUDA events on the GPU, each run
after the caches were flushed.

A kernel timed alone, over and over, finds its weights in cache; inside a model every weight comes
from memory, since the rest of the model streams through the caches between two uses. Without the
flush the search prefers schedules that only win with hot weights (measured on BERT-base's 768x768
and 3072x768 projections: B packed in panels timed 3-6% faster than B read in place when alone and
hot, and 11-27% slower inside the model).
"""

from __future__ import annotations

import glob
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..codegen.backend import Backend


L2_FLUSH_BYTES = 256 << 20
LLC_FALLBACK_BYTES = 32 << 20


@dataclass(frozen=True)
class TimingPlan:
    """Warm up by time, then repeat until ``cap_s`` per candidate (within [min_reps, max_reps] rounds)."""

    warmup_s: float = 0.05
    cap_s: float = 0.25
    min_reps: int = 5
    max_reps: int = 2000
    flush: bool = True  # evict the caches before each timed run (off only for backends that touch no memory)


def _size(text: str) -> int:
    text = text.strip().upper()
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG") or 0) * unit


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache (from sysfs; a typical server L3 where it cannot be read)."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                sizes.append(_size(f.read()))
        except (OSError, ValueError):
            pass
    return max(sizes, default=0) or LLC_FALLBACK_BYTES


class CpuTimer:
    """Wall clock; ``flush`` reads a buffer twice the last-level cache, which evicts what the last run left
    there (reads, since large stores may bypass the cache), on every thread the kernels run on where the backend
    can (``read_through``). Read by one thread, the other cores idled through the flush and their threads slept:
    a kernel timed next paid their wake-up and a core at rest, which one thread never does, so the search took
    one thread where two win inside the model (2 threads, a ResNet-50 Winograd transform of 1.2 MFLOP: one
    thread 44 us, two 84 us after a one-thread flush; 31 and 25 us after a flush on both)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._evict: np.ndarray | None = None  # made on the first flush: most plans never flush

    def flush(self) -> None:
        if self._evict is None:
            self._evict = np.ones(2 * last_level_cache_bytes() // 8)
        read = getattr(self.backend, "read_through", None)
        if read is not None:
            read(self._evict)
        else:
            self._evict.sum()

    def __call__(self, fn: Callable[[], None]) -> int:
        t0 = time.perf_counter_ns()
        fn()
        self.backend.synchronize()
        return time.perf_counter_ns() - t0


class CudaTimer:
    """CUDA events around the launch only; ``flush`` writes 256 MB, which evicts L2."""

    def __init__(self, backend: Backend):
        import torch

        self.torch = torch
        self._evict = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        self._evict.zero_()

    def __call__(self, fn: Callable[[], None]) -> int:
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return int(self.start.elapsed_time(self.end) * 1e6)


def make_timer(backend: Backend) -> CpuTimer | CudaTimer:
    own = getattr(backend, "make_timer", None)  # a backend that keeps its own time (the tests' virtual clocks)
    if own is not None:
        return own()
    return CudaTimer(backend) if backend.name == "cuda" else CpuTimer(backend)


def interleaved(timer: CpuTimer | CudaTimer, fns: list[Callable[[], None]], plan: TimingPlan,
                sync: Callable[[], None]) -> list[list[int]]:
    """Warm every candidate up by time, then time them in rounds (one run of each per round)."""
    for fn in fns:
        t_end = time.perf_counter() + plan.warmup_s
        fn()
        sync()
        while time.perf_counter() < t_end:
            fn()
            sync()
    samples: list[list[int]] = [[] for _ in fns]
    t0 = time.perf_counter()
    t_end = t0 + plan.cap_s * len(fns)
    # slow candidates stop short of min_reps (but not of the 5 rounds a sign test needs) at 4x the cap
    t_hard = t0 + 4 * plan.cap_s * len(fns)
    rounds = 0
    while rounds < plan.max_reps and (rounds < plan.min_reps or time.perf_counter() < t_end):
        if rounds >= 5 and time.perf_counter() > t_hard:
            break
        for k, fn in enumerate(fns):
            if plan.flush:
                timer.flush()
            samples[k].append(timer(fn))
        rounds += 1
    return samples
