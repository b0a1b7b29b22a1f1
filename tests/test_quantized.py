"""Quantised models as onnxruntime's quantiser writes them (QDQ, QOperator with contrib ops, dynamic
integer ops), and models whose inputs and outputs are 8-bit integers: onnxruntime is the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from frontend_util import session_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from luminal.cli.modelcheck import check_model
from luminal.runtime import InferenceSession
from luminal.runtime.artifact import load_artifact, write_artifact
from luminal.runtime.compile import compile_model

BACKENDS = ("reference", "cpu")
MODELS_DIR = Path(__file__).resolve().parent.parent / "examples" / "models"


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            y = torch.sigmoid(self.conv2(y)) + torch.nn.functional.avg_pool2d(y, 2)
            return self.fc(y.flatten(1))

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("q") / "float.onnx"
    torch.onnx.export(Net().eval(), torch.randn(1, 3, 8, 8), str(path), opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])
    return path


def _quantised(float_model, kind: str):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Calib(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.feeds, None)

    out = float_model.with_name(f"{kind}.onnx")
    if kind == "dynamic":
        quantize_dynamic(str(float_model), str(out))
    else:
        fmt = QuantFormat.QDQ if kind == "qdq" else QuantFormat.QOperator
        # reduce_range: 7-bit weights, so onnxruntime's u8 x s8 kernels (pairs summed in int16) cannot saturate
        # and its results are the exact ones luminal computes
        quantize_static(str(float_model), str(out), Calib(), quant_format=fmt, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=kind == "qdq", reduce_range=True)
    return out


def _output_step(path) -> float:
    """The quantisation step of the model's output: the scale of the DequantizeLinear that produces it."""
    m = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    (dq,) = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == m.graph.output[0].name]
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["qdq", "qoperator", "dynamic"])
def test_quantised_model_matches_onnxruntime(float_model, kind, backend):
    """Integer products are exact, so results match up to a tie rounded the other way after float math
    summed in another order: at most one quantisation step of the output."""
    path = _quantised(float_model, kind)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    expected = {"qdq": {"QuantizeLinear", "DequantizeLinear", "Conv"}, "qoperator": {"QLinearConv", "QGemm"},
                "dynamic": {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"}}[kind]
    assert expected <= ops, ops
    step = _output_step(path) if kind != "dynamic" else 0.05
    report = check_model(str(path), {}, backend, seed=0, atol=1.01 * step, rtol=0.0)
    assert report.ok, [(o.name, o.max_abs, step, o.reason) for o in report.outputs]


@pytest.mark.parametrize("kind", ["qdq", "qoperator"])
def test_quantised_model_saved_by_onnxruntime_at_its_default_level(float_model, kind, tmp_path):
    """onnxruntime's default level saves a quantised CNN with its NHWC transformer's com.microsoft QLinearConv
    (``channels_last``: NHWC in and out between Transposes); it imports (it was refused) and matches."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "saved.onnx")
    ort.InferenceSession(str(_quantised(float_model, kind)), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(str(tmp_path / "saved.onnx"))
    assert any(n.op_type == "QLinearConv" and n.domain == "com.microsoft" for n in saved.graph.node)
    step = _output_step(_quantised(float_model, kind))
    report = check_model(str(tmp_path / "saved.onnx"), {}, "cpu", seed=0, atol=1.01 * step, rtol=0.0)
    assert report.ok, [(o.name, o.max_abs, step, o.reason) for o in report.outputs]


def _matches_onnxruntime(nodes, feeds: dict, inits: list, tmp_path: Path, rtol: float = 0.0,
                         atol: float = 0.0, opset: int = 17) -> Path:
    """A model of ``nodes`` (the default and com.microsoft domains) on ``feeds``: luminal's C backend against
    onnxruntime running it as written, the output of the same type; the saved model's path."""
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in feeds.items()]
    g = helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info(nodes[-1].output[0])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10 if opset >= 21 else 8
    return session_matches_onnxruntime(m, feeds, tmp_path, backend="cpu", rtol=rtol, atol=atol, ort_optimize=False)


@pytest.mark.parametrize("np_type", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)])
def test_nhwc_max_pool(np_type, attrs, tmp_path):
    """onnxruntime's NhwcMaxPool (its NHWC transformer's MaxPool between quantised convs) over 8-bit NHWC values,
    padding and ceil_mode included."""
    x = np.random.default_rng(3).integers(np.iinfo(np_type).min, np.iinfo(np_type).max, (2, 9, 11, 5)).astype(np_type)
    _matches_onnxruntime([helper.make_node("NhwcMaxPool", ["x"], ["y"], domain="com.microsoft", **attrs)], {"x": x},
                         [], tmp_path)


def test_requantizing_epilogues_are_compiled_for_the_vectoriser(float_model):
    """A conv whose epilogue requantizes (its rounding, clamps and saturation: a long chain of selects) has that
    epilogue compiled without gcc's jump threading, which otherwise leaves the loop scalar (QDQ MobileNetV3-Small
    3.1x slower); a float conv keeps it. No rounding calls libm's float remainder."""
    from luminal.codegen.c.emit import THREADING_MAX_SELECTS
    from luminal.ir.graph import Op

    def sources(path):
        m = InferenceSession(str(path), backend="cpu").model
        return [(k, m.backend.source(k, s)) for k, s in zip(m.launched, m.elision.pick(m.schedules))]

    marked = ("LUM_NO_THREADING void lum_epilogue", "LUM_NO_THREADING int lum_kernel")
    quantised = sources(_quantised(float_model, "qdq"))
    convs = [(k, src) for k, src in quantised if k.form == "contraction"]
    assert len(convs) >= 3
    for k, src in convs:
        long_chain = sum(o.op is Op.Where for o in k.ops) >= THREADING_MAX_SELECTS
        assert any(m in src for m in marked) == long_chain
    assert sum(any(m in src for m in marked) for _, src in convs) >= 2
    assert not any("fmodf" in src for _, src in quantised)
    assert not any(any(m in src for m in marked) for _, src in sources(float_model))


@pytest.fixture(scope="module")
def uint8_model(tmp_path_factory):
    img = helper.make_tensor_value_info("img", TensorProto.UINT8, [2, 5])
    nodes = [helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["scaled"]),
             helper.make_node("Add", ["img", "three"], ["wrapped"]),
             helper.make_node("Cast", ["scaled"], ["back"], to=TensorProto.INT8)]
    graph = helper.make_graph(
        nodes, "u8", [img],
        [helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("wrapped", TensorProto.UINT8, [2, 5]),
         helper.make_tensor_value_info("back", TensorProto.INT8, [2, 5])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         numpy_helper.from_array(np.array(3, np.uint8), "three")])
    path = tmp_path_factory.mktemp("u8") / "u8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_uint8_inputs_and_outputs_keep_their_types(uint8_model, backend):
    import onnxruntime as ort

    x = np.array([[0, 1, 100, 200, 252], [253, 254, 255, 7, 9]], np.uint8)
    want = ort.InferenceSession(str(uint8_model)).run(None, {"img": x})
    sess = InferenceSession(uint8_model, backend="cpu") if backend == "cpu" else None
    if sess is not None:
        assert [i.type for i in sess.get_inputs()] == ["tensor(uint8)"]
        assert [o.type for o in sess.get_outputs()] == ["tensor(float)", "tensor(uint8)", "tensor(int8)"]
        got = sess.run(None, {"img": x})
    else:
        from luminal.frontend_onnx import load
        from luminal.ir import run_reference

        got = run_reference(load(str(uint8_model)).graph, {"img": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)  # 255 + 3 wraps to 2, as in the model's uint8 arithmetic
    assert check_model(str(uint8_model), {}, backend, seed=0).ok


def test_declared_types_survive_an_artifact(uint8_model, tmp_path):
    compiled = compile_model(uint8_model, {}, "cpu")
    loaded = load_artifact(write_artifact(compiled, tmp_path / "art", uint8_model, {}), "cpu")
    x = np.full((2, 5), 254, np.uint8)
    for g, w in zip(loaded.run({"img": x}), compiled.run({"img": x})):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert [o.declared for o in loaded.outputs] == [None, "uint8", "int8"]


def test_int32_feed_for_a_uint8_input_is_refused(uint8_model):
    from luminal.errors import LuminalError

    sess = InferenceSession(uint8_model, backend="cpu")
    with pytest.raises(LuminalError, match="expected uint8"):
        sess.run(None, {"img": np.zeros((2, 5), np.int32)})


def test_dynamically_quantised_transformer_matches_onnxruntime(small_models, tmp_path):
    """onnxruntime's recipe for transformers (MatMulInteger on u8 activations and s8 weights). reduce_range keeps
    onnxruntime's AVX2 kernels, which sum u8 x s8 pairs in int16, from saturating: its results are then the
    exact products luminal computes."""
    from onnxruntime.quantization import quantize_dynamic

    name = "bert-small-torchscript.onnx"
    out = tmp_path / "bert-dynamic.onnx"
    quantize_dynamic(str(MODELS_DIR / name), str(out), reduce_range=True)
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(out)).graph.node}
    report = check_model(str(out), small_models[name]["shapes"], "cpu", seed=0)
    assert report.ok, [(o.name, o.max_abs, o.reason) for o in report.outputs]


def test_dynamically_quantised_transformer_saved_by_onnxruntime(small_models, tmp_path):
    """The same model as onnxruntime's optimizer saves it: DynamicQuantizeLinear and MatMulInteger fused into
    com.microsoft DynamicQuantizeMatMul (it was refused)."""
    import onnxruntime as ort
    from onnxruntime.quantization import quantize_dynamic

    name = "bert-small-torchscript.onnx"
    quantize_dynamic(str(MODELS_DIR / name), str(tmp_path / "dynamic.onnx"), reduce_range=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "saved.onnx")
    ort.InferenceSession(str(tmp_path / "dynamic.onnx"), so, providers=["CPUExecutionProvider"])
    assert "DynamicQuantizeMatMul" in {n.op_type for n in onnx.load(str(tmp_path / "saved.onnx")).graph.node}
    report = check_model(str(tmp_path / "saved.onnx"), small_models[name]["shapes"], "cpu", seed=0)
    assert report.ok, [(o.name, o.max_abs, o.reason) for o in report.outputs]


@pytest.mark.parametrize("a_type, b_type, per_column, zero_points, bias", [
    (np.uint8, np.int8, False, True, True), (np.uint8, np.uint8, True, True, False),
    (np.int8, np.int8, True, False, True)])
def test_matmul_integer_to_float(a_type, b_type, per_column, zero_points, bias, tmp_path):
    """(A - a_zp)(B - b_zp) a_scale b_scale + bias, B's scale and zero point one or per column, against
    onnxruntime's kernel."""
    r = np.random.default_rng(11)
    a = r.integers(np.iinfo(a_type).min, np.iinfo(a_type).max, (2, 5, 16)).astype(a_type)
    b = r.integers(-60, 60, (16, 6)).astype(b_type) if b_type == np.int8 else r.integers(0, 120, (16, 6)).astype(b_type)
    inits = {"b": b, "as": np.array(0.02, np.float32),
             "bs": (r.random(6) * 0.05 + 0.01).astype(np.float32) if per_column else np.array(0.03, np.float32)}
    names = ["a", "b", "as", "bs", "", "", ""]
    if zero_points:
        inits["az"] = np.array(3, a_type)
        inits["bz"] = r.integers(0, 5, 6).astype(b_type) if per_column else np.array(2, b_type)
        names[4:6] = ["az", "bz"]
    if bias:
        inits["bias"], names[6] = r.standard_normal(6).astype(np.float32), "bias"
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain="com.microsoft")
    _matches_onnxruntime([node], {"a": a}, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
                         tmp_path, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, ops", [("bert-small-torchscript.onnx", ("MatMul",)),
                                       ("gpt2-small-torchscript.onnx", ("MatMul", "Gather"))])
def test_weight_only_4_bit_transformer_matches_onnxruntime(small_models, name, ops, tmp_path):
    """onnxruntime's weight-only recipe (MatMulNBits: 4-bit weights in blocks of 32 with a scale each; with Gather
    asked for, GPT-2's embedding tables as GatherBlockQuantized) over the bundled BERT and GPT-2: they import (they
    were refused) and match onnxruntime's own kernels."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, op_types_to_quantize=ops,
                                          quant_axes=(("MatMul", 0), ("Gather", 1)))
    quantizer = MatMulNBitsQuantizer(onnx.load(str(MODELS_DIR / name)), algo_config=config)
    quantizer.process()
    out = tmp_path / "4bit.onnx"
    onnx.save(quantizer.model.model, str(out))
    made = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "MatMulNBits" in made and ("Gather" not in ops or "GatherBlockQuantized" in made)
    report = check_model(str(out), small_models[name]["shapes"], "cpu", seed=0)
    assert report.ok, [(o.name, o.max_abs, o.reason) for o in report.outputs]


@pytest.mark.parametrize("qtype", [TensorProto.INT16, TensorProto.UINT16, TensorProto.UINT8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_onnxruntime_domain_quantize_dequantize(qtype, per_channel, tmp_path):
    """onnxruntime's com.microsoft QuantizeLinear / DequantizeLinear (its quantizer writes them for 16-bit QDQ
    before opset 21 had those types): a conv between QDQ pairs of 16-bit activations and weights."""
    r = np.random.default_rng(qtype)
    np_q = helper.tensor_dtype_to_np_dtype(qtype)
    x = r.standard_normal((1, 3, 9, 9)).astype(np.float32) * 4
    w = r.standard_normal((4, 3, 3, 3)).astype(np.float32)
    info = np.iinfo(np_q)
    scale = np.float32(8.0 / (int(info.max) - int(info.min)))
    zero = np.array((int(info.max) + int(info.min) + 1) // 2, np_q)
    w_scale = (np.abs(w).reshape(4, -1).max(1) / 100).astype(np.float32) if per_channel else np.float32(0.05)
    w_q = np.clip(np.round(w / (w_scale.reshape(4, 1, 1, 1) if per_channel else w_scale)), -120, 120)
    w_zero = np.zeros(4, np.int16) if per_channel else np.array(0, np.int16)
    inits = [numpy_helper.from_array(np.asarray(scale), "s"), numpy_helper.from_array(zero, "z"),
             numpy_helper.from_array(w_q.astype(np.int16), "wq"), numpy_helper.from_array(np.asarray(w_scale), "ws"),
             numpy_helper.from_array(w_zero, "wz")]
    ms = {"domain": "com.microsoft"}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], **ms),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], **ms),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0, **ms),
             helper.make_node("Conv", ["xd", "wd"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    _matches_onnxruntime(nodes, {"x": x}, inits, tmp_path, rtol=1e-5, atol=1e-5)


def test_block_wise_4_bit_qdq_transformer_matches_onnxruntime(small_models, tmp_path):
    """The same recipe in QDQ form (opset 21): each weight an int4 constant dequantised in blocks of 32 along K
    before its MatMul; 4-bit constants were refused ("unsupported ONNX element type INT4")."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    name = "bert-small-torchscript.onnx"
    model = onnx.version_converter.convert_version(onnx.load(str(MODELS_DIR / name)), 21)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, quant_format=QuantFormat.QDQ)
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    out = tmp_path / "bert-4bit-qdq.onnx"
    onnx.save(quantizer.model.model, str(out))
    assert TensorProto.INT4 in {t.data_type for t in onnx.load(str(out)).graph.initializer}
    report = check_model(str(out), small_models[name]["shapes"], "cpu", seed=0)
    assert report.ok, [(o.name, o.max_abs, o.reason) for o in report.outputs]


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
def test_dequantize_4_bit_constants_in_blocks(elem, tmp_path):
    """int4 and uint4 weights and zero points, an odd element count (the last byte half used), blocks along K, against
    onnxruntime running the graph as written (its own fusion of the pair into MatMulNBits is 0.02 off here)."""
    r = np.random.default_rng(elem)
    lo, hi = (-8, 8) if elem == TensorProto.INT4 else (0, 16)
    w = r.integers(lo, hi, (35, 6))
    zp = r.integers(lo, hi, (3, 6))
    inits = [helper.make_tensor("w", elem, w.shape, w.ravel().tolist()),
             numpy_helper.from_array((r.random((3, 6)) * 0.1 + 0.01).astype(np.float32), "s"),
             helper.make_tensor("z", elem, zp.shape, zp.ravel().tolist())]
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=0, block_size=16),
             helper.make_node("MatMul", ["a", "wd"], ["y"])]
    _matches_onnxruntime(nodes, {"a": r.standard_normal((4, 35)).astype(np.float32)}, inits, tmp_path, rtol=1e-5,
                         atol=1e-5, opset=21)


def test_a_large_quantised_weight_is_dequantised_once(tmp_path):
    """A QDQ weight of more than FOLD_LIMIT elements folds into its float weight, as a small one does: one
    contraction kernel, not a dequantisation every run ahead of it."""
    r = np.random.default_rng(3)
    k, n = 1024, 4100  # 4.2M elements, past FOLD_LIMIT
    inits = [numpy_helper.from_array(r.integers(-127, 128, (k, n), dtype=np.int8), "w"),
             numpy_helper.from_array((r.random(n) * 0.01 + 0.001).astype(np.float32), "s"),
             numpy_helper.from_array(r.integers(-3, 4, n, dtype=np.int8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=1),
             helper.make_node("MatMul", ["a", "wd"], ["y"])]
    path = _matches_onnxruntime(nodes, {"a": r.standard_normal((2, k)).astype(np.float32)}, inits, tmp_path,
                                rtol=1e-4, atol=1e-4)
    (kernel,) = compile_model(path, backend="cpu").kernels
    assert kernel.form == "contraction"


def _packed(values: np.ndarray, bits: int) -> np.ndarray:
    """``bits``-bit values packed little-endian along the last axis, the last byte padded with zeros."""
    per = 8 // bits
    v = np.pad(values, [(0, 0)] * (values.ndim - 1) + [(0, -values.shape[-1] % per)]).astype(np.uint16)
    return (v.reshape(*v.shape[:-1], -1, per) << (np.arange(per) * bits)).sum(-1).astype(np.uint8)


@pytest.mark.parametrize("kind, bits, gather_axis, quantize_axis, zero_points, scale_type", [
    ("int4", 4, 0, 1, True, np.float32), ("uint4", 4, 1, 0, False, np.float32), ("int4", 4, 0, 0, False, np.float16),
    ("uint8", 4, 0, 1, True, np.float32), ("uint8", 8, 0, 1, False, np.float16), ("uint8", 2, 0, 1, False, np.float32),
])
def test_gather_block_quantized(kind, bits, gather_axis, quantize_axis, zero_points, scale_type, tmp_path):
    """onnxruntime's GatherBlockQuantized (the 4-bit quantizer's embedding tables): int4 / uint4 tables, uint8 ones of
    2-, 4- or 8-bit values packed along the last axis with packed zero points, default zero points (0, or 2^(bits-1)
    for uint8), blocks that do not divide the axis, negative indices and one past the end (zeros)."""
    r = np.random.default_rng(bits + gather_axis)
    rows, cols, block = 9, 40, 16
    lo, hi = (-8, 8) if kind == "int4" else (0, 16 if kind == "uint4" else 1 << bits)
    q = r.integers(lo, hi, (rows, cols))
    blocks = [-(-n // block) if k == quantize_axis else n for k, n in enumerate(q.shape)]
    zp = r.integers(lo, hi, blocks)
    if kind == "uint8":
        inits = [numpy_helper.from_array(_packed(q, bits) if bits < 8 else q.astype(np.uint8), "data"),
                 numpy_helper.from_array(_packed(zp, bits) if bits < 8 else zp.astype(np.uint8), "zp")]
    else:
        elem = TensorProto.INT4 if kind == "int4" else TensorProto.UINT4
        inits = [helper.make_tensor("data", elem, q.shape, q.ravel().tolist()),
                 helper.make_tensor("zp", elem, blocks, zp.ravel().tolist())]
    inits.append(numpy_helper.from_array((r.random(blocks) * 0.1 + 0.01).astype(scale_type), "scales"))
    size = q.shape[gather_axis]
    indices = np.array([[size - 1, -1, 0], [size, -size, 2]], np.int64)
    node = helper.make_node("GatherBlockQuantized", ["data", "i", "scales"] + ["zp"] * zero_points, ["y"],
                            domain="com.microsoft", bits=bits, block_size=block, gather_axis=gather_axis,
                            quantize_axis=quantize_axis)
    _matches_onnxruntime([node], {"i": indices}, inits if zero_points else inits[:1] + inits[2:], tmp_path,
                         rtol=1e-3, atol=1e-3, opset=21)


@pytest.mark.parametrize("bits, block, k, zero_points, bias", [
    (4, 32, 64, None, False), (4, 16, 37, "packed", True), (4, 64, 100, "float", False), (8, 32, 70, "packed", True),
    (2, 16, 50, "packed", False), (2, 128, 130, None, True),
])
def test_matmul_nbits_matches_onnxruntime(bits, block, k, zero_points, bias, tmp_path):
    """Each width, a K that leaves the last block short, zero points absent (2^(bits-1)), packed like the weight
    or as floats, and a bias."""
    r = np.random.default_rng(bits * k)
    n, blocks = 24, -(-k // block)
    inits = [numpy_helper.from_array(_packed(r.integers(0, 1 << bits, (n, blocks, block)), bits), "B"),
             numpy_helper.from_array((r.random(n * blocks) * 0.1 + 0.01).astype(np.float32), "s")]
    names = ["a", "B", "s", "", "", ""]
    if zero_points == "packed":
        inits.append(numpy_helper.from_array(_packed(r.integers(0, 1 << bits, (n, blocks)), bits).ravel(), "z"))
    elif zero_points == "float":
        inits.append(numpy_helper.from_array((r.random(n * blocks) * (1 << bits)).astype(np.float32), "z"))
    if zero_points:
        names[3] = "z"
    if bias:
        inits.append(numpy_helper.from_array(r.standard_normal(n).astype(np.float32), "bias"))
        names[5] = "bias"
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)
    _matches_onnxruntime([node], {"a": r.standard_normal((2, 3, k)).astype(np.float32)}, inits, tmp_path,
                         rtol=1e-4, atol=1e-4)


def test_qlinearmatmul_with_per_row_and_per_column_scales(tmp_path):
    """a's scale per row and b's per column at once: the requantisation scale is their outer product. Against
    the spec's formula in numpy: onnxruntime refuses a per-row scale of a, and onnx's reference evaluator
    fails to broadcast the two scales."""
    rng = np.random.default_rng(0)
    m, k, n = 5, 7, 6
    a_s, b_s = rng.uniform(0.01, 0.05, m).astype(np.float32), rng.uniform(0.01, 0.05, n).astype(np.float32)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inits = [numpy_helper.from_array(a_s, "as"), numpy_helper.from_array(np.array(120, np.uint8), "az"),
             numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_s, "bs"),
             numpy_helper.from_array(np.zeros(n, np.int8), "bz"),
             numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
             numpy_helper.from_array(np.array(128, np.uint8), "yz")]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    path = tmp_path / "qlmm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    x = rng.integers(0, 256, (2, m, k)).astype(np.uint8)
    acc = (x.astype(np.int32) - 120) @ b.astype(np.int32)
    want = np.clip(np.rint(acc * ((a_s[:, None] * b_s[None, :]) / np.float32(0.2)) + 128), 0, 255).astype(np.uint8)
    got = InferenceSession(path, backend="cpu").run(None, {"a": x})[0]
    assert got.dtype == np.uint8 and np.array_equal(got, want)


def test_qlinear_concat_matches_onnxruntime(tmp_path):
    """onnxruntime's QLinearConcat: each input dequantised with its own scale and zero point, joined, requantised."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
             numpy_helper.from_array(np.array(100, np.uint8), "yz")]
    names = ["ys", "yz"]
    inputs = []
    for k, (scale, zp) in enumerate([(0.02, 120), (0.07, 90)]):
        inits += [numpy_helper.from_array(np.array(scale, np.float32), f"s{k}"),
                  numpy_helper.from_array(np.array(zp, np.uint8), f"z{k}")]
        names += [f"x{k}", f"s{k}", f"z{k}"]
        inputs.append(helper.make_tensor_value_info(f"x{k}", TensorProto.UINT8, [2, 3 + k]))
    node = helper.make_node("QLinearConcat", names, ["y"], domain="com.microsoft", axis=-1)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / "qlconcat.onnx"
    onnx.save(model, str(path))
    feeds = {"x0": rng.integers(0, 256, (2, 3)).astype(np.uint8), "x1": rng.integers(0, 256, (2, 4)).astype(np.uint8)}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for backend in ("interpret", "cpu"):
        got = InferenceSession(path, backend=backend).run(None, feeds)[0]
        assert got.dtype == np.uint8 and got.shape == (2, 7)
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1, backend


@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (11, 1)])
def test_qlinear_softmax_matches_onnxruntime(tmp_path, opset, axis):
    """onnxruntime's QLinearSoftmax (its QOperator quantizer writes it for a model's final Softmax): Softmax as
    the opset in its ``opset`` attribute defines it (before 13 over the dims from ``axis`` on, flattened), between
    a dequantised input and a requantised output."""
    ort = pytest.importorskip("onnxruntime")
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(np.array(1 / 256, np.float32), "ys"),
             numpy_helper.from_array(np.array(0, np.uint8), "yz")]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=axis, opset=opset)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    path = tmp_path / "qlsoftmax.onnx"
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    feeds = {"x": np.random.default_rng(opset + axis).integers(0, 256, (2, 3, 5)).astype(np.uint8)}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = InferenceSession(path, backend="cpu").run(None, feeds)[0]
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    rows = got.astype(np.float64).reshape(2, -1).sum(1) if opset < 13 and axis == 1 else None
    assert rows is None or np.allclose(rows / 256, 1, atol=0.05)  # each flattened row sums to one


@pytest.mark.parametrize("cin,group,wmax,float_path", [(16, 1, 127, True), (8, 8, 127, True),
                                                       (600, 1, 127, False), (600, 1, 10, True)])
def test_integer_convs_accumulate_in_float32_where_it_is_exact(tmp_path, cin, group, wmax, float_path):
    """A QLinearConv or ConvInteger whose products and partial sums are integers below 2^24 whatever the input
    (|w - zp| summed per output channel, times the input type's largest |x - zp|, plus |bias|) runs on the float
    kernels (the stencils and GEMMs), exactly; past that bound (600 channels of weights up to 127: 19M) in int32.
    Both against the spec's formula in numpy, bit for bit."""
    from luminal.ir import DType
    from luminal.ir.graph import Op

    rng = np.random.default_rng(cin + wmax)
    cout, hw = 8 if group == 1 else cin, 9
    w = rng.integers(-wmax, wmax + 1, (cout, cin // group, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    values = {"xs": np.array(0.02, np.float32), "xz": np.array(7, np.uint8), "w": w, "ws": np.array(0.01, np.float32),
              "wz": np.array(3, np.int8), "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8), "b": bias}
    inits = [numpy_helper.from_array(v, k) for k, v in values.items()]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1] * 4,
                              group=group),
             helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["acc"], pads=[1] * 4, group=group)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, cin, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
                               helper.make_tensor_value_info("acc", TensorProto.INT32, None)], inits)
    path = tmp_path / "qconv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    x = rng.integers(0, 256, (1, cin, hw, hw)).astype(np.uint8)
    xp = np.pad(x.astype(np.int64) - 7, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=0)
    wc, per = w.astype(np.int64) - 3, cin // group
    acc = np.zeros((1, cout, hw, hw), np.int64)
    for o in range(cout):
        g = o // (cout // group)
        for dy in range(3):
            for dx in range(3):
                window = xp[0, g * per:(g + 1) * per, dy:dy + hw, dx:dx + hw]
                acc[0, o] += np.einsum("chw,c->hw", window, wc[o, :, dy, dx])
    want_y = np.clip(np.rint((acc + bias[None, :, None, None]).astype(np.float32) * np.float32(0.02 * 0.01 / 0.5)
                             + 128), 0, 255).astype(np.uint8)
    sess = InferenceSession(path, backend="cpu")
    got_y, got_acc = sess.run(None, {"x": x})
    assert np.array_equal(got_acc, acc.astype(np.int32)) and got_acc.dtype == np.int32
    assert np.array_equal(got_y, want_y)
    sums = {o.dtype for k in sess.model.launched for o in k.ops if o.op is Op.SumReduce}
    assert sums == {DType.float32 if float_path else DType.int32}
