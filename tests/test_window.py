"""Windows (codegen/window.py): a kernel reading part of an input is emitted reading it from the first row it
reaches, so kernels alike but for where they read share one compiled function (an unrolled recurrence's steps),
and the cpu backend binds each window's first element, on every path that binds buffers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_util import compare_cpu, graph
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.kernel import Form
from luminal.codegen.partition import lower
from luminal.codegen.window import windowed
from luminal.ir import DType, Tensor
from luminal.runtime.session import InferenceSession


def _rows_graph():
    """Rows 2 and 5 of x each through a contraction with a constant weight, and x whole through an exp."""
    rng = np.random.default_rng(0)
    x = Tensor.input("x", (8, 6, 16), DType.float32)
    w = Tensor.const(rng.standard_normal((16, 24)).astype(np.float32))
    r2 = x.shrink(((2, 3), (0, 6), (0, 16))).matmul(w).relu()
    r5 = x.shrink(((5, 6), (0, 6), (0, 16))).matmul(w).relu()
    return graph([x], [r2, r5, x.exp()])


def test_a_kernel_reading_rows_of_an_input_reads_its_window():
    _, kernels = lower(_rows_graph())
    mats = [k for k in kernels if k.form is Form.contraction]
    assert len(mats) == 2
    starts = []
    for k in mats:
        w, start = windowed(k)
        x = next(i for i, b in enumerate(k.inputs) if not b.constant)
        assert w.inputs[x].shape == (1, 6, 16) and k.inputs[x].shape == (8, 6, 16)
        assert all(b == k.inputs[i] for i, b in enumerate(w.inputs) if i != x)  # the weight stays whole
        assert all(s == 0 for i, s in enumerate(start) if i != x)
        starts.append(start[x])
    assert starts == [2 * 96, 5 * 96]
    # the two rows' kernels are one kernel once windowed, and one source
    a, b = (windowed(k)[0] for k in mats)
    assert a.canonical() == b.canonical()
    be = CPUBackend()
    assert be.source(mats[0], be.default_schedule(mats[0])) == be.source(mats[1], be.default_schedule(mats[1]))
    whole = [k for k in kernels if k.form is Form.elementwise]
    assert whole and all(windowed(k)[0] is k for k in whole)


@pytest.mark.parametrize("impl", ["generated", "blas"])
def test_windows_read_the_rows_they_stand_for(impl):
    g = _rows_graph()
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 6, 16)).astype(np.float32)}
    _, kernels = lower(g)
    be = CPUBackend()
    scheds = [{**be.default_schedule(k), "impl": impl} if k.form is Form.contraction else None for k in kernels]
    compare_cpu(g, feeds, 1e-5, 1e-5, schedules=scheds)


def _lstm_model(path, steps=12, hidden=16, size=8):
    """A bidirectional ONNX LSTM over x[steps, 1, size], saved at ``path``; its feeds."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.uniform(-0.3, 0.3, (2, 4 * hidden, size)), "r": rng.uniform(-0.3, 0.3, (2, 4 * hidden, hidden)),
             "b": rng.uniform(-0.1, 0.1, (2, 8 * hidden))}
    feeds = {"x": rng.standard_normal((steps, 1, size)).astype(np.float32)}
    node = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=hidden, direction="bidirectional")
    onnx.save(make_model(node, feeds, {k: v.astype(np.float32) for k, v in inits.items()}, opset=14), path)
    return feeds


def test_the_steps_of_a_recurrence_share_one_compiled_function(tmp_path):
    path = tmp_path / "lstm.onnx"
    feeds = _lstm_model(path)
    s = InferenceSession(str(path), backend="cpu")
    (got,), (want,) = s.run(None, feeds), run_ort(onnx.load(path), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    m = s.model
    steps = [c for k, c in zip(m.launched, m.compiled) if k.form is Form.contraction and k.full[0] == 1]
    assert len(steps) >= 20  # a product with the recurrent weight per step and direction
    # each step reads its own row of the inputs' projection: one function for them all, not one per step
    assert len({c.address for c in steps}) <= 2


def test_a_feed_read_in_place_through_a_window(tmp_path):
    """The launcher rebinds a feed read in place to each run's array: a window of it moves with it."""
    path = tmp_path / "sliced.onnx"
    inits = {"starts": np.array([3]), "ends": np.array([5]), "axes": np.array([0])}
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    onnx.save(make_model(nodes, {"x": np.zeros((7, 64), np.float32)}, inits, opset=13), path)
    s = InferenceSession(str(path), backend="cpu")
    (k,) = s.model.launched
    assert k.windowed[1] == (3 * 64,)
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal((7, 64)).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x[3:5], 0))


def test_the_steps_of_a_recurrence_are_one_kernel_to_tune(tmp_path):
    """Kernels alike but for where they read share a signature: the tuner times a direction's step product once,
    weighted by its steps (the directions read different rows of the constant recurrent weight, which stays
    whole), and the cache's winner is every step's."""
    import search_util as helpers

    from luminal.search.tuner import tune

    path = tmp_path / "lstm.onnx"
    _lstm_model(path)
    backend = helpers.FakeBackend(modes=("ok",), speeds=(1, 8), virtual=True)
    report = tune(path, backend, 120, cache=tmp_path / "tuning.db", storage=f"sqlite:///{tmp_path / 'studies.db'}",
                  sampler="grid", fusion=False, timeout_s=5.0, plan=helpers.PLAN, workers=1)
    steps = [k for k in report.kernels if k.form == "contraction" and k.count > 1]
    assert len(steps) == 2 and sum(k.count for k in steps) >= 20, [(k.form, k.count) for k in report.kernels]
    assert all(k.best_config == {"speed": 1, "mode": "ok"} for k in steps)
    # the model, whose steps bind one compiled kernel at different windows, verified and timed end to end
    assert report.e2e_default_ns is not None and report.e2e_tuned_ns is not None, report.notes
