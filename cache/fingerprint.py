"""Who measured a timing: the device and toolchain fingerprints (cache keys), derived from the hardware and
compiler detection of luminal.target."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import LuminalError
from ..target import cpu_info, cuda_info, detect_c_compiler, package_version

if TYPE_CHECKING:
    from ..codegen.backend import Backend

# bump whenever generated code changes in a way that invalidates measured timings, or a search space's choices change
# (the studies are named by it, and Optuna resumes no study whose categorical choices differ)
CODEGEN_VERSION = "47"


@dataclass(frozen=True)
class Fingerprint:
    """A stable key (short hash of ``info``) and the facts it was made from."""

    key: str
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, kind: str, info: dict[str, Any]) -> Fingerprint:
        canonical = json.dumps(info, sort_keys=True, separators=(",", ":"), default=str)
        return cls(f"{kind}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}", dict(info))


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


def backend_fingerprints(backend: Backend) -> tuple[Fingerprint, Fingerprint]:
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
