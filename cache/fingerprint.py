"""Who measured a timing: the device fingerprint, the toolchain fingerprint, and the C compiler probe."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import LuminalError

# bump whenever generated code changes in a way that invalidates measured timings
CODEGEN_VERSION = "3"

# ISA extensions that change what a CPU kernel can use; everything else in /proc/cpuinfo is noise
CPU_ISA_FLAGS = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)


@dataclass(frozen=True)
class Fingerprint:
    """A stable key (short hash of ``info``) and the facts it was made from."""

    key: str
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, kind: str, info: dict[str, Any]) -> Fingerprint:
        canonical = json.dumps(info, sort_keys=True, separators=(",", ":"), default=str)
        return cls(f"{kind}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}", dict(info))


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


def device_fingerprint(backend: str, index: int = 0) -> Fingerprint:
    """The device a backend times on: the GPU for ``cuda``, the CPU otherwise."""
    if backend == "cuda":
        info = cuda_info(index)
        if info is None:
            raise LuminalError("backend 'cuda' needs a visible NVIDIA GPU and none was found")
        return Fingerprint.of("cuda", {"backend": "cuda", **info})
    if backend not in ("cpu", "interpret", "reference"):
        raise LuminalError(f"unknown backend {backend!r}: expected cuda, cpu, interpret or reference")
    return _host_device(backend)


def _host_device(backend: str) -> Fingerprint:
    return Fingerprint.of(backend, {"backend": backend, **cpu_info()})


def backend_fingerprints(backend: Any) -> tuple[Fingerprint, Fingerprint]:
    """The (device, toolchain) keys a backend's winners are stored and looked up under: the
    toolchain includes everything the backend says its binaries depend on (compiler, flags, SIMD).
    Any backend but cuda times on this host's CPU, including ones registered by others."""
    name = backend.name
    device = device_fingerprint(name) if name == "cuda" else _host_device(name)
    return device, toolchain_fingerprint(name, dict(backend.toolchain()))


def toolchain_fingerprint(backend: str, compiler_info: dict[str, Any] | None = None) -> Fingerprint:
    """Codegen version plus what turns source into a binary (the caller says; else detected)."""
    if compiler_info is None:
        if backend == "cpu":
            cc = detect_c_compiler()
            compiler_info = cc.as_dict() if cc else {"cc": None}
        elif backend in ("cuda", "interpret"):
            compiler_info = {"triton": package_version("triton")}
        else:
            compiler_info = {}
    info = {"backend": backend, "codegen": CODEGEN_VERSION, **compiler_info}
    return Fingerprint.of("tc", info)


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
    return names + ["cc", "gcc", "clang"]


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
            openmp = _compiles(cc, _PROBE_OMP, BASE_FLAGS + ("-fopenmp",), tmp)
            native = _compiles(cc, _PROBE_C, BASE_FLAGS + ("-march=native",), tmp)
        return CompilerInfo(cc, version, BASE_FLAGS, openmp, native)
    return None


def detect_c_compiler() -> CompilerInfo | None:
    """The first of $CC, cc, gcc, clang that builds a shared library, with the flags that work."""
    return _detect(tuple(_candidates()), os.environ.get("PATH"))
