"""The Triton backends: "cuda" (JIT-compiled on an NVIDIA GPU) and "interpret" (the same
source run by Triton's interpreter on CPU torch tensors, for correctness only).

The interpreter is chosen per function (``InterpretedFunction``), not through the
TRITON_INTERPRET environment variable, so both backends can live in one process
whatever was imported first.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ...ir.dtypes import DType
from ...target import Target, missing_for_triton
from ..backend import CompiledKernel, Knob, Schedule, register_backend, sequential_launcher
from ..kernel import Kernel
from . import schedule as sched
from .emit import emit, emit_typed

CODEGEN_VERSION = "triton-1"
_SRC_DIR: str | None = None
_MODULES: dict[str, Any] = {}


def _src_dir() -> str:
    global _SRC_DIR
    if _SRC_DIR is None:
        _SRC_DIR = tempfile.mkdtemp(prefix="luminal-triton-")
        atexit.register(shutil.rmtree, _SRC_DIR, True)
    return _SRC_DIR


def load_source(source: str) -> ModuleType:
    """Import generated source as a module (Triton needs a real file to read the function back)."""
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    if key in _MODULES:
        return _MODULES[key]
    path = os.path.join(_src_dir(), f"lk_{key}.py")
    with open(path, "w") as f:
        f.write(source)
    name = f"luminal_generated_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    _MODULES[key] = mod
    return mod


def _host(array: np.ndarray):
    """A CPU tensor over the array's memory where it can be (numpy has no bfloat16 torch knows)."""
    import torch

    a = np.ascontiguousarray(array)
    if not a.flags.writeable:  # torch does not share read-only memory
        a = a.copy()
    if a.dtype == DType.bfloat16.np:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def torch_dtype(dt: DType):
    import torch

    return {DType.float32: torch.float32, DType.float16: torch.float16, DType.bfloat16: torch.bfloat16,
            DType.int64: torch.int64, DType.int32: torch.int32, DType.bool: torch.bool}[dt]


class TritonKernel:
    """One launchable kernel: buffers are torch tensors, inputs then outputs."""

    def __init__(self, kernel: Kernel, schedule: sched.TritonSchedule, interpret: bool):
        self.source = source = emit_typed(kernel, schedule)
        mod = load_source(source)
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction

            self.fn = InterpretedFunction(mod.kernel.fn)
        else:
            from triton.runtime.jit import JITFunction

            # TRITON_INTERPRET=1 in the environment makes @triton.jit interpret; the GPU wants the JIT
            self.fn = mod.kernel if isinstance(mod.kernel, JITFunction) else JITFunction(mod.kernel.fn)
        self.grid = sched.grid(kernel, schedule)
        self.constexprs = sched.constexprs(kernel, schedule, native_dot=not interpret)
        self.options: dict[str, int | bool] = {} if interpret else dict(sched.launch_options(schedule))
        if not interpret:
            self.options["enable_fp_fusion"] = False
        self.zero_outputs = sched.needs_zeroed_output(schedule)
        self.n_in = len(kernel.inputs)
        self.empty = math.prod(kernel.full) == 0

    def __call__(self, buffers: Sequence[Any]) -> None:
        import torch

        if self.empty:
            return
        args = [b.view(torch.uint8) if b.dtype == torch.bool else b for b in buffers]
        if self.zero_outputs:
            for b in args[self.n_in:]:
                b.zero_()
        with np.errstate(all="ignore"):  # the interpreter computes in numpy; inf/nan are results, not errors
            self.fn[self.grid](*args, **self.constexprs, **self.options)


def _warm_up(pairs: list[tuple[TritonKernel, Kernel]]) -> None:
    """JIT-compile on the GPU ahead of the first launch, several kernels at once (ptxas runs as a
    subprocess). Arguments are dtypes: Triton specialises on them and on 16-byte alignment,
    which every buffer we launch with has. A failure here resurfaces, with its message, at launch."""
    from concurrent.futures import ThreadPoolExecutor

    def one(pair: tuple[TritonKernel, Kernel]) -> None:
        tk, k = pair
        import torch

        dts = [torch.uint8 if b.dtype is DType.bool else torch_dtype(b.dtype)
               for b in [*k.inputs, *(b for _, b in k.outputs)]]
        with contextlib.suppress(Exception):
            tk.fn.warmup(*dts, grid=tk.grid, **tk.constexprs, **tk.options)

    with ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) // 2))) as pool:
        list(pool.map(one, pairs))


def _typed(kernel: Kernel, schedule: Schedule) -> sched.TritonSchedule:
    t = sched.typed(kernel, schedule)
    if t is None:
        raise ValueError(f"not a schedule of this {sched.kind_of(kernel)} kernel: {schedule}")
    return t


class TritonBackend:
    def __init__(self, target: Target, interpret: bool):
        self.name = target.backend
        self.target = target
        self.interpret = interpret
        self._arch: int | None = 80 if interpret else target.gpu_arch

    def fork_safe(self) -> bool:
        return False  # a CUDA context does not survive fork

    def threads(self) -> int:
        return 1

    def available(self) -> str | None:
        return missing_for_triton(gpu=not self.interpret)

    @property
    def arch(self) -> int:
        if self._arch is None:
            import torch

            major, minor = torch.cuda.get_device_capability()
            self._arch = major * 10 + minor
        return self._arch

    @property
    def device(self) -> str:
        return "cpu" if self.interpret else "cuda"

    def space(self, kernel: Kernel) -> list[Knob]:
        return sched.space(kernel)

    def default_schedule(self, kernel: Kernel) -> Schedule:
        return sched.default(kernel)

    def valid(self, kernel: Kernel, schedule: Schedule) -> bool:
        return sched.valid(kernel, schedule, self.arch)

    def source(self, kernel: Kernel, schedule: Schedule) -> str:
        return emit(kernel, schedule)

    def in_place(self, kernel: Kernel, schedule: Schedule) -> tuple[int, ...]:
        return ()  # every output a buffer of its own: writing over a residual has not run on a GPU

    def identity(self, kernel: Kernel, schedule: Schedule) -> str:
        # block sizes are launch arguments: every schedule is a point of its own
        return json.dumps(schedule, sort_keys=True, default=str)

    def compile(self, items: Sequence[tuple[Kernel, Schedule]]) -> list[CompiledKernel]:
        kernels = [TritonKernel(k, _typed(k, s), self.interpret) for k, s in items]
        if not self.interpret and kernels:
            _warm_up([(tk, k) for tk, (k, _) in zip(kernels, items)])
        return list(kernels)

    def from_numpy(self, array: np.ndarray):
        return _host(array).to(self.device, copy=True)

    def launcher(self, compiled, buffers):
        return sequential_launcher(compiled, buffers)

    def write(self, buffer, array: np.ndarray) -> None:
        buffer.copy_(_host(array).reshape(buffer.shape))  # one transfer; copy_ converts the dtype

    def to_numpy(self, buffer) -> np.ndarray:
        import torch

        t = buffer.detach().to("cpu", copy=True)  # one transfer, never a view of the buffer
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(DType.bfloat16.np)
        return t.numpy()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype):
        import torch

        dtype = np.dtype(dtype)
        tdt = torch_dtype(DType.bfloat16) if dtype == DType.bfloat16.np else torch.from_numpy(np.empty(0, dtype)).dtype
        return torch.empty(tuple(shape), dtype=tdt, device=self.device)

    def empty_at(self, shape: tuple[int, ...], dtype: np.dtype, offset: int):
        return self.empty(shape, dtype)  # the caching allocator's blocks: no page offset to choose

    def synchronize(self) -> None:
        if not self.interpret:
            import torch

            torch.cuda.synchronize()

    def toolchain(self) -> dict[str, Any]:
        import torch
        import triton

        return {"codegen": CODEGEN_VERSION, "triton": triton.__version__, "torch": torch.__version__,
                "interpret": self.interpret}


register_backend("cuda", lambda target: TritonBackend(target, interpret=False))
register_backend("interpret", lambda target: TritonBackend(target, interpret=True))
