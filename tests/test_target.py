"""The Target: what kernels are made for, detected once at the edge; the one "auto" backend resolver; thread
counts passed explicitly (never through this process's environment)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from luminal import target as tg
from luminal.errors import LuminalError

PACKAGE = Path(tg.__file__).resolve().parent
GPU = {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "memory_bytes": 150 * 2**30,
       "driver": "580.159.03", "cuda": "13.0"}


def _mlp(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Softmax", ["h"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 48])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {("." * n.level) + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_target_sits_below_codegen_and_codegen_asks_it_not_the_cache():
    below = {".codegen", ".search", ".runtime", ".cli", ".cache"}
    assert not {m for m in _imports(PACKAGE / "target.py") if any(m.startswith(b) for b in below)}
    for f in (PACKAGE / "codegen").rglob("*.py"):
        assert not {m for m in _imports(f) if m.lstrip(".").startswith("cache")}, f


def test_a_cpu_target_says_threads_simd_and_compiler():
    t = tg.detect_target("cpu", threads=3)
    assert t == tg.Target("cpu", 3, tg.host_simd_width(), tg.detect_c_compiler(), None)
    assert t.simd_width in (4, 8, 16) and t.compiler is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.threads = 1  # type: ignore[misc]
    with pytest.raises(LuminalError, match="at least 1"):
        tg.detect_target("cpu", threads=0)


def test_the_default_thread_count_is_read_from_the_environment_when_the_target_is_made(monkeypatch):
    monkeypatch.delenv("LUMINAL_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert tg.detect_target("cpu").threads == tg.cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")  # OpenMP's first level
    assert tg.detect_target("cpu").threads == 3
    monkeypatch.setenv("LUMINAL_NUM_THREADS", "5")  # luminal's own first
    assert tg.detect_target("cpu").threads == 5
    assert tg.detect_target("cpu", threads=2).threads == 2  # an explicit count wins


def test_a_visible_gpu_with_triton_resolves_auto_to_cuda(monkeypatch):
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    monkeypatch.setattr(tg, "gpu_may_exist", lambda: True)
    monkeypatch.setattr(tg, "cuda_info", lambda index=0: GPU)
    assert tg.resolve_backend("auto") == "cuda"
    t = tg.detect_target("cuda", threads=1)
    assert t.backend == "cuda" and t.gpu_arch == 90 and t.compiler is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(tg, "gpu_may_exist", lambda: False)
    assert tg.resolve_backend("auto") == "cpu"
    assert tg.resolve_backend("interpret") == "interpret"


def test_bench_and_compile_choose_the_same_backend_when_triton_is_missing(monkeypatch, tmp_path):
    """torch sees a GPU but Triton cannot be imported: bench picked cuda (and failed), compile picked cpu."""
    from luminal.cli import main as cli_main
    from luminal.codegen.backend import get_backend

    if not any(c.name == "bench" for c in cli_main.app.registered_commands):
        cli_main._register()
    monkeypatch.setattr(tg, "gpu_may_exist", lambda: True)
    monkeypatch.setattr(tg, "cuda_info", lambda index=0: GPU)
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton fails
    assert tg.resolve_backend("auto") == "cpu"
    assert get_backend("auto").name == "cpu"
    model = _mlp(tmp_path / "mlp.onnx")
    runner = CliRunner()
    res = runner.invoke(cli_main.app, ["compile", str(model), "--backend", "auto", "--json"])
    assert res.exit_code == 0, res.output
    compiled = json.loads(res.stdout)["backend"]
    out = tmp_path / "bench.json"
    res = runner.invoke(cli_main.app, ["bench", str(model), "--backend", "auto", "--runs", "2", "--warmup", "0",
                                       "--threads", "1", "--json", str(out), "--cache", str(tmp_path / "t.db")])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["backend"] == compiled == "cpu"
    assert doc["models"][0]["status"] == "ok"


def test_bench_threads_reach_the_kernels_without_touching_the_environment(monkeypatch, tmp_path):
    from luminal.cli import main as cli_main

    if not any(c.name == "bench" for c in cli_main.app.registered_commands):
        cli_main._register()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LUMINAL_NUM_THREADS", raising=False)
    before = dict(os.environ)
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(cli_main.app, ["bench", str(_mlp(tmp_path / "mlp.onnx")), "--backend", "cpu", "--runs",
                                            "2", "--warmup", "0", "--threads", "3", "--json", str(out),
                                            "--cache", str(tmp_path / "t.db")])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["environment"]["threads"] == 3
    assert {k: v for k, v in os.environ.items() if k.endswith("NUM_THREADS")} == \
        {k: v for k, v in before.items() if k.endswith("NUM_THREADS")}


def test_a_session_after_tune_runs_with_its_own_threads(monkeypatch, tmp_path):
    """tune(threads=1) in a script once pinned every later InferenceSession of the process to one thread."""
    from luminal.runtime.session import InferenceSession
    from luminal.search.tuner import tune

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("LUMINAL_NUM_THREADS", "3")
    model = _mlp(tmp_path / "mlp.onnx")
    report = tune(str(model), "cpu", 4.0, cache=tmp_path / "t.db", storage=f"sqlite:///{tmp_path / 's.db'}",
                  threads=1, timeout_s=2.0, fusion=False, workers=1)
    assert report.kernels and all(k.best_config["threads"] == 1 for k in report.kernels if k.best_config)
    assert os.environ.get("OMP_NUM_THREADS") is None and os.environ["LUMINAL_NUM_THREADS"] == "3"

    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for threads, expect in ((2, 2), (None, 3)):
        sess = InferenceSession(model, backend="cpu", threads=threads)
        m = sess.model
        assert m.backend.target.threads == expect
        # a GEMM of 0.8M multiply-adds takes every thread of the target by default, and its kernel runs with them
        (gemm,) = [ck for k, ck in zip(m.kernels, m.compiled) if k.form == "contraction"]
        assert gemm.threads == expect
        knobs = {kn.name: kn.choices for k in m.kernels for kn in m.backend.space(k)}
        assert max(knobs["threads"]) == expect
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
