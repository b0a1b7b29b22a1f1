"""If: inlined when the condition folds, Where over both branches otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, session_matches_onnxruntime
from onnx import TensorProto, helper

from luminal.errors import LuminalError
from luminal.frontend_onnx import load

X = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)


def branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [helper.make_empty_tensor_value_info(out)])


def if_model(cond_nodes, then_nodes, else_nodes, opset=17, extra_inputs=None):
    then_g = branch("then", then_nodes, "t_out")
    else_g = branch("else", else_nodes, "e_out")
    nodes = [*cond_nodes, helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
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
    with pytest.raises(LuminalError, match=r"If.*different shapes"):
        load(m)


def _loop_model(trip, cond_init, body_nodes, body_outputs, carried_init, opset=17, feeds=None):
    body_inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                   helper.make_tensor_value_info("c_in", TensorProto.BOOL, [])]
    body_inputs += [helper.make_empty_tensor_value_info(f"v{k}_in") for k in range(len(carried_init))]
    body = helper.make_graph(body_nodes, "body", body_inputs,
                             [helper.make_empty_tensor_value_info(o) for o in body_outputs])
    inits = {"trip": np.array(trip, np.int64), "cond": np.array(cond_init)}
    inits.update({f"init{k}": v for k, v in enumerate(carried_init) if k})
    names = ["trip", "cond", "x"] + [f"init{k}" for k in range(1, len(carried_init))]
    outs = [f"out{k}" for k in range(len(body_outputs) - 1)]
    node = helper.make_node("Loop", names, outs, body=body)
    return make_model([node], feeds or {"x": carried_init[0]}, inits, outputs=outs, opset=opset)


def test_loop_with_trip_count_and_scan_output():
    x = X.copy()
    body = [helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["v0_in", "fi"], ["v0_out"]),
            helper.make_node("Mul", ["v0_out", "v0_out"], ["scan"])]
    m = _loop_model(4, True, body, ["c_out", "v0_out", "scan"], [x])
    assert_matches(m, {"x": x}, rtol=1e-5)


def test_loop_stopped_by_condition():
    x = np.array([1.0, 2.0], np.float32)
    body = [helper.make_node("Less", ["i", "k"], ["c_out"]),
            helper.make_node("Mul", ["v0_in", "two"], ["v0_out"]),
            helper.make_node("Add", ["v1_in", "one"], ["v1_out"])]
    m = _loop_model(100, True, body, ["c_out", "v0_out", "v1_out"], [x, np.array(0, np.int64)])
    m.graph.initializer.extend([helper.make_tensor("k", TensorProto.INT64, [], [3]),
                                helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                                helper.make_tensor("one", TensorProto.INT64, [], [1])])
    assert_matches(m, {"x": x})


def test_loop_with_runtime_condition_runs_on_the_host(tmp_path):
    """A condition the body computes from the data: the import cannot unroll the Loop, a session runs it on the host
    between its compiled parts (it was refused)."""
    x = np.array([1.0, -2.0], np.float32)
    body = [helper.make_node("ReduceSum", ["v0_in"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "lim"], ["c_out"]),
            helper.make_node("Add", ["v0_in", "v0_in"], ["v0_out"]),
            helper.make_node("Neg", ["v0_out"], ["scan"])]
    m = _loop_model(50, True, body, ["c_out", "v0_out", "scan"], [x])
    m.graph.initializer.append(helper.make_tensor("lim", TensorProto.FLOAT, [], [40.0]))
    m.graph.node.insert(0, helper.make_node("Abs", ["x"], ["ax"]))
    m.graph.node[1].input[2] = "ax"
    for feed in ([1.0, -2.0], [30.0, 20.0], [0.5, 0.25]):  # 4, 1 and 7 iterations
        session_matches_onnxruntime(m, {"x": np.array(feed, np.float32)}, tmp_path)


def _typed_scan_output(m):
    """The Loop body's carried input declared float [2, 3]: onnxruntime infers the scan output's shape from it (for a
    Loop of no iteration luminal reads it from the body; onnxruntime gives [0] where it cannot infer one)."""
    body = next(n for n in m.graph.node if n.op_type == "Loop").attribute[0].g
    body.input[2].CopyFrom(helper.make_tensor_value_info("v0_in", TensorProto.FLOAT, [2, 3]))
    body.output[2].type.tensor_type.elem_type = TensorProto.FLOAT


@pytest.mark.parametrize("trip", [0, 1, 3])
def test_loop_with_a_trip_count_from_the_model_stacks_its_scan_outputs(trip, tmp_path):
    """A trip count given at run time: the Loop runs on the host, each scan output stacked on a new first axis (onnx's
    reference implementation concatenates them: 3 iterations of [2, 3] gave [6, 3]); no iteration gives an empty
    [0, 2, 3], as onnxruntime does."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    body = [helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["v0_in", "fi"], ["v0_out"]),
            helper.make_node("Mul", ["v0_out", "v0_out"], ["scan"])]
    feeds = {"x": x, "n": np.array(trip, np.int64)}
    m = _loop_model(0, True, body, ["c_out", "v0_out", "scan"], [x], feeds=feeds)
    m.graph.node[0].input[0] = "n"
    _typed_scan_output(m)
    session_matches_onnxruntime(m, feeds, tmp_path)


def test_loop_of_no_iteration_gives_empty_scan_outputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    body = [helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Neg", ["v0_in"], ["v0_out"]),
            helper.make_node("Unsqueeze", ["v0_out", "ax"], ["scan"])]
    m = _loop_model(0, True, body, ["c_out", "v0_out", "scan"], [x])
    m.graph.initializer.append(helper.make_tensor("ax", TensorProto.INT64, [1], [0]))
    _typed_scan_output(m)
    r = load(m)
    assert [o.shape for o in r.outputs] == [(2, 3), (0, 1, 2, 3)]
    assert_matches(m, {"x": x})


def test_sequence_ops():
    x = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=0),
             helper.make_node("SequenceLength", ["seq"], ["n"]),
             helper.make_node("SequenceErase", ["seq", "zero"], ["seq2"]),
             helper.make_node("SequenceInsert", ["seq2", "x0"], ["seq3"]),
             helper.make_node("SequenceAt", ["seq3", "minus1"], ["last"]),
             helper.make_node("ConcatFromSequence", ["seq3"], ["stacked"], axis=1, new_axis=1),
             helper.make_node("SplitToSequence", ["x", "two"], ["chunks"], axis=0),
             helper.make_node("ConcatFromSequence", ["chunks"], ["back"], axis=0),
             helper.make_node("SequenceConstruct", ["x", "back"], ["pair"]),
             helper.make_node("ConcatFromSequence", ["pair"], ["cat"], axis=-1)]
    inits = {"zero": np.array(0, np.int64), "minus1": np.array(-1, np.int64), "two": np.array(3, np.int64),
             "x0": np.ones(4, np.float32)}
    m = make_model(nodes, {"x": x}, inits, outputs=["n", "last", "stacked", "back", "cat"])
    assert_matches(m, {"x": x})


def test_identity_of_a_sequence_is_the_sequence():
    """Identity takes a sequence from opset 14 on (exporters put it between sequence ops); it gave the sequence's
    first tensor, so the next sequence op found no sequence."""
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),
             helper.make_node("Identity", ["seq"], ["same"]),
             helper.make_node("SequenceErase", ["same"], ["shorter"]),
             helper.make_node("ConcatFromSequence", ["shorter"], ["y"], axis=0, new_axis=1)]
    assert_matches(make_model(nodes, {"x": x}, outputs=["y"]), {"x": x})


def test_sequence_graph_output_is_refused():
    x = np.ones((2, 2), np.float32)
    m = make_model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], {"x": x})
    with pytest.raises(LuminalError, match="sequence"):
        load(m)


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0), (0, 0, -1, 1)])
def test_scan_cumulative_sum(in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(7)
    seq = rng.standard_normal((4, 5, 3) if in_axis == 0 else (5, 4, 3)).astype(np.float32)
    state0 = np.zeros((5, 3), np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body", [helper.make_empty_tensor_value_info("s_in"), helper.make_empty_tensor_value_info("x_t")],
        [helper.make_empty_tensor_value_info("s_out"), helper.make_empty_tensor_value_info("y_t")])
    node = helper.make_node("Scan", ["s0", "seq"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    m = make_model([node], {"s0": state0, "seq": seq}, outputs=["s_final", "ys"], opset=16)
    assert_matches(m, {"s0": state0, "seq": seq}, rtol=1e-5, atol=1e-5)


def test_scan_opset8_batched():
    rng = np.random.default_rng(8)
    seq = rng.standard_normal((2, 3, 4)).astype(np.float32)
    state0 = rng.standard_normal((2, 4)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [4]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [4])])
    node = helper.make_node("Scan", ["", "s0", "seq"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                            directions=[1])
    m = make_model([node], {"s0": state0, "seq": seq}, outputs=["s_final", "ys"], opset=8)
    assert_matches(m, {"s0": state0, "seq": seq}, rtol=1e-5, atol=1e-5)
