"""onnxruntime's com.microsoft fused ops (they appear in ORT-optimised models) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, run_ours
from onnx import helper

from luminal.errors import LuminalError
from luminal.frontend_onnx import load

RNG = np.random.default_rng(6)
MS = "com.microsoft"


def ms_model(node, feeds, inits=None, outputs=None):
    m = make_model(node, feeds, inits, outputs=outputs)
    m.opset_import.append(helper.make_opsetid(MS, 1))
    return m


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op_type,n_in,attrs", [
    ("Gelu", 1, {}), ("BiasGelu", 2, {}), ("FastGelu", 1, {}), ("FastGelu", 2, {}), ("QuickGelu", 1, {}),
    ("QuickGelu", 1, {"alpha": 1.5}),
])
def test_activations(op_type, n_in, attrs):
    feeds = {"x": f32(2, 3, 8) * 3}
    names = ["x"]
    if n_in == 2:
        feeds["bias"], names = f32(8), ["x", "bias"]
    m = ms_model(helper.make_node(op_type, names, ["y"], domain=MS, **attrs), feeds)
    assert_matches(m, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_beta,with_bias", [(True, False), (True, True), (False, False)])
def test_skip_layer_norm(with_beta, with_bias):
    x, skip, gamma = f32(2, 4, 16), f32(2, 4, 16), f32(16)
    inits = {"gamma": gamma}
    names = ["x", "skip", "gamma"]
    names.append("beta" if with_beta else "")
    if with_beta:
        inits["beta"] = f32(16)
    if with_bias:
        names.append("bias")
        inits["bias"] = f32(16)
    while names[-1] == "":
        names.pop()
    outs = ["y", "", "", "sum"] if with_bias else ["y"]
    node = helper.make_node("SkipLayerNormalization", names, outs, domain=MS, epsilon=1e-5)
    m = ms_model(node, {"x": x, "skip": skip}, inits, outputs=[o for o in outs if o])
    assert_matches(m, {"x": x, "skip": skip}, rtol=1e-4, atol=1e-5)


def test_skip_simplified_and_simplified_layer_norm():
    x, skip, gamma = f32(3, 16), f32(3, 16), f32(16)
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y"], domain=MS,
                            epsilon=1e-6)
    assert_matches(ms_model(node, {"x": x, "skip": skip}, {"gamma": gamma}), {"x": x, "skip": skip},
                   rtol=1e-4, atol=1e-5)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"], axis=-1, epsilon=1e-6)
    assert_matches(ms_model(node, {"x": x}, {"gamma": gamma}), {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ta,tb,alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, 1.0)])
def test_fused_matmul(ta, tb, alpha):
    a = f32(2, 5, 3) if ta else f32(2, 3, 5)
    b = f32(4, 5) if tb else f32(5, 4)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=ta, transB=tb, alpha=alpha)
    assert_matches(ms_model(node, {"a": a, "b": b}), {"a": a, "b": b}, rtol=1e-4, atol=1e-5)


def test_fused_matmul_trans_batch_is_refused():
    a, b = f32(2, 3, 5), f32(5, 4)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)
    with pytest.raises(LuminalError, match="transBatch"):
        load(ms_model(node, {"a": a, "b": b}))


def test_bias_add():
    x, bias, skip = f32(2, 3, 8), f32(8), f32(2, 3, 8)
    m = ms_model(helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS), {"x": x, "skip": skip},
                 {"bias": bias})
    (y,) = run_ours(m, {"x": x, "skip": skip})  # onnxruntime has this kernel on CUDA only
    np.testing.assert_allclose(y, x + bias + skip, rtol=1e-6)


@pytest.mark.parametrize("activation,attrs", [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}),
                                              ("LeakyRelu", {"activation_alpha": 0.2}),
                                              ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4})])
def test_fused_gemm(activation, attrs):
    a, b, c = f32(3, 5), f32(4, 5), f32(4)
    if activation:
        attrs = {"activation": activation, **attrs}
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain=MS, transB=1, alpha=0.5, beta=2.0, **attrs)
    assert_matches(ms_model(node, {"a": a}, {"b": b, "c": c}), {"a": a}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation,params,with_z", [
    ("Relu", [], False), ("Relu", [], True), ("Tanh", [], False), ("Sigmoid", [], True), ("LeakyRelu", [0.2], False),
    ("Clip", [0.0, 6.0], True), ("HardSigmoid", [0.3, 0.4], False), (None, [], True),
])
def test_fused_conv(activation, params, with_z):
    x, w, b = f32(2, 4, 9, 7), f32(6, 2, 3, 3), f32(6)
    attrs = ({"activation": activation} | ({"activation_params": params} if params else {})) if activation else {}
    feeds = {"x": x} | ({"z": f32(2, 6, 5, 7)} if with_z else {})
    node = helper.make_node("FusedConv", ["x", "w", "b", *(["z"] if with_z else [])], ["y"], domain=MS, group=2,
                            strides=[2, 1], pads=[1, 1, 1, 1], **attrs)
    assert_matches(ms_model(node, feeds, {"w": w, "b": b}), feeds, rtol=1e-4, atol=1e-5)


def ort_optimised(model, tmp_path):
    """``model`` as onnxruntime's graph optimizer saves it (extended level: its com.microsoft fusions)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(str(tmp_path / "opt.onnx"))


def test_onnxruntime_optimised_cnn(tmp_path):
    """Convs onnxruntime's optimiser fused with their activations (FusedConv) import and match."""
    x = f32(1, 8, 12, 12)
    inits = {"w": f32(16, 8, 3, 3), "b": f32(16), "w2": f32(16, 16, 3, 3), "lo": np.float32(0), "hi": np.float32(6),
             "w3": f32(4, 16, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["k"]), helper.make_node("Conv", ["k", "w3"], ["c3"]),
             helper.make_node("Sigmoid", ["c3"], ["y"])]
    opt = ort_optimised(make_model(nodes, {"x": x}, inits, outputs=["y"]), tmp_path)
    assert [n.op_type for n in opt.graph.node].count("FusedConv") == 3
    assert_matches(opt, {"x": x}, rtol=1e-4, atol=1e-4)


def test_onnxruntime_optimised_model(tmp_path):
    """A model onnxruntime's optimiser rewrote into com.microsoft fused ops imports and matches."""
    x = f32(2, 4, 16)
    inits = {"w": f32(16, 16), "b": f32(16), "half": np.float32(0.5), "one": np.float32(1.0),
             "rsqrt2": np.float32(0.7071067811865476), "scale": np.float32(0.125), "w2": f32(16, 8)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["h"]),
             helper.make_node("Mul", ["h", "rsqrt2"], ["hs"]), helper.make_node("Erf", ["hs"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["g"]),
             helper.make_node("Mul", ["g", "half"], ["gelu"]),
             helper.make_node("MatMul", ["gelu", "w2"], ["m2"]), helper.make_node("Mul", ["m2", "scale"], ["y"])]
    opt = ort_optimised(make_model(nodes, {"x": x}, inits, outputs=["y"]), tmp_path)
    fused = {n.op_type for n in opt.graph.node if n.domain == MS}
    assert fused & {"BiasGelu", "Gelu", "FusedMatMul"}, fused
    assert_matches(opt, {"x": x}, rtol=1e-4, atol=1e-5)
