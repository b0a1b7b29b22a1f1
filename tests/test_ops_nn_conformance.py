"""The official ONNX backend node tests for the neural-network ops, through the importer and the reference executor."""

from __future__ import annotations

import onnx
import pytest

from luminal.frontend_onnx import conformance

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

KNOWN = {
    # onnxruntime and PyTorch stretch align_corners by the integer output length; onnx's reference
    # generator by scale * input length. We follow onnxruntime.
    "node/test_resize_downsample_scales_linear_align_corners": "align_corners follows onnxruntime",
    "node/test_resize_downsample_scales_cubic_align_corners": "align_corners follows onnxruntime",
    # random masks from the generator's seed: training-mode Dropout is refused with a clear error
    "node/test_training_dropout": "training-mode Dropout is random",
    "node/test_training_dropout_default": "training-mode Dropout is random",
    "node/test_training_dropout_default_mask": "training-mode Dropout is random",
    "node/test_training_dropout_mask": "training-mode Dropout is random",
}


def _cases() -> list:
    out = []
    for case in conformance.collect_cases(["node"]):
        model = onnx.load(case.model_dir + "/model.onnx", load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        if ops & MINE and ops <= MINE | HELPERS and conformance.unsupported_reason(model) is None:
            marks = [pytest.mark.xfail(reason=KNOWN[case.name], strict=True)] if case.name in KNOWN else []
            out.append(pytest.param(case, id=case.name.split("/", 1)[1], marks=marks))
    return out


CASES = _cases()


def test_enough_cases_collected():
    assert len(CASES) > 200


@pytest.mark.parametrize("case", CASES)
def test_backend_node_case(case):
    result = conformance.run_case(case)
    assert result.status == "passed", result.reason
