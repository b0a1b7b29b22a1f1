"""Stencil kernels (depthwise and few-channel grouped convs: every tap's weight in a register, the input read in
place, padding from the view's masks) against the reference executor."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_util import compare_cpu
from codegen_util import graph as _graph

from luminal.codegen.c import schedule, stencil
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.stencil import plan_stencil
from luminal.codegen.partition import partition
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir import DType, Tensor

RNG = np.random.default_rng(23)


def _out(size: int, k: int, stride: int, dil: int, pads: tuple[int, int]) -> int:
    return (size + pads[0] + pads[1] - dil * (k - 1) - 1) // stride + 1


def _conv(x: Tensor, cout: int, group: int, kernel: tuple[int, ...], stride: int = 1, dil: int = 1,
          pads: tuple[tuple[int, int], ...] | None = None) -> Tensor:
    cin, spatial = x.shape[1], x.shape[2:]
    pads = pads or tuple((k // 2, k // 2) for k in kernel)
    w = Tensor.const(RNG.standard_normal((cout, cin // group, *kernel)).astype(np.float32))
    outs = [_out(s, k, stride, dil, p) for s, k, p in zip(spatial, kernel, pads)]
    return conv(x, w, group, [stride] * len(kernel), [dil] * len(kernel), list(pads), outs)


def _bias(y: Tensor) -> Tensor:
    b = Tensor.const(RNG.standard_normal(y.shape[1]).astype(np.float32))
    return y.add(b.reshape((1, -1) + (1,) * (y.ndim - 2)).expand(y.shape))


def _hardswish(y: Tensor) -> Tensor:
    return y.mul(y.mul(1.0 / 6).add(0.5).maximum(0).minimum(1))


def _stencils(g):
    ks = partition(g, {})
    return ks, [k for k in ks if k.form == "contraction" and plan_stencil(k) is not None]


def _check(inputs: list[Tensor], y: Tensor, stencil: bool | None = True) -> None:
    """The conv's kernel is a stencil by default (or, ``stencil`` False, offers it; None: either), and both that
    and its other implementations agree with the reference."""
    g = _graph(inputs, [y])
    ks, sts = _stencils(g)
    assert len(sts) == 1
    k = sts[0]
    be = CPUBackend()
    base = be.default_schedule(k)
    assert stencil is None or (base["impl"] == "stencil") == stencil
    assert "stencil" in next(kn.choices for kn in be.space(k) if kn.name == "impl")
    feeds = {t.node.attrs["name"]: RNG.standard_normal(t.shape).astype(np.float32) for t in inputs}
    scheds = [{**base, "impl": "stencil"}, {**base, "impl": "stencil", "threads": 1}, {**base, "impl": "loops"}]
    for s in scheds:
        assert be.valid(k, s), s
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is k else None for kk in ks], kernels=ks)


@pytest.mark.parametrize("n,c,h,w,ksz,stride,dil,pads", [
    (1, 16, 12, 40, 3, 1, 1, ((1, 1), (1, 1))),      # rows wider than two vectors: an unmasked run between borders
    (2, 5, 9, 11, 3, 2, 1, ((1, 1), (1, 1))),        # stride 2, odd sizes, batch 2
    (1, 7, 13, 37, 3, 2, 1, ((0, 1), (1, 0))),       # asymmetric pads at stride 2
    (1, 6, 10, 21, 3, 1, 2, ((2, 2), (2, 2))),       # dilation 2
    (1, 3, 8, 9, 5, 1, 1, ((2, 2), (2, 2))),         # 5x5, a row narrower than a vector
    (1, 20, 7, 7, 3, 1, 1, ((1, 1), (1, 1))),        # a 7x7 map: 4-lane border vectors
    (1, 4, 6, 30, 3, 1, 1, ((0, 0), (0, 0))),        # no padding: no masks at all
    (1, 3, 9, 17, 3, 1, 1, ((3, 0), (0, 4))),        # pads past the window: whole taps in the padding
    (3, 18, 16, 16, 3, 2, 2, ((2, 1), (1, 2))),      # stride 2 and dilation 2
    (1, 24, 14, 14, 5, 2, 1, ((2, 2), (2, 2))),      # 5x5 stride 2 to a 7x7 map (MobileNetV3's downsampling)
    (1, 5, 9, 70, 3, 2, 1, ((1, 1), (1, 1))),        # stride 2 over rows of 35: whole vectors between the borders
    (2, 3, 11, 90, 5, 2, 1, ((2, 2), (2, 2))),       # 5x5 stride 2, rows of 45: a row's 5 taps, 3 pairs of loads
    (1, 4, 9, 66, 3, 2, 2, ((2, 2), (2, 2))),        # stride 2, dilation 2, rows of 33: no tap shares a load
    (1, 2, 7, 64, 3, 2, 1, ((1, 1), (0, 1))),        # rows of 32, the last one's loads reaching past the buffer
])
def test_depthwise(n, c, h, w, ksz, stride, dil, pads):
    x = Tensor.input("x", (n, c, h, w), DType.float32)
    _check([x], _conv(x, c, c, (ksz, ksz), stride, dil, pads))


@pytest.mark.parametrize("c,h,w,ksz,stride,pads", [
    (5, 21, 40, 9, 1, ((4, 4), (4, 4))),     # 81 taps: its edge rows with every tap's test (past EDGE_TAPS)
    (3, 17, 23, 11, 2, ((5, 4), (3, 5))),    # 121 taps at stride 2, asymmetric pads, odd sizes
    (4, 12, 19, 11, 1, ((5, 5), (5, 5))),    # a row of 19 in the 11x11 window's reach from both sides
])
def test_large_windows(c, h, w, ksz, stride, pads):
    """Depthwise convs with up to WINDOW_TAPS_MAX taps (windows past ConvNeXt's 7x7) are stencils by default, each
    against the reference."""
    x = Tensor.input("x", (1, c, h, w), DType.float32)
    _check([x], _bias(_conv(x, c, c, (ksz, ksz), stride, 1, pads)).relu())


def test_windows_past_the_bounds_are_no_stencils():
    """A depthwise window past WINDOW_TAPS_MAX (13x13) stays loops, as do a dense conv and a product of one row with
    more than TAPS_MAX taps."""
    x = Tensor.input("x", (1, 2, 15, 15), DType.float32)
    assert not _stencils(_graph([x], [_conv(x, 2, 2, (13, 13))]))[1]
    x = Tensor.input("x", (1, 4, 15, 15), DType.float32)
    assert not _stencils(_graph([x], [_conv(x, 4, 1, (5, 5))]))[1]
    # a product of one row (an LSTM step's) over 96 K rows: one reduced dim, no window
    v = Tensor.input("v", (1, 96), DType.float32)
    assert not _stencils(_graph([v], [v.matmul(Tensor.const(RNG.standard_normal((96, 384)).astype(np.float32)))]))[1]


@pytest.mark.parametrize("vw", [4, 16])
def test_stride_2_lanes_on_other_vector_widths(lanes, vw):
    """At stride 2 a tap's lanes come in the order a shuffle within 128-bit lanes leaves them: the pixels' own on
    4-lane vectors, interleaved across the four 128-bit lanes of 16 (AVX-512), restored before the epilogue."""
    lanes(vw)
    x = Tensor.input("x", (2, 3, 9, 70), DType.float32)
    _check([x], _bias(_conv(x, 3, 3, (3, 3), 2, 1, ((1, 1), (1, 1)))).relu())
    x = Tensor.input("x", (1, 4, 11, 90), DType.float32)
    _check([x], _conv(x, 4, 4, (5, 5), 2, 1, ((2, 2), (2, 2))))


@pytest.mark.parametrize("stride", [3, 4])
@pytest.mark.parametrize("vw", [4, 8, 16])
def test_strides_past_2_take_their_lanes_from_whole_loads(lanes, vw, stride):
    """At stride 3 or 4 a tap's lanes are elements k, k + stride, .. of as many whole loads, shuffled into the
    pixels' order (``lum_ph``), the compiler's gathers left to the scalar pixels: taps fewer than ``stride``
    elements past another read its loads (a 5x5 window's row: two sets of loads), a dilated window's taps each
    their own phase; border vectors with the padding's lanes masked, whole vectors between them, rows narrower
    than a vector, asymmetric pads and a batch, each against the reference."""
    lanes(vw)
    for shape, ksz, dil, pads in [((1, 3, 9, 150), 3, 1, ((1, 1), (1, 1))),  # rows of 38-50: whole vectors between
                                  ((2, 2, 8, 23), 5, 1, ((2, 2), (2, 2))),    # rows of 6-8
                                  ((1, 4, 11, 61), 3, 2, ((2, 1), (0, 3))),   # offsets 0, 2, 4
                                  ((1, 2, 6, 64), 3, 1, ((1, 1), (0, 1)))]:   # the last row's loads reach its end
        x = Tensor.input("x", shape, DType.float32)
        y = _bias(_conv(x, shape[1], shape[1], (ksz, ksz), stride, dil, pads)).relu()
        g = _graph([x], [y])
        (k,) = _stencils(g)[1]
        src = CPUBackend().source(k, {**CPUBackend().default_schedule(k), "impl": "stencil"})
        assert f"lum_ph{stride}_0(" in src
        _check([x], y, stencil=None)


@pytest.mark.parametrize("mult,stride", [(2, 1), (2, 2), (3, 1)])
def test_depthwise_channel_multiplier(mult, stride):
    x = Tensor.input("x", (2, 6, 11, 19), DType.float32)
    _check([x], _bias(_conv(x, 6 * mult, 6, (3, 3), stride)).relu())


def test_grouped_few_channels_per_group():
    """Two input channels per group: the taps are (channel, row, column), 18 of them."""
    x = Tensor.input("x", (1, 8, 10, 23), DType.float32)
    _check([x], _conv(x, 8, 4, (3, 3)))


def test_rows_read_far_apart_are_no_stencils():
    """A conv whose row's pixels lie more than STEP_MAX elements apart in its input (a grouped conv over a
    channels-last input of 8 channels: 8 apart) is no stencil, which would gather every vector of its rows; its
    default against the reference. At stride 4 (a Winograd F(4x4) input transform's tiles) it still is."""
    x = Tensor.input("x", (1, 10, 23, 8), DType.float32)
    g = _graph([x], [_bias(_conv(x.permute((0, 3, 1, 2)), 8, 4, (3, 3))).relu()])
    ks, sts = _stencils(g)
    assert not sts and any(k.form == "contraction" for k in ks)
    compare_cpu(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)}, 2e-5, 2e-5, scaled=True, kernels=ks)
    z = Tensor.input("z", (1, 4, 12, 40), DType.float32)
    _check([z], _conv(z, 4, 4, (5, 5), 4), stencil=None)


def test_input_feeding_many_outputs_offers_the_stencil_without_defaulting_to_it():
    """A dense conv with few input channels (a stem) reuses each input element across its output channels, as a
    GEMM tile does: the stencil is a choice there, not the default."""
    x = Tensor.input("x", (1, 3, 12, 20), DType.float32)
    _check([x], _conv(x, 16, 1, (3, 3), 2), stencil=False)


@pytest.mark.parametrize("hw", [14, 37])  # a row of one vector; rows of two, computed two rows at a time
@pytest.mark.parametrize("epilogue", ["bias_relu", "hardswish", "silu", "residual"])
def test_fused_epilogues(epilogue, hw):
    x = Tensor.input("x", (2, 24, hw, hw), DType.float32)
    y = _bias(_conv(x, 24, 24, (3, 3)))
    inputs = [x]
    if epilogue == "bias_relu":
        y = y.relu()
    elif epilogue == "hardswish":
        y = _hardswish(y)
    elif epilogue == "silu":
        y = y.mul(y.sigmoid())
    else:
        r = Tensor.input("r", y.shape, DType.float32)
        inputs.append(r)
        y = y.add(r)
    g = _graph(inputs, [y])
    ks, sts = _stencils(g)
    assert len(ks) == 1 and len(sts) == 1  # the epilogue is fused into the stencil kernel
    _check(inputs, y)


def test_conv1d():
    x = Tensor.input("x", (2, 10, 50), DType.float32)
    _check([x], _bias(_conv(x, 10, 10, (5,), pads=((2, 2),))).relu())


def test_rows_longer_than_the_zero_row_where_no_tap_reads_it():
    """The static zero row (what a tap in a padding row reads) bounds a row's length only where rows of the input
    are padded: a Winograd output transform at batch 8 merges its rows into one of 100352 pixels, which fell back
    to a GEMM 2.6x slower; a 1-D conv's padding lies along the row, in the masks of its border pixels."""
    x = Tensor.input("x", (1, 2, 70002), DType.float32)
    _check([x], _conv(x, 2, 2, (3,), pads=((0, 0),)))
    x = Tensor.input("x", (1, 2, 70000), DType.float32)
    _check([x], _conv(x, 2, 2, (3,), pads=((1, 2),)))
    rows = Tensor.input("x", (1, 2, 3, 70000), DType.float32)
    assert not _stencils(_graph([rows], [_conv(rows, 2, 2, (3, 3))]))[1]


def test_padding_reads_zeros_not_neighbours():
    """The padding reads zeros even where the input's neighbouring elements are huge, inf or NaN: a border lane
    that multiplied a neighbour by zero would give NaN."""
    x = Tensor.input("x", (1, 4, 6, 20), DType.float32)
    g = _graph([x], [_conv(x, 4, 4, (3, 3))])
    v = RNG.standard_normal((1, 4, 6, 20)).astype(np.float32)
    v[:, :, :, 0] = np.inf
    v[:, :, :, -1] = np.nan
    v[:, 1, 0, :] = -np.inf
    compare_cpu(g, {"x": v}, 2e-5, 2e-5, scaled=True)


def test_depthwise_default_is_the_stencil_and_its_source_has_no_staging():
    x = Tensor.input("x", (1, 32, 28, 28), DType.float32)
    g = _graph([x], [_bias(_conv(x, 32, 32, (3, 3))).relu()])
    _, sts = _stencils(g)
    be = CPUBackend()
    k = sts[0]
    src = be.source(k, be.default_schedule(k))
    assert be.default_schedule(k)["impl"] == "stencil"
    assert "omp simd" in src and "lum_bv" in src and "s0[" not in src


def test_small_matmul_offers_the_stencil():
    """Any contraction of few reduced points whose one operand walks the innermost output dim is a stencil: a
    matmul with K = 12 (the other operand's rows as the taps' weights)."""
    a = Tensor.input("a", (20, 12), DType.float32)
    b = Tensor.input("b", (12, 45), DType.float32)
    _check([a, b], a.matmul(b), stencil=False)


def test_row_dependent_pixel_bounds(monkeypatch):
    """The general path, where the interior's bounds are computed per row (pixel constraints that involve other
    dims), forced on a padded conv."""
    from luminal.codegen.c import stencil

    init = stencil._Emitter.__init__

    def dynamic(self, *args):
        init(self, *args)
        self.static = False

    monkeypatch.setattr(stencil._Emitter, "__init__", dynamic)
    x = Tensor.input("x", (1, 6, 9, 23), DType.float32)
    _check([x], _conv(x, 6, 6, (3, 3), 2, 1, ((1, 1), (2, 1))))


@pytest.mark.parametrize("vw", [8, 16])
def test_a_vector_of_pixels_no_tap_reads_is_zeros(lanes, vw):
    """A stride-2 window whose taps all lie in the padding for some whole vector of pixels (pads at least the
    window's reach): that vector's sum is a vector of zeros, not a float (which the compiler refused)."""
    lanes(vw)
    x = Tensor.input("x", (1, 25, 31, 46), DType.float32)
    _check([x], _conv(x, 25, 25, (1, 3), 2, 1, ((1, 0), (2, 1))).relu())
    x = Tensor.input("x", (2, 6, 54, 54), DType.float32)
    _check([x], _bias(_conv(x, 9, 1, (1, 1), 2, 1, ((1, 1), (1, 1)))), stencil=None)


def _default_source(y: Tensor, inputs: list[Tensor]) -> str:
    """The source of the stencil computing ``y`` under its default schedule."""
    _, sts = _stencils(_graph(inputs, [y]))
    be = CPUBackend()
    return be.source(sts[0], be.default_schedule(sts[0]))


def _pairs(y: Tensor, inputs: list[Tensor]) -> bool:
    """Whether the stencil's default source computes two rows a vector (``row_pairs``)."""
    return "lum_pv" in _default_source(y, inputs)


@pytest.mark.parametrize("vw", [8, 16])
@pytest.mark.parametrize("n,c,mult,h,w,ksz,dil,pads", [
    (1, 24, 1, 14, 14, 5, 1, ((2, 2), (2, 2))),     # MobileNetV3's downsampling: 7 rows, the last one alone
    (2, 5, 2, 16, 16, 5, 1, ((2, 2), (2, 2))),      # batch 2, channel multiplier 2, 8 rows in 4 pairs
    (1, 9, 1, 15, 9, 7, 1, ((3, 3), (3, 3))),       # 7x7 taps, odd sizes
    (1, 8, 1, 13, 11, 5, 1, ((0, 4), (4, 1))),      # asymmetric pads: a column's taps in the padding alone
    (1, 8, 1, 12, 9, 5, 2, ((4, 4), (4, 4))),       # dilation 2: a window row's taps in two loads
    (1, 8, 1, 9, 8, 5, 1, ((2, 2), (2, 2))),        # rows of 4: in pairs on 8-lane vectors too
])
def test_two_rows_a_vector(lanes, vw, n, c, mult, h, w, ksz, dil, pads):
    """Rows of half a vector or less under a strided window of many taps, planes enough for every thread: two rows
    a vector, each tap's lanes a permutation of one load per row (``stencil.row_pairs``), both halves' epilogues
    (bias, hardswish) stored."""
    lanes(vw)
    x = Tensor.input("x", (n, c, h, w), DType.float32)
    y = _hardswish(_bias(_conv(x, c * mult, c, (ksz, ksz), 2, dil, pads)))
    assert y.shape[3] <= vw // 2 or not _pairs(y, [x])
    if y.shape[3] <= vw // 2:
        assert _pairs(y, [x])
        _check([x], y)


def test_two_rows_a_vector_with_a_residual_and_where_measured(sixteen_lanes):
    """A residual read per pixel in both halves of the vector; and the rule: strided windows of at least
    PAIR_TAPS taps (a 3x3 at stride 2 and a 5x5 at unit stride keep a row a vector)."""
    x = Tensor.input("x", (1, 8, 14, 14), DType.float32)
    r = Tensor.input("r", (1, 8, 7, 7), DType.float32)
    y = _bias(_conv(x, 8, 8, (5, 5), 2)).add(r)
    assert _pairs(y, [x, r])
    _check([x, r], y)
    assert not _pairs(_conv(x, 8, 8, (3, 3), 2), [x])
    s = Tensor.input("s", (1, 8, 7, 7), DType.float32)
    assert not _pairs(_conv(s, 8, 8, (5, 5), 1), [s])


def test_two_rows_a_vector_read_zeros_in_the_padding_not_neighbours(sixteen_lanes):
    """A lane outside its tap's window is zeroed, not multiplied by a weight: infinities and NaNs in the input's
    first and last columns and rows reach only the outputs whose windows hold them."""
    x = Tensor.input("x", (1, 8, 14, 14), DType.float32)
    y = _conv(x, 8, 8, (5, 5), 2)
    assert _pairs(y, [x])
    v = RNG.standard_normal((1, 8, 14, 14)).astype(np.float32)
    v[:, :, :, 0] = np.inf
    v[:, :, :, -1] = np.nan
    v[:, 1, 0, :] = -np.inf
    v[:, 2, -1, :] = np.nan
    compare_cpu(_graph([x], [y]), {"x": v}, 2e-5, 2e-5, scaled=True)


def _blocks(y: Tensor, inputs: list[Tensor]) -> bool:
    """Whether the stencil's default source computes rows in blocks (``stencil.block``)."""
    return "int64_t lum_rb =" in _default_source(y, inputs)


@pytest.mark.parametrize("vw", [8, 16])
@pytest.mark.parametrize("n,c,mult,h,w,ksz,stride,dil,pads", [
    (1, 16, 1, 23, 24, 7, 1, 1, ((3, 3), (3, 3))),  # 7x7: blocks of rows, the rows left over, the padding's
    # blocks, each weight read where its adds take it (past BLOCK_WEIGHTS taps)
    (2, 9, 2, 20, 37, 5, 1, 1, ((2, 2), (2, 2))),   # batch 2, channel multiplier 2, an odd width
    (1, 16, 1, 17, 30, 3, 1, 1, ((0, 2), (2, 1))),  # asymmetric pads
    (1, 16, 1, 19, 33, 3, 1, 2, ((2, 2), (2, 2))),  # dilation 2: rows two apart share loads; 8 lanes: 2 chunks
    (1, 24, 1, 14, 14, 7, 1, 1, ((3, 3), (3, 3))),  # rows of one vector
    (1, 16, 1, 12, 9, 3, 1, 1, ((3, 0), (1, 4))),   # pads past the window: rows whose taps all lie in the padding
    (1, 16, 1, 23, 70, 3, 2, 1, ((1, 1), (1, 1))),  # stride 2: a tap's lanes the even or odd elements of two loads
    (2, 8, 1, 30, 45, 5, 2, 1, ((2, 1), (1, 2))),   # 5x5 at stride 2, asymmetric pads, batch 2
    (1, 16, 1, 21, 66, 3, 2, 2, ((2, 2), (2, 2))),  # stride 2 and dilation 2: no tap shares a pair of loads
])
def test_row_blocks(lanes, vw, n, c, mult, h, w, ksz, stride, dil, pads):
    """Rows of a window computed in blocks, each load of input made once for every row it feeds
    (``stencil.block``), with the blocks over the padding's rows reading only their live taps, against the
    reference with a fused bias and hardswish."""
    lanes(vw)
    x = Tensor.input("x", (n, c, h, w), DType.float32)
    y = _hardswish(_bias(_conv(x, c * mult, c, (ksz, ksz), stride, dil, pads)))
    assert _blocks(y, [x])
    _check([x], y)


def test_row_blocks_at_a_row_stride_with_a_residual_reading_zeros_in_the_padding(sixteen_lanes):
    """A window strided down the rows only (rows 2 apart in the input share loads where taps are 2 apart), a
    residual read per pixel, and infinities and NaNs in the input's border columns and rows that only the outputs
    whose windows hold them see; rows past BLOCK_VECTORS vectors have no blocks."""
    x = Tensor.input("x", (1, 16, 30, 45), DType.float32)
    w = Tensor.const(RNG.standard_normal((16, 1, 5, 5)).astype(np.float32))
    y = conv(x, w, 16, [2, 1], [1, 1], [(2, 2), (2, 2)], [15, 45])
    r = Tensor.input("r", y.shape, DType.float32)
    y = _bias(y).add(r)
    assert _blocks(y, [x, r])
    _check([x, r], y)
    v = RNG.standard_normal((1, 16, 30, 45)).astype(np.float32)
    v[:, :, :, 0] = np.inf
    v[:, :, :, -1] = np.nan
    v[:, 1, 0, :] = -np.inf
    v[:, 2, -1, :] = np.nan
    compare_cpu(_graph([x, r], [y]), {"x": v, "r": RNG.standard_normal(y.shape).astype(np.float32)}, 2e-5, 2e-5,
                scaled=True)
    wide = Tensor.input("x", (1, 16, 6, 16 * stencil.BLOCK_VECTORS + 40), DType.float32)
    assert not _blocks(_conv(wide, 16, 16, (3, 3)), [wide])


def test_block_rows_are_the_schedules_mr(sixteen_lanes):
    """A conv stencil's blocks take their rows from the schedule's ``mr`` (the rows of its register tile), a knob
    the search varies: each value a source of its own, against the reference; the default's is the rule's
    (``stencil.block_rows``)."""
    x = Tensor.input("x", (1, 16, 23, 40), DType.float32)
    g = _graph([x], [_bias(_conv(x, 16, 16, (7, 7)))])
    ks, (k,) = _stencils(g)
    be = CPUBackend()
    base = be.default_schedule(k)
    assert base["impl"] == "stencil" and base["mr"] == stencil.block_rows(k, schedule.simd_width()) > 0
    assert {2, 3, 5, 8} <= set(next(kn.choices for kn in be.space(k) if kn.name == "mr"))
    feeds = {"x": RNG.standard_normal(x.shape).astype(np.float32)}
    sources = set()
    for mr in (2, 3, 8):
        s = {**base, "mr": mr}
        assert be.valid(k, s)
        sources.add(be.source(k, s))
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if kk is k else None for kk in ks], kernels=ks)
    assert len(sources) == 3
