"""Reductions read their sources in the order those are stored: a reduction behind an exporter's transposition
reduces the stored value (and fuses with its producer), unless the value's other readers keep that order (a layer
norm's); and a reduction does not fuse with values it could only read through another shape's index arithmetic.
Outputs on the C backend against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.codegen.c.check import run_graph
from luminal.codegen.kernel import Leaf
from luminal.codegen.partition import lower
from luminal.frontend_onnx import load
from luminal.ir import Op

rng = np.random.default_rng(3)


def _reduces(graph):
    return [n for n in graph.toposort() if n.op in (Op.SumReduce, Op.MaxReduce)]


def _loads(kernel):
    return [op.attr("view") for op in kernel.ops if op.op is Leaf.Load]


@pytest.mark.parametrize(("op", "axes", "keep", "moved"), [
    ("ReduceMean", [1, 2], 1, True), ("ReduceMax", [1, 2], 0, True), ("ReduceSum", [3], 1, True),
    ("ReduceMax", [3], 0, True),
    ("ReduceSum", [2], 1, False),  # kept N, H, C would be stored N, C, H: its readers would read it transposed
])
def test_a_reduction_behind_an_nhwc_transpose_reduces_the_stored_value(op, axes, keep, moved):
    """tf2onnx's global average of a squeeze-excitation: ReLU -> Transpose to NHWC -> ReduceMean over H and W. The
    reduction reads the ReLU's value in its stored order and fuses with it: one kernel, no pass over the pixels at
    the channel count's stride (32 channels at 112x112: 106 -> 22 us)."""
    x = rng.standard_normal((2, 24, 9, 11)).astype(np.float32)
    reduce = (helper.make_node(op, ["t", "axes"], ["y"], keepdims=keep) if op == "ReduceSum" else
              helper.make_node(op, ["t"], ["y"], axes=axes, keepdims=keep))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             reduce]
    model = make_model(nodes, {"x": x}, {"axes": np.array(axes)} if op == "ReduceSum" else None, opset=13)
    graph = load(model).graph
    (red,) = _reduces(graph)
    assert red.srcs[0][1].is_contiguous is moved and red.srcs[0][0].op is Op.Where
    _, kernels = lower(graph)
    assert [k.form for k in kernels] == (["reduction"] if moved else ["elementwise", "reduction"])
    (want,) = run_ort(model, {"x": x})
    (got,) = run_graph(graph, {"x": x})
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_a_layer_norm_over_a_transposed_value_keeps_the_transposed_order():
    """ConvNeXt's norm: NCHW -> NHWC, LayerNormalization over the channels. Its mean and its variance read the value
    in one order, so the mean is not moved into the stored order: the norm stays one kernel."""
    x = rng.standard_normal((1, 32, 7, 9)).astype(np.float32)
    inits = {"g": rng.standard_normal(32).astype(np.float32), "b": rng.standard_normal(32).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], axis=-1, epsilon=1e-6)]
    model = make_model(nodes, {"x": x}, inits)
    graph = load(model).graph
    assert all(not red.srcs[0][1].is_contiguous for red in _reduces(graph) if red.srcs[0][0].op is Op.Where)
    _, kernels = lower(graph)
    assert [k.form for k in kernels].count("reduction") == 1
    (want,) = run_ort(model, {"x": x})
    (got,) = run_graph(graph, {"x": x})
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_a_reduction_does_not_fuse_with_a_value_it_could_read_only_by_index_arithmetic():
    """A copy transposed within the width (a shuffle of its columns), a ReLU over it, then a max over the height:
    fused, the reduction would read the copy's source through the five dims of the copy from its own four at every
    element (18 + 8 -> 363 us in a CRNN's pool). The reduction reads the ReLU's value instead, and every value each
    kernel loads is a view over that kernel's own space."""
    x = rng.standard_normal((1, 16, 4, 24)).astype(np.float32)
    shape5, shape4 = np.array([1, 16, 4, 6, 4]), np.array([1, 16, 4, 24])
    nodes = [helper.make_node("Reshape", ["x", "s5"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 2, 4, 3]),
             helper.make_node("Reshape", ["b", "s4"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMax", ["r"], ["y"], axes=[2], keepdims=1)]
    model = make_model(nodes, {"x": x}, {"s5": shape5, "s4": shape4}, opset=13)
    graph = load(model).graph
    _, kernels = lower(graph)
    (red,) = [k for k in kernels if k.form == "reduction"]
    assert all(v.shape == red.full or v.reshape(red.full) is not None for v in _loads(red))
    (want,) = run_ort(model, {"x": x})
    (got,) = run_graph(graph, {"x": x})
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(24))
def test_random_reductions_over_transpositions_match_onnxruntime(seed):
    """A ReLU, a random transposition, a random reduction over random axes (kept or not), and a second reader of
    the ReLU's value in its own order or the transposed one: the C backend's outputs against onnxruntime's,
    whichever order each reduction is moved to."""
    r = np.random.default_rng(100 + seed)
    shape = [int(d) for d in r.integers(2, 7, 4)]
    x = r.standard_normal(shape).astype(np.float32)
    perm = [int(p) for p in r.permutation(4)]
    axes = sorted(int(a) for a in r.choice(4, int(r.integers(1, 4)), replace=False))
    op = str(r.choice(["ReduceMean", "ReduceMax", "ReduceMean", "ReduceL1"]))
    keep = int(r.integers(0, 2))
    other = ["t"] if r.integers(0, 4) == 0 else ["r"]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=perm),
             helper.make_node(op, ["t"], ["y"], axes=axes, keepdims=keep),
             helper.make_node("Sigmoid", other, ["z"])]
    model = make_model(nodes, {"x": x}, outputs=["y", "z"], opset=13)
    graph = load(model).graph
    want = run_ort(model, {"x": x})
    got = run_graph(graph, {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.reshape(b.shape), b, rtol=1e-5, atol=1e-5)
