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


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_with_random_weights_matches_onnxruntime(name, tmp_path, backend):
    """The light graphs fill every weight with 0.02 (ConstantOfShape), so every class gets the same score and
    any implementation matches: check them with the seeded weights benchmarks/cpu_models.py --size cnn uses."""
    from test_light_seeding import export_models_module

    model = export_models_module().seeded_light_model(Path(LIGHT_DIR) / name)
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
