"""Shape and movement ONNX ops against onnxruntime, over the opsets where they changed."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, run_ours
from onnx import TensorProto, helper, numpy_helper

from luminal.errors import LuminalError
from luminal.frontend_onnx import load

RNG = np.random.default_rng(1)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
I64 = np.int64


@pytest.mark.parametrize("shape,allowzero,opset", [
    ([6, 20], 0, 13), ([-1, 5], 0, 13), ([0, 0, -1], 0, 13), ([2, -1, 1, 5], 0, 11), ([120], 0, 14),
    ([2, 3, 20], 1, 14), ([5, 4, 3, 2], 0, 19),
])
def test_reshape(shape, allowzero, opset):
    attrs = {"allowzero": allowzero} if opset >= 14 else {}
    m = make_model(helper.make_node("Reshape", ["x", "s"], ["y"], **attrs), {"x": X}, {"s": np.array(shape, I64)},
                   opset=opset)
    assert_matches(m, {"x": X})


def test_reshape_allowzero_empty():
    x = np.zeros((0, 3, 4), np.float32)
    m = make_model(helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1), {"x": x},
                   {"s": np.array([3, 4, 0], I64)}, opset=14)
    assert_matches(m, {"x": x})


def test_reshape_of_transposed_view():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "s"], ["y"])]
    assert_matches(make_model(nodes, {"x": X}, {"s": np.array([8, 15], I64)}), {"x": X})


@pytest.mark.parametrize("perm", [None, [0, 2, 1, 3], [3, 0, 2, 1]])
def test_transpose(perm):
    attrs = {"perm": perm} if perm else {}
    assert_matches(make_model(helper.make_node("Transpose", ["x"], ["y"], **attrs), {"x": X}), {"x": X})


@pytest.mark.parametrize("axis", [0, 1, 3, 4, -1, -4])
def test_flatten(axis):
    assert_matches(make_model(helper.make_node("Flatten", ["x"], ["y"], axis=axis), {"x": X}), {"x": X})


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_squeeze_unsqueeze(opset):
    x = RNG.standard_normal((1, 3, 1, 4)).astype(np.float32)
    if opset < 13:
        sq = helper.make_node("Squeeze", ["x"], ["s"], axes=[0, -2])
        un = helper.make_node("Unsqueeze", ["s"], ["y"], axes=[-1, 1])
        inits = {}
    else:
        sq = helper.make_node("Squeeze", ["x", "a"], ["s"])
        un = helper.make_node("Unsqueeze", ["s", "b"], ["y"])
        inits = {"a": np.array([0, -2], I64), "b": np.array([-1, 1], I64)}
    assert_matches(make_model([sq, un], {"x": x}, inits, opset=opset), {"x": x})
    assert_matches(make_model(helper.make_node("Squeeze", ["x"], ["y"]), {"x": x}, opset=opset), {"x": x})


@pytest.mark.parametrize("shape", [[3, 1, 5], [2, 1, 1, 5], [1], [4, 2, 3, 1, 5]])
def test_expand(shape):
    x = RNG.standard_normal((3, 1, 5)).astype(np.float32)
    m = make_model(helper.make_node("Expand", ["x", "s"], ["y"]), {"x": x}, {"s": np.array(shape, I64)})
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1, 3])
def test_concat(axis):
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    shape_b = list(a.shape)
    shape_b[axis] = 2
    b = RNG.standard_normal(shape_b).astype(np.float32)
    c = np.zeros([*shape_b[:axis % 4], 0, *shape_b[axis % 4 + 1:]], np.float32)
    m = make_model(helper.make_node("Concat", ["a", "b", "c", "a"], ["y"], axis=axis), {"a": a, "b": b, "c": c})
    assert_matches(m, {"a": a, "b": b, "c": c})


def test_concat_int_bool_and_all_empty():
    for a, b in [(np.array([[1, 2]], I64), np.array([[3, 4], [5, 6]], I64)),
                 (np.array([True, False]), np.array([False, True, True]))]:
        m = make_model(helper.make_node("Concat", ["a", "b"], ["y"], axis=0), {"a": a, "b": b})
        assert_matches(m, {"a": a, "b": b})
    e = np.zeros((0, 3), np.float32)
    m = make_model(helper.make_node("Concat", ["e", "e"], ["y"], axis=0), {"e": e})
    assert_matches(m, {"e": e})


def test_concat_is_view_level():
    a, b = X[:, :1], X[:, 1:]
    m = make_model(helper.make_node("Concat", ["a", "b"], ["y"], axis=1), {"a": a, "b": b})
    r = load(m)
    assert set(r.graph.primitive_counts()) <= {"Input", "Add", "Contiguous"}
    assert r.graph.primitive_counts()["Add"] == 1


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([0], [2], [1], [1]), ([1, -3], [1000, -1], [0, 2], None), ([-1], [-2 ** 63], [3], [-1]),
    ([4], [0], [3], [-2]), ([0, 0], [2 ** 63 - 1, 3], [-1, 1], [2, 2]), ([10], [20], [2], [1]),
    ([3], [1], [3], [1]), ([0, 1, 0, 0], [2, 3, 4, 5], None, [1, 1, 3, 2]), ([-100], [100], [0], [-1]),
    ([2], [2 ** 63 - 1], [3], [-1]), ([-1], [2 ** 31 - 1], [2], [-2]), ([-2], [-2 ** 63], [1], [-1]),
])
@pytest.mark.parametrize("opset", [10, 13])
def test_slice(starts, ends, axes, steps, opset):
    names, inits = ["x", "st", "en"], {"st": np.array(starts, I64), "en": np.array(ends, I64)}
    if axes is not None or steps is not None:
        names.append("ax")
        inits["ax"] = np.array(axes if axes is not None else list(range(len(starts))), I64)
    if steps is not None:
        names.append("sp")
        inits["sp"] = np.array(steps, I64)
    m = make_model(helper.make_node("Slice", names, ["y"]), {"x": X}, inits, opset=opset)
    assert_matches(m, {"x": X})


def test_slice_opset1_attrs():
    m = make_model(helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[1, 3]), {"x": X}, opset=9)
    assert_matches(m, {"x": X})


@pytest.mark.parametrize("case", ["attr11", "input13", "equal13", "num_outputs18", "uneven18", "zero13"])
def test_split(case):
    x = RNG.standard_normal((7, 6)).astype(np.float32)
    inits, attrs, outs, opset, names = {}, {"axis": 0}, ["a", "b", "c"], 13, ["x"]
    if case == "attr11":
        attrs["split"], opset = [2, 4, 1], 11
    elif case == "input13":
        inits["sp"], names = np.array([1, 1, 5], I64), ["x", "sp"]
    elif case == "equal13":
        attrs["axis"] = 1
    elif case == "num_outputs18":
        attrs.update(num_outputs=3, axis=-1)
        opset = 18
    elif case == "uneven18":
        attrs["num_outputs"], opset = 3, 18
    elif case == "zero13":
        inits["sp"], names = np.array([3, 0, 4], I64), ["x", "sp"]
    m = make_model(helper.make_node("Split", names, outs, **attrs), {"x": x}, inits, outputs=outs, opset=opset)
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("start,end,opset", [(None, None, 13), (1, None, 15), (-2, None, 15), (1, -1, 19), (-9, 9, 21)])
def test_shape(start, end, opset):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [helper.make_node("Shape", ["x"], ["y"], **attrs)]
    assert_matches(make_model(nodes, {"x": X}, opset=opset), {"x": X})


def test_size_and_shape_arithmetic():
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
             helper.make_node("Add", ["n", "p"], ["y"])]
    m = make_model(nodes, {"x": X}, outputs=["y", "n"])
    r = load(m)
    assert r.graph.primitive_counts() == {"Constant": 2, "Input": 1}
    assert r.outputs[0].shape == () and r.outputs[1].shape == ()
    assert_matches(m, {"x": X})


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], I64), np.array([True])])
@pytest.mark.parametrize("shape", [[2, 3], [0, 4], []])
def test_constant_of_shape(value, shape):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], **attrs), helper.make_node("Identity", ["c"], ["y"])]
    m = make_model(nodes, {}, {"s": np.array(shape, I64)})
    assert_matches(m, {})


@pytest.mark.parametrize("attr,value", [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))),
    ("value", numpy_helper.from_array(np.array(3, I64))), ("value_float", 1.5), ("value_floats", [1.0, 2.0]),
    ("value_int", 4), ("value_ints", [1, 2, 3]),
    ("sparse_value", helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32)),
                                               numpy_helper.from_array(np.array([1, 4], I64)), [2, 3])),
])
def test_constant(attr, value):
    m = make_model(helper.make_node("Constant", [], ["y"], **{attr: value}), {})
    if attr == "sparse_value":  # onnxruntime's sparse constants need a sparse-aware build; check by hand
        (y,) = run_ours(m, {})
        np.testing.assert_array_equal(y, np.array([[0, 5, 0], [0, 6, 0]], np.float32))
        return
    assert_matches(m, {})


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, I64), (10, 0, -3, np.int32), (1.0, 2.0, 0.25, np.float32), (5, 5, 1, I64), (0.5, -1.0, -0.3, np.float32),
])
def test_range(start, limit, delta, dtype):
    inits = {"a": np.array(start, dtype), "b": np.array(limit, dtype), "c": np.array(delta, dtype)}
    m = make_model(helper.make_node("Range", ["a", "b", "c"], ["y"]), {}, inits, opset=11)
    assert_matches(m, {})


def test_range_needs_constants():
    x = np.array(3, I64)
    m = make_model(helper.make_node("Range", ["z", "x", "one"], ["y"]), {"x": x}, {"z": np.array(0, I64),
                                                                                   "one": np.array(1, I64)})
    with pytest.raises(LuminalError, match=r"Range.*must be constant"):
        load(m)


def test_shape_ops_on_empty_tensor():
    x = np.zeros((2, 0, 3), np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 1, 0]),
             helper.make_node("Reshape", ["t", "s"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax"], ["u"]),
             helper.make_node("Shape", ["u"], ["y"])]
    m = make_model(nodes, {"x": x}, {"s": np.array([3, -1, 2], I64), "ax": np.array([0], I64)}, outputs=["u", "y"])
    assert_matches(m, {"x": x})


def test_cast_of_shape_folds_to_constant():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["f", "i"], ["g"], axis=0), helper.make_node("Mul", ["x", "g"], ["y"])]
    m = make_model(nodes, {"x": X}, {"i": np.array(3, I64)})
    assert_matches(m, {"x": X})


@pytest.mark.parametrize("k,dtype", [(0, None), (1, TensorProto.INT64), (-2, TensorProto.FLOAT)])
def test_eye_like(k, dtype):
    x = np.zeros((4, 5), np.float32)
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    assert_matches(make_model(helper.make_node("EyeLike", ["x"], ["y"], **attrs), {"x": x}), {"x": x})


def test_nonzero_of_constant():
    c = np.array([[0, 2, 0], [1, 0, 3]], np.int64)
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]), helper.make_node("Shape", ["nz"], ["s"]),
             helper.make_node("Add", ["nz", "x"], ["y"])]
    x = np.array([[10]], I64)
    m = make_model(nodes, {"x": x}, {"c": c}, outputs=["y", "s"])
    assert_matches(m, {"x": x})


def test_nonzero_of_runtime_data_is_refused():
    x = np.array([1.0, 0.0], np.float32)
    with pytest.raises(LuminalError, match=r"NonZero.*must be constant"):
        load(make_model(helper.make_node("NonZero", ["x"], ["y"]), {"x": x}))


def test_huge_constant_output_is_not_folded_into_memory():
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["y"],
                              value=numpy_helper.from_array(np.array([1.5], np.float32)))]
    m = make_model(nodes, {}, {"s": np.array([100000, 100000], I64)})
    r = load(m, max_memory=1 << 40)  # 40 GB to run, more than most machines running the tests have
    (out,) = r.graph.outputs
    assert out.shape == (100000, 100000) and out.op.value == "Contiguous"
    assert sum(n.attrs["value"].size for n in r.graph.toposort() if n.op.value == "Constant") == 1


def test_long_range_is_computed_not_stored():
    inits = {"a": np.array(5, I64), "b": np.array(5 + 3 * (1 << 23), I64), "c": np.array(3, I64)}
    m = make_model(helper.make_node("Range", ["a", "b", "c"], ["y"]), {}, inits)
    r = load(m)
    assert r.outputs[0].shape == (1 << 23,)
    assert all(n.op.value != "Constant" or n.attrs["value"].size <= 1 for n in r.graph.toposort())
    (y,) = run_ours(m, {})
    np.testing.assert_array_equal(y[[0, 1, -1]], [5, 8, 5 + 3 * ((1 << 23) - 1)])


@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op_type, periodic):
    m = make_model(helper.make_node(op_type, ["n"], ["y"], periodic=periodic), {}, {"n": np.array(10, I64)})
    assert_matches(m, {}, rtol=1e-5, atol=1e-6)


def test_concat_of_all_equal_constants():
    # constants whose elements are all equal are broadcast scalars in the IR; the pads must still hold
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=0), helper.make_node("Add", ["c", "x"], ["y"])]
    x = np.zeros(4, I64)
    m = make_model(nodes, {"x": x}, {"a": np.array([1, 1], I64), "b": np.array([2, 2], I64)})
    assert_matches(m, {"x": x})


def test_concat_of_all_equal_constants_and_runtime_input():
    a, b = np.full((1, 3), 1.5, np.float32), np.full((2, 3), -2.0, np.float32)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    m = make_model(helper.make_node("Concat", ["a", "b", "x"], ["y"], axis=0), {"x": x}, {"a": a, "b": b})
    assert_matches(m, {"x": x})
