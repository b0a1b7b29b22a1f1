"""onnxruntime's com.microsoft fused ops (they appear in ORT-optimised models) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, run_ort, run_ours, session_matches_onnxruntime
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


def _attention_case(kind, batch=2, seq=5, heads=2, hidden=8, seed=0, **attrs):
    """A com.microsoft Attention node and its feeds: ``kind`` names the mask or the other input it exercises."""
    r = np.random.default_rng(seed)
    feeds = {"x": r.standard_normal((batch, seq, hidden)).astype(np.float32)}
    sizes = attrs.get("qkv_hidden_sizes", [hidden] * 3)
    inits = {"w": (r.standard_normal((hidden, sum(sizes))) * 0.3).astype(np.float32),
             "b": r.standard_normal(sum(sizes)).astype(np.float32)}
    past = 3 if kind == "past" else 0
    total = seq + past
    names = ["x", "w", "b", "", "", ""]
    if kind == "lengths":
        feeds["m"] = np.array([total, 2, 0][:batch], np.int32)
    elif kind == "ends and starts":
        feeds["m"] = np.array([total - 1, 3, 1, 0][:2 * batch], np.int32)
    elif kind == "2-D":
        feeds["m"] = (r.random((batch, total)) < 0.7).astype(np.int32)
    elif kind == "3-D":
        feeds["m"] = (r.random((batch, seq, total)) < 0.7).astype(np.int32)
    if "m" in feeds:
        names[3] = "m"
    if past:
        feeds["past"] = r.standard_normal((2, batch, heads, past, sizes[1] // heads)).astype(np.float32)
        names[4] = "past"
    if kind == "attention_bias":
        feeds["ab"] = r.standard_normal((1, heads, seq, total)).astype(np.float32)
        names[5] = "ab"
    while not names[-1]:
        names.pop()
    outs = ["y", "present"] if past else ["y"]
    node = helper.make_node("Attention", names, outs, domain=MS, num_heads=heads, **attrs)
    return ms_model(node, feeds, inits, outputs=outs), feeds


MASKS = ["none", "lengths", "ends and starts", "2-D", "3-D", "past", "attention_bias"]
ATTENTION_CASES = [(kind, attrs) for kind in MASKS
                   for attrs in [{}, {"unidirectional": 1}, {"scale": 0.2, "mask_filter_value": -50.0},
                                 {"qkv_hidden_sizes": [8, 8, 4]}]
                   if not (kind == "past" and "qkv_hidden_sizes" in attrs)]  # a past needs equal k and v sizes


@pytest.mark.parametrize("kind, attrs", ATTENTION_CASES)
def test_ms_attention(kind, attrs):
    """onnxruntime's packed-projection self-attention, each mask_index form (a key with no length left and a row
    with every key masked included), past and present, attention_bias, a causal mask, its own scale and fill value
    and a value size of its own, against onnxruntime's CPU kernel."""
    model, feeds = _attention_case(kind, **attrs)
    assert_matches(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask", [None, "lengths", "2-D"])
@pytest.mark.parametrize("past, bias, attention_bias", [(False, False, False), (True, True, False),
                                                        (False, True, True)])
def test_ms_multi_head_attention(mask, past, bias, attention_bias):
    r = np.random.default_rng(3)
    batch, seq, kv_len, heads, hidden = 2, 4, 6, 2, 8
    feeds = {"q": f32(batch, seq, hidden), "k": f32(batch, kv_len, hidden), "v": f32(batch, kv_len, hidden)}
    names, inits = ["q", "k", "v", "", "", "", "", ""], {}
    total = kv_len + (2 if past else 0)
    if bias:
        inits["b"], names[3] = f32(3 * hidden), "b"
    if mask == "lengths":
        feeds["m"], names[4] = np.array([total, 3], np.int32), "m"
    elif mask == "2-D":
        feeds["m"], names[4] = (r.random((batch, total)) < 0.7).astype(np.int32), "m"
    if attention_bias:
        feeds["ab"], names[5] = f32(batch, 1, seq, total), "ab"
    if past:
        feeds["pk"], feeds["pv"] = f32(batch, heads, 2, hidden // heads), f32(batch, heads, 2, hidden // heads)
        names[6:8] = ["pk", "pv"]
    while not names[-1]:
        names.pop()
    outs = ["y", "pk_out", "pv_out"] if past else ["y"]
    node = helper.make_node("MultiHeadAttention", names, outs, domain=MS, num_heads=heads)
    assert_matches(ms_model(node, feeds, inits, outputs=outs), feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("segments, mask, position_ids", [(True, True, False), (False, False, False),
                                                          (True, False, True), (False, True, True)])
def test_embed_layer_normalization(segments, mask, position_ids):
    """Word, position and segment embeddings summed and normalised; mask_index counts each row's ones (zeros with
    no mask); embedding_sum is the sum before the norm."""
    r = np.random.default_rng(4)
    batch, seq, vocab, hidden = 2, 5, 30, 8
    feeds = {"ids": r.integers(0, vocab, (batch, seq)).astype(np.int32)}
    inits = {"we": f32(vocab, hidden), "pe": f32(seq + 2, hidden), "g": f32(hidden) + 1, "bt": f32(hidden)}
    names = ["ids", "", "we", "pe", "", "g", "bt", "", ""]
    if segments:
        feeds["seg"], inits["se"] = r.integers(0, 2, (batch, seq)).astype(np.int32), f32(2, hidden)
        names[1], names[4] = "seg", "se"
    if mask:
        feeds["m"], names[7] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32), "m"
    if position_ids:
        feeds["pid"], names[8] = r.integers(0, seq + 2, (1, seq)).astype(np.int32), "pid"
    while not names[-1]:
        names.pop()
    node = helper.make_node("EmbedLayerNormalization", names, ["y", "mi", "es"], domain=MS, epsilon=1e-5)
    assert_matches(ms_model(node, feeds, inits, outputs=["y", "mi", "es"]), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weight_type, per_column, mask, past, attrs", [
    (np.int8, False, False, False, {}), (np.int8, True, True, False, {"unidirectional": 1}),
    (np.uint8, True, False, True, {}), (np.uint8, False, True, True, {"scale": 0.3}),
])
def test_ms_quantized_attention(weight_type, per_column, mask, past, attrs):
    """onnxruntime's QAttention: a uint8 input and an int8 or uint8 weight with their scales and zero points (per
    tensor or per column), key lengths, a past, a causal mask, against its CPU kernel."""
    r = np.random.default_rng(9)
    batch, seq, hidden, heads = 2, 4, 8, 2
    lo, hi = (-128, 128) if weight_type == np.int8 else (0, 256)
    cols = 3 * hidden if per_column else 1
    feeds = {"x": r.integers(0, 256, (batch, seq, hidden)).astype(np.uint8),
             "xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8)}
    inits = {"w": r.integers(lo, hi, (hidden, 3 * hidden)).astype(weight_type), "b": f32(3 * hidden),
             "ws": (r.random(cols) * 0.01 + 0.002).astype(np.float32).reshape(() if cols == 1 else (cols,)),
             "wz": r.integers(lo // 8, hi // 8, cols).astype(weight_type).reshape(() if cols == 1 else (cols,))}
    names = ["x", "w", "b", "xs", "ws", "", "xz", "wz"]
    if mask:
        feeds["m"], names[5] = np.array([seq + (2 if past else 0), 2], np.int32), "m"
    if past:
        feeds["past"] = f32(2, batch, heads, 2, hidden // heads)
        names.append("past")
    outs = ["y", "present"] if past else ["y"]
    node = helper.make_node("QAttention", names, outs, domain=MS, num_heads=heads, **attrs)
    assert_matches(ms_model(node, feeds, inits, outputs=outs), feeds, rtol=1e-4, atol=1e-4)


def _optimised_bert(tmp_path):
    """A BERT layer exported from torch as Hugging Face writes it (``bert.onnx``), then fused by onnxruntime's
    transformer optimizer into EmbedLayerNormalization, Attention, SkipLayerNormalization and BiasGelu (``opt.onnx``,
    the form its users ship), and feeds with a padded row."""
    import math

    import torch
    from onnxruntime.transformers.optimizer import optimize_model

    torch.manual_seed(0)
    hidden, heads = 32, 4

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.words, self.positions = torch.nn.Embedding(50, hidden), torch.nn.Embedding(16, hidden)
            self.types, self.ln0 = torch.nn.Embedding(2, hidden), torch.nn.LayerNorm(hidden, eps=1e-12)
            self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(hidden, eps=1e-12), torch.nn.LayerNorm(hidden, eps=1e-12)
            self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)
            self.register_buffer("pos", torch.arange(16).unsqueeze(0))

        def split(self, t):
            return t.view(t.size(0), t.size(1), heads, hidden // heads).permute(0, 2, 1, 3)

        def forward(self, ids, mask, types):
            x = self.ln0(self.words(ids) + self.positions(self.pos[:, :ids.size(1)]) + self.types(types))
            extended = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
            scores = torch.matmul(self.split(self.q(x)), self.split(self.k(x)).transpose(-1, -2))
            p = torch.softmax(scores / math.sqrt(hidden // heads) + extended, dim=-1)
            c = torch.matmul(p, self.split(self.v(x))).permute(0, 2, 1, 3).contiguous()
            a = self.ln1(self.o(c.view(c.size(0), c.size(1), hidden)) + x)
            return self.ln2(self.down(torch.nn.functional.gelu(self.up(a))) + a)

    ids, types = torch.randint(0, 50, (2, 8)), torch.zeros(2, 8, dtype=torch.int64)
    mask = torch.ones(2, 8, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(Bert().eval(), (ids, mask, types), str(tmp_path / "bert.onnx"), input_names=names,
                      output_names=["out"], opset_version=14, dynamo=False,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    optimize_model(str(tmp_path / "bert.onnx"), model_type="bert", num_heads=heads,
                   hidden_size=hidden).save_model_to_file(str(tmp_path / "opt.onnx"))
    r = np.random.default_rng(5)
    feeds = {"input_ids": r.integers(0, 50, (3, 7)), "attention_mask": np.ones((3, 7), np.int64),
             "token_type_ids": r.integers(0, 2, (3, 7))}
    feeds["attention_mask"][1, 4:] = 0
    return feeds


def _typed(path, feeds):
    """``feeds`` as the model's inputs type them (the fused model takes int32 ids)."""
    import onnx

    kinds = {i.name: i.type.tensor_type.elem_type for i in onnx.load(str(path)).graph.input}
    return {k: v.astype(np.int32 if kinds[k] == onnx.TensorProto.INT32 else np.int64) for k, v in feeds.items()}


def test_onnxruntime_transformer_optimised_bert(tmp_path):
    """The optimizer's BERT imports (it was refused) and its session matches onnxruntime on the model before the
    fusion, padded rows included."""
    import onnx
    import onnxruntime as ort

    from luminal.runtime.session import InferenceSession

    feeds = _optimised_bert(tmp_path)
    fused = {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node if n.domain == MS}
    assert {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization"} <= fused
    want = ort.InferenceSession(str(tmp_path / "bert.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    opt = InferenceSession(tmp_path / "opt.onnx", backend="interpret")
    np.testing.assert_allclose(opt.run(None, _typed(tmp_path / "opt.onnx", feeds))[0], want[0], rtol=1e-4, atol=1e-5)


def test_dynamically_quantised_optimised_bert(tmp_path):
    """onnxruntime's dynamic quantisation of the optimizer's BERT (Hugging Face Optimum's recipe: optimise, then
    quantise) turns its Attention into QAttention and its EmbedLayerNormalization into QEmbedLayerNormalization: they
    import (they were refused) and the session on the C backend matches onnxruntime on the quantised model (0.025 off
    the float model, so agreeing to 1e-5 says the quantised arithmetic is the same)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    feeds = _optimised_bert(tmp_path)
    quantize_dynamic(str(tmp_path / "opt.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    quantised = onnx.load(str(tmp_path / "q.onnx"))
    assert {"QAttention", "QEmbedLayerNormalization"} <= {n.op_type for n in quantised.graph.node if n.domain == MS}
    session_matches_onnxruntime(quantised, _typed(tmp_path / "q.onnx", feeds), tmp_path, backend="cpu", rtol=1e-5,
                                atol=1e-5)


def _small_cnn():
    """A CNN with what onnxruntime's NCHWc transformer rewrites: a conv over the 3-channel input, convs whose
    channels are no multiple of the block, depthwise, 1x1, a residual sum, fused activations, pools and a nearest
    2x upsample."""
    r = np.random.default_rng(8)

    def w(*shape):
        return (r.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    inits = {"w1": w(20, 3, 3, 3), "b1": w(20), "w2": w(20, 1, 3, 3), "w3": w(32, 20, 1, 1), "b3": w(32),
             "w4": w(32, 32, 3, 3), "w5": w(32, 32, 3, 3), "w6": w(32, 32, 1, 1),
             "sc": np.array([1, 1, 2, 2], np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=20),
             helper.make_node("Relu", ["c2"], ["a2"]),
             helper.make_node("Conv", ["a2", "w3", "b3"], ["c3"]),
             helper.make_node("Conv", ["c3", "w4"], ["c4"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c4", "c3"], ["s4"]), helper.make_node("Relu", ["s4"], ["a4"]),
             helper.make_node("MaxPool", ["a4"], ["p4"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p4", "w5"], ["c5"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c5"], ["a5"]),
             helper.make_node("AveragePool", ["a5"], ["p5"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["p5", "", "sc"], ["u5"], mode="nearest", nearest_mode="floor",
                              coordinate_transformation_mode="asymmetric"),
             helper.make_node("Conv", ["u5", "w6"], ["c6"]),
             helper.make_node("GlobalAveragePool", ["c6"], ["y"])]
    return make_model(nodes, {"x": f32(2, 3, 16, 16)}, inits, outputs=["y"], opset=14)


def test_onnxruntime_saved_at_its_default_level(tmp_path):
    """onnxruntime's default optimisation level saves convs and pools over channel-blocked activations
    (com.microsoft.nchwc: ReorderInput, Conv with its sum and activation, the pools, Upsample, ReorderOutput), the
    weights stored blocked; the model imports (it was refused) and matches onnxruntime on the model before."""
    import onnx
    import onnxruntime as ort

    from luminal.runtime.session import InferenceSession

    model = _small_cnn()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "all.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = {n.op_type for n in onnx.load(str(tmp_path / "all.onnx")).graph.node if n.domain == "com.microsoft.nchwc"}
    assert {"Conv", "ReorderOutput", "MaxPool", "AveragePool", "Upsample", "GlobalAveragePool"} <= saved, saved
    x = f32(2, 3, 16, 16)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = InferenceSession(tmp_path / "all.onnx", backend="interpret").run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_nchwc_weights_blocked_by_eight():
    """The same ops as an AVX2 machine saves them (blocks of 8: a conv of 24 output channels tells): the blocked
    weights are read back to OIHW, [O/8][I][kh][kw][8] over the model's input and depthwise, [O/8][I/8][kh][kw][8
    in][8 out] over blocked channels, and the model gives what its plain form gives."""
    from luminal.frontend_onnx.ops_nn_nchwc import NCHWC, block_size

    r = np.random.default_rng(9)
    w1, w2, w3 = f32(24, 3, 3, 3), f32(24, 1, 3, 3), f32(16, 24, 1, 1)
    b3, z = f32(16), f32(1, 16, 8, 8)

    def bo(w):  # [O/8][I][kh][kw][8]
        o, i, kh, kw = w.shape
        return w.reshape(o // 8, 8, i, kh, kw).transpose(0, 2, 3, 4, 1).reshape(w.shape)

    def bibo(w):  # [O/8][I/8][kh][kw][8 in][8 out]
        o, i, kh, kw = w.shape
        return w.reshape(o // 8, 8, i // 8, 8, kh, kw).transpose(0, 2, 4, 5, 3, 1).reshape(w.shape)

    blocked = [helper.make_node("Conv", ["x", "w1"], ["c1"], domain=NCHWC, pads=[1, 1, 1, 1], activation="Relu"),
               helper.make_node("Conv", ["c1", "w2"], ["c2"], domain=NCHWC, pads=[1, 1, 1, 1], group=24),
               helper.make_node("Conv", ["c2", "w3", "b3", "zb"], ["c3"], domain=NCHWC, activation="HardSigmoid",
                                activation_params=[0.2, 0.5]),
               helper.make_node("ReorderInput", ["z"], ["zb"], domain=NCHWC),
               helper.make_node("ReorderOutput", ["c3"], ["y"], domain=NCHWC, channels=13, channels_last=1)]
    plain = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=24),
             helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"]), helper.make_node("Add", ["c3", "z"], ["s3"]),
             helper.make_node("HardSigmoid", ["s3"], ["h3"]),
             helper.make_node("Slice", ["h3", "lo", "hi", "ax"], ["y13"]),
             helper.make_node("Transpose", ["y13"], ["y"], perm=[0, 2, 3, 1])]
    x = r.standard_normal((1, 3, 8, 8)).astype(np.float32)
    feeds = {"x": x, "z": z}
    m = ms_model(blocked, feeds, {"w1": bo(w1), "w2": bo(w2), "w3": bibo(w3), "b3": b3}, outputs=["y"])
    m.opset_import.append(helper.make_opsetid(NCHWC, 1))
    assert block_size(m.graph) == 8
    consts = {"w1": w1, "w2": w2, "w3": w3, "b3": b3, "lo": np.array([0]), "hi": np.array([13]), "ax": np.array([1])}
    want = run_ours(make_model(plain, feeds, consts, outputs=["y"]), feeds)[0]
    got = run_ours(m, feeds)[0]
    assert got.shape == (1, 8, 8, 13)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout, rotary_dim, offset", [("3-D", 0, False), ("3-D", 4, True), ("4-D", 0, True),
                                                        ("4-D", 4, False)])
def test_ms_rotary_embedding(interleaved, layout, rotary_dim, offset):
    """onnxruntime's RotaryEmbedding (input, position_ids, cos_cache, sin_cache): positions per token or one start
    for every row, a partial rotary dim, 3-D input with its heads found from the cache, against its kernel."""
    r = np.random.default_rng(12)
    batch, seq, heads, head = 2, 5, 2, 8
    x = f32(batch, heads, seq, head) if layout == "4-D" else f32(batch, seq, heads * head)
    pos = np.array([3], np.int64) if offset else r.integers(0, 12, (batch, seq)).astype(np.int64)
    width = (rotary_dim or head) // 2
    attrs = {"interleaved": interleaved}
    if rotary_dim or layout == "4-D":
        attrs.update(num_heads=heads, rotary_embedding_dim=rotary_dim)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    model = ms_model(node, {"x": x, "pos": pos}, {"cos": f32(12, width), "sin": f32(12, width)})
    assert_matches(model, {"x": x, "pos": pos}, rtol=1e-5, atol=1e-5)


# (mode, batch, seq, past, cache, lengths, heads, kv heads, head, packed, attributes, inputs)
GQA_CASES = [
    ("prompt", 2, 4, 0, 0, [4, 2], 4, 2, 16, False, {}, ()),
    ("prompt", 3, 3, 0, 0, [3, 1, 2], 3, 1, 16, True, {"do_rotary": 1}, ()),
    ("prompt", 1, 5, 0, 0, [5], 2, 2, 32, False, {"do_rotary": 1, "rotary_interleaved": 1}, ("partial rotary",)),
    ("decode", 3, 1, 5, 5, [6, 3, 5], 4, 2, 16, False, {"do_rotary": 1, "local_window_size": 3}, ()),
    ("decode", 2, 1, 4, 9, [5, 2], 6, 2, 16, True, {"softcap": 5.0, "scale": 0.3, "k_quant_type": "NONE"},
     ("shared buffer",)),
    ("decode", 2, 1, 3, 3, [4, 4], 2, 1, 16, False, {"smooth_softmax": 1}, ("attention_bias",)),
    ("chunk", 1, 3, 4, 4, [7], 4, 1, 16, False, {"do_rotary": 1}, ("head_sink",)),
    ("chunk", 1, 4, 2, 8, [6], 2, 2, 16, False, {"causal": 0, "do_rotary": 1}, ("shared buffer", "position_ids")),
    ("decode", 2, 1, 6, 6, [7, 5], 4, 2, 16, False, {"do_rotary": 1, "local_window_size": 2}, ("float16",)),
]


@pytest.mark.parametrize("mode, batch, seq, past, cache, lengths, heads, kv_heads, head, packed, attrs, extra",
                         GQA_CASES)
def test_group_query_attention(mode, batch, seq, past, cache, lengths, heads, kv_heads, head, packed, attrs, extra):
    """onnxruntime's GroupQueryAttention against its CPU kernel: a first prompt right-padded per batch entry, a
    token or a chunk after a past of fewer tokens in some entries (a cache of the past's length or a longer shared
    buffer), packed QKV, rotary embeddings (interleaved, partial, from position_ids), a local window, softcap,
    smooth softmax, head sinks, attention bias, no causal mask, float16. The rows onnxruntime leaves unspecified
    (a padded query, cache positions past an entry's length) are not compared."""
    r = np.random.default_rng(len(lengths) * 7 + seq)
    dtype = np.float16 if "float16" in extra else np.float32
    total = seq if mode == "prompt" else past + seq
    width = (heads + 2 * kv_heads) * head if packed else heads * head
    feeds = {"q": r.standard_normal((batch, seq, width)).astype(dtype)}
    names = ["q", "", ""]
    if not packed:
        feeds["k"], feeds["v"] = (r.standard_normal((batch, seq, kv_heads * head)).astype(dtype) for _ in range(2))
        names[1:3] = ["k", "v"]
    if past:
        feeds["pk"], feeds["pv"] = (r.standard_normal((batch, kv_heads, cache, head)).astype(dtype) for _ in range(2))
    names += ["pk", "pv"] if past else ["", ""]
    feeds["seqlens"] = np.array(lengths, np.int32) - 1
    inits = {"total": np.array(total, np.int32)}
    names += ["seqlens", "total", "", "", "", "", ""]
    if attrs.get("do_rotary"):
        rotary = head // 2 if "partial rotary" in extra else head
        angles = np.arange(total + 4)[:, None] / 10000 ** (np.arange(rotary // 2) / (rotary // 2))[None]
        inits["cos"], inits["sin"] = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
        names[7:9] = ["cos", "sin"]
    if "position_ids" in extra:
        feeds["pos"], names[9] = (past + 1 + np.arange(seq)[None]).repeat(batch, 0).astype(np.int64), "pos"
    if "attention_bias" in extra:
        feeds["ab"], names[10] = r.standard_normal((batch, 1, seq, total)).astype(dtype), "ab"
    if "head_sink" in extra:
        feeds["sink"], names[11] = r.standard_normal(heads).astype(dtype), "sink"
    while not names[-1]:
        names.pop()
    outs = ["y", "present_k", "present_v"]
    node = helper.make_node("GroupQueryAttention", names, outs, domain=MS, num_heads=heads, kv_num_heads=kv_heads,
                            **attrs)
    model = ms_model(node, feeds, inits, outputs=outs)
    ours, theirs = run_ours(model, feeds), run_ort(model, feeds)
    tol = 1e-2 if dtype == np.float16 else 1e-4
    for b, n in enumerate(lengths):
        assert ours[0].dtype == theirs[0].dtype and ours[1].shape == theirs[1].shape
        rows = n if mode == "prompt" else seq
        np.testing.assert_allclose(ours[0][b, :rows].astype(np.float32), theirs[0][b, :rows], rtol=tol, atol=tol)
        for o in (1, 2):
            np.testing.assert_allclose(ours[o][b, :, :n].astype(np.float32), theirs[o][b, :, :n], rtol=tol, atol=tol)


@pytest.mark.parametrize("total_is_input, attrs, message", [
    (True, {}, "total_sequence_length must be one value known when the model is compiled"),
    (False, {"k_quant_type": "PER_TENSOR"}, "a quantised KV cache is not supported"),
])
def test_group_query_attention_refusals(total_is_input, attrs, message):
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens", "total"], ["y"], domain=MS,
                            num_heads=2, kv_num_heads=1, **attrs)
    feeds = {"q": f32(1, 3, 32), "k": f32(1, 3, 16), "v": f32(1, 3, 16), "seqlens": np.array([2], np.int32)}
    total = {"total": np.array(3, np.int32)}
    model = ms_model(node, {**feeds, **total}) if total_is_input else ms_model(node, feeds, total)
    with pytest.raises(LuminalError, match=message):
        load(model)


def test_decoder_with_group_query_attention_prompt_then_token(tmp_path):
    """A one-layer decoder as onnxruntime-genai's model builder writes one: seqlens_k from the attention mask's
    sum, total_sequence_length from its shape, a KV cache in and out by symbolic dims; one session on the C backend
    runs the prompt (an empty past) and the next token (the prompt's present as its past) as onnxruntime does."""
    from onnx import TensorProto, numpy_helper

    from luminal.runtime import InferenceSession

    r = np.random.default_rng(8)
    vocab, hidden, heads, kv_heads, head = 50, 64, 4, 2, 16
    w = {"embed": r.standard_normal((vocab, hidden)), "wq": r.standard_normal((hidden, heads * head)) * 0.2,
         "wk": r.standard_normal((hidden, kv_heads * head)) * 0.2, "wv": r.standard_normal((hidden, kv_heads * head)),
         "wo": r.standard_normal((heads * head, vocab)) * 0.2}
    angles = np.arange(32)[:, None] / 10000 ** (np.arange(head // 2) / (head // 2))[None]
    w |= {"cos": np.cos(angles), "sin": np.sin(angles)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    inits += [numpy_helper.from_array(np.array([1], np.int64), "axis1"),
              numpy_helper.from_array(np.array(1, np.int64), "one")]
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["x"]),
             *(helper.make_node("MatMul", ["x", f"w{p}"], [p]) for p in "qkv"),
             helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["n"], keepdims=0),
             helper.make_node("Sub", ["n", "one"], ["n1"]),
             helper.make_node("Cast", ["n1"], ["seqlens"], to=TensorProto.INT32),
             helper.make_node("Shape", ["attention_mask"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["t"]),
             helper.make_node("Cast", ["t"], ["total"], to=TensorProto.INT32),
             helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_key", "past_value", "seqlens", "total",
                                                      "cos", "sin"], ["y", "present_key", "present_value"],
                              domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1),
             helper.make_node("MatMul", ["y", "wo"], ["logits"])]
    cache = ["batch", kv_heads, "past", head]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
              helper.make_tensor_value_info("past_key", TensorProto.FLOAT, cache),
              helper.make_tensor_value_info("past_value", TensorProto.FLOAT, cache)]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab]),
               *(helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", kv_heads, "total", head])
                 for n in ("present_key", "present_value"))]
    model = helper.make_model(helper.make_graph(nodes, "decoder", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    onnx_path = tmp_path / "decoder.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    ours = InferenceSession(onnx_path, backend="cpu")
    empty = np.zeros((1, kv_heads, 0, head), np.float32)
    feeds = {"input_ids": np.array([[3, 14, 15, 9, 2]]), "attention_mask": np.ones((1, 5), np.int64),
             "past_key": empty, "past_value": empty}
    for _ in range(2):
        got, want = ours.run(None, feeds), run_ort(model, feeds)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        feeds = {"input_ids": np.array([[int(want[0][0, -1].argmax())]]), "attention_mask": np.ones((1, 6), np.int64),
                 "past_key": want[1], "past_value": want[2]}


@pytest.mark.parametrize("op_type, feeds, inits, attrs", [
    ("ExpandDims", {"x": f32(2, 3)}, {"axis": np.array(-1, np.int32)}, {}),
    ("GatherND", {"x": f32(3, 4, 2)}, {"i": np.array([[0, 1], [2, 3], [1, 0]], np.int64)}, {}),
    ("Pad", {"x": f32(2, 3)}, {"pads": np.array([1, 0, 0, 2], np.int64), "v": np.array([1.5], np.float32)}, {}),
    ("Pad", {"x": f32(2, 4)}, {"pads": np.array([0, 2, 1, 1], np.int64)}, {"mode": "reflect"}),
    ("Range", {}, {"a": np.array(2.0, np.float32), "b": np.array(9.5, np.float32)}, {}),
    ("Range", {}, {"a": np.array(10, np.int32), "b": np.array(1, np.int32), "c": np.array(-3, np.int32)}, {}),
    ("Trilu", {"x": f32(2, 3, 4)}, {"k": np.array(1, np.int64)}, {"upper": 0}),
    ("GridSample", {"x": f32(1, 2, 5, 6), "g": (RNG.random((1, 3, 4, 2)) * 2.4 - 1.2).astype(np.float32)}, {},
     {"mode": "bilinear", "padding_mode": "border", "align_corners": 1}),
    ("TransposeMatMul", {"a": f32(3, 4), "b": f32(5, 4)}, {}, {"transB": 1, "alpha": 0.5}),
    ("CDist", {"a": f32(5, 7), "b": f32(4, 7)}, {}, {"metric": "euclidean"}),
    ("CDist", {"a": f32(3, 2)}, {"b": f32(6, 2)}, {}),
])
def test_onnxruntime_domain_versions_of_standard_ops(op_type, feeds, inits, attrs):
    """onnxruntime's com.microsoft ExpandDims, GatherND, Pad, Range (delta left out or given), Trilu, GridSample and
    TransposeMatMul, from before the default domain had them, and CDist (skl2onnx's nearest neighbours: euclidean,
    squared by default), against its kernels."""
    node = helper.make_node(op_type, [*feeds, *inits], ["y"], domain=MS, **attrs)
    assert_matches(ms_model(node, feeds, inits), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op_type, inputs, attrs, message", [
    ("FusedMatMul", ["a", "b"], {"bogus": 1}, "attribute 'bogus' is not one of FusedMatMul's"),
    ("FusedMatMul", ["a", "b"], {"alpha": "x"}, "attribute 'alpha' is STRING, FusedMatMul takes FLOAT"),
    ("FusedMatMul", ["a", "b", "a"], {}, "FusedMatMul takes at most 2 inputs, not 3"),
    ("QAttention", ["x", "w", "b", "s", "s"], {}, "QAttention needs attribute 'num_heads'"),
    ("QAttention", ["x", "w", "", "s", "s"], {"num_heads": 2}, r"QAttention needs input 2 \(bias\)"),
])
def test_a_contrib_node_its_schema_refuses_is_refused(op_type, inputs, attrs, message):
    """onnxruntime's schema of a com.microsoft op is checked as it checks it (onnx's checker knows only the standard
    domains): an unknown attribute, one of another type, an input too many, a required attribute or input missing;
    luminal ran each of these models, which onnxruntime refuses."""
    feeds = {"a": f32(2, 3), "b": f32(3, 4)} if op_type == "FusedMatMul" else \
        {"x": RNG.integers(0, 255, (1, 2, 4)).astype(np.uint8), "s": np.array(0.1, np.float32)}
    inits = {} if op_type == "FusedMatMul" else {"w": np.ones((4, 12), np.int8), "b": f32(12)}
    model = ms_model(helper.make_node(op_type, inputs, ["y"], domain=MS, **attrs), feeds, inits)
    with pytest.raises(LuminalError, match=message):
        load(model)
