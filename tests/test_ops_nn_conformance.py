"""The official ONNX backend node tests for the neural-network ops, through the importer and the reference executor."""

from __future__ import annotations

import conformance_harness as conformance
import onnx
import pytest

MINE = {
    "AveragePool", "BatchNormalization", "Conv", "ConvTranspose", "CumSum", "DepthToSpace", "SpaceToDepth", "Dropout",
    "Einsum", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "InstanceNormalization", "LayerNormalization", "LRN", "LSTM", "MatMul", "MaxPool", "Mish", "OneHot", "Pad",
    "Resize", "Softmax", "LogSoftmax", "Tile", "Trilu", "Upsample", "Hardmax", "GRU", "RNN", "RMSNormalization",
    "GroupNormalization", "MeanVarianceNormalization", "LpNormalization", "LpPool", "GlobalLpPool", "Attention",
    "RotaryEmbedding", "ScatterElements", "ScatterND", "Scatter", "GridSample", "AffineGrid", "CenterCropPad",
    "CumProd", "DeformConv", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Col2Im",
}
# ops a single-op test model may carry besides the op under test
HELPERS = {"Constant", "Identity"}

# random masks from the generator's seed: training-mode Dropout with a non-zero ratio is
# classified unsupported, with its reason
RANDOM = {"node/test_training_dropout", "node/test_training_dropout_default",
          "node/test_training_dropout_default_mask", "node/test_training_dropout_mask"}


def _cases() -> list:
    out = []
    for case in conformance.collect_cases(["node"]):
        model = onnx.load(case.model_dir + "/model.onnx", load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        if ops & MINE and ops <= MINE | HELPERS and conformance.unsupported_reason(model) is None:
            out.append(pytest.param(case, id=case.name.split("/", 1)[1]))
    return out


CASES = _cases()


def test_enough_cases_collected():
    assert len(CASES) > 200


@pytest.mark.parametrize("case", CASES)
def test_backend_node_case(case):
    result = conformance.run_case(case)
    if case.name in RANDOM:
        assert result.status == "unsupported" and "training-mode Dropout" in result.reason, result
    else:
        assert result.status == "passed", result.reason


def test_random_cases_are_collected():
    assert {p.values[0].name for p in CASES} >= RANDOM
