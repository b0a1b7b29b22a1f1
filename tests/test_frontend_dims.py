"""Binding input dims as real exporters declare them: placeholder names, shared names, whole shapes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from frontend_util import run_ort
from onnx import TensorProto, helper, numpy_helper

from luminal import ir
from luminal.errors import LuminalError
from luminal.frontend_onnx import load
from luminal.frontend_onnx.dims import InputDecl, bind, is_placeholder

RNG = np.random.default_rng(20)


def model(dims_x: list, dims_z: list | None = None) -> onnx.ModelProto:
    """y = relu(x) * 2 (and w = y + z where z is given): inputs declared with the given dims."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims_x)]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"])]
    out = "y"
    if dims_z is not None:
        ins.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, dims_z))
        nodes.append(helper.make_node("Add", ["y", "z"], ["w"]))
        out = "w"
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(out, TensorProto.FLOAT, dims_x)],
                          [numpy_helper.from_array(np.float32(2), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def matches_ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray], shapes: dict) -> list[str]:
    r = load(m, shapes)
    assert [i.shape for i in r.inputs] == [feeds[i.name].shape for i in r.inputs]
    (got,) = ir.run_reference(r.graph, feeds)
    (want,) = run_ort(m, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    return r.warnings


# each exporter's way of writing an unknown dim; Paddle2ONNX writes -1 as a number and "?" as names
PLACEHOLDERS = ["?", "-1", "unk__123", "DynamicDimension.0", "", "None"]


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_a_placeholder_on_two_axes_does_not_tie_them(placeholder):
    m = model([-1, 3, placeholder, placeholder])
    x = RNG.standard_normal((1, 3, 48, 192)).astype(np.float32)
    assert matches_ort(m, {"x": x}, {"x": (1, 3, 48, 192)}) == []


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_placeholders_shared_by_two_inputs_do_not_tie_them(placeholder):
    # onnxruntime runs x [2, 5] + z [1, 5]: the shared placeholder is no constraint
    m = model([placeholder, 5], [placeholder, 5])
    x, z = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 5), (1, 5)))
    assert matches_ort(m, {"x": x, "z": z}, {"x": (2, 5), "z": (1, 5)}) == []


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_unbound_placeholders_default_to_one_per_axis(placeholder):
    r = load(model([placeholder, 3, placeholder]))
    assert r.inputs[0].shape == (1, 3, 1)
    assert r.unbound == ["x[0]", "x[2]"]


def test_a_shared_real_name_binds_the_inputs_without_a_whole_shape():
    m = model(["batch", "seq"], ["batch", 1])
    x, z = (RNG.standard_normal(s).astype(np.float32) for s in ((3, 7), (3, 1)))
    assert matches_ort(m, {"x": x, "z": z}, {"x": (3, 7)}) == []
    assert load(m, {"x": (3, 7)}).graph.bindings == {"batch": 3, "seq": 7}


def test_a_shared_real_name_whose_shapes_disagree_warns_where_onnxruntime_runs():
    m = model(["batch", 4], ["batch", 4])
    x, z = (RNG.standard_normal(s).astype(np.float32) for s in ((3, 4), (1, 4)))
    warnings = matches_ort(m, {"x": x, "z": z}, {"x": (3, 4), "z": (1, 4)})
    assert len(warnings) == 1 and "'batch' is 3 in input 'x' dim 0 but 1 in input 'z' dim 0" in warnings[0]


def test_two_axes_of_one_input_sharing_a_name_take_the_shape_given():
    m = model(["n", "n"])
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    warnings = matches_ort(m, {"x": x}, {"x": (2, 6)})
    assert len(warnings) == 1 and "'n' is 2 in input 'x' dim 0 but 6 in input 'x' dim 1" in warnings[0]
    assert load(m, {"n": 4}).inputs[0].shape == (4, 4)


def test_a_whole_shape_wins_over_the_name_given_and_other_inputs_take_the_name():
    m = model(["batch", 4], ["batch", 4])
    r = load(m, {"batch": 2, "x": (2, 4), "z": (1, 4)})
    assert [i.shape for i in r.inputs] == [(2, 4), (1, 4)]
    assert len(r.warnings) == 1 and "'batch' is given as 2, but the shape given for input 'z' dim 0 is 1" in \
        r.warnings[0]
    decls = [InputDecl("x", ("batch", 4)), InputDecl("z", ("batch", 4))]
    assert bind(decls, {"batch": 2, "x": (5, 4)}).shapes == {"x": (5, 4), "z": (2, 4)}


def test_a_fixed_dim_must_be_given_its_size():
    with pytest.raises(LuminalError, match="dim 1 is fixed to 3, but 4 was given"):
        load(model([-1, 3, "?", "?"]), {"x": (1, 4, 48, 192)})


def test_a_placeholder_can_still_be_bound_by_its_name():
    assert load(model(["unk__7", 4]), {"unk__7": 5}).inputs[0].shape == (5, 4)


def test_placeholder_names():
    assert all(is_placeholder(p) for p in [*PLACEHOLDERS, "unk__0", "DynamicDimension.12", " "])
    assert not any(is_placeholder(p) for p in ["batch", "s0", "seq_len", "N", "height"])


def test_binding_reports_every_unbound_dim_once():
    b = bind([InputDecl("a", ("batch", None, "?")), InputDecl("b", ("batch", 2))], {})
    assert b.shapes == {"a": (1, 1, 1), "b": (1, 2)}
    assert b.unbound == ["batch", "a[1]", "a[2]"]
