"""What code is compiled for and run on (a Target), and the hardware detection it is made from.

A Target is made once, at the edge (a CLI command's options, ``InferenceSession``'s arguments, ``tune()``), and
handed to the backend; nothing below reads the thread settings from the environment again. This module sits
below codegen, search, runtime and the cache: it imports none of them.
"""

from __future__ import annotations

import functools
import importlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import LuminalError

# ISA extensions that change what a CPU kernel can use; everything else in /proc/cpuinfo is noise
CPU_ISA_FLAGS = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)
# the environment variables a default thread count follows, luminal's own first (OpenMP's: its first level)
THREAD_VARS = ("LUMINAL_NUM_THREADS", "OMP_NUM_THREADS")
# a memory page: where two buffers start within one decides which L1 sets their lines share
PAGE_BYTES = 4096


@dataclass(frozen=True)
class CompilerInfo:
    """A working C compiler and the flags it accepts."""

    path: str
    version: str
    base_flags: tuple[str, ...]
    openmp: bool
    march_native: bool

    @property
    def flags(self) -> tuple[str, ...]:
        extra = (("-fopenmp",) if self.openmp else ()) + (("-march=native",) if self.march_native else ())
        return self.base_flags + extra

    def as_dict(self) -> dict[str, Any]:
        return {"cc": self.version, "flags": list(self.flags)}


@dataclass(frozen=True)
class Target:
    """What kernels are generated for and run on.

    ``backend``: a registered backend's name (cpu, cuda, interpret, ...), never ``auto``; ``threads``: the C
    kernels' thread count (their default, and the most the thread knob offers); ``simd_width``: float32 lanes of
    the host's widest vector unit; ``compiler``: the C compiler (None where the backend needs none, or none
    works); ``gpu_arch``: the GPU's compute capability as major * 10 + minor (None off the GPU)."""

    backend: str
    threads: int
    simd_width: int
    compiler: CompilerInfo | None = None
    gpu_arch: int | None = None


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------- CPU


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo, or {} where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip().lower(), value.strip())
    return out


def cpu_info() -> dict[str, Any]:
    info = _cpuinfo()
    model = info.get("model name") or info.get("hardware") or info.get("cpu model") or platform.processor()
    flags = set((info.get("flags") or info.get("features") or "").split())
    return {
        "model": model or platform.machine() or "unknown",
        "arch": platform.machine(),
        "isa": [f for f in CPU_ISA_FLAGS if f in flags],
        "cores": os.cpu_count() or 1,
    }


@functools.lru_cache(maxsize=1)
def host_simd_width() -> int:
    """float32 lanes of this CPU's widest vector unit (read once: every ``space`` and ``valid`` call of a
    search asks)."""
    isa = set(cpu_info()["isa"])
    if "avx512f" in isa:
        return 16
    if "avx" in isa or "asimd" in isa:
        return 8
    return 4


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_count(value: int | None, what: str = "--threads") -> int | None:
    """A thread or worker count a person gave (option or configuration), refused below 1 or beyond PER_CORE per
    core here."""
    from .values import per_core_count

    return per_core_count(value, what, cores())


def threads_from_env() -> int | None:
    """LUMINAL_NUM_THREADS, else OpenMP's OMP_NUM_THREADS (its first level); None where neither is a count."""
    for var in THREAD_VARS:
        env = os.environ.get(var, "").split(",")[0].strip()
        if env.isdigit() and int(env) > 0:
            return int(env)
    return None


def default_threads() -> int:
    """The thread count where none is given: the environment's (threads_from_env), else every core."""
    return threads_from_env() or cores()


# ---------------------------------------------------------------- CUDA


def gpu_may_exist() -> bool:
    """Cheap test before importing torch: a visible NVIDIA (or ROCm) device node or driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd"))


def _nvidia_driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def cuda_info(index: int = 0) -> dict[str, Any] | None:
    """Facts about CUDA device ``index`` via torch, or None when no GPU is visible."""
    if not gpu_may_exist() or package_version("torch") is None:
        return None
    try:
        import torch

        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        props = torch.cuda.get_device_properties(index)
        return {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "driver": _nvidia_driver_version(),
            "cuda": torch.version.cuda or torch.version.hip,
        }
    except Exception:  # a broken driver is "no usable GPU", reported by doctor
        return None


def missing_for_triton(gpu: bool) -> str | None:
    """None where the Triton backends can run (``gpu``: the cuda one, which needs a visible GPU), else one line
    saying what is missing."""
    # importing torch costs seconds: without an NVIDIA driver there is no GPU to find
    if gpu and not gpu_may_exist():
        return "no CUDA GPU is visible"
    for name in ("torch", "triton"):
        try:
            importlib.import_module(name)
        except ImportError:
            return f"{name} is not installed (pip install luminal-onnx[gpu])"
    if gpu and cuda_info() is None:
        return "no CUDA GPU is visible"
    return None


# ---------------------------------------------------------------- the one backend resolver


def resolve_backend(name: str) -> str:
    """The backend ``name`` stands for: ``auto`` is cuda where a GPU is visible and Triton can drive it, else
    cpu; any other name is itself (whether it exists is the backend registry's to say)."""
    if name != "auto":
        return name
    return "cuda" if missing_for_triton(gpu=True) is None else "cpu"


def detect_target(backend: str = "auto", threads: int | None = None) -> Target:
    """The Target for ``backend`` (resolved as resolve_backend does) on this machine, with ``threads`` threads
    (None: default_threads, which reads the environment: call this at the edge, once)."""
    if threads is not None and threads < 1:
        raise LuminalError(f"the thread count must be at least 1, got {threads}")
    name = resolve_backend(backend)
    arch = None
    if name == "cuda" and (gpu := cuda_info()) is not None:
        major, minor = gpu["capability"].split(".")
        arch = int(major) * 10 + int(minor)
    compiler = detect_c_compiler() if name == "cpu" else None
    return Target(name, threads if threads is not None else default_threads(), host_simd_width(), compiler, arch)


# ---------------------------------------------------------------- C compiler

_PROBE_C = "int luminal_probe(int x) { return x * 2 + 1; }\n"
_PROBE_OMP = """
#include <omp.h>
int luminal_probe(int n) {
    int s = 0;
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; i++) s += i;
    return s + omp_get_max_threads() * 0;
}
"""
BASE_FLAGS = ("-O3", "-shared", "-fPIC")


def _compiles(cc: str, source: str, flags: tuple[str, ...], workdir: str) -> bool:
    src = os.path.join(workdir, "probe.c")
    out = os.path.join(workdir, "probe.so")
    with open(src, "w") as f:
        f.write(source)
    try:
        res = subprocess.run([cc, *flags, src, "-o", out], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and os.path.exists(out)


def _compiler_version(cc: str) -> str | None:
    try:
        res = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (res.stdout or res.stderr).strip().splitlines()
    return lines[0].strip() if res.returncode == 0 and lines else None


def _candidates() -> list[str]:
    names = [os.environ["CC"]] if os.environ.get("CC") else []
    return [*names, "cc", "gcc", "clang"]


@functools.lru_cache(maxsize=8)
def _detect(candidates: tuple[str, ...], path_env: str | None) -> CompilerInfo | None:
    for name in candidates:
        cc = shutil.which(name, path=path_env)
        if not cc:
            continue
        version = _compiler_version(cc)
        if version is None:
            continue
        with tempfile.TemporaryDirectory(prefix="luminal-cc-") as tmp:
            if not _compiles(cc, _PROBE_C, BASE_FLAGS, tmp):
                continue
            openmp = _compiles(cc, _PROBE_OMP, (*BASE_FLAGS, "-fopenmp"), tmp)
            native = _compiles(cc, _PROBE_C, (*BASE_FLAGS, "-march=native"), tmp)
        return CompilerInfo(cc, version, BASE_FLAGS, openmp, native)
    return None


def detect_c_compiler() -> CompilerInfo | None:
    """The first of $CC, cc, gcc, clang that builds a shared library, with the flags that work."""
    return _detect(tuple(_candidates()), os.environ.get("PATH"))
