"""Outputs written over an input of their kernel (runtime/plan.written_over): a residual that a conv's epilogue
adds, read there at the output's own index and by no later kernel, holds the output in its buffer where the
kernel's schedule is the generated GEMM (``Backend.in_place``); its kernel declares the two without
``restrict``. Outputs against onnxruntime either way, and under random GEMM schedules."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.codegen.c.backend import CPUBackend
from luminal.frontend_onnx import load
from luminal.runtime.compile import compile_graph
from luminal.search.endtoend import ModelRunner

RNG = np.random.default_rng(0)


def _conv(name: str, x: str, inits: dict, c: int, k: int = 1) -> list:
    inits[f"{name}_w"] = (RNG.standard_normal((c, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    inits[f"{name}_b"] = RNG.standard_normal(c).astype(np.float32) * 0.1
    return [helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], pads=[k // 2] * 4)]


def _block(name: str, x: str, res: str, inits: dict, c: int, k: int = 1) -> list:
    """relu(conv(relu(conv(x))) + res): a residual block, its convs k x k"""
    return [*_conv(f"{name}_a", x, inits, c, k), helper.make_node("Relu", [f"{name}_a"], [f"{name}_r"]),
            *_conv(f"{name}_c", f"{name}_r", inits, c, k), helper.make_node("Add", [f"{name}_c", res], [f"{name}_s"]),
            helper.make_node("Relu", [f"{name}_s"], [name])]


def _model(case: str, c: int = 48, k: int = 1):
    """(model, feeds, outputs written over their residual)"""
    inits: dict = {}
    hw = (7, 7) if case == "transposed" else (9, 13)
    x = RNG.standard_normal((1, c, *hw)).astype(np.float32)
    n = [*_conv("h0c", "x", inits, c), helper.make_node("Relu", ["h0c"], ["h0"])]
    outputs = ["y"]
    if case == "chain":  # ResNet's blocks: each output over the residual before it
        n += _block("h1", "h0", "h0", inits, c, k) + _block("h2", "h1", "h1", inits, c, k)
        n += _conv("y", "h2", inits, c, 3)
        over = 2
    elif case == "read_later":  # the residual is read again after the block: it keeps its buffer
        n += _block("h1", "h0", "h0", inits, c) + _block("y", "h1", "h0", inits, c)
        over = 0  # and y is the graph's output
    elif case == "output":  # the residual is a graph output
        n += _block("h1", "h0", "h0", inits, c) + _conv("y", "h1", inits, c)
        outputs, over = ["h0", "y"], 0
    elif case == "transposed":  # the residual read across (H and W swapped): not at the output's own index
        n += [helper.make_node("Transpose", ["h0"], ["t"], perm=[0, 1, 3, 2]), *_block("h1", "h0", "t", inits, c)]
        n += _conv("y", "h1", inits, c)
        over = 0
    else:
        raise ValueError(case)
    return make_model(n, {"x": x}, inits, outputs=outputs), {"x": x}, over


@pytest.mark.parametrize(("case", "k"), [("chain", 1), ("chain", 3), ("read_later", 1), ("output", 1),
                                         ("transposed", 1)])
def test_outputs_are_written_over_a_residual_that_dies_in_their_kernel(case, k):
    """ResNet's bottleneck blocks (1x1 convs, channels last) and basic blocks (3x3, NCHW)."""
    model, feeds, over = _model(case, k=k)
    compiled = compile_graph(load(model).graph, "cpu")
    written = {o: r for o, (r, _) in compiled.elision.aliases.items()}
    assert len(written) == over
    for o, r in written.items():
        (k,) = [k for k in compiled.launched if o in k.output_nodes]
        assert any(op == "Add" for _, op in k.sources) and k.input_nodes[k.in_place_inputs[0]] == r
        assert compiled._values[o].ctypes.data == compiled._values[r].ctypes.data
        src = compiled.backend.source(k, dict(compiled.schedules[compiled.kernels.index(k)]))
        shared = k.in_place_inputs[0]
        assert re.search(rf"\*in{shared} = ", src) and re.search(r"\*out0 = ", src)  # no restrict on the two
        assert all(re.search(rf"\*restrict in{i} = ", src) for i in range(len(k.inputs)) if i != shared)
    for _ in range(2):  # the second run over buffers the first left behind
        for got, want in zip(compiled.run(feeds), run_ort(model, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_only_a_contraction_s_inputs_read_at_its_output_s_index_may_be_written_over():
    model, _, _ = _model("transposed")
    assert not any(k.in_place_inputs for k in compile_graph(load(model).graph, "cpu").launched)
    model, _, _ = _model("chain")
    kernels = compile_graph(load(model).graph, "cpu").launched
    assert [len(k.in_place_inputs) for k in kernels] == [0, 0, 1, 0, 1, 0]  # the blocks' second convs


def test_a_stencil_keeps_its_output_apart():
    """With few channels the convs run as stencils, whose rows store whole vectors across a row's end (into the
    next row's elements, before that row reads its residual there): no output over a residual."""
    model, feeds, _ = _model("chain", c=8)
    compiled = compile_graph(load(model).graph, "cpu")
    residual = [t for t, k in enumerate(compiled.launched) if k.in_place_inputs]
    assert residual and all(compiled.elision.pick(compiled.schedules)[t]["impl"] == "stencil" for t in residual)
    assert not compiled.elision.aliases
    for got, want in zip(compiled.run(feeds), run_ort(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_gemm_schedules_write_over_the_residual_right(seed, k):
    """The residual convs under random generated-GEMM schedules (tiles, blocks, orientation, packing, threads),
    their outputs over their residuals, as the tuner's model runner runs them: the model's outputs stay
    onnxruntime's, run after run."""
    model, feeds, _ = _model("chain", c=40 + 8 * seed, k=k)
    graph = load(model).graph
    be = CPUBackend()
    kernels = compile_graph(graph, "cpu").launched
    rnd = random.Random(seed)
    schedules = {}
    for k in kernels:
        if not k.in_place_inputs:
            continue
        space = be.space(k)
        for _ in range(200):
            s = {kn.name: rnd.choice(kn.choices) for kn in space} | {"impl": "generated"}
            if be.valid(k, s):
                schedules[k.signature] = s
                break
    assert len(schedules) == 1  # both blocks' residual convs are one kernel
    runner = ModelRunner(graph, be, {}, schedules)
    written = [(k.output_nodes[0], k.input_nodes[k.in_place_inputs[0]]) for k in runner.kernels if k.in_place_inputs]
    assert len(written) == 2 and all(runner.bufs[o].ctypes.data == runner.bufs[r].ctypes.data for o, r in written)
    runner.feed([feeds["x"]])
    (want,) = run_ort(model, feeds)
    for _ in range(2):
        runner()
        np.testing.assert_allclose(runner.outputs()[0], want, rtol=1e-5, atol=1e-5)
