"""Convolutions whose input windows the C GEMM reads by rows (``pack_b`` off on a conv: B panels within runs of
output columns, read in place, rows over the padding copied between zeros; with a stride along the rows,
gathered) against the reference executor."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from codegen_util import compare_cpu, random_schedules
from codegen_util import graph as _graph

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.contraction import plan_contraction
from luminal.codegen.c.schedule import simd_width
from luminal.codegen.partition import partition
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Tensor, run_reference
from luminal.runtime.compile import compile_graph
from luminal.target import host_simd_width

RNG = np.random.default_rng(18)


def _out(size: int, k: int, stride: int, dil: int, pads: tuple[int, int]) -> int:
    return (size + pads[0] + pads[1] - dil * (k - 1) - 1) // stride + 1


def _conv_graph(n, cin, cout, hw, k=3, stride=(1, 1), dil=1, pads=((1, 1), (1, 1)), group=1, epilogue="relu",
                dtype=DType.float32):
    h, w = hw
    x = Tensor.input("x", (n, cin, h, w), dtype)
    wv = RNG.standard_normal((cout, cin // group, k, k))
    wt = Tensor.const((wv if dtype.is_float else np.round(wv * 4)).astype(dtype.np))
    outs = [_out(h, k, stride[0], dil, pads[0]), _out(w, k, stride[1], dil, pads[1])]
    y = conv(x, wt, group, list(stride), [dil, dil], list(pads), outs)
    inputs = [x]
    if epilogue != "none":
        bias = Tensor.const(RNG.standard_normal(cout).astype(dtype.np))
        y = y.add(bias.reshape((1, cout, 1, 1)).expand(y.shape))
    if epilogue == "relu":
        y = y.relu()
    elif epilogue == "silu":
        y = y.mul(y.sigmoid())
    elif epilogue == "residual":
        r = Tensor.input("r", y.shape, dtype)
        y = y.add(r).relu()
        inputs.append(r)
    g = _graph(inputs, [y])
    feeds = {t.node.attrs["name"]: (RNG.standard_normal(t.shape) if dtype.is_float
                                    else RNG.integers(-20, 20, t.shape)).astype(dtype.np) for t in inputs}
    return g, feeds


def _the_conv(g):
    ks = partition(g, {})
    (c,) = [k for k in ks if k.form == "contraction"]
    return ks, c


def _in_place_schedules(be, k):
    """The default with B read in place, and a few other tiles and K steps."""
    base = {**be.default_schedule(k), "impl": "generated", "pack_b": False}
    vw = host_simd_width()
    out = [base]
    for over in ({"mr": 4, "nr": vw, "mc": 24}, {"mr": 8, "nr": 2 * vw, "kc": 128, "mc": 24, "order": "mn"},
                 {"mr": 12, "nr": vw, "kc": 128, "mc": 48, "order": "mn"}, {"mr": 4, "nr": 3 * vw, "pack_a": True},
                 {"mr": 6, "nr": 3 * vw, "nc": 192 if 192 % (3 * vw) == 0 else 3 * vw * 4, "pack_a": True},
                 {"mr": 4, "nr": 4 * vw, "nc": 512, "kc": 128, "mc": 24}):
        s = {**base, **over}
        if be.valid(k, s):
            out.append(s)
    assert len(out) >= 3
    return out


def _check_in_place(g, feeds, rtol=2e-5, atol=2e-5):
    ks, c = _the_conv(g)
    plan = plan_contraction(c)
    assert plan is not None and plan.b_run_stride and not plan.b_const
    be = CPUBackend()
    for s in _in_place_schedules(be, c):
        assert be.valid(c, s), s
        src = be.source(c, s)
        assert "lum_mkp(" in src and ("lum_mkt(" in src) == (plan.b_run_stride == 1)  # B in place with unit stride
        # gathered rows prefetch their lines two panels ahead
        assert ("__builtin_prefetch((const void *)((uintptr_t)src + " in src) == (plan.b_run_stride > 1)
        compare_cpu(g, feeds, rtol, atol, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("n,cin,cout,hw,stride,dil,pads,group", [
    (1, 5, 7, (9, 37), (1, 1), 1, ((1, 1), (1, 1)), 1),       # rows of 37: a partial panel per row
    (2, 17, 20, (11, 70), (1, 1), 1, ((1, 1), (1, 1)), 1),    # batch 2, whole panels inside the image
    (1, 6, 10, (12, 40), (2, 1), 1, ((1, 1), (1, 1)), 1),     # stride 2 over rows, 1 along them
    (1, 4, 6, (13, 45), (1, 1), 2, ((2, 2), (2, 2)), 1),      # dilation 2
    (2, 8, 12, (7, 33), (1, 1), 1, ((1, 1), (1, 1)), 2),      # two groups, batch 2
    (1, 3, 5, (10, 50), (1, 1), 1, ((0, 2), (3, 1)), 1),      # asymmetric pads
    (1, 3, 9, (6, 41), (1, 1), 1, ((0, 0), (0, 0)), 1),       # no padding: no masks, rows narrower than the input
    (2, 3, 16, (21, 67), (2, 2), 1, ((1, 1), (1, 1)), 1),     # stride 2: rows gathered
    (1, 3, 52, (17, 65), (2, 2), 1, ((0, 0), (0, 0)), 1),     # stride 2 unpadded, 52 rows: gathered by default
    (1, 4, 5, (14, 50), (1, 3), 2, ((1, 2), (0, 3)), 1),      # stride 3 along rows, dilation 2, asymmetric pads
    (1, 3, 16, (64, 130), (1, 1), 1, ((1, 1), (1, 1)), 1),    # K = 27 (odd) on two threads: per-thread buffers
])
def test_conv_input_read_in_place(n, cin, cout, hw, stride, dil, pads, group):
    g, feeds = _conv_graph(n, cin, cout, hw, stride=stride, dil=dil, pads=pads, group=group)
    _check_in_place(g, feeds)


@pytest.mark.parametrize("epilogue", ["silu", "residual", "none"])
def test_fused_epilogues_over_padded_runs(epilogue):
    """Tile columns past a run's end hold no output: the epilogue (bias, activation, residual) skips them."""
    g, feeds = _conv_graph(2, 9, 11, (8, 29), epilogue=epilogue)
    _check_in_place(g, feeds)


def test_5x5_and_1x1_over_padding():
    for k, pads in ((5, ((2, 2), (2, 2))), (1, ((1, 0), (0, 1)))):
        g, feeds = _conv_graph(1, 6, 8, (9, 35), k=k, pads=pads)
        _check_in_place(g, feeds)


def test_int32_conv_is_exact():
    g, feeds = _conv_graph(1, 5, 7, (6, 21), epilogue="none", dtype=DType.int32)
    ks, c = _the_conv(g)
    assert plan_contraction(c).b_run_stride
    be = CPUBackend()
    want = run_reference(g, feeds)[0]
    from luminal.codegen.c.check import run_graph

    for s in _in_place_schedules(be, c):
        got = run_graph(g, feeds, schedules=[s if k is c else None for k in ks], kernels=ks)[0]
        assert np.array_equal(got, want.reshape(got.shape))


def test_reversed_rows_are_packed():
    """Windows walking the input backwards along the rows are no run to read or gather: B is packed."""
    x = Tensor.input("x", (1, 4, 9, 40), DType.float32)
    wt = Tensor.const(RNG.standard_normal((6, 4, 3, 3)).astype(np.float32))
    g = _graph([x], [conv(x.flip(3), wt, 1, [1, 1], [1, 1], [(1, 1), (1, 1)], [9, 40])])
    _, c = _the_conv(g)
    be = CPUBackend()
    assert not plan_contraction(c).b_run_stride
    assert not be.valid(c, {**be.default_schedule(c), "pack_b": False})


def test_default_reads_in_place_where_rows_take_whole_panels(sixteen_lanes):
    """On 16-lane vectors, the default reads a conv's input in place where its output rows fill NR-wide panels with less
    padding than the pack would cost (rows of 40: 48 or 64 columns, packed), in 8-row tiles where they pad M no more
    than 6-row ones (7-row ones where those pad less than both); a row within one panel, cut by the padding on both
    sides, only against few rows."""
    be = CPUBackend()
    vw = simd_width()  # the fixture's
    # rows of 7 vectors fill panels of one vector, up to 64 rows (``contraction.rows_of_vectors``); rows of 7.5
    # pad 7% in panels of two; rows of 7 against 96 rows, as rows of 1.9 vectors against 64, are packed
    for cout, width, nr in ((16, 4 * vw, 2 * vw), (64, 4 * vw - 3, 2 * vw), (20, 5 * vw // 2, 0),
                            (16, 7 * vw, vw), (64, 7 * vw, vw), (96, 7 * vw, 0), (16, 15 * vw // 2, 2 * vw),
                            (64, 15 * vw // 2, 2 * vw), (16, 2 * vw - 2, 2 * vw), (64, 2 * vw - 2, 0)):
        g, _ = _conv_graph(1, 8, cout, (12, width))
        _, c = _the_conv(g)
        s = be.default_schedule(c)
        assert be.valid(c, s) and plan_contraction(c).a_halo is None  # 72 K rows: too few for the copy
        assert s["pack_b"] is not bool(nr)
        assert not nr or s["nr"] == nr
        # 16 rows: two panels of 8, not three of 6; 64: eight of 8; 20: three of 7, not of 8
        assert s["mr"] == (7 if cout == 20 else 8 if cout < 96 else s["mr"])
    # a strided conv's rows are gathered by default where at most 64 rows share each panel
    for cout, gathered in ((16, True), (64, True), (72, False)):
        g, _ = _conv_graph(1, 3, cout, (12, 8 * vw), stride=(2, 2))
        _, c = _the_conv(g)
        assert be.default_schedule(c)["pack_b"] is not gathered


def _before_a_guard_page(x: np.ndarray) -> tuple[np.ndarray, mmap.mmap]:
    """A copy of ``x`` whose last element ends a page, the page after it unreadable (and the mapping: keep it)."""
    page = mmap.PAGESIZE
    total = -(-x.nbytes // page) * page + page
    m = mmap.mmap(-1, total)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + total - page, page, 0) == 0, ctypes.get_errno()  # PROT_NONE
    out = np.frombuffer(m, x.dtype, x.size, total - page - x.nbytes).reshape(x.shape)
    out[...] = x
    return out, m


def compare_before_a_guard_page(g, feeds: dict, be) -> None:
    """``g`` compiled with ``be`` and run on its feed ``x`` read in place, its last element before an unreadable
    page (a read past it kills the process), against the reference."""
    x, keep = _before_a_guard_page(feeds["x"])
    got = compile_graph(g, be).run({"x": x})
    ref = run_reference(g, feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-5, atol=2e-5 * float(np.abs(ref[0]).max()))
    del x, got
    keep.close()


@pytest.mark.parametrize("cout", [16, 72])
def test_rows_at_stride_2_are_gathered_by_vectors_within_the_input(cout):
    """A float row read at stride 2 is gathered a vector from each two (``contraction._gather``): read in place (16
    rows) and packed (72); the last panel's last pair of vectors would read one element past its row, which is
    past the input's end in the last row of the last channel, so that row takes the element-wise loop: the feed is
    read in place, its last element before an unreadable page."""
    vw = host_simd_width()
    g, feeds = _conv_graph(1, 3, cout, (12, 8 * vw), stride=(2, 2))
    _, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    assert s["pack_b"] is (cout > 64) and "= lum_even(src + " in be.source(c, s)
    compare_before_a_guard_page(g, feeds, be)


def test_a_padded_copy_at_stride_2_gathers_its_rows_by_vectors_within_the_input():
    """The padded copy of a strided conv's input (``halo.emit_halo_copy``) takes each row's phase a vector from each
    two of the input (``lum_even``); the even phase's last pair of vectors would read one element past its row, past
    the input's end in the last row of the last channel, which the copy then takes element by element: the feed
    is read in place, its last element before an unreadable page."""
    vw = host_simd_width()
    g, feeds = _conv_graph(1, 16, 64, (12, 4 * vw), stride=(2, 2))
    _, c = _the_conv(g)
    be = CPUBackend()
    s = be.default_schedule(c)
    assert plan_contraction(c, bool(s["swap"])).a_halo is not None and s["pack_a"] is False
    assert "= lum_even(x + " in be.source(c, s)
    compare_before_a_guard_page(g, feeds, be)


def test_20_channels_keep_pixels_as_columns():
    """Rows padded to MR (20 channels in 6-row tiles) do not swap the roles: the pixels stay B's columns, read
    in place, instead of an A packed per call."""
    g, feeds = _conv_graph(1, 8, 20, (32, 32))
    _, c = _the_conv(g)
    plan = plan_contraction(c)
    assert plan.sizes[1:3] == (20, 32 * 32) and plan.b_run_stride
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True)


@pytest.mark.parametrize("stride", [(1, 1), (2, 2)])
def test_grouped_conv_rows_shorter_than_a_vector_are_read_in_place(stride):
    """A grouped conv with a few channels per group over a small map (RegNet's 8 per group at 7x7): its input
    rows, shorter than a vector, are read in place one per panel, not packed a few elements at a time."""
    vw = simd_width()
    g, feeds = _conv_graph(1, 8 * 11, 8 * 11, (7 * stride[0], 7 * stride[1]), stride=stride, group=11)
    _, c = _the_conv(g)
    default = CPUBackend().default_schedule(c)
    assert default["pack_b"] is False and default["nr"] == vw and plan_contraction(c).size("m") == 8
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True)


@pytest.mark.parametrize("cin,cout,hw,pixels_as_columns", [
    (64, 384, 14, True),  # a small product: its 196 pixels padded to 224 lanes rather than packed per call
    (1024, 256, 14, False),  # 51M multiply-adds: the pack is worth the lanes
    (160, 960, 7, False),  # 49 pixels in 64 lanes pad more than WASTE_SMALL
])
def test_a_1x1_conv_at_a_short_map_takes_the_measured_orientation(sixteen_lanes, cin, cout, hw, pixels_as_columns):
    """On 16-lane vectors, which operand is A in a 1x1 conv whose pixels do not fill whole tiles: the pixels stay the
    columns of a small product, and are the rows (packed per call) of a large one or one whose lanes would go mostly
    empty; the other orientation stays in the search's space; both give the reference's outputs."""
    g, feeds = _conv_graph(1, cin, cout, (hw, hw), k=1, pads=((0, 0), (0, 0)))
    _, c = _the_conv(g)
    plan = plan_contraction(c)
    assert (plan.size("n") == hw * hw) is pixels_as_columns and plan.a_direct is pixels_as_columns
    be = CPUBackend()
    assert {kn.name: kn.choices for kn in be.space(c)}["swap"] == (False, True)
    compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True)


def test_random_points_of_a_conv_space_are_correct():
    """Every schedule the space offers for a conv kernel is C that compiles and matches the reference."""
    g, feeds = _conv_graph(2, 7, 13, (9, 23), pads=((1, 2), (2, 0)), group=1, epilogue="silu")
    ks, c = _the_conv(g)
    be = CPUBackend()
    picked = random_schedules(be, c, 10, 7, lambda s, picked: s["pack_b"] or sum(not p["pack_b"] for p in picked) < 6)
    assert any(not s["pack_b"] and s["impl"] == "generated" for s in picked)
    for s in picked:
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("n,cin,cout,k,stride,group", [
    (1, 24, 24, 5, 2, 24),   # depthwise, strided
    (2, 16, 32, 3, 1, 16),   # depthwise with multiplier 2
    (1, 32, 32, 3, 1, 4),    # grouped
    (1, 40, 24, 1, 1, 1),    # 1x1
    (2, 3, 20, 3, 2, 1),     # strided stem
])
def test_every_point_drawn_from_a_conv_space_emits(n, cin, cout, k, stride, group):
    """Many valid points of each kind of conv's space give C source: a schedule the search may draw never fails in
    the emitter (a depthwise conv swapped, its pixels as rows and no N dim, once did, ending ``luminal tune``)."""
    g, _ = _conv_graph(n, cin, cout, (14, 14), k=k, stride=(stride, stride), pads=((k // 2,) * 2,) * 2, group=group)
    _, c = _the_conv(g)
    be = CPUBackend()
    picked = random_schedules(be, c, 80, 3)
    assert len(picked) == 80
    for s in picked:
        assert "lum_kernel" in be.source(c, s)


@pytest.mark.parametrize("spatial,k,pads", [((45,), 5, ((2, 1),)), ((5, 6, 37), 3, ((1, 1), (0, 1), (1, 1)))])
def test_1d_and_3d_convs(spatial, k, pads):
    """Runs of the innermost output dim in one and three spatial dims (the outer ones unravelled per run)."""
    nd = len(spatial)
    x = Tensor.input("x", (2, 6, *spatial), DType.float32)
    wt = Tensor.const(RNG.standard_normal((9, 6) + (k,) * nd).astype(np.float32))
    outs = [_out(s, k, 1, 1, p) for s, p in zip(spatial, pads)]
    g = _graph([x], [conv(x, wt, 1, [1] * nd, [1] * nd, list(pads), outs).relu()])
    _check_in_place(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


def test_input_flipped_along_rows_and_channels():
    """Negative strides over the outer N dim and over K (a view, not a copy): offsets and mask ranges by sign."""
    x = Tensor.input("x", (1, 5, 10, 36), DType.float32)
    v = x.flip(2).flip(1).pad(((0, 0), (0, 0), (2, 0), (1, 1)))
    wt = Tensor.const(RNG.standard_normal((7, 5, 3, 3)).astype(np.float32))
    y = conv(v, wt, 1, [1, 1], [1, 1], [(0, 1), (0, 0)], [11, 36])
    g = _graph([x], [y.relu()])
    _check_in_place(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)})


@pytest.mark.parametrize("vw", [8, 16])
def test_defaults_are_points_of_the_space(lanes, vw):
    """The default schedule of each kind of conv is a point the search's space holds, on 8-lane (AVX2) and 16-lane
    (AVX-512) vectors alike: a depthwise conv's blocks of four one-vector panels were 32 columns on 8 lanes, which
    the NC knob does not offer."""
    lanes(vw)
    be = CPUBackend()
    for g in (_conv_graph(1, 16, 16, (12, 40), group=16)[0],  # depthwise: the stencil
              _conv_graph(1, 8, 16, (12, 4 * vw))[0],  # rows of whole vectors, read in place
              _conv_graph(1, 16, 40, (11, 27))[0],  # the padded copy
              _conv_graph(1, 24, 64, (9, 9), k=1, pads=((0, 0), (0, 0)))[0]):
        _, c = _the_conv(g)
        s = be.default_schedule(c)
        assert be.valid(c, s), s
