"""Elementwise ONNX ops through load + the reference executor, against onnxruntime."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest
from frontend_util import assert_matches, make_model, run_ort, run_ours
from onnx import TensorProto, helper

RNG = np.random.default_rng(0)


def f32(*shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def node(op, n_in=1, **attrs):
    return helper.make_node(op, [f"x{k}" for k in range(n_in)], ["y"], **attrs)


UNARY = {
    "Abs": f32(3, 4), "Neg": f32(3, 4), "Exp": f32(3, 4), "Log": f32(3, 4, lo=0.01, hi=50),
    "Sqrt": f32(3, 4, lo=0, hi=50), "Reciprocal": f32(3, 4, lo=0.2, hi=4), "Sin": f32(3, 4, lo=-8, hi=8),
    "Cos": f32(3, 4, lo=-8, hi=8), "Tan": f32(3, 4, lo=-1.4, hi=1.4), "Asin": f32(3, 4, lo=-1, hi=1),
    "Acos": f32(3, 4, lo=-1, hi=1), "Atan": f32(3, 4, lo=-10, hi=10), "Sinh": f32(3, 4),
    "Cosh": f32(3, 4), "Asinh": f32(3, 4, lo=-10, hi=10), "Acosh": f32(3, 4, lo=1, hi=10),
    "Atanh": f32(3, 4, lo=-0.95, hi=0.95), "Tanh": f32(3, 4, lo=-6, hi=6), "Erf": f32(3, 4),
    "Sigmoid": f32(3, 4, lo=-10, hi=10), "Relu": f32(3, 4),
    "Sign": np.array([-2, 0, 3.5, -0.0, np.nan, -np.inf], np.float32),
    "Floor": f32(3, 4), "Ceil": f32(3, 4), "Round": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 2.6], np.float32),
    "Softplus": f32(3, 4, lo=-30, hi=30), "Softsign": f32(3, 4), "Elu": f32(3, 4), "Selu": f32(3, 4),
    "Celu": f32(3, 4), "LeakyRelu": f32(3, 4), "ThresholdedRelu": f32(3, 4), "HardSigmoid": f32(3, 4),
    "HardSwish": f32(3, 4, lo=-5, hi=5), "Identity": f32(3, 4), "Shrink": f32(3, 4),
    "IsNaN": np.array([1.0, np.nan, np.inf, -np.inf, 0], np.float32),
    "IsInf": np.array([1.0, np.nan, np.inf, -np.inf, 0], np.float32),
    "Not": np.array([True, False, True]),
}


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary(op_type):
    x = UNARY[op_type]
    opset = 20 if op_type == "IsNaN" else 17
    assert_matches(make_model(node(op_type), {"x0": x}, opset=opset), {"x0": x}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("op_type,attrs", [
    ("Elu", {"alpha": 0.5}), ("Selu", {"alpha": 2.0, "gamma": 3.0}), ("Celu", {"alpha": 2.0}),
    ("LeakyRelu", {"alpha": 0.2}), ("ThresholdedRelu", {"alpha": 0.5}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("IsInf", {"detect_negative": 0}), ("IsInf", {"detect_positive": 0}), ("Shrink", {"lambd": 1.0, "bias": 0.5}),
])
def test_unary_attrs(op_type, attrs):
    x = np.array([1.0, np.inf, -np.inf, 0, -2, 0.3, -0.7], np.float32)
    if op_type != "IsInf":
        x = x[np.isfinite(x)]
    assert_matches(make_model(node(op_type, **attrs), {"x0": x}), {"x0": x})


@pytest.mark.parametrize("op_type", ["Abs", "Neg", "Sign", "Relu"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_unary_int(op_type, dtype):
    x = np.array([[-5, 0, 7], [3, -1, 2]], dtype)
    m = make_model(node(op_type), {"x0": x}, opset=17)
    if op_type == "Relu" and dtype == np.int64:  # onnxruntime has no int64 Relu kernel
        (y,) = run_ours(m, {"x0": x})
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        return
    assert_matches(m, {"x0": x})


BINARY_F = ["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("op_type", BINARY_F)
def test_binary_float_broadcast(op_type):
    a, b = f32(2, 3, 4, lo=0.1, hi=3), f32(3, 1, lo=0.1, hi=3)
    b[0, 0] = a[0, 0, 0]
    assert_matches(make_model(node(op_type, 2), {"x0": a, "x1": b}), {"x0": a, "x1": b}, rtol=1e-5)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Max", "Min"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_binary_int(op_type, dtype):
    a = np.array([[7, -7, 9, 0, -12, 100]], dtype)
    b = np.array([[2], [-3], [5]], dtype)
    assert_matches(make_model(node(op_type, 2), {"x0": a, "x1": b}), {"x0": a, "x1": b})


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type):
    a = np.array([[True, False, True, False]])
    b = np.array([[True], [False]])
    assert_matches(make_model(node(op_type, 2), {"x0": a, "x1": b}), {"x0": a, "x1": b})


@pytest.mark.parametrize("op_type", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_compare_nan(op_type):
    a = np.array([1.0, np.nan, 2.0, np.inf, np.nan, 1.0], np.float32)
    b = np.array([1.0, np.nan, 3.0, np.inf, 0.0, np.nan], np.float32)
    assert_matches(make_model(node(op_type, 2), {"x0": a, "x1": b}, opset=16), {"x0": a, "x1": b})


def test_equal_bool():
    p, q = np.array([True, False, True]), np.array([True, True, False])
    assert_matches(make_model(node("Equal", 2), {"x0": p, "x1": q}, opset=19), {"x0": p, "x1": q})


@pytest.mark.parametrize("fmod,dtype", [(0, np.int32), (0, np.int64), (1, np.int32), (1, np.int64), (1, np.float32)])
def test_mod(fmod, dtype):
    a = np.array([-7, 7, -7, 7, 5, -5, 0, 13], dtype)
    b = np.array([3, -3, -3, 3, 5, 2, 4, -4], dtype)
    if dtype == np.float32:
        a, b = a * 1.5, b * 0.7
    assert_matches(make_model(node("Mod", 2, fmod=fmod), {"x0": a, "x1": b}), {"x0": a, "x1": b}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("base,exp", [
    (np.array([1.5, 2, 3, 0.5], np.float32), np.array([2, 0.5, -1, 3.3], np.float32)),
    (np.array([-2, -3, 2, 4], np.float32), np.array([2, 3, -2, 0.5], np.float32)),
    (np.array([2, 3, 4], np.int64), np.array([3, 2, 0], np.int64)),
    (np.array([1.5, -2, 3], np.float32), np.array([2, 3, 1], np.int64)),
    (np.array([2, 3, 5], np.int32), np.array([2.0, 3.0, 1.0], np.float32)),
    # x^0 and 1^y are 1 whatever the other, zero, infinite or NaN (log2 and exp2 alone give 0 * inf)
    (np.array([0, np.inf, 1, 1, np.nan, 0, 0, -np.inf], np.float32),
     np.array([0, 0, np.inf, np.nan, 0, 3, -1, 2], np.float32)),
    (np.array([0, 0, 5, -3, 1], np.int32), np.array([0, 2, 0, 3, 7], np.int32)),
])
def test_pow(base, exp):
    assert_matches(make_model(node("Pow", 2), {"x0": base, "x1": exp}, opset=15), {"x0": base, "x1": exp}, rtol=1e-5)


@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("n", [1, 3])
def test_variadic(op_type, n):
    feeds = {f"x{k}": f32(*([2, 3] if k % 2 else [3])) for k in range(n)}
    assert_matches(make_model(node(op_type, n), feeds), feeds)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_clip(opset):
    x = f32(4, 5)
    m = make_model(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x},
                   {"lo": np.float32(-1.0), "hi": np.float32(0.5)}, opset=opset)
    assert_matches(m, {"x": x})
    m = make_model(helper.make_node("Clip", ["x", "", "hi"], ["y"]), {"x": x}, {"hi": np.float32(0.5)}, opset=opset)
    assert_matches(m, {"x": x})
    m = make_model(helper.make_node("Clip", ["x"], ["y"]), {"x": x}, opset=opset)
    assert_matches(m, {"x": x})


def test_clip_int_and_old_opset():
    x = np.array([-5, 0, 3, 9], np.int64)
    m = make_model(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x},
                   {"lo": np.int64(-2), "hi": np.int64(4)}, opset=13)
    assert_matches(m, {"x": x})
    xf = f32(3, 3)
    m = make_model(helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25), {"x": xf}, opset=6)
    assert_matches(m, {"x": xf})


def test_prelu_broadcast():
    x, slope = f32(2, 3, 4), f32(3, 1)
    assert_matches(make_model(node("PRelu", 2), {"x0": x, "x1": slope}), {"x0": x, "x1": slope})


def test_where():
    c = RNG.uniform(size=(3, 1)) > 0.5
    a, b = f32(1, 4), f32(3, 4)
    assert_matches(make_model(node("Where", 3), {"x0": c, "x1": a, "x2": b}), {"x0": c, "x1": a, "x2": b})


@pytest.mark.parametrize("src,to", [
    (np.float32, TensorProto.INT64), (np.float32, TensorProto.INT32), (np.float32, TensorProto.BOOL),
    (np.float32, TensorProto.FLOAT16), (np.int64, TensorProto.FLOAT), (np.bool_, TensorProto.FLOAT),
    (np.int32, TensorProto.INT64), (np.float16, TensorProto.FLOAT), (np.float32, TensorProto.DOUBLE),
])
def test_cast(src, to):
    x = (np.array([[-2.7, -0.5, 0, 0.5, 3.9, 100.25]]) if src != np.bool_ else np.array([[True, False]])).astype(src)
    m = make_model(helper.make_node("Cast", ["x"], ["y"], to=to), {"x": x})
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("src, values", [
    (np.int32, [5749, -300, 127, 128, 255, 256, -129, 70000, -40000, 2**31 - 1, -2**31]),
    (np.int64, [300, -129, 2**40 + 7, -(2**33) - 1, 2**63 - 1]),
    (np.uint32, [2717508541, 70000, 2**32 - 1]),
    (np.float32, [100.5, 127.9, -128.5, 200.0, -3.7, 65537.0, -70000.2]),
])
@pytest.mark.parametrize("to", [TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
                                TensorProto.UINT32])
@pytest.mark.parametrize("like", [False, True])
def test_a_cast_to_a_narrower_integer_wraps(src, values, to, like):
    """Cast (and CastLike) to an integer type the IR computes wider takes the value modulo the type's range, as
    onnxruntime does: an int32 300 cast to int8 is 44, a float 200.0 -56. The narrow values pass through an Add and
    a Cast to int64, where a value left unwrapped shows."""
    x = np.array(values).astype(src)
    if src == np.float32:
        x = x[np.abs(np.trunc(x)) < 2**31]  # onnxruntime's float to narrow int goes through int32
    target = np.zeros(1, helper.tensor_dtype_to_np_dtype(to))
    cast = helper.make_node("CastLike", ["x", "t"], ["c"]) if like else helper.make_node("Cast", ["x"], ["c"], to=to)
    nodes = [cast, helper.make_node("Cast", ["c"], ["w"], to=TensorProto.INT64),
             helper.make_node("Add", ["w", "w"], ["y"])]
    feeds = {"x": x, "t": target} if like else {"x": x}
    m = make_model(nodes, feeds, opset=15)
    want = run_ort(m, feeds)[0]
    np.testing.assert_array_equal(run_ours(m, feeds)[0], want)
    assert target.dtype == src or (want != x.astype(np.int64) * 2).any()  # some value wrapped


def test_castlike():
    x, like = f32(2, 3), np.array([1], np.int32)
    m = make_model(helper.make_node("CastLike", ["x", "like"], ["y"]), {"x": x, "like": like}, opset=15)
    assert_matches(m, {"x": x, "like": like})


def test_half_precision_chain():
    x = f32(4, 4).astype(np.float16)
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Add", ["e", "x"], ["y"])]
    assert_matches(make_model(nodes, {"x": x}), {"x": x}, rtol=2e-3, atol=2e-3)


def test_integer_shape_arithmetic_is_exact_beyond_float32():
    big = np.array([2 ** 40 + 7, -(2 ** 35) - 3, 9], np.int64)
    d = np.array([3, 7, -2], np.int64)
    nodes = [helper.make_node("Div", ["a", "d"], ["q"]), helper.make_node("Pow", ["d", "two"], ["p"]),
             helper.make_node("Add", ["q", "x"], ["y"])]
    x = np.zeros(3, np.int64)
    m = make_model(nodes, {"x": x}, {"a": big, "d": d, "two": np.array(2, np.int64)}, outputs=["y", "p"])
    y, p = run_ours(m, {"x": x})
    np.testing.assert_array_equal(y, [(2 ** 40 + 7) // 3, -((2 ** 35 + 3) // 7), -4])
    np.testing.assert_array_equal(p, [9, 49, 4])
    assert_matches(m, {"x": x})


def test_cast_opset1_named_type():
    from luminal.frontend_onnx import load

    x = f32(2, 2)
    m = make_model(helper.make_node("Cast", ["x"], ["y"], to="INT32"), {"x": x}, opset=5)
    r = load(m)
    assert r.outputs[0].dtype.value == "int32"
    (y,) = run_ours(m, {"x": x})
    np.testing.assert_array_equal(y, x.astype(np.int32))


def test_swish():
    from luminal.frontend_onnx import load

    x = f32(3, 4)
    m = make_model(helper.make_node("Swish", ["x"], ["y"], alpha=1.5), {"x": x}, opset=24)
    assert load(m).outputs[0].shape == (3, 4)
    (y,) = run_ours(m, {"x": x})  # this onnxruntime predates Swish
    np.testing.assert_allclose(y, x / (1 + np.exp(-1.5 * x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize(qtype, per_axis):
    x = f32(2, 3, 4) * 4
    scale = np.array([0.05, 0.02, 0.1], np.float32) if per_axis else np.float32(0.03)
    zp = np.array([3, 0, 7], qtype) if per_axis else np.array(5, qtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    m = make_model(nodes, {"x": x}, {"s": scale, "z": zp}, outputs=["q", "y"], opset=19)
    assert_matches(m, {"x": x})


def test_quantize_default_uint8_and_blocked_dequantize():
    x = f32(2, 6) * 10
    m = make_model(helper.make_node("QuantizeLinear", ["x", "s"], ["q"]), {"x": x}, {"s": np.float32(0.1)}, opset=19)
    assert_matches(m, {"x": x})
    w = np.arange(-6, 6, dtype=np.int8).reshape(2, 6)
    s = np.array([[0.5, 2.0, 1.0], [0.25, 1.0, 4.0]], np.float32)
    node = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], axis=1, block_size=2)
    m = make_model([node, helper.make_node("Add", ["y", "x"], ["z"])], {"x": x}, {"w": w, "s": s}, outputs=["z"],
                   opset=21)
    (z,) = run_ours(m, {"x": x})
    np.testing.assert_allclose(z, w.astype(np.float32) * np.repeat(s, 2, axis=1) + x, rtol=1e-6)
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (2, 3, 4, 5)])
def test_prelu_per_channel_slope(shape):
    # a 1-D slope with one value per channel (PRelu-6, PyTorch's PReLU) applies along axis 1
    x, slope = f32(*shape), f32(3)
    got = run_ours(make_model(node("PRelu", 2), {"x0": x}, {"x1": slope}, opset=6), {"x0": x})[0]
    s = slope.reshape((3,) + (1,) * (len(shape) - 2))
    np.testing.assert_allclose(got, np.where(x < 0, x * s, x), rtol=1e-6)


def test_prelu_slope_that_fits_nothing_is_one_line_error():
    from luminal.errors import LuminalError

    x, slope = f32(2, 3, 4), f32(5)
    with pytest.raises(LuminalError, match="neither broadcasts") as e:
        run_ours(make_model(node("PRelu", 2), {"x0": x}, {"x1": slope}, opset=6), {"x0": x})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu_is_swish_of_the_gate_times_the_value(alpha):
    attrs = {} if alpha is None else dict(alpha=alpha)
    h.check_against_onnx_reference("SwiGLU", [h.rand(3, 8), h.rand(3, 8, seed=1)], attrs, opset=28)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise_ops_bit_by_bit_down_to_the_sign_bit(op, dtype):
    info = np.iinfo(dtype)
    a = np.random.default_rng(1).integers(info.min, info.max, (3, 5), dtype=dtype, endpoint=True)
    b = np.random.default_rng(2).integers(info.min, info.max, (5,), dtype=dtype, endpoint=True)  # broadcast
    a.flat[:3] = info.min, info.max, 0
    b[:2] = info.max, info.min
    feeds = {"a": a} if op == "BitwiseNot" else {"a": a, "b": b}
    assert_matches(make_model(helper.make_node(op, list(feeds), ["y"]), feeds, opset=18), feeds)


def test_bitwise_ops_on_the_c_backend():
    from luminal.frontend_onnx import load
    from luminal.runtime.compile import compile_graph

    a = np.array([[-(2 ** 63), 2 ** 63 - 1, -1, 0, 12345678901234]], dtype=np.int64)
    b = np.array([[-1, 2 ** 40 + 5, -(2 ** 62), 7, -987654321]], dtype=np.int64)
    model = make_model(helper.make_node("BitwiseXor", ["a", "b"], ["y"]), {"a": a, "b": b}, opset=18)
    (got,) = compile_graph(load(model).graph, "cpu").run({"a": a, "b": b})
    np.testing.assert_array_equal(got, a ^ b)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_wraps_and_fills_past_the_width(direction, dtype):
    info = np.iinfo(dtype)
    width = info.bits
    x = np.random.default_rng(3).integers(info.min, info.max, (2, 6), dtype=dtype, endpoint=True)
    x.flat[:4] = info.min, info.max, 0, 1
    shifts = [0, 1, width - 2, width - 1, width, width + 3] + ([-1, -width] if info.min < 0 else [])
    s = np.array(shifts[: x.shape[1]] + [0] * (x.shape[1] - len(shifts[: x.shape[1]])), dtype)
    s2 = np.array(shifts[x.shape[1]:] + [1] * (x.shape[1] - len(shifts[x.shape[1]:])), dtype)
    feeds = {"x": x, "s": np.stack([s, s2])}
    model = make_model(helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction), feeds, opset=28)
    assert_matches(model, feeds)


def test_bit_shift_on_the_c_backend():
    from luminal.frontend_onnx import load
    from luminal.runtime.compile import compile_graph

    x = np.array([[-(2 ** 63), 2 ** 63 - 1, -12345678901234, 987654321987, 5, -1]], dtype=np.int64)
    s = np.array([[1, 62, 7, 33, 64, -3]], dtype=np.int64)
    for direction in ("LEFT", "RIGHT"):
        model = make_model(helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction), {"x": x, "s": s},
                           opset=28)
        (got,) = compile_graph(load(model).graph, "cpu").run({"x": x, "s": s})
        np.testing.assert_array_equal(got, run_ort(model, {"x": x, "s": s})[0])


@pytest.mark.parametrize(("src", "dst"), [(np.int8, np.uint8), (np.uint8, np.int8), (np.int16, np.uint16),
                                          (np.uint16, np.int16), (np.int32, np.uint32), (np.uint32, np.int32),
                                          (np.int64, np.uint64), (np.uint64, np.int64)])
def test_bit_cast_between_integers_of_one_width(src, dst):
    info = np.iinfo(src)
    x = np.random.default_rng(4).integers(info.min, info.max, (2, 5), dtype=src, endpoint=True)
    x.flat[:3] = info.min, info.max, 0
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    # the Add after it sees the reinterpreted values, not only the declared output
    nodes = [helper.make_node("BitCast", ["x"], ["b"], to=to), helper.make_node("Add", ["b", "b"], ["y"])]
    assert_matches(make_model(nodes, {"x": x}, outputs=["b", "y"], opset=26), {"x": x})


# zeros of both signs, infinities, NaN, the smallest normal and subnormal, the largest finite, powers of two
_FLOATS = np.array([1, 2, 3, 0.1, -0.0, 0.0, np.inf, -np.inf, np.nan, 2 ** -126, 1e-40, -1.4e-45, 3.4028235e38,
                    2.0 ** 127, -7.25, 1e-30, 65504], np.float32)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bit_cast_between_float32_and_int32_is_exact(backend):
    from luminal.frontend_onnx import load
    from luminal.ir import run_reference
    from luminal.runtime.compile import compile_graph

    def run(x: np.ndarray, to: int) -> np.ndarray:
        model = make_model(helper.make_node("BitCast", ["x"], ["y"], to=to), {"x": x}, opset=26)
        graph = load(model).graph
        outs = run_reference(graph, {"x": x}) if backend == "reference" else compile_graph(graph, "cpu").run({"x": x})
        return outs[0]

    bits = _FLOATS.view(np.int32)
    np.testing.assert_array_equal(run(_FLOATS, TensorProto.INT32), bits)
    np.testing.assert_array_equal(run(bits, TensorProto.FLOAT).view(np.int32), bits)
    np.testing.assert_array_equal(run(_FLOATS, TensorProto.UINT32), _FLOATS.view(np.uint32))


def test_bit_cast_of_doubles_is_refused_in_one_line():
    from luminal.errors import LuminalError

    x = np.ones((2,), np.float64)
    with pytest.raises(LuminalError, match=r"float64 to int64: only between integer types of one width"):
        run_ours(make_model(helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT64), {"x": x}, opset=26),
                 {"x": x})
