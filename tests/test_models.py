"""Whole models through luminal against onnxruntime (``luminal check``), on the reference
executor and on the compiled C backend.

Fast: the small example exports (both exporters). Slow: the full-size exports and
the model-zoo graphs shipped in the onnx wheel (``light``).
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import onnx
import pytest

from luminal.cli.modelcheck import check_model

MODELS_DIR = Path(__file__).resolve().parent.parent / "examples" / "models"
ARCHS = ("bert", "gpt2", "vit", "resnet")
EXPORTERS = ("torchscript", "dynamo")
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT = sorted(os.path.basename(p) for p in glob.glob(os.path.join(LIGHT_DIR, "*.onnx")))
BACKENDS = ("reference", "cpu")


def _check(path, shapes, backend="reference"):
    """``luminal check`` with its default tolerances."""
    t0 = time.perf_counter()
    report = check_model(str(path), shapes, backend, seed=0)
    elapsed = time.perf_counter() - t0
    detail = "; ".join(f"{o.name}: max abs {o.max_abs:.3g} max rel {o.max_rel:.3g} {o.reason}"
                       for o in report.outputs)
    print(f"{os.path.basename(str(path))} [{backend}]: {'ok' if report.ok else 'FAIL'} in {elapsed:.1f} s "
          f"({report.seconds}); {detail}")
    assert report.ok, detail
    return report


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("arch", ARCHS)
def test_small_export_matches_onnxruntime(small_models, arch, exporter, backend):
    name = f"{arch}-small-{exporter}.onnx"
    info = small_models[name]
    _check(MODELS_DIR / name, info["shapes"], backend=backend)


def test_small_exports_have_symbolic_dims(small_models):
    for name, info in small_models.items():
        m = onnx.load(str(MODELS_DIR / name), load_external_data=False)
        params = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
        assert set(info["shapes"]) <= params, (name, params)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("arch", ARCHS)
def test_full_export_matches_onnxruntime(full_models, arch, exporter, backend):
    name = f"{arch}-full-{exporter}.onnx"
    _check(MODELS_DIR / name, full_models[name]["shapes"], backend=backend)


def test_light_models_are_shipped():
    assert len(LIGHT) == 9, LIGHT


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_onnxruntime(name, backend):
    _check(os.path.join(LIGHT_DIR, name), {}, backend=backend)


def test_example_config_lists_the_small_exports(small_models):
    from luminal.config import read_config_file

    config = read_config_file(MODELS_DIR.parent / "luminal.toml")
    assert sorted(m.path.name for m in config.models) == sorted(small_models)


def _randomise_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light graphs fill every weight with 0.02 (ConstantOfShape), so every class gets the same
    score and any implementation matches. Replace each fill with seeded values fitting its use:
    He-initialised Conv/Gemm weights, positive BatchNormalization scales and variances, small
    biases and means."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    uses: dict[str, tuple[str, int]] = {}
    for n in model.graph.node:
        for i, name in enumerate(n.input):
            uses.setdefault(name, (n.op_type, i))
    keep, new_inits = [], []
    for n in model.graph.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = tuple(int(d) for d in inits[n.input[0]])
        op, i = uses.get(n.output[0], ("", 0))
        if op in ("Conv", "Gemm", "MatMul") and i == 1 and len(shape) >= 2:
            fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[1] if op == "Gemm" else shape[0]
            v = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif op == "BatchNormalization" and i in (1, 4):
            v = rng.uniform(0.2, 0.5, shape) if i == 1 else rng.uniform(0.5, 1.5, shape)
        else:
            v = rng.standard_normal(shape) * 0.1
        new_inits.append(numpy_helper.from_array(v.astype(np.float32), n.output[0]))
    used = {name for n in keep for name in n.input}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    dropped = {t.name for t in out.graph.initializer} - used - {o.name for o in out.graph.output}
    old = [t for t in out.graph.initializer if t.name not in dropped]
    del out.graph.initializer[:]
    out.graph.initializer.extend(old + new_inits)
    inputs = [i for i in out.graph.input if i.name not in dropped]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_with_random_weights_matches_onnxruntime(name, tmp_path, backend):
    model = _randomise_weights(onnx.load(os.path.join(LIGHT_DIR, name)))
    path = tmp_path / name
    onnx.save(model, str(path))
    _check(path, {}, backend=backend)


def test_import_bench_runs_on_a_small_export(small_models, tmp_path):
    import json
    import subprocess
    import sys

    bench = MODELS_DIR.parent.parent / "benchmarks" / "import_bench.py"
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, str(bench), "--models", "bert-small-torchscript,gpt2-small-dynamo",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    for name in ("bert-small-torchscript", "gpt2-small-dynamo"):
        r = data[name]
        assert "error" not in r, r
        assert r["seconds"] > 0 and r["model_mb"] > 0 and r["primitives"] > 0 and r["onnx_nodes"] > 0
        assert r["shapes"] == small_models[name + ".onnx"]["shapes"]
