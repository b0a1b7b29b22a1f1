"""The light model-zoo graphs with seeded weights (examples/export_models.py ``seeded_light_model``), as
``benchmarks/cpu_models.py --size cnn`` runs them: fills replaced by varied weights of the same shapes and
dtypes, BatchNormalization statistics calibrated so activations neither vanish nor saturate the softmax."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

REPO = Path(__file__).resolve().parent.parent
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def export_models_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("export_models", REPO / "examples" / "export_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["export_models"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def export_models() -> ModuleType:
    pytest.importorskip("torch")
    return export_models_module()


def _fill_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    m = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    return {n.output[0]: tuple(int(d) for d in inits[n.input[0]])
            for n in m.graph.node if n.op_type == "ConstantOfShape"}


def _run(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", ["light_squeezenet", "light_shufflenet"])
def test_seeded_light_model_keeps_shapes_and_varies_its_weights(export_models, name):
    path = LIGHT_DIR / f"{name}.onnx"
    fills = _fill_shapes(path)
    model = export_models.seeded_light_model(path)
    onnx.checker.check_model(model)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert not [n for n in model.graph.node if n.op_type == "ConstantOfShape"]
    assert [i.name for i in model.graph.input] == [i.name for i in onnx.load(str(path)).graph.input
                                                   if i.name not in weights and not i.name.endswith("__SHAPE")]
    used = {x for n in model.graph.node for x in n.input}
    assert {k for k in fills if k in used} <= set(weights)
    for k, shape in fills.items():
        if k in weights:
            assert weights[k].shape == shape and weights[k].dtype == np.float32, k
            assert weights[k].size == 1 or weights[k].std() > 0, k
    convs = [weights[n.input[1]] for n in model.graph.node if n.op_type == "Conv"]
    for w in convs:  # He-initialised: about sqrt(2 / fan_in)
        assert 0.5 < w.std() * np.sqrt(np.prod(w.shape[1:]) / 2.0) < 1.5


def test_seeded_light_model_is_deterministic(export_models):
    path = LIGHT_DIR / "light_squeezenet.onnx"
    a = export_models.seeded_light_model(path, seed=0).SerializeToString()
    assert a == export_models.seeded_light_model(path, seed=0).SerializeToString()
    assert a != export_models.seeded_light_model(path, seed=1).SerializeToString()


def test_seeded_light_model_runs_in_onnxruntime_with_calibrated_batchnorm(export_models):
    """light_shufflenet has 49 BatchNormalizations and residual sums: with statistics from its own inputs its
    softmax stays spread (with the fills' 0.02 every class scores the same; uncalibrated, one class wins)."""
    model = export_models.seeded_light_model(LIGHT_DIR / "light_shufflenet.onnx")
    (probs,) = _run(model)
    assert probs.shape == (1, 1000) and np.isfinite(probs).all()
    assert abs(float(probs.sum()) - 1.0) < 1e-4
    assert probs.std() > 1e-5 and probs.max() < 0.5
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    norms = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert len(norms) == 49
    for n in norms:
        mean, var = weights[n.input[3]], weights[n.input[4]]
        assert np.isfinite(mean).all() and (var > 0).all() and mean.std() > 0, n.name


def test_cnn_group_exports_a_torch_cnn_and_a_seeded_light_graph(export_models, tmp_path):
    import json

    assert export_models.main(["--out", str(tmp_path), "--sizes", "cnn", "--only", "dbnet,light_squeezenet"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(manifest) == ["dbnet-cnn-torchscript.onnx", "light_squeezenet-cnn-seeded.onnx"]
    assert manifest["dbnet-cnn-torchscript.onnx"]["shapes"] == {"batch": 1}
    db = onnx.load(str(tmp_path / "dbnet-cnn-torchscript.onnx"))
    assert db.opset_import[0].version == 17
    assert {"ConvTranspose", "Resize", "HardSwish", "Sigmoid"} <= {n.op_type for n in db.graph.node}
    onnx.checker.check_model(db)
