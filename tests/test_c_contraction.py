"""Contraction kernels (packed GEMM micro-kernel with fused epilogue) against the reference executor."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from codegen_util import compare_cpu
from codegen_util import graph as _graph

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.contraction import ROWS_AHEAD, plan_contraction
from luminal.codegen.c.stencil import WEIGHT_MAX
from luminal.codegen.partition import partition
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Tensor, run_reference
from luminal.runtime.compile import compile_graph
from luminal.target import detect_target, host_simd_width

RNG = np.random.default_rng(5)


def _compare(g, feeds, rtol=2e-5, atol=2e-5, **run):
    compare_cpu(g, feeds, rtol, atol, scaled=True, **run)


def _contractions(g):
    ks = partition(g, {})
    return ks, [k for k in ks if k.form == "contraction"]


@pytest.mark.parametrize("m,k,n", [(1, 2, 1), (1, 9, 40), (7, 13, 5), (33, 70, 49), (96, 64, 130), (5, 300, 17)])
def test_matmul_sizes(m, k, n):
    a = Tensor.input("a", (m, k), DType.float32)
    b = Tensor.input("b", (k, n), DType.float32)
    g = _graph([a, b], [a.matmul(b)])
    ks, cs = _contractions(g)
    assert len(ks) == 1
    if m > 1 or n > 1:  # a dot product (1 x k x 1) is a plain reduction
        assert plan_contraction(cs[0]) is not None
    _compare(g, {"a": RNG.standard_normal((m, k)).astype(np.float32),
                 "b": RNG.standard_normal((k, n)).astype(np.float32)})


def test_bmm_broadcast_batch_and_transposes():
    a = Tensor.input("a", (3, 1, 20, 17), DType.float32)
    b = Tensor.input("b", (4, 23, 17), DType.float32)
    c = Tensor.input("c", (17, 20), DType.float32)
    outs = [a.matmul(b.transpose(-2, -1).reshape((1, 4, 17, 23)).expand((3, 4, 17, 23))),   # broadcast batch, B^T
            c.transpose(0, 1).matmul(b.shrink(((1, 2), (0, 23), (0, 17))).reshape((23, 17)).transpose(0, 1)),  # A^T B^T
            a.slice((2, 0, 19, 0), (-1, 1, -1, 1), (3, 1, 20, 17)).matmul(c)]                # reversed views
    g = _graph([a, b, c], outs)
    _, cs = _contractions(g)
    assert len(cs) == 3 and all(plan_contraction(k) is not None for k in cs)
    _compare(g, {"a": RNG.standard_normal((3, 1, 20, 17)).astype(np.float32),
                 "b": RNG.standard_normal((4, 23, 17)).astype(np.float32),
                 "c": RNG.standard_normal((17, 20)).astype(np.float32)})


def test_gemm_bias_relu_residual_epilogue_in_one_kernel():
    x = Tensor.input("x", (37, 64), DType.float32)
    w = Tensor.const(RNG.standard_normal((64, 50)).astype(np.float32))
    bias = Tensor.const(RNG.standard_normal(50).astype(np.float32))
    r = Tensor.input("r", (37, 50), DType.float32)
    y = x.matmul(w).add(bias.reshape((1, 50)).expand((37, 50))).relu().add(r)
    g = _graph([x, r], [y])
    ks, cs = _contractions(g)
    assert len(ks) == 1 and len(cs) == 1 and plan_contraction(cs[0]) is not None
    _compare(g, {"x": RNG.standard_normal((37, 64)).astype(np.float32),
                 "r": RNG.standard_normal((37, 50)).astype(np.float32)})


def _conv_out(size, k, stride, dil, pads):
    return (size + pads[0] + pads[1] - dil * (k - 1) - 1) // stride + 1


@pytest.mark.parametrize("cin,cout,group,ksz,stride,dil,pads", [
    (3, 8, 1, 3, 1, 1, (1, 1)),
    (4, 6, 2, 3, 2, 1, (1, 0)),
    (6, 6, 6, 3, 1, 2, (2, 2)),      # depthwise, dilated
    (5, 7, 1, 1, 1, 1, (0, 0)),      # 1x1
    (4, 4, 1, 5, 3, 1, (2, 1)),
])
def test_conv_implicit_gemm(cin, cout, group, ksz, stride, dil, pads):
    h, w_ = 11, 9
    x = Tensor.input("x", (2, cin, h, w_), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin // group, ksz, ksz)).astype(np.float32))
    outs = [_conv_out(h, ksz, stride, dil, pads), _conv_out(w_, ksz, stride, dil, pads)]
    y = conv(x, wt, group, [stride] * 2, [dil] * 2, [pads, pads], outs)
    bias = Tensor.const(RNG.standard_normal(cout).astype(np.float32))
    y = y.add(bias.reshape((1, cout, 1, 1)).expand(y.shape)).relu()
    g = _graph([x], [y])
    ks, cs = _contractions(g)
    assert len(cs) == 1 and plan_contraction(cs[0]) is not None
    feeds = {"x": RNG.standard_normal((2, cin, h, w_)).astype(np.float32)}
    _compare(g, feeds)
    be = CPUBackend()
    base = be.default_schedule(cs[0])
    # a grouped conv with few channels per group (here every grouped one), or one with a small weight (the
    # 1x1's 5 x 7), defaults to the stencil
    assert base["impl"] == ("stencil" if group > 1 or cin * ksz * ksz * cout <= WEIGHT_MAX else "generated")
    gemm = {**base, "impl": "generated"}
    vw = host_simd_width()
    other_nr = vw if base["nr"] > vw else 2 * vw  # another panel width
    for s in ({**gemm, "pack_a": True}, {**gemm, "pack_a": True, "kc": 128, "mr": 4, "nr": other_nr},
              {**gemm, "impl": "loops", "lanes": 16}):
        assert be.valid(cs[0], s)
        _compare(g, feeds, schedules=[s if k is cs[0] else None for k in ks], kernels=ks)


@pytest.mark.parametrize("hw,cout", [(7, 48), (3, 40), (16, 24)])
def test_a_conv_tiles_the_orientation_that_pads_less(hw, cout):
    """Output pixels fewer than a few tiles' NR would leave most lanes idle: the pixels then become the tiles'
    rows (A, packed per call) and the weight their columns (B, packed once), where that pads 10% less."""
    from luminal.codegen.c.contraction import TILE
    from luminal.target import host_simd_width as simd_width

    x = Tensor.input("x", (1, 8, hw, hw), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, 8, 3, 3)).astype(np.float32))
    y = conv(x, wt, 1, [1, 1], [1, 1], [(1, 1), (1, 1)], [hw, hw]).relu()
    g = _graph([x], [y])
    _, (c,) = _contractions(g)
    plan = plan_contraction(c)
    pixels, (mr, nr) = hw * hw, (TILE[0], TILE[1] * simd_width())

    def padded(rows, cols):
        return -(-rows // mr) * mr * -(-cols // nr) * nr / (rows * cols)

    as_rows = padded(pixels, cout) < padded(cout, pixels) / 1.1
    assert plan.sizes[1:3] == ((pixels, cout) if as_rows else (cout, pixels))
    assert plan.b_const == as_rows
    _compare(g, {"x": RNG.standard_normal((1, 8, hw, hw)).astype(np.float32)})


@pytest.mark.parametrize("dt", [DType.float16, DType.bfloat16])
def test_half_precision_matmul(dt):
    a = Tensor.input("a", (19, 40), dt)
    b = Tensor.input("b", (40, 21), dt)
    g = _graph([a, b], [a.matmul(b).add(1.0)])
    assert plan_contraction(_contractions(g)[1][0]) is not None
    _compare(g, {"a": RNG.standard_normal((19, 40)).astype(dt.np), "b": RNG.standard_normal((40, 21)).astype(dt.np)},
             rtol=2e-2, atol=2e-2)


def _random_valid(be, k, n: int, seed: int, first: list[dict]) -> list[dict]:
    """``first``, then random valid schedules of kernel ``k`` up to ``n`` in all."""
    rnd = random.Random(seed)
    out = list(first)
    while len(out) < n:
        s = {kn.name: rnd.choice(kn.choices) for kn in be.space(k)}
        if be.valid(k, s):
            out.append(s)
    return out


def test_random_valid_schedules_are_correct():
    be = CPUBackend()
    a = Tensor.input("a", (2, 45, 70), DType.float32)
    b = Tensor.input("b", (2, 70, 64), DType.float32)
    bias = Tensor.input("c", (64,), DType.float32)
    g = _graph([a, b, bias], [a.matmul(b).add(bias.reshape((1, 1, 64)).expand((2, 45, 64))).tanh()])
    ks = partition(g, {})
    (k,) = [k for k in ks if k.form == "contraction"]
    d = be.default_schedule(k)
    scheds = _random_valid(be, k, 14, 3, [d, {**d, "impl": "blas", "threads": 1}, {**d, "impl": "loops", "lanes": 16}])
    assert any(s["impl"] == "blas" for s in scheds) and any(not s["pack_b"] for s in scheds)
    assert any(not s["pack_a"] and s["impl"] == "generated" for s in scheds)
    assert be.valid(k, scheds[2]) and not be.valid(k, {**scheds[2], "kc": 128})  # loops have no GEMM knobs
    # with the library GEMM the generated kernel's knobs mean nothing: other values are not new points
    assert not be.valid(k, {**scheds[1], "mc": next(c for c in (24, 48) if c != scheds[1]["mc"])})
    feeds = {"a": RNG.standard_normal((2, 45, 70)).astype(np.float32),
             "b": RNG.standard_normal((2, 70, 64)).astype(np.float32), "c": RNG.standard_normal(64).astype(np.float32)}
    for s in scheds:
        _compare(g, feeds, schedules=[s if kk is k else None for kk in ks], kernels=ks)


def test_invalid_schedules_are_rejected():
    be = CPUBackend()
    a = Tensor.input("a", (9, 10), DType.float32)
    b = Tensor.input("b", (10, 11), DType.float32)
    (k,) = partition(_graph([a, b], [a.matmul(b)]), {})
    s = be.default_schedule(k)
    assert be.valid(k, s)
    vw = host_simd_width()
    assert not be.valid(k, {**s, "mr": 12, "nr": 4 * vw})      # too many registers, whatever the vector width
    assert not be.valid(k, {**s, "mr": 9})                     # not a choice
    assert not be.valid(k, {**s, "impl": "generated", "lanes": 16})  # lanes mean nothing to a GEMM
    assert not be.valid(k, {**s, "bogus": 1})


def _schedules(be, k):
    base = be.default_schedule(k)
    out = [base]
    for over in ({"nr": base["nr"] // 2, "mr": 4}, {"nr": 2 * base["nr"], "mr": 4, "kc": 128}):
        s = {**base, **over, "pack_b": True}
        if be.valid(k, s):
            out.append(s)
    return out


@pytest.mark.parametrize("flip,pads,ow", [(True, (2, 1, 1, 3), 3), (False, (0, 4, 3, 0), 2), (True, (1, 1, 1, 1), 7)])
def test_conv_packing_over_flipped_padded_views(flip, pads, ow):
    """B panels pack by row segments of the innermost N dim: rows shorter than a panel, negative steps and
    padding masks on both sides must give the reference's values."""
    x = Tensor.input("x", (2, 3, 7, 5), DType.float32)
    v = x.flip(3) if flip else x
    v = v.pad(((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    h, w_ = v.shape[2], v.shape[3]
    stride = max(1, (w_ - 3) // max(1, ow - 1)) if ow > 1 else 1
    ow = (w_ - 3) // stride + 1
    oh = h - 2
    wt = Tensor.const(RNG.standard_normal((5, 3, 3, 3)).astype(np.float32))
    y = conv(v, wt, 1, [1, stride], [1, 1], [(1, 1), (0, 0)], [oh + 2, ow])
    g = _graph([x], [y.tanh()])
    ks, cs = _contractions(g)
    assert len(cs) == 1 and plan_contraction(cs[0]) is not None
    feeds = {"x": RNG.standard_normal((2, 3, 7, 5)).astype(np.float32)}
    be = CPUBackend()
    for s in _schedules(be, cs[0]):
        _compare(g, feeds, schedules=[s if k is cs[0] else None for k in ks], kernels=ks)


def test_matmul_packing_over_negative_step_padded_and_broadcast_views():
    a = Tensor.input("a", (3, 17, 40), DType.float32)
    b = Tensor.input("b", (40, 30), DType.float32)
    bv = b.flip(1).pad(((0, 0), (2, 3))).slice((0, 34), (1, -1), (40, 35))  # padded, reversed twice
    c = Tensor.input("c", (40, 1), DType.float32)
    cv = c.expand((40, 6))  # stride 0 along N
    g = _graph([a, b, c], [a.matmul(bv.unsqueeze((0,)).expand((3, 40, 35))), a.matmul(cv.pad(((0, 0), (1, 0))))])
    ks, cs = _contractions(g)
    assert len(cs) == 2 and all(plan_contraction(k) is not None for k in cs)
    feeds = {"a": RNG.standard_normal((3, 17, 40)).astype(np.float32),
             "b": RNG.standard_normal((40, 30)).astype(np.float32),
             "c": RNG.standard_normal((40, 1)).astype(np.float32)}
    be = CPUBackend()
    for i in range(3):
        scheds = [(_schedules(be, k) + [be.default_schedule(k)] * 3)[i] if k in cs else None for k in ks]
        _compare(g, feeds, schedules=scheds, kernels=ks)


@pytest.mark.parametrize("weight", [True, False])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_few_rows_against_an_operand_laid_out_n_by_k(sixteen_lanes, m, weight):
    """A few rows times a transposed operand (a classifier, a conv over a 1x1 map). A weight stays B, packed once, in
    tiles about as high as the rows there are (8 where 16-lane registers hold them); another operand becomes the
    in-place A and the rows the packed B, including N = 1."""
    x = Tensor.input("x", (m, 40), DType.float32)
    w = Tensor.const(RNG.standard_normal((37, 40)).astype(np.float32)) if weight else \
        Tensor.input("w", (37, 40), DType.float32)
    bias = Tensor.const(RNG.standard_normal(37).astype(np.float32))
    y = x.matmul(w.transpose(0, 1)).add(bias.reshape((1, 37)).expand((m, 37))).relu()
    g = _graph([x] if weight else [x, w], [y])
    ks, cs = _contractions(g)
    plan = plan_contraction(cs[0])
    be = CPUBackend()
    if weight:
        assert plan.sizes[1] == m and plan.sizes[2] == 37 and plan.b_const
        assert be.default_schedule(cs[0])["mr"] == {1: 1, 3: 4, 8: 8}[m]
    else:
        assert plan.sizes[1] == 37 and plan.sizes[2] == m and plan.a_direct
    feeds = {"x": RNG.standard_normal((m, 40)).astype(np.float32)}
    if not weight:
        feeds["w"] = RNG.standard_normal((37, 40)).astype(np.float32)
    for s in [*_schedules(be, cs[0]), {**be.default_schedule(cs[0]), "impl": "blas"}]:
        _compare(g, feeds, schedules=[s if k is cs[0] else None for k in ks], kernels=ks)


@pytest.mark.parametrize("m,k,n,transposed", [(128, 96, 80, False), (40, 33, 17, True), (300, 40, 64, False)])
def test_constant_weight_packed_once_per_weight(m, k, n, transposed):
    """A weight B is packed on the first call into panels the kernel keeps; later calls (new A) reuse them, and
    the same compiled kernel called with another weight packs that one."""
    from luminal.codegen.c.backend import _PANELS
    from luminal.codegen.c.contraction import packed_b
    from luminal.codegen.c.knobs import GemmSchedule
    from luminal.ir import run_reference

    w = RNG.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    x = Tensor.input("x", (m, k), DType.float32)
    wt = Tensor.const(w)
    y = x.matmul(wt.transpose(0, 1) if transposed else wt).relu()
    g = _graph([x], [y])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    sched = {**be.default_schedule(c), "pack_b": True}
    assert c.inputs[c.ops[plan_contraction(c).b].attr("buf")].constant
    bi, floats, _ = packed_b(c, GemmSchedule(**sched))
    assert floats >= k * n
    (ck,) = be.compile([(c, sched)])
    out = np.empty((m, n), np.float32)
    weights = {"w1": w, "w2": RNG.standard_normal(w.shape).astype(np.float32)}
    for name in ("w1", "w1", "w2", "w1"):
        xv = RNG.standard_normal((m, k)).astype(np.float32)
        ins = [xv if i != bi else weights[name] for i in range(len(c.inputs))]
        ck([*ins, out])
        want = np.maximum(xv @ (weights[name].T if transposed else weights[name]), 0)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    # one set of panels per weight, filled once
    for name in ("w1", "w2"):
        ((panels, filled),) = _PANELS[id(weights[name])].values()
        assert filled[0] == 1 and panels.size == floats
    w1_panels = _PANELS[id(weights["w1"])]
    # another schedule with the same panel width reads the panels the first one filled for w1
    (ck2,) = be.compile([(c, {**sched, "mc": 24 if sched["mc"] != 24 else 48, "kc": 128})])
    xv = RNG.standard_normal((m, k)).astype(np.float32)
    ck2([xv if i != bi else weights["w1"] for i in range(len(c.inputs))] + [out])
    np.testing.assert_allclose(out, np.maximum(xv @ (w.T if transposed else w), 0), rtol=1e-4, atol=1e-4)
    assert _PANELS[id(weights["w1"])] is w1_panels and len(w1_panels) == 1
    compare_cpu(g, {"x": RNG.standard_normal((m, k)).astype(np.float32)}, 1e-4, 1e-4, scaled=True,
                schedules=[sched if kk is c else None for kk in ks], kernels=ks)
    assert run_reference(g, {"x": np.zeros((m, k), np.float32)})[0].shape == (m, n)


@pytest.mark.parametrize("stride,dtype", [(1, DType.float32), (2, DType.float32), (1, DType.float16)])
def test_conv_rows_wider_than_a_panel(stride, dtype):
    """Rows of 40 outputs hold whole panels (one fixed-length copy each) next to panels cut by the padding
    or by a row end."""
    x = Tensor.input("x", (1, 4, 6, 80 if stride == 2 else 40), dtype)
    wt = Tensor.const(RNG.standard_normal((6, 4, 3, 3)).astype(dtype.np))
    y = conv(x, wt, 1, [1, stride], [1, 1], [(1, 1), (1, 1)], [6, 40])
    g = _graph([x], [y.relu()])
    ks, cs = _contractions(g)
    assert len(cs) == 1 and plan_contraction(cs[0]) is not None
    feeds = {"x": RNG.standard_normal(x.shape).astype(dtype.np)}
    be = CPUBackend()
    for s in _schedules(be, cs[0]):
        s = {**s, "pack_b": True}  # packed (tests/test_c_direct_conv.py reads such windows in place)
        tol = 2e-5 if dtype is DType.float32 else 2e-2
        _compare(g, feeds, rtol=tol, atol=tol, schedules=[s if k is cs[0] else None for k in ks], kernels=ks)


def test_schedules_past_the_sizes_run_the_same_code():
    """Row blocks past M, K blocks past K and thread counts of a loop without a parallel region are one point to
    the search; a different micro-kernel is not."""
    x = Tensor.input("x", (40, 200), DType.float32)
    g = _graph([x], [x.matmul(Tensor.const(RNG.standard_normal((200, 64)).astype(np.float32))).relu()])
    (k,) = _contractions(g)[1]
    be = CPUBackend()
    base = {**be.default_schedule(k), "mr": 6, "nr": 16, "mc": 48, "nc": 64, "kc": 256, "threads": 2}
    same = [{**base, "mc": 96}, {**base, "mc": 288}, {**base, "kc": 0}, {**base, "kc": 512}, {**base, "nc": 128}]
    other = [{**base, "mr": 4}, {**base, "threads": 1}, {**base, "kc": 128}, {**base, "mc": 24}]
    assert all(be.valid(k, s) for s in same + other)
    assert {be.identity(k, s) for s in same} == {be.identity(k, base)}
    assert len({be.identity(k, s) for s in other} | {be.identity(k, base)}) == len(other) + 1
    y = Tensor.input("y", (3, 4), DType.float32)
    (ew,) = partition(_graph([y], [y.exp()]), {})
    one, two = ({**be.default_schedule(ew), "threads": t} for t in (1, 2))
    assert be.identity(ew, one) == be.identity(ew, two)  # too small for a parallel region either way


def test_int32_products_run_as_an_exact_gemm():
    """Quantised models multiply widened 8-bit values: the C GEMM takes int32 and every schedule is exact."""
    rng = np.random.default_rng(4)
    a = Tensor.input("a", (2, 16, 64), DType.int32)
    c = Tensor.input("c", (40,), DType.int32)
    w = Tensor.const(rng.integers(-128, 128, (64, 40)).astype(np.int32))
    g = _graph([a, c], [a.matmul(w).add(c.reshape((1, 1, 40)).expand((2, 16, 40)))])
    (k,) = partition(g, {})
    assert plan_contraction(k) is not None
    be = CPUBackend()
    assert "blas" not in next(kn.choices for kn in be.space(k) if kn.name == "impl")
    scheds = _random_valid(be, k, 10, 1, [be.default_schedule(k), {**be.default_schedule(k), "impl": "loops"}])
    feeds = {"a": rng.integers(-255, 256, (2, 16, 64)).astype(np.int32),
             "c": rng.integers(-1000, 1000, 40).astype(np.int32)}
    want = run_reference(g, feeds)[0]
    for s in scheds:
        got = compile_graph(g, be, schedules={k.signature: s}).run(feeds)[0]
        assert got.dtype == np.int32 and np.array_equal(got, want), s


@pytest.mark.parametrize("stride,dil,pads,width", [(1, 1, (1, 1), 40), (2, 1, (1, 0), 67), (1, 2, (2, 2), 36)])
def test_depthwise_conv_loops_over_wide_rows(stride, dil, pads, width):
    """Rows wide enough that the loops copy each padded window row into an array between mask bounds."""
    c = 5
    x = Tensor.input("x", (1, c, 9, width), DType.float32)
    wt = Tensor.const(RNG.standard_normal((c, 1, 3, 3)).astype(np.float32))
    outs = [_conv_out(9, 3, stride, dil, pads), _conv_out(width, 3, stride, dil, pads)]
    g = _graph([x], [conv(x, wt, c, [stride] * 2, [dil] * 2, [pads, pads], outs).relu()])
    ks, cs = _contractions(g)
    be = CPUBackend()
    loops = {**be.default_schedule(cs[0]), "impl": "loops"}
    assert be.valid(cs[0], loops) and outs[1] >= 32
    src = be.source(cs[0], loops)
    assert "s0[j]" in src or "s1[j]" in src  # a staged window row
    feeds = {"x": RNG.standard_normal((1, c, 9, width)).astype(np.float32)}
    for lanes in (16, 64, 256):
        s = {**loops, "lanes": lanes}
        _compare(g, feeds, schedules=[s if k is cs[0] else None for k in ks], kernels=ks)


def test_an_output_of_short_inner_runs_tiles_the_other_way():
    """A 2x2 stride-2 ConvTranspose writes y[n, m, i, p, j, q] with q of 2 innermost: with the weight's (m, p, q)
    as columns every tile row would store runs of 2; the pixels (i, j) become the columns instead, read in place."""
    from luminal.frontend_onnx.ops_nn_conv import _conv_transpose_phases

    x = Tensor.input("x", (1, 8, 20, 20), DType.float32)
    wt = Tensor.const(RNG.standard_normal((8, 6, 2, 2)).astype(np.float32))
    y = _conv_transpose_phases(x, wt, 1, [2, 2], [(0, 0), (0, 0)], [40, 40]).relu()
    g = _graph([x], [y])
    _, (c,) = _contractions(g)
    plan = plan_contraction(c)
    assert plan.sizes[1:] == (6 * 4, 20 * 20, 8) and plan.b_direct
    _compare(g, {"x": RNG.standard_normal((1, 8, 20, 20)).astype(np.float32)})


def test_the_thread_count_of_a_contraction_is_its_schedules():
    """A thread per GRAIN operations by default: 1000x2048 times a vector (2M multiply-adds, 8 MB of weight) and
    a 48x256 weight times a 256x169 map (2M) on every thread, 10x64 times a vector on one; and whatever the
    default, the schedule's count is the one the kernel runs on, so the search can take either."""
    from luminal.codegen.c.backend import source

    x = Tensor.input("x", (1, 2048), DType.float32)
    m = Tensor.input("m", (256, 169), DType.float32)
    w = Tensor.const(RNG.standard_normal((1000, 2048)).astype(np.float32))
    small = Tensor.const(RNG.standard_normal((10, 64)).astype(np.float32))
    mid = Tensor.const(RNG.standard_normal((48, 256)).astype(np.float32))
    g = _graph([x, m], [x.matmul(w.permute([1, 0])), x.shrink([(0, 1), (0, 64)]).matmul(small.permute([1, 0])),
                        mid.matmul(m)])
    _, (big, tiny, med) = _contractions(g)
    be = CPUBackend(replace(detect_target("cpu"), threads=2))
    assert [be.default_schedule(k)["threads"] for k in (big, tiny, med)] == [2, 1, 2]
    for k in (big, tiny, med):
        for threads in (1, 2):
            sched = {**be.default_schedule(k), "impl": "generated", "threads": threads}
            assert be.valid(k, sched)
            assert "if(0)" not in source(k, sched, 2)
            assert be.compile([(k, sched)])[0].threads == threads
    gen = {**be.default_schedule(tiny), "impl": "generated"}
    assert be.identity(tiny, {**gen, "threads": 2}) != be.identity(tiny, gen)
    _compare(g, {"x": RNG.standard_normal((1, 2048)).astype(np.float32),
                 "m": RNG.standard_normal((256, 169)).astype(np.float32)})


def test_a_product_of_one_row_takes_a_second_thread_at_half_the_grain_and_splits_its_columns_statically():
    """A recurrence's step: one row against a 256 -> 512 weight (3 x 131072 operations, short of two grains) runs
    on two threads, each reading the same columns of the weight at every call; a product of more rows takes its
    tiles by shares a thread may take over."""
    from luminal.codegen.c import schedule
    from luminal.codegen.c.backend import source

    w = Tensor.const(RNG.standard_normal((512, 256)).astype(np.float32))
    xs = [Tensor.input(f"x{rows}", (rows, 256), DType.float32) for rows in (1, 4)]
    g = _graph(xs, [x.matmul(w.permute([1, 0])) for x in xs])
    _, (one, four) = _contractions(g)
    assert one.flops + math.prod(one.full) < 2 * schedule.GRAIN
    be = CPUBackend(replace(detect_target("cpu"), threads=2))
    assert [be.default_schedule(k)["threads"] for k in (one, four)] == [2, 2]
    assert "schedule(static)" in source(one, be.default_schedule(one), 2)
    assert "schedule(static)" not in source(four, be.default_schedule(four), 2)
    _compare(g, {f"x{rows}": RNG.standard_normal((rows, 256)).astype(np.float32) for rows in (1, 4)})


@pytest.mark.parametrize("n,stride,weight_input,ksz", [(1, 1, False, 1), (2, 2, False, 1), (1, 1, True, 1),
                                                     (3, 1, True, 1), (2, 1, True, 3)])
def test_a_tile_whose_rows_walk_the_output_stores_transposed(n, stride, weight_input, ksz):
    """An NCHW conv with its pixels as the tile's rows: a row's columns (output channels) lie a channel plane
    apart in the output, so the tile is transposed before its epilogue, which stores along the pixels (runs of
    the innermost output dim where the pixels do not merge: stride 2, rows of 17). Random schedules of both
    orientations, packed or not, a weight that is an input (read by runs of its output channels, padded to whole panels,
    whose columns past the channels hold no output) and a residual epilogue, against the reference."""
    from luminal.codegen.c.backend import source

    cin, cout, h, w_ = 24, 40, 9, 34
    oh, ow = -(-h // stride), -(-w_ // stride)
    x = Tensor.input("x", (n, cin, h, w_), DType.float32)
    wt = (Tensor.input("w", (cout, cin, ksz, ksz), DType.float32) if weight_input
          else Tensor.const(RNG.standard_normal((cout, cin, ksz, ksz)).astype(np.float32)))
    r = Tensor.input("r", (n, cout, oh, ow), DType.float32)
    y = conv(x, wt, 1, [stride] * 2, [1, 1], [(ksz // 2, ksz // 2)] * 2, [oh, ow]).add(r).relu()
    g = _graph([x, r, wt] if weight_input else [x, r], [y])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    first = [{**be.default_schedule(c), "impl": "generated", "swap": s, "pack_a": True} for s in (False, True)]
    picked = _random_valid(be, c, 12, n, [s for s in first if be.valid(c, s)])
    rows_are_pixels = [s for s in picked if s["impl"] == "generated"
                       and plan_contraction(c, bool(s["swap"])).sizes[2] == cout]
    assert rows_are_pixels and all("lum_tr(ct" in source(c, s, 2) for s in rows_are_pixels)
    assert any("lum_tr(ct" not in source(c, s, 2) for s in picked if s["impl"] == "generated")
    if ksz == 3:  # A from its padded copy takes B's packed panels, not B by runs
        halo = {**rows_are_pixels[0], "pack_a": False, "pack_b": True}
        assert plan_contraction(c, bool(halo["swap"])).a_halo is not None
        assert be.valid(c, halo) and not be.valid(c, {**halo, "pack_b": False})
        picked.append(halo)
    feeds = {"x": RNG.standard_normal((n, cin, h, w_)).astype(np.float32),
             "r": RNG.standard_normal((n, cout, oh, ow)).astype(np.float32)}
    if weight_input:
        feeds["w"] = RNG.standard_normal((cout, cin, ksz, ksz)).astype(np.float32)
    for s in picked:
        _compare(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw", [(64, 96, 7), (24, 20, 16), (16, 32, 14)])
def test_7_row_tiles_where_they_pad_less_than_6_and_8(sixteen_lanes, cin, cout, hw):
    """On 16-lane vectors, a 7x7 map's 49 pixels fill 7 panels of 7 rows, against 9 of 6 or 7 of 8; 20 channels as rows
    fill 3 of 7. The default takes 7 rows there (and 6 or 8 elsewhere: 14x14's 196 pixels are 28 panels of 7, 33 of 6);
    a row block of 7-row panels is its MC rounded down to them, so every MC of the space is valid with MR 7."""
    x = Tensor.input("x", (1, cin, hw, hw), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    r = Tensor.input("r", (1, cout, hw, hw), DType.float32)
    y = conv(x, wt, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [hw, hw]).add(r).relu()
    g = _graph([x, r], [y])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    m = plan_contraction(c, bool(d.get("swap"))).sizes[1]
    pads = {mr: -(-m // mr) * mr for mr in (6, 7, 8)}
    assert d["impl"] == "generated" and (d["mr"] == 7) == (pads[7] < min(pads[6], pads[8])) == (m in (49, 20, 196))
    scheds = [d] + [{**d, "mr": 7, "mc": mc, "pack_a": pa} for mc in (24, 48, 72, 96) for pa in (True, False)]
    scheds = [s for s in scheds if be.valid(c, s)]
    assert len(scheds) >= 5
    feeds = {"x": RNG.standard_normal((1, cin, hw, hw)).astype(np.float32),
             "r": RNG.standard_normal((1, cout, hw, hw)).astype(np.float32)}
    for s in scheds:
        _compare(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("hw,nr", [(13, 16), (16, 32), (20, 32)])
def test_one_vector_tiles_where_they_pad_the_packed_columns_less(sixteen_lanes, hw, nr):
    """On 16-lane vectors, a 1x1 conv whose pixels are B's columns, packed on every call (K and M too large to read B
    in place), takes 8 x 16 tiles where panels of one vector pad them at least 5% less than panels of two: 13x13's
    169 pixels in 176 columns, not 192; 16x16's 256 and 20x20's 400 (416 in 16s) stay in 32s."""
    x = Tensor.input("x", (1, 288, hw, hw), DType.float32)
    wt = Tensor.const(RNG.standard_normal((136, 288, 1, 1)).astype(np.float32))
    g = _graph([x], [conv(x, wt, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [hw, hw]).relu()])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    plan = plan_contraction(c, bool(d.get("swap")))
    assert plan.sizes[2] == hw * hw and d["pack_b"] and d["nr"] == nr and (nr == 32 or d["mr"] == 8)
    feeds = {"x": RNG.standard_normal((1, 288, hw, hw)).astype(np.float32)}
    _compare(g, feeds, schedules=[d if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("n,cin,cout,h,w", [(1, 40, 20, 13, 13), (1, 16, 40, 5, 5), (1, 12, 24, 1, 19)])
def test_a_1x1_convs_input_read_in_place_where_its_pixels_do_not_fill_whole_panels(n, cin, cout, h, w):
    """A 1x1 conv's input is B read in place (its pixels contiguous), once only where they fill whole panels,
    else packed on every call; now one run, as a conv's rows, whose last panel the end of the input cuts (read
    in place where NR columns past it lie in the input, else copied between zeros). The default reads it in
    place (169, 25 and 19 pixels); every schedule that does, against the reference, with a residual epilogue."""
    from codegen_util import random_schedules

    x = Tensor.input("x", (n, cin, h, w), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    r = Tensor.input("r", (n, cout, h, w), DType.float32)
    g = _graph([x, r], [conv(x, wt, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [h, w]).add(r).relu()])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    plan = plan_contraction(c, bool(d.get("swap")))
    assert plan.b_direct and plan.sizes[2] == h * w and plan.sizes[2] % d["nr"]
    assert d["impl"] == "generated" and not d["pack_b"]
    scheds = random_schedules(be, c, 24, seed=n + cin, keep=lambda s, _: not s["pack_b"] and s["impl"] == "generated"
                              and not s.get("swap"))
    assert {s["nr"] for s in scheds} >= {host_simd_width(), 2 * host_simd_width()}
    feeds = {"x": RNG.standard_normal((n, cin, h, w)).astype(np.float32),
             "r": RNG.standard_normal((n, cout, h, w)).astype(np.float32)}
    for s in [d, *scheds]:
        _compare(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw", [(64, 32, 14), (24, 40, 7), (33, 20, 9)])
def test_a_1x1_conv_over_a_channels_last_input_reads_it_in_place_against_the_weight_packed_once(cin, cout, hw):
    """A 1x1 conv whose input has its channels innermost (a block output kept channels-last by the kernel that
    wrote it): with the pixels as the columns each would be gathered across the channels on every call, one
    float per cache line; the pixels become the rows instead, read in place, and the weight the B packed once."""
    x = Tensor.input("x", (1, hw, hw, cin), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    y = conv(x.permute((0, 3, 1, 2)), wt, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [hw, hw]).relu()
    g = _graph([x], [y])
    ks, (c,) = _contractions(g)
    plan = plan_contraction(c)
    assert plan.sizes[1:] == (hw * hw, cout, cin) and plan.a_direct and plan.b_const
    other = plan_contraction(c, True)
    assert not other.b_direct and not other.b_const
    feeds = {"x": RNG.standard_normal((1, hw, hw, cin)).astype(np.float32)}
    be = CPUBackend()
    for s in (be.default_schedule(c), {**be.default_schedule(c), "swap": True, "pack_a": False, "pack_b": True}):
        _compare(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_every_tile_runs_once_whichever_thread_takes_it(threads):
    """The tiles are split into contiguous shares, one per thread, each taken first by its own thread and what is
    left of it by the others: with more threads than tiles, shares of one tile and empty ones, and more threads
    than cores (threads that arrive late), each tile is computed exactly once."""
    from luminal.codegen.c.backend import source

    x = Tensor.input("x", (40, 96), DType.float32)
    w = Tensor.const(RNG.standard_normal((96, 70)).astype(np.float32))
    g = _graph([x], [x.matmul(w).relu()])
    ks, (c,) = _contractions(g)
    be = CPUBackend(replace(detect_target("cpu"), threads=threads))
    d = be.default_schedule(c)
    for mc, nc in ((48, 64), (24, 32), (1, 1)):  # 8 lanes: 2 tiles, 6 and 35; 16: 2, 6 and 15
        s = {**d, "mc": max(mc // d["mr"], 1) * d["mr"], "nc": max(nc // d["nr"], 1) * d["nr"]}
        assert "lum_next" in source(c, s, threads)
        for _ in range(3):
            _compare(g, {"x": RNG.standard_normal((40, 96)).astype(np.float32)}, schedules=[s], kernels=ks,
                     backend=be)


@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("rows", [10, 40])
def test_packed_a_panels_found_in_each_threads_own_buffer(threads, rows):
    """Each thread packs its contiguous share of A's panels (batches x row panels) into a buffer of its own and
    the tiles find panel p in its packer's: shares of uneven sizes, empty ones (more threads than panels), and
    tiles that a thread takes over from another's share read the other's buffer; against the reference, several
    calls (the buffers reused)."""
    from luminal.codegen.c.backend import source

    x = Tensor.input("x", (3, rows, 96), DType.float32)
    w = Tensor.input("w", (3, 96, 70), DType.float32)
    g = _graph([x, w], [x.matmul(w)])
    ks, (c,) = _contractions(g)
    be = CPUBackend(replace(detect_target("cpu"), threads=threads))
    d = be.default_schedule(c)
    for s in ({**d, "pack_a": True, "mr": 6, "mc": 6}, {**d, "pack_a": True, "mr": 4, "mc": 48, "nc": d["nr"]}):
        assert "lum_panel(lum_pa, lum_plo" in source(c, s, threads)
        for _ in range(3):
            feeds = {"x": RNG.standard_normal((3, rows, 96)).astype(np.float32),
                     "w": RNG.standard_normal((3, 96, 70)).astype(np.float32)}
            _compare(g, feeds, schedules=[s], kernels=ks, backend=be)


@pytest.mark.parametrize("cin", [64, 200])
def test_b_read_in_place_asks_for_rows_ahead_in_long_k_blocks(cin):
    """A 1x1 conv's input read in place is one row per K step, each a row stride apart: in a K block of at
    least eight times ``ROWS_AHEAD`` rows the micro-kernel asks for the row that far on (past the block's end
    too, where its last rows are computed), in shorter blocks not; either way its results are the reference's."""
    x = Tensor.input("x", (1, cin, 12, 12), DType.float32)
    wt = Tensor.const(RNG.standard_normal((40, cin, 1, 1)).astype(np.float32))
    g = _graph([x], [conv(x, wt, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [12, 12]).relu()])
    ks, (c,) = _contractions(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    assert not d["pack_b"] and d["impl"] == "generated"
    feeds = {"x": RNG.standard_normal((1, cin, 12, 12)).astype(np.float32)}
    for kc in (0, 64, 128, 256):
        s = {**d, "kc": kc}
        assert be.valid(c, s)
        block = min(kc or cin, cin)
        assert (f"br + {ROWS_AHEAD}*ldb" in be.source(c, s)) == (block >= 8 * ROWS_AHEAD), (kc, block)
        _compare(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)
