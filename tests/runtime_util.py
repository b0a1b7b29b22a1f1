"""Shared helper for the runtime and compile command tests: a small ONNX model with a symbolic batch."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path, seed=0, hidden=12):
    """x[batch, 8] @ w + b -> relu -> softmax ("probs") and a max over the row ("peak"); saved at ``path``."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, hidden)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((hidden,)).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Softmax", ["r"], ["probs"], axis=-1),
             helper.make_node("ReduceMax", ["r"], ["peak"], keepdims=0, axes=[1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", hidden]),
                           helper.make_tensor_value_info("peak", TensorProto.FLOAT, ["batch"])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # what onnxruntime reads, however new the onnx package that writes it
    onnx.save(m, str(path))
    return path


def matmul_relu_softmax(path, rows=4, names=("", "", "")):
    """x[rows, 8] @ W[8, 6] -> Relu -> Softmax ("y"), seed 0; ``names`` names the three nodes; saved at ``path``."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name=names[0]),
             helper.make_node("Relu", ["h"], ["r"], name=names[1]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1, name=names[2])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 6])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path
