"""A weight of one repeated value (the onnx package's light model-zoo graphs hold nothing else) is folded to a
scalar; the sum it weights is then the same for every output channel, so optimize computes it once and
broadcasts it: never more operations than the contraction it replaces. Results against onnxruntime and the
reference executor on the cpu backend."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import partition
from luminal.frontend_onnx.importer import load
from luminal.ir import DType, Graph, Op, Tensor, optimize, run_reference

RNG = np.random.default_rng(7)
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _model(nodes, inputs, output, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv_relu(w: np.ndarray, b: np.ndarray, x_shape, group: int = 1) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], "y", {"w": w, "b": b})


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _cpu_matches_ort(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5) -> Graph:
    g = load(model).graph
    for got, want in zip(run_graph(g, feeds), _ort(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.abs(want).max()))
    return g


def _dense_flops(x_shape, w_shape, out_hw) -> int:
    """The multiply-adds of the convolution as a contraction: every output channel, pixel and tap."""
    return 2 * x_shape[0] * w_shape[0] * math.prod(w_shape[1:]) * math.prod(out_hw)


def test_conv_with_one_repeated_weight_sums_each_window_once():
    xs, ws = (2, 16, 10, 12), (32, 16, 3, 3)
    model = _conv_relu(np.full(ws, 0.02, np.float32), np.full(32, 0.5, np.float32), xs)
    g = _cpu_matches_ort(model, {"x": RNG.standard_normal(xs).astype(np.float32)})
    kernels = partition(g)
    reds = [k for k in kernels if k.reduce_axes]
    assert len(reds) == 1
    # one sum per (image, output pixel): the 32 output channels read it, none recomputes it
    assert math.prod(reds[0].row) == 2 * 10 * 12
    assert sum(k.flops for k in kernels) * 16 <= _dense_flops(xs, ws, (10, 12))


def test_grouped_conv_with_one_repeated_weight_sums_once_per_group():
    xs, ws = (1, 8, 9, 9), (12, 4, 3, 3)  # two groups of 6 output channels
    model = _conv_relu(np.full(ws, -0.3, np.float32), np.zeros(12, np.float32), xs, group=2)
    g = _cpu_matches_ort(model, {"x": RNG.standard_normal(xs).astype(np.float32)})
    (red,) = [k for k in partition(g) if k.reduce_axes]
    assert math.prod(red.row) == 2 * 9 * 9


def test_conv_with_varied_weights_stays_one_contraction():
    xs, ws = (2, 16, 10, 12), (32, 16, 3, 3)
    model = _conv_relu(RNG.standard_normal(ws).astype(np.float32), RNG.standard_normal(32).astype(np.float32), xs)
    g = _cpu_matches_ort(model, {"x": RNG.standard_normal(xs).astype(np.float32)}, rtol=1e-4)
    kernels = partition(g)
    assert [k.form for k in kernels] == ["contraction"]
    assert kernels[0].contraction is not None and kernels[0].contraction.size("n") == 32


def test_matmul_with_a_splat_weight_sums_each_row_once():
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 5, 64))], "y",
                   {"w": np.full((64, 48), 0.25, np.float32)})
    g = _cpu_matches_ort(model, {"x": RNG.standard_normal((3, 5, 64)).astype(np.float32)})
    kernels = partition(g)
    (red,) = [k for k in kernels if k.reduce_axes]
    assert math.prod(red.row) == 15  # a row sum per row of x, not one per (row, column)
    assert sum(k.flops for k in kernels) * 8 <= 2 * 15 * 64 * 48


def test_a_padded_dim_is_not_taken_as_repeated():
    # the broadcast column reads x, the padded one reads 0: summing over rows, the columns differ
    x = Tensor.input("x", (4,), DType.float32)
    y = x.reshape((4, 1)).expand((4, 3)).pad(((0, 0), (1, 0))).sum((0,))
    g = optimize(Graph([x.node], [y.contiguous().node], ["y"]))
    v = np.array([1.0, 2.0, 3.0, 4.5], np.float32)
    np.testing.assert_array_equal(run_reference(g, {"x": v})[0].reshape(-1), [0.0, 10.5, 10.5, 10.5])
    np.testing.assert_array_equal(run_graph(g, {"x": v})[0].reshape(-1), [0.0, 10.5, 10.5, 10.5])


def test_a_value_broadcast_from_a_sum_done_once_is_scaled_once():
    # light_squeezenet's end: a class score repeated over 1000 classes, scaled, then a softmax. Scaled once,
    # every class reads one rounded value, so score - max(score) is exactly 0 even at 1e12 (scaled per
    # class inside the softmax kernel, a fused multiply-add left it rounding-error large: exp overflowed to nan)
    x = Tensor.input("x", (1, 1, 6, 6), DType.float32)
    s = x.sum((2, 3), keepdim=True).expand((1, 1000, 1, 1)).mul(1 / 36).softmax(1)
    g = optimize(Graph([x.node], [s.contiguous().node], ["y"]))
    assert all(n.numel == 1 for n in g.toposort() if n.op is Op.Mul and n.srcs[0][0].op is Op.SumReduce)
    feeds = {"x": np.full((1, 1, 6, 6), 3.1e10, np.float32)}
    np.testing.assert_allclose(run_graph(g, feeds)[0], np.full((1, 1000, 1, 1), 1e-3, np.float32), rtol=1e-5)
    np.testing.assert_allclose(run_reference(g, feeds)[0], np.full((1, 1000, 1, 1), 1e-3, np.float32), rtol=1e-5)


def test_a_reshape_of_a_value_done_once_reads_it_in_place():
    # the conv's (n, g, m, oh, ow, 1, 1, 1) sum is reshaped to (n, m, oh, ow): no copy of the broadcast value
    xs, ws = (1, 4, 6, 6), (8, 4, 3, 3)
    g = load(_conv_relu(np.full(ws, 0.1, np.float32), np.full(8, 0.1, np.float32), xs)).graph
    assert not any(n.op is Op.Contiguous for n in g.toposort() if n not in g.outputs)


@pytest.mark.skipif(not (LIGHT / "light_resnet50.onnx").exists(), reason="the onnx package ships no light models")
def test_light_resnet50_does_its_convolutions_once_per_pixel():
    kernels = partition(load(LIGHT / "light_resnet50.onnx").graph)
    # as contractions over every output channel its convolutions are 8.2 GFLOP; summed once per pixel, 0.06
    assert sum(k.flops for k in kernels) < 2e8
