"""Convolutions whose output pixels are the GEMM's rows, the input read in place from a copy with its padding made
real (``codegen/c/halo.py``), against the reference executor."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_util import compare_cpu, random_schedules
from codegen_util import graph as _graph
from test_c_direct_conv import _conv_graph, _out, _the_conv, compare_before_a_guard_page

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.contraction import HALO_MIN_N, halo_default, plan_contraction
from luminal.codegen.c.halo import MAX_WASTE, across, halo_size, panels, plan_halo, reach
from luminal.codegen.partition import ChannelsLast, layout_convs, lower
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Tensor, run_reference
from luminal.target import host_simd_width

RNG = np.random.default_rng(23)


def _halo_schedules(be, c) -> list[dict]:
    """The default (which reads A from the padded copy) and random points of the space that do too."""
    default = be.default_schedule(c)
    assert not default["pack_a"] and default["impl"] == "generated"
    picked = random_schedules(be, c, 6, 11,
                              lambda s, _: s["impl"] == "generated" and not s["pack_a"] and not s.get("swap")
                              and s.get("copy") is not False)
    assert len(picked) >= 3
    return [default, *picked]


def _check_halo(g, feeds, rtol=2e-5, atol=2e-5):
    ks, c = _the_conv(g)
    plan = plan_contraction(c)
    assert plan is not None and plan.a_halo is not None and plan.b_const
    be = CPUBackend()
    for s in _halo_schedules(be, c):
        assert "lum_mkh(" in be.source(c, s)
        compare_cpu(g, feeds, rtol, atol, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw,k,dil,pads,group", [
    (16, 40, (9, 37), 3, 1, ((1, 1), (1, 1)), 1),      # output channels past the last whole panel
    (16, 32, (13, 45), 3, 2, ((2, 2), (2, 2)), 1),     # dilation 2
    (32, 64, (7, 33), 3, 1, ((1, 1), (1, 1)), 2),      # two groups: a batch dim of the GEMM
    (15, 33, (10, 50), 3, 1, ((0, 2), (3, 1)), 1),     # asymmetric pads
    (15, 36, (6, 41), 3, 1, ((0, 0), (0, 0)), 1),      # no padding: no mask, wide rows are the input's
    (6, 48, (12, 20), 5, 1, ((2, 2), (2, 2)), 1),      # 5x5
    (15, 32, (9, 23), 3, 1, ((3, 3), (3, 3)), 1),      # pads wider than the window's reach
])
def test_conv_input_read_from_padded_copy(cin, cout, hw, k, dil, pads, group):
    g, feeds = _conv_graph(1, cin, cout, hw, k=k, dil=dil, pads=pads, group=group)
    _check_halo(g, feeds)


@pytest.mark.parametrize("epilogue", ["silu", "residual", "none"])
def test_fused_epilogues_skip_the_wide_columns(epilogue):
    """Wide-row columns past each output row hold no output: the epilogue (bias, activation, residual) skips
    them and stores the rest along the rows."""
    g, feeds = _conv_graph(1, 15, HALO_MIN_N + 3, (8, 29), epilogue=epilogue)
    _check_halo(g, feeds)


def _conv1d(n: int, stride: int = 1, cout: int = HALO_MIN_N):
    """A 5-tap 1-D conv over 45 samples of 26 channels, pads (2, 1), batch ``n``: its graph, feeds and halo."""
    x = Tensor.input("x", (n, 26, 45), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, 26, 5)).astype(np.float32))
    g = _graph([x], [conv(x, wt, 1, [stride], [1], [(2, 1)], [_out(45, 5, stride, 1, (2, 1))]).relu()])
    _, c = _the_conv(g)
    return g, {"x": RNG.standard_normal(x.shape).astype(np.float32)}, plan_contraction(c).a_halo


def test_1d_conv_rows_are_its_pixels():
    g, feeds, h = _conv1d(1)
    assert h is not None and (h.rows, h.pitch, h.width) == (1, 44, 44)
    _check_halo(g, feeds)


def test_int32_conv_is_exact():
    from luminal.codegen.c.check import run_graph

    g, feeds = _conv_graph(1, 15, HALO_MIN_N, (6, 21), epilogue="none", dtype=DType.int32)
    ks, c = _the_conv(g)
    assert plan_contraction(c).a_halo is not None
    want = run_reference(g, feeds)[0]
    for s in _halo_schedules(CPUBackend(), c):
        got = run_graph(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)[0]
        assert np.array_equal(got, want.reshape(got.shape))


def test_geometry_of_the_copy():
    """A 3x3 conv with pads 1 over 28x28: the copy is 30x30 per channel, wide rows of 30 for output rows of 28. With
    steps of 2 each pixel axis splits into 2 phases of 15 positions: wide rows of 15 for output rows of 14. The copy
    holds what the last tile's rows read past it."""
    for stride, layout, pitch, width in (
            ((1, 1), ((0, "a", 1), (1, "a", 32), (2, "p", 1), (3, "p", 1), (2, "q", 30), (3, "q", 30)), 30, 28),
            ((2, 2), ((0, "a", 1), (1, "a", 32), (2, "p", 2), (3, "p", 2), (2, "q", 15), (3, "q", 15)), 15, 14)):
        g, _ = _conv_graph(1, 32, HALO_MIN_N, (28, 28), stride=stride)
        _, c = _the_conv(g)
        gemm = c.contraction
        x = gemm.a if not c.inputs[c.ops[gemm.a].attr("buf")].constant else gemm.b  # the input's load
        h = plan_halo(c, x, gemm.m if x == gemm.a else gemm.n, gemm.k, gemm.batch)
        assert h is not None
        assert (h.layout, h.pitch, h.width, h.rows, h.before) == (layout, pitch, width, width, (0, 0, 1, 1))
        assert h.numel == 32 * 30 * 30 and halo_size(h, c.full, 12) >= h.numel
        assert halo_size(h, c.full, 12) >= reach(h, c.full) + -(-width * pitch // 12) * 12 - 1


@pytest.mark.parametrize("stride,dil,pads", [
    ((2, 2), 1, ((1, 1), (1, 1))),   # a downsampling conv: two phases per pixel axis
    ((2, 1), 1, ((1, 1), (1, 1))),   # phases along the outer pixel axis only
    ((1, 2), 2, ((2, 1), (0, 2))),   # along the rows, with dilation 2 and asymmetric pads
    ((3, 3), 1, ((1, 1), (1, 1))),   # three phases
])
def test_strided_convs_read_the_copy_by_phase(stride, dil, pads):
    g, feeds = _conv_graph(1, 114, HALO_MIN_N + 8, (17, 35), stride=stride, dil=dil, pads=pads)
    _check_halo(g, feeds)


@pytest.mark.parametrize("cin,cout,k,halo", [
    (32, 64, 3, True),   # 144 multiply-adds per copied element
    (16, 48, 5, True),   # 5x5 taps: 300
    (32, 32, 3, False),  # 72: the copy of a large input costs more than the rows it saves
])
def test_a_strided_conv_reads_the_copy_where_its_elements_meet_enough_multiply_adds(cin, cout, k, halo):
    g, feeds = _conv_graph(1, cin, cout, (20, 24), k=k, stride=(2, 2), pads=((k // 2, k // 2),) * 2)
    ks, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    assert halo_default(plan_contraction(c)) == halo and ("lum_mkh(" in be.source(c, s)) == halo
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)


@pytest.mark.parametrize("cin,k,stride,kc", [
    (128, 3, (2, 2), 64),   # K = 1152 over four phases: 18 steps
    (114, 3, (2, 1), 64),   # K = 1026, two phases along one axis, a last step of 2 rows
    (114, 3, (2, 1), 256),  # the default's step, the same last step
    (3, 7, (2, 2), 256),    # a stem's K = 147, one step
    (128, 3, (1, 1), 128),  # unit stride
])
def test_a_conv_from_the_copy_steps_over_k(cin, k, stride, kc):
    g, feeds = _conv_graph(1, cin, 64, (17, 21), k=k, stride=stride, pads=((k // 2, k // 2),) * 2)
    ks, c = _the_conv(g)
    be = CPUBackend()
    s = {**be.default_schedule(c), "kc": kc}
    assert be.valid(c, s) and plan_contraction(c).a_halo is not None and "lum_mkh(" in be.source(c, s)
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)


@pytest.mark.parametrize("n,cin,cout,stride", [(1, 16, 8, (1, 1)), (1, 3, HALO_MIN_N, (1, 1)),
                                                (1, 16, HALO_MIN_N, (2, 2))])
def test_other_convs_keep_their_reads(n, cin, cout, stride):
    """Fewer output channels than HALO_MIN_N, fewer K rows than HALO_MIN_K (HALO_STRIDED_MIN_K with a stride)
    read the input through its view; they stay correct."""
    g, feeds = _conv_graph(n, cin, cout, (10, 30), stride=stride)
    ks, c = _the_conv(g)
    plan = plan_contraction(c)
    assert not halo_default(plan) and "lum_mkh(" not in CPUBackend().source(c, CPUBackend().default_schedule(c))
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, kernels=ks)


@pytest.mark.parametrize("n,groups,per_group,hw,stride,read", [
    (1, 5, 16, (7, 7), 1, "copy"),          # RegNet's last stage: rows of 7 pixels, a vector of channels per group
    (2, 3, 16, (9, 11), 1, "copy"),         # a batch, rows of 11
    (1, 4, 16, (10, 20), 1, "columns"),     # rows of 20: the pixels as columns keep whole vectors
    (1, 6, 8, (7, 7), 1, "columns"),        # half a vector per group
    (1, 5, 16, (14, 14), 2, "in place"),    # RegNet's strided first block: rows of 7, too few multiply-adds a copied
    (2, 3, 32, (13, 15), 2, "copy"),        # element for a dense conv's rule; a batch's images as rows: no in place
    (1, 3, 32, (13, 15), 2, "in place"),    # odd sizes, two vectors per group (ResNeXt's last stage)
    (1, 2, 48, (13, 15), 2, "copy"),        # three vectors per group meet each copied element often enough
    (1, 4, 16, (20, 40), 2, "in place"),    # rows of 20 (RegNetX's 16 channels a group from 112x112)
    (1, 6, 8, (14, 14), 2, "columns"),
])
def test_grouped_convs_read_the_copy_or_the_input_in_place(sixteen_lanes, n, groups, per_group, hw, stride, read):
    """A grouped conv with whole vectors of output channels per group reads its padded copy by default where an
    output row is shorter than a vector, whatever HALO_MIN_N says; at a stride with up to two vectors of them per
    group, whatever its rows, the input itself (``in_place_default``: the copy meets few multiply-adds per element,
    the rows as columns are gathered); others keep their reads.
    Against the reference. On 16-lane vectors (AVX-512) whatever the host's."""
    c_all = groups * per_group
    g, feeds = _conv_graph(n, c_all, c_all, hw, stride=(stride, stride), group=groups)
    ks, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    src = be.source(c, s)
    assert halo_default(plan_contraction(c)) == (read != "columns") and (s.get("copy") is False) == (read == "in place")
    assert ("lum_mkh(" in src, "lum_mkhs(" in src) == (read == "copy", read == "in place")
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


def _in_place_schedules(be, c, n: int, seed: int) -> list[dict]:
    """Points of the space that read a conv's input in place (``copy`` off), of every tile height the space has."""
    picked = random_schedules(be, c, n, seed, lambda s, got: s["impl"] == "generated" and s.get("copy") is False
                              and s["mr"] not in {p["mr"] for p in got})
    assert len(picked) >= 4
    return picked


@pytest.mark.parametrize("n,cin,cout,hw,k,stride,dil,pads,group", [
    (1, 16, 40, (9, 37), 3, (1, 1), 1, ((1, 1), (1, 1)), 1),     # unit stride, channels past the last whole panel
    (1, 114, 40, (17, 35), 3, (2, 2), 1, ((1, 1), (1, 1)), 1),   # stride 2, K in steps
    (1, 114, 40, (17, 35), 3, (2, 1), 2, ((2, 1), (0, 2)), 1),   # a stride along one axis, dilation 2, asymmetric pads
    (1, 60, 48, (20, 31), 3, (3, 3), 1, ((1, 1), (1, 1)), 1),    # stride 3
    (1, 32, 32, (15, 29), 3, (2, 2), 1, ((1, 1), (1, 1)), 2),    # two groups (a batch dim of the GEMM), odd sizes
    (1, 6, 48, (12, 20), 5, (1, 1), 1, ((2, 2), (2, 2)), 1),     # 5x5
    (1, 15, 32, (9, 23), 3, (1, 1), 1, ((3, 3), (3, 3)), 1),     # pads past the window's reach: rows all zeros
    (1, 16, 32, (5, 6), 7, (1, 1), 1, ((3, 3), (3, 3)), 1),      # a window wider than the map
    (1, 40, 32, (11, 13), 3, (2, 2), 1, ((0, 0), (0, 0)), 1),    # no padding: every tile but the last of a row in place
])
def test_conv_input_read_in_place(n, cin, cout, hw, k, stride, dil, pads, group):
    """The input read where it lies (``copy`` off): tiles of every height, inside the input and across its
    padding, each K row of a border tile in place, all zeros or copied between zeros; against the reference."""
    g, feeds = _conv_graph(n, cin, cout, hw, k=k, stride=stride, dil=dil, pads=pads, group=group)
    ks, c = _the_conv(g)
    be = CPUBackend()
    assert {kn.name: kn.choices for kn in be.space(c)}["copy"] == (True, False)
    for s in _in_place_schedules(be, c, 6, 5):
        assert "lum_mkhs(" in be.source(c, s) and "lum_mkh(" not in be.source(c, s)
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)


def test_only_a_padded_view_the_input_serves_offers_it_in_place():
    """A batch of images as the rows (the copy puts their axis next to the pixels) and a 1-D conv have no in-place
    form: their schedules have no ``copy`` knob, and one that sets it off is not valid."""
    g, _ = _conv_graph(2, 114, HALO_MIN_N + 8, (10, 30))
    _, c = _the_conv(g)
    be = CPUBackend()
    assert plan_contraction(c).a_halo is not None and "copy" not in {kn.name for kn in be.space(c)}
    assert not be.valid(c, {**be.default_schedule(c), "copy": False})
    g1, _, h = _conv1d(1)
    _, c1 = _the_conv(g1)
    assert h is not None and "copy" not in {kn.name for kn in be.space(c1)}


def test_a_tile_in_place_reads_nothing_past_the_input():
    """A conv read in place whose last tile holds pixels past the output row (19 in tiles of 10), their columns
    past the input row: those K rows are copied between zeros, so nothing past the input is read, which ends
    before an unreadable page."""
    vw = host_simd_width()
    g, feeds = _conv_graph(1, 2 * vw, 2 * vw, (10, 38), stride=(2, 2), group=2)
    _, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    assert s["copy"] is False and s["mr"] == 10 and "lum_mkhs(" in be.source(c, s)
    compare_before_a_guard_page(g, feeds, be)


@pytest.mark.parametrize("n,cin,cout,stride", [(1, 3, HALO_MIN_N, (2, 2)), (2, 114, HALO_MIN_N + 8, (1, 1))])
def test_the_search_takes_either_orientation(n, cin, cout, stride):
    """The ``swap`` knob: a conv whose default keeps its pixels as columns (few K rows, a stride) reaches the
    padded copy with the roles swapped, and one whose default reads the copy reaches the packed orientation;
    either way the outputs are the reference's. A 1x1 conv (no padded copy) and a matmul have the knob too."""
    g, feeds = _conv_graph(n, cin, cout, (20, 60), stride=stride)
    ks, c = _the_conv(g)
    be = CPUBackend()
    default = be.default_schedule(c)
    assert default["swap"] is False and {kn.name: kn.choices for kn in be.space(c)}["swap"] == (False, True)
    assert ("lum_mkh(" in be.source(c, default)) == halo_default(plan_contraction(c))
    picked = random_schedules(be, c, 6, 5, lambda s, p: s["impl"] == "generated" and s["swap"] != len(p) % 2)
    assert len(picked) == 6
    halo = []
    for s in picked:
        plan = plan_contraction(c, s["swap"])
        src = be.source(c, s)
        halo.append("lum_mkh(" in src or "lum_mkhs(" in src)
        assert halo[-1] == (plan.a_halo is not None and not s["pack_a"])
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)
    assert any(halo) and not all(halo)
    mm = _graph([x := Tensor.input("x", (48, 64), DType.float32)],
                [x.matmul(Tensor.const(RNG.standard_normal((64, 80)).astype(np.float32)))])
    one, one_feeds = _conv_graph(n, cin, cout, (7, 14), k=1, pads=((0, 0), (0, 0)))
    for graph, fed in ((mm, {"x": RNG.standard_normal((48, 64)).astype(np.float32)}), (one, one_feeds)):
        ks, k = _the_conv(graph)
        assert be.default_schedule(k)["swap"] is False
        for s in random_schedules(be, k, 2, 7, lambda s, p: s["impl"] == "generated" and s["swap"] != len(p) % 2):
            compare_cpu(graph, fed, 2e-5, 2e-5, scaled=True, schedules=[s if kk is k else None for kk in ks],
                        kernels=ks)


@pytest.mark.parametrize("k,stride", [(5, (2, 2)), (3, (1, 1))])
def test_a_depthwise_conv_with_its_pixels_as_rows(k, stride):
    """A depthwise conv swapped (its pixels as the rows, read from the padded copy) has no N dim: its tiles are one
    column, stored along the pixels. Every such point of the space emits and gives the reference's outputs."""
    g, feeds = _conv_graph(1, 24, 24, (14, 14), k=k, stride=stride, pads=((k // 2,) * 2,) * 2, group=24)
    ks, c = _the_conv(g)
    plan = plan_contraction(c, True)
    assert plan is not None and not plan.n and plan.a_halo is not None
    be = CPUBackend()
    picked = random_schedules(be, c, 4, 3, lambda s, _: s["impl"] == "generated" and s["swap"] and not s["pack_a"])
    assert len(picked) == 4
    for s in picked:  # from the copy, or (``copy`` off) the input itself
        assert ("lum_mkh(" if s["copy"] else "lum_mkhs(") in be.source(c, s)
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is c else None for kk in ks], kernels=ks)


def test_1x3_conv_with_a_tap_dim_of_one():
    """A window one row high, padded along the rows only, reads the copy as a 3x3 one does."""
    x = Tensor.input("x", (1, 43, 9, 30), DType.float32)
    wt = Tensor.const(RNG.standard_normal((HALO_MIN_N, 43, 1, 3)).astype(np.float32))
    g = _graph([x], [conv(x, wt, 1, [1, 1], [1, 1], [(0, 0), (1, 1)], [9, 30]).relu()])
    _check_halo(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


@pytest.mark.parametrize("n,kh,pads", [(1, 7, (3, 3)), (2, 5, (1, 3)), (1, 3, (2, 0))])
def test_a_window_along_the_rows_only(n, kh, pads):
    """A kh x 1 kernel (Inception's 7 x 1) has no tap along the row a wide row runs over: its taps step whole rows
    of the copy, which holds the padding above and below. Read so by default (before: its input packed per call,
    0.8x onnxruntime at 192 -> 192 channels on 17x17)."""
    x = Tensor.input("x", (n, 48, 21, 17), DType.float32)
    wt = Tensor.const(RNG.standard_normal((HALO_MIN_N + 8, 48, kh, 1)).astype(np.float32))
    g = _graph([x], [conv(x, wt, 1, [1, 1], [1, 1], [pads, (0, 0)], [_out(21, kh, 1, 1, pads), 17]).relu()])
    _check_halo(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


@pytest.mark.parametrize("n,stride,pads", [(3, (1, 1), ((1, 1), (1, 1))), (2, (1, 1), ((0, 2), (1, 0)))])
def test_a_batch_of_images_as_rows(n, stride, pads):
    """Images of a batch are rows too: moved next to the pixels in the copy, each image's wide rows after the last
    one's (its rows past the output rows skipped)."""
    g, feeds = _conv_graph(n, 16, HALO_MIN_N, (9, 23), stride=stride, pads=pads)
    _, c = _the_conv(g)
    h = plan_contraction(c).a_halo
    assert h is not None and h.images == n and h.span * h.pitch * n == h.wide
    _check_halo(g, feeds)


@pytest.mark.parametrize("n,cin,cout,hw,k,stride,pads", [
    (1, 16, 35, (11, 27), 3, (1, 1), ((1, 1), (1, 1))),   # two whole blocks of channels
    (2, 15, 35, (11, 27), 3, (1, 1), ((1, 1), (1, 1))),   # a block cut short; images as rows
    (1, 16, 35, (11, 27), 3, (1, 1), ((0, 2), (1, 0))),   # asymmetric pads
    (1, 32, 64, (20, 24), 3, (2, 2), ((1, 1), (1, 1))),   # phases of a strided conv
    (1, 3, 35, (11, 27), 7, (2, 2), ((3, 3), (3, 3))),    # a stem's few channels
])
def test_a_channels_last_input_is_copied_by_blocks_of_channels(n, cin, cout, hw, k, stride, pads):
    """A conv over a channels-last input (a tf2onnx model's NHWC input, a producer stored channels-last) copies it
    a vector of channels at a time, each a transposition of the input's contiguous pixels, not element by element a
    cache line apart; the copy's geometry, and so the rows the GEMM reads, are the logical input's."""
    x = Tensor.input("x", (n, *hw, cin), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin, k, k)).astype(np.float32))
    outs = [_out(hw[0], k, stride[0], 1, pads[0]), _out(hw[1], k, stride[1], 1, pads[1])]
    g = _graph([x], [conv(x.permute((0, 3, 1, 2)), wt, 1, list(stride), [1, 1], list(pads), outs).relu()])
    _, c = _the_conv(g)
    h = plan_contraction(c).a_halo
    assert h is not None and across(h) == 3 and h.source == (n, *hw, cin)
    assert "lum_tr(x" in CPUBackend().source(c, CPUBackend().default_schedule(c))
    _check_halo(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


def test_a_channels_last_input_padded_along_its_channels_is_copied_row_by_row():
    """Zero channels padded onto a channels-last input (a shortcut's channel padding before the conv): each row of
    the copy tests its own channel, as in the logical order."""
    x = Tensor.input("x", (1, 9, 23, 12), DType.float32)
    wt = Tensor.const(RNG.standard_normal((HALO_MIN_N, 16, 3, 3)).astype(np.float32))
    t = x.pad(((0, 0), (0, 0), (0, 0), (1, 3))).permute((0, 3, 1, 2))
    g = _graph([x], [conv(t, wt, 1, [1, 1], [1, 1], [(1, 1), (1, 1)], [9, 23]).relu()])
    _, c = _the_conv(g)
    h = plan_contraction(c).a_halo
    assert h is not None and h.padded[3] == 16 and across(h) == -1
    _check_halo(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


def test_a_batch_of_1d_signals_as_rows():
    g, feeds, h = _conv1d(3)
    assert h is not None and (h.images, h.span, h.pitch, h.width) == (3, 1, 48, 44)
    _check_halo(g, feeds)


def test_a_strided_batch_of_1d_signals_as_rows():
    """At stride 3 each signal's copy is three phases of 16 samples, a step of the copy's loop one signal and
    channel with its phases looped inside (64 output channels: enough multiply-adds per copied element)."""
    g, feeds, h = _conv1d(2, 3, 2 * HALO_MIN_N)
    assert h is not None and h.split[-1] == 3 and (h.images, h.width) == (2, 15)
    _check_halo(g, feeds)


def test_avx2_vectors(lanes):
    """On 8-lane vectors (AVX2) the same code: 8 x 8 transposes, tiles that fit 16 registers."""
    lanes(8)
    g, feeds = _conv_graph(1, 16, HALO_MIN_N + 4, (11, 27))
    ks, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    src = be.source(c, s)
    assert not s["pack_a"] and s["nr"] == 16 and "vector_size(32)" in src and "lum_mkh(" in src
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("hw,mr,rows", [(7, 7, 49), (10, 10, 100), (13, 13, 169), (14, 14, 196), (20, 10, 400),
                                        (28, 12, 840), (60, 12, 3600)])
def test_the_default_tile_rows_compute_the_fewest_rows(sixteen_lanes, hw, mr, rows):
    """On 16-lane vectors, an output row of 13 or 14 pixels in one tile (ROW_TILE_MAX), else the tile rows that
    compute the fewest rows, each weighed by 1 + ROW_OVERHEAD / MR, each output row in whole tiles where that is fewer
    than a wide row (``halo.panels``): a 7x7 map's 49 pixels in 7 tiles of 7 (its wide rows, 7 x 9, padded to 72 by
    12s), 10x10's 100 in 10 of 10 (120 wide), 13x13's 169 in 13 of 13 (195 wide, 182 in 7s), 14x14's 196 in 14 of
    14 (224 wide, 228 in 12s), 20x20's 400 in 40 of 10 (440 wide); 28x28's 784 in 7s are 7% fewer than its 840 wide
    pixels, which stay in 12s; 60x60's in rows of five 12s (3720 wide)."""
    g, feeds = _conv_graph(1, 64, 64, (hw, hw))
    ks, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    h = plan_contraction(c).a_halo
    assert h.wide == hw * (hw + 2) and not s["pack_a"] and s["mr"] == mr and panels(h, mr).wide == rows
    if hw < 28:  # numerically, the small maps (the others compute the same rows in more tiles)
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("n,hw,k,stride,channels_last", [
    (1, (9, 23), 3, (1, 1), False),    # rows of 23, wide rows of 25
    (3, (9, 23), 3, (1, 1), False),    # images as rows, each image's wide rows after the last one's
    (1, (17, 24), 3, (2, 2), False),   # a strided conv: rows of 12 over the phases' wide rows of 13
    (1, (7, 7), 5, (1, 1), False),     # a 5x5 window: wide rows of 11 for rows of 7
    (2, (9, 23), 3, (1, 1), True),     # stored channels-last: the tile's rows stored as they lie
])
def test_each_output_row_in_whole_tiles(n, hw, k, stride, channels_last):
    """Where whole tiles of an output row are fewer GEMM rows than a wide row, each output row starts a tile and the
    next row's tiles start at the next wide row; the last tile's rows past the output row read the copy's next
    columns and are not stored. Every MR of the space for which that holds gives the reference's outputs."""
    g, feeds = _conv_graph(n, 16, HALO_MIN_N + 8, hw, k=k, stride=stride, pads=((k // 2, k // 2),) * 2,
                           epilogue="silu")
    new, ks = lower(g, {ChannelsLast(layout_convs(g)[0]): True}) if channels_last else (g, _the_conv(g)[0])
    (c,) = [x for x in ks if x.form == "contraction"]
    swap = plan_contraction(c).a_halo is None  # a strided conv of few K rows reads the copy swapped
    h = plan_contraction(c, swap).a_halo
    be = CPUBackend()
    picked = [{**be.default_schedule(c), "mr": mr, "pack_a": False, "swap": swap}
              for mr in {kn.name: kn.choices for kn in be.space(c)}["mr"] if panels(h, mr).cols < h.pitch]
    picked = [s for s in picked if be.valid(c, s)]
    assert len(picked) >= 2
    for s in picked:
        assert "lum_mkh(" in be.source(c, s)
        compare_cpu(new, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if x is c else None for x in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw,kernel,copy", [
    (32, 128, (6, 6), (5, 5), True),    # wide rows of 10 for rows of 6, in 7s: 1/6 more rows against 128 channels
    (24, 64, (13, 13), (5, 5), True),   # 17 for 13, in 7s: 14
    (32, 128, (7, 7), (5, 5), True),    # 11 for 7, in 7s: none past the row
    (160, 320, (6, 6), (3, 3), True),   # 8 for 6, in 7s: 1/6 more rows against 320 channels, 53 per K row and pixel
    (64, 192, (17, 17), (1, 7), True),  # 23 for 17, in 10s: 20, 34
    (64, 768, (17, 17), (1, 7), False),  # 136 multiply-adds per K row and pixel cost more than packing the windows
    (96, 512, (6, 6), (3, 3), False),   # 85
    (32, 64, (4, 4), (3, 3), None),     # 6 for 4, and in any tiles: no copy
])
def test_long_wide_rows_are_read_in_whole_tiles(cin, cout, hw, kernel, copy):
    """Wide rows more than MAX_WASTE times the output rows, which whole tiles of an output row bring within it, are
    read from the copy in such tiles (``halo.least_cols``), by default where the rows past the output rows cost at
    most WASTE_MACS multiply-adds per K row and pixel (a pack of the windows costs several operations per element
    it packs). Either way against the reference."""
    kh, kw = kernel
    x = Tensor.input("x", (1, cin, *hw), DType.float32)
    wt = Tensor.const(RNG.standard_normal((cout, cin, kh, kw)).astype(np.float32))
    pads = [(kh // 2, kh // 2), (kw // 2, kw // 2)]
    g = _graph([x], [conv(x, wt, 1, [1, 1], [1, 1], pads, list(hw)).relu()])
    ks, c = _the_conv(g)
    plans = [p for p in (plan_contraction(c), plan_contraction(c, True)) if p is not None and p.a_halo is not None]
    assert bool(plans) == (copy is not None)
    be = CPUBackend()
    s = be.default_schedule(c)
    if plans:
        h = plans[0].a_halo
        assert h.pitch > MAX_WASTE * h.width and halo_default(plans[0]) == copy
        assert ("lum_mkh(" in be.source(c, s)) == copy and (not copy or panels(h, s["mr"]).cols < h.pitch)
    compare_cpu(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)}, 2e-5, 2e-5, scaled=True,
                schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("cout,nr", [(48, 48), (40, 48), (144, 48), (96, 32), (64, 32)])
def test_3_vector_tiles_where_they_pad_the_output_channels_less(sixteen_lanes, cout, nr):
    """On 16-lane vectors 48 output channels fill one panel of a 3-vector tile, not two of 32 (a quarter of the
    multiplies on padding); 96 and 64 stay in 2-vector panels. A block of columns holds whole panels (NC rounded
    down to them: 64 -> 48, 128 -> 96), so every NC of the space is a valid point with 48-wide panels."""
    g, feeds = _conv_graph(1, 16, cout, (9, 23), epilogue="silu")
    ks, c = _the_conv(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    assert not d["pack_a"] and d["nr"] == nr and d["mr"] in ((7, 8) if nr == 48 else (12,))
    scheds = [d] + [{**d, "nr": 48, "mr": mr, "nc": nc, "mc": mc, "pack_a": pa}
                    for mr, nc, mc, pa in ((8, 64, 96, False), (7, 128, 24, False), (6, 256, 48, True))]
    assert all(be.valid(c, s) for s in scheds)
    for s in scheds:
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("vw,hw,threads,mc", [(16, 112, 2, 384), (16, 80, 2, 192), (16, 56, 2, 96), (16, 112, 8, 96),
                                               (8, 112, 2, 384), (8, 80, 2, 192)])
def test_large_maps_take_long_row_blocks(lanes, vw, hw, threads, mc):
    """On 16- and 8-lane vectors, the default's row block grows with the map while every thread keeps 16 tiles (a
    tile's transposition and epilogue are paid per tile): 112 x 114 wide pixels of 96 output channels in blocks of 384
    on 2 threads, 80 x 82 in 192s, 56 x 58 in the 96 every conv had; 8 threads split 112x112 in 96s too. Computed in
    long blocks and with 7-row tiles on 16 lanes (the block rounded down to whole tiles), the conv matches the
    reference."""
    from luminal.codegen.c.schedule import typed_default

    lanes(vw)
    g, feeds = _conv_graph(1, 16, 96, (hw, hw))
    ks, c = _the_conv(g)
    d = typed_default(c, threads)
    assert d.mc == mc and not d.pack_a and plan_contraction(c).a_halo is not None
    if hw == 112:
        be = CPUBackend()
        rows = (12, 7) if vw == 16 else (6, 4)
        scheds = [{**be.default_schedule(c), "mc": 384, "threads": 2, "mr": mr} for mr in rows]
        for s in scheds:
            assert be.valid(c, s) and "lum_mkh(" in be.source(c, s)
            compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("vw,cout,hw,rows", [
    (16, 32, 112, True), (16, 64, 80, True), (16, 32, 160, True),  # rows of 7, 5 and 10 vectors: 8 x 16, 8 x 32 tiles
    (16, 32, 56, False), (16, 96, 112, False),  # 3.5 vectors; 96 channels
    (8, 32, 56, True), (8, 48, 40, True),       # 7 and 5 vectors: 8 x 8 tiles
    (8, 32, 112, False),                        # 14: two-vector panels in 6-row tiles, where the copy's blocks win
])
def test_rows_of_whole_vectors_keep_the_pixels_as_columns(lanes, vw, cout, hw, rows):
    """A conv of at most 64 output channels whose output rows are whole vectors (at least four) reads its input in
    place by rows, in panels of one vector (two where those pad the rows no more) whose 8-row tiles fit the
    registers, where the padded copy would otherwise take its pixels as rows: no copy, no transposed tile, no
    wide-row columns. Rows of 3.5 vectors, 96 channels, and on 8 lanes rows of an even number of vectors (8 x 16
    tiles do not fit 16 registers) keep the copy; the search still has the other orientation. Both match the
    reference."""
    from luminal.codegen.c.contraction import rows_of_vectors

    lanes(vw)
    g, feeds = _conv_graph(1, 24, cout, (hw, hw))
    ks, c = _the_conv(g)
    be = CPUBackend()
    d = be.default_schedule(c)
    plan = plan_contraction(c)
    assert rows_of_vectors(plan) is rows and (plan.a_halo is None) is rows
    assert ("lum_mkh(" in be.source(c, d)) is not rows
    if rows:
        assert d["nr"] in (vw, 2 * vw) and hw % d["nr"] == 0 and not d["pack_b"]
    copy = {**d, "swap": True, "mr": 12 if vw == 16 else 6, "nr": 2 * vw, "mc": 96, "nc": 128, "kc": 256,
            "pack_b": True}
    others = [copy] if rows else []
    if rows:  # the copy's orientation
        assert plan_contraction(c, True).a_halo is not None and be.valid(c, copy) and "lum_mkh(" in be.source(c, copy)
    for s in [d, *others]:
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("n,cin,cout,hw,k,stride,pads", [
    (1, 3, 64, (29, 31), 7, (2, 2), ((3, 3), (3, 3))),   # a 7x7 stride-2 stem
    (2, 16, 40, (9, 23), 3, (1, 1), ((1, 1), (1, 1))),   # images as rows; channels past the last whole panel
    (1, 15, 33, (10, 50), 3, (1, 1), ((0, 2), (3, 1))),  # asymmetric pads
    (1, 16, 16, (20, 24), 3, (1, 1), ((1, 1), (1, 1))),  # fewer output channels than HALO_MIN_N
    (1, 16, 16, (20, 24), 3, (2, 2), ((1, 1), (1, 1))),  # and strided, few multiply-adds per copied element
])
def test_a_channels_last_output_stores_the_tile_as_it_is(n, cin, cout, hw, k, stride, pads):
    """Stored channels-last (``ir.layout``), each of a halo tile's rows is an output pixel's channels as they
    lie in memory: the epilogue stores the rows of the tile, skipping the wide rows' columns past each output row,
    where the logical order's transposes it first to store along the pixels. The default reads the copy whatever
    the channels and the stride: the other way packs the input's windows on every call."""
    g, feeds = _conv_graph(n, cin, cout, hw, k=k, stride=stride, pads=pads, epilogue="silu")
    (p,) = layout_convs(g)
    decisions = {ChannelsLast(p): True}
    new, ks = lower(g, decisions)
    (c,) = [k for k in ks if k.form == "contraction"]
    assert plan_contraction(c).a_halo is not None and c.outputs[0][1].shape[-1] == cout
    be = CPUBackend()
    _, logical = _the_conv(g)
    assert ("lum_tr(ct" in be.source(logical, be.default_schedule(logical))) == (cout >= HALO_MIN_N)
    for s in _halo_schedules(be, c):
        assert "lum_mkh(" in be.source(c, s) and "lum_tr(ct" not in be.source(c, s)
        compare_cpu(new, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if x is c else None for x in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw,once", [
    (128, 256, (18, 18), True),    # 1.2 MB of weight over 360 wide rows: every row in one block, N split in two
    (64, 256, (18, 18), False),    # 0.6 MB: blocks of rows as before
    (128, 256, (7, 7), False),     # 49 rows: one block already
])
def test_a_weight_past_the_l2_is_streamed_once_per_call(sixteen_lanes, cin, cout, hw, once):
    """A conv over its padded copy whose packed weight outgrows the L2 (WEIGHT_RESIDENT) and whose rows take more
    than one block: every wide row in one block and the output channels split evenly among the threads, so that
    each thread streams its share of the weight once; against the reference."""
    from luminal.codegen.c.schedule import _weight_once

    g, feeds = _conv_graph(1, cin, cout, hw)
    ks, c = _the_conv(g)
    plan = plan_contraction(c)
    be = CPUBackend()
    s = be.default_schedule(c)
    wide = panels(plan.a_halo, s["mr"]).wide
    assert (_weight_once(plan, wide, s["nr"], 96, 64, 2) != (96, 64)) == once
    if once:
        assert s["mc"] >= wide and s["nc"] * s["threads"] == cout, s
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)
