"""If: inlined when the condition folds, Where over both branches otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from test_frontend_util import assert_matches, make_model  # noqa: E402

from luminal.errors import LuminalError  # noqa: E402
from luminal.frontend_onnx import load  # noqa: E402

X = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)


def branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [helper.make_empty_tensor_value_info(out)])


def if_model(cond_nodes, then_nodes, else_nodes, opset=17, extra_inputs=None):
    then_g = branch("then", then_nodes, "t_out")
    else_g = branch("else", else_nodes, "e_out")
    nodes = cond_nodes + [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    return make_model(nodes, {"x": X, **(extra_inputs or {})}, opset=opset)


@pytest.mark.parametrize("dim,expect", [(2, "then"), (5, "else")])
def test_if_constant_condition_inlines_taken_branch(dim, expect):
    cond = [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", TensorProto.INT64, [2], [dim, 3])),
            helper.make_node("Equal", ["s", "k"], ["eq"]),
            helper.make_node("ReduceMin", ["eq_i"], ["m"], keepdims=0),
            helper.make_node("Cast", ["m"], ["cond"], to=TensorProto.BOOL)]
    cond.insert(3, helper.make_node("Cast", ["eq"], ["eq_i"], to=TensorProto.INT64))
    m = if_model(cond, [helper.make_node("Relu", ["x"], ["t_out"])],
                 [helper.make_node("Neg", ["x"], ["e_out"])])
    r = load(m)
    ops = r.graph.primitive_counts()
    assert "Where" not in ops or expect == "then"  # Relu is a Where; Neg is a Mul
    assert ("Mul" in ops) == (expect == "else")
    assert r.onnx_op_counts["If"] == 1 and r.onnx_op_counts["Relu"] == 1
    assert_matches(m, {"x": X})


def test_if_nested_and_outer_scope():
    inner = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["i_out"])], "inner", [],
                              [helper.make_empty_tensor_value_info("i_out")])
    then_nodes = [helper.make_node("Constant", [], ["c2"], value=helper.make_tensor("c2", TensorProto.BOOL, [], [0])),
                  helper.make_node("If", ["c2"], ["t_out"], then_branch=branch("z", [helper.make_node(
                      "Identity", ["x"], ["z_out"])], "z_out"), else_branch=inner)]
    cond = [helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [1])),
            helper.make_node("Constant", [], ["bias"], value=helper.make_tensor("b", TensorProto.FLOAT, [], [2.5]))]
    m = if_model(cond, then_nodes, [helper.make_node("Identity", ["x"], ["e_out"])])
    assert_matches(m, {"x": X})


def test_if_runtime_condition_selects_with_where():
    flag = np.array(True)
    m = if_model([helper.make_node("Identity", ["flag"], ["cond"])],
                 [helper.make_node("Relu", ["x"], ["t_out"])], [helper.make_node("Neg", ["x"], ["e_out"])],
                 extra_inputs={"flag": flag})
    for v in (True, False):
        assert_matches(m, {"x": X, "flag": np.array(v)})


def test_if_runtime_condition_with_different_shapes_is_refused():
    m = if_model([helper.make_node("Identity", ["flag"], ["cond"])],
                 [helper.make_node("Relu", ["x"], ["t_out"])],
                 [helper.make_node("ReduceSum", ["x"], ["e_out"], keepdims=0)],
                 extra_inputs={"flag": np.array(True)})
    with pytest.raises(LuminalError, match="If.*different shapes"):
        load(m)
