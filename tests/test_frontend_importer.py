"""The importer: reading files safely, binding shapes, listing unsupported ops, graph order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from frontend_util import assert_matches, make_model, run_ort
from onnx import TensorProto, helper, numpy_helper

from luminal import ir
from luminal.errors import LuminalError
from luminal.frontend_onnx import ImportResult, check_supported, load

RNG = np.random.default_rng(4)


def sym_model(dims_x, dims_y=None):
    """y = x + b, b an initializer; x has the given dims (ints, names or None for unknown)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims_x)
    inputs = [x]
    nodes = [helper.make_node("Add", ["x", "b"], ["y"])]
    if dims_y is not None:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, dims_y))
        nodes.append(helper.make_node("Mul", ["y", "z"], ["w"]))
    b = numpy_helper.from_array(np.float32(0.5).reshape(()), "b")
    out = "w" if dims_y is not None else "y"
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], [b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_result_fields():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    m = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])], {"x": x})
    r = load(m)
    assert isinstance(r, ImportResult)
    assert r.opset == 17
    assert r.onnx_op_counts == {"Relu": 2}
    assert [(i.name, i.dtype, i.shape) for i in r.inputs] == [("x", ir.DType.float32, (2, 3))]
    assert [(o.name, o.dtype, o.shape) for o in r.outputs] == [("y", ir.DType.float32, (2, 3))]
    assert r.unbound == []
    assert r.graph.output_names == ["y"]


def test_symbolic_dims_bound_by_name():
    m = sym_model(["batch", "seq", 4], ["batch", 1, 4])
    r = load(m, {"batch": 2, "seq": 5})
    assert r.graph.bindings == {"batch": 2, "seq": 5}
    assert [i.shape for i in r.inputs] == [(2, 5, 4), (2, 1, 4)]
    assert r.outputs[0].shape == (2, 5, 4)
    assert not r.warnings or all("unbound" not in w for w in r.warnings)
    x, z = RNG.standard_normal((2, 5, 4)).astype(np.float32), RNG.standard_normal((2, 1, 4)).astype(np.float32)
    (got,) = ir.run_reference(r.graph, {"x": x, "z": z})
    np.testing.assert_allclose(got, run_ort(m, {"x": x, "z": z})[0], rtol=1e-6)


def test_whole_shape_by_input_name_binds_its_symbols():
    m = sym_model(["batch", None, 4], ["batch", 1, 4])
    r = load(m, {"x": (3, 7, 4)})
    assert r.inputs[0].shape == (3, 7, 4) and r.inputs[1].shape == (3, 1, 4)
    assert r.graph.bindings == {"batch": 3}
    assert r.unbound == []


def test_unbound_dims_default_to_one_with_warning():
    m = sym_model(["batch", None, 4])
    r = load(m)
    assert r.inputs[0].shape == (1, 1, 4)
    assert sorted(r.unbound) == ["batch", "x[1]"]
    assert any("unbound" in w and "batch" in w and "x[1]" in w for w in r.warnings)


def test_a_failure_under_defaulted_dims_says_to_bind_them(tmp_path):
    """A model exported with a dynamic sequence often keeps the traced size in its Reshape targets."""
    target = numpy_helper.from_array(np.array([10, 4, 8], dtype=np.int64), "t")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [target])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(LuminalError, match=r"cannot reshape .* \(unbound dimensions default to 1: seq; give them "
                                           r"with --shape\)$"):
        load(str(path))
    assert load(str(path), {"seq": 10}).outputs[0].shape == (10, 4, 8)


def test_input_without_rank_needs_whole_shape():
    m = sym_model(None)
    m.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(LuminalError, match="no known rank"):
        load(m)
    assert load(m, {"x": (2, 2)}).inputs[0].shape == (2, 2)


@pytest.mark.parametrize("shapes,match", [
    ({"x": (2, 3)}, "rank 3"),
    ({"x": (2, 3, 5)}, "fixed to 4"),
    ({"nope": 3}, "'nope', which is neither an input nor a dimension name"),
    ({"batch": (2, 3)}, "one integer"),
    ({"x": (2, -1, 4)}, "non-negative"),
])
def test_wrong_shapes_are_refused(shapes, match):
    with pytest.raises(LuminalError, match=match):
        load(sym_model(["batch", "seq", 4]), shapes)


def test_a_whole_shape_wins_over_a_dim_given_by_name():
    r = load(sym_model(["batch", "seq", 4]), {"batch": 2, "x": (3, 1, 4)})
    assert r.inputs[0].shape == (3, 1, 4)
    assert any("'batch' is given as 2" in w for w in r.warnings)


def test_conflicting_symbol_between_inputs_fails_where_the_shapes_do_not_broadcast():
    with pytest.raises(LuminalError, match="Mul"):
        load(sym_model(["batch", 2, 4], ["batch", 1, 4]), {"x": (2, 2, 4), "z": (3, 1, 4)})


def test_initializer_listed_as_input_is_a_constant():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    m = make_model(helper.make_node("Add", ["x", "w"], ["y"]), {"x": x}, {"w": np.ones((2, 3), np.float32)})
    m.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3]))
    r = load(m)
    assert r.graph.input_names == ["x"]
    assert_matches(m, {"x": x})


# -- files ------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(LuminalError, match="not found"):
        load(tmp_path / "nope.onnx")


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(LuminalError, match="not a file"):
        load(tmp_path)


@pytest.mark.parametrize("content", [b"", b"hello, this is plain text\n", bytes(range(256)) * 4])
def test_not_onnx_file(tmp_path, content):
    p = tmp_path / "bad.onnx"
    p.write_bytes(content)
    with pytest.raises(LuminalError, match="not a valid ONNX model") as e:
        load(p)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_file(tmp_path, keep):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    m = make_model(helper.make_node("MatMul", ["x", "w"], ["y"]), {"x": x},
                   {"w": RNG.standard_normal((3, 64)).astype(np.float32)})
    data = m.SerializeToString()
    p = tmp_path / "t.onnx"
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(LuminalError) as e:
        load(p)
    assert "\n" not in str(e.value)


def _external_model(tmp_path: Path, location: str = "weights.bin") -> tuple[Path, np.ndarray]:
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    m = make_model(helper.make_node("MatMul", ["x", "w"], ["y"]), {"x": x}, {"w": w})
    p = tmp_path / "m.onnx"
    onnx.save_model(m, str(p), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    if location != "weights.bin":
        mp = onnx.load(str(p), load_external_data=False)
        for t in mp.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
        p.write_bytes(mp.SerializeToString())
    return p, x @ w


def test_external_data_inside_folder(tmp_path):
    p, _ = _external_model(tmp_path)
    r = load(p)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    w = np.fromfile(tmp_path / "weights.bin", dtype=np.float32).reshape(64, 32)
    (got,) = ir.run_reference(r.graph, {"x": x})
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)


def test_external_data_in_subfolder(tmp_path):
    (tmp_path / "data").mkdir()
    p, _ = _external_model(tmp_path, "data/weights.bin")
    os.rename(tmp_path / "weights.bin", tmp_path / "data" / "weights.bin")
    assert load(p).outputs[0].shape == (2, 32)


@pytest.mark.parametrize("location", ["../weights.bin", "data/../../weights.bin", "/etc/passwd"])
def test_external_data_escaping_folder_is_refused(tmp_path, location):
    inner = tmp_path / "model"
    inner.mkdir()
    p, _ = _external_model(inner, location)
    (tmp_path / "weights.bin").write_bytes((inner / "weights.bin").read_bytes())
    with pytest.raises(LuminalError, match="model's folder"):
        load(p)


def test_external_data_symlink_escaping_is_refused(tmp_path):
    inner = tmp_path / "model"
    inner.mkdir()
    p, _ = _external_model(inner, "link.bin")
    (tmp_path / "outside.bin").write_bytes((inner / "weights.bin").read_bytes())
    os.symlink(tmp_path / "outside.bin", inner / "link.bin")
    with pytest.raises(LuminalError, match="model's folder"):
        load(p)


def test_external_data_missing_file(tmp_path):
    p, _ = _external_model(tmp_path)
    os.remove(tmp_path / "weights.bin")
    with pytest.raises(LuminalError, match="missing"):
        load(p)


# -- ops and graph structure -------------------------------------------------------

def test_unsupported_ops_listed_all_at_once():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name="first"),
             helper.make_node("FancyOp", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("MadeUp", ["c"], ["y"], name="third", domain="com.example")]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3)])
    with pytest.raises(LuminalError) as e:
        check_supported(m)
    msg = str(e.value)
    assert "\n" not in msg
    for part in ("FancyOp", "first", "second", "MadeUp", "com.example", "third", "opset 17", "opset 3"):
        assert part in msg
    assert "Relu" not in msg
    # checked before any other work: a bad --shape does not hide it
    with pytest.raises(LuminalError, match="FancyOp"):
        load(m, {"nope": 1})


def test_unsupported_op_inside_a_branch_is_listed():
    sub = helper.make_graph([helper.make_node("NotARealOp", [], ["o"], name="inner_node")], "b", [],
                            [helper.make_empty_tensor_value_info("o")])
    x = RNG.standard_normal(2).astype(np.float32)
    m = make_model([helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [1])),
                    helper.make_node("If", ["c"], ["y"], then_branch=sub, else_branch=sub)], {"x": x})
    with pytest.raises(LuminalError, match=r"NotARealOp.*inner_node"):
        load(m)


def test_unsorted_graph_is_ordered():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    m = make_model(nodes, {"x": x}, outputs=["y"])
    assert_matches(m, {"x": x})


def test_cycle_and_undefined_values_are_refused():
    x = RNG.standard_normal(2).astype(np.float32)
    cyc = make_model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])], {"x": x},
                     outputs=["a"])
    with pytest.raises(LuminalError, match="cycle"):
        load(cyc)
    undef = make_model([helper.make_node("Add", ["x", "ghost"], ["y"])], {"x": x})
    with pytest.raises(LuminalError, match=r"reads 'ghost', which no graph input, initializer or node defines"):
        load(undef)


def test_op_errors_name_the_node():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    m = make_model(helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape"), {"x": x},
                   {"s": np.array([4, 4], np.int64)})
    with pytest.raises(LuminalError, match=r"bad_reshape.*Reshape.*cannot reshape"):
        load(m)


X23 = np.ones((2, 3), np.float32)


@pytest.mark.parametrize("node, inits, match", [
    (helper.make_node("Tanh", ["x"], ["y"], dilations=[1]), {}, "Unrecognized attribute: dilations"),
    (helper.make_node("Shape", ["x", "x"], ["y"]), {}, r"input size 2 not in range \[min=1, max=1\]"),
    (helper.make_node("Reshape", ["x", "s", "s"], ["y"]), {"s": np.array([3, 2], np.int64)}, "input size 3"),
    (helper.make_node("Gemm", ["x", ""], ["y"]), {}, "input 1 is marked single but has an empty string"),
    (helper.make_node("Relu", ["x"], ["y", "z"]), {}, "output size 2"),
    (helper.make_node("Cast", ["x"], ["y"]), {}, "Required attribute 'to' is missing"),
])
def test_a_node_its_schema_refuses_is_refused(node, inits, match):
    """What onnxruntime's schema check refuses (arity, attributes) luminal refuses too, naming the node, where before
    the extra input or attribute was ignored and the model ran."""
    node.name = "odd"
    m = make_model(node, {"x": X23}, inits, outputs=["y"])
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type is not public
        run_ort(m, {"x": X23})
    with pytest.raises(LuminalError, match=rf"node 'odd' \({node.op_type}\): .*{match}"):
        load(m)


def test_a_node_of_another_domain_or_opset_is_left_to_its_op():
    """Ops of domains onnx does not register (com.microsoft) and ops past the model's opset are not the schema
    check's: the op decides (FusedConv imports; an op ONNX has no schema for is the unsupported-op error)."""
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", activation="Relu")
    m = make_model(node, {"x": x}, {"w": w})
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert_matches(m, {"x": x})
    with pytest.raises(LuminalError, match="unsupported"):
        load(make_model(helper.make_node("Frobnicate", ["x"], ["y"]), {"x": x}))


@pytest.mark.parametrize("attrs, match", [
    (dict(kernel_shape=[-3, 3]), r"kernel_shape \[-3, 3\]: each must be at least 1"),
    (dict(kernel_shape=[0, 2]), r"kernel_shape \[0, 2\]"),
    (dict(kernel_shape=[2, 2], strides=[0, 1]), r"strides \[0, 1\]"),
    (dict(kernel_shape=[2, 2], dilations=[-1, 1]), r"dilations \[-1, 1\]"),
    (dict(kernel_shape=[2, 2], pads=[-1, 0, 0, 0]), r"pads \[-1, 0, 0, 0\]: each must be at least 0"),
])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv", "ConvTranspose"])
def test_window_attributes_out_of_range_are_refused(op, attrs, match):
    """A kernel, stride or dilation below 1 or a negative pad: onnxruntime refuses them; luminal ran some (a negative
    kernel made a larger output) and divided by zero on others."""
    x = np.ones((1, 2, 9, 9), np.float32)
    inits = {"w": np.ones((2, 2, 3, 3), np.float32)} if "Conv" in op else {}
    if "Conv" in op and attrs.get("kernel_shape") == [2, 2]:
        attrs = {k: v for k, v in attrs.items() if k != "kernel_shape"}
    m = make_model(helper.make_node(op, ["x", *inits], ["y"], **attrs), {"x": x}, inits, opset=19)
    with pytest.raises(Exception):  # noqa: B017
        run_ort(m, {"x": x})
    with pytest.raises(LuminalError, match=match):
        load(m)


def test_an_initializer_with_a_negative_dim_is_refused():
    x = np.ones(4, np.float32)
    m = make_model(helper.make_node("Add", ["x", "b"], ["y"]), {"x": x}, {"b": x})
    m.graph.initializer[0].dims[0] = -1  # numpy's reshape would take -1 as "the rest" and read 4 values
    with pytest.raises(LuminalError, match=r"tensor 'b' has a negative dim: \[-1\]"):
        load(m)


@pytest.mark.parametrize("declared, match", [
    (helper.make_tensor_value_info("w", TensorProto.FLOAT, [3]), r"declares shape \[3\], its initializer is \[2, 3\]"),
    (helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 4]), r"declares shape \[2, 4\]"),
    (helper.make_tensor_value_info("w", TensorProto.INT64, [2, 3]), "declares element type INT64, its initializer is"),
])
def test_an_initializer_listed_as_an_input_of_another_shape_is_refused(declared, match):
    """onnxruntime refuses an input whose initializer has another shape or type; luminal took the initializer."""
    x = np.ones((2, 3), np.float32)
    m = make_model(helper.make_node("Add", ["x", "w"], ["y"]), {"x": x}, {"w": x})
    m.graph.input.append(declared)
    with pytest.raises(Exception):  # noqa: B017
        run_ort(m, {"x": x})
    with pytest.raises(LuminalError, match=match):
        load(m)


@pytest.mark.parametrize("dtype, chain", [
    (np.int16, [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]),
    (np.uint8, [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)]),
    (np.int8, [helper.make_node("Less", ["x", "x"], ["c"]), helper.make_node("Where", ["c", "x", "x"], ["y"])]),
    (np.float64, [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.INT16), helper.make_node("Abs", ["a"], ["y"])]),
])
def test_an_output_of_no_declared_type_has_the_type_onnx_infers(dtype, chain, tmp_path):
    """An output the model declares no element type for comes back as onnxruntime returns it (ONNX's type
    inference), not in the wider dtype the IR computes it in (int16 as int32, double as float32)."""
    from luminal.runtime.session import InferenceSession

    x = (RNG.standard_normal((2, 3)) * 50).astype(dtype)
    m = make_model(chain, {"x": x})
    assert not m.graph.output[0].type.tensor_type.elem_type
    onnx.save(m, tmp_path / "m.onnx")
    (want,) = run_ort(m, {"x": x})
    session = InferenceSession(tmp_path / "m.onnx", backend="interpret")
    (got,) = session.run(None, {"x": x})
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert session.get_outputs()[0].type == f"tensor({want.dtype.name.replace('float64', 'double')})"
    dynamic = make_model(chain, {"x": x}, input_shapes={"x": ["n", 3]})  # compiled at its first run
    onnx.save(dynamic, tmp_path / "d.onnx")
    session = InferenceSession(tmp_path / "d.onnx", backend="interpret")
    assert session.get_outputs()[0].type == f"tensor({want.dtype.name.replace('float64', 'double')})"
    assert session.run(None, {"x": x})[0].dtype == want.dtype


def test_unsupported_input_dtype():
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    with pytest.raises(LuminalError, match="STRING"):
        load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_double_input_computes_in_float32():
    x = RNG.standard_normal((2, 2))
    m = make_model(helper.make_node("Sigmoid", ["x"], ["y"]), {"x": x})
    r = load(m)
    assert r.inputs[0].dtype is ir.DType.float32 and any("double" in w for w in r.warnings)
    (got,) = ir.run_reference(r.graph, {"x": x.astype(np.float32)})
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-6)


def test_no_default_opset():
    x = RNG.standard_normal(2).astype(np.float32)
    m = make_model(helper.make_node("Relu", ["x"], ["y"]), {"x": x})
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(LuminalError):
        load(m)


@pytest.mark.parametrize("name", ["bad.json", "bad.txt", "bad.textproto"])
def test_garbage_with_other_extensions(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(b"{ this is : not [ a model")
    with pytest.raises(LuminalError, match="not a valid ONNX model"):
        load(p)


def test_external_data_bad_offset(tmp_path):
    p, _ = _external_model(tmp_path)
    mp = onnx.load(str(p), load_external_data=False)
    for t in mp.graph.initializer:
        for e in t.external_data:
            if e.key == "offset":
                e.value = "-5"
        if not any(e.key == "offset" for e in t.external_data):
            t.external_data.add(key="offset", value="-5")
    p.write_bytes(mp.SerializeToString())
    with pytest.raises(LuminalError, match="offset"):
        load(p)


def test_external_data_shorter_than_declared(tmp_path):
    p, _ = _external_model(tmp_path)
    data = (tmp_path / "weights.bin").read_bytes()
    (tmp_path / "weights.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(LuminalError, match="shorter"):
        load(p)


def test_optimize_flag():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Mul", ["r", "one"], ["y"])]
    m = make_model(nodes, {"x": x}, {"one": np.ones((2, 3), np.float32)})
    raw, opt = load(m, optimize=False), load(m)
    assert sum(raw.graph.primitive_counts().values()) > sum(opt.graph.primitive_counts().values())
    (a,), (b,) = ir.run_reference(raw.graph, {"x": x}), ir.run_reference(opt.graph, {"x": x})
    np.testing.assert_array_equal(a, b)


def test_model_local_functions_are_inlined():
    from onnx import helper as h

    # f(a, b) = Relu(a) * b + alpha, alpha an attribute of the call
    fn = h.make_function(
        "custom", "ScaledReluMul", ["a", "b"], ["out"],
        [h.make_node("Relu", ["a"], ["r"]), h.make_node("Mul", ["r", "b"], ["m"]),
         h.make_node("Constant", [], ["k"], value_float=0.0),
         h.make_node("CastLike", ["k", "m"], ["kk"])],
        [h.make_opsetid("", 17)], attributes=[])
    fn.node[2].attribute[0].ref_attr_name = "alpha"
    fn.node.append(h.make_node("Add", ["m", "kk"], ["out"]))
    fn.attribute.append("alpha")
    x, y = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    nodes = [h.make_node("ScaledReluMul", ["x", "y"], ["t"], domain="custom", alpha=2.5),
             h.make_node("ScaledReluMul", ["t", "y"], ["o"], domain="custom", alpha=-1.0)]
    m = make_model(nodes, {"x": x, "y": y}, outputs=["o"])
    m.opset_import.append(h.make_opsetid("custom", 1))
    m.functions.append(fn)
    r = load(m)
    assert r.onnx_op_counts.get("ScaledReluMul") is None and r.onnx_op_counts["Relu"] == 2
    (got,) = ir.run_reference(r.graph, {"x": x, "y": y})
    t = np.maximum(x, 0) * y + 2.5
    np.testing.assert_allclose(got, np.maximum(t, 0) * y - 1.0, rtol=1e-6)
    assert_matches(m, {"x": x, "y": y})


def test_unsupported_op_inside_a_local_function_is_listed():
    from onnx import helper as h

    fn = h.make_function("custom", "F", ["a"], ["out"], [h.make_node("NoSuchOp", ["a"], ["out"], name="deep")],
                         [h.make_opsetid("", 17)])
    x = RNG.standard_normal(3).astype(np.float32)
    m = make_model([h.make_node("F", ["x"], ["y"], domain="custom")], {"x": x})
    m.opset_import.append(h.make_opsetid("custom", 1))
    m.functions.append(fn)
    with pytest.raises(LuminalError, match=r"NoSuchOp.*deep") as e:
        load(m)
    assert "'F'" not in str(e.value)


def test_sparse_initializer():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([4.0, -1.0], np.float32), "w"),
                                   numpy_helper.from_array(np.array([[0, 2], [1, 0]], np.int64)), [2, 3])
    m = make_model(helper.make_node("Add", ["x", "w"], ["y"]), {"x": x})
    m.graph.sparse_initializer.append(sp)
    r = load(m)
    (got,) = ir.run_reference(r.graph, {"x": x})
    np.testing.assert_allclose(got, x + np.array([[0, 0, 4.0], [-1.0, 0, 0]], np.float32))
