"""Device and toolchain fingerprints, and the hardware and C compiler detection they are made from."""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import subprocess
from pathlib import Path

import pytest

from luminal import target as tg
from luminal.cache import fingerprint as fp
from luminal.errors import LuminalError


def test_key_is_a_stable_hash_of_info():
    a = fp.Fingerprint.of("cpu", {"model": "x", "cores": 4, "isa": ["avx2"]})
    b = fp.Fingerprint.of("cpu", {"isa": ["avx2"], "cores": 4, "model": "x"})
    c = fp.Fingerprint.of("cpu", {"model": "x", "cores": 8, "isa": ["avx2"]})
    assert a.key == b.key != c.key
    assert a.key.startswith("cpu-") and len(a.key) == len("cpu-") + 16


def test_cpu_fingerprint():
    d1, d2 = fp.device_fingerprint("cpu"), fp.device_fingerprint("cpu")
    assert d1 == d2
    info = d1.info
    assert info["backend"] == "cpu" and info["cores"] == os.cpu_count() and info["arch"] == platform.machine()
    assert set(info["isa"]) <= set(tg.CPU_ISA_FLAGS)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                      if line.lower().startswith(("flags", "features"))), [])
        assert info["isa"] == [f for f in tg.CPU_ISA_FLAGS if f in flags]
    assert fp.device_fingerprint("interpret").key != d1.key  # backends never share winners


def test_cuda_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert tg.cuda_info() is None
    with pytest.raises(LuminalError, match="needs a visible NVIDIA GPU"):
        fp.device_fingerprint("cuda")
    with pytest.raises(LuminalError, match="unknown backend"):
        fp.device_fingerprint("tpu")


def test_toolchain_depends_on_codegen_version_and_compiler(monkeypatch):
    base = fp.toolchain_fingerprint("cpu", {"cc": "gcc 12", "flags": ["-O3"]})
    assert base == fp.toolchain_fingerprint("cpu", {"cc": "gcc 12", "flags": ["-O3"]})
    assert base.info["codegen"] == fp.CODEGEN_VERSION
    assert fp.toolchain_fingerprint("cpu", {"cc": "gcc 13", "flags": ["-O3"]}).key != base.key
    assert fp.toolchain_fingerprint("cpu", {"cc": "gcc 12", "flags": ["-O3", "-fopenmp"]}).key != base.key
    monkeypatch.setattr(fp, "CODEGEN_VERSION", "999")
    assert fp.toolchain_fingerprint("cpu", {"cc": "gcc 12", "flags": ["-O3"]}).key != base.key
    cuda = fp.toolchain_fingerprint("cuda")
    assert cuda.info["triton"] == tg.package_version("triton")


def test_detect_c_compiler_builds_a_loadable_library(tmp_path: Path):
    cc = tg.detect_c_compiler()
    assert cc is not None, "this machine has a C compiler"
    assert os.path.exists(cc.path) and cc.version
    assert set(cc.base_flags) <= set(cc.flags)
    assert ("-fopenmp" in cc.flags) == cc.openmp
    src = tmp_path / "k.c"
    src.write_text("int twice(int x) { return 2 * x; }\n")
    subprocess.run([cc.path, *cc.flags, str(src), "-o", str(tmp_path / "k.so")], check=True)
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    assert lib.twice(21) == 42
    assert fp.toolchain_fingerprint("cpu").info["cc"] == cc.version


def _fake(path: Path, script: str) -> None:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_no_compiler_and_broken_compiler(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tg.detect_c_compiler() is None
    _fake(tmp_path / "cc", "echo 'fake cc 1.0'; exit 1\n")  # --version fails
    _fake(tmp_path / "gcc", "if [ \"$1\" = --version ]; then echo 'gcc 0'; exit 0; fi; exit 1\n")  # cannot build
    assert tg.detect_c_compiler() is None
    assert fp.toolchain_fingerprint("cpu").info["cc"] is None


class _FakeTorch:
    """Stands in for torch on a machine with one GPU, to exercise the CUDA path without one."""

    class version:
        cuda = "13.0"
        hip = None

    class cuda:
        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def device_count() -> int:
            return 1

        @staticmethod
        def get_device_properties(index: int):
            class Props:
                name, major, minor, multi_processor_count, total_memory = "NVIDIA H200", 9, 0, 132, 150_000_000_000
            return Props()


def test_cuda_fingerprint_from_torch(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", _FakeTorch)
    monkeypatch.setattr(tg, "gpu_may_exist", lambda: True)
    monkeypatch.setattr(tg, "_nvidia_driver_version", lambda: "580.159.03")
    info = tg.cuda_info()
    assert info == {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "memory_bytes": 150_000_000_000,
                    "driver": "580.159.03", "cuda": "13.0"}
    d = fp.device_fingerprint("cuda")
    assert d.key.startswith("cuda-") and d.info["name"] == "NVIDIA H200"
    assert tg.cuda_info(index=1) is None
    monkeypatch.setattr(tg, "_nvidia_driver_version", lambda: "580.200.00")
    assert fp.device_fingerprint("cuda").key != d.key  # a driver update invalidates timings
