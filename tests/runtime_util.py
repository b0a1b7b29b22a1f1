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
    onnx.save(m, str(path))
    return path
