"""Malformed graphs are refused at import in one line: names defined twice, dangling edges, cycles,
graphs without outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cli import check_cmd, inspect_cmd
from luminal.errors import LuminalError
from luminal.frontend_onnx import load

F = TensorProto.FLOAT


def vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, [4])


def graph(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def w(value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(4, value, np.float32), "w")


CASES = {
    "input twice": (graph([helper.make_node("Relu", ["x"], ["y"])], [vi("x"), vi("x")], [vi("y")]),
                    "graph input 'x' is listed more than once"),
    "output twice": (graph([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y"), vi("y")]),
                     "graph output 'y' is listed more than once"),
    "initializer twice": (graph([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w(1), w(2)]),
                          "initializer 'w' is listed more than once"),
    "input redefined": (graph([helper.make_node("Relu", ["y"], ["x"]), helper.make_node("Relu", ["x"], ["y"])],
                              [vi("x")], [vi("y")]),
                        "'x' is both a graph input or initializer and a node's output"),
    "dangling edge": (graph([helper.make_node("Add", ["x", "nowhere"], ["y"])], [vi("x")], [vi("y")]),
                      "reads 'nowhere', which no graph input, initializer or node defines"),
    "output never produced": (graph([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("z")]),
                              "graph output 'z' is never produced"),
    "cycle": (graph([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                     helper.make_node("Relu", ["a"], ["y"])], [vi("x")], [vi("y")]),
              "the graph has a cycle"),
    "produced twice": (graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
                             [vi("x")], [vi("y")]),
                       "'y' is produced by more than one node"),
    "empty": (graph([], [], []), "the graph has no outputs"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_graph_is_refused(case):
    model, message = CASES[case]
    with pytest.raises(LuminalError, match=message):
        load(model)


@pytest.mark.parametrize("case", ["input twice", "dangling edge", "empty"])
def test_the_commands_refuse_it_in_one_line(case, tmp_path):
    model, message = CASES[case]
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for cmd in ("check", "inspect"):
        r = invoke(check_cmd, inspect_cmd, args=[cmd, str(path)])
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines() == [f"error: {message}"] or \
            (len(r.output.strip().splitlines()) == 1 and message in r.output), r.output


def test_an_input_that_is_also_the_output_is_fine():
    r = load(graph([], [vi("x")], [vi("x")]))
    assert r.graph.output_names == ["x"] and r.outputs[0].shape == (4,)


def test_an_initializer_listed_as_an_input_is_not_a_duplicate():
    r = load(graph([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x"), vi("w")], [vi("y")], [w(1)]))
    assert r.graph.input_names == ["x"]
