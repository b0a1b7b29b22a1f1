"""Reduce* and ArgMax/ArgMin against onnxruntime, with axes as attribute (old opsets) and input (new)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, run_ours
from onnx import helper

from luminal.frontend_onnx import load

RNG = np.random.default_rng(2)
X = RNG.uniform(0.2, 2.0, (3, 4, 5)).astype(np.float32) * np.where(RNG.uniform(size=(3, 4, 5)) > 0.3, 1, -1)
X = X.astype(np.float32)
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum"]


def reduce_model(op_type, x, axes, keepdims, opset, noop=None):
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    since = 13 if op_type == "ReduceSum" else 18
    inits, names = {}, ["x"]
    if axes is not None:
        if opset >= since:
            inits["axes"], names = np.array(axes, np.int64), ["x", "axes"]
        else:
            attrs["axes"] = axes
    return make_model(helper.make_node(op_type, names, ["y"], **attrs), {"x": x}, inits, opset=opset)


@pytest.mark.parametrize("op_type", REDUCE)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1), (None, 0)])
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce(op_type, axes, keepdims, opset):
    x = np.abs(X) if op_type == "ReduceLogSum" else X
    assert_matches(reduce_model(op_type, x, axes, keepdims, opset), {"x": x}, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_int_exact(op_type, dtype):
    x = RNG.integers(-9, 10, (4, 6)).astype(dtype)
    x[0, 0] = 0
    assert_matches(reduce_model(op_type, x, [1], 0, 18), {"x": x})


def test_reduce_prod_long_axis_exact():
    x = np.ones((2, 300), np.int64)
    x[:, ::37] = -2
    x[1, 5] = 3
    (y,) = run_ours(reduce_model("ReduceProd", x, [1], 1, 18), {"x": x})
    np.testing.assert_array_equal(y, np.prod(x, axis=1, keepdims=True))
    f = RNG.uniform(0.9, 1.1, (3, 100)).astype(np.float32)
    f[2, 7] = 0.0
    assert_matches(reduce_model("ReduceProd", f, [1], 0, 18), {"x": f}, rtol=1e-5)


def test_reduce_noop_with_empty_axes():
    m = reduce_model("ReduceSum", X, [], 1, 13, noop=1)
    assert_matches(m, {"x": X})
    assert load(m).graph.primitive_counts() == {"Input": 1}
    assert_matches(reduce_model("ReduceMax", X, None, 0, 18, noop=0), {"x": X})


@pytest.mark.parametrize("op_type", REDUCE)
def test_reduce_over_no_axes_reduces_each_element_alone(op_type):
    # ReduceSumSquare squares each element, ReduceL1 and ReduceL2 take its absolute value, ReduceLogSum its log
    x = np.abs(X) if op_type == "ReduceLogSum" else X
    assert_matches(reduce_model(op_type, x, None, 0, 18, noop=1), {"x": x}, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("op_type,value", [("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf),
                                           ("ReduceMin", np.inf), ("ReduceLogSumExp", -np.inf), ("ReduceL2", 0.0)])
def test_reduce_empty(op_type, value):
    x = np.zeros((2, 0, 4), np.float32)
    (y,) = run_ours(reduce_model(op_type, x, [1], 1, 18), {"x": x})
    assert y.shape == (2, 1, 4)
    np.testing.assert_array_equal(y, np.full((2, 1, 4), value, np.float32))


def test_reduce_max_bool():
    x = np.array([[True, False], [False, False]])
    (y,) = run_ours(reduce_model("ReduceMax", x, [1], 0, 20), {"x": x})
    np.testing.assert_array_equal(y, [True, False])


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)])
def test_arg(op_type, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    m = make_model(helper.make_node(op_type, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last),
                   {"x": x}, opset=13)
    assert_matches(m, {"x": x})


def test_arg_int_and_opset11():
    x = RNG.integers(-5, 5, (4, 7)).astype(np.int32)
    m = make_model(helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0), {"x": x}, opset=11)
    assert_matches(m, {"x": x})
    v = RNG.standard_normal(6).astype(np.float32)
    m = make_model(helper.make_node("ArgMin", ["x"], ["y"], keepdims=0), {"x": v}, opset=13)
    assert run_ours(m, {"x": v})[0].shape == ()
    assert_matches(m, {"x": v})


@pytest.mark.parametrize("k,axis,largest", [(3, -1, 1), (1, 0, 1), (2, 1, 0), (5, -1, 0), (0, 1, 1), (5, 1, 1)])
def test_topk(k, axis, largest):
    x = RNG.integers(0, 4, (3, 5)).astype(np.float32)  # ties: the lower index comes first
    x[1, 2] = -np.inf
    x[2, 3] = np.inf
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    m = make_model(node, {"x": x}, {"k": np.array([k], np.int64)}, outputs=["v", "i"], opset=11)
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("shape,k,axis,largest,ties,dtype", [
    ((50,), 17, 0, 1, False, np.float32), ((50,), 50, 0, 1, True, np.float32), ((64,), 20, 0, 0, True, np.float32),
    ((3, 100), 33, 1, 0, False, np.float32), ((100, 3), 40, 0, 1, True, np.int64), ((2, 3, 37), 37, -1, 1, True,
    np.int32), ((5000,), 300, 0, 1, False, np.float32),
])
def test_topk_past_the_rounds_is_a_sorting_network(shape, k, axis, largest, ties, dtype):
    """k past ROUNDS_MAX_K: a bitonic network over the axis padded to a power of two (a detector's 300 best of
    3234 boxes), sorted, the lower index first among equal values (``ties``: values from 0..4), floats and
    integers; on the reference executor and the C backend, against onnxruntime, with a graph whose size grows
    with log^2 of the axis, not k."""
    from luminal.frontend_onnx.ops_reduce import ROUNDS_MAX_K
    from luminal.runtime.compile import compile_graph

    assert k > ROUNDS_MAX_K
    x = (RNG.integers(0, 5, shape) if ties else RNG.standard_normal(shape) * 100).astype(dtype)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    m = make_model(node, {"x": x}, {"k": np.array([k], np.int64)}, outputs=["v", "i"], opset=11)
    want = assert_matches(m, {"x": x})
    g = load(m).graph
    for a, b in zip(compile_graph(g, "cpu").run({"x": x}), want):
        np.testing.assert_array_equal(a.reshape(b.shape), b)
    assert len(g.toposort()) < 20 * shape[axis].bit_length() ** 2  # k rounds: 8406 nodes for 300 of 5000


def test_topk_int_and_opset1():
    x = RNG.integers(-50, 50, (2, 6)).astype(np.int64)
    m = make_model(helper.make_node("TopK", ["x", "k"], ["v", "i"]), {"x": x}, {"k": np.array([4], np.int64)},
                   outputs=["v", "i"], opset=11)
    assert_matches(m, {"x": x})
    f = RNG.standard_normal((4, 3)).astype(np.float32)
    m = make_model(helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=0), {"x": f}, outputs=["v", "i"], opset=9)
    assert_matches(m, {"x": f})


def test_reduce_prod_of_all_equal_constant():
    nodes = [helper.make_node("ReduceProd", ["c"], ["p"], keepdims=0), helper.make_node("Add", ["p", "x"], ["y"])]
    x = np.zeros(3, np.int64)
    m = make_model(nodes, {"x": x}, {"c": np.full((3, 5), 2, np.int64)}, opset=13)
    m.graph.node[0].attribute.append(helper.make_attribute("axes", [1]))
    assert_matches(m, {"x": x})
