"""Shared helpers for the code generator tests: graphs from tensors, one mixed block of every kernel form,
and comparisons of the cpu backend's outputs with the reference executor."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from luminal.codegen.c.check import run_graph
from luminal.ir import DType, Graph, Tensor, optimize, run_reference


def graph(inputs: list[Tensor], outs: list[Tensor], names: list[str] | None = None) -> Graph:
    return optimize(Graph([t.node for t in inputs], [o.contiguous().node for o in outs],
                          names or [f"o{i}" for i in range(len(outs))]))


def fusion_block(seed: int = 0) -> Graph:
    """Matmul + bias + relu + softmax, layer norm, a transposed epilogue and a gather over one input:
    every kernel form, with many fusible edges."""
    rng = np.random.default_rng(seed)
    x = Tensor.input("x", (4, 6, 8), DType.float32)
    w = Tensor.const(rng.standard_normal((8, 5)).astype(np.float32))
    b = Tensor.const(rng.standard_normal((5,)).astype(np.float32))
    s = x.matmul(w).add(b).relu().softmax(-1)
    m = x.mean((-1,), keepdim=True)
    v = x.sub(m).square().mean((-1,), keepdim=True)
    ln = x.sub(m).mul(v.add(1e-5).rsqrt())
    t = ln.permute((0, 2, 1)).exp().add(1.0)
    idx = Tensor.const(np.array([3, 0, 7, 7, 1]))
    gth = x.gather(idx.reshape((1, 1, 5)).expand((4, 6, 5)), 2).tanh()
    return graph([x], [s, ln, t, gth], ["s", "ln", "t", "g"])


def assert_outputs(g: Graph, got, want, rtol: float, atol: float, scaled: bool = False) -> None:
    """Every output has the reference's shape, dtype and values: floats within rtol/atol (atol times the
    largest magnitude, at least 1, when ``scaled``), the others exactly."""
    for r, w, n, node in zip(got, want, g.output_names, g.outputs):
        w = w.reshape(node.shape)  # the reference returns 0-d outputs as shape (1,)
        assert r.dtype == w.dtype and r.shape == w.shape, n
        if node.dtype.is_float:
            w64 = w.astype(np.float64)
            tol = atol * max(1.0, float(np.abs(w64).max())) if scaled else atol
            np.testing.assert_allclose(r.astype(np.float64), w64, rtol=rtol, atol=tol, err_msg=n)
        else:
            np.testing.assert_array_equal(r, w, err_msg=n)


def compare_cpu(g: Graph, feeds: dict, rtol: float, atol: float, scaled: bool = False, **run) -> None:
    """The cpu backend (``run``: decisions, schedules, kernels for ``run_graph``) against the reference."""
    assert_outputs(g, run_graph(g, feeds, **run), run_reference(g, feeds), rtol, atol, scaled)


def random_schedules(backend, kernel, n: int, seed: int,
                     keep: Callable[[dict, list[dict]], bool] = lambda s, picked: True) -> list[dict]:
    """Up to ``n`` valid schedules drawn at random from ``backend``'s space for ``kernel``, each one ``keep``
    accepts given those picked before it."""
    rnd = random.Random(seed)
    picked: list[dict] = []
    for _ in range(5000):
        if len(picked) == n:
            break
        s = {kn.name: rnd.choice(kn.choices) for kn in backend.space(kernel)}
        if backend.valid(kernel, s) and keep(s, picked):
            picked.append(s)
    return picked
