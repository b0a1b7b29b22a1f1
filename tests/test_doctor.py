"""``luminal doctor``: versions, GPU, compiler, cache; exit 1 when the chosen backend cannot run."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path

from cli_util import invoke

from luminal.cache import TuningCache
from luminal.cli import doctor_cmd
from luminal.target import cuda_info, detect_c_compiler


def doctor(*args: str):
    return invoke(doctor_cmd, args=["doctor", *args])


def test_json_report(tmp_path: Path):
    cache = tmp_path / "c.db"
    with TuningCache(cache) as c:
        c.record_trial("k", "d", "t", {}, "ok", [1])
    r = doctor("--json", "--backend", "reference", "--cache", str(cache))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["python"]["version"] == platform.python_version()
    assert data["packages"]["onnx"] == metadata.version("onnx")
    assert data["packages"]["torch"] == metadata.version("torch")
    assert data["cache"]["path"] == str(cache) and data["cache"]["trials"] == 1 and data["cache"]["status"] == "ok"
    assert data["cache"]["size_bytes"] > 0
    cc = detect_c_compiler()
    assert (data["c_compiler"] is None) == (cc is None)
    if cc is not None:
        assert data["c_compiler"]["version"] == cc.version and data["openmp"] == cc.openmp
        assert data["backends"]["cpu"]["ok"]
    assert (data["gpu"] is None) == (cuda_info() is None)
    assert data["backends"]["reference"]["ok"] and data["ok"] and data["checked_backend"] == "reference"


def test_table_report_and_bad_cache(tmp_path: Path):
    bad = tmp_path / "bad.db"
    bad.write_text("nope")
    r = doctor("--backend", "reference", "--cache", str(bad))
    assert r.exit_code == 0, r.output
    for word in ("python", "onnxruntime", "gpu", "c compiler", "openmp", "not a luminal tuning cache"):
        assert word in r.stdout


def test_cpu_backend_without_compiler_exits_1(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    r = doctor("--backend", "cpu", "--json", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["c_compiler"] is None and not data["openmp"] and not data["ok"]
    assert "no working C compiler" in data["backends"]["cpu"]["detail"]
    r = doctor("--backend", "cpu", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 1 and "backend cpu cannot run here" in r.stdout


def test_cuda_backend_without_gpu_exits_1(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    r = doctor("--backend", "cuda", "--json", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["gpu"] is None and data["backends"]["cuda"]["detail"] == "no NVIDIA GPU visible"
    assert data["backends"]["auto"]["detail"].startswith("picks cpu")


def test_unknown_backend_is_exit_2(tmp_path: Path):
    r = doctor("--backend", "tpu", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 2
    assert "--backend: expected one of auto, cuda, cpu, interpret, reference, got 'tpu'" in r.output


def test_cuda_backend_with_gpu_exits_0(monkeypatch, tmp_path: Path):
    gpu = {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "memory_bytes": 150 * 2**30,
           "driver": "580.159.03", "cuda": "13.0"}
    monkeypatch.setattr("luminal.target.cuda_info", lambda index=0: gpu)
    monkeypatch.setattr("luminal.target.gpu_may_exist", lambda: True)
    r = doctor("--backend", "cuda", "--json", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["gpu"] == gpu and data["backends"]["auto"]["detail"] == "picks cuda: ok"
    r = doctor("--backend", "cuda", "--cache", str(tmp_path / "c.db"))
    assert r.exit_code == 0 and "NVIDIA H200 (sm 9.0, 132 SMs, 150 GiB" in r.stdout
