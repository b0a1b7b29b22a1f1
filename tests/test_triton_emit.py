"""Triton kernels for every form, checked against the reference executor (interpret backend;
the same tests run on "cuda" where a GPU exists)."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_util import fusion_block, graph

from luminal.codegen.partition import partition
from luminal.codegen.triton import schedule as sched
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Graph, Tensor, run_reference
from luminal.runtime.compile import compile_graph


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


NO_GPU = pytest.mark.skipif(not _cuda(), reason="no CUDA GPU on this machine")
BACKENDS = ["interpret", pytest.param("cuda", marks=NO_GPU)]
TOL = {DType.float32: 2e-5, DType.float16: 3e-3, DType.bfloat16: 2e-2}


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def feeds_for(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in g.inputs:
        if n.dtype.is_float:
            out[n.attrs["name"]] = rng.standard_normal(n.shape).astype(n.dtype.np)
        elif n.dtype is DType.bool:
            out[n.attrs["name"]] = rng.random(n.shape) < 0.5
        else:
            out[n.attrs["name"]] = rng.integers(-5, 6, n.shape).astype(n.dtype.np)
    return out


def check(g: Graph, backend: str, feeds=None, schedules=None, decisions=None, rtol=None):
    feeds = feeds or feeds_for(g)
    model = compile_graph(g, backend, schedules=schedules, decisions=decisions)
    got = model.run(feeds)
    want = run_reference(g, feeds)
    for a, b, n in zip(got, want, g.outputs):
        b = b.reshape(n.shape)  # the reference returns 0-d outputs as shape (1,)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if n.dtype.is_float:
            tol = rtol or TOL[n.dtype]
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            np.testing.assert_allclose(a64, b64, rtol=tol, atol=tol * max(1.0, np.nanmax(np.abs(b64), initial=0)))
        else:
            np.testing.assert_array_equal(a, b)
    return model


# -- elementwise ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16])
def test_unary_chain_odd_size(backend, dtype):
    x = Tensor.input("x", (3, 37), dtype)
    y = x.mul(x).add(1.0)
    outs = [y.sqrt(), y.log(), x.sin(), x.exp(), y.recip(), x.tanh(), x.erf()]
    m = check(graph([x], outs), backend)
    assert all(k.form == "elementwise" for k in m.kernels)


def test_int_mod_cast_bool(backend):
    a = Tensor.input("a", (5, 7), DType.int64)
    b = Tensor.input("b", (5, 7), DType.int64)
    f = Tensor.input("f", (5, 7), DType.float32)
    p = Tensor.input("p", (5, 7), DType.bool)
    outs = [a.mod(b), f.mod(Tensor.const(np.float32(0.7))), f.mul(3.0).cast(DType.int32), f.cast(DType.bool),
            p.logical_not() | a.lt(b), p & f.gt(0.0), a.cast(DType.float16), p.cast(DType.float32),
            a.lt(b).where(a, b)]
    g = graph([a, b, f, p], outs)
    feeds = feeds_for(g)
    feeds["b"][0, :3] = 0  # integer mod by zero gives 0
    feeds["f"][1, :4] = [np.nan, np.inf, -np.inf, 3e5]  # casts of non-finite values
    check(g, backend, feeds)


def test_broadcast_every_axis(backend):
    x = Tensor.input("x", (1, 5, 1), DType.float32)
    y = Tensor.input("y", (4, 1, 3), DType.float32)
    s = Tensor.input("s", (), DType.float32)
    check(graph([x, y, s], [x.add(y).mul(s), y.sub(x)]), backend)


def test_strided_sliced_negative_step_permuted(backend):
    x = Tensor.input("x", (6, 9, 4), DType.float32)
    a = x.slice((5, 1, 0), (-2, 3, 1), (3, 3, 4))  # negative step and stride 3
    b = x.permute((2, 0, 1)).flip(2)
    c = x.transpose(0, 2).slice((0, 8, 0), (1, -1, 1), (4, 9, 6))
    check(graph([x], [a.exp(), b.add(1.0), c.mul(2.0)]), backend)


def test_padded_masked_views(backend):
    x = Tensor.input("x", (4, 5), DType.float32)
    p = x.pad(((1, 2), (3, 0)), 0.0)
    q = x.pad(((-1, 2), (2, -2)), 0.0)
    check(graph([x], [p.add(1.0), q.mul(x.sum((0, 1)).reshape((1, 1)).expand(q.shape))]), backend)


def test_size_one_and_scalar(backend):
    x = Tensor.input("x", (1, 1, 1), DType.float32)
    s = Tensor.input("s", (), DType.float32)
    check(graph([x, s], [x.exp(), s.mul(2.0), x.sum((1,))]), backend)


def test_iota_and_gather(backend):
    x = Tensor.input("x", (4, 6, 8), DType.float32)
    i = Tensor.input("i", (4, 6, 3), DType.int64)
    io = Tensor.iota((4, 6, 8), 2, DType.int64).cast(DType.float32)
    g = graph([x, i], [x.gather(i, 2).tanh(), x.add(io), x.argmax(2)])
    feeds = feeds_for(g)
    feeds["i"] = np.random.default_rng(1).integers(-2, 10, (4, 6, 3))  # out of range: clamped
    check(g, backend, feeds)


# -- reductions -----------------------------------------------------------------------
def _norms(dtype):
    x = Tensor.input("x", (5, 48), dtype)
    g = Tensor.const(np.linspace(0.5, 1.5, 48).astype(dtype.np))
    softmax = x.softmax(-1)
    m = x.mean((-1,), keepdim=True)
    v = x.sub(m).square().mean((-1,), keepdim=True)
    ln = x.sub(m).mul(v.add(1e-5).rsqrt()).mul(g)
    rms = x.mul(x.square().mean((-1,), keepdim=True).add(1e-6).rsqrt()).mul(g)
    return x, {"softmax": softmax, "layernorm": ln, "rmsnorm": rms}


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16])
@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("block", [None, 16])
def test_norms_in_one_kernel(backend, dtype, name, block):
    x, outs = _norms(dtype)
    g = graph([x], [outs[name]])
    kernels = partition(g)
    assert len(kernels) == 1 and kernels[0].form == "reduction"
    schedules = None
    if block:  # a row longer than the block: looped passes, several rows per program
        schedules = {kernels[0].signature: {"BLOCK": block, "ROWS": 2, "num_warps": 1}}
    check(g, backend, schedules=schedules)


def test_reductions_axes_ints_nan(backend):
    x = Tensor.input("x", (3, 4, 5), DType.float32)
    i = Tensor.input("i", (3, 4, 5), DType.int64)
    outs = [x.sum((0, 2)), x.max((1,)), i.sum((2,)), i.max((0, 1)), x.min((2,))]
    g = graph([x, i], outs)
    feeds = feeds_for(g)
    feeds["x"][1, 2, 3] = np.nan
    check(g, backend, feeds)


# -- contractions -----------------------------------------------------------------------
def _contraction(model) -> list:
    return [k for k in model.kernels if k.contraction is not None]


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16])
def test_matmul_shapes(backend, dtype):
    rng = np.random.default_rng(3)
    a = Tensor.input("a", (33, 20), dtype)
    b = Tensor.input("b", (20, 17), dtype)
    c = Tensor.input("c", (3, 5, 7), dtype)
    w = Tensor.const(rng.standard_normal((7, 1)).astype(dtype.np))
    v = Tensor.input("v", (20,), dtype)
    m = check(graph([a, b, c, v], [a.matmul(b), c.matmul(w), v.matmul(b), a.matmul(v)]), backend)
    assert len(_contraction(m)) >= 3


def test_batched_matmul_broadcast_batch(backend):
    a = Tensor.input("a", (2, 3, 9, 16), DType.float32)
    b = Tensor.input("b", (3, 16, 5), DType.float32)
    t = Tensor.input("t", (2, 3, 5, 16), DType.float32)
    m = check(graph([a, b, t], [a.matmul(b), a.matmul(t.transpose(-1, -2))]), backend)
    assert len(_contraction(m)) == 2


def test_gemm_bias_activation_epilogue(backend):
    rng = np.random.default_rng(4)
    x = Tensor.input("x", (10, 24), DType.float32)
    w = Tensor.const(rng.standard_normal((24, 40)).astype(np.float32))
    b = Tensor.const(rng.standard_normal((40,)).astype(np.float32))
    r = Tensor.input("r", (10, 40), DType.float32)
    y = x.matmul(w).add(b).relu().add(r)
    z = x.matmul(w).add(b).sigmoid()
    m = check(graph([x, r], [y, z]), backend)
    # CSE shares the matmul: one contraction kernel with both epilogues
    assert len(m.kernels) == 1 and len(_contraction(m)) == 1 and len(m.kernels[0].outputs) == 2


@pytest.mark.parametrize("cfg", [
    dict(group=1, strides=(1, 1), dil=(1, 1), pads=((1, 1), (1, 1))),
    dict(group=1, strides=(2, 2), dil=(1, 1), pads=((1, 0), (2, 1))),
    dict(group=2, strides=(1, 2), dil=(2, 1), pads=((2, 2), (0, 1))),
    dict(group=4, strides=(1, 1), dil=(1, 1), pads=((1, 1), (1, 1))),
])
def test_conv_implicit_gemm(backend, cfg):
    rng = np.random.default_rng(5)
    n, c, h, wd, m, k = 2, 4, 7, 6, 8, 3
    g = cfg["group"]
    x = Tensor.input("x", (n, c, h, wd), DType.float32)
    w = Tensor.const(rng.standard_normal((m, c // g, k, k)).astype(np.float32))
    outs = [(s + a + b - d * (k - 1) - 1) // st + 1
            for s, (a, b), d, st in zip((h, wd), cfg["pads"], cfg["dil"], cfg["strides"])]
    y = conv(x, w, g, cfg["strides"], cfg["dil"], list(cfg["pads"]), outs)
    model = check(graph([x], [y.relu()]), backend)
    assert len(_contraction(model)) == 1


@pytest.mark.parametrize("knobs", [
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 2, "num_stages": 2, "SPLIT_K": 1},
    {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4, "num_warps": 4, "num_stages": 3, "SPLIT_K": 4},
])
def test_contraction_schedules(backend, knobs):
    a = Tensor.input("a", (40, 96), DType.float32)
    b = Tensor.input("b", (96, 24), DType.float32)
    g = graph([a, b], [a.matmul(b)])
    k, = partition(g)
    assert sched.valid(k, knobs)
    check(g, backend, schedules={k.signature: knobs})


def test_contraction_fallback_integer(backend):
    a = Tensor.input("a", (4, 6), DType.int64)
    b = Tensor.input("b", (6, 3), DType.int64)
    check(graph([a, b], [a.matmul(b)]), backend)


# -- fusion decisions ---------------------------------------------------------------------
def test_random_fusion_decisions(backend):
    import random

    from luminal.codegen.partition import fusible_edges

    g = fusion_block(0)
    edges = fusible_edges(g)
    rnd = random.Random(7)
    trials = [{}, {e: False for e in edges}] + [{e: rnd.random() < 0.5 for e in edges} for _ in range(4)]
    counts = []
    for dec in trials:
        counts.append(len(check(g, backend, decisions=dec).kernels))
    assert counts[0] < counts[1]


def test_sources_hold_no_model_strings():
    x = Tensor.input("evil'); import os; os.system('x')#", (3, 4), DType.float32)
    g = graph([x], [x.exp().sum((1,))])
    from luminal.codegen.triton.emit import emit

    for k in partition(g):
        src = emit(k, sched.default(k))
        assert "evil" not in src and "os.system" not in src


def test_random_fusion_transformer_layer(backend):
    import random

    from sample_graphs import transformer_layer

    from luminal.codegen.partition import fusible_edges

    g = transformer_layer(seq=8, dim=16)
    edges = fusible_edges(g)
    rnd = random.Random(11)
    for dec in [{e: False for e in edges}] + [{e: rnd.random() < 0.5 for e in edges} for _ in range(2)]:
        check(g, backend, decisions=dec, rtol=1e-4)


def test_view_read_by_unravelled_linear_index(backend):
    # y is computed over (4, 6) and fused into a (2, 12) consumer that also reads t transposed:
    # t's view cannot be reshaped to the kernel's space, so the kernel unravels the linear index
    x = Tensor.input("x", (4, 6), DType.float32)
    t = Tensor.input("t", (12, 2), DType.float32)
    y = x.exp().reshape((2, 12)).add(t.transpose(0, 1)).mul(2.0)
    g = graph([x, t], [y])
    model = check(g, backend)
    assert len(model.kernels) == 1 and any(" // " in src for src in model.sources)


def test_bfloat16_products_take_the_native_dot_but_on_the_interpreter():
    from luminal.codegen.triton.backend import TritonKernel
    from luminal.codegen.triton.emit import emit

    a, b = Tensor.input("a", (32, 64), DType.bfloat16), Tensor.input("b", (64, 16), DType.bfloat16)
    k, = partition(Graph([a.node, b.node], [a.matmul(b).contiguous().node], ["y"]))
    s = sched.typed(k, sched.default(k))
    assert sched.constexprs(k, s)["NATIVE_DOT"] is True
    assert TritonKernel(k, s, interpret=True).constexprs["NATIVE_DOT"] is False
    assert "tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)" in emit(k, sched.default(k))
