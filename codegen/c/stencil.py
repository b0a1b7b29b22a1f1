"""Stencil kernels: a SumReduce over a few taps of a float32 product of two loads, one of which (the input)
walks the innermost kept dim with a constant stride while the other (the weight) does not read that dim: a
depthwise conv (one input channel per output channel), a grouped conv with few channels per group, a 1-D conv;
or a SumReduce or MaxReduce over a few taps of the input alone (an average or max pool, stride 1 or 2).

Each row of the kept space (every kept dim but the innermost, e.g. batch, channel and output row) reads its
taps' weights into scalars once and walks the innermost dim (the output pixels) in an ``omp simd`` loop, every
tap unrolled: the weights sit broadcast in vector registers, the sum of the taps stays in one, and the input is
read in place (unit stride: unaligned vector loads; stride 2: see below), then the row-space
epilogue (bias, activation, residual) runs on it in the same loop. Padding comes from the input view's masks:
a constraint that does not involve the innermost dim (a pad row above or below) holds or fails for the whole
row, and a tap whose row fails reads a static zero row instead; the others bound an interior run of pixels
where every tap reads inside its window, vectorised without a test, and the pixels left and right of it are
computed one by one with the masks.

At stride 2 a tap's vector is the even (or odd) elements of two loads, in the order a shuffle within 128-bit lanes
gives them (``_lane_pixel``), restored once for the sum; a tap one element past another (the next column of a
window) takes the odd elements of that tap's loads: a 3x3 window's row is two pairs of loads and three shuffles,
where the compiler's strided loads took two loads and three shuffles per tap.

Where a row fits half a vector and a strided window has many taps (a 5x5 depthwise conv at stride 2 from 14x14 to
7x7), two rows share a vector (``row_pairs``): each tap's lanes, both rows', are one two-source permutation of a
load from each row's input, which the taps of a window row share, and the pair's epilogue runs on each half.

At stride 3 or 4 (a Winograd F(3x3)'s or F(4x4)'s tiles) a tap's vector is elements k, k + s, .. of s whole loads, in
the pixels' order: the first two loads' lanes by one shuffle, each further load's by another into it; a tap fewer than
s elements past another takes that tap's loads. Where the weight reads only kept dims the input does not (a constant
matrix applied to every row of its input: Winograd's transforms), a row loads its taps' vectors once and sums them with
each of those dims' points' weights in turn (``_points``), where each point would have read the row again.

A tap's load for one output row is another tap's for a row below it (a 7x7 window's input row feeds seven output
rows; at stride 2, a 5x5's feeds three): rows run in blocks (``block``) that keep a sum per row and vector in
registers, load each vector of input once (at stride 2, each pair of loads), hold it in a register and add it
with each tap's weight into every sum it feeds; the rows in the padding have blocks of their own, with the taps
that read inside the input. A depthwise conv with its channels innermost (``_lane_input``: a row is a pixel's
channels) runs its pixels in blocks along their columns the same way (``lane_block``), each tap's vector of
weights loaded once for the block's pixels.

A pool's max is a max over the taps in ACCS partial maxima, NaN where any tap is NaN (a flag per pixel, as the
reduction's, tested in whole vectors only where the sum of the taps is NaN); a tap outside the input's window
reads zero as the masked load does (a zero lane, the zero row, and a zero among the taps of a padding row
emitted with its live taps only). A pool's planes are every kept dim
but the rows, which then go in pairs as a conv's.

A pool whose windows overlap along the row (more taps side by side than its stride: a 3x3 pool at stride 1 or 2)
is separable: each row first reduces every input column over the taps of the other reduced dims into a buffer
(zero where the columns lie in the padding), then reduces the buffer's columns under each window, both in
``omp simd`` loops: a column shared by neighbouring windows is reduced once, and a stride-2 window's loads read
the buffer, not the input. A row's columns are reduced before the previous row's windows, whose loads then find
their columns stored. An average pool over rows of at most two vectors still reads its taps one by one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...ir.dtypes import DType
from ...ir.graph import Op
from ...ir.view import View, reads_dim
from ..index import view_masks
from ..kernel import REDUCE_OPS, Kernel, Leaf, Space
from . import ctypes_map as ct
from .emit import PAR_MIN, Body, _function, affine, epilogue_attribute, mask_bounds, unravel
from .normalize import normalize
from .prelude import pair_shuffle, shuffle

if TYPE_CHECKING:
    from .knobs import GemmSchedule, ReductionSchedule

TAPS_MAX = 64  # taps a row unrolls (a 8x8 window, or 7 channels per group of a 3x3 conv)
# and over a 2-D window whose input elements feed one output a tap (a depthwise conv, a pool): 11x11. Past it a conv
# is loops over blocks of output columns, and a pool a stencil only where separable: 2 threads, hot, a 9x9
# depthwise conv over 64 channels at 40x40 1.46 -> 0.20 ms as a stencil (onnxruntime 0.19), 13x13 over 128 at 28x28
# 1.40 -> 0.51 (0.33), but its compile time grows faster than its taps (a 15x15's 15 s), so a larger window stays
# loops; with more outputs an input element feeds, the GEMM's tiles win past TAPS_MAX (a 5x5 conv 4 -> 4 at 56x56
# 53 us as a stencil, 33 as a GEMM), as they do for a product of one row over one reduced dim (a CRNN's LSTM
# steps, 96 x 384 weights, as stencils: the model 4.40 -> 6.69 ms)
WINDOW_TAPS_MAX = 128
# the most outputs each input element feeds per tap for the stencil to be the default: a depthwise conv
# (1) or one with a channel multiplier; a conv whose input feeds many output channels reuses it in a GEMM tile
REUSE_MAX = 4
# or where the weight is small (taps times outputs per input element): the GEMM's tiles then meet too few K
# rows to pay for themselves. Kernel alone on 2 threads, GEMM against stencil: 3x3 convs at 112x112, 1 -> 8
# channels 0.034 -> 0.011 ms, 1 -> 16 0.067 -> 0.021, 2 -> 8 0.037 -> 0.018, a 1x1 4 -> 32 0.058 -> 0.029, the
# input transforms of a Winograd F(4x4) (6 x 6) 0.27 -> 0.07 and 0.52 -> 0.13; at par or behind past it: 2 -> 16
# (288) 0.067 and 0.068, 3 -> 8 (216) 0.027 and 0.033, 1x1 8 -> 32 (256) 0.042 and 0.047
WEIGHT_MAX = 160
# the farthest apart a conv stencil's row reads its input's pixels: Winograd F(4x4, 3x3)'s input transforms
# take tiles 4 apart (each vector a gather over four cache lines). A conv over a channels-last input, its
# pixels a channel count apart, is a GEMM reading each pixel's channels (3x3 over 4 channels a group at 56x56,
# 128 channels: as a stencil 19.1 ms, gathering every vector across sixteen cache lines; 1.46 as the GEMM)
STEP_MAX = 4
# the strides whose vectors take their lanes from whole loads by shuffles (``_vload``; past them, the compiler's
# gathers): a Winograd F(4x4)'s column transform, 6 taps over a row of 14 tiles, 2 threads, 16 lanes, hot, its 6
# points at once (``_points``): 129 -> 53 us against the gathers (the phases as a tree of shuffles, each half of the
# vector from two loads, then the halves joined: 53 us as well); an F(3x3)'s, 5 taps over rows of 10 tiles (128
# channels at 30x30), 62 -> 35 us
PHASES = (1, 2, 3, 4)
ZERO_MAX = 1 << 16  # floats of the static zero row (a tap whose row lies in the padding reads it)
LANE_WEIGHTS_MAX = 1 << 18  # floats of a lane-weights stencil's copy of its weight (``_lane_input``)
COLUMNS_MAX = 1 << 13  # floats of each of a separable pool's two column buffers (on a thread's stack)
# a sum (an average pool) at stride 1 is separable where its rows span at least this many vectors of input columns, at a
# stride where they span more than STRIDED_SUM_SPAN; a max always. 2 threads, hot, against the taps read one by one
# (whose sums read whole vectors without the max's NaN tests): 3x3 average pools at stride 1 over 256x27x27 39 -> 30 us,
# 128x21x21 15.9 -> 11.9; 3x3 max pools at stride 1 over 256x27x27 81 -> 36, 832x6x6 19 -> 17, at stride 2 over
# 832x13x13 43 -> 17. Paired in one process (16 lanes): average pools at stride 1, 3x3 over 512x14x14 37 -> 30 us, 5x5
# over 128x14x14 21 -> 14, over 256x20x20 70 -> 39, 7x7 121 -> 47, 9x9 249 -> 54; where the span is less than a vector,
# 5x5 over 64x10x10 10.3 -> 10.7, 3x3 and 5x5 over 256x7x7 13 -> 23 and 15 -> 24; at stride 2, 3x3 over 256x28x28 (a
# span of 29) 28 -> 22 but over 192x17x17 (19) 16 -> 27
SUM_SPAN = 1
STRIDED_SUM_SPAN = 2


@dataclass(frozen=True)
class Stencil:
    """Op indices and dims of the normalised kernel (``normalize``) that the stencil reads."""

    x: int  # the input's load: walks ``din`` with stride ``step``
    w: int | None  # the weight's load: does not read ``din`` (None: a pool, the taps of the input alone)
    red: int  # the SumReduce (or a pool's MaxReduce)
    din: int  # the innermost kept dim: the pixels of a row
    step: int
    reuse: int  # points of the kept dims the input does not read (a depthwise conv's channel multiplier)
    max: bool  # the reduction is a max (a max pool)
    side: int | None = None  # a separable pool's reduced dim along the row (see the module's docstring)
    span: int = 0  # and the input columns a row of its windows reads
    # where the weight reads ``din`` too: the floats of its copy with the taps outermost, a vector of weights per
    # tap (``_lane_input``); 0 where it does not
    lanes: int = 0
    unrolled: bool = True  # every tap of a row may be unrolled (see ``unrolled``)


def plan_stencil(kernel: Kernel) -> Stencil | None:
    """The stencil reading of ``kernel`` (over its normalised space), or None; kept on the kernel."""
    if "_c_stencil" not in kernel.__dict__:
        kernel.__dict__["_c_stencil"] = _plan(normalize(kernel))
    return kernel.__dict__["_c_stencil"]


def stencil_default(kernel: Kernel) -> bool:
    """Whether the stencil is the kernel's default: the input feeds few outputs per tap, which no GEMM tile
    could reuse (a depthwise conv ran 2.5-5x faster than as loops over blocks of output columns), or the weight is
    small."""
    st = plan_stencil(kernel)
    taps = math.prod(kernel.full[d] for d in kernel.reduce_axes)
    return st is not None and (st.reuse <= REUSE_MAX or (st.w is not None and st.reuse * taps <= WEIGHT_MAX))


def _plan(k: Kernel) -> Stencil | None:
    reds = [i for i, o in enumerate(k.ops) if o.op in REDUCE_OPS]
    if len(reds) != 1 or k.ops[reds[0]].op not in (Op.SumReduce, Op.MaxReduce) or 0 in k.full:
        return None
    red = reds[0]
    arg = k.ops[red].args[0]
    mo = k.ops[arg]
    if mo.op is Leaf.Load:  # a pool
        args, full = [arg], {arg}
    elif mo.op is Op.Mul and k.ops[red].op is Op.SumReduce and mo.space is Space.full and len(set(mo.args)) == 2:
        args, full = list(mo.args), {*mo.args, arg}
    else:
        return None
    loads = [k.ops[a] for a in args]
    if any(o.op is not Leaf.Load or o.dtype is not DType.float32 or o.attr("view").shape != k.full
           for o in loads) or k.ops[red].dtype is not DType.float32:
        return None
    if {i for i, o in enumerate(k.ops) if o.space is Space.full} != full:
        return None
    if any(k.ops[o].space is not Space.row for o, _ in k.outputs) or any(o.op is Op.Gather for o in k.ops):
        return None
    kept = [d for d in range(len(k.full)) if d not in k.reduce_axes]
    taps = math.prod(k.full[d] for d in k.reduce_axes)
    if not kept or not k.reduce_axes:
        return None
    din = kept[-1]
    xs = [a for a, o in zip(args, loads) if reads_dim(o.attr("view"), din)]
    lane = _lane_input(k, xs, din) if len(xs) == 2 else None
    xs = xs if lane is None else [lane]
    if len(xs) != 1:
        return None
    x = xs[0]
    w = next((a for a in args if a != x), None)
    xv: View = k.ops[x].attr("view")
    step = xv.strides[din]
    # a pool walks its row at its stride; a reduction whose input jumps further per output (a global pool,
    # a row's sum) reads each row contiguously in the reduction's own loops. A conv walks it at most STEP_MAX
    # elements apart
    if step < 1 or step > (STEP_MAX if w is not None else 2) or (
            _reads_zero_row(xv, din) and step * k.full[din] > ZERO_MAX):
        return None
    reuse = math.prod(k.full[d] for d in kept if not reads_dim(xv, d))
    side = None if w is not None else _side(k, xv, din, step)
    # a window past TAPS_MAX (WINDOW_TAPS_MAX over a 2-D window whose input elements feed one output a tap) is a
    # stencil only as a separable pool, whose passes unroll one reduced dim's taps each
    unrolled = taps <= (WINDOW_TAPS_MAX if reuse == 1 and len(k.reduce_axes) == 2 else TAPS_MAX)
    if not unrolled and side is None:
        return None
    lanes = taps * k.full[din] if lane is not None else 0
    return Stencil(x, w, red, din, step, reuse, k.ops[red].op is Op.MaxReduce, side,
                   _span(k, din, step, side) if side is not None else 0, lanes, unrolled)


def _lane_input(k: Kernel, loads: list[int], din: int) -> int | None:
    """The input's load where a conv's weight reads the innermost kept dim ``din`` too (a depthwise conv stored
    with its channels innermost, ``layout._channelwise``) and the conv runs as a stencil along it: the input (the
    one load that is not a constant) walks ``din`` at unit stride with no padding along it, and the weight reads
    no other kept dim and fits LANE_WEIGHTS_MAX floats with its taps outermost. Each tap's weights are then a row
    of that copy, made once (``packed_weight``), and every row of the kept space (an output pixel) sums vectors
    of channels. None where not."""
    consts = [a for a in loads if k.inputs[k.ops[a].attr("buf")].constant]
    if len(consts) != 1:
        return None
    (w,) = consts
    (x,) = [a for a in loads if a != w]
    xv, wv = k.ops[x].attr("view"), k.ops[w].attr("view")
    kept = [d for d in range(len(k.full)) if d not in k.reduce_axes]
    taps = math.prod(k.full[d] for d in k.reduce_axes)
    ok = (xv.strides[din] == 1 and not any(c[din] for c, _, _ in view_masks(xv))
          and not any(reads_dim(wv, d) for d in kept if d != din) and taps * k.full[din] <= LANE_WEIGHTS_MAX)
    return x if ok else None


def packed_weight(kernel: Kernel) -> tuple[int, int, tuple[str, int]] | None:
    """(input index of the weight, floats of its copy, the copy's layout) where ``kernel`` is a lane-weights
    stencil (``_lane_input``): the caller passes the copy and an int that is 0 until it is filled, kept for as
    long as the weight lives, as a GEMM's packed panels (a 5x5 over 960 channels at 7x7, 2 threads: copied on
    every call, 78 us, 45 without the copy)."""
    st = plan_stencil(kernel)
    if st is None or not st.lanes or st.w is None:
        return None
    return kernel.ops[st.w].attr("buf"), st.lanes, (kernel.signature, 0)


def unrolled(kernel: Kernel) -> bool:
    """Whether a stencil kernel may unroll every tap in a row (the ``stencil`` impl): at most TAPS_MAX of them
    (WINDOW_TAPS_MAX over a 2-D window whose input elements feed one output a tap), past which only a separable
    pool is a stencil."""
    st = plan_stencil(kernel)
    return st is not None and st.unrolled


def separable(kernel: Kernel) -> bool:
    """Whether ``kernel`` is a pool that may be separable (see the module's docstring): its windows overlap
    along the row, and the input's masks bound the columns alike for every tap of the other reduced dims."""
    st = plan_stencil(kernel)
    return st is not None and st.side is not None


def separable_default(kernel: Kernel, vw: int) -> bool:
    """Whether a separable pool is so by default: a max always, a sum (an average pool) where its rows span at
    least ``SUM_SPAN`` vectors of ``vw`` lanes of input columns (at a stride, more than ``STRIDED_SUM_SPAN``) or
    its taps are too many to unroll."""
    st = plan_stencil(kernel)
    if st is None or st.side is None:
        return False
    wide = st.span >= SUM_SPAN * vw if st.step == 1 else st.span > STRIDED_SUM_SPAN * vw
    return st.max or wide or not unrolled(kernel)


def _side(k: Kernel, xv: View, din: int, step: int) -> int | None:
    """The reduced dim whose taps lie side by side along the row where the pool ``k`` reading ``xv`` is
    separable, or None."""
    side = [d for d in k.reduce_axes if xv.strides[d] == 1]
    if len(side) != 1 or k.full[side[0]] <= step:
        return None
    (h,) = side
    if _span(k, din, step, h) > COLUMNS_MAX or math.prod(k.full[d] for d in k.reduce_axes if d != h) < 2:
        return None
    for c, _, _ in view_masks(xv):
        rows = any(c[d] for d in k.reduce_axes if d != h)
        outer = any(c[d] for d in range(len(k.full)) if d not in k.reduce_axes and d != din)
        if (c[din] != step * c[h] or rows or outer) if c[din] else c[h]:
            return None
    return h


def _span(k: Kernel, din: int, step: int, h: int) -> int:
    """The input columns a row of windows reads."""
    return step * (k.full[din] - 1) + k.full[h]


def _inside(e: int, c: int, b: int) -> tuple[int, int]:
    """The [lo, hi) of the x with 0 <= e + c * x < b (c not 0)."""
    first, last = (-e, b - 1 - e) if c > 0 else (e - b + 1, e)  # c * x in [first, last], |c| steps
    return -(-first // abs(c)), last // abs(c) + 1


def _reads_zero_row(view: View, din: int) -> bool:
    """Whether a tap may read the static zero row: a mask constraint that holds or fails for a whole row."""
    return any(not c[din] for c, _, _ in view.mask)


EDGE_ROWS = 8  # rows in the top and bottom padding emitted one by one, each with its live taps only
# up to this many taps a window (past it, with the rows' tests: a 9x9 window's eight such rows took gcc 30 s)
EDGE_TAPS = 64
PLANES_PER_THREAD = 4  # planes a thread needs for the parallel loop to run over planes (else over rows)
ACCS = 4  # partial sums of the taps (see _sums)
# the fewest taps a window strided along its rows takes two rows a vector with (``row_pairs``). 2 threads, hot,
# paired, against rows of a vector each, 5x5 depthwise convs at stride 2: 672 channels from 14x14 1.41x, 1152 1.41x,
# 240 from 16x16 1.28x, 672 from 10x10 1.11x; 7x7 over 96 from 16x16 1.36x; where a row's taps are fewer their
# loads take less of it: 3x3 at stride 2, 576 from 14x14 0.99x, 480 from 12x12 0.96x; at unit stride a tap's lanes
# are its load's, with no shuffle to spare: 5x5 over 960 at 7x7 0.70x, 3x3 over 384 at 8x8 0.89x
PAIR_TAPS = 16
BLOCK_ROWS = 8  # output rows of a block (``block``)
BLOCK_ACCS = 24  # sums a block keeps in registers (rows x vectors of a chunk)
BLOCK_CHUNK = 4  # vectors of a row a block's chunk covers
BLOCK_CHAINS = 8  # the fewest independent sums a block's chunk adds into
BLOCK_WEIGHTS = 25  # taps whose weights a block keeps in registers from the plane's head
# the fewest taps a lane-weights stencil runs in blocks with (``lane_block``): 2 threads, hot, a 5x5 over 240
# channels at 28x28 with its SiLU 168 -> 95 us, paired in one process EfficientNet-B0 1.025-1.028x faster,
# MnasNet 1.066x, MobileNetV3 1.004-1.028x; 3x3s, 1.15x alone (960 channels at 14x14 69 -> 58 us, 1536 at 7x7 29
# -> 25), ran EfficientNetV2-S (all of them 3x3) 0.96-0.99x as fast
LANE_TAPS = 25
LANE_PIXELS = 8  # the most output pixels of a lane block
LANE_CHUNK = 2  # vectors of channels a lane block's chunk covers
LANE_REGISTERS = 30  # vector registers a lane block's sums, its row group's loads and a weight take at most
BLOCK_VECTORS = 16  # past this many vectors a row (256 pixels of 16 lanes), a block's code grows too long


@dataclass(frozen=True)
class _LanePlan:
    """How a lane-weights stencil runs its pixels in blocks (``_Emitter.lane_plan``)."""

    dc: int  # the column dim
    lo: int  # the first column every tap reads inside the input, and the end of them
    hi: int
    size: int  # the pixels of a block
    groups: tuple[tuple[tuple[str, ...], list[int]], ...]  # the taps by their row constraints (C conditions)
    zeros: int  # floats of the zero row: a block's reach past a group's pointer


@dataclass(frozen=True)
class _Tap:
    """One point of the reduced dims: its index expressions (the pixel dim at 0), the input mask constraints
    that hold or fail for a whole row (C conditions) and those along the pixels ((expression, step, bound))."""

    ex: tuple[str, ...]
    const: tuple[int, ...]  # the reduced dims' values
    rowc: tuple[str, ...]
    pixc: tuple[tuple[str, int, int], ...]


def emit_stencil(kernel: Kernel, sched: GemmSchedule | ReductionSchedule, vw: int, rows: int = 0) -> str:
    """The stencil's source; ``rows``: its blocks' rows (a conv's schedule's ``mr``, the rows of its register
    tile), 0 for ``block_rows``' rule (a pool's)."""
    st = plan_stencil(kernel)
    if st is None:
        raise ValueError("not a stencil kernel")
    return _Emitter(normalize(kernel), st, vw, sched.impl == "separable", rows).source(sched.threads)


def block_rows(kernel: Kernel, vw: int) -> int:
    """The rows of the stencil ``kernel``'s blocks by ``_Emitter.block_rows``' rule (a conv's default ``mr``); 0
    where its rows run in no blocks."""
    st = plan_stencil(kernel)
    return 0 if st is None else _Emitter(normalize(kernel), st, vw).default_rows()


class _Emitter:
    def __init__(self, k: Kernel, st: Stencil, vw: int, sep: bool = False, rows: int = 0):
        self.k, self.st, self.vw = k, st, vw
        self.rows = rows  # the rows of a block, 0: ``block_rows``' rule
        self.din, self.width = st.din, k.full[st.din]
        self.max = st.max
        kept = [d for d in range(len(k.full)) if d not in k.reduce_axes]
        self.outer = kept[:-1]
        xv: View = k.ops[st.x].attr("view")
        self.xco, self.xk, self.xmasks = xv.strides, xv.offset, view_masks(xv)
        self.zero_row = _reads_zero_row(xv, self.din)
        self.taps = [self._tap(tap) for tap in itertools.product(*(range(k.full[d]) for d in k.reduce_axes))]
        # the pixel constraints involve only the pixel and the taps (a conv's column padding): the interior and
        # each border pixel's valid taps are known here
        self.static = all(not any(c[d] for d in self.outer) for c, _, _ in self.xmasks if c[self.din])
        body = Body(k)
        self.values = _values(k, body, st.red)
        self.stores = [f"out{j}[{body.linear(Space.row)}] = {ct.store(b.dtype, f'v{o}')};"
                       for j, (o, b) in enumerate(k.outputs)]
        self.epi = self.values + self.stores
        # row-space loads that read the pixel dim (a residual): lanes past the row must not read past it
        self.epi_reads_pixel = any(op.op in (Leaf.Load, Op.Iota) and op.space is Space.row
                                   and reads_dim(op.attr("view"), self.din) for op in k.ops)
        self.rows_valid = False  # emitting rows where every live tap's row lies inside the input (no ok tests)
        self.active: set[int] | None = None  # the live taps of the rows being emitted (None: all)
        self.sep = st.side if sep else None  # the reduced dim along the row of a separable pool
        if sep and self.sep is None:
            raise ValueError("not a separable pool")
        self.points = self._points(xv)

    def _points(self, xv: View) -> list[int]:
        """The kept dims the input does not read, where the weight reads no other kept dim (a constant matrix
        applied to every row: Winograd's transforms, a conv's output channels over one or two input channels): each
        row then loads its taps' vectors once and sums them with each point's weights (``_per_point``); []
        otherwise."""
        st, k = self.st, self.k
        if st.w is None or st.lanes or self.sep is not None:
            return []
        wv = k.ops[st.w].attr("view")
        dims = [d for d in self.outer if not reads_dim(xv, d)]
        if not dims or any(reads_dim(wv, d) for d in (*self.outer, self.din) if d not in dims):
            return []
        if any(c[d] for c, _, _ in self.xmasks for d in dims):
            return []
        return dims

    def _per_point(self, lines: list[str]) -> list[str]:
        """``lines`` once per point of the dims ``points``, with that point's weights (as they are: no points)."""
        dims = self.points
        if not dims:
            return lines
        at = unravel("lum_u", tuple(self.k.full[d] for d in dims))
        return [f"for (int64_t lum_u = 0; lum_u < {math.prod(self.k.full[d] for d in dims)}LL; lum_u++) {{",
                *_ind([*(f"const int64_t i{d} = {e};" for d, e in zip(dims, at)), *self.weights(), *lines]), "}"]

    def _heads(self) -> list[tuple[int, _Tap]]:
        """The taps whose input pointers a row needs: the live ones, or a separable pool's first column's."""
        if self.sep is None:
            return self._live()
        at = self.k.reduce_axes.index(self.sep)
        return [(t, tap) for t, tap in self._live() if tap.const[at] == 0]

    def column_bounds(self, span: int) -> tuple[int, int]:
        """The [lo, hi) of a separable pool's ``span`` columns that lie inside the input (the others read zero)."""
        assert self.sep is not None
        lo, hi = 0, span
        tap = self._heads()[0][1]
        for c, c0, b in self.xmasks:
            if c[self.din]:
                a, z = _inside(self._at(c, c0, tap), c[self.sep], b)
                lo, hi = max(lo, a), min(hi, z)
        return (lo, hi) if lo < hi else (span, span)

    def columns(self, lo: int, hi: int) -> list[str]:
        """A separable pool's first pass over a row (after its head): the columns [lo, hi) reduced into
        ``lum_col``."""
        if lo >= hi:
            return []
        fold = self._fold([f"p{t}[lum_x]" for t, _ in self._heads()])
        return self._overlapping("lum_x", lo, hi, [*fold, "lum_col[lum_x] = acc;"])

    def windows(self) -> list[str]:
        """A separable pool's second pass over a row: each window reduced over ``lum_col``, then the epilogue."""
        assert self.sep is not None
        pix = f"i{self.din}"
        fold = self._fold([f"lum_col[{_times(self.st.step, pix)} + {j}]" for j in range(self.k.full[self.sep])])
        return self._overlapping(pix, 0, self.width, fold + self.epi)

    def separable_source(self, threads: int) -> str:
        """A separable pool: each plane's rows (or a block of them, where the planes are too few to keep every
        thread busy) in order, the columns of the next row reduced before the windows of this one, so that the
        windows' loads do not wait on the stores just made (a 3x3 average pool over 256x27x27, 2 threads: 128 us
        with the columns and windows of one row after another, 29 us a row apart)."""
        k, sep = self.k, self.sep
        assert sep is not None
        dr, pdims = (self.outer[-1], self.outer[:-1]) if self.outer else (None, [])
        rows = k.full[dr] if dr is not None else 1
        planes = math.prod(k.full[d] for d in pdims)
        want = PLANES_PER_THREAD * (threads or 64)
        size = rows if planes >= want else -(-rows // min(rows, -(-want // planes)))
        blocks = -(-rows // size)
        span = self.st.span
        lo, hi = self.column_bounds(span)

        def row(at: str, buf: str, lines: list[str]) -> list[str]:
            index = [f"const int64_t i{dr} = {at};"] if dr is not None else []
            return ["{", *_ind([*index, f"float *lum_col = lum_cols[{buf}];", *lines]), "}"]

        columns = self.row_head() + self.columns(lo, hi)
        first = row("lum_r0", "0", columns)
        ahead = row("lum_r + 1", "(lum_r + 1 - lum_r0) & 1", columns)
        this = row("lum_r", "(lum_r - lum_r0) & 1", self.windows())
        plane, r0, r1 = "pl", "0", str(rows)
        if blocks > 1:
            plane, r0, r1 = f"(pl / {blocks})", f"(pl % {blocks}) * {size}", f"lum_min64(lum_r0 + {size}, {rows})"
        # the columns in the padding read zero in every row: zeroed once, where the buffers are taken
        zero = [*([f"memset(lum_cols[j], 0, {lo} * sizeof(float));"] if lo else []),
                *([f"memset(lum_cols[j] + {hi}, 0, {span - hi} * sizeof(float));"] if hi < span else [])]
        zero = ["for (int j = 0; j < 2; j++) {", *_ind(zero), "}"] if zero else []
        body = [*(f"const int64_t i{d} = {e};" for d, e in zip(pdims, unravel(plane, tuple(k.full[d] for d in pdims)))),
                f"const int64_t lum_r0 = {r0}, lum_r1 = {r1};", f"float lum_cols[2][{span}];", *zero, *first,
                "for (int64_t lum_r = lum_r0; lum_r < lum_r1; lum_r++) {",
                "    if (lum_r + 1 < lum_r1)", *_ind(_ind(ahead)), *_ind(this), "}"]
        loop = ("pl", planes * blocks)
        return self._with_helpers(_function(k, body, loop, self._parallel(threads, loop[1])), span, 0)

    def _parallel(self, threads: int, count: int) -> str | None:
        """The pragma that runs ``count`` iterations of the outer loop over the threads, or None (one thread, one
        iteration, or too little work to wake a team)."""
        if threads != 1 and count > 1 and math.prod(self.k.full) >= PAR_MIN:
            return "#pragma omp parallel for num_threads(nt) schedule(static)"
        return None

    def _overlapping(self, i: str, lo: int, hi: int, body: list[str]) -> list[str]:
        """``body`` for ``i`` in [lo, hi) in ``omp simd`` loops: whole vectors, then one more over the last lanes
        (overlapping the previous, which computed the same values) where the loop would leave them to scalar code
        (a 3x3 stride-2 max pool over rows of 55: 27 pixels, three of them scalar)."""
        vw = self.vw

        def loop(a: int, b: int) -> list[str]:
            return [f"#pragma omp simd simdlen({vw})", f"for (int {i} = {a}; {i} < {b}; {i}++) {{", *_ind(body), "}"]

        if hi - lo <= vw or (hi - lo) % vw == 0:
            return loop(lo, hi)
        return loop(lo, lo + (hi - lo) // vw * vw) + loop(hi - vw, hi)

    def _tap(self, tap: tuple[int, ...]) -> _Tap:
        ex = ["0" if d == self.din else f"i{d}" for d in range(len(self.k.full))]
        for d, v in zip(self.k.reduce_axes, tap):
            ex[d] = str(v)
        rowc = tuple(f"((uint64_t){affine(c, c0, ex)} < {b}ULL)" for c, c0, b in self.xmasks if not c[self.din])
        pixc = tuple((affine(c, c0, ex), c[self.din], b) for c, c0, b in self.xmasks if c[self.din])
        return _Tap(tuple(ex), tap, rowc, pixc)

    def _at(self, c: tuple[int, ...], c0: int, tap: _Tap) -> int:
        """A mask constraint's value for ``tap`` where every kept dim's index is 0."""
        return c0 + sum(c[d] * v for d, v in zip(self.k.reduce_axes, tap.const))

    def _valid(self, tap: _Tap, p: int) -> bool:
        """Whether ``tap`` reads inside the input's window at pixel ``p`` (static constraints only)."""
        return all(0 <= self._at(c, c0, tap) + c[self.din] * p < b for c, c0, b in self.xmasks if c[self.din])

    def _live(self) -> list[tuple[int, _Tap]]:
        return [(t, tap) for t, tap in enumerate(self.taps) if self.active is None or t in self.active]

    def _lanes(self, tap: _Tap, start: int, bw: int) -> list[bool]:
        """Which of a vector's lanes from pixel ``start`` the tap reads inside its window (none past the row)."""
        return [start + j < self.width and self._valid(tap, start + j) for j in range(bw)]

    def _term(self, t: int, x: str) -> str:
        if self.st.w is None:
            return x
        return f"w{t}[i{self.din}] * {x}" if self.st.lanes else f"w{t} * {x}"

    def _fold(self, terms: list[str], vec: bool = False, name: str = "acc", dead: bool = False,
              screen: bool = False) -> list[str]:
        """``name`` = the taps' ``terms`` folded (``dead``: some taps left out, which a max must see as
        zeros: a masked load reads zero; ``screen``: see ``_maxes``)."""
        typ = "lum_bv" if vec else "float"
        if not self.max:
            return _sums(terms, typ, name)
        dead = dead or (self.active is not None and len(self.active) < len(self.taps))
        return _maxes(terms, vec, name, dead, screen)

    def vector_interior(self, lo: str, vhi: str, hi: str, bw: int) -> list[str]:
        """The interior [lo, hi) in whole vectors up to ``vhi``, the rest by the loop: a max's taps with their NaN
        tests screened by their sum; at a stride the taps' lanes taken from whole loads (see ``_vload``), whose
        reach past a vector's last lane (stride 2: one element) the caller checks."""
        loads = {t: self._vload(t, "lum_v", bw) for t, _ in self._live()}
        return [f"int lum_v = {lo};", f"for (; lum_v + {bw} <= {vhi}; lum_v += {bw}) {{",
                *_ind(self._vector_sum(loads, "lum_v", bw, False)), "}", *self.interior("lum_v", hi)]

    def _vector_sum(self, loads: dict[int, str], start: int | str, bw: int, dead: bool) -> list[str]:
        """The vector of the ``bw`` pixels from ``start``, the taps' ``loads`` summed (some taps left out where
        ``dead``), and its epilogue: over the points of ``points``, each tap's vector loaded once before them."""
        held = [f"const lum_bv lum_x{t} = {x};" for t, x in loads.items()] if self.points else []
        terms = [self._term(t, f"lum_x{t}" if self.points else x) for t, x in loads.items()]
        sums = self._fold(terms, True, "vacc", dead, True) if terms or self.max else ["lum_bv vacc = {0};"]
        return held + self._per_point(sums + self._lanes_epilogue(start, bw, "vacc"))

    def _sources(self) -> dict[int, tuple[int, int]]:
        """At a stride, each live tap's loads: (the tap whose pointer it reads from, the phase of their elements
        it takes). A tap a few elements (fewer than the stride) past another's reads that tap's loads and takes
        the elements as many places on (at stride 2 a 3x3 window's row: two pairs of loads for its three taps,
        not three)."""
        at = {t: self._offset(tap) for t, tap in self._live()}
        src: dict[int, tuple[int, int]] = {}
        bases: dict[int, int] = {}
        for t in sorted(at, key=lambda t: at[t]):
            found = [(j, s) for j in range(1, self.st.step) if (s := bases.get(at[t] - j)) is not None
                     and self.taps[s].rowc == self.taps[t].rowc]
            if found:
                src[t] = (found[0][1], found[0][0])
            else:
                src[t], bases[at[t]] = (t, 0), t
        return src

    def _offset(self, tap: _Tap) -> int:
        """The tap's input offset past its row's (the kept dims at 0)."""
        return sum(self.xco[d] * v for d, v in zip(self.k.reduce_axes, tap.const))

    def _vload(self, t: int, start: int | str, bw: int, shift: int = 0, lanes: list[bool] | None = None) -> str:
        """Tap ``t``'s ``bw`` lanes from pixel ``start`` of the row ``shift`` elements past the pointers' (the
        lanes outside ``lanes`` set to zero by a constant mask). At stride 2 the lanes are in ``_lane_pixel``'s
        order, which a deinterleave within 128-bit lanes gives: ``_lanes_epilogue`` restores the pixels'; at
        stride 3 or 4 they are in the pixels' order (``_phase_helpers``)."""
        step = self.st.step
        if isinstance(start, str):
            at = f"{shift} + {_times(step, start)}" if shift else _times(step, start)
        else:
            at = str(shift + step * start)
        if step == 1:
            x = f"lum_ld1(p{t} + {at})"
        elif step == 2:
            s, odd = self._sources()[t]
            x = f"lum_{'od' if odd else 'ev'}(p{s} + {at})"
            if lanes is not None:
                lanes = [lanes[p] for p in _lane_pixel(bw)]
        else:
            s, phase = self._sources()[t]
            x = f"lum_ph{step}_{phase}(p{s} + {at})"
        if lanes is not None and not all(lanes):
            x = f"lum_mask({x}, (lum_bi){{{', '.join('-1' if v else '0' for v in lanes)}}})"
        return x

    def _x(self, t: int, pix: str) -> str:
        return f"p{t}[{_times(self.st.step, pix)}]"

    def weights(self) -> list[str]:
        """Each tap's weight ``w<t>``, read once per plane (the weight does not read the row dims); with lane
        weights, none (``lane_weights``)."""
        if self.st.w is None or self.st.lanes:
            return []
        return [f"const float w{t} = {self._weight(list(tap.ex))};" for t, tap in enumerate(self.taps)]

    def _weight(self, ex: list[str], src: str | None = None) -> str:
        """The weight at the indices ``ex``, 0 outside its view, read from ``src`` (default: its input)."""
        assert self.st.w is not None
        wop = self.k.ops[self.st.w]
        at, ok = Body.read(wop.attr("view"), ex)
        wv = ct.load(wop.dtype, f"{src or 'in' + str(wop.attr('buf'))}[{at}]")
        return f"({ok}) ? {wv} : 0.0f" if ok else wv

    def lane_weights(self) -> list[str]:
        """The head of a lane-weights stencil's function: its weight copied with the taps outermost into the
        buffer the caller keeps (``packed_weight``) on the first call, and each tap's row of it ``w<t>``."""
        if not self.st.lanes or self.st.w is None:
            return []
        width, pix = self.width, f"i{self.din}"
        nbuf = len(self.k.inputs) + len(self.k.outputs)
        copy = []
        for t, tap in enumerate(self.taps):
            ex = list(tap.ex)
            ex[self.din] = pix
            copy += [f"for (int64_t {pix} = 0; {pix} < {width}; {pix}++)",
                     f"    lum_wt[{t * width} + {pix}] = {self._weight(ex)};"]
        return [f"float *lum_wt = (float *)b[{nbuf}];", f"int *lum_packed = (int *)b[{nbuf + 1}];",
                "if (!*lum_packed) {", *_ind(copy), "    *lum_packed = 1;", "}",
                *(f"const float *w{t} = lum_wt + {t * width};" for t in range(len(self.taps)))]

    def row_head(self) -> list[str]:
        """Each tap's input offset and pointer (the zero row where its row fails), and (where they depend on the
        row) the interior bounds ``lo``, ``hi``."""
        xbuf = self.k.ops[self.st.x].attr("buf")
        lines = [f"int64_t lo = 0, hi = {self.width};"] if not self.static else []
        for t, tap in self._heads():
            lines.append(f"const int64_t o{t} = {affine(self.xco, self.xk, list(tap.ex))};")
            ptr = f"in{xbuf} + o{t}"
            rowc = tap.rowc and not self.rows_valid
            if rowc:
                lines.append(f"const int ok{t} = {' && '.join(tap.rowc)};")
                ptr = f"ok{t} ? {ptr} : lum_zero"
            lines.append(f"const float *p{t} = {ptr};")
            if tap.pixc and not self.static:
                narrow = " ".join(mask_bounds(e, s, b) for e, s, b in tap.pixc)
                lines.append(f"if (ok{t}) {{ {narrow} }}" if rowc else narrow)
        if not self.static:
            lines.append(f"lo = lum_min64(lo, {self.width}); hi = lum_max64(hi, lo);")
        return lines

    def interior(self, lo: str, hi: str) -> list[str]:
        """The vector loop over the pixels [lo, hi), where every tap reads inside its window."""
        pix = f"i{self.din}"
        sums = self._fold([self._term(t, self._x(t, pix)) for t, _ in self._live()])
        loop = [f"#pragma omp simd simdlen({self.vw})", f"for (int {pix} = {lo}; {pix} < {hi}; {pix}++) {{",
                *_ind(sums + self.epi), "}"]
        return self._per_point(loop)

    def border_loop(self, segments: str) -> list[str]:
        """The pixels outside the interior one by one, each tap's load under its constraints."""
        pix = f"i{self.din}"
        terms = []
        for t, tap in self._live():
            x = self._x(t, pix)
            if tap.pixc:
                conds = " && ".join(f"((uint64_t)({e} + {_times(s, pix)}) < {b}ULL)" for e, s, b in tap.pixc)
                x = f"(({conds}) ? {x} : 0.0f)"
            terms.append(self._term(t, x))
        loop = [f"for (int {pix} = e0; {pix} < e1; {pix}++) {{", *_ind(self._fold(terms) + self.epi), "}"]
        return ["for (int seg = 0; seg < 2; seg++) {", f"    {segments}",
                *_ind(self._per_point(loop)), "}"]

    def _vterm(self, t: int, tap: _Tap, start: int, bw: int, shift: int) -> str | None:
        """Tap ``t``'s product over the ``bw`` lanes from pixel ``start`` of the row ``shift`` elements past the
        pointers' (None: no lane reads inside its window)."""
        x = self._vtap(t, tap, start, bw, shift)
        return None if x is None else self._term(t, x)

    def _vtap(self, t: int, tap: _Tap, start: int, bw: int, shift: int) -> str | None:
        """Tap ``t``'s ``bw`` lanes from pixel ``start`` (as ``_vterm``): loaded whole, the lanes outside the window
        set to zero by a constant mask."""
        lanes = self._lanes(tap, start, bw)
        return self._vload(t, start, bw, shift, lanes) if any(lanes) else None

    def border_vector(self, start: int, bw: int) -> list[str]:
        """The ``bw`` pixels from ``start`` as one vector (static constraints; the caller checks that the loads
        stay inside the input buffer), then the epilogue over the lanes."""
        live = self._live()
        loads = {t: x for t, tap in live if (x := self._vtap(t, tap, start, bw, 0)) is not None}
        return ["{", *_ind(self._vector_sum(loads, start, bw, len(loads) < len(live))), "}"]

    def _lanes_epilogue(self, start: int | str, bw: int, vacc: str | None, at: int = 0) -> list[str]:
        """The epilogue and stores of the vector ``vacc`` of the ``bw`` pixels from ``start`` (an expression:
        a whole vector inside the row); None: the pixels are ``lum_tmp``'s from lane ``at`` (``row_pairs``)."""
        lines = []
        if vacc is not None:
            if self.st.step == 2 and _lane_pixel(bw) != list(range(bw)):
                lines = [f"const lum_bv lum_inorder = lum_px({vacc});"]
                vacc = "lum_inorder"
            lines += [f"float lum_tmp[{bw}];", f"memcpy(lum_tmp, &{vacc}, sizeof {vacc});"]
        lines += [f"#pragma omp simd simdlen({bw})", f"for (int j = 0; j < {bw}; j++) {{"]
        n = bw if isinstance(start, str) else min(bw, self.width - start)
        pix = f"i{self.din}"
        lane = f"lum_tmp[{at} + j]" if at else "lum_tmp[j]"
        if n == bw:
            return [*lines, f"    const int64_t {pix} = {start} + j;", f"    const float acc = {lane};",
                    *_ind(self.epi), "}"]
        # the epilogue over every lane (a loop of n < bw lanes ran 2x slower for its remainder), the stores of
        # the row's n after it; lanes past the row repeat its last pixel where the epilogue reads pixels
        k = self.k
        outs = [(j, o, ct.COMPUTE[k.ops[o].dtype]) for j, (o, _) in enumerate(k.outputs)]
        clamp = f"(j < {n} ? j : {n - 1})" if self.epi_reads_pixel else "j"
        return [*[f"{t} lum_o{j}[{bw}];" for j, _, t in outs], *lines,
                f"    const int64_t {pix} = {start} + {clamp};", f"    const float acc = {lane};",
                *_ind(self.values), *[f"    lum_o{j}[j] = v{o};" for j, o, _ in outs], "}",
                f"for (int j = 0; j < {n}; j++) {{", f"    const int64_t {pix} = {start} + j;",
                *[f"    const {t} v{o} = lum_o{j}[j];" for j, o, t in outs], *_ind(self.stores), "}"]

    def pair(self, dr: int, bw: int) -> tuple[list[str], str]:
        """(statements, condition): two neighbouring rows away from the padding at once (kept dim ``dr`` and the
        next), tap by tap, so that each weight is loaded once for both rows' vectors; the condition that their
        border vectors read inside the input buffer."""
        shift = self.xco[dr]
        lo, hi = self.bounds()
        starts, a, b = self.runs(lo, hi, bw)
        if self.max:
            sums = []
            for r in range(2):
                for i, start in enumerate(starts):
                    live = self._live()
                    terms = [x for t, tap in live if (x := self._vterm(t, tap, start, bw, r * shift)) is not None]
                    sums += self._fold(terms, True, f"va{r}_{i}", len(terms) < len(live), True)
        else:
            # tap by tap, each weight loaded once for the accumulators of both rows
            sums = [f"lum_bv va{r}_{i} = {{0}};" for r in range(2) for i in range(len(starts))]
            for t, tap in self._live():
                for r in range(2):
                    for i, start in enumerate(starts):
                        if (x := self._vterm(t, tap, start, bw, r * shift)) is not None:
                            sums.append(f"va{r}_{i} += {x};")
        second = [f"const int64_t lum_r = i{dr} + 1;", "{", f"    const int64_t i{dr} = lum_r;"]
        lines = [*sums, *[x for i, start in enumerate(starts) for x in ["{", *_ind(
            self._lanes_epilogue(start, bw, f"va0_{i}")), "}"]]]
        lines += [*second, *_ind([x for i, start in enumerate(starts) for x in ["{", *_ind(
            self._lanes_epilogue(start, bw, f"va1_{i}")), "}"]]), "}"]
        if a < b:
            pix = f"i{self.din}"
            rows = []
            for r in range(2):
                terms = self._fold([self._term(t, f"p{t}[{r * shift} + {_times(self.st.step, pix)}]")
                                    for t, _ in self._live()])
                rows += ["{", *_ind([*([second[0], second[2].strip()] if r else []), *terms, *self.epi]), "}"]
            lines += [f"#pragma omp simd simdlen({self.vw})", f"for (int {pix} = {a}; {pix} < {b}; {pix}++) {{",
                      *_ind(rows), "}"]
        safe = [*self.in_buffer(starts, bw), *self.in_buffer(starts, bw, shift)]
        return ["{", *_ind(lines), "}"], " && ".join(safe) or "1"

    def block_rows(self, bw: int, rows: int) -> int:
        """The output rows of a block (``block``): the schedule's where it gives them, else as many as BLOCK_ACCS
        accumulators hold beside the most vectors of a chunk of the row, at most BLOCK_ROWS; at most ``rows``, and 0
        where a row has more than BLOCK_VECTORS or the stride is past 2."""
        n = len(self.block_starts(bw))
        if n > BLOCK_VECTORS or self.st.step > 2:
            return 0
        return min(self.rows or min(BLOCK_ROWS, max(2, BLOCK_ACCS // min(n, BLOCK_CHUNK))), rows)

    def default_rows(self) -> int:
        """The rows of a block by the rule (``block_rows``) where rows may run in blocks (``source``), else 0."""
        rows_in = self.row_range()
        bw = self.vector_width(*self.bounds())
        return self.block_rows(bw, self.k.full[rows_in[0]]) if rows_in is not None and bw else 0

    def block_starts(self, bw: int) -> list[int]:
        """The first pixel of each vector covering a row: the border vectors', then whole vectors over the interior
        (the last overlapping the one before it where the interior is not a whole number of vectors)."""
        lo, hi = self.bounds()
        starts, a, b = self.runs(lo, hi, bw)
        inner = list(range(a, b - bw + 1, bw))
        if a < b and (b - a) % bw:
            inner.append(max(0, b - bw))
        return sorted({*starts, *inner})

    def block(self, dr: int, bw: int, rows: int, first: int | None = None) -> tuple[list[str], str]:
        """(statements, condition): ``rows`` neighbouring output rows (kept dim ``dr`` from its index) at once,
        where each vector of input a tap reads is the same load as another tap's in a row below it (a 7x7
        window's row of input feeds seven output rows): the row's vectors in chunks of at most BLOCK_CHUNK, each
        chunk's ``rows`` x vectors sums in registers, and each distinct load (its offset from the first row's
        input and its lanes) made once, held in a register (``lum_keep``: the compiler folded it into each add
        that read it, a load per add again) and added with each tap's weight to every sum it feeds; the
        condition that the masked loads read inside the input buffer. Rows away from the padding (``first``
        None) read every tap; a block from row ``first`` reads, in each of its rows, the taps whose rows lie
        inside the input. 2 threads, hot, paired against two rows tap by tap with a load per tap and row: a 7x7
        depthwise conv over 96 channels at 56x56 (6 rows of four vectors) 411 -> 173 us, over 384 at 14x14 111
        -> 58, 9x9 over 64 at 40x40 230 -> 91, 5x5 over 240 at 28x28 102 -> 56, 3x3 over 144 at 56x56 81 ->
        49, over 96 at 112x112 199 -> 117, over 960 at 7x7 12.3 -> 10.1; at stride 2, 5x5 over 144 from 56x56
        145 -> 70, 3x3 over 64 from 112x112 66 -> 57, over 240 from 28x28 at par; a 7x7 window on a 7x7 map
        (every row but one in the padding) ran 48 -> 60 us in blocks and keeps its rows (``source``)."""
        shift, step = self.xco[dr], self.st.step
        k = self.k
        xbuf = k.ops[self.st.x].attr("buf")
        ex = ["0" if d == self.din or d in k.reduce_axes else f"i{d}" for d in range(len(k.full))]
        row = affine(self.xco, self.xk, ex)
        starts = self.block_starts(bw)
        live = [set(range(len(self.taps))) if first is None else self.live_at(dr, first + j) for j in range(rows)]
        lines = [f"const int64_t lum_rb = i{dr};", f"const float *lum_x = in{xbuf} + {row};"]
        weight = {t: f"w{t}" for t in range(len(self.taps))}
        w = self.st.w
        fenced = w is not None and len(self.taps) > BLOCK_WEIGHTS
        if w is not None and fenced:
            # each weight read where its adds take it (a load their broadcast reuses), not kept in a register per
            # tap from the plane's head, whose broadcasts the compiler spilled as whole vectors once they and the
            # sums outnumbered the registers; read again after each group of loads (the empty asm), which keeps
            # the compiler from holding it across the block (2 threads, the 7x7 conv below: 267 -> 209 us)
            lines += [f"const float *lum_wb = in{k.ops[w].attr('buf')};"]
            weight = {t: f"({self._weight(list(tap.ex), 'lum_wb')})" for t, tap in enumerate(self.taps)}
        reach: list[int] = []  # the offsets of the masked loads' first and last elements
        for c in range(0, len(starts), BLOCK_CHUNK):
            chunk = starts[c:c + BLOCK_CHUNK]
            # the loads by their offset less their vector's start (a tap's input column and row), each group's
            # vectors loaded together and then added tap by tap, so that a weight's broadcast feeds the chunk's
            # vectors at once and dies
            groups: dict[int, dict[tuple[int, tuple[bool, ...]], str]] = {}
            adds: dict[int, list[tuple[int, int, int, str]]] = {}
            names = (f"lum_l{n}" for n in itertools.count())
            for t, tap in enumerate(self.taps):
                for i, start in enumerate(chunk):
                    lanes = tuple(self._lanes(tap, start, bw))
                    if not any(lanes):
                        continue
                    for j in range(rows):
                        if t in live[j]:
                            at = self._offset(tap) + j * shift + step * start
                            loads = groups.setdefault(at - step * start, {})
                            if (at, lanes) not in loads:
                                loads[at, lanes] = next(names)
                            adds.setdefault(at - step * start, []).append((t, i, j, loads[at, lanes]))
            # each sum in parts where the block's sums are too few to hide an add's latency (a 7x7 map's rows)
            parts = max(1, min(ACCS, -(-BLOCK_CHAINS // (rows * len(chunk)))))
            sums = {(j, i): itertools.cycle(range(parts)) for j in range(rows) for i in range(len(chunk))}
            body = [f"lum_bv va{j}_{i}_{p} = {{0}};" for j, i in sums for p in range(parts)]
            evens = {at for loads in groups.values() for at, _ in loads}
            for base in sorted(groups):
                if fenced:
                    body.append('__asm__("" : "+r"(lum_wb));')
                for (at, lanes), name in groups[base].items():
                    if step == 1:
                        x = f"lum_ld1(lum_x + {at})"
                    else:
                        # the even elements of two loads, or the odd ones of another vector's pair one element
                        # before it, the lanes in ``_lane_pixel``'s order; its reach one element past its last lane
                        x = f"lum_od(lum_x + {at - 1})" if at - 1 in evens else f"lum_ev(lum_x + {at})"
                        lanes = tuple(lanes[p] for p in _lane_pixel(bw))
                        reach += [at - (at - 1 in evens), at + 2 * bw - 1]
                    if not all(lanes):
                        x = f"lum_mask({x}, (lum_bi){{{', '.join('-1' if v else '0' for v in lanes)}}})"
                        reach += [at, at + bw - 1]
                    body += [f"lum_bv {name} = {x};", f"lum_keep({name});"]
                body += [f"va{j}_{i}_{next(sums[j, i])} += {f'{weight[t]} * ' if self.st.w is not None else ''}{name};"
                         for t, i, j, name in sorted(adds[base])]
            body += [f"const lum_bv va{j}_{i} = {' + '.join(f'va{j}_{i}_{p}' for p in range(parts))};" for j, i in sums]
            lines += ["{", *_ind(body + self.block_epilogue(dr, "lum_rb", rows, chunk, bw)), "}"]
        numel = k.inputs[xbuf].numel
        safe = f"{row} + {min(reach)} >= 0 && {row} + {max(reach)} < {numel}" if reach else "1"
        return lines, safe

    def lane_plan(self) -> _LanePlan | None:
        """Where a lane-weights stencil (its channels innermost, ``_lane_input``) runs its pixels in blocks
        (``lane_source``), how; None where the mask constraints on the columns involve another kept dim, the
        channels fill no vector, or the zero row would pass ZERO_MAX."""
        k = self.k
        if not self.st.lanes or self.width < self.vw or len(self.taps) < LANE_TAPS:
            return None
        cols = [d for d in self.outer if k.full[d] > 1 and self.xco[d]]
        if not cols:
            return None
        dc = cols[-1]
        if any(c[dc] and any(c[d] for d in self.outer if d != dc) for c, _, _ in self.xmasks):
            return None
        inside = [v for v in range(k.full[dc]) if all(self._column(t, dc, v) for t in range(len(self.taps)))]
        lo, hi = (inside[0], inside[-1] + 1) if inside else (0, 0)
        # the taps by their constraints on the other dims than the columns (a window row's taps alike)
        groups: dict[tuple[str, ...], list[int]] = {}
        for t, tap in enumerate(self.taps):
            rowc = tuple(f"((uint64_t){affine(c, c0, list(tap.ex))} < {b}ULL)" for c, c0, b in self.xmasks if not c[dc])
            groups.setdefault(rowc, []).append(t)
        rel = [self._offset(self.taps[t]) - self._offset(self.taps[ts[0]]) for ts in groups.values() for t in ts]
        for size in range(LANE_PIXELS, 1, -1):
            loads = max(len({self._offset(self.taps[t]) + j * self.xco[dc] for t in ts for j in range(size)})
                        for ts in groups.values())
            zeros = max(rel) + (size - 1) * self.xco[dc] + self.width  # a block's reach past a group's pointer
            if size * LANE_CHUNK + loads + 1 <= LANE_REGISTERS:
                return _LanePlan(dc, lo, hi, size, tuple(groups.items()), zeros) if zeros <= ZERO_MAX else None
        return None

    def _column(self, t: int, dc: int, v: int) -> bool:
        """Whether tap ``t`` reads inside the input at column ``v`` of kept dim ``dc`` (its constraints on it)."""
        return all(0 <= self._at(c, c0, self.taps[t]) + c[dc] * v < b for c, c0, b in self.xmasks if c[dc])

    def block_epilogue(self, dim: int, first: str, rows: int, chunk: Sequence[int | str], bw: int) -> list[str]:
        """The epilogue and stores of a block's sums ``va<j>_<i>``: ``rows`` indices of kept dim ``dim`` from
        ``first``, each over the vectors from the ``chunk``'s starts."""
        return [x for j in range(rows) for x in [
            "{", f"    const int64_t i{dim} = {first} + {j};", *_ind(
                [y for i, start in enumerate(chunk)
                 for y in ["{", *_ind(self._lanes_epilogue(start, bw, f"va{j}_{i}")), "}"]]), "}"]]

    def lane_block(self, plan: _LanePlan, size: int, first: int | None) -> list[str]:
        """``size`` output pixels along the column dim from ``lum_c`` at once, each a row of channels (a
        lane-weights stencil): a chunk of LANE_CHUNK vectors of channels at a time, for each row group of taps
        (their rows inside the input or not alike: its pointer the zero row where not) the distinct vectors of
        input its taps read for the block's pixels loaded once and held, then each tap's vector of weights
        loaded once and added into each pixel's sum with the input it reads. ``first``: the block's first column
        where known (the columns in the padding: each pixel's taps that read inside the input), None for a block
        away from them."""
        k, bw, dc = self.k, self.vw, plan.dc
        xbuf = k.ops[self.st.x].attr("buf")
        lines = [f"const int64_t i{dc} = lum_c;"]
        for g, (rowc, ts) in enumerate(plan.groups):
            ptr = f"in{xbuf} + {affine(self.xco, self.xk, list(self.taps[ts[0]].ex))}"
            if rowc:
                ptr = f"({' && '.join(rowc)}) ? {ptr} : lum_zero"
            lines.append(f"const float *lum_g{g} = {ptr};")
        # the chunk of channels from ``lum_s`` (``lane_source``); a row of fewer channels than a chunk in its vectors
        span = LANE_CHUNK * bw
        chunk = [f"lum_s + {i * bw}" for i in range(LANE_CHUNK)] if self.width >= span else \
            list(map(str, self.block_starts(bw)))
        body = [f"lum_bv va{j}_{i} = {{0}};" for j in range(size) for i in range(len(chunk))]
        for g, (_, ts) in enumerate(plan.groups):
            base = self._offset(self.taps[ts[0]])
            at = {(t, j): self._offset(self.taps[t]) - base + j * self.xco[dc] for t in ts for j in range(size)
                  if first is None or self._column(t, dc, first + j)}
            for i, start in enumerate(chunk):
                names = {a: f"lum_l{g}_{i}_{n}" for n, a in enumerate(sorted(set(at.values())))}
                body += [x for a, name in names.items() for x in
                         (f"lum_bv {name} = lum_ld1(lum_g{g} + {a} + {start});", f"lum_keep({name});")]
                for t in ts:
                    fed = [j for j in range(size) if (t, j) in at]
                    if fed:
                        body += ["{", f"    lum_bv lum_w = lum_ld1(w{t} + {start});", "    lum_keep(lum_w);",
                                 *(f"    va{j}_{i} += lum_w * {names[at[t, j]]};" for j in fed), "}"]
        return [*lines, "{", *_ind(body + self.block_epilogue(dc, "lum_c", size, chunk, bw)), "}"]

    def lane_source(self, threads: int, plan: _LanePlan) -> str:
        """A lane-weights stencil's pixels in blocks along their columns (``lane_block``): a row's chunks of
        channels over the threads, and in each its columns from the first: the blocks of the columns in the
        padding before and after at their own columns, blocks away from it in a loop from the first column
        inside it, and the columns left over in one more."""
        k, dc, lo, hi, size = self.k, plan.dc, plan.lo, plan.hi, plan.size
        rdims = [d for d in self.outer if d != dc]
        # the threads' iterations: a row's chunks of channels, the last overlapping the one before it (its
        # channels computed twice alike), each of a row (7 rows of a 7x7 map took 4 and 3 of them on 2 threads)
        span = LANE_CHUNK * self.vw
        chunks = -(-self.width // span) if self.width >= span else 1
        row = f"(r / {chunks})" if chunks > 1 else "r"
        loop = [f"const int64_t i{d} = {e};" for d, e in zip(rdims, unravel(row, tuple(k.full[d] for d in rdims)))]
        if self.width >= span:
            loop.append(f"const int64_t lum_s = lum_min64(r % {chunks} * {span}, {self.width - span});"
                        if chunks > 1 else "const int64_t lum_s = 0;")

        def at(b0: int, n: int, first: int | None) -> list[str]:
            return ["{", f"    const int64_t lum_c = {b0};", *_ind(self.lane_block(plan, n, first)), "}"]

        left = (hi - lo) % size
        loop += [x for b0 in range(0, lo, size) for x in at(b0, min(size, lo - b0), b0)]
        if hi - lo >= size:
            loop += [f"for (int64_t lum_c = {lo}; lum_c < {hi - left}; lum_c += {size}) {{",
                     *_ind(self.lane_block(plan, size, None)), "}"]
        loop += at(hi - left, left, None) if left else []
        loop += [x for b0 in range(hi, k.full[dc], size) for x in at(b0, min(size, k.full[dc] - b0), b0)]
        rows = math.prod(k.full[d] for d in rdims) * chunks
        return self._with_helpers(_function(k, loop, ("r", rows), self._parallel(threads, rows), self.lane_weights()),
                                 plan.zeros, self.vw)

    def row_groups(self) -> list[tuple[int, list[tuple[int, list[int]]]]] | None:
        """Where two output rows fit one vector (``row_pairs``): the taps in groups that one load of a vector per
        row serves, as (the group's first element past the row's offset, [(tap, the element each lane takes past
        it, -1 where the lane reads outside the tap's window or past the row)]); None where rows are wider than
        half a vector, a tap's elements span a vector or more, or the constraints depend on the row."""
        vw, width, step = self.vw, self.width, self.st.step
        if (self.max or self.st.lanes or not self.static or vw < 8 or width > vw // 2 or step < 2
                or len(self.taps) < PAIR_TAPS):
            return None
        groups: list[tuple[tuple[str, ...], list[tuple[int, dict[int, int]]]]] = []
        for t, tap in sorted(enumerate(self.taps), key=lambda x: self._offset(x[1])):
            at = {p: self._offset(tap) + step * p for p in range(width) if self._valid(tap, p)}
            if not at:
                continue  # a tap that reads the padding alone adds nothing to a sum
            if max(at.values()) - min(at.values()) >= vw:
                return None
            span = [*at.values(), *(e for _, a in groups[-1][1] for e in a.values())] if groups else []
            if groups and groups[-1][0] == tap.rowc and max(span) - min(span) < vw:
                groups[-1][1].append((t, at))
            else:
                groups.append((tap.rowc, [(t, at)]))
        half, out = vw // 2, []
        for _, taps in groups:
            lo = min(e for _, a in taps for e in a.values())
            out.append((lo, [(t, [a[j % half] - lo if j % half in a else -1 for j in range(vw)]) for t, a in taps]))
        return out or None

    def row_pairs(self, dr: int, rows: int, single: list[str],
                  groups: list[tuple[int, list[tuple[int, list[int]]]]]) -> list[str]:
        """The loop body over a plane's rows two at a time (kept dim ``dr``, ``rows`` of them, from ``r``), where
        a row fits half a vector (a 5x5 depthwise conv at stride 2 from 14x14 to 7x7): row r's pixels in the
        vector's first half, row r + 1's in the second, each tap's lanes permuted out of one load per row of its
        group's elements (``row_groups``), the lanes outside its window zeroed. A pair whose loads would leave
        the input buffer runs ``single`` over each row (``lum_s``), and a last row alone leaves its second half
        unstored. Against rows of one vector each, 2 threads, hot: see ``PAIR_TAPS``."""
        vw, k = self.vw, self.k
        xbuf = k.ops[self.st.x].attr("buf")
        numel = k.inputs[xbuf].numel
        ex = ["0" if d == self.din or d in k.reduce_axes else f"i{d}" for d in range(len(k.full))]
        base = affine(self.xco, self.xk, ex)
        pointers = ", ".join(f"*lum_{h}{g}" for h in "ab" for g in range(len(groups)))
        lines = [f"int64_t lum_ra, lum_rb; const float {pointers};"]
        for h, at in (("a", "r"), ("b", "r + 1")):
            scope = [f"const int64_t i{dr} = {at};", f"lum_r{h} = {base};"]
            for g, (lo, taps) in enumerate(groups):
                ptr = f"in{xbuf} + lum_r{h} + {lo}"
                rowc = self.taps[taps[0][0]].rowc
                if rowc:
                    ptr = f"({' && '.join(rowc)}) ? {ptr} : lum_zero"
                if h == "b":  # no row past the last: its half of the vector is not stored
                    ptr = f"i{dr} < {rows} ? ({ptr}) : lum_a{g}"
                scope.append(f"lum_{h}{g} = {ptr};")
            lines += ["{", *_ind(scope), "}"]
        los = [lo for lo, _ in groups]
        safe = " && ".join(f"lum_r{h} + {min(los)} >= 0 && lum_r{h} + {max(los) + vw} <= {numel}" for h in "ab")
        terms, loads = [], []
        for g, (_, taps) in enumerate(groups):
            loads.append(f"const lum_pv lum_x{g} = *(const lum_pvu *)lum_a{g}, lum_y{g} = *(const lum_pvu *)lum_b{g};")
            for t, lanes in taps:
                x = f"lum_p{t}(lum_x{g}, lum_y{g})"
                if -1 in lanes:
                    x = f"lum_pmask({x}, (lum_pi){{{', '.join('0' if e < 0 else '-1' for e in lanes)}}})"
                terms.append(self._term(t, x))
        half = vw // 2
        rows_of = [["{", f"    const int64_t i{dr} = r + {h};", *_ind(self._lanes_epilogue(0, half, None, h * half)),
                    "}"] for h in (0, 1)]
        pair = [*loads, *_sums(terms, "lum_pv", "pacc"), f"float lum_tmp[{vw}];",
                "memcpy(lum_tmp, &pacc, sizeof pacc);", *rows_of[0], f"if (r + 1 < {rows}) {{", *_ind(rows_of[1]), "}"]
        return [*lines, f"if ({safe}) {{", *_ind(pair), "} else {",
                f"    for (int64_t lum_s = r; lum_s < lum_min64(r + 2, {rows}); lum_s++) {{", *_ind(_ind(single)),
                "    }", "}"]

    def runs(self, lo: int, hi: int, bw: int) -> tuple[list[int], int, int]:
        """(starts of the border vectors, a, b): the unmasked run [a, b) between them."""
        width = self.width
        if width <= bw:  # one vector (its lanes past the row not stored)
            return [0], width, width
        starts = [*([0] if lo else []), *([width - bw] if hi < width else [])]
        a, b = (bw if lo else 0), (width - bw if hi < width else width)
        if b - a > bw and (b - a) % bw:
            # the run's whole vectors, then one more over its last lanes (overlapping the previous): the loop
            # would leave them to scalar code (a 3x3 max pool over rows of 28, 16 lanes: 12 of the 28 pixels)
            starts.append(b - bw)
            b = a + (b - a) // bw * bw
        return starts, a, b

    def in_buffer(self, starts: list[int], bw: int, shift: int = 0) -> list[str]:
        """Conditions that the border vectors from ``starts`` read inside the input buffer: a tap's lanes outside
        its window read the input's neighbouring elements, which exist except before the first row and after
        the last; at a stride a tap's loads (``_vload``) reach past its last lane (stride 2: one element), or start
        before its first (those of a tap a few elements before it)."""
        numel = self.k.inputs[self.k.ops[self.st.x].attr("buf")].numel
        step = self.st.step
        src = self._sources() if step > 1 else {}
        out = []
        lows: list[int] = []  # rows without ok tests: each load's reach past the row's offset, folded into two
        highs: list[int] = []
        for t, tap in self._live():
            s = src[t][0] if src else t
            conds = []
            at = self._offset(self.taps[s])  # o<s> minus the row's offset
            for start in starts:
                lanes = self._lanes(tap, start, bw)
                if not any(lanes):
                    continue
                if not all(lanes) or step > 1:
                    conds += [f"o{s} + {step * start} >= 0", f"o{s} + {step * (start + bw) - 1} < {numel}"]
                    lows.append(at + step * start)
                    highs.append(at + step * (start + bw) - 1)
            if conds:
                out.append(f"({f'!ok{s} || ' if tap.rowc and not self.rows_valid else ''}({' && '.join(conds)}))")
        if self.rows_valid and out:
            ex = ["0" if d == self.din or d in self.k.reduce_axes else f"i{d}" for d in range(len(self.k.full))]
            row = affine(self.xco, self.xk, ex)
            return [f"{row} + {shift + min(lows)} >= 0" if lows else "1",
                    f"{row} + {shift + max(highs)} < {numel}" if highs else "1"]
        return list(dict.fromkeys(out))

    def row_range(self) -> tuple[int, int, int] | None:
        """(dim, start, stop): where the row constraints involve one kept dim, the range of its index over which
        every tap's row lies inside the input (a conv's output rows away from the top and bottom padding)."""
        rowcs = [(c, c0, b) for c, c0, b in self.xmasks if not c[self.din]]
        dims = {d for c, _, _ in rowcs for d in self.outer if c[d]}
        if len(dims) != 1:
            return None
        (dr,) = dims
        inside = [v for v in range(self.k.full[dr])
                  if all(0 <= self._at(c, c0, tap) + c[dr] * v < b for c, c0, b in rowcs for tap in self.taps)]
        return (dr, inside[0], inside[-1] + 1) if inside else (dr, 0, 0)

    def live_at(self, dr: int, v: int) -> set[int]:
        """The taps whose row constraints hold where kept dim ``dr`` is ``v`` (they involve no other kept dim)."""
        return {t for t, tap in enumerate(self.taps)
                if all(0 <= self._at(c, c0, tap) + c[dr] * v < b for c, c0, b in self.xmasks if not c[self.din])}

    def bounds(self) -> tuple[int, int]:
        """The interior [lo, hi) of a row (static constraints): per tap and constraint 0 <= e + c * p < b, an
        interval of pixels p, and their intersection."""
        lo, hi = 0, self.width
        for tap in self.taps:
            for c, c0, b in self.xmasks:
                cp = c[self.din]
                if not cp:
                    continue
                a, z = _inside(self._at(c, c0, tap), cp, b)
                lo, hi = max(lo, a), min(hi, z)
        return (lo, hi) if lo < hi else (self.width, self.width)

    def vector_width(self, lo: int, hi: int) -> int:
        """Lanes of the border vectors (a power of two up to the target's, at most the row), 0: none (pixel
        constraints that depend on the row, a stride not in PHASES, a border wider than a vector)."""
        if not self.static or self.st.step not in PHASES or self.st.lanes:
            return 0
        bw = self.vw
        while bw >= 2 * max(self.width, 4):
            bw //= 2
        return bw if lo <= bw and self.width - hi <= bw else 0

    def body(self) -> tuple[list[str], int]:
        """The row's statements after its head, and the lanes of its border vectors (0: none)."""
        width = self.width
        if not self.static:
            return [*self.interior("lo", "hi"),
                    *self.border_loop(f"const int e0 = seg ? (int)hi : 0, e1 = seg ? {width} : (int)lo;")], 0
        lo, hi = self.bounds()
        bw = self.vector_width(lo, hi)
        scalar = self.border_loop(f"const int e0 = seg ? {hi} : 0, e1 = seg ? {width} : {lo};")
        if not bw:
            return [*self.interior(str(lo), str(hi)), *scalar], 0
        # the whole vectors' lanes outside a tap's window read the input's neighbouring elements, which exist
        # except before the first row and after the last
        starts, a, b = self.runs(lo, hi, bw)
        strided = self.st.step > 1
        # at a stride the interior's last whole vector reads past its last lane (stride 2: one element)
        safe = " && ".join(self.in_buffer([*starts, *([b - bw] if strided and b - a >= bw else [])], bw)) or "1"
        vec = [line for start in starts for line in self.border_vector(start, bw)]
        if strided:  # (3x3 depthwise, stride 2, 64 channels at 112x112, hot: 157 -> 82 us against the loop's)
            interior = self.vector_interior("a", "(safe ? b : a)", "b", bw)
        else:
            interior = (self.vector_interior("a", "b", "b", bw) if self.max or self.points
                        else self.interior("a", "b"))
        return [f"const int safe = {safe};", "if (safe) {", *_ind(vec), "} else {", *_ind(scalar), "}",
                f"const int a = safe ? {a} : {lo}, b = safe ? {b} : {hi};", *interior], bw

    def source(self, threads: int) -> str:
        if self.sep is not None:
            return self.separable_source(threads)
        if (plan := self.lane_plan()) is not None:
            return self.lane_source(threads, plan)
        k, width = self.k, self.width
        body, bw = self.body()
        pdims, rdims = self._planes(threads)
        planes, rows = (math.prod(k.full[d] for d in ds) for ds in (pdims, rdims))
        lines = [f"const int64_t i{d} = {e};" for d, e in zip(pdims, unravel("pl", tuple(k.full[d] for d in pdims)))]
        groups = self.row_groups() if planes > 1 and len(rdims) == 1 else None
        at = "lum_s" if groups else "r"
        row = [f"const int64_t i{d} = {e};" for d, e in zip(rdims, unravel(at, tuple(k.full[d] for d in rdims)))]
        rows_in = self.row_range()
        if rows_in is None:
            row += self.row_head() + body
        else:
            # the rows away from the padding without a test per tap: each tap's pointer a constant offset from
            # the row's, which spares the registers 25 pointers (a 5x5 window) would take
            self.rows_valid = True
            dr, r0, r1 = rows_in
            single = self.row_head() + self.body()[0]
            edge = [v for v in range(k.full[dr]) if not r0 <= v < r1]
            edges = len(edge) <= EDGE_ROWS and len(self.taps) <= EDGE_TAPS  # rows in the padding emitted apart
            # blocks of rows (``block``) where two rows or more lie away from the padding (a 7x7 window on a 7x7
            # map, with one such row, ran 48 -> 60 us in blocks) and no two rows share a vector (``row_pairs``)
            size = (self.block_rows(bw, k.full[dr]) if bw and not self.max and rdims == [dr] and r1 - r0 > 1
                    and not groups and not self.points else 0)
            if size:
                # one block for any run of rows away from the padding from its first row, one for the rows left at
                # its end, and those of the rows in the padding above and below
                inner = min(size, r1 - r0)
                stmts, safe = self.block(dr, bw, inner)
                at = f"(i{dr} - {r0}) % {inner} == 0 && i{dr} >= {r0} && i{dr} + {inner - 1} < {r1}"
                row += [f"if ({at} && {safe}) {{", *_ind(stmts), f"    r += {inner - 1};"]
                left = (r1 - r0) % inner
                blocks = [(r1 - left, left, True)] if left > 1 else []
                if len(edge) <= EDGE_ROWS:
                    blocks += [(b0, min(size, e - b0), False) for a, e in ((0, r0), (r1, k.full[dr]))
                               for b0 in range(a, e, size)]
                for b0, n, inside in blocks:
                    stmts, safe = self.block(dr, bw, n, None if inside else b0)
                    row += [f"}} else if (i{dr} == {b0} && {safe}) {{", *_ind(stmts), f"    r += {n - 1};"]
                row += [f"}} else if (i{dr} >= {r0} && i{dr} < {r1}) {{", *_ind(single)]
            elif bw and rdims == [dr] and r1 - r0 >= 2 and self.st.step == 1 and width > bw and not self.points:
                # a max pool's rows, or rows too wide for blocks, in pairs where rows have a vector at each end
                # (stride 2 and rows of one vector measured slower)
                pair, safe = self.pair(dr, bw)
                row += [f"if (i{dr} >= {r0} && i{dr} + 1 < {r1} && {safe}) {{", *_ind(self.row_head() + pair),
                        "    r++;", f"}} else if (i{dr} >= {r0} && i{dr} < {r1}) {{", *_ind(single)]
            else:
                row += [f"if (i{dr} >= {r0} && i{dr} < {r1}) {{", *_ind(single)]
            if edges:
                # each row in the padding with the taps whose rows lie inside the input only
                for v in edge:
                    self.active = self.live_at(dr, v)
                    row += [f"}} else if (i{dr} == {v}) {{", *_ind(self.row_head() + self.body()[0])]
                self.active = None
                row.append("}")
            else:
                self.rows_valid = False
                row += ["} else {", *_ind(self.row_head() + body), "}"]
            self.rows_valid = False
        zeros = self.st.step * max(width, bw)
        extra: list[str] = []
        if self.points:
            lines, loop = row, ("r", rows)
        elif planes == 1:
            lines = [*row[:len(rdims)], *self.weights(), *row[len(rdims):]]
            loop = ("r", rows)
        elif groups:
            lines += [*self.weights(), f"for (int64_t r = 0; r < {rows}LL; r += 2) {{",
                      *_ind(self.row_pairs(rdims[0], rows, row, groups)), "}"]
            loop = ("pl", planes)
            zeros, extra = max(zeros, self.vw), _pair_helpers(groups, self.vw)
        else:
            lines += [*self.weights(), f"for (int64_t r = 0; r < {rows}LL; r++) {{", *_ind(row), "}"]
            loop = ("pl", planes)
        return self._with_helpers(_function(k, lines, loop, self._parallel(threads, loop[1]), self.lane_weights()),
                                 zeros, bw, extra)

    def _planes(self, threads: int) -> tuple[list[int], list[int]]:
        """The outer dims as (planes, rows): the planes up to the last dim the weight reads, the rows the others (a
        conv's output rows; a pool's planes are every outer dim but the rows, which then go in pairs), the weights
        read once per plane where the planes alone keep every thread busy, else per row: no planes; where a row
        has points (``_points``), they are neither."""
        if self.points:
            return [], [d for d in self.outer if d not in self.points]
        if self.st.w is None:
            cut = max(len(self.outer) - 1, 0)
        else:
            wv = self.k.ops[self.st.w].attr("view")
            cut = max((i + 1 for i, d in enumerate(self.outer) if reads_dim(wv, d)), default=0)
        if math.prod(self.k.full[d] for d in self.outer[:cut]) < PLANES_PER_THREAD * (threads or 64):
            return [], self.outer
        return self.outer[:cut], self.outer[cut:]

    def _with_helpers(self, src: str, zeros: int, bw: int, extra: list[str] | None = None) -> str:
        """``src`` with what its kernel function uses declared before it: the zero row of ``zeros`` floats, the
        scalar max, the vector helpers of ``bw`` lanes (0: none), ``extra``."""
        head = [f"static const float lum_zero[{zeros}];"] if self.zero_row else []
        if self.max:
            head.append("static inline float lum_smax(float a, float b) { return a > b ? a : b; }")
        if bw:
            head += _vector_helpers(bw) + (_phase_helpers(bw, self.st.step) if self.st.step > 2 else [])
        head += extra or []
        return src.replace("int lum_kernel(", "\n".join([*head, f"{epilogue_attribute(self.k)}int lum_kernel("]), 1)


def _lane_pixel(bw: int) -> list[int]:
    """The pixel in each lane of a stride-2 load (``_vload``): each 128-bit lane of four holds two pixels of
    the first half of the vector and two of the second, as x86's shufps takes the even (or odd) elements of two
    vectors; with four lanes it is the pixels' order (ARM's uzp)."""
    return [2 * (j // 4) + j % 2 + (bw // 2 if j % 4 > 1 else 0) for j in range(bw)]


def _pair_helpers(groups: list[tuple[int, list[tuple[int, list[int]]]]], vw: int) -> list[str]:
    """``row_pairs``' vector type of ``vw`` lanes, the lane mask, and each tap's permutation of its group's two
    loads (a lane reading outside the tap's window takes the first element, which the mask zeroes)."""
    head = [f"typedef float lum_pv __attribute__((vector_size({4 * vw})));",
            f"typedef float lum_pvu __attribute__((vector_size({4 * vw}), aligned(4)));",
            f"typedef int32_t lum_pi __attribute__((vector_size({4 * vw})));",
            "static inline lum_pv lum_pmask(lum_pv x, lum_pi m) { return (lum_pv)((lum_pi)x & m); }"]
    for _, taps in groups:
        for t, lanes in taps:
            index = [max(e, 0) + (vw if j >= vw // 2 else 0) for j, e in enumerate(lanes)]
            head += [f"static inline lum_pv lum_p{t}(lum_pv a, lum_pv b) {{", *shuffle("a", "b", index, "lum_pi")]
    return head


def _phase_helpers(bw: int, step: int) -> list[str]:
    """``lum_ph<step>_<k>(p)``: elements k, k + step, .. of ``step`` vectors from ``p``, in order: the lanes the first
    two loads hold by one shuffle of them, then each further load's lanes by a shuffle into that."""
    out: list[str] = []
    for k in range(step):
        at = [k + step * j for j in range(bw)]  # each lane's element of the loads, end to end
        picks = [[e if e < 2 * bw else 0 for e in at]]
        picks += [[bw + e - i * bw if i * bw <= e < (i + 1) * bw else j for j, e in enumerate(at)]
                  for i in range(2, step)]
        for n, pick in enumerate(picks):
            out += [f"static inline lum_bv lum_pk{step}_{k}_{n}(lum_bv a, lum_bv b) {{", *shuffle("a", "b", pick)]
        x = f"lum_pk{step}_{k}_0(lum_ld1(p), lum_ld1(p + {bw}))"
        for n in range(1, len(picks)):
            x = f"lum_pk{step}_{k}_{n}({x}, lum_ld1(p + {bw * (n + 1)}))"
        out += [f"static inline lum_bv lum_ph{step}_{k}(const float *p) {{", f"    return {x};", "}"]
    return out


def _vector_helpers(bw: int) -> list[str]:
    """The border vectors' type (GCC vector extensions, as the GEMM's), loads at stride 1, the even and odd
    elements of 2 vectors (stride 2, in ``_lane_pixel``'s order) and the pixels' order restored, lane masks."""
    lanes = _lane_pixel(bw)
    x86 = {64: "defined(__AVX512F__)", 32: "defined(__AVX__)"}.get(4 * bw, "1")
    evens = [2 * p for p in lanes]  # of the concatenation of two vectors from the tap's first element
    pixels = [lanes.index(p) for p in range(bw)]
    return [f"typedef float lum_bv __attribute__((vector_size({4 * bw})));",
            f"typedef float lum_bvu __attribute__((vector_size({4 * bw}), aligned(4)));",
            f"typedef int32_t lum_bi __attribute__((vector_size({4 * bw})));",
            "static inline lum_bv lum_ld1(const float *p) { return *(const lum_bvu *)p; }",
            *pair_shuffle("lum_ev", "float", "lum_bv", "lum_bvu", "lum_bi", bw, evens),
            *pair_shuffle("lum_od", "float", "lum_bv", "lum_bvu", "lum_bi", bw, [e + 1 for e in evens]),
            "static inline lum_bv lum_px(lum_bv a) {", *shuffle("a", "a", pixels),
            "static inline lum_bv lum_mask(lum_bv x, lum_bi m) { return (lum_bv)((lum_bi)x & m); }",
            # a vector held in a register: the compiler would fold its load into each add that reads it
            f"#if defined(__x86_64__) && ({x86})", '#define lum_keep(x) __asm__("" : "+v"(x))',
            f"#elif defined(__aarch64__) && {4 * bw} <= 16", '#define lum_keep(x) __asm__("" : "+w"(x))',
            "#else", "#define lum_keep(x) ((void)0)", "#endif",
            "static inline int lum_any(lum_bi m) {",
            "    int r = 0;",
            f"    for (int j = 0; j < {bw}; j++) r |= m[j];",
            "    return r;",
            "}",
            "static inline lum_bv lum_vmax(lum_bv a, lum_bv b) {",
            "    lum_bi m = a > b;",
            "    return (lum_bv)((m & (lum_bi)a) | (~m & (lum_bi)b));",
            "}"]


def _tree(terms: list[str], typ: str, name: str, join: Callable[[str, str], str]) -> list[str]:
    """``typ name`` = the (non-empty) ``terms`` combined by ``join`` (two C expressions -> one) in ACCS partial
    results: a chain of 25 dependent FMAs (a 5x5 window) waits on each one's latency where a row has too few
    pixels for the loop's iterations to overlap."""
    n = min(ACCS, len(terms))
    st = [f"{typ} {name}{a} = {terms[a]};" for a in range(n)]
    st += [f"{name}{i % n} = {join(f'{name}{i % n}', x)};" for i, x in enumerate(terms) if i >= n]
    parts = [f"{name}{a}" for a in range(n)]
    while len(parts) > 1:
        parts = [join(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return [*st, f"{typ} {name} = {parts[0]};"]


def _sums(terms: list[str], typ: str = "float", name: str = "acc") -> list[str]:
    """``typ name`` = the sum of ``terms`` (see ``_tree``)."""
    if not terms:
        return [f"{typ} {name} = {'(lum_bv){0}' if typ == 'lum_bv' else '0.0f'};"]
    return _tree(terms, typ, name, lambda a, b: f"({a} + {b})")


def _maxes(terms: list[str], vec: bool, name: str, dead: bool, screen: bool = False) -> list[str]:
    """``name`` = the greatest of ``terms`` (and zero where ``dead``; see ``_tree``), NaN where any term is NaN,
    over floats or vectors ``lum_bv``. The max keeps a NaN it finds in its second operand (a compare's NaN is
    false), where every partial result stays from the first term on: that term's NaN reaches the result, and
    only the others need a flag per lane, two at a time on floats (an unordered compare; a 3x3 max pool at stride
    2, 64 x 111 x 111, 2 threads: 92 -> 70 us, against 58 with no flags at all). ``screen`` (vectors): the flags
    only where the sum of the terms is NaN in some lane (a NaN term, or infinities of both signs), one add per
    term instead of a compare and an or (a 3x3 max pool 1.4x faster)."""
    typ, zero, fmax = ("lum_bv", "(lum_bv){0}", "lum_vmax") if vec else ("float", "0.0f", "lum_smax")
    if not terms:
        return [f"const {typ} {name} = {zero};"]
    xs = [f"{name}_x{i}" for i in range(len(terms))]
    st = [f"const {typ} {x} = {t};" for x, t in zip(xs, terms)]
    st += _tree([*xs, zero] if dead else xs, typ, f"{name}_m", lambda acc, x: f"{fmax}({x}, {acc})")
    flagged = xs[1:]  # the dead zero is never NaN
    if not flagged:
        return [*st, f"const {typ} {name} = {name}_m;"]
    if not vec:
        pairs = [flagged[i:i + 2] for i in range(0, len(flagged), 2)]
        nan = " | ".join(f"__builtin_isunordered({p[0]}, {p[1]})" if len(p) == 2 else f"({p[0]} != {p[0]})"
                         for p in pairs)
        return [*st, f"const int {name}_n = {nan};", f"const float {name} = {name}_n ? NAN : {name}_m;"]
    nan = " | ".join(f"({x} != {x})" for x in flagged)
    if screen:
        return [*st, *_sums(xs, "lum_bv", f"{name}_s"), f"lum_bv {name} = {name}_m;",
                f"if (lum_any({name}_s != {name}_s)) {{", f"    const lum_bi {name}_n = {nan};",
                f"    {name} = (lum_bv)((lum_bi){name} | ({name}_n & 0x7fc00000));", "}"]
    return [*st, f"const lum_bi {name}_n = {nan};",
            f"const lum_bv {name} = (lum_bv)((lum_bi){name}_m | ({name}_n & 0x7fc00000));"]


def _times(c: int, e: str) -> str:
    return e if c == 1 else f"{c} * {e}"


def _ind(lines: list[str]) -> list[str]:
    return ["    " + x for x in lines]


def _values(k: Kernel, body: Body, red: int) -> list[str]:
    """The row-space values after the sum ``acc`` of the taps (the epilogue before its stores)."""
    st = [f"const float v{red} = acc;"]
    for n, op in enumerate(k.ops):
        if op.space is Space.row and n != red:
            st += body.value(n)
    return st
