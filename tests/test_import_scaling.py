"""Long graphs import, optimise and partition in time linear in their length, with no recursion that grows with
it (benchmarks/import_scaling.py gives the times)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from luminal import ir
from luminal.codegen.partition import MAX_KERNEL_NODES, fusible_edges, partition
from luminal.frontend_onnx import load

CHAIN = 20_000


def relu_chain(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def chain_graph() -> ir.Graph:
    assert sys.getrecursionlimit() <= 10_000  # far below the chain's length: nothing may recurse along it
    return load(relu_chain(CHAIN)).graph


def test_a_long_chain_imports_and_optimises(chain_graph):
    x = np.array([-1.0, 0.0, 2.0, -3.5], np.float32)
    (y,) = ir.run_reference(chain_graph, {"t0": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert sum(chain_graph.primitive_counts().values()) < 3 * CHAIN + 10  # one LessThan and one Where per Relu


def test_a_long_chain_partitions_into_kernels_of_bounded_size(chain_graph):
    kernels = partition(chain_graph)
    assert len(kernels) == -(-2 * CHAIN // MAX_KERNEL_NODES)
    assert all(len(k.ops) <= 2 * MAX_KERNEL_NODES + 8 for k in kernels)  # the primitives and their leaves


def test_a_long_chain_left_unfused_partitions_in_launch_order(chain_graph):
    """Every fusion refused, as the tuner may try: one kernel per primitive, each after the one it reads."""
    kernels = partition(chain_graph, {e: False for e in fusible_edges(chain_graph)})
    assert len(kernels) == 2 * CHAIN
    produced = {nid for k in kernels for nid in k.output_nodes}
    made: set[int] = set()
    for k in kernels:
        assert all(nid in made for nid in k.input_nodes if nid in produced)
        made.update(k.output_nodes)
    assert made == produced


def test_a_wide_graph_with_fan_out_matches_numpy():
    """Each node adds two earlier values (t[i] and t[i // 2]): values are read far from where they are made."""
    n = 4000
    nodes = [helper.make_node("Add", [f"t{i}", f"t{i // 2}"], [f"t{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [2])])
    graph = load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    x = np.array([1e-30, -1e-30], np.float32)
    t = [x.astype(np.float64)]
    for i in range(n):
        t.append(t[i] + t[i // 2])
    (y,) = ir.run_reference(graph, {"t0": x})
    np.testing.assert_allclose(y, t[n], rtol=1e-4)
    assert len(partition(graph)) >= n // MAX_KERNEL_NODES
