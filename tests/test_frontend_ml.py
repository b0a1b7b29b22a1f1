"""The ai.onnx.ml ops luminal imports, in models that import only that domain, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model
from onnx import helper

from luminal.errors import LuminalError
from luminal.frontend_onnx import load


def _ml_only(node, feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None):
    model = make_model(node, feeds, inits)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    return model


def test_binarizer():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x[0, :2] = 0.5  # at the threshold: not above it
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    assert_matches(_ml_only(node, {"x": x}), {"x": x})


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_array_feature_extractor(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    feeds = {"x": x}
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    assert_matches(_ml_only(node, feeds, {"i": np.array([2, 0, 2], np.int64)}), feeds)


def test_default_domain_op_without_its_opset_import_is_refused():
    x = np.ones((2,), np.float32)
    model = _ml_only(helper.make_node("Relu", ["x"], ["y"]), {"x": x})
    with pytest.raises(LuminalError, match="no opset import for the default ONNX domain"):
        load(model)
