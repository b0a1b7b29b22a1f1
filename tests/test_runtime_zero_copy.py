"""The cpu backend's runs read feeds in place where the kernels can and write outputs into the arrays returned:
results as with copies, the caller's arrays untouched and not kept, each run's outputs its own."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from sample_graphs import small_cnn

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.partition import fusible_edges
from luminal.ir import DType, Graph, Tensor, optimize, run_reference
from luminal.runtime.compile import compile_graph
from luminal.runtime.model import REBIND_MIN_BYTES, CompiledModel
from luminal.runtime.session import InferenceSession

SHAPE = (2, 3, 64, 64)  # outputs of 96 KiB: written in place


def _chain() -> Graph:
    """Elementwise steps the size of x, each its own kernel (no fusion), so intermediates share arena slots."""
    x = Tensor.input("x", SHAPE, DType.float32)
    h = x.relu()
    for _ in range(3):
        h = h.mul(1.5).add(-0.25).relu()
    return optimize(Graph([x.node], [h.contiguous().node, x.exp().contiguous().node], ["y", "e"]))


def _unfused(g: Graph) -> CompiledModel:
    m = compile_graph(g, CPUBackend(), decisions={e: False for e in fusible_edges(g)})
    assert m._host is not None
    return m


@pytest.fixture(scope="module")
def chain() -> CompiledModel:
    return _unfused(_chain())


@pytest.fixture(scope="module")
def cnn() -> CompiledModel:
    m = compile_graph(small_cnn(batch=2), CPUBackend())
    assert m._host is not None
    return m


def _copied(m: CompiledModel, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs as runs gave them before: feeds copied into the buffers, outputs copied out."""
    m._write_inputs(feeds)
    m._launch()
    return m._outputs({})


def _feeds(kind: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    n = x.size
    if kind == "contiguous":
        return x
    if kind == "transposed":  # a view whose strides are not C order
        t = np.ascontiguousarray(np.swapaxes(x, -1, -2))
        return np.swapaxes(t, -1, -2)
    if kind == "offset":  # C-contiguous, aligned to its element but not to 64 bytes: read in place
        raw = np.empty(n + 1, np.float32)
        raw[1:] = x.ravel()
        return raw[1:].reshape(shape)
    if kind == "readonly":  # read in place too (its address taken another way)
        x.flags.writeable = False
        return x
    if kind == "byte_offset":  # not aligned to its element: copied
        raw = np.zeros(x.nbytes + 1, np.uint8)
        raw[1:] = x.view(np.uint8).ravel()
        y = raw[1:].view(np.float32).reshape(shape)
        assert not y.flags.aligned
        return y
    assert kind == "float64"
    return x.astype(np.float64)


KINDS = ["contiguous", "transposed", "offset", "readonly", "byte_offset", "float64"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["chain", "cnn"])
def test_results_as_with_copies_and_reference(which, kind, request):
    m = request.getfixturevalue(which)
    spec, = m.inputs
    x = _feeds(kind, spec.shape, seed=len(kind))
    before = x.copy()
    got = m.run({spec.name: x})
    np.testing.assert_array_equal(x, before)
    want = run_reference(_chain() if which == "chain" else small_cnn(batch=2), {spec.name: x.astype(np.float32)})
    for g, c, w in zip(got, _copied(m, {spec.name: x}), want):
        np.testing.assert_array_equal(g, c)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_in_place_path_taken(chain, monkeypatch):
    """A contiguous float32 feed is neither written into a buffer nor the outputs copied out; others are written."""
    be = chain.backend
    calls = []
    monkeypatch.setattr(be, "write", lambda buf, arr: calls.append(arr.flags.c_contiguous))
    monkeypatch.setattr(be, "to_numpy", lambda buf: pytest.fail("an output was copied out"))
    x = _feeds("contiguous", SHAPE, 1)
    y, e = chain.run({"x": x})
    assert calls == []
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-5)
    monkeypatch.undo()
    t = _feeds("transposed", SHAPE, 1)
    monkeypatch.setattr(be, "write", lambda buf, arr: (calls.append(arr.flags.c_contiguous),
                                                       np.copyto(buf, arr, casting="unsafe")))
    y2, e2 = chain.run({"x": t})
    assert calls == [False]
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(e2, e)


def test_small_outputs_are_copied_out_of_their_buffers(monkeypatch):
    """An output below REBIND_MIN_BYTES is computed into its own buffer and copied out (cheaper than a fresh array
    bound for the run); a larger one is written into the array returned. Each run's arrays are its own."""
    x = Tensor.input("x", (64, 512), DType.float32)
    g = optimize(Graph([x.node], [x.relu().contiguous().node, x.sum((1,)).contiguous().node], ["big", "small"]))
    m = compile_graph(g, CPUBackend())
    assert m._host is not None
    big, small = (o.node for o in m.outputs)
    assert m._values[big].nbytes >= REBIND_MIN_BYTES > m._values[small].nbytes
    assert [n for n, _, _ in m._host.outputs] == [big]
    copied = []
    to_numpy = m.backend.to_numpy
    monkeypatch.setattr(m.backend, "to_numpy", lambda buf: (copied.append(buf.nbytes), to_numpy(buf))[1])
    a, b = _feeds("contiguous", (64, 512), 5), _feeds("contiguous", (64, 512), 6)
    ra, rb = m.run({"x": a}), m.run({"x": b})
    assert copied == [m._values[small].nbytes] * 2
    for got, x_ in ((ra, a), (rb, b)):
        np.testing.assert_array_equal(got[0], np.maximum(x_, 0))
        np.testing.assert_allclose(got[1], x_.sum(1), rtol=1e-5, atol=1e-4)
    assert not any(np.shares_memory(p, q) for p, q in zip(ra, rb))


def test_intermediates_share_slots_but_never_the_input(chain):
    """The chain's plan reuses arena slots; no kernel writes the input's storage (it has none in the arena)."""
    slots = chain.plan.slots
    assert len({s.offset for s in slots.values()}) < len(slots)
    assert not {s.node for s in chain.inputs} & slots.keys()
    assert not {n for k in chain.kernels for n in k.output_nodes} & {s.node for s in chain.inputs}


def test_outputs_distinct_across_runs_and_feed_not_kept(chain):
    x1, x2 = _feeds("contiguous", SHAPE, 2), _feeds("contiguous", SHAPE, 3)
    first = chain.run({"x": x1})
    keep = [a.copy() for a in first]
    ref = weakref.ref(x2)
    second = chain.run({"x": x2})
    del x2
    gc.collect()
    assert ref() is None  # nothing holds the feed after the run
    for a, b, k in zip(first, second, keep):
        assert not np.shares_memory(a, b)
        np.testing.assert_array_equal(a, k)  # the second run wrote elsewhere
        assert not np.array_equal(a, b)


def test_pass_through_and_repeated_outputs():
    """An input that is also an output is copied; an output named twice gives two arrays."""
    x = Tensor.input("x", (4, 8), DType.float32)
    y = x.relu().contiguous()
    g = Graph([x.node], [x.node, y.node, y.node], ["x_out", "y1", "y2"])
    m = compile_graph(g, CPUBackend())
    assert m._host is not None
    a = _feeds("contiguous", (4, 8), 4)
    xo, y1, y2 = m.run({"x": a})
    assert not np.shares_memory(xo, a) and not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(xo, a)
    np.testing.assert_array_equal(y1, np.maximum(a, 0))
    np.testing.assert_array_equal(y2, y1)


def test_session_relu_matches_onnxruntime(tmp_path):
    """Relu(x) then Relu(Neg(.)) through InferenceSession: as onnxruntime, the feed unchanged, fresh outputs."""
    shape = [2, 4, 8, 8]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, shape),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    sess = InferenceSession(path, backend="cpu")
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = _feeds("contiguous", tuple(shape), 5)
    before = x.copy()
    got = sess.run(None, {"x": x})
    np.testing.assert_array_equal(x, before)
    for a, b in zip(got, ref.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)
    again = sess.run(None, {"x": -x})
    assert not any(np.shares_memory(a, b) for a, b in zip(got, again))
    np.testing.assert_array_equal(got[0], np.maximum(x, 0))
