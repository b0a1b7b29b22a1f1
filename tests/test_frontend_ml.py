"""The ai.onnx.ml ops luminal imports, in models that import only that domain, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model
from onnx import TensorProto, helper

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


def _tree_ensemble(aggregate: int, modes: list[int]) -> helper.NodeProto:
    # tree 0: node 0 (feature 0) -> node 1 (feature 1) or leaf 2; node 1 -> leaf 0 or leaf 1; tree 1: node 2 -> 3 or 4
    return helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate, n_targets=2,
        tree_roots=[0, 2], nodes_featureids=[0, 1, 1], nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[2, 1, 4], nodes_falseleafs=[1, 1, 1], nodes_missing_value_tracks_true=[1, 0, 0],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [3], modes),
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [3], [0.0, 0.5, -0.25]),
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [5], [1.5, -2.0, 3.25, 10.0, 100.0]),
        leaf_targetids=[0, 1, 0, 1, 1], post_transform=0)


@pytest.mark.parametrize("aggregate", [0, 1])
@pytest.mark.parametrize("modes", [[0, 1, 2], [3, 4, 0]])
def test_tree_ensemble(aggregate, modes):
    x = np.random.default_rng(2).standard_normal((8, 2)).astype(np.float32)
    x[0] = [0.0, 0.5]  # on the splits
    x[1, 0] = np.nan  # feature 0 tracks NaN to its true branch
    model = _ml_only(_tree_ensemble(aggregate, modes), {"x": x})
    model.opset_import[0].version = 5
    assert_matches(model, {"x": x})
