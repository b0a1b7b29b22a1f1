"""Artifacts that ship: ``compile -o`` stores the built kernel libraries next to their sources, and an artifact loads
with no compiler on PATH where the CPU, toolchain and thread count are those it was built for (it rebuilds from the
sources otherwise); check and bench take the artifact folder; a folder that is no model is said to be one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from cli_util import invoke, needs_cpu
from runtime_util import matmul_relu_softmax

from luminal.cli import check_cmd, compile_cmd
from luminal.codegen.c import build
from luminal.errors import LuminalError
from luminal.runtime.session import InferenceSession

pytestmark = needs_cpu


def _model(path: Path) -> Path:
    return matmul_relu_softmax(path, rows="batch")


@pytest.fixture
def artifact(tmp_path, monkeypatch) -> tuple[Path, Path]:
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "build-cache"))
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path / "no-tuning.db"))  # default schedules
    model = _model(tmp_path / "m.onnx")
    r = invoke(compile_cmd, args=["compile", str(model), "--backend", "cpu", "--shape", "batch=3", "-o",
                                  str(tmp_path / "art")])
    assert r.exit_code == 0, r.output
    return model, tmp_path / "art"


def _no_compiler(tmp_path: Path, monkeypatch) -> None:
    """No compiler to be found, and an empty build cache: only the artifact's libraries can serve."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "fresh-cache"))


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}


def test_the_libraries_ship_with_the_sources(artifact):
    _, art = artifact
    manifest = json.loads((art / "manifest.json").read_text())
    libs = manifest["build"]["libraries"]
    assert libs and all((art / "lib" / name).is_file() for name in libs)
    assert manifest["build"]["cpu"] == build.cpu_id() and manifest["build"]["toolchain"]["version"]
    assert list((art / "kernels").glob("*.c"))


def test_an_artifact_loads_and_runs_with_no_compiler_on_path(artifact, tmp_path, monkeypatch):
    model, art = artifact
    _no_compiler(tmp_path, monkeypatch)
    from luminal.target import detect_c_compiler

    assert detect_c_compiler() is None
    before = dict(build.STATS)
    got = InferenceSession(art).run(None, _feeds())[0]
    assert before == build.STATS  # nothing compiled, nothing linked
    want = ort.InferenceSession(str(model)).run(None, _feeds())[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not list((tmp_path / "fresh-cache").glob("*.so"))
    # check takes the folder: the shipped kernels against onnxruntime on the model they came from
    r = invoke(check_cmd, args=["check", str(art), "--json", "-"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ok"] is True and before == build.STATS


def test_another_cpu_rebuilds_from_the_sources(artifact, tmp_path, monkeypatch):
    model, art = artifact
    monkeypatch.setattr(build, "cpu_id", lambda: "another-cpu")  # the shipped libraries' names no longer match
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "fresh-cache"))
    before = build.STATS["compile"]
    got = InferenceSession(art).run(None, _feeds())[0]
    assert build.STATS["compile"] > before  # rebuilt from the shipped sources
    np.testing.assert_allclose(got, ort.InferenceSession(str(model)).run(None, _feeds())[0], rtol=1e-4, atol=1e-5)
    # and with no compiler to rebuild them, one clear error
    _no_compiler(tmp_path, monkeypatch)
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "fresh-cache-2"))
    with pytest.raises(LuminalError, match=r"no C compiler found.*must be rebuilt from their sources"):
        InferenceSession(art).run(None, _feeds())


def test_compile_says_what_it_did_and_folders_are_named_as_such(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "build-cache"))
    model = _model(tmp_path / "m.onnx")
    r = invoke(compile_cmd, args=["compile", str(model), "--backend", "cpu", "--shape", "batch=1"])
    assert r.exit_code == 0, r.output
    assert "not written (-o DIR writes one" in " ".join(r.output.split())
    (tmp_path / "folder").mkdir()
    for module, cmd in ((compile_cmd, "compile"), (check_cmd, "check")):
        r = invoke(module, args=[cmd, str(tmp_path / "folder")])
        assert r.exit_code == 2 and "is a folder, not a file" in " ".join(r.output.split()), r.output
    r = invoke(compile_cmd, args=["compile", str(tmp_path / "missing.onnx")])
    assert r.exit_code == 2 and "model " in r.output and "missing.onnx' not found" in r.output
