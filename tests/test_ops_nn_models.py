"""Small multi-op models through ``frontend_onnx.load`` against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from luminal.frontend_onnx import load
from luminal.ir import Op, run_reference


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _w(name: str, *shape, seed: int = 0, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((_rng(seed).standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compare(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-4, atol: float = 1e-5):
    res = load(model, {k: v.shape for k, v in feeds.items()})
    got = dict(zip(res.graph.output_names, run_reference(res.graph, feeds)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, sess.run(names, feeds)):
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)
    return res.graph


def test_small_cnn():
    c = 8
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], group=2, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    var = numpy_helper.from_array((np.abs(_rng(5).standard_normal(c)) + 0.5).astype(np.float32), "v")
    inits = [_w("w1", c, 3, 3, 3, seed=1), _w("b1", c, seed=2), _w("s", c, seed=3), _w("bb", c, seed=4),
             _w("m", c, seed=6), var, _w("w2", c, c // 2, 3, 3, seed=7), _w("wf", 10, c, seed=8), _w("bf", 10, seed=9)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    g = _compare(m, {"x": _rng(10).standard_normal((2, 3, 16, 16)).astype(np.float32)})
    # two convolutions and one Gemm: three contractions; BN leaves no Sqrt behind
    counts = g.primitive_counts()
    assert sum(1 for n in g.toposort() if n.op is Op.SumReduce and n.srcs[0][0].op is Op.Mul) == 3
    assert "Sqrt" not in counts


def test_decoder_upsampling():
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["u"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1]),
        helper.make_node("InstanceNormalization", ["u", "s", "b"], ["n"]),
        helper.make_node("Resize", ["n", "", "sc"], ["r"], mode="linear"),
        helper.make_node("Pad", ["r", "pads"], ["p"], mode="reflect"),
        helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3]),
    ]
    inits = [_w("wt", 4, 3, 3, 3, seed=1), _w("bt", 3, seed=2), _w("s", 3, seed=3), _w("b", 3, seed=4),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    _compare(m, {"x": _rng(11).standard_normal((1, 4, 5, 5)).astype(np.float32)})


def test_embedding_lstm_head():
    vocab, e, hid, seq, batch = 11, 6, 5, 4, 2
    nodes = [
        helper.make_node("Gather", ["emb", "tok"], ["x"]),  # (seq, batch, e)
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Yh"], hidden_size=hid, direction="bidirectional"),
        helper.make_node("LayerNormalization", ["Yh", "g", "bb"], ["n"], axis=-1),
        helper.make_node("Einsum", ["n", "proj"], ["y"], equation="dbh,hk->bdk"),
    ]
    inits = [_w("emb", vocab, e, seed=1, scale=1.0), _w("W", 2, 4 * hid, e, seed=2), _w("R", 2, 4 * hid, hid, seed=3),
             _w("B", 2, 8 * hid, seed=4), _w("g", hid, seed=5), _w("bb", hid, seed=6), _w("proj", hid, 3, seed=7)]
    m = _model(nodes, [helper.make_tensor_value_info("tok", TensorProto.INT64, [seq, batch])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    _compare(m, {"tok": _rng(12).integers(0, vocab, (seq, batch)).astype(np.int64)})
