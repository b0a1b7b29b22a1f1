"""Contraction kernels: packed panels and a register-blocked micro-kernel, with the fused epilogue.

The full-space dims of ``SumReduce(Mul(Load A, Load B))`` split into batch
(both operands, kept), M (only A), N (only B) and K (reduced); each group is
flattened. Every index an operand needs is affine in the dims, so it splits
into one table per group (offset and each mask constraint), filled once per
call. Packing reads operands through those tables (transposes, broadcasts,
conv windows and padding cost only the pack) into MR- and NR-wide panels; B
packs by row segments of its innermost N dim (one strided copy per segment
and K row, mask bounds by integer division), and with a single row block
each B block is packed right before use into a per-thread buffer. A conv's
input windows (B masked or strided, unit stride along its innermost N dim)
may instead be read in place (``pack_b`` off): each NR panel lies within one
run of that dim, and only its rows over the padding are copied (see
``_rows_panel``). With few rows and a B that would be packed on every call,
A and B swap roles. The
micro-kernel keeps an MR x NR tile in vector registers (GCC vector
extensions, FMA where the target has it). Each MC x NC tile is accumulated
over K in KC steps in a per-thread buffer, then the row-space epilogue
(bias, activation, residual) runs on it and writes the outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from ...ir.dtypes import DType
from ...ir.view import View, reads_dim
from ...target import host_simd_width
from ..index import run_coeff, view_exprs, view_masks
from ..kernel import Contraction, Kernel, Leaf, Space
from . import ctypes_map as ct
from .emit import Body, _buffers, _indent, _signature, copy_between, epilogue_attribute, mask_bounds, unravel
from .halo import (
    MAX_WASTE,
    Halo,
    across,
    batch_term,
    emit_halo_copy,
    emit_halo_table,
    emit_in_place_tables,
    halo_size,
    in_place,
    index_range,
    least_cols,
    panels,
    plan_halo,
    row_address,
    row_major,
    tap_count,
    whole_tiles,
)
from .halo import pairs as halo_pairs
from .normalize import normalize
from .prelude import block_transpose, pair_shuffle, vector_types

if TYPE_CHECKING:
    from .knobs import GemmSchedule

_DIRECT = (DType.float32, DType.int32)  # operands in the GEMM's own element type, readable in place
SWAP_MAX_M = 8  # see plan_contraction
WASTE = 1.1  # see plan_contraction
WASTE_SMALL = 1.25  # and these
SWAP_MAX_MACS = 1 << 24
TILE = (6, 2)  # the default micro-tile: MR rows by this many vectors (schedule.default_schedule)
HALO_MIN_N = 32  # output channels from which a conv's pixels are the rows, read from a padded copy (halo.py)
HALO_MIN_K = 128  # and the K rows (input channels times taps) from which it does; with a stride, HALO_STRIDED_MIN_K
HALO_STRIDED_MIN_K = 1024  # or HALO_STRIDED_MIN_REUSE multiply-adds per element of the copy
HALO_STRIDED_MIN_REUSE = 96
WASTE_MACS = 64  # multiply-adds per K row and pixel that rows past the output rows may cost (``halo_default``)
ROWS_MIN_VECTORS = 4  # see rows_of_vectors
ROWS_MAX_N = 64
LINE_FLOATS = 16  # floats per cache line
INTERLEAVE_MAX = 4  # see _interleaved
STREAM_MIN_BYTES = 1 << 20  # outputs from which the epilogue stores past the caches (``_Tiling.stream``)
FUSED_MAX_OPS = 24  # see _fused
Fused = tuple[list[str], list[str]]  # a fused micro-kernel's statements before its K loop and after it


@dataclass(frozen=True)
class Plan(Contraction):
    """The contraction as the C GEMM reads it: A and B possibly in swapped roles (see ``plan_contraction``),
    and which operands are read in place."""

    b_direct: bool = False  # B is float32/int32, unmasked, unit stride over flattened N: readable unpacked
    a_direct: bool = False  # A is float32/int32, unmasked, unit stride over flattened K, affine rows
    b_const: bool = False  # B is a model weight: packed once, on the first call, into a buffer the caller keeps
    # B's stride along its innermost N dim where B (not a weight) may be read by runs of that dim, whatever its
    # masks and other strides (a conv's input windows): in place where it is 1, else gathered row by row; 0 where
    # not. B read in place (b_direct) is one run, the panel past its end cut as a run's is
    b_run_stride: int = 0
    # A (a conv's input, not a weight) read in place from a copy with its padding made real, over wide rows of
    # output pixels (``halo.py``); None where its view does not allow it
    a_halo: Halo | None = None
    # with ``a_halo``: the epilogue's memory runs along the columns more than the rows (``_walk_score``, a
    # channels-last output), so a tile whose rows are pixels is stored as it lies, not transposed
    as_stored: bool = False

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """batch, M, N, K"""
        return self.size("batch"), self.size("m"), self.size("n"), self.size("k")


def _swap(c: Contraction) -> Contraction:
    return replace(c, a=c.b, b=c.a, m=c.n, n=c.m)


def _plan(kernel: Kernel, c: Contraction) -> Plan:
    va, vb = kernel.ops[c.a].attr("view"), kernel.ops[c.b].attr("view")
    b_direct = (kernel.ops[c.b].dtype in _DIRECT and not vb.mask and bool(c.n)
                and run_coeff(vb.strides, c.n, c.full) == 1 and any(vb.strides[d] for d in c.k))
    a_direct = (kernel.ops[c.a].dtype in _DIRECT and not va.mask and bool(c.k)
                and run_coeff(va.strides, c.k, c.full) == 1 and run_coeff(va.strides, c.m, c.full) is not None)
    b_const = kernel.inputs[kernel.ops[c.b].attr("buf")].constant
    b_run_stride = (vb.strides[c.n[-1]] if kernel.ops[c.b].dtype in _DIRECT and not b_const
              and c.n and vb.strides[c.n[-1]] > 0 else 0)
    a_halo = (plan_halo(kernel, c.a, c.m, c.k, c.batch) if kernel.ops[c.a].dtype in _DIRECT and not a_direct
              and not kernel.inputs[kernel.ops[c.a].attr("buf")].constant else None)
    return Plan(**{f.name: getattr(c, f.name) for f in fields(Contraction)}, b_direct=b_direct, a_direct=a_direct,
                b_const=b_const, b_run_stride=b_run_stride, a_halo=a_halo,
                as_stored=a_halo is not None and _walk_score(kernel, c) < 0)


def packed_b(kernel: Kernel, sched: GemmSchedule) -> tuple[int, int, tuple[str, int]] | None:
    """(input index of B, floats of its panels, their layout) when the kernel packs a constant B once: the
    caller then passes two more buffers, the panels and an int that is 0 until they are filled."""
    plan = plan_contraction(kernel, bool(sched.swap))
    if plan is None or not _packs_b_once(plan, sched):
        return None
    nb, _, n, k = plan.sizes
    nr = sched.nr
    return kernel.ops[plan.b].attr("buf"), nb * padded(n, nr) * k, (kernel.signature, nr)


def _packs_b_once(plan: Plan, sched: GemmSchedule) -> bool:
    return plan.b_const and sched.pack_b and sched.impl == "generated"


def plan_contraction(kernel: Kernel, swap: bool = False) -> Plan | None:
    """The GEMM view of a contraction kernel, or None when it needs the generic reduction code; ``swap``: the
    other orientation (A and B's roles exchanged), where a schedule's ``swap`` knob takes it. Computed once per
    kernel and kept on it, as its ``contraction`` is: schedules, validity and sources all ask for it."""
    if "_c_plans" not in kernel.__dict__:
        kernel.__dict__["_c_plans"] = _plan_contraction(kernel)
    return kernel.__dict__["_c_plans"][swap]


def swappable(kernel: Kernel) -> bool:
    """Whether the search may take the other orientation: a conv's output pixels as the rows (read from the
    padded copy, ``halo.py``, or packed) or as the columns, a matmul's either operand as A. The rules below pick
    one by what they measured; the other may still win (a 1x1 conv 96 -> 576 at 14x14, 2 threads: its 196 pixels
    as the columns, padded to 224, with the weight read in place, 0.065 ms; as the rows, the rules' choice,
    0.077)."""
    return plan_contraction(kernel, True) is not None


def in_place_halo(kernel: Kernel) -> bool:
    """Whether either orientation reads A through a padded view the input itself may serve (``halo.in_place``)."""
    return any(p is not None and p.a_halo is not None and in_place(p.a_halo)
               for p in (plan_contraction(kernel), plan_contraction(kernel, True)))


def _plan_contraction(kernel: Kernel) -> tuple[Plan, Plan] | tuple[None, None]:
    """(the plan the rules below choose, the other orientation's)."""
    c = kernel.contraction
    if c is None or 0 in kernel.full:
        return None, None
    kept = _kept(kernel)
    if kept and kept[-1] in c.m:  # the innermost output dim on the N side: tiles store contiguous rows
        c = _swap(c)
    plan, swapped = _plan(kernel, c), _plan(kernel, _swap(c))
    # a conv's output pixels as rows, its input read in place from a padded copy against a weight packed once
    # (``halo.py``), where the weight gives whole vectors of output channels and K rows enough to amortise the
    # copy: kernel alone on 2 threads, 3x3 3 -> 32 at 112x112 0.10 -> 0.14 ms, 16 -> 64 at 55x55 0.196 -> 0.176.
    # A strided conv's copy (its input, 4x its output) costs more: inside a YOLO-style detector on 2 threads,
    # 3x3 stride 2, 32 -> 64 at 160x160 0.82 -> 1.68 ms, 64 -> 128 at 80x80 0.77 -> 1.19, 64 -> 64 at 40x40
    # 0.52 -> 0.54, 128 -> 128 at 20x20 0.45 -> 0.42, 128 -> 256 at 40x40 0.87 -> 0.78; it pays where each copied
    # element meets many multiply-adds (a stem's 7x7 taps over 3 channels: 3 -> 64 at 224x224, 0.84 -> 0.67 ms).
    # Since the copy's wide rows, alone, 2 threads (multiply-adds per copied element): 5x5 stride 2, 32 -> 32 at
    # 104x104 (200) 1.07 -> 0.78 ms, 3x3 stride 2 64 -> 64 at 40x40 (144) 0.26 -> 0.19, 96 -> 96 at 28x28 (216)
    # 0.45 -> 0.37, 24 -> 48 at 112x112 (108) 0.50 -> 0.44, 32 -> 64 at 160x160 (144) 1.46 -> 1.41; but 32 -> 32
    # at 320x320 (72) 5.1 -> 5.9, 16 -> 32 (72) 1.9 -> 1.8
    if halo_default(swapped) and not rows_of_vectors(plan):
        return swapped, plan
    # a B gathered on every call against its grain, one float per cache line (a 1x1 conv over a channels-last
    # block output, as ResNet's stage 3 and 4 keep theirs): with the roles swapped it is read in place as A, the
    # weight packed once (2 threads, 1024 -> 256 at 14x14 inside ResNet-50: 0.90 -> 0.71 ms, hot 1.07 -> 0.58)
    if _gathered(kernel, plan) and swapped.a_direct and swapped.b_const:
        return swapped, plan
    # a few rows against a B that must be packed on every call (an operand laid out N x K that is not a
    # weight): with the roles swapped B's rows are read in place as A and only the few rows are packed
    # (1000x512 at M=1: the pack was most of its time). A weight is packed once and then streams through
    # whole vectors; swapped, each of its rows would meet one column on a vector's lanes (2 threads,
    # 1x1280 times a 1000x1280 weight: 0.46 ms swapped, 0.089 ms not; onnxruntime 0.073)
    if plan.size("m") <= SWAP_MAX_M and not plan.b_direct and not plan.b_const and swapped.a_direct:
        return swapped, plan
    # fewer output columns than a few tiles' NR (a conv over a 7x7 map: 49 pixels in 64 lanes) leave lanes idle:
    # the roles swap where the other orientation's default tiles pad WASTE less, unless that would give up a
    # weight packed once (ResNet-18's 7x7 convs: 2.7 -> 2.4 ms, the model 41.5 -> 38.6 ms on 2 threads). Only
    # then: rows padded to MR alone (32 output channels in 6-row tiles) are not worth the pixels packed per
    # call as A (3x3 32->32 at 112x112, 1 thread: 4.3 ms swapped, 1.9 ms not)
    # an output whose innermost dim is shorter than a vector and whose next dim is the other operand's (a
    # ConvTranspose's phases: y[.., i, p] with p of 2) has the epilogue store runs that short, one element at a
    # time; the other orientation stores runs of its own innermost dim, strided (convT 2x2 s2 64->32 at 80x80,
    # 2 threads: 1.42 -> 0.77 ms, onnxruntime 0.91)
    if _short_runs(kernel, plan, kept) and _run(kernel, swapped) >= host_simd_width():
        return swapped, plan
    # A small product whose columns pad less than WASTE_SMALL keeps them: the other orientation packs its rows
    # (the pixels, strided) on every call, which costs a small product more than the padded lanes (2 threads,
    # 1x1 convs at 14x14, 196 pixels in 224 lanes: 64 -> 384 0.043 -> 0.033 ms, 384 -> 64 0.040 -> 0.034,
    # 96 -> 576 0.079 -> 0.068, 576 -> 128 par; from 1024 -> 256 (51M multiply-adds) on they lose 5%). A batch of
    # products is as small as each of them: the pack and the transposed stores cost each product alike (a
    # Winograd conv's products over its 196 tiles, 2 threads, hot: at 56x56 by F(4x4) 64 -> 64 0.36 -> 0.27 ms,
    # 64 -> 128 0.67 -> 0.55, 128 -> 128 1.18 -> 1.05, by F(2x2) at 28x28 0.49 -> 0.44; inside ResNet-50 its three
    # 56x56 convs with their transforms 1.06-1.26x in three runs)
    small = math.prod(plan.sizes[1:]) < SWAP_MAX_MACS and _pad_ratio(plan, cols=True) < WASTE_SMALL \
        and not swapped.a_direct
    if (swapped.b_const or not plan.b_const) and _pad_ratio(plan, cols=True) >= WASTE \
            and _pad_ratio(swapped) < _pad_ratio(plan) / WASTE and not small:
        return swapped, plan
    return plan, swapped


def _gathered(kernel: Kernel, plan: Plan) -> bool:
    """Whether B, not a weight, is gathered on every call against the grain: unit stride along K, not along N."""
    vb = kernel.ops[plan.b].attr("view")
    return (not plan.b_const and not plan.b_direct and plan.b_run_stride != 1 and bool(plan.k)
            and run_coeff(vb.strides, plan.k, plan.full) == 1)


def whole_vector_rows(plan: Plan) -> bool:
    """Whether a conv's input is read in place at unit stride as output rows of whole vectors (no panel of one
    vector pads them), with at most ROWS_MAX_N output channels as its rows."""
    return (plan.b_run_stride == 1 and not plan.b_direct and plan.full[plan.n[-1]] % host_simd_width() == 0
            and plan.size("m") <= ROWS_MAX_N)


def rows_of_vectors(plan: Plan) -> bool:
    """Whether a conv keeps its output pixels as the columns where the padded copy would take them as rows: its
    rows of whole vectors (``whole_vector_rows``), at least ROWS_MIN_VECTORS of them. Then no copy, no transposed
    tile and no wide-row columns are paid, and 8-row tiles of one vector keep the FMA units busy. One process, 2
    threads, the copy's 12 x 32 tiles against 8 x 16 tiles over the rows: 3x3 16 -> 64 at 112x112 1.55 -> 1.14 ms,
    32 -> 32 1.20 -> 1.10, 16 -> 32 0.64 -> 0.57, 24 -> 48 1.33 -> 1.23, 32 -> 48 1.74 -> 1.63, 64 -> 64 4.46 ->
    4.19; at 80x80 32 -> 32 0.63 -> 0.57, 48 -> 48 1.30 -> 1.24; at 56x56 (rows of 3.5 vectors) 32 -> 32 and 32 ->
    64 at par or 2% slower. That holds where the rows' panels (``rows_nr``) take 8-row tiles in the registers:
    with 16 of them (AVX2) rows of an even number of vectors take panels of two (112 pixels in 8-lane vectors),
    which leave room for 6-row tiles only, as the copy's, and there the copy's long row blocks win (2 threads,
    hot, rows against the copy: 3x3 32 -> 32 at 112x112 1.62 -> 1.38 ms, at 80x80 0.85 -> 0.73, 16 -> 32 at 112x112
    0.79 -> 0.73, 24 -> 48 1.60 -> 1.54, 32 -> 48 2.16 -> 2.06, 16 -> 64 1.42 -> 1.40)."""
    vw = host_simd_width()
    return (whole_vector_rows(plan) and plan.full[plan.n[-1]] >= ROWS_MIN_VECTORS * vw
            and fits(8, rows_nr(plan, vw), vw))


def rows_nr(plan: Plan, vw: int) -> int:
    """The panel width at which a conv's input is read by rows (two vectors; one only for few rows), where the
    padding its output rows take in whole panels costs less than the pack would; else 0. The pack's share of
    the work falls with the rows M sharing each panel and grows with the share s of its panels that straddle
    two output rows (two segments): padding up to 1 + (5 + 20 s)/M, at most 15%. One thread, by rows over
    packed: 3x3 64->16 at 160x160 (no padding) 1.4x, 36->20 at 57x57 (12%) 1.5x, 32->32 at 112x112 (14%)
    1.06x, 64->64 at 56x56 (14%) 1.02-1.05x, 128->128 at 28x28 (14%) 1.08x; 96->96 at 56x56 0.97x,
    128->128 at 56x56 0.94x, 64->64 at 112x112 0.95x (one vector wide 0.93x), 128->128 at 112x112 0.87x,
    512->512 at 28x28 0.94x; missed: 256->256 at 56x56 1.07x. A strided conv's rows are gathered (each K row
    prefetched two panels ahead), which beats the pack where up to 64 rows share each panel (3x3 stride 2, 2
    threads: 3->16 at 640x640 1.4 -> 1.0 ms; SqueezeNet's 3->64 at 224x224 0.45 -> 0.39, 8->48 at 160x160 at
    par; the bound was 32 rows before the prefetch). A row no longer than the panel lies in one panel that the
    padding cuts on both sides, most of its K rows copied: with 32 rows or more the pack wins (2 threads, AMD Zen 5,
    rows of 28 against packed: 64->96 0.56 -> 0.83x onnxruntime, 96->96 0.52 -> 0.64x, 64->64 0.51 -> 0.61x,
    32->32 0.43 -> 0.59x in panels of one vector; 16->16 and 24->24 at 28x28 and 30x30 lose 15%)."""
    m = plan.sizes[1]
    if not plan.b_run_stride or plan.b_direct or (plan.b_run_stride > 1 and (m > 64 or plan.b_run_stride > 2)):
        return 0
    run = plan.full[plan.n[-1]]
    if m < 32 and run < vw:
        # rows shorter than a vector: the pack copies them a few elements at a time, which costs more than a
        # panel's idle lanes (grouped 3x3s of 8 channels per group at 7x7, RegNet's: 55 groups 0.32 -> 0.05 ms,
        # 440 at 14x14 stride 2 0.23 -> 0.13)
        return vw
    # the width that pads the rows least, the wider of two that pad them alike; one vector past 32 rows only over
    # rows of whole vectors (``rows_of_vectors``: 8 x 16 tiles over 112-pixel rows beat 8 x 32 by 10%)
    widths = (2 * vw, vw) if m <= 32 or whole_vector_rows(plan) else (2 * vw,)
    for nr in sorted(widths, key=lambda w: padded(run, w)) if plan.b_run_stride == 1 else widths:
        if run <= nr and m >= 32:  # one panel per row, cut by the padding on both sides (see above)
            continue
        panels = math.lcm(run, nr) // nr  # the pack's panels repeat their split every lcm columns
        split = sum(q * nr // run != (q * nr + nr - 1) // run for q in range(panels)) / panels
        if padded(run, nr) <= min(1.15, 1 + (5 + 20 * split) / m) * run:
            return nr
    return 0


def padded(m: int, tile: int) -> int:
    """``m`` rounded up to whole tiles of ``tile`` (rows or columns)."""
    return -(-m // tile) * tile


def fits(mr: int, nr: int, vw: int) -> bool:
    """Whether an MR x NR tile's accumulators, a row of B and an element of A fit the vector registers."""
    return mr * (nr // vw) + nr // vw + 1 <= (32 if vw == 16 else 16)


def _kept(kernel: Kernel) -> list[int]:
    """The output's dims of more than one element, outermost first (the last is the one it is contiguous along)."""
    return [d for d, s in enumerate(kernel.full) if s != 1 and d not in kernel.reduce_axes]


def halo_default(plan: Plan) -> bool:
    """Whether the untuned default reads A from its padded copy (``Plan.a_halo``): against a weight of at least
    HALO_MIN_N output channels, or of whole vectors of them per group where an output row is shorter than a
    vector, with at least HALO_MIN_K K rows; a strided conv with HALO_STRIDED_MIN_K of them or
    HALO_STRIDED_MIN_REUSE multiply-adds per copied element, or grouped as above; any with K rows enough whose tiles
    are stored as they lie (``Plan.as_stored``: a channels-last output); and those that read the input itself in
    place of the copy (``in_place_default``)."""
    h = plan.a_halo
    if h is None or not plan.b_const or plan.size("k") < HALO_MIN_K:
        return False
    # a grouped conv's few channels per group on a small map: the other orientation pads each row of 7 pixels to
    # a vector of 16 lanes, where the copy's pixels fill the rows (2 threads, RegNetX-400MF's 3x3 400 -> 400 in 25
    # groups at 7x7 113 -> 63 us in the model, onnxruntime 58; 160 in 10 groups at 14x14 89 -> 77 us). Stored
    # channels-last, with whatever channels and stride: the other way is a pack of the input's windows on every
    # call (2 threads, hot, 3x3 16 -> 16 at 160x160: 3.4 ms packed, 0.80 from the copy, 0.94 in the logical
    # order; at stride 2 over 320x320 4.1 / 2.0 / 1.3)
    vw = host_simd_width()
    # a grouped conv at a stride with a vector of output channels per group: the input in place (2 threads, one
    # process, new against old: RegNetX's 16 -> 16 in 2 groups from 112x112 0.71-0.78x, in 4 from 56x56 0.80x, 400
    # -> 400 in 25 from 14x14 0.86-0.91x)
    if in_place_default(plan):
        return True
    grouped = bool(plan.batch) and h.width < vw and plan.size("n") % vw == 0
    if plan.size("n") < HALO_MIN_N and not plan.as_stored and not grouped:
        return False
    # wide rows longer than MAX_WASTE times the output rows, cut to whole tiles (``halo.panels``): the rows past
    # an output row cost their share of its multiply-adds per K row, a pack of the input's windows several
    # operations per element it packs, more where they leave the caches; the copy where the first is at most
    # WASTE_MACS (2 threads, one process, paired, against the pack, multiply-adds per K row and pixel: 5x5 32 ->
    # 128 at 6x6, rows of 7 for 6 pixels, 21, 92 -> 64 us; 5x5 24 -> 64 at 13x13, 14 for 13, 1.34-1.46x; 1 x 7 at
    # 17x17, 20 for 17: 192 -> 192 34, 1.07x, 192 -> 320 56, 1.07x, 384 -> 384 68, 1.73x; 3x3 at 6x6, 7 for 6: 160
    # -> 320 53, 1.17x, 192 -> 384 64, 1.14x; past it the pack: 1 x 7 192 -> 768 136, 0.96x with the copy)
    if h.pitch > MAX_WASTE * h.width and (least_cols(h.width, h.pitch) / h.width - 1) * plan.size("n") > WASTE_MACS:
        return False
    # a grouped conv's rows as above take the copy at a stride too, where its few channels per group give few
    # multiply-adds per copied element (2 threads, one process, paired, against the windows packed in rows of 16
    # lanes: 3x3 at stride 2, 400 -> 400 in 25 groups from 14x14 1.80x, 1024 -> 1024 in 32 from 14x14 1.56x, 160
    # -> 160 in 10 from 28x28 1.31x)
    if max(h.split) == 1 or plan.as_stored or grouped:
        return True
    reuse = math.prod(plan.sizes) / math.prod(h.source)  # the output channels times the taps per phase
    return plan.size("k") >= HALO_STRIDED_MIN_K or reuse >= HALO_STRIDED_MIN_REUSE


def in_place_default(plan: Plan) -> bool:
    """Whether the untuned default reads A's padded view from the input itself (``halo.in_place``), not from its
    copy: a grouped conv at a stride with up to two vectors of output channels per group and K rows enough, whose
    copy meets few multiply-adds per copied element (36 for a 3x3 conv at stride 2 with 16 outputs a group)."""
    h = plan.a_halo
    return (h is not None and plan.b_const and bool(plan.batch) and max(h.split) > 1 and in_place(h)
            and plan.size("n") <= 2 * host_simd_width() and plan.size("k") >= HALO_MIN_K)


def _run(kernel: Kernel, plan: Plan) -> int:
    """The length of the runs the epilogue stores: the innermost N dim's."""
    return kernel.full[plan.n[-1]] if plan.n else 1


def _short_runs(kernel: Kernel, plan: Plan, kept: list[int]) -> bool:
    """The output's innermost dim, on the N side, is shorter than a vector and the dim outside it is on the M side,
    so no store run is longer than it."""
    return len(kept) >= 2 and kept[-1] in plan.n and kept[-2] not in plan.n \
        and kernel.full[kept[-1]] < host_simd_width()


def _pad_ratio(plan: Plan, cols: bool = False) -> float:
    """How much larger the default tiles (TILE) make the product than it is (``cols``: its columns only)."""
    _, m, n, _ = plan.sizes
    mr, nr = TILE[0], TILE[1] * host_simd_width()
    return (1 if cols else padded(m, mr) / m) * padded(n, nr) / n


def _tables(name: str, view: View, groups: dict[str, tuple[int, ...]], full) -> tuple[list[str], dict, int]:
    """Per-group terms of the view's offset (expr 0) and mask expressions (1..): an inline
    multiple of the flattened group index where the group is affine, else a table filled at
    call time. Returns (fill statements, {(expr, group): ("lin", coef) | ("tab", array)}, table length)."""
    exprs = [co for co, _, _ in view_exprs(view)]
    terms: dict[tuple[int, str], tuple[str, object]] = {}
    fill: list[str] = []
    total = 0
    for g, dims in groups.items():
        used = [e for e, co in enumerate(exprs) if any(co[d] for d in dims)]
        tabs = []
        for e in used:
            c = run_coeff(exprs[e], dims, full)
            if c is not None:
                terms[(e, g)] = ("lin", c)
            else:
                tabs.append(e)
        if not tabs:
            continue
        size = math.prod(full[d] for d in dims)
        for e in tabs:
            terms[(e, g)] = ("tab", f"{name}_{g}{e}")
            fill.append(f"int64_t *{name}_{g}{e} = lum_ti; lum_ti += {size};")
            total += size
        fill.append(f"for (int64_t x = 0; x < {size}; x++) {{")
        idx = unravel("x", tuple(full[d] for d in dims))
        for e in tabs:
            parts = [f"{exprs[e][d]}*{ix}" for d, ix in zip(dims, idx) if exprs[e][d] and ix != "0"]
            fill.append(f"    {name}_{g}{e}[x] = {' + '.join(parts) or '0'};")
        fill.append("}")
    return fill, terms, total


def _term(terms: dict, e: int, g: str, idx: str) -> str | None:
    t = terms.get((e, g))
    if t is None:
        return None
    kind, v = t
    return f"{v}[{idx}]" if kind == "tab" else (idx if v == 1 else f"{v}*{idx}")


def _operand(buf: int, dt: DType, view: View, terms: dict, gidx: dict[str, str]) -> tuple[str, str]:
    """(value expression, validity expression) of the operand at group indices ``gidx``."""

    def expr(e: int, const: int) -> str:
        parts = [_term(terms, e, g, gidx[g]) for g in ("batch", "m", "n", "k") if g in gidx]
        return "(" + " + ".join([p for p in parts if p] + [str(const)]) + ")"

    (_, offset, _), *masks = view_exprs(view)
    x = ct.load(dt, f"in{buf}[{expr(0, offset)}]")
    conds = [f"((uint64_t){expr(e, k)} < {b}ULL)" for e, (_, k, b) in enumerate(masks, start=1)]
    return x, " && ".join(conds) if conds else "1"


# B in place at a row stride: the row this far down the K loop is asked for ahead of its use, where a K block
# has at least eight times as many rows (in shorter ones a panel is mostly read again from the caches)
ROWS_AHEAD = 16


def _micro_kernel(mr: int, nr: int, vw: int, direct: bool, table: bool, direct_a: bool = False,
                  name: str = "lum_mk", rows: bool = False, fused: Fused | None = None,
                  ahead_rows: int = 0) -> list[str]:
    """C[MR x NR] (+)= A (kc x MR) * B rows; B row k at bp + k*ldb, or bp + bk[k] with a table, or (``rows``)
    at the pointer bq[k]. A is a packed panel (a[k*MR + i]) or, read in place, rows a + i*lda (rows past
    ``arows`` repeat the last valid row: their results land in unused rows of the tile buffer); B in place at a
    row stride is also asked for ``ahead_rows`` rows on (0: not). With ``fused`` (``_register_epilogue``) the
    tile at (ic, jc) of batch ``ib`` goes through the epilogue from the registers, not into C."""
    nv = nr // vw
    pad = " " * (len(name) + 20)
    L = [f"static inline void {name}(int64_t kc, const lum_t *restrict a, int64_t lda, int64_t arows,",
         f"{pad}const lum_t *{'const *' if rows else ''}restrict {'bq' if rows else 'bp'}, int64_t ldb,",
         f"{pad}const int64_t *restrict bk, lum_t *restrict c, int64_t ldc, int first"
         f"{', void **b, int64_t ib, int64_t ic, int64_t jc' if fused is not None else ''}) {{",
         "    (void)ldb; (void)bk; (void)lda; (void)arows;"]
    if direct_a:
        for i in range(mr):
            L.append(f"    const lum_t *restrict a{i} = a + ({i} < arows ? {i} : arows - 1) * lda;")
    brow = "bq[k]" if rows else "bp + bk[k]" if table else "bp + k*ldb"
    aval = (lambda i: f"a{i}[k]") if direct_a else (lambda i: f"a[k*{mr} + {i}]")
    # B in place: its rows' next panel is the next call's, on lines no hardware prefetcher follows (a row per k,
    # strided): asked for now, they come in while this panel is computed (2 threads on two dies of one host,
    # ResNet-50 69.1 -> 66.7 ms; on one die at par); and this panel's row ``ahead_rows`` further on
    ahead = [f"__builtin_prefetch(br + {nr}, 0, 3);"] if direct else []
    if direct and ahead_rows and not table and not rows:
        ahead += [f"__builtin_prefetch(br + {ahead_rows}*ldb + {v * vw}, 0, 3);" for v in range(nr // vw)]
    return L + _mk_loop_body(mr, nv, vw, [f"const lum_t *br = {brow};", *ahead], "lum_vu" if direct else "lum_v",
                             aval, fused)


def _mk_loop_body(mr: int, nv: int, vw: int, rows: list[str], bvec: str, aval: Callable[[int], str],
                  fused: Fused | None = None) -> list[str]:
    """A micro-kernel's accumulators, its K loop (``rows``: statements setting the row pointers, then B's row
    ``br`` read as ``bvec`` vectors, A's value for tile row i ``aval(i)``) and the stores that end it, or the
    ``fused`` epilogue in their place (its head before the K loop)."""
    L = [f"    lum_v c{i}_{v} = first ? (lum_v){{0}} : *(const lum_vu *)(c + {i}*ldc + {v * vw});"
         for i in range(mr) for v in range(nv)]
    if fused is not None:
        L += fused[0]
    L += ["    for (int64_t k = 0; k < kc; k++) {", *(f"        {r}" for r in rows)]
    L += [f"        lum_v b{v} = *(const {bvec} *)(br + {v * vw});" for v in range(nv)]
    for i in range(mr):
        L += [f"        {{ const lum_t ai = {aval(i)};", *(f"          c{i}_{v} += ai * b{v};" for v in range(nv)),
              "        }"]
    L.append("    }")
    if fused is not None:
        return [*L, *fused[1], "}"]
    L += [f"    *(lum_vu *)(c + {i}*ldc + {v * vw}) = c{i}_{v};" for i in range(mr) for v in range(nv)]
    return [*L, "}"]


def _halo_micro_kernel(mr: int, nr: int, vw: int) -> list[str]:
    """C[MR x NR] (+)= A * B over kc K rows: A row k is the MR consecutive values at a + ak[k], each broadcast
    against the NR-wide row k of B's packed panel bp."""
    L = ["static inline void lum_mkh(int64_t kc, const lum_t *restrict a, const int64_t *restrict ak,",
         "                           const lum_t *restrict bp, lum_t *restrict c, int64_t ldc, int first) {"]
    rows = ["const lum_t *restrict ar = a + ak[k];", f"const lum_t *br = bp + k*{nr};"]
    return L + _mk_loop_body(mr, nr // vw, vw, rows, "lum_v", lambda i: f"ar[{i}]")


def _pairs(plan: Plan, vb: View, dt: DType) -> bool:
    """Whether B's rows are float32 read at stride 2 along N (a strided conv's windows): gathered a vector at a
    time from two (``_gather``)."""
    return bool(plan.n) and dt is DType.float32 and view_exprs(vb)[0][0][plan.n[-1]] == 2


def _evens(vw: int) -> list[str]:
    """``lum_even(p)``: the even elements of the two vectors from ``p``."""
    return [f"typedef int32_t lum_evi __attribute__((vector_size({vw * 4})));",
            *pair_shuffle("lum_even", "lum_t", "lum_v", "lum_vu", "lum_evi", vw, list(range(0, 2 * vw, 2)))]


def _gather(value: str, nr: int, numel: int, buf: int) -> list[str]:
    """``ds[w] = value`` for the NR columns of a row read at stride 2 from ``src`` (input ``buf`` of ``numel``
    elements): a vector (``lum_v``'s lanes) from each two, where the element past the row's last one lies in the
    input, else the compiler's loop (which took the last quarter of the row an element at a time, as its last pair
    of vectors reads that element: 2 threads, hot, a 3x3 stride-2 conv of 16 -> 16 in 2 groups from 112x112, 266
    -> 241 us)."""
    return [f"if (src - in{buf} + {2 * nr - 1} < {numel}) {{",
            f"    for (int64_t v = 0; v < {nr}; v += (int64_t)(sizeof(lum_v) / sizeof(lum_t)))",
            "        *(lum_vu *)(ds + v) = lum_even(src + 2 * v);",
            "} else {", "    #pragma omp simd", f"    for (int64_t w = 0; w < {nr}; w++) ds[w] = {value};", "}"]


def _pack_b_panel(kernel: Kernel, plan: Plan, vb: View, terms: dict, buf: int, dt: DType, nr: int,
                  pairs: bool) -> list[str]:
    """Statements packing rows k0..k1-1 of B panel ``q`` (batch ``ib``) to ``dst`` (NR floats per row), row
    segment by row segment: within a run of the innermost N dim every index and mask expression is affine, so
    a segment is one strided copy between two zero fills whose bounds come from the mask by integer division,
    and tables are read once per segment and K row, not per element."""
    N, numel = plan.sizes[2], kernel.inputs[buf].numel
    exprs = view_exprs(vb)
    if plan.n:
        size_l, step = kernel.full[plan.n[-1]], [co[plan.n[-1]] for co, _, _ in exprs]
    else:  # N = 1
        size_l, step = 1, [0] * len(exprs)
    L = [f"const int64_t jmax = lum_min64({nr}, {N} - q * {nr});",
         f"int64_t sj[{nr}], sl[{nr}], ns = 0;"]
    L += [f"int64_t sb{e}[{nr}];" for e in range(len(exprs))]
    L += ["for (int64_t j = 0; j < jmax; ns++) {",
          f"    const int64_t n = q * {nr} + j;",
          f"    const int64_t len = lum_min64({size_l} - n % {size_l}, jmax - j);",
          "    sj[ns] = j; sl[ns] = len;"]
    for e, (_, const, _) in enumerate(exprs):
        parts = [x for x in (_term(terms, e, "batch", "ib"), _term(terms, e, "n", "n")) if x]
        L.append(f"    sb{e}[ns] = {' + '.join([*parts, str(const)])};")
    L += ["    j += len;", "}"]

    def rows(sb: str, sj: str, sl: str, indent: int) -> list[str]:
        """The K rows of the panel's segment (``sb{e}``, ``sj``, ``sl``: its index terms, start and length)."""
        body = [f"lum_t *restrict ds = d + {sj};", f"int64_t lo = 0, hi = {sl};"]
        for e, (_, _, r) in enumerate(view_masks(vb), start=1):
            body.append(f"{{ const int64_t v = {sb.format(e=e)} + kt{e}; {mask_bounds('v', step[e], r)} }}")
        body.append(f"const {ct.STORAGE[dt]} *restrict src = in{buf} + {sb.format(e=0)} + kt0;")
        # a whole panel row from one run: a loop of fixed length, which the compiler unrolls and vectorises
        whole = _gather(value, nr, numel, buf) if pairs else \
            ["#pragma omp simd", f"for (int64_t w = 0; w < {nr}; w++) ds[w] = {value};"]
        body += [f"if (lo == 0 && hi == {nr}) {{", *_indent(whole, 4),
                 "} else {", *_indent(copy_between("ds", sl, value), 4), "}"]
        return _indent(body, indent)

    value = ct.load(dt, f"src[{step[0]} * w]")
    head = ["for (int64_t k = k0; k < k1; k++) {", f"    lum_t *restrict d = dst + (k - k0) * {nr};"]
    head += [f"    const int64_t kt{e} = {_term(terms, e, 'k', 'k') or '0'};" for e in range(len(exprs))]
    # most panels are one run of the innermost N dim: their terms held in registers, not read per K row
    L += [f"if (ns == 1 && jmax == {nr}) {{"]
    L += [f"    const int64_t b{e} = sb{e}[0];" for e in range(len(exprs))]
    L += _indent(head, 4) + rows("b{e}", "0", str(nr), 8) + ["    }", "} else {"]
    L += [*_indent(head, 4), "        for (int64_t s = 0; s < ns; s++) {", *rows("sb{e}[s]", "sj[s]", "sl[s]", 12)]
    L += ["        }", f"        for (int64_t j = jmax; j < {nr}; j++) d[j] = 0;", "    }", "}"]
    return L


def emit_contraction(kernel: Kernel, sched: GemmSchedule, vw: int) -> str:
    kernel, plan = _merged(kernel, bool(sched.swap))
    t = _tiling(kernel, plan, sched)
    oa, ob = kernel.ops[plan.a], kernel.ops[plan.b]
    va, vb = oa.attr("view"), ob.attr("view")
    groups = {"batch": plan.batch, "m": plan.m, "n": plan.n, "k": plan.k}
    names_a: dict = {}
    if t.halo and t.in_place:  # A's K terms into the input itself, and the row and column each reads
        fill_a, len_a = emit_in_place_tables(t.halo, kernel.full, plan.k)
    elif t.halo:  # A's K terms into the padded copy; its rows are the copy's addresses themselves
        fill_a, len_a = emit_halo_table(t.halo, kernel.full, plan.k, "ta_k")
    else:
        fill_a, names_a, len_a = _tables("ta", va, groups, kernel.full)
    # read by runs (``t.run``), B's N terms are found per panel from its run and column, not from tables
    fill_b, names_b, len_b = _tables("tb", vb, {g: ds for g, ds in groups.items() if g != "n" or not t.run},
                                     kernel.full)
    elem = ct.COMPUTE[kernel.ops[plan.mul].dtype]  # float (half precisions compute in it) or int32_t
    L = _header(elem, vw) + (_evens(vw) if t.pairs or t.copy_pairs else [])
    L += _micro_kernels(kernel, plan, t, vw, vb, names_b)
    if t.tr or (t.halo and across(t.halo) >= 0):
        L += block_transpose(vw)
    if t.stream:
        L += _stream_helpers()
    L += _epilogue_function(kernel, plan, t)
    L += _entry(kernel, t, fill_a + fill_b, len_a + len_b + 1)
    if t.shares:  # each thread's next tile of its share (``_shares``), a cache line apart
        L.append("    int64_t lum_next[8 * (nt > 0 ? nt : 1)]; memset(lum_next, 0, sizeof lum_next);")
    L.append("    #pragma omp parallel num_threads(nt)")
    L.append("    {")
    L += _region_head(t)
    if t.halo and not t.in_place:
        L += _indent(emit_halo_copy(t.halo, oa.attr("buf"), "ap", t.size_a, vw, t.copy_pairs), 8)
    elif not t.halo and not t.direct_a:
        L += _pack_a(oa.attr("buf"), oa.dtype, va, names_a, t)
    pack_b = [] if t.run else _pack_b_panel(kernel, plan, vb, names_b, ob.attr("buf"), ob.dtype, t.nr, t.pairs)
    if t.size_b or t.once:
        L += _pack_b_all(pack_b, t)
    if t.run:
        panel = _rows_panel(kernel, plan, vb, names_b, t, _a_source(oa.attr("buf"), va, names_a, t))
    elif t.halo and t.in_place:
        b_stmts, bptr, _ = _b_source(ob.attr("buf"), vb, names_b, t)
        boff = batch_term(t.halo, plan.batch, kernel.full, "ib", in_input=True)
        panel = b_stmts + _indent(_in_place_loop(f"in{oa.attr('buf')} + {boff}", bptr, t, kernel.full, plan.k), 20)
    elif t.halo:
        b_stmts, bptr, _ = _b_source(ob.attr("buf"), vb, names_b, t)
        panel = b_stmts + _indent(_halo_loop(batch_term(t.halo, plan.batch, kernel.full, "ib"), bptr, t), 20)
    else:
        b_stmts, bptr, bkp = _b_source(ob.attr("buf"), vb, names_b, t)
        panel = b_stmts + _indent(_mk_loop("lum_mk", _a_source(oa.attr("buf"), va, names_a, t), bptr, bkp, t), 20)
    L += _tile_loop(t, sched.order, pack_b, _fuse_guard(kernel, plan, t) + panel)
    if t.stream:
        L.append("        lum_sfence();")
    L += ["        }", "    }"]
    if t.once:
        L.append("    if (!lum_bad) *lum_packed = 1;")
    L += ["    free(lum_tab);", "    return lum_bad;", "}"]
    return "\n".join(L) + "\n"


def _micro_kernels(kernel: Kernel, plan: Plan, t: _Tiling, vw: int, vb: View, names_b: dict) -> list[str]:
    """The micro-kernels the tiles call, each with its fused twin (name + "e") where ``t.fused``."""
    fused = _register_epilogue(kernel, plan, t, vw) if t.fused else None

    ahead = ROWS_AHEAD if t.kc >= 8 * ROWS_AHEAD else 0

    def micro(name: str, direct: bool, table: bool, rows: bool = False) -> list[str]:
        plain = _micro_kernel(t.mr, t.nr, vw, direct, table, t.direct_a, name, rows, ahead_rows=ahead)
        return plain + (_micro_kernel(t.mr, t.nr, vw, direct, table, t.direct_a, name + "e", rows, fused,
                                      ahead_rows=ahead) if fused is not None else [])

    if t.run:  # B in place through its K table, or through a pointer per row (one of them to a row of zeros)
        # a row cut by the padding: its bits and a mask of the columns inside (lum_t is 4 bytes)
        L = [f"static const lum_t lum_zrow[{t.nr}] __attribute__((aligned(64)));",
             f"typedef int32_t lum_iv __attribute__((vector_size({vw * 4})));",
             f"typedef int32_t lum_ivu __attribute__((vector_size({vw * 4}), aligned(4)));",
             f"static const lum_iv lum_iota = {{{', '.join(str(i) for i in range(vw))}}};"]
        if vb.strides[plan.n[-1]] == 1:
            L += micro("lum_mkt", True, names_b.get((0, "k"), ("lin", 0))[0] == "tab")
        return L + micro("lum_mkp", True, False, rows=True)
    if t.in_place:
        assert t.halo is not None
        return _in_place_micro_kernels(t.mr, t.nr, vw, t.halo.split[t.halo.pixels[1]])
    if t.halo:
        return _halo_micro_kernel(t.mr, t.nr, vw)
    return micro("lum_mk", t.direct, t.direct and names_b[(0, "k")][0] == "tab")


def _fuse_guard(kernel: Kernel, plan: Plan, t: _Tiling) -> list[str]:
    """With ``t.fused``, the panel's flag for the fused micro-kernel: its columns whole and inside one run."""
    if not t.fused:
        return []
    step, inner = _run_step(kernel, plan, t)
    return [f"                    const int lum_fuse = ncur - jr * {t.nr} >= {t.nr} && "
            f"(jc + jr * {t.nr}) % {step} + {t.nr} <= {inner};"]


def _merged(kernel: Kernel, swap: bool) -> tuple[Kernel, Plan]:
    """As every C emitter, the kernel with the dims every view walks as one merged (a 1x1 conv's rows and
    columns: its epilogue then finds the output index without a division per element), unless that changes
    how the GEMM reads it, against which the schedule was checked."""
    plan = plan_contraction(kernel, swap)
    assert plan is not None
    merged = normalize(kernel)
    for mplan in (plan_contraction(merged), plan_contraction(merged, True)):
        if mplan is not None and (mplan.sizes, mplan.a, mplan.b) == (plan.sizes, plan.a, plan.b):
            return merged, mplan
    return kernel, plan


@dataclass(frozen=True)
class _Tiling:
    """The block sizes and buffers a schedule gives one contraction."""

    nb: int
    M: int
    N: int
    K: int
    mr: int
    nr: int
    mc: int  # rows of an MC x NC tile
    nc: int
    kc: int  # K step of a tile's accumulation
    direct: bool  # B read in place, not packed
    direct_a: bool  # A read in place, not packed
    once: bool  # a constant B packed once, into panels the caller keeps
    # B read in place panel by panel within runs of its innermost N dim (``Plan.b_run_stride``): the run's length;
    # each run then takes whole panels (N counts the columns with the runs padded to a multiple of NR). 0: not so
    run: int = 0
    # A read in place from its padded copy (``Plan.a_halo``): M counts the wide rows' pixels. None: not so
    halo: Halo | None = None
    halo_size: int = 0  # floats of that copy (0: none, the input read in place)
    # the tile transposed before its epilogue (into ``tt``), which then stores along the output's innermost dim:
    # a halo tile, or any tile whose rows walk that dim (an NCHW conv's pixels as rows)
    tr: bool = False
    # the outputs whose runs the epilogue stages in L1, then stores past the caches (non-temporal stores): a final
    # output is otherwise read into them before it is written over, and nothing in the model reads it back
    stream: tuple[int, ...] = ()
    axis: int = -1  # the output dim the epilogue's runs walk: M's innermost with ``tr``, else N's (-1: N is empty)
    fused: bool = False  # whole tiles whose columns lie in one run take the epilogue from the registers (``_fused``)
    pairs: bool = False  # B's rows float32 read at stride 2, gathered a vector from each two (``_pairs``)
    copy_pairs: bool = False  # the padded copy's rows, float32 at stride 2, likewise (``halo.pairs``)
    # with ``halo``: A read from the input itself, no copy (``_in_place_loop``); each output row whole tiles
    in_place: bool = False

    @property
    def stage(self) -> int:  # with ``stream``: the floats of an output run the epilogue stages
        return self.mt_pad if self.tr else self.nc

    @property
    def mt_pad(self) -> int:  # a transposed tile's column stride: its rows, 16-float aligned
        return -(-self.mc // 16) * 16

    @property
    def run_cols(self) -> int:  # with ``run``: the columns each run of B takes, whole NR panels
        return -(-self.run // self.nr) * self.nr

    @property
    def pm(self) -> int:  # MR panels of A per batch
        return -(-self.M // self.mr)

    @property
    def pn(self) -> int:  # NR panels of B per batch
        return -(-self.N // self.nr)

    @property
    def mt(self) -> int:  # row blocks
        return -(-self.M // self.mc)

    @property
    def nt(self) -> int:  # column blocks
        return -(-self.N // self.nc)

    @property
    def epi_panel(self) -> bool:
        """All of K in one step: each NR panel's epilogue runs right after it, while the panel is in L1, not
        after the whole tile (2 threads: 1x1 32->64 at 160x160 0.79 -> 0.72 ms; par where K is larger)."""
        return self.kc == self.K

    @property
    def shares(self) -> bool:
        """Tiles taken by shares a thread may take over (``_shares``); a product of one row splits statically."""
        return self.M != 1

    @property
    def tile_b(self) -> bool:
        """One row block: each B block is used once, so it is packed right before use, into a per-thread buffer
        that stays in cache, instead of into one panel array for all of B."""
        return not self.direct and not self.run and self.mt == 1 and not self.once

    @property
    def own_a(self) -> bool:
        """Whether A is packed into panels, each thread's share in its own buffer (``_region_head``)."""
        return not self.direct_a and not self.halo

    @property
    def size_a(self) -> int:
        """The shared workspace's A: the padded copy (64-byte aligned, as B's panels after it)."""
        return -(-self.halo_size // 16) * 16

    @property
    def size_patch(self) -> int:
        """Per thread, with ``in_place``: a border tile's K rows that meet the padding, copied between zeros (MR
        values at the column stride each), and a pointer per K row."""
        return self.patch_rows + -(-2 * self.kc // 16) * 16 if self.in_place else 0

    @property
    def patch_rows(self) -> int:
        """With ``in_place``: the floats of a border tile's copied K rows (16-float aligned, the pointers after)."""
        assert self.halo is not None
        return -(-self.kc * self.mr * self.halo.split[self.halo.pixels[1]] // 16) * 16

    @property
    def size_b(self) -> int:
        if self.direct or self.run or self.tile_b or self.once:
            return 0
        return -(-self.nb * self.pn * self.K * self.nr // 16) * 16

    @property
    def size_bt(self) -> int:
        """Per thread: a block of B panels, or with ``run`` the panel's copied rows and a pointer per row."""
        if self.run:  # kept a multiple of 16 floats: the next thread's tile stays 64-byte aligned
            return -(-(self.nr + 2) * self.kc // 16) * 16
        return self.nc * self.kc if self.tile_b else 0

    @property
    def size_tt(self) -> int:
        """Per thread, with ``tr``: the tile transposed, columns of ``mt_pad`` rows."""
        return self.nc * self.mt_pad if self.tr else 0

    @property
    def size_thread(self) -> int:
        return self.mc * self.nc + self.size_bt + self.size_tt + self.size_patch


def _tiling(kernel: Kernel, plan: Plan, sched: GemmSchedule) -> _Tiling:
    nb, M, N, K = plan.sizes
    mr, nr = sched.mr, sched.nr
    run = _run(kernel, plan) if plan.b_run_stride and not sched.pack_b and (N % nr or not plan.b_direct) else 0
    if run:
        N = N // run * padded(run, nr)
    halo, inplace = None, False
    if plan.a_halo is not None and not sched.pack_a:
        inplace = sched.copy is False and in_place(plan.a_halo)
        halo = (whole_tiles if inplace else panels)(plan.a_halo, mr)
    if halo:
        M = halo.wide
    # a block past the rows (columns) there are is one block of them all: the same code as the smallest such;
    # a block holds whole panels (7-row tiles: MC rounded down to them; 3-vector ones: NC)
    mc, nc = min(sched.mc // mr * mr, padded(M, mr)), min(sched.nc // nr * nr, padded(N, nr))
    t = _Tiling(nb, M, N, K, mr, nr, mc, nc, kc=min(sched.kc or K, K), direct=not sched.pack_b and not run,
                   direct_a=not sched.pack_a and not halo, once=_packs_b_once(plan, sched), run=run,
                   halo=halo, halo_size=halo_size(halo, kernel.full, mr) if halo and not inplace else 0,
                   tr=(tr := not plan.as_stored if halo else _rows_walk_output(kernel, plan)),
                   stream=_streams(kernel, axis := plan.m[-1] if tr else plan.n[-1] if plan.n else -1,
                                   tr and halo is not None), axis=axis,
                   pairs=_pairs(plan, kernel.ops[plan.b].attr("view"), kernel.ops[plan.b].dtype),
                   copy_pairs=halo is not None and not inplace and kernel.ops[plan.a].dtype is DType.float32
                   and halo_pairs(halo), in_place=inplace)
    return replace(t, fused=_fused(kernel, plan, t))


def _streams(kernel: Kernel, axis: int, cut: bool) -> tuple[int, ...]:
    """The outputs the epilogue stores past the caches: final float32 ones of STREAM_MIN_BYTES or more (a smaller
    one stays in cache for whoever reads it), contiguous along the ``axis`` its runs walk, in rows of whole cache
    lines (a run that ends mid-line leaves a line written in parts, each a trip to memory: 3x3 64 -> 64 over 8
    images at 56x56 1.15x slower), and not ``cut`` mid-line by the tiles: a padded copy's tiles of MC wide rows
    (``halo.py``), stored along the output's rows, start and end anywhere in them (ResNet's 7x7 stem, 96 wide
    rows of 115 pixels, 2 threads on AVX2, one process: stored plainly 2.21 ms, streamed 3.30, with only whole
    lines streamed 2.49)."""
    kept = _kept(kernel)
    if cut or not kept or kept[-1] != axis or kernel.full[axis] % LINE_FLOATS:
        return ()
    return tuple(j for j, (_, b) in enumerate(kernel.outputs)
                 if b.final and b.dtype is DType.float32 and b.nbytes >= STREAM_MIN_BYTES)


def _rows_walk_output(kernel: Kernel, plan: Plan) -> bool:
    """Whether the epilogue walks its memory along the rows (an NCHW conv's pixels) more than along the columns:
    its output where the output's innermost dim is the rows', and each input it reads that varies along both,
    by which of the two it is contiguous along. Stored from the tile as it is, each row's columns would land a
    whole row of the output apart (1x1 256 -> 1024 at 14x14: its epilogue 0.04 of 0.27 ms, 0.01 transposed);
    a residual read channels-last keeps the tile's orientation. Only where a row run fills a vector."""
    if not plan.m or not plan.n or kernel.full[plan.m[-1]] < host_simd_width():
        return False  # runs shorter than a vector (a 2x2 ConvTranspose's phase innermost)
    return _walk_score(kernel, plan) > 0


def _walk_score(kernel: Kernel, plan: Contraction) -> int:
    """How much more the epilogue's memory is contiguous along the rows than along the columns (``_rows_walk_output``).
    A halo tile (pixels as rows) is transposed unless the columns win: a channels-last output, whose rows of
    channels the tile holds as they are stored. A tile of one column (no N dim: a depthwise conv's pixels as rows)
    walks its rows."""
    if not plan.n:
        return 1
    mi, ni = plan.m[-1], plan.n[-1]
    kept = _kept(kernel)
    score = (1 if kept and kept[-1] == mi else -1 if kept and kept[-1] == ni else 0)
    for op in kernel.ops:
        if op.space is Space.row and op.op is Leaf.Load:
            st = op.attr("view").strides
            if st[mi] and st[ni]:
                score += (abs(st[mi]) == 1) - (abs(st[ni]) == 1)
    return score


def _header(elem: str, vw: int) -> list[str]:
    """The prelude, the GEMM's element and vector types, and the per-thread workspace."""
    from .prelude import PRELUDE

    return [PRELUDE, "#ifdef _OPENMP", "#include <omp.h>", "#endif",
            *vector_types(elem, vw),
            "/* thread-local buffers shared by all contraction kernels of a library (weak, hidden), grown to the",
            "   largest size asked: one workspace per calling thread (A's padded copy, B's panels), and one per team",
            "   thread (its tiles and its share of packed A), each at one address for every kernel */",
            "#define LUM_SHARED __attribute__((weak, visibility(\"hidden\")))",
            "static inline float *lum_grow(float **buf, size_t *have, size_t n) {",
            "    if (n > *have) { free(*buf); n = (n + 15) & ~(size_t)15;",
            "        *buf = (float *)aligned_alloc(64, n * sizeof(float)); *have = *buf ? n : 0; }",
            "    return *buf;", "}",
            "LUM_SHARED _Thread_local float *lum_ws = 0;", "LUM_SHARED _Thread_local size_t lum_ws_n = 0;",
            "LUM_SHARED float *lum_workspace(size_t n) { return lum_grow(&lum_ws, &lum_ws_n, n); }",
            "LUM_SHARED _Thread_local float *lum_tl = 0;", "LUM_SHARED _Thread_local size_t lum_tl_n = 0;",
            "LUM_SHARED float *lum_tiles(size_t n) { return lum_grow(&lum_tl, &lum_tl_n, n); }",
            "/* panel p of n, split in order among nth threads, each share (from panel lo[o]) at the start of its",
            "   thread's buffer */",
            "static inline const lum_t *lum_panel(lum_t *const *pa, const int64_t *lo, int64_t p, int64_t n,",
            "                                     int64_t nth, int64_t size) {",
            "    const int64_t o = ((p + 1) * nth - 1) / n;",
            "    return pa[o] + (p - lo[o]) * size;", "}"]


def _epilogue_function(kernel: Kernel, plan: Plan, t: _Tiling) -> list[str]:
    """The row-space epilogue over a finished tile, in a function of its own: inlined, a long epilogue (BERT's
    erf GELU: 60 ops) took registers from the micro-kernel's loop (its GEMM 1.36x slower)."""
    return [f"static __attribute__((noinline)) {epilogue_attribute(kernel)}void lum_epilogue(void **b,",
            "    const lum_t *restrict ct, int64_t ib, int64_t ic, int64_t jc, int64_t mcur, int64_t ncur) {",
            "    (void)ib;", *_buffers(kernel), *_indent(_epilogue_body(kernel, plan, t), 4), "}"]


def _fixed_indices(kernel: Kernel, plan: Plan) -> list[str]:
    """The epilogue's indices that one tile fixes: the batch dims' (of batch ``ib``), and 0 on dims of one element."""
    full = kernel.full
    batch = unravel("ib", tuple(full[x] for x in plan.batch))
    lines = [f"const int64_t i{d} = {e};" for d, e in zip(plan.batch, batch)]
    return lines + [f"const int64_t i{d} = 0;" for d, s in enumerate(full) if s == 1 and d not in kernel.reduce_axes]


def _run_step(kernel: Kernel, plan: Plan, t: _Tiling) -> tuple[int, int]:
    """(the columns a run of the innermost N dim takes in the tile, padded to whole panels with ``run``; its
    length)."""
    inner = _run(kernel, plan)
    return (t.run_cols if t.run else inner), inner


def _fused(kernel: Kernel, plan: Plan, t: _Tiling) -> bool:
    """Whether the micro-kernel applies the epilogue to its registers (``_register_epilogue``): K in one step, the
    tile's rows stored one by one along the output's columns (not transposed, staged or interleaved), and an
    epilogue of at most FUSED_MAX_OPS row-space ops (a long one would take the micro-kernel's registers)."""
    return (t.epi_panel and bool(plan.n) and not (t.tr or t.stream or t.halo) and not _interleaved(kernel, plan, t)
            and not epilogue_attribute(kernel) and sum(op.space is Space.row for op in kernel.ops) <= FUSED_MAX_OPS)


def _register_epilogue(kernel: Kernel, plan: Plan, t: _Tiling, vw: int) -> Fused:
    """The head and the end of a fused micro-kernel (``_fused``). The end: the MR x NR tile at (ic, jc), whose
    columns lie in one run, out of its registers into a small local tile, then row by row through the epilogue
    into the outputs. The local tile is indexed by a loop: unrolled rows (an array per row) left every accumulator
    on the stack through the K loop. The head, before the K loop: prefetches of the lines the next row panel's
    epilogue reads per row (a residual) and writes, which its K loop then hides. Without them each tile waited on
    its rows' lines from memory: a 1x1 conv 128 -> 512 at 28x28 with a residual add, channels-last, 2 threads,
    with cold outputs and residual: 877 us with the epilogue over the tile buffer, 1044-1082 fused, 689-702 fused
    with the prefetches (hot: 714, 609-616, 598-602)."""
    rows = math.prod(kernel.full[x] for x in plan.m)
    head = [*_buffers(kernel), *_indent([*_fixed_indices(kernel, plan), *_run_head(kernel, plan, t)], 4)]
    lines = _row_lines(kernel, plan)
    if lines:
        head += [f"    for (int64_t m = ic + {t.mr}; m < lum_min64(ic + {2 * t.mr}, {rows}); m++) {{",
                 *_indent(_row_indices(kernel, plan), 8),
                 *(f"        {{ const int64_t i{plan.n[-1]} = r0 + {j}; {p} }}" for j in (0, t.nr - 1) for p in lines),
                 "    }"]
    tail = [f"    lum_t lum_r[{t.mr * t.nr}] __attribute__((aligned(64)));",
            *(f"    *(lum_v *)(lum_r + {i * t.nr + v * vw}) = c{i}_{v};"
              for i in range(t.mr) for v in range(t.nr // vw)),
            f"    for (int64_t i = 0; i < {t.mr}; i++) {{", "        const int64_t m = ic + i; (void)m;",
            *_indent(_row_indices(kernel, plan), 8),
            *_indent(_run_loop(kernel, plan, t, "0", str(t.nr), acc=f"lum_r[i * {t.nr} + j]"), 8), "    }"]
    return head, tail


def _row_indices(kernel: Kernel, plan: Plan, skip: int = -1) -> list[str]:
    """The indices of the M dims (but ``skip``) at output row ``m``."""
    full = kernel.full
    return [f"const int64_t i{d} = {e};" for d, e in zip(plan.m, unravel("m", tuple(full[x] for x in plan.m)))
            if d != skip]


def _run_head(kernel: Kernel, plan: Plan, t: _Tiling, col: str = "jc") -> list[str]:
    """Where the tile's column ``col`` lies in the runs of the innermost N dim: its run ``q``, its position ``r0``
    there, and the outer N dims' indices at that run, divided out once per run."""
    step, _ = _run_step(kernel, plan, t)
    runs = unravel("q", tuple(kernel.full[x] for x in plan.n[:-1]))
    return [f"const int64_t q = {col} / {step}, r0 = {col} % {step}; (void)q;",
            *(f"const int64_t i{d} = {e};" for d, e in zip(plan.n[:-1], runs))]


def _row_lines(kernel: Kernel, plan: Plan) -> list[str]:
    """Prefetches of the element of each epilogue input that a row of the output reads (one that moves with M)
    and of each output's, with every index variable set (a prefetch does not fault, so masks are not asked)."""
    body = Body(kernel)
    out = []
    for op in kernel.ops:
        view = op.attr("view") if op.op is Leaf.Load and op.space is Space.row else None
        if view is not None and any(reads_dim(view, d) for d in plan.m):
            at, _ = Body.read(view, body.idx_for(view.shape, op.space))
            out.append(_prefetch(f"in{op.attr('buf')}", at, 0))
    lin = body.linear(Space.row)
    return out + [_prefetch(f"out{j}", lin, 1) for j in range(len(kernel.outputs))]


def _prefetch(buf: str, at: str, write: int) -> str:
    # the address as an integer: an offset past the buffer (a masked read's) is no pointer arithmetic
    return f"__builtin_prefetch((const void *)((uintptr_t){buf} + (uintptr_t)({at}) * sizeof *{buf}), {write}, 3);"


def _epilogue_body(kernel: Kernel, plan: Plan, t: _Tiling) -> list[str]:
    full = kernel.full
    stage = [f"float lum_s{j}[{t.stage}] __attribute__((aligned(64)));" for j in t.stream]
    epi = _fixed_indices(kernel, plan)
    if t.tr:
        return stage + epi + _columns_epilogue(kernel, plan, t)
    # rows one by one, or in groups of r stored together (``_interleaved``)
    r = _interleaved(kernel, plan, t) or 1
    row = [f"for (int64_t i = 0; i < mcur; i{' += ' + str(r) if r > 1 else '++'}) {{"]
    if t.halo:
        row += _indent(_halo_row(plan, t.halo, full), 4)
    else:
        row.append("    const int64_t m = ic + i; (void)m;")
        row += _indent(_row_indices(kernel, plan, plan.m[-1] if r > 1 else -1), 4)
    # runs of the innermost N dim: the outer N indices are divided out once per run, not per element; where the
    # tile's columns lie in one run (every tile, where runs are whole panels), once per tile (a 1x1 conv of 16
    # channels at 112x112, hot, 2 threads: 256 -> 238 us; 64 -> 256 at 56x56 680 -> 620)
    step, inner = _run_step(kernel, plan, t)
    one = [*_run_head(kernel, plan, t), *row, *_indent(_run_loop(kernel, plan, t, "0", "ncur", r), 4), "}"]
    epi += [f"if (jc % {step} + ncur <= {inner}) {{", *_indent(one, 4), "    return;", "}", *row,
            "    for (int64_t j0 = 0; j0 < ncur;) {", *_indent(_run_head(kernel, plan, t, "(jc + j0)"), 8),
            f"        const int64_t len = lum_min64({step} - r0, ncur - j0);"]
    # the run's columns past its end (with ``run``) hold no output
    end = "j0 + len" if step == inner else f"j0 + lum_min64(len, {inner} - r0)"
    return stage + epi + _indent(_run_loop(kernel, plan, t, "j0", end, r), 8) + ["        j0 += len;", "    }", "}"]


def _interleaved(kernel: Kernel, plan: Plan, t: _Tiling) -> int:
    """The rows a tile's epilogue stores together, interleaved (0: one by one): the output's innermost dim, of at
    most INTERLEAVE_MAX positions, is the innermost M dim and the next one out the innermost N dim (a ConvTranspose's
    phases, y[.., x, p]), the row blocks whole groups of it. Row by row, each store would skip the other rows'
    positions (a scatter); a group's rows fill whole runs (2x2 stride 2, 64 -> 32 at 80x80, hot, 2 threads: 1.01
    -> 0.77 ms)."""
    kept = _kept(kernel)
    if t.halo or t.stream or len(kept) < 2 or not plan.m or not plan.n \
            or (kept[-1], kept[-2]) != (plan.m[-1], plan.n[-1]):
        return 0
    r = kernel.full[plan.m[-1]]
    return r if r <= INTERLEAVE_MAX and t.mc % r == 0 and t.M % r == 0 else 0


def _run_loop(kernel: Kernel, plan: Plan, t: _Tiling, j0: str, end: str, r: int = 1, acc: str = "") -> list[str]:
    """The epilogue's vector loop over the tile columns [j0, end) of row ``i`` (or rows i..i+r-1, stored
    together), positions r0 + (j - j0) of a run; each accumulated value ``acc`` (the tile buffer's by default)."""
    loop = ["#pragma omp simd", f"for (int64_t j = {j0}; j < {end}; j++) {{", "    const int64_t n = jc + j; (void)n;"]
    if plan.n:
        loop.append(f"    const int64_t i{plan.n[-1]} = r0 + (j - {j0});")
    if r == 1:
        loop += [*_indent(_epilogue_stmts(kernel, plan, acc or f"ct[i * {t.nc} + j]", t.stream, f"j - {j0}"), 4),
                 "}"]
        return _stream_run(kernel, t, "r0", loop, f"{end} - {j0}")
    for u in range(r):
        loop += ["    {", f"        const int64_t m = ic + i + {u}, i{plan.m[-1]} = {u}; (void)m;",
                 *_indent(_epilogue_stmts(kernel, plan, f"ct[(i + {u}) * {t.nc} + j]"), 8), "    }"]
    return [*loop, "}"]


def _halo_row(plan: Plan, h: Halo, full: tuple[int, ...]) -> list[str]:
    """The output pixel of a halo tile's row ``i`` (a wide row's pixel, ``Plan.a_halo``), the rows past an
    output row's end (and past an image's output rows) skipped."""
    dims, live = _wide_row(plan, h, full)
    return [f"const int64_t q = (ic + i) / {h.cols}, c0 = (ic + i) % {h.cols};",
            f"if (c0 >= {h.width}{f' || !({live})' if live else ''}) continue;", *dims,
            f"const int64_t i{plan.m[-1]} = c0;"]


def _wide_row(plan: Plan, h: Halo | None, full: tuple[int, ...]) -> tuple[list[str], str]:
    """The outer M dims of row ``q`` of the tile's rows (a halo's wide rows, else the output's rows), and the
    condition that it holds output (empty: every row does): a batch's images are ``span`` wide rows apart, the
    rows past each image's output rows hold none."""
    outer = plan.m[:-1]
    if h and h.image >= 0:
        return [f"const int64_t i{outer[0]} = q / {h.span};",
                *([f"const int64_t i{outer[1]} = q % {h.span};"] if len(outer) == 2 else [])], \
            f"q % {h.span} < {h.rows}"
    return [f"const int64_t i{d} = {e};" for d, e in zip(outer, unravel("q", tuple(full[x] for x in outer)))], ""


def _epilogue_stmts(kernel: Kernel, plan: Plan, acc: str, stream: tuple[int, ...] = (), stage: str = "") -> list[str]:
    """The row-space ops on the accumulated value ``acc`` and the outputs' stores, every index variable set (those
    in ``stream`` into their staging rows, at index ``stage``)."""
    body = Body(kernel)
    red = kernel.ops[plan.red]
    stmts = [f"{ct.COMPUTE[red.dtype]} v{plan.red} = {ct.round_to(red.dtype, acc)};"]
    for n, op in enumerate(kernel.ops):
        if op.space is Space.row and n != plan.red:
            stmts += body.value(n)
    lin = body.linear(Space.row)
    for j, (o, b) in enumerate(kernel.outputs):
        stmts.append(f"{f'lum_s{j}[{stage}]' if j in stream else f'out{j}[{lin}]'} = {ct.store(b.dtype, f'v{o}')};")
    return stmts


def _stream_run(kernel: Kernel, t: _Tiling, start: str, body: list[str], count: str) -> list[str]:
    """``body``, a loop storing a run of the outputs ``t.stream`` from index ``start`` of ``t.axis`` into their
    staging rows, then each staged row stored past the caches."""
    if not t.stream:
        return body
    lin = Body(kernel).linear(Space.row)
    L = [f"float *restrict lum_d{j}; {{ const int64_t i{t.axis} = {start}; lum_d{j} = out{j} + {lin}; }}"
         for j in t.stream]
    return [*L, *body, *(f"lum_stream(lum_d{j}, lum_s{j}, {count});" for j in t.stream)]


def _stream_helpers() -> list[str]:
    """``lum_stream``: a run of floats stored with non-temporal stores of whole cache lines (the lines it covers in
    part plainly: a line some of whose bytes are written past the caches and others not leaves the write-combining
    buffer in parts, each a trip to memory; 3 -> 16 stem at 640x640 over tiles of 256 columns, AVX2, one process:
    1.61 ms streamed by vectors, 1.33 by lines, 1.75 plainly); ``lum_sfence``: those stores ordered before the
    thread's later ones."""
    return ["#if defined(__x86_64__) || defined(__i386__)", "#include <immintrin.h>", "#endif",
            "static inline void lum_stream(float *restrict o, const float *restrict s, int64_t n) {",
            "    int64_t j = 0;",
            "#if defined(__SSE__)",
            "    for (; j < n && ((uintptr_t)(o + j) & 63); j++) o[j] = s[j];",
            "#endif",
            "#if defined(__AVX512F__)",
            "    for (; j + 16 <= n; j += 16) _mm512_stream_ps(o + j, _mm512_loadu_ps(s + j));",
            "#elif defined(__AVX__)",
            "    for (; j + 16 <= n; j += 16) {",
            "        _mm256_stream_ps(o + j, _mm256_loadu_ps(s + j));",
            "        _mm256_stream_ps(o + j + 8, _mm256_loadu_ps(s + j + 8));",
            "    }",
            "#elif defined(__SSE__)",
            "    for (; j + 16 <= n; j += 16)",
            "        for (int64_t v = 0; v < 16; v += 4) _mm_stream_ps(o + j + v, _mm_loadu_ps(s + j + v));",
            "#endif",
            "    for (; j < n; j++) o[j] = s[j];",
            "}",
            "#if defined(__SSE__)",
            "#define lum_sfence() _mm_sfence()",
            "#else",
            "#define lum_sfence() ((void)0)",
            "#endif"]


def _columns_epilogue(kernel: Kernel, plan: Plan, t: _Tiling) -> list[str]:
    """The epilogue of a transposed tile (``t.tr``): per output column, its rows by runs of the innermost M dim,
    stored contiguously along the output. A halo tile's rows are wide rows of output pixels (``Plan.a_halo``):
    each run is one wide row, up to its output row's end."""
    h, full = t.halo, kernel.full
    inner = plan.m[-1]
    pitch = h.cols if h else full[inner]
    L = ["for (int64_t j = 0; j < ncur; j++) {", "    const int64_t n = jc + j; (void)n;"]
    cols, col = plan.n, "n"
    if t.run:  # B read by runs of its innermost N dim, each padded to whole panels: the columns past its end skipped
        step, cols, col = t.run_cols, plan.n[:-1], "qn"
        L += [f"    const int64_t qn = n / {step}, rn = n % {step};", f"    if (rn >= {t.run}) continue;",
              f"    const int64_t i{plan.n[-1]} = rn;"]
    L += [f"    const int64_t i{d} = {e};" for d, e in zip(cols, unravel(col, tuple(full[x] for x in cols)))]
    L += ["    for (int64_t r = ic; r < ic + mcur;) {",
          f"        const int64_t q = r / {pitch}, c0 = r % {pitch}; (void)q;",
          f"        const int64_t len = lum_min64({pitch} - c0, ic + mcur - r);"]
    dims, live = _wide_row(plan, h, full)
    end = f"lum_min64(len, {h.width} - c0)" if h else "len"
    L += [f"        const int64_t end = {f'{live} ? {end} : 0' if live else end};", *("        " + x for x in dims)]
    loop = ["#pragma omp simd", "for (int64_t i = 0; i < end; i++) {", f"    const int64_t i{inner} = c0 + i;",
            *_indent(_epilogue_stmts(kernel, plan, f"ct[j * {t.mt_pad} + (r - ic + i)]", t.stream, "i"), 4), "}"]
    loop = _stream_run(kernel, t, "c0", loop, "end")
    return [*L, *_indent(loop, 8), "        r += len;", "    }", "}"]


def _entry(kernel: Kernel, t: _Tiling, fill: list[str], ntab: int) -> list[str]:
    """The kernel function up to its parallel region: index tables filled, the workspace (packed A and B) taken,
    a constant B's panels found."""
    L = _signature(kernel)
    L.append(f"    int64_t *lum_tab = (int64_t *)malloc({ntab} * sizeof(int64_t)), *lum_ti = lum_tab;")
    L.append("    if (!lum_tab) return 1;")
    L += _indent(fill, 4)
    if t.size_a + t.size_b:
        L.append(f"    lum_t *ap = (lum_t *)lum_workspace({t.size_a + t.size_b});")
        L.append("    if (!ap) { free(lum_tab); return 1; }")
        L.append(f"    lum_t *bpk = ap + {t.size_a}; (void)bpk;")
    else:
        L.append("    lum_t *ap = 0, *bpk = 0; (void)ap; (void)bpk;")
    L.append("    int lum_bad = 0;")
    if t.own_a:
        L.append("    lum_t *lum_pa[nt > 0 ? nt : 1]; int64_t lum_plo[nt > 0 ? nt : 1];")
    if t.once:
        nbuf = len(kernel.inputs) + len(kernel.outputs)
        L.append(f"    int *lum_packed = (int *)b[{nbuf + 1}]; const int lum_pack = !*lum_packed;")
        L.append(f"    bpk = (lum_t *)b[{nbuf}];")
    return L


def _region_head(t: _Tiling) -> list[str]:
    """The head of the parallel region: each thread's tile buffer and its share of A's panels in a thread-local
    buffer of its own, the rest of the region run only where every thread has one. Carved from the caller's
    workspace at offsets that differ by kernel, a thread wrote lines another thread had written in the kernel
    before, each brought over from that core's cache first: with the two vCPUs on different dies, ResNet-18
    16.8 -> 15.6 ms (on one die 12.9 either way)."""
    share = f" + ({t.nb * t.pm}LL + lum_nth - 1) / lum_nth * {t.K * t.mr}" if t.own_a else ""
    return ["        #ifdef _OPENMP",
            "        const int64_t lum_nth = omp_get_num_threads(), lum_me = omp_get_thread_num();",
            "        #else",
            "        const int64_t lum_nth = 1, lum_me = 0;",
            "        #endif",
            "        (void)lum_nth; (void)lum_me;",
            f"        lum_t *ct = lum_tiles({t.size_thread}{share});",
            "        if (!ct) __atomic_store_n(&lum_bad, 1, __ATOMIC_RELAXED);",
            *([f"        else {{ lum_pa[lum_me] = ct + {t.size_thread}; "
               f"lum_plo[lum_me] = {t.nb * t.pm}LL * lum_me / lum_nth; }}"] if t.own_a else []),
            "        #pragma omp barrier",
            "        if (!__atomic_load_n(&lum_bad, __ATOMIC_RELAXED)) {"]


def _pack_a(buf: int, dt: DType, va: View, names_a: dict, t: _Tiling) -> list[str]:
    """Pack A: panel (ib, p) holds K x MR."""
    ax, aok = _operand(buf, dt, va, names_a, {"batch": "ib", "m": "m", "k": "k"})
    mr, K, M = t.mr, t.K, t.M

    def rows(count: str, zero: bool = False) -> list[str]:
        """Each K row's ``count`` rows of the panel (the rest zero): a whole panel's in a loop of a constant
        count, which the compiler unrolls (the 1x1 conv 672 -> 112 at 14x14 over an NCHW input, its A the
        pixels: 300 -> 251 us hot, the pack a quarter of it; one loop testing ``i < mv`` 443)."""
        rest = [f"                    for (int64_t i = {count}; i < {mr}; i++) dst[k*{mr} + i] = 0;"] if zero else []
        return [f"                for (int64_t k = 0; k < {K}; k++) {{",
                f"                    for (int64_t i = 0; i < {count}; i++) {{",
                f"                        const int64_t m = p * {mr} + i;",
                f"                        dst[k*{mr} + i] = ({aok}) ? {ax} : 0;",
                "                    }", *rest, "                }"]

    # panels split statically, in order, as the tiles' shares (``_shares``) split the batches and rows that read
    # them: a Winograd product's thread packs mostly the panels it multiplies (2 threads on two dies, one
    # process, interleaved, dynamic / static: Inception-v2 33.2 / 31.6 ms, MobileNetV3 8.11 / 7.76); each
    # thread's share into its own buffer (``lum_panel`` finds a panel there)
    return ["        {",
            f"        const int64_t lum_lo = lum_plo[lum_me], lum_hi = {t.nb * t.pm}LL * (lum_me + 1) / lum_nth;",
            "        for (int64_t t = lum_lo; t < lum_hi; t++) {",
            f"            int64_t ib = t / {t.pm}, p = t % {t.pm}; (void)ib;",
            f"            lum_t *dst = lum_pa[lum_me] + (t - lum_lo) * {K * mr};",
            f"            const int64_t mv = lum_min64({mr}, {M} - p * {mr});",
            f"            if (mv == {mr}) {{", *rows(str(mr)), "            } else {", *rows("mv", zero=True),
            "            }",
            "        }",
            "        }",
            *([] if t.size_b else ["        #pragma omp barrier"])]


def _pack_b_all(pack_b: list[str], t: _Tiling) -> list[str]:
    """Pack all of B into NR panels before the tiles (a constant B only on the first call)."""
    return ["        if (lum_pack) {" if t.once else "        {",
            "        #pragma omp for schedule(dynamic, 1)",
            f"        for (int64_t t = 0; t < {t.nb * t.pn}LL; t++) {{",
            f"            const int64_t ib = t / {t.pn}, q = t % {t.pn}, k0 = 0, k1 = {t.K}; (void)ib;",
            f"            lum_t *dst = bpk + t * {t.K * t.nr};", *_indent(pack_b, 12), "        }", "        }"]


def _b_source(buf: int, vb: View, names_b: dict, t: _Tiling) -> tuple[list[str], str, str]:
    """(statements, B pointer, its row stride and row table arguments) of panel ``jr`` for the micro-kernel."""
    nr = t.nr
    if not t.direct:
        bptr = (f"bt + jr * kcur * {nr}" if t.tile_b else
                f"bpk + (ib * {t.pn} + jc / {nr} + jr) * {t.K * nr} + pc * {nr}")
        return [], bptr, f"{nr}, 0"
    boff = _term(names_b, 0, "batch", "ib")
    base = f"in{buf} + {vb.offset}" + (f" + {boff}" if boff else "") + " + jc + jr*" + str(nr)
    kind, kv = names_b[(0, "k")]
    if kind == "tab":
        return [f"                    const lum_t *bsrc = {base};"], "bsrc", f"0, {kv} + pc"
    return [f"                    const lum_t *bsrc = {base};"], f"bsrc + pc*{kv}", f"{kv}, 0"


def _a_source(buf: int, va: View, names_a: dict, t: _Tiling) -> str:
    """The A arguments of the micro-kernel for panel ``ir``: pointer, row stride, valid rows."""
    mr = t.mr
    if not t.direct_a:
        return (f"lum_panel(lum_pa, lum_plo, ib * {t.pm} + ic / {mr} + ir, {t.nb * t.pm}LL, lum_nth, {t.K * mr}) + "
                f"pc * {mr}, 0, {mr}")
    kind, sm = names_a.get((0, "m"), ("lin", 0))
    assert kind == "lin"
    aoff = _term(names_a, 0, "batch", "ib")
    abase = f"in{buf} + {va.offset}" + (f" + {aoff}" if aoff else "")
    return f"{abase} + (ic + ir * {mr}) * {sm} + pc, {sm}, lum_min64({mr}, {t.M} - ic - ir * {mr})"


def _mk_loop(fn: str, aptr: str, bptr: str, bkp: str, t: _Tiling) -> list[str]:
    """The micro-kernel ``fn`` over the row panels of the tile, against B panel ``jr``; with ``t.fused``, its fused
    twin on whole row panels where the panel takes it (``lum_fuse``)."""
    args = f"kcur, {aptr}, {bptr}, {bkp}, ct + ir * {t.mr * t.nc} + jr * {t.nr}, {t.nc}, pc == 0"
    if not t.fused:
        return ["for (int64_t ir = 0; ir < mp; ir++) {", f"    {fn}({args});", "}"]
    return ["for (int64_t ir = 0; ir < mp; ir++) {",
            f"    if (lum_fuse && ir * {t.mr} + {t.mr} <= mcur)",
            f"        {fn}e({args}, b, ib, ic + ir * {t.mr}, jc + jr * {t.nr});",
            "    else",
            f"        {fn}({args});",
            "}"]


def _halo_loop(boff: str, bptr: str, t: _Tiling) -> list[str]:
    """The halo micro-kernel over the row panels of the tile (MR GEMM rows each, consecutive in the copy, batch
    offset ``boff``), against B panel ``jr``."""
    assert t.halo is not None
    return ["for (int64_t ir = 0; ir < mp; ir++) {",
            f"    lum_mkh(kcur, ap + {boff} + {row_address(t.halo, f'ic + ir * {t.mr}')}, ta_k + pc, {bptr}, "
            f"ct + ir * {t.mr * t.nc} + jr * {t.nr}, {t.nc}, pc == 0);",
            "}"]


def _in_place_micro_kernels(mr: int, nr: int, vw: int, step: int) -> list[str]:
    """The halo micro-kernel over the input itself: A row k is MR values ``step`` apart (the conv's column stride)
    at a + ak[k] (``lum_mkhs``), or at the pointer aq[k] (``lum_mkhq``: a border tile's rows, some copied between
    zeros, some all zeros: ``lum_hzero``)."""
    br = f"const lum_t *br = bp + k*{nr};"
    head = "                            const lum_t *restrict bp, lum_t *restrict c, int64_t ldc, int first) {"
    return [f"static const lum_t lum_hzero[{mr * step}] __attribute__((aligned(64)));",
            "static inline void lum_mkhs(int64_t kc, const lum_t *restrict a, const int64_t *restrict ak,", head,
            *_mk_loop_body(mr, nr // vw, vw, ["const lum_t *restrict ar = a + ak[k];", br], "lum_v",
                           lambda i: f"ar[{i * step}]"),
            "static __attribute__((noinline)) void lum_mkhq(int64_t kc, const lum_t *const *restrict aq,", head,
            *_mk_loop_body(mr, nr // vw, vw, ["const lum_t *restrict ar = aq[k];", br], "lum_v",
                           lambda i: f"ar[{i * step}]")]


def _in_place_loop(base: str, bptr: str, t: _Tiling, full: tuple[int, ...], k: tuple[int, ...]) -> list[str]:
    """The halo micro-kernel over the row panels of the tile, A read from the input itself (``base``: its batch's
    first element), against B panel ``jr`` (``k``: the K dims). Each panel is MR pixels of one output row; one whose
    windows all lie inside the input reads them in place, one at the border each K row in place, from zeros, or
    copied between zeros where the padding cuts it (``size_patch``), as its tap (``halo.taps``) falls: the panel's
    pixels cut at each tap found once, not at each K row."""
    h, mr, nr, nc = t.halo, t.mr, t.nr, t.nc
    assert h is not None
    rows, cols = h.pixels
    sh, sw = h.split[rows], h.split[cols]
    height, width = h.source[rows], h.source[cols]
    pitch = row_major(h.source)[rows]
    (lo_h, hi_h), (lo_w, hi_w) = index_range(h, rows, full), index_range(h, cols, full)
    ntap = tap_count(h, full, k)
    return ["for (int64_t ir = 0; ir < mp; ir++) {",
            f"    const int64_t r0 = ic + ir * {mr}, oh = r0 / {h.cols}, ow = r0 % {h.cols};",
            f"    const lum_t *a0 = {base} + oh * {sh * pitch} + ow * {sw};",
            f"    lum_t *cr = ct + ir * {mr * nc} + jr * {nr};",
            f"    if (oh * {sh} + {lo_h} >= 0 && oh * {sh} + {hi_h} < {height} && ow * {sw} + {lo_w} >= 0 && "
            f"(ow + {mr - 1}) * {sw} + {hi_w} < {width}) {{",
            f"        lum_mkhs(kcur, a0, ta_k + pc, {bptr}, cr, {nc}, pc == 0);",
            "    } else {",
            f"        lum_t *hp = tt + {t.size_tt};",
            f"        const lum_t **aq = (const lum_t **)(hp + {t.patch_rows});",
            f"        int64_t lo_t[{ntap}], hi_t[{ntap}];",
            f"        for (int64_t y = 0; y < {ntap}; y++) {{",
            f"            const int64_t ih = oh * {sh} + th_t[y], iw = ow * {sw} + tw_t[y];",
            f"            lo_t[y] = iw >= 0 ? 0 : lum_cdiv(-iw, {sw});",
            f"            hi_t[y] = (uint64_t)ih >= {height}ULL ? 0 "
            f": lum_min64({mr}, lum_fdiv({width - 1} - iw, {sw}) + 1);",
            "        }",
            "        for (int64_t k = 0; k < kcur; k++) {",
            "            const int64_t lo = lo_t[tp_k[pc + k]], hi = hi_t[tp_k[pc + k]];",
            "            if (hi <= lo) {",
            "                aq[k] = lum_hzero;",
            f"            }} else if (lo == 0 && hi == {mr}) {{",
            "                aq[k] = a0 + ta_k[pc + k];",
            "            } else {",
            f"                lum_t *p = hp + k * {mr * sw};",
            f"                for (int64_t i = 0; i < {mr}; i++) p[i * {sw}] = i >= lo && i < hi ? "
            f"a0[ta_k[pc + k] + i * {sw}] : 0;",
            "                aq[k] = p;",
            "            }",
            "        }",
            f"        lum_mkhq(kcur, aq, {bptr}, cr, {nc}, pc == 0);",
            "    }",
            "}"]


def _rows_panel(kernel: Kernel, plan: Plan, vb: View, names_b: dict, t: _Tiling, aptr: str) -> list[str]:
    """B panel ``jr`` with ``run``: NR columns within one run of the innermost N dim, ``jm`` of them in it.
    With unit stride along the run B is read in place: row k at the panel's base + its K term (unaligned),
    columns past the run reading whatever lies next in the input (they land in tile columns the epilogue
    skips), where the input holds NR columns past every row's start. A panel none of whose K rows meets a
    mask in its columns (a conv's windows inside the image) takes the K table as it is; in any other
    (windows over the padding) each row is checked, and the rows that meet a mask are copied between zeros
    into the thread's panel buffer. With a larger stride (a strided conv) every row is gathered into that
    buffer, whole rows by one fixed-length strided copy."""
    nr, run, full, vw = t.nr, t.run, kernel.full, host_simd_width()
    buf = kernel.ops[plan.b].attr("buf")
    exprs = view_exprs(vb)
    step = [co[plan.n[-1]] for co, _, _ in exprs]
    direct = step[0] == 1

    def krange(co: tuple[int, ...]) -> tuple[int, int]:
        lo = sum(min(0, co[d] * (full[d] - 1)) for d in plan.k)
        return lo, sum(max(0, co[d] * (full[d] - 1)) for d in plan.k)

    outer, inner = plan.n[:-1], plan.n[-1]
    L = [f"const int64_t p = jc / {nr} + jr, row = p / {t.run_cols // nr}, c0 = p % {t.run_cols // nr} * {nr};",
         f"const int64_t jm = lum_min64({nr}, {run} - c0); (void)row;"]
    for e, (co, const, _) in enumerate(exprs):  # the panel's first column: batch, run and column terms
        parts = [x for x in (_term(names_b, e, "batch", "ib"),) if x]
        parts += [f"{co[d]}*{ix}" for d, ix in zip(outer, unravel("row", tuple(full[d] for d in outer))) if co[d]]
        parts += [f"{co[inner]}*c0"] if co[inner] else []
        L.append(f"const int64_t v{e} = {' + '.join([*parts, str(const)])};")
    kmin0, kmax0 = krange(exprs[0][0])
    numel, last = kernel.inputs[buf].numel, kmax0 + step[0] * (nr - 1)  # the farthest element a row reads
    room = f"jm == {nr} || v0 + {last} < {numel}" if run % nr else "1"  # columns past the run's end
    conds, rowok = [], []
    for e, (co, _, bound) in enumerate(view_masks(vb), start=1):
        (kmin, kmax), s = krange(co), step[e]
        # the mask's lowest and highest value over the panel's columns, before the K term
        lo, hi = (f"v{e} + {s} * (jm - 1)" if s < 0 else f"v{e}"), (f"v{e} + {s} * (jm - 1)" if s > 0 else f"v{e}")
        L.append(f"const int64_t l{e} = {lo}, h{e} = {hi};")
        conds.append(f"l{e} + {kmin} >= 0 && h{e} + {kmax} < {bound}")
        rowok.append(f"(l{e} + kt{e} >= 0) & (h{e} + kt{e} < {bound})")
    kind, kv = names_b.get((0, "k"), ("lin", 0))
    bptr, bkp = ("bsrc", f"0, {kv} + pc") if kind == "tab" else (f"bsrc + pc*{kv}", f"{kv}, 0")
    kts = [f"const int64_t kt{e} = {_term(names_b, e, 'k', 'kk') or '0'};" for e in range(len(exprs))]
    L.append(f"const int room = {room};")
    if direct:
        L += [f"if (room && {' && '.join(f'({c})' for c in conds) or '1'}) {{",
              f"    const lum_t *bsrc = in{buf} + v0;", *_indent(_mk_loop("lum_mkt", aptr, bptr, bkp, t), 4),
              "} else {"]
    else:
        L.append("{")
    gather = _gather(f"src[{step[0]} * w]", nr, numel, buf) if t.pairs \
        else ["#pragma omp simd", f"for (int64_t w = 0; w < {nr}; w++) ds[w] = src[{step[0]} * w];"]
    # first the rows no mask cuts, branch-free (a vector loop), then the others one by one
    L += [f"    const lum_t **bq = (const lum_t **)(bt + {nr * t.kc});", "    #pragma omp simd",
          "    for (int64_t k = 0; k < kcur; k++) {",
          "        const int64_t kk = pc + k;", *_indent(kts, 8),
          f"        bq[k] = room & {' & '.join(rowok) or '1'} ? in{buf} + v0 + kt0 : 0;", "    }",
          # every row of the panel lies inside the input: a masked row is copied by a select over all NR columns
          f"    const int safe = v0 + {kmin0} >= 0 && v0 + {last} < {numel}; (void)safe;",
          "    for (int64_t k = 0; k < kcur; k++) {"]
    if direct:
        L.append("        if (bq[k]) continue;")
    else:
        # each row's lines two panels on, which no hardware prefetcher follows (a stream per K row, at the K
        # table's irregular offsets: 27 in a 3x3 stem of 3 channels, 144 in a 3x3 conv of 16), asked for while this
        # panel is computed (2 threads, in the YOLO-style detector: 3x3 stride 2 16 -> 32 at 160x160 2.81-2.88 ->
        # 2.59 ms, its 3 -> 16 stem 2.29-2.30 -> 2.17)
        ahead = [_prefetch("src", f"{2 * step[0] * nr + x}", 0) for x in range(0, step[0] * nr, 16)]
        L += ["        if (bq[k]) {", "            const lum_t *restrict src = bq[k];", *(" " * 12 + a for a in ahead),
              f"            lum_t *restrict ds = bt + k * {nr};", *_indent(gather, 12), "            bq[k] = ds;",
              "            continue;", "        }"]
    L.append("        const int64_t kk = pc + k;")
    body = [*kts, "int64_t lo = 0, hi = jm;"]
    body += [f"{{ const int64_t v = v{e} + kt{e}; {mask_bounds('v', step[e], b)} }}"
             for e, (_, _, b) in enumerate(view_masks(vb), start=1)]
    body += [f"const lum_t *src = in{buf} + v0 + kt0;",
             "if (hi <= lo) {", "    bq[k] = lum_zrow;",  # no column of the row in the input
             "} else {", f"    lum_t *restrict ds = bt + k * {nr};", "    bq[k] = ds;"]
    if direct:
        body += ["    if (safe) {", "        const int32_t lo32 = (int32_t)lo, hi32 = (int32_t)hi;",
                 *[f"        {{ const lum_iv w = lum_iota + {v * vw}; *(lum_iv *)(ds + {v * vw}) = "
                   f"*(const lum_ivu *)(src + {v * vw}) & ((w >= lo32) & (w < hi32)); }}" for v in range(nr // vw)],
                 "    } else {", *_indent(copy_between("ds", str(nr), "src[w]"), 8), "    }", "}"]
    else:
        body += [*_indent(copy_between("ds", str(nr), f"src[{step[0]} * w]"), 4), "}"]
    L += [*_indent(body, 8), "    }", *_indent(_mk_loop("lum_mkp", aptr, "bq", "0, 0", t), 4), "}"]
    return _indent(L, 20)


def _tile_loop(t: _Tiling, order: str, pack_b: list[str], panel: list[str]) -> list[str]:
    """The MC x NC tiles, shared among the threads: each accumulated over K in KC steps in the thread's tile
    buffer by the micro-kernel (``panel``: B panel ``jr`` against the tile's rows), then passed through the
    epilogue."""
    mr, nr, mc, nc, mt, nt_ = t.mr, t.nr, t.mc, t.nc, t.mt, t.nt
    # a product of one row splits its columns statically: each thread reads the same part of the weight at every
    # call (a recurrence's steps), from its own core's cache. Bidirectional 2-layer recurrences, dynamic against
    # static: GRU 256 -> 768 1.05x, LSTM 128 -> 512 1.08x
    tiles = t.nb * mt * nt_
    head = _shares(tiles) if t.shares else [f"        #pragma omp for schedule(static){' nowait' if t.stream else ''}",
                                            f"        for (int64_t t = 0; t < {tiles}LL; t++) {{"]
    L = [f"        lum_t *bt = ct + {mc * nc}; (void)bt;",
         f"        lum_t *tt = bt + {t.size_bt}; (void)tt;",
         *head,
         f"            int64_t ib = t / {mt * nt_}, rest = t % {mt * nt_};"]
    if order == "mn":
        L.append(f"            int64_t ic = (rest / {nt_}) * {mc}, jc = (rest % {nt_}) * {nc};")
    else:
        L.append(f"            int64_t jc = (rest / {mt}) * {nc}, ic = (rest % {mt}) * {mc};")
    L.append(f"            int64_t mcur = lum_min64({mc}, {t.M} - ic), ncur = lum_min64({nc}, {t.N} - jc);")
    L.append(f"            int64_t mp = (mcur + {mr - 1}) / {mr}, np_ = (ncur + {nr - 1}) / {nr};")
    L.append(f"            for (int64_t pc = 0; pc < {t.K}; pc += {t.kc}) {{")
    L.append(f"                int64_t kcur = lum_min64({t.kc}, {t.K} - pc);")
    if t.tile_b:
        L += ["                for (int64_t jr = 0; jr < np_; jr++) {",
              f"                    const int64_t q = jc / {nr} + jr, k0 = pc, k1 = pc + kcur;",
              f"                    lum_t *dst = bt + jr * kcur * {nr};"]
        L += [*_indent(pack_b, 20), "                }"]
    L.append("                for (int64_t jr = 0; jr < np_; jr++) {")
    L += panel
    # a tile whose rows walk the output's innermost dim: transposed first, so that its epilogue stores along it
    tile = "tt" if t.tr else "ct"
    if t.epi_panel:  # each panel finished in one K step: its epilogue while the panel is in L1
        tr = [f"                    lum_tr(ct + jr * {nr}, {nc}, mcur, lum_min64({nr}, ncur - jr * {nr}), tt, "
              f"{t.mt_pad});"] if t.tr else []
        call = (f"lum_epilogue(b, {'tt' if t.tr else f'ct + jr * {nr}'}, ib, ic, jc + jr * {nr}, mcur, "
                f"lum_min64({nr}, ncur - jr * {nr}));")
        if t.fused:  # the rows past the last whole row panel
            L += [f"                    if (!lum_fuse) {call}",
                  f"                    else if (mcur % {mr}) lum_epilogue(b, ct + mcur / {mr} * {mr * nc} + "
                  f"jr * {nr}, ib, ic + mcur / {mr} * {mr}, jc + jr * {nr}, mcur % {mr}, {nr});"]
        else:
            L += [*tr, f"                    {call}"]
        L += ["                }", "            }", "        }"]
    else:
        L += ["                }",
              "            }",
              *([f"            lum_tr(ct, {nc}, mcur, ncur, tt, {t.mt_pad});"] if t.tr else []),
              f"            lum_epilogue(b, {tile}, ib, ic, jc, mcur, ncur);",
              "        }"]
    return [*L, "        }", "        }"] if t.shares else L  # the shares' passes and their block


def _shares(tiles: int) -> list[str]:
    """The head of the tile loop over t: each thread takes the tiles of its own contiguous share first, from a
    counter of its own, then what is left of the others' shares (two more blocks to close): the tiles of a late thread
    (its vCPU taken by the host) are not waited for, as with a dynamic split, and each thread otherwise writes the
    same part of the output at every call and reads its own part of what the previous kernel wrote. Handed out
    one by one from a shared counter (``schedule(dynamic, 1)``), with the host's two vCPUs on different dies every
    tile's output lines and input moved between them; one process, interleaved, 2 threads, dynamic / shares: on
    two dies ResNet-50 63.7 / 60.2 ms, SqueezeNet 7.63 / 6.59, the YOLO-style detector 79.7 / 74.5, the DB text
    detector 23.6 / 21.5, MobileNetV3 8.64 / 8.82; on one die 51.8 / 51.0, 5.13 / 4.99, 63.3 / 62.6, and 6.11 /
    6.25. A static split (no taking over) lost 7-10% on one die."""
    return ["        {",
            "        for (int64_t lum_pass = 0; lum_pass < lum_nth; lum_pass++) {",
            "        const int64_t lum_o = (lum_me + lum_pass) % lum_nth;",
            f"        const int64_t lum_lo = {tiles}LL * lum_o / lum_nth, lum_hi = {tiles}LL * (lum_o + 1) / lum_nth;",
            "        for (;;) {",
            "            const int64_t t = lum_lo + __atomic_fetch_add(&lum_next[lum_o * 8], 1, __ATOMIC_RELAXED);",
            "            if (t >= lum_hi) break;"]
