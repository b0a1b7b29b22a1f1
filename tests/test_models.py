"""Whole models through luminal's reference executor against onnxruntime (``luminal check``).

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
ATOL, RTOL = 1e-4, 1e-3


def _check(path, shapes, atol=ATOL, rtol=RTOL):
    t0 = time.perf_counter()
    report = check_model(str(path), shapes, "reference", atol, rtol, seed=0)
    elapsed = time.perf_counter() - t0
    detail = "; ".join(f"{o.name}: max abs {o.max_abs:.3g} max rel {o.max_rel:.3g} {o.reason}"
                       for o in report.outputs)
    print(f"{os.path.basename(str(path))}: {'ok' if report.ok else 'FAIL'} in {elapsed:.1f} s "
          f"({report.seconds}); {detail}")
    assert report.ok, detail
    return report


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("arch", ARCHS)
def test_small_export_matches_onnxruntime(small_models, arch, exporter):
    name = f"{arch}-small-{exporter}.onnx"
    info = small_models[name]
    _check(MODELS_DIR / name, info["shapes"])


def test_small_exports_have_symbolic_dims(small_models):
    for name, info in small_models.items():
        m = onnx.load(str(MODELS_DIR / name), load_external_data=False)
        params = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
        assert set(info["shapes"]) <= params, (name, params)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("arch", ARCHS)
def test_full_export_matches_onnxruntime(full_models, arch, exporter):
    name = f"{arch}-full-{exporter}.onnx"
    _check(MODELS_DIR / name, full_models[name]["shapes"])


def test_light_models_are_shipped():
    assert len(LIGHT) == 9, LIGHT


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_onnxruntime(name):
    _check(os.path.join(LIGHT_DIR, name), {})


def test_example_config_lists_the_small_exports(small_models):
    from luminal.config import read_config_file

    config = read_config_file(MODELS_DIR.parent / "luminal.toml")
    assert sorted(m.path.name for m in config.models) == sorted(small_models)
