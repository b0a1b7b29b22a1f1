"""Generated C reduction kernels (several reductions per row, any axes) against the reference executor."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_util import compare_cpu
from codegen_util import graph as _graph

from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import partition
from luminal.ir import DType, Tensor, run_reference

RNG = np.random.default_rng(11)


def _compare(g, feeds, rtol=1e-5, atol=1e-6, **run):
    compare_cpu(g, feeds, rtol, atol, **run)


def test_softmax_is_one_kernel():
    x = Tensor.input("x", (37, 129), DType.float32)
    g = _graph([x], [x.softmax(-1)])
    ks = partition(g, {})
    assert [k.form for k in ks] == ["reduction"]
    v = RNG.standard_normal((37, 129)).astype(np.float32) * 5
    v[3, :] = -np.inf
    v[3, 7] = 1.0
    _compare(g, {"x": v})


def test_layer_norm_is_one_kernel():
    x = Tensor.input("x", (2, 13, 96), DType.float32)
    gamma = Tensor.const(RNG.standard_normal(96).astype(np.float32))
    m = x.mean((-1,), keepdim=True)
    d = x.sub(m)
    ln = d.mul(d.square().mean((-1,), keepdim=True).add(1e-5).rsqrt()).mul(gamma.reshape((1, 1, 96)).expand(x.shape))
    g = _graph([x], [ln])
    assert [k.form for k in partition(g, {})] == ["reduction"]
    _compare(g, {"x": RNG.standard_normal((2, 13, 96)).astype(np.float32) * 3 + 1}, rtol=1e-4, atol=1e-5)


def test_reductions_over_any_axes():
    x = Tensor.input("x", (5, 6, 7, 3), DType.float32)
    outs = [x.sum((0,)), x.max((1, 3)), x.sum((0, 2), keepdim=True), x.max((3,)), x.sum(),
            x.permute((2, 0, 3, 1)).sum((1,)),          # reduce through a transposed view
            x.slice((4, 0, 0, 0), (-1, 2, 1, 1), (5, 3, 7, 3)).max((0,)),   # negative-step view
            x.pad(((1, 1), (0, 0), (2, 0), (0, 0))).sum((2,)),              # padded view
            x.mean((1,)).exp().sum((0,))]
    _compare(_graph([x], outs), {"x": RNG.standard_normal((5, 6, 7, 3)).astype(np.float32)})


def test_max_propagates_nan_and_integer_sums():
    x = Tensor.input("x", (4, 9), DType.float32)
    i = Tensor.input("i", (4, 9), DType.int64)
    b = Tensor.input("b", (4, 9), DType.bool)
    v = RNG.standard_normal((4, 9)).astype(np.float32)
    v[1, 4] = np.nan
    v[2, :] = -np.inf
    outs = [x.max((1,)), x.sum((1,)), i.sum((0,)), i.max((1,)), b.cast(DType.int64).sum((1,)), x.argmax(1)
            if hasattr(x, "argmax") else x.max((0,))]
    _compare(_graph([x, i, b], outs), {"x": v, "i": RNG.integers(-50, 50, (4, 9)), "b": RNG.random((4, 9)) < 0.4})


@pytest.mark.parametrize("dt", [DType.float16, DType.bfloat16])
def test_half_precision_softmax(dt):
    x = Tensor.input("x", (8, 50), dt)
    _compare(_graph([x], [x.softmax(-1), x.sum((1,))]),
             {"x": RNG.standard_normal((8, 50)).astype(dt.np)}, rtol=2e-2, atol=2e-3)


def test_big_rows_parallel():
    x = Tensor.input("x", (512, 300), DType.float32)
    _compare(_graph([x], [x.softmax(-1), x.sum((0,))]),
             {"x": RNG.standard_normal((512, 300)).astype(np.float32)}, rtol=2e-5, atol=5e-5)  # float32 sum order


def test_column_reductions_use_lanes_and_random_schedules_agree():
    import random

    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.c.emit import lanes_apply

    be = CPUBackend()
    x = Tensor.input("x", (6, 37, 70), DType.float32)
    h = Tensor.input("h", (6, 37, 70), DType.float16)
    outs = [x.softmax(1), x.mean((1,)), x.max((0, 1)), x.sum((0,)).exp(), h.sum((1,)), x.sub(x.mean(
        (1,), keepdim=True).expand(x.shape)).square().mean((1,))]
    g = _graph([x, h], outs)
    ks = partition(g, {})
    assert sum(lanes_apply(k) for k in ks) >= 3
    feeds = {"x": RNG.standard_normal((6, 37, 70)).astype(np.float32),
             "h": RNG.standard_normal((6, 37, 70)).astype(np.float16)}
    feeds["x"][2, 5, 9] = np.nan
    want = run_reference(g, feeds)
    rnd = random.Random(0)
    for trial in range(6):
        scheds = []
        for k in ks:
            s = be.default_schedule(k)
            if trial:
                while True:
                    s = {kn.name: rnd.choice(kn.choices) for kn in be.space(k)}
                    if be.valid(k, s):
                        break
            scheds.append(s)
        got = run_graph(g, feeds, schedules=scheds, kernels=ks)
        for w, r in zip(want, got):
            np.testing.assert_allclose(r.astype(np.float64), w.astype(np.float64), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("node", [
    dict(op_type="MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(op_type="MaxPool", kernel_shape=[2, 2], strides=[1, 1], ceil_mode=1),
    dict(op_type="AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0),
])
def test_pooling_windows_vectorise_across_output_columns(node):
    """A pooling window's taps are the inner reduced dims: the reduction runs across output columns (lanes),
    under every lanes choice, and matches onnxruntime; with a NaN, the reference executor (onnxruntime's max pool
    drops NaN, the IR's max propagates it)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.c.emit import lanes_apply
    from luminal.frontend_onnx import load

    attrs = {k: v for k, v in node.items() if k != "op_type"}
    n = helper.make_node(node["op_type"], ["x"], ["y"], **attrs)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 23, 29])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, 5, 23, 29)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    xn = x.copy()
    xn[0, 2, 4, 6] = np.nan
    graph = load(onnx.load_from_string(model.SerializeToString())).graph
    ks = partition(graph, {})
    pools = [k for k in ks if k.reduce_axes]
    assert pools and all(lanes_apply(k) for k in pools)
    be = CPUBackend()
    for lanes in (0, 16, 64):
        scheds = [dict(be.default_schedule(k), lanes=lanes) if k in pools else be.default_schedule(k) for k in ks]
        (got,) = run_graph(graph, {"x": x}, schedules=scheds, kernels=ks)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)
        (got,) = run_graph(graph, {"x": xn}, schedules=scheds, kernels=ks)
        np.testing.assert_allclose(got, run_reference(graph, {"x": xn})[0], rtol=1e-6, atol=1e-6)
