"""Concatenations written in place (runtime/alias.py): where each part is one contiguous range of the output,
its producer writes it there and the copy is not launched; everywhere else the copy runs. Outputs against
onnxruntime either way."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.frontend_onnx import load
from luminal.runtime.compile import compile_graph
from luminal.runtime.model import arena_offsets
from luminal.search.endtoend import ModelRunner

RNG = np.random.default_rng(0)


def _conv(name: str, x: str, cin: int, cout: int, inits: dict, k: int = 1) -> list:
    inits[f"{name}_w"] = RNG.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.3
    return [helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], pads=[k // 2] * 4),
            helper.make_node("Relu", [f"{name}_c"], [name])]


def _concat(name: str, parts: list[str], axis: int = 1) -> list:
    return [helper.make_node("Concat", parts, [name], axis=axis)]


def _slice(name: str, x: str, start: int, end: int, inits: dict) -> list:
    inits[f"{name}_start"], inits[f"{name}_end"] = np.array([start], np.int64), np.array([end], np.int64)
    inits[f"{name}_axis"] = np.array([1], np.int64)
    return [helper.make_node("Slice", [x, f"{name}_start", f"{name}_end", f"{name}_axis"], [name])]


def _model(case: str, batch: int = 1):
    """(model, feeds, concatenations whose copy needs not run)"""
    inits: dict = {}
    x = RNG.standard_normal((batch, 4, 6, 6)).astype(np.float32)
    n = _conv("a", "x", 4, 3, inits) + _conv("b", "x", 4, 5, inits, k=3)
    outputs = ["y"]
    if case == "two":  # two convs into one concatenation, read by a third
        n += _concat("c", ["a", "b"]) + _conv("y", "c", 8, 2, inits)
        elided = 1
    elif case == "nested":  # a DenseNet block: a concatenation read, then a part of the next one
        n += _concat("c1", ["a", "b"]) + _conv("d", "c1", 8, 4, inits, k=3)
        n += _concat("c2", ["c1", "d"]) + _conv("y", "c2", 12, 2, inits)
        elided = 2
    elif case == "three":  # three parts, one of them read again after the concatenation
        n += _conv("d", "a", 3, 2, inits) + _concat("c", ["b", "a", "d"]) + _conv("e", "c", 10, 2, inits)
        n += [helper.make_node("Add", ["e", "d"], ["y"])]
        elided = 1
    elif case == "dense":  # a DenseNet layer: a scale and a ReLU read the concatenation, in a kernel of their own
        inits["s"] = RNG.standard_normal((1, 8, 1, 1)).astype(np.float32)
        n += [*_concat("c", ["a", "b"]), helper.make_node("Mul", ["c", "s"], ["cs"])]
        n += [helper.make_node("Relu", ["cs"], ["r"]), *_conv("d", "r", 8, 4, inits)]
        n += [*_concat("c2", ["c", "d"]), helper.make_node("Mul", ["c2", "c2"], ["y"])]
        outputs, elided = ["y"], 2
    elif case == "input":  # a part is the model's input
        n += _concat("c", ["x", "a"]) + _conv("y", "c", 7, 2, inits)
        elided = 0
    elif case == "output":  # a part is a model output
        n += _concat("c", ["a", "b"]) + _conv("y", "c", 8, 2, inits)
        outputs, elided = ["y", "a"], 0
    elif case == "whole":  # the concatenation is the model output
        n += _concat("y", ["a", "b"])
        elided = 0
    elif case == "twice":  # one part in two places
        n += _concat("c", ["a", "a"]) + _conv("y", "c", 6, 2, inits)
        elided = 0
    elif case == "shared":  # one part in two concatenations: only one of them holds it
        n += _concat("c1", ["a", "b"]) + _concat("c2", ["b", "a"]) + _conv("e", "c1", 8, 2, inits)
        n += [*_conv("f", "c2", 8, 2, inits), helper.make_node("Add", ["e", "f"], ["y"])]
        elided = 1
    elif case == "split":  # a YOLOv8 C2f block: a conv's output split, both halves and a conv of one concatenated
        inits["sizes"] = np.array([2, 3], np.int64)
        n += [helper.make_node("Split", ["b", "sizes"], ["b0", "b1"], axis=1), *_conv("d", "b1", 3, 2, inits)]
        n += _concat("c", ["b0", "b1", "d"]) + _conv("y", "c", 7, 2, inits)
        elided = 1
    elif case == "slices":  # the same split as Slices, the halves last
        n += _slice("b0", "b", 0, 2, inits) + _slice("b1", "b", 2, 5, inits)
        n += _concat("c", ["a", "b0", "b1"]) + _conv("y", "c", 8, 2, inits)
        elided = 1
    elif case == "half":  # a ShuffleNetV2 unit: one half passes, the other through a conv; the first is no whole part
        inits["sizes"] = np.array([2, 3], np.int64)
        n += [helper.make_node("Split", ["b", "sizes"], ["b0", "b1"], axis=1), *_conv("d", "b1", 3, 3, inits)]
        n += _concat("c", ["b0", "d"]) + _conv("y", "c", 5, 2, inits)
        elided = 0
    elif case == "swapped":  # the halves concatenated in the other order: not the split buffer
        n += _slice("b0", "b", 0, 2, inits) + _slice("b1", "b", 2, 5, inits)
        n += _concat("c", ["b1", "b0", "a"]) + _conv("y", "c", 8, 2, inits)
        elided = 0
    elif case == "rows":  # along the rows: each part is strided in the output
        n += _concat("c", ["a", "a"], axis=2) + _conv("y", "c", 3, 2, inits)
        elided = 0
    else:
        more, elided = _layered(case, inits)
        n += more
    return make_model(n, {"x": x}, inits, outputs=outputs), {"x": x}, elided


def _layered(case: str, inits: dict) -> tuple[list, int]:
    """An earlier concatenation of convs ``a`` and ``b`` read by a conv ``d``, and a later one: (nodes, elided)."""
    n = _concat("c1", ["a", "b"]) + _conv("d", "c1", 8, 4, inits, k=3)
    if case == "prefix":  # torchvision's DenseNet block: each layer concatenates all earlier outputs anew
        n += _concat("c2", ["a", "b", "d"]) + _conv("e", "c2", 12, 3, inits)
        return n + _concat("c3", ["a", "b", "d", "e"]) + _conv("y", "c3", 15, 2, inits), 3
    if case == "within":  # the earlier one whole inside the later one, past its start
        return n + _concat("c2", ["d", "a", "b"]) + _conv("y", "c2", 12, 2, inits), 2
    if case == "apart":  # its parts apart in the later one: that one copies
        return n + _concat("c2", ["a", "d", "b"]) + _conv("y", "c2", 12, 2, inits), 1
    if case == "partial":  # the later one holds some of its parts only: that one copies
        n += _concat("c2", ["a", "d"]) + _conv("e", "c1", 8, 2, inits) + _conv("f", "c2", 7, 2, inits)
        return [*n, helper.make_node("Add", ["e", "f"], ["y"])], 1
    raise ValueError(case)


CASES = ["two", "nested", "three", "dense", "input", "output", "whole", "twice", "shared", "split", "slices", "half",
         "swapped", "prefix", "within", "apart", "partial", "rows"]


@pytest.mark.parametrize("case", CASES)
def test_concatenations_run_in_place_where_each_part_is_one_range(case):
    model, feeds, elided = _model(case)
    compiled = compile_graph(load(model).graph, "cpu")
    assert len(compiled.kernels) - len(compiled.launched) == elided
    assert sum(any(op == "Concat" for _, op in k.sources) for k in compiled.launched) == \
        sum(n.op_type == "Concat" for n in model.graph.node) - elided
    for _ in range(2):  # the second run over buffers the first left behind
        for got, want in zip(compiled.run(feeds), run_ort(model, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["two", "nested", "split", "prefix"])
def test_a_batch_of_images_keeps_the_copy(case):
    model, feeds, _ = _model(case, batch=2)
    compiled = compile_graph(load(model).graph, "cpu")
    assert len(compiled.kernels) == len(compiled.launched)
    for got, want in zip(compiled.run(feeds), run_ort(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_tuners_model_runner_writes_the_parts_in_place_too():
    model, feeds, _ = _model("nested")
    graph = load(model).graph
    compiled = compile_graph(graph, "cpu")
    runner = ModelRunner(graph, compiled.backend, {}, {})
    assert [k.signature for k in runner.kernels] == [k.signature for k in compiled.launched]
    runner.feed([feeds["x"]])
    runner()
    (want,) = run_ort(model, feeds)
    np.testing.assert_allclose(runner.outputs()[0], want, rtol=1e-5, atol=1e-5)


def test_the_tuners_model_runner_places_its_buffers_where_a_compiled_model_does():
    """The end-to-end check times what a compiled model runs: its intermediates in one arena, each at the offset
    the plan gives it (``arena_offsets``, where the search also places a kernel's buffers), the parts of a
    concatenation inside it."""
    model, _, _ = _model("dense")
    graph = load(model).graph
    compiled = compile_graph(graph, "cpu")
    runner = ModelRunner(graph, compiled.backend, {}, {})
    where = arena_offsets(compiled.launched, compiled.plan, compiled.elision)
    assert len(where) == 4 and len(compiled.plan.slots) == 2  # three parts of the concatenations, and a ReLU's
    for buffers in (runner.bufs, compiled._values):
        assert len({buffers[n].ctypes.data - offset for n, offset in where.items()}) == 1
