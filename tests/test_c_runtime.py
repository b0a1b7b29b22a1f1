"""The cpu backend through the generic runtime: sample graphs end to end, and an ONNX model vs onnxruntime."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from sample_graphs import small_cnn, transformer_layer

from luminal.ir import run_reference
from luminal.runtime.compile import compile_graph


@pytest.mark.parametrize("build", [transformer_layer, small_cnn])
def test_sample_graphs_on_cpu(build):
    g = build()
    m = compile_graph(g, "cpu")
    x = np.random.default_rng(0).standard_normal(g.inputs[0].shape).astype(np.float32)
    name = g.inputs[0].attrs["name"]
    got, = m.run({name: x})
    want, = run_reference(g, {name: x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    got2, = m.run({name: x})
    np.testing.assert_array_equal(got, got2)


def test_onnx_gemm_conv_model_matches_onnxruntime():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from luminal.frontend_onnx import load

    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((8 * 5 * 5, 10)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["g"]),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    g = load(model, {}).graph
    got, = compile_graph(g, "cpu").run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bound_launch_mixes_c_and_blas_kernels_and_profiles_every_kernel(monkeypatch):
    """Runs of C kernels go through one call into C with prebuilt pointer arrays; a BLAS contraction in
    between and new inputs on every run must still give the reference; profiling times every kernel, the C
    kernels by the clock read between them in C, on perf_counter's clock, one after another in launch order."""
    import itertools
    import time

    from luminal.codegen.c.backend import CPUBackend, Launch
    from luminal.codegen.partition import partition

    g = transformer_layer()
    be = CPUBackend()
    kernels = partition(g, {})
    blas = [k.signature for k in kernels if k.form == "contraction"][1]
    m = compile_graph(g, be, schedules={blas: {**be.default_schedule(
        next(k for k in kernels if k.signature == blas)), "impl": "blas"}})
    assert any(type(c).__name__ == "BlasKernel" for c in m.compiled)
    name = g.inputs[0].attrs["name"]
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal(g.inputs[0].shape).astype(np.float32)
        got, = m.run({name: x})
        want, = run_reference(g, {name: x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    launch = m._launch
    assert isinstance(launch, Launch) and sum(ck is None for ck, _ in launch._steps) >= 2
    x = rng.standard_normal(g.inputs[0].shape).astype(np.float32)
    seconds = m.profile({name: x.astype(np.float64)}, repeats=2)
    assert len(seconds) == len(m.kernels) and all(t > 0 for t in seconds)
    monkeypatch.setattr(be, "launcher", None)  # spans come from the model's own launch
    before = time.perf_counter_ns()
    (run,) = m.spans({name: x}, 1)
    after = time.perf_counter_ns()
    assert len(run) == len(m.kernels) and all(d > 0 for _, d in run)
    assert before <= run[0][0] and run[-1][0] + run[-1][1] <= after
    assert all(s0 + d0 <= s1 for (s0, d0), (s1, _) in itertools.pairwise(run))
    got, = m.run({name: x.astype(np.float64)})  # cast on the way in
    np.testing.assert_allclose(got, run_reference(g, {name: x})[0], rtol=1e-4, atol=1e-4)


def test_kernel_called_with_new_buffers_uses_their_addresses():
    """A kernel reuses its pointer array only for the very same live buffers."""
    import gc

    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.partition import partition
    from luminal.ir import DType, Graph, Tensor, optimize

    x = Tensor.input("x", (33, 7), DType.float32)
    g = optimize(Graph([x.node], [x.mul(2.0).add(1.0).contiguous().node], ["y"]))
    (k,) = partition(g, {})
    be = CPUBackend()
    (ck,) = be.compile([(k, be.default_schedule(k))])
    rng = np.random.default_rng(0)
    for _ in range(4):
        a = be.from_numpy(rng.standard_normal((33, 7)).astype(np.float32))
        out = be.empty((33, 7), np.float32)
        ck([a, out])
        np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
        ck([a, out])  # the cached array
        np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
        del a, out
        gc.collect()


def _affinities() -> dict[int, set[int]]:
    """Each thread of this process's allowed CPUs (threads that end while they are read left out)."""
    out = {}
    for t in map(int, os.listdir("/proc/self/task")):
        with contextlib.suppress(OSError):
            out[t] = os.sched_getaffinity(t)
    return out


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="thread affinity is Linux's, and needs two CPUs")
def test_a_run_keeps_its_workers_off_the_callers_cpu():
    """A run sets the OpenMP team's other threads to the caller's CPUs but the one it runs on (a worker woken onto
    the caller's own vCPU took turns with it there); the caller's own affinity stays as it was."""
    from luminal.ir import DType, Graph, Tensor, optimize

    rng = np.random.default_rng(4)
    x = Tensor.input("x", (256, 256), DType.float32)
    w = Tensor.const(rng.standard_normal((256, 256)).astype(np.float32))
    g = optimize(Graph([x.node], [x.matmul(w).node], ["y"]))
    m = compile_graph(g, "cpu")
    assert max(s.get("threads", 1) for s in m.schedules) >= 2
    allowed = os.sched_getaffinity(0)
    before = _affinities()
    v = rng.standard_normal((256, 256)).astype(np.float32)
    got, = m.run({"x": v})
    np.testing.assert_allclose(got, run_reference(g, {"x": v})[0], rtol=1e-4, atol=1e-3)
    assert os.sched_getaffinity(0) == allowed
    after = _affinities()
    # the workers: each allowed every CPU of the caller's but one
    workers = {t for t, mask in after.items() if mask < allowed and len(mask) == len(allowed) - 1}
    assert workers
    # no other thread's affinity changed
    assert all(mask == before[t] for t, mask in after.items() if t in before and t not in workers)
