"""What a backend provides to the runtime and the search.

A backend turns (kernel, schedule) pairs into launchable kernels, owns device
memory, and declares each kernel's schedule space. Schedules are plain dicts of
knob -> value (JSON-serialisable), so the cache and Optuna can store them; each
backend reads them as its typed schedules (codegen/knobs.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from ..target import Target, detect_target
from .kernel import Kernel
from .knobs import Knob, Schedule


class CompiledKernel(Protocol):
    def __call__(self, buffers: Sequence[Any]) -> None:
        """Run with device buffers ordered as kernel.inputs then kernel outputs."""


class Backend(Protocol):
    name: str

    def available(self) -> str | None:
        """None when usable here, else one line saying what is missing."""

    def space(self, kernel: Kernel) -> list[Knob]:
        """The schedule knobs of this kernel on this backend."""

    def default_schedule(self, kernel: Kernel) -> Schedule:
        """A schedule that always compiles and runs."""

    def valid(self, kernel: Kernel, schedule: Schedule) -> bool:
        """Constraints (shared memory, registers, divisibility) checked before compiling."""

    def source(self, kernel: Kernel, schedule: Schedule) -> str:
        """Generated source code for one kernel."""

    def identity(self, kernel: Kernel, schedule: Schedule) -> str:
        """What the schedule runs as (source and launch): schedules with one identity are one point to time.
        Optional: without it every schedule is its own point (Triton's block sizes are launch arguments)."""

    def in_place(self, kernel: Kernel, schedule: Schedule) -> tuple[int, ...]:
        """The inputs whose buffer the kernel may write its output over under ``schedule`` (a residual its epilogue
        adds, dead after it: ``runtime.plan.written_over``). Optional: without it every output has a buffer of its
        own."""

    def compile(self, items: Sequence[tuple[Kernel, Schedule]]) -> list[CompiledKernel]:
        """Compile many kernels at once (in parallel where it helps)."""

    def launcher(self, compiled: Sequence[CompiledKernel], buffers: Sequence[Sequence[Any]]) -> Callable[[], None]:
        """The kernels bound once to fixed buffers (each kernel's inputs then outputs), run in order. A launch that
        can time its own kernels as it runs them has ``spans()``: run once, each kernel's (start, duration) in
        perf_counter nanoseconds (``CompiledModel.spans`` fences each kernel of any other)."""

    def from_numpy(self, array: np.ndarray) -> Any: ...

    def write(self, buffer: Any, array: np.ndarray) -> None:
        """Copy a host array into an existing buffer of its shape (converting the dtype)."""

    def to_numpy(self, buffer: Any) -> np.ndarray:
        """A host copy of a buffer (never a view that a later run overwrites)."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any: ...

    def empty_at(self, shape: tuple[int, ...], dtype: np.dtype, offset: int) -> Any:
        """A buffer that starts where a model's arena at byte ``offset`` would put it (the search times each
        kernel on buffers placed as its model's); ``empty`` where placement means nothing to the device."""

    def synchronize(self) -> None: ...

    def threads(self) -> int:
        """How many threads split each kernel's output among them, each writing a contiguous share of it (1 where
        the device schedules its own work)."""

    def fork_safe(self) -> bool:
        """Whether a process forked from this one can still run this backend's kernels."""

    def toolchain(self) -> dict[str, Any]:
        """Versions and flags that the generated binaries depend on (for the cache key)."""


def sequential_launcher(compiled: Sequence[CompiledKernel], buffers: Sequence[Sequence[Any]]) -> Callable[[], None]:
    """A launcher for backends with nothing faster: call each kernel on its bound buffers in order."""
    steps = [(ck, list(b)) for ck, b in zip(compiled, buffers)]

    def launch() -> None:
        for ck, b in steps:
            ck(b)

    return launch


_BACKENDS: dict[str, Callable[[Target], Backend]] = {}


def register_backend(name: str, factory: Callable[[Target], Backend]) -> None:
    """``factory`` makes the backend for a Target whose ``backend`` is ``name``."""
    _BACKENDS[name] = factory


def get_backend(target: str | Target = "auto", threads: int | None = None) -> Backend:
    """The backend for ``target``: a Target, or a backend name whose Target is detected here (luminal.target's
    detect_target: ``auto`` as its resolve_backend picks, ``threads`` or the environment's count)."""
    from ..errors import LuminalError

    _load_builtin()
    if isinstance(target, str):
        target = detect_target(target, threads)
    name = target.backend
    if name not in _BACKENDS:
        raise LuminalError(f"unknown backend {name!r}; choose from auto, {', '.join(sorted(_BACKENDS))}")
    backend = _BACKENDS[name](target)
    missing = backend.available()
    if missing:
        raise LuminalError(f"backend {name!r} cannot run here: {missing}")
    return backend


def with_threads(backend: Backend, threads: int) -> Backend:
    """``backend`` on its Target with ``threads`` threads (a new backend where the count differs); a backend made
    without a Target (a test's, one registered elsewhere) comes back as it is."""
    target = getattr(backend, "target", None)
    if not isinstance(target, Target) or target.threads == threads:
        return backend
    return get_backend(replace(target, threads=threads))


def _load_builtin() -> None:
    import importlib

    for mod in ("triton.backend", "c.backend"):
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as e:
            if not e.name or not e.name.startswith(__package__):
                raise
