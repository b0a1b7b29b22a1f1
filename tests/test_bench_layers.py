"""benchmarks/model_layers.py cuts a model's runs into layers: the model nodes one runtime's kernel or node computes
together, luminal's kernels by the nodes fused into them, onnxruntime's profiled nodes by their names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_layers


def test_layers_join_the_nodes_either_runtime_computes_together():
    order = ["conv1", "relu1", "pad", "conv2", "add", "relu2", "pool"]
    kinds = {"conv1": "Conv 3x3", "relu1": "Relu", "pad": "Pad", "conv2": "Conv 1x1", "add": "Add", "relu2": "Relu",
             "pool": "MaxPool"}
    writers = {"c1": "conv1", "r1": "relu1", "p2": "pad", "c2": "conv2", "a": "add", "r2": "relu2", "p": "pool"}
    # luminal: conv1 by Winograd in two kernels, the second with the ReLU; conv2 with its input's padding, the
    # residual add and its ReLU
    luminal = [[(("conv1",), 1.0), (("conv1", "relu1"), 2.0), (("pad", "conv2", "add", "relu2"), 4.0),
                (("pool",), 0.5)],
               [(("conv1",), 3.0), (("conv1", "relu1"), 2.0), (("pad", "conv2", "add", "relu2"), 6.0),
                (("pool",), 0.5)]]
    # onnxruntime: its NCHWc conv fused with the ReLU, named after the ReLU's output; the add apart; fusions named
    # after the node they start from, made unique or not; the pool named after a tensor derived from its output; a
    # reorder
    ort = [[("r1_nchwc", 2.5), ("fused conv2", 3.0), ("add", 0.5), ("relu2/QuickGeluFusion/", 0.25),
            ("p_bn_nchwc", 0.75), ("ReorderOutput", 0.1)],
           [("r1_nchwc", 3.5), ("fused conv2_token_3", 5.0), ("add", 0.5), ("relu2/QuickGeluFusion/", 0.25),
            ("p_bn_nchwc", 0.25), ("ReorderOutput_token_7", 0.3)]]
    rows = model_layers.layers(order, kinds, writers, luminal, ort)
    assert [(r.nodes, r.kind) for r in rows] == [
        (("conv1", "relu1"), "Conv 3x3"), (("pad", "conv2", "add", "relu2"), "Conv 1x1"), (("pool",), "MaxPool"),
        ((model_layers.UNMAPPED,), model_layers.UNMAPPED)]
    assert [r.kernels for r in rows] == [2, 1, 1, 0]
    assert [r.luminal for r in rows] == [(3.0, 5.0), (4.0, 6.0), (0.5, 0.5), (0.0, 0.0)]
    assert [r.onnxruntime for r in rows] == [(2.5, 3.5), (3.75, 5.75), (0.75, 0.25), (0.1, 0.3)]


@pytest.mark.parametrize(("attrs", "kind"), [
    ({"kernel_shape": [3, 3]}, "Conv 3x3"),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "group": 32}, "Conv 3x3 s2 g32"),
    ({"kernel_shape": [3, 3], "dilations": [2, 2]}, "Conv 3x3 d2"),
    ({}, "Conv ?"),
])
def test_a_conv_s_kind_names_its_kernel_stride_dilation_and_groups(attrs, kind):
    assert model_layers.kind_of(helper.make_node("Conv", ["x", "w"], ["y"], **attrs)) == kind
    assert model_layers.kind_of(helper.make_node("Relu", ["x"], ["y"])) == "Relu"


def test_the_report_sums_each_kind_and_lists_the_layers_luminal_is_slowest_on():
    def side(median):
        return {"median": median, "p10": median, "p90": median}

    result = {"model": "m.onnx", "layers": [
        {"nodes": ["a"], "kind": "Conv 1x1", "kernels": 1, "luminal": side(2e-3), "onnxruntime": side(1e-3)},
        {"nodes": ["b", "c"], "kind": "Conv 1x1", "kernels": 1, "luminal": side(1e-3), "onnxruntime": side(3e-3)},
        {"nodes": ["d"], "kind": "Relu", "kernels": 0, "luminal": side(0.0), "onnxruntime": side(1e-4)}]}
    lines = model_layers.report(result | {"plain": {"luminal": side(3.3e-3), "onnxruntime": side(4e-3)},
                                          "scale": {"luminal": 1.1, "onnxruntime": 0.9}}, top=1)
    assert lines[0].startswith("m.onnx: 3 layers") and "luminal 3.00 ms, onnxruntime 4.10 ms ( 1.37x)" in lines[0]
    assert lines[0].endswith("plain runs 3.30 / 4.00 ms, profiles scaled x1.10 / x0.90")
    assert "Conv 1x1" in lines[1] and "x2" in lines[1] and "1.33x" in lines[1]
    assert lines[2].split()[0] == "Relu" and lines[2].rstrip().endswith("-")
    assert len(lines) == 4 and lines[3].lstrip().startswith("a ") and "k=1" in lines[3] and "0.50x" in lines[3]
