"""GEMMs whose whole K is one KC step (1x1 convolutions over few input channels): each NR panel's epilogue runs
right after the panel, and the default reads the conv's input in place whatever the number of output channels,
in 8-row tiles. Against the reference executor."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_util import compare_cpu, graph, random_schedules
from test_c_direct_conv import _conv_graph, _the_conv

from luminal.codegen.c import schedule
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.check import run_graph
from luminal.codegen.c.contraction import plan_contraction
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Tensor, run_reference
from luminal.target import host_simd_width

NOPAD = ((0, 0), (0, 0))
RNG = np.random.default_rng(31)
PER_PANEL = "lum_epilogue(b, ct + jr * "  # the epilogue call inside the panel loop


def _1x1(n: int, cin: int, cout: int, hw: tuple[int, int], epilogue: str = "relu", stride: int = 1,
         dtype: DType = DType.float32):
    return _conv_graph(n, cin, cout, hw, k=1, stride=(stride, stride), pads=NOPAD, epilogue=epilogue, dtype=dtype)


def _schedules(be: CPUBackend, c) -> list[dict]:
    """The default GEMM, and tiles, blocks and K steps around it (K in one step or several); a conv with a weight
    this small defaults to the stencil (``stencil.WEIGHT_MAX``)."""
    vw = host_simd_width()
    base = {**be.default_schedule(c), "impl": "generated"}
    out = [base]
    for over in ({"mr": 6}, {"mr": 4, "nr": vw, "mc": 24, "nc": 64}, {"mr": 12, "nr": vw, "mc": 48, "order": "mn"},
                 {"kc": 128}, {"pack_b": True}, {"pack_a": True, "mr": 8, "nc": 512},
                 {"pack_b": True, "mr": 6, "nr": 3 * vw, "nc": 3 * vw * 4, "mc": 24}):
        s = {**base, **over}
        if be.valid(c, s):
            out.append(s)
    assert len(out) >= 4
    return out


def _check(g, feeds, per_panel: bool | None = None) -> None:
    ks, c = _the_conv(g)
    be = CPUBackend()
    k = plan_contraction(c).sizes[3]
    seen = set()
    for s in _schedules(be, c):
        src = be.source(c, s)
        one_step = not s["kc"] or s["kc"] >= k
        assert (PER_PANEL in src) == one_step, s
        seen.add(one_step)
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)
    if per_panel is not None:
        assert per_panel in seen


@pytest.mark.parametrize("n,cin,cout,epilogue", [
    (1, 24, 37, "relu"),       # M not a multiple of 6 or 8
    (2, 13, 20, "silu"),       # batch 2, odd K
    (1, 32, 29, "residual"),   # residual add and ReLU
    (2, 7, 11, "none"),
    (1, 150, 9, "relu"),       # K past one step of 128
])
def test_1x1_conv_epilogue_per_panel(n, cin, cout, epilogue):
    vw = host_simd_width()
    g, feeds = _1x1(n, cin, cout, (5, 4 * vw), epilogue)
    _check(g, feeds, per_panel=True)


def test_columns_not_a_multiple_of_nr(sixteen_lanes):
    """On 16-lane vectors, N = 7 x 23 pixels: B packed (its last panel partial), the epilogue per panel skipping the
    padding."""
    g, feeds = _1x1(2, 10, 15, (7, 23), "silu")
    _, c = _the_conv(g)
    assert CPUBackend().default_schedule(c)["pack_b"]
    _check(g, feeds, per_panel=True)


def test_strided_1x1_conv():
    """A 1x1 conv with stride 2: B is not readable as it lies (rows gathered or packed)."""
    vw = host_simd_width()
    g, feeds = _1x1(2, 16, 21, (9, 4 * vw + 3), "relu", stride=2)
    _, c = _the_conv(g)
    assert not plan_contraction(c).b_direct
    _check(g, feeds)


def test_int32_1x1_is_exact():
    vw = host_simd_width()
    g, feeds = _1x1(2, 9, 13, (3, 2 * vw), "none", dtype=DType.int32)
    ks, c = _the_conv(g)
    want = run_reference(g, feeds)[0]
    be = CPUBackend()
    for s in _schedules(be, c):
        got = run_graph(g, feeds, schedules=[s if kk is c else None for kk in ks], kernels=ks)[0]
        assert np.array_equal(got, want.reshape(got.shape)), s


def test_default_reads_a_small_k_in_place(sixteen_lanes):
    """On 16-lane vectors, many output channels against a K of one step: B (the input) read in place in 8-row tiles; a
    larger K with many rows keeps B packed."""
    vw = schedule.simd_width()  # the fixture's
    be = CPUBackend()
    for cin, cout, direct in ((24, 144, True), (64, 256, True), (256, 256, True), (512, 256, False),
                              (512, 64, True)):
        g, _ = _1x1(1, cin, cout, (4, 2 * vw))
        _, c = _the_conv(g)
        s = be.default_schedule(c)
        assert s["pack_b"] is not direct, (cin, cout)
        assert not direct or s["mr"] == 8
        assert be.valid(c, s)


def test_random_points_of_the_space():
    vw = host_simd_width()
    g, feeds = _1x1(2, 19, 27, (3, 2 * vw), "silu")
    ks, c = _the_conv(g)
    be = CPUBackend()
    picked = random_schedules(be, c, 10, 18, lambda s, _: s["impl"] == "generated")
    assert any(not s["pack_b"] for s in picked) and any(s["kc"] in (0, 128) for s in picked)
    for s in picked:
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)


@pytest.mark.parametrize("vw", [8, 16])
def test_default_tiles_fit_the_registers(lanes, vw):
    """8-row tiles only where their accumulators fit: on 16 AVX2 registers 8 x 2 vectors would not."""
    lanes(vw)
    be = CPUBackend()
    for g in (_1x1(1, 24, 64, (4, 32))[0], _conv_graph(1, 8, 16, (12, 64))[0], _1x1(1, 512, 256, (7, 7))[0]):
        _, c = _the_conv(g)
        s = be.default_schedule(c)
        assert be.valid(c, s), s
        m = plan_contraction(c).sizes[1]
        assert (s["mr"] == 8) == (m % 8 == 0 and (vw == 16 or s["nr"] == vw)), s


FUSED_CALL = re.compile(r"lum_mk[tp]?e\(kcur")  # a panel's call of the micro-kernel's fused twin
PREFETCH_IN = "__builtin_prefetch((const void *)((uintptr_t)in"  # of an epilogue input's line, a row ahead


def _channels_last_residual(n: int, cin: int, cout: int, hw: tuple[int, int]):
    """A 1x1 conv whose output, with bias, a residual add and ReLU, is stored channels-last: its rows (pixels)
    along the output's rows of channels, the residual read per pixel."""
    x = Tensor.input("x", (n, cin, *hw), DType.float32)
    w = Tensor.const(RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    y = conv(x, w, 1, [1, 1], [1, 1], list(NOPAD), list(hw))
    y = y.add(Tensor.const(RNG.standard_normal(cout).astype(np.float32)).reshape((1, cout, 1, 1)).expand(y.shape))
    r = Tensor.input("r", (n, *hw, cout), DType.float32)
    out = y.permute((0, 2, 3, 1)).add(r).relu()
    feeds = {"x": RNG.standard_normal(x.shape).astype(np.float32), "r": RNG.standard_normal(r.shape).astype(np.float32)}
    return graph([x, r], [out]), feeds


@pytest.mark.parametrize("n,cin,cout,hw", [
    (1, 32, 48, (5, 7)),    # 35 pixels: a last row panel of 5 past 5 whole ones of 6
    (2, 24, 40, (4, 4)),    # 2 images; 40 channels: the last column panel partial, its epilogue over the buffer
    (1, 128, 64, (6, 9)),   # K = 128 in one step
])
def test_whole_tiles_take_the_epilogue_from_the_registers(n, cin, cout, hw):
    """Where K takes one step, whole MR x NR tiles inside one run of the output go through the epilogue in the
    micro-kernel's fused twin, which first prefetches the next row panel's residual and output lines; the rows and
    columns past whole tiles keep the epilogue over the tile buffer. Every schedule, in either orientation (the
    fused twin where the tile's rows are pixels), matches the reference."""
    g, feeds = _channels_last_residual(n, cin, cout, hw)
    ks, c = _the_conv(g)
    be = CPUBackend()
    k = plan_contraction(c).sizes[3]
    fused = 0
    both = [x for s in _schedules(be, c) for x in (s, {**s, "swap": not s.get("swap")}) if be.valid(c, x)]
    for s in both:
        src = be.source(c, s)
        one_step = not s["kc"] or s["kc"] >= k
        assert bool(FUSED_CALL.search(src)) == (one_step and PREFETCH_IN in src), s
        fused += one_step and bool(FUSED_CALL.search(src))
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)
    assert fused >= 2
