"""The numpy kernel evaluator (the reference every tuning candidate is checked against) and the graph reference
take a sum of a product of two loads by einsum, without the product over the whole space."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from codegen_util import graph as _graph
from onnx import TensorProto, helper

from luminal.codegen.kernel_eval import run_kernel
from luminal.codegen.partition import partition
from luminal.frontend_onnx import load
from luminal.ir import DType, Tensor, run_reference

RNG = np.random.default_rng(3)


def test_a_padded_strided_conv_kernel_matches_onnxruntime():
    w = helper.make_tensor("w", TensorProto.FLOAT, [6, 3, 3, 3], RNG.standard_normal(162).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [6], RNG.standard_normal(6).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph = load(onnx.load_from_string(model.SerializeToString())).graph
    (k,) = [k for k in partition(graph, {}) if k.form == "contraction"]
    consts = {n.id: n.attrs["value"] for n in graph.toposort() if n.op.name == "Constant"}
    feeds = [x if node_id not in consts else np.asarray(consts[node_id]) for node_id in k.input_nodes]
    (got,) = run_kernel(k, feeds)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_a_matmul_whose_product_would_take_34_gb_is_evaluated():
    n = 2048
    a = Tensor.input("a", (n, n), DType.float32)
    b = Tensor.input("b", (n, n), DType.float32)
    (k,) = partition(_graph([a, b], [a.matmul(b)]), {})
    assert k.form == "contraction" and np.prod(k.full) * 4 > 34e9  # the product over the space, in bytes
    av, bv = RNG.standard_normal((n, n)).astype(np.float32), RNG.standard_normal((n, n)).astype(np.float32)
    (got,) = run_kernel(k, [av, bv])
    np.testing.assert_allclose(got.reshape(n, n), av @ bv, rtol=1e-3, atol=1e-3)


def test_a_sum_over_a_dim_neither_factor_reads_counts_each_copy():
    x = Tensor.input("x", (4, 1), DType.float32)
    y = Tensor.input("y", (4, 1), DType.float32)
    out = x.expand((4, 5)).mul(y.expand((4, 5))).sum((1,))
    g = _graph([x, y], [out])
    xv, yv = RNG.standard_normal((4, 1)).astype(np.float32), RNG.standard_normal((4, 1)).astype(np.float32)
    want = (5 * xv * yv).reshape(4)
    np.testing.assert_allclose(run_reference(g, {"x": xv, "y": yv})[0].reshape(4), want, rtol=1e-6)
    (k,) = partition(g, {})
    (got,) = run_kernel(k, [xv, yv])
    np.testing.assert_allclose(got.reshape(4), want, rtol=1e-6)
