"""Schedule knobs of C kernels: the space, a default that always works, and validity."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from ..kernel import Kernel
from ..knobs import Knob, Schedule, parse, to_json
from ..knobs import space as knobs_of
from . import contraction
from .contraction import (
    TILE,
    Plan,
    fits,
    halo_default,
    in_place_default,
    in_place_halo,
    padded,
    plan_contraction,
    swappable,
    whole_vector_rows,
)
from .emit import LANES, lanes_apply
from .halo import Halo, in_place, panels, tile_rows, whole_tiles
from .knobs import (
    MC_BLOCKS,
    NC_BLOCKS,
    CSchedule,
    Ctx,
    ElementwiseSchedule,
    GemmSchedule,
    ReductionSchedule,
    schedule_type,
)
from .stencil import block_rows, plan_stencil, separable_default, stencil_default

# operations a thread must have before another joins: waking a sleeping team took 60-120 us per kernel on a
# 2-core VM, where softmaxes and layer norms of 0.6-1.0M operations ran 1.6-2x faster on one thread than on two,
# and an elementwise chain of 4.7M on two. With the team spinning briefly between kernels (build.py) a quarter
# of that: 2 threads, a MobileNetV3 1.20 -> 1.34x onnxruntime (its pools, squeeze-excitations and hardswishes),
# the CNN group, BERT-base, GPT-2 and ViT-B at par or better
GRAIN = 1 << 18
# a kernel without a GEMM (an elementwise pass, a pool, a squeeze-excitation's mean and scale) is a pass over
# activations the kernels before it wrote on every thread, half in the other core's cache: a quarter of GRAIN,
# about the 32768 elements per thread of PyTorch's parallel_for at two operations an element (2 threads, one
# process, interleaved, mostly two dies: the light ShuffleNet 4.23 -> 3.92-3.99 ms, the DB text detector 19.7 ->
# 18.9, the CRNN 7.21 -> 6.91-6.98, the other CNNs, BERT-base, GPT-2, ViT-B/16 and ResNet-18 at par or better).
# Products keep GRAIN: at a quarter of it a small ViT's 17 x 64 x 64 projections on two threads took it 0.150 ->
# 0.158 ms
LOOP_GRAIN = GRAIN // 4
HALO_ROW_BLOCKS = (192, 288, 384)
# a weight of more bytes, packed once, leaves the L2 of a core: a conv over its padded copy then takes every wide row
# in one block and the output channels split among the threads (``_weight_once``). 2 threads, hot, paired, against
# blocks of 96 rows by 128 channels: 3x3 at stride 2 from 35x35 288 -> 384 (4 MB) 1.06-1.07x, 1 x 7 192 -> 192 at
# 17x17 (1 MB) at par
WEIGHT_RESIDENT = 1 << 20
HALO_TILES_PER_THREAD = 16


def simd_width() -> int:
    """float32 lanes of the vectors C kernels are scheduled and emitted for: the host's, as the contraction's rules
    read them (``contraction.host_simd_width``, the one name a test pins them by)."""
    return contraction.host_simd_width()


def _thread_choices(n: int) -> tuple[int, ...]:
    # counts, not 0 for "all": on the knob's scale all threads is the most, and a cost model reading the order
    # took one thread (the fastest for small reductions) for a near neighbour of the default
    return tuple(sorted({1, n} | {2 ** k for k in range(1, 8) if 2 ** k < n}))


def threads_for(kernel: Kernel, threads: int, grain: int = GRAIN) -> int:
    """One thread per ``grain`` operations of the kernel (its flops, and a load or store per element), at most
    ``threads`` (the target's): as a parallel loop with a grain size splits (PyTorch's parallel_for, TVM's),
    since waking a sleeping team costs more than a small kernel's whole run."""
    work = kernel.flops + math.prod(kernel.full)
    return max((c for c in _thread_choices(threads) if c <= max(1, work // grain)), default=1)


def _ctx(kernel: Kernel, threads: int) -> Ctx:
    return Ctx(kernel, simd_width(), _thread_choices(threads))


def space(kernel: Kernel, threads: int) -> list[Knob]:
    """The knobs of ``kernel`` on a target of ``threads`` threads."""
    return knobs_of(schedule_type(kernel), _ctx(kernel, threads))


def typed(kernel: Kernel, sched: Schedule, threads: int, choices: bool = True) -> CSchedule | None:
    """The typed schedule of a stored one, or None where it is not one of ``kernel``'s: a knob missing or
    unknown, or (with ``choices``) a value outside the knob's choices."""
    return parse(schedule_type(kernel), sched, _ctx(kernel, threads), choices=choices)


def default_schedule(kernel: Kernel, threads: int) -> Schedule:
    """A schedule of ``kernel`` that always works, for a target of ``threads`` threads."""
    return to_json(typed_default(kernel, threads))


def typed_default(kernel: Kernel, threads: int) -> CSchedule:
    plan = plan_contraction(kernel)
    if plan is not None:
        # a thread per GRAIN operations, as every loop kernel. Contractions of 0.2-2M multiply-adds ran on one
        # thread whatever their schedule, a rule in the emitter the search could not undo; on two (2 threads,
        # in the model): MobileNetV3-Small 1.63 -> 1.36 ms, SqueezeNet 1.1 4.82 -> 4.74, the others at par
        stencil = stencil_default(kernel)
        # a product of one row (a recurrence's step, a classifier) does one multiply-add per weight element it
        # reads: reading the weight is its cost, and two threads read it from two caches, so it takes a second
        # thread at half the grain. A bidirectional GRU's 256 -> 512 step products on 2 threads, 2 layers of
        # 100 steps: 1.11x the whole model; an LSTM's 128 -> 512 (one thread either way) at par; at a quarter
        # of the grain, its 128 -> 512 on two threads as well: 0.86x, the GRU's 256 -> 256 1.14x
        grain = GRAIN // 2 if plan.sizes[1] == 1 else GRAIN
        base = replace(_gemm_default(plan, threads, stencil), swap=False if swappable(kernel) else None,
                       copy=not in_place_default(plan) if in_place_halo(kernel) else None,
                       threads=threads_for(kernel, threads, grain))
        # a stencil's rows in blocks of ``mr`` (its register tile's rows), by the stencil's rule where it has them
        rows = block_rows(kernel, simd_width()) if base.impl == "stencil" else 0
        return replace(base, mr=rows) if rows else base
    if kernel.reduce_axes:
        return ReductionSchedule(vec=0, unroll=1, threads=threads_for(kernel, threads, LOOP_GRAIN), rows_per_thread=0,
                                 stash=True, lanes=LANES if lanes_apply(kernel) else None,
                                 impl=_reduction_impl(kernel))
    return ElementwiseSchedule(vec=0, unroll=1, threads=threads_for(kernel, threads, LOOP_GRAIN), block=16384)


def _reduction_impl(kernel: Kernel) -> Literal["loops", "stencil", "separable"] | None:
    """A pool's taps as a stencil (2 threads, 3x3 pools: max at stride 1 on 256x28x28 and stride 2 on 64x112x112,
    average at stride 1, against the lanes loops: see ``stencil.py``), separable where ``separable_default``."""
    if plan_stencil(kernel) is None:
        return None
    if not stencil_default(kernel):
        return "loops"
    return "separable" if separable_default(kernel, simd_width()) else "stencil"


# a row costs 7-9% more in tiles of 7 than of 12 (2 threads, hot, 3x3 at 28x28: 96 -> 128 481 -> 484 us for 7% fewer
# rows, 128 -> 192 657 -> 666, 128 -> 128 532 -> 537); where fewer rows save more it pays: a 7x7 map's 49 pixels in
# tiles of 7, not 63 wide ones in 12s (3x3 512 -> 512 0.73 -> 0.65 ms, as wide rows of 7s), 13x13's 182 against 204,
# 5x5 16 -> 32 at 28x28 151 -> 140 us (784 rows against 900)
ROW_OVERHEAD = 1.5


def _gemm_default(plan: Plan, threads: int, stencil: bool = False) -> GemmSchedule:
    vw = simd_width()
    nb, m, n, k = plan.sizes
    # few rows of A, or a K that one KC step covers (a 1x1 conv's input channels), against a B packed on every
    # call: packing costs more than reading B in place (2 threads, 1x1 convs: 64->256 at 56x56 0.64 -> 0.51
    # ms, 24->144 at 56x56 0.22 -> 0.18, 128->512 at 32x32 0.62 -> 0.55, 256->1024 at 16x16 0.53 -> 0.49).
    # A weight is packed once, and its panels then stream contiguously: inside BERT-base, 768x768 and
    # 768x3072 ran 17% faster than with the weight read in place, 3072x768 at par
    in_place = not plan.b_const and plan.b_direct and (m <= 128 or k <= 256)
    direct = in_place and n % (2 * vw) == 0
    # and where N is not a multiple of the panel (a 1x1 conv at 28x28, 13x13, 55x55), as one run whose last
    # panel is cut (2 threads, 1x1 convs against the pack: 256->48 at 13x13 48 -> 28 us, 48->192 at 13x13 27 -> 23,
    # 96->16 at 55x55 62 -> 49, 64->256 at 27x27 154 -> 135, 128->512 at 28x28 564 -> 527, 512->128 975 -> 936)
    rows_nr = (vw if n <= vw else 2 * vw) if in_place and not direct else contraction.rows_nr(plan, vw)
    mc = _row_block(m, direct)
    # B not packed once: 512 columns a tile (2 threads, one process, interleaved, against 256: MobileNetV3 7.18 ->
    # 6.76 ms, DB text detector 20.2 -> 18.9, YOLO-style 70.0 -> 66.9, ResNet-50 and SqueezeNet at par; the 1x1
    # convs 16 -> 16 at 112x112 101 -> 63 us hot, 64 -> 256 at 56x56 815 -> 645)
    nc = 128 if plan.b_const else 512
    # enough MC x NC tiles to keep every thread busy
    while nb * -(-m // mc) * -(-n // nc) < 4 * threads and (nc > 64 or mc > 24):
        if nc > 64:
            nc //= 2
        else:
            mc = max(c for c in (24, 48, 72) if c < mc)
    # A rows read in place with unit stride measured faster than packed panels on every shape tried
    # (convs 1.0-1.45x, 1024^3 1.1x, 128x768x3072 1.45x): the MR row streams prefetch well
    direct_a = plan.a_direct or halo_default(plan)
    # N within one vector (a few rows with swapped roles): a 12 x VW tile wastes half the lanes of 6 x 2VW
    mr, nr = (12, vw) if n <= vw and not direct else (TILE[0], TILE[1] * vw)
    # a conv's input read in place where the output rows take whole panels with little padding
    # (contraction._rows_panel; with 8-row tiles, over packed ones: 64->16 at 160x160 1.35x, 32->32 at
    # 112x112 1.08x, 64->64 at 56x56 1.03x, 36->20 at 57x57 par; 48->48 at 40x40, rows of 40 in panels of 48
    # or 64, 0.95x)
    kc = 256
    if rows_nr:
        nr = rows_nr
        # panels of one vector over whole-vector rows (``contraction.rows_of_vectors``): blocks of four panels
        # and K in one step where it fits (2 threads: 3x3 32 -> 32 at 112x112 1.150 -> 1.112 ms, 48 -> 48 at 80x80
        # 1.288 -> 1.226, 64 -> 64 at 112x112 4.25 -> 4.17); of eight on 8-lane vectors, the fewest columns the
        # space's NC takes
        if nr == vw and whole_vector_rows(plan):
            nc, kc = max(4 * vw, 64), 512
    # 3-vector tiles where they pad N less than 2-vector ones (a conv's 48 output channels in one panel of 48, not
    # two of 32 with a quarter of the multiplies on padding: 2 threads, 3x3 48->48 at 80x80 0.70 -> 0.54 ms, at
    # 40x40 0.19 -> 0.15); where the registers hold 8 rows of them (AVX-512)
    elif not direct and nr == TILE[1] * vw and fits(8, 3 * vw, vw) and padded(n, 3 * vw) < padded(n, nr):
        nr = 3 * vw
    # 1-vector tiles of 8 rows where they pad N at least 5% less than 2-vector ones, B packed on every call
    # (SqueezeNet's classifier, a 1x1 conv 512 -> 1000 at 13x13: 169 pixels in 176 columns, not 192; 2 threads, hot,
    # one process, 952 -> 879 us; SqueezeNet 1.1 1.01-1.03x, paired): 8 accumulators keep busy an FMA unit that
    # retires one 512-bit multiply-add a cycle, as whole-vector rows' panels do (``contraction.rows_of_vectors``)
    elif not direct and not plan.b_const and nr == TILE[1] * vw and _one_vector(n, vw):
        mr, nr = 8, vw
    # 8-row tiles where they pad M no more than 6-row ones and fit the vector registers. 1 thread, convs
    # packed: 3x3 64->64 at 56x56 1.07x, 32->32 at 112x112 1.09x, 48->48 at 40x40 1.07x; 2 threads: 1x1
    # 64->256 at 56x56 with B in place 0.55 -> 0.51 ms, packed 1x1 convs at 28x28 and 14x14 1.02-1.08x,
    # 3x3 256->256 at 14x14 1.02x, 256x768x768 and 384x1024x512 matmuls 1.05x and 1.01x
    # 7-row tiles where they pad M less than both: a 7x7 map's 49 pixels in 7 panels, not 9 of 6 (2 threads,
    # 1x1 convs at 7x7: 2048->512 0.29 -> 0.25 ms, 512->2048 0.27 -> 0.24; 1024->256 at 14x14 0.25 -> 0.24)
    if mr == TILE[0]:
        mr = _fewest_rows(m, (8, TILE[0], 7), nr, vw)
    # pixels of a conv's padded input copy (``halo.py``): MR neighbouring values broadcast per K row
    if halo_default(plan) and plan.a_halo is not None:
        tiles = whole_tiles if in_place_default(plan) else panels
        mr = _halo_rows(plan.a_halo, nr, vw, tiles) or mr
        wide = tiles(plan.a_halo, mr).wide
        mc = _halo_row_block(mc, nb * -(-n // nc), wide, threads)
        mc, nc = _weight_once(plan, wide, nr, mc, nc, threads)
    # up to four rows (a classifier, a squeeze-excitation's 1x1 convs at batch 1, against a weight packed once):
    # tiles of about those rows, as wide as the registers allow where B is packed (2 threads, 1x1280 times
    # 1280x1000: 6 x 2 vectors 0.19 ms, 1 x 1 vector 0.11, 1 x 4 vectors 0.089; onnxruntime 0.073)
    if m <= 4:
        mr = m if m <= 2 else 4
        if not (direct or rows_nr):
            nr = max(v * vw for v in (1, 2, 3, 4) if fits(mr, v * vw, vw))
    # one row against a batch of B blocks (a depthwise conv: M = 1, K = its taps) reuses nothing a GEMM
    # tile could keep: loops that sum the taps over a block of output columns
    # a depthwise conv: every tap's weight in a register, each input row read in place (stencil.py)
    impl: Literal["generated", "loops", "stencil"] = "stencil" if stencil else "loops" if m == 1 and nb > 1 \
        else "generated"
    return GemmSchedule(impl=impl, mr=mr, nr=nr, mc=mc, nc=nc, kc=kc, order="nm", pack_b=not (direct or rows_nr),
                        pack_a=not direct_a, lanes=LANES, threads=threads)


def _one_vector(n: int, vw: int) -> bool:
    """Whether N columns in panels of one vector are at least 5% fewer than in panels of two."""
    return fits(8, vw, vw) and padded(n, vw) <= 0.95 * padded(n, 2 * vw)


def _halo_rows(h: Halo, nr: int, vw: int, tiles: Callable[[Halo, int], Halo] = panels) -> int:
    """The MR of a tile over a conv's padded copy (0: none fits): of ``halo.tile_rows`` that the registers hold,
    the one that computes the conv's rows at the least cost, each output row in whole tiles where that is fewer
    than a wide row (``halo.panels``; over the input in place, always: ``halo.whole_tiles``): a tile's rows times
    1 + ROW_OVERHEAD / MR, the K loop's own work shared by the tile's rows."""
    rows = {r: padded(tiles(h, r).wide, r) * (1 + ROW_OVERHEAD / r) for r in tile_rows(h.width) if fits(r, nr, vw)}
    return min(rows, key=rows.__getitem__) if rows else 0


def _fewest_rows(m: int, choices: tuple[int, ...], nr: int, vw: int) -> int:
    """The MR of ``choices`` (by preference: the first of those that pad M equally) that pads M least and fits."""
    return min((r for r in choices if fits(r, nr, vw)), key=lambda r: padded(m, r))


def _weight_once(plan: Plan, wide: int, nr: int, mc: int, nc: int, threads: int) -> tuple[int, int]:
    """(MC, NC) of a conv over its padded copy whose packed weight outgrows the L2 (WEIGHT_RESIDENT bytes) and whose
    ``wide`` GEMM rows take more than one block of ``mc``: every row in one block and the output channels split
    evenly among the threads, where both are blocks of the space, so that each thread streams its share of the
    weight once per call, not once per block of rows; else ``mc``, ``nc``."""
    nb, _, n, k = plan.sizes
    threads = max(threads, 1)
    share = n // threads
    block = min((c for c in MC_BLOCKS if c >= wide), default=0)
    if (nb > 1 or mc >= wide or k * n * 4 <= WEIGHT_RESIDENT or not block or n % threads or share % nr
            or share not in NC_BLOCKS):
        return mc, nc
    return block, share


def _halo_row_block(mc: int, col_blocks: int, wide: int, threads: int) -> int:
    """The row block of a conv over its padded copy: ``mc``, or a longer one of HALO_ROW_BLOCKS that still makes
    HALO_TILES_PER_THREAD tiles a thread. Each tile pays its transposition and its epilogue's walk over cut output
    rows, which long blocks of a large map's wide rows pay less often. One process, 2 threads, all with the copy, 96
    against 384 rows: 3x3 32 -> 32 at 112x112 1.23 -> 1.17 ms, 16 -> 64 1.29 -> 1.21, ResNet's 7x7 stride-2 stem
    1.30 -> 1.24; 48 -> 48 at 80x80 (192 rows) 1.72 -> 1.70; at 56x56 192 rows ran 3% slower than 96 (32 -> 64),
    and the YOLO-style detector's 3x3 128 -> 128 at 40x40 5% slower."""
    fits = [c for c in HALO_ROW_BLOCKS if col_blocks * -(-wide // c) >= HALO_TILES_PER_THREAD * threads]
    return max([mc, *fits])


def _row_block(m: int, direct: bool) -> int:
    if direct:
        # measured best with B read in place (M = 128: 1.2-1.6x over 72/96); 24 over 48 in 8-row tiles (2 threads,
        # 1x1 convs: 32->64 at 160x160 0.65 -> 0.53 ms, 64->256 at 56x56 0.45 -> 0.42; 128x768x768 par)
        return 24
    # one row block when M fits, else 96: a short last block only costs its own rows, while small
    # blocks reload every B panel per block (M=256, N=196, K=2304: 96 rows 1.9x faster than 24)
    return min((c for c in (24, 48, 72, 96, 144) if c >= m), default=96)


def valid(kernel: Kernel, sched: Schedule, threads: int) -> bool:
    t = typed(kernel, sched, threads)
    if t is None:
        return False
    if isinstance(t, ReductionSchedule) and t.stencil:  # the loops' knobs mean nothing to it
        return _as_default(t, typed_default(kernel, threads), ("impl", "threads"))
    if not isinstance(t, GemmSchedule):
        return not (t.vec and t.unroll > 1)  # unrolled loops are vectorised by gcc itself
    if t.swap and not swappable(kernel):
        return False
    plan = plan_contraction(kernel, bool(t.swap))
    assert plan is not None
    return _gemm_valid(plan, t, threads)


def _as_default(s: CSchedule, default: CSchedule, free: tuple[str, ...]) -> bool:
    """Whether every knob of ``s`` but the ``free`` ones is at its ``default`` value: an implementation that
    reads only those knobs has one point in the others."""
    d = to_json(default)
    return all(v == d.get(k) for k, v in to_json(s).items() if k not in free)


def _gemm_valid(plan: Plan, s: GemmSchedule, threads: int) -> bool:
    if s.impl != "generated":  # the GEMM's knobs mean nothing to a library call or loops, in the rules' orientation
        # a stencil reads ``mr`` too (its blocks' rows), which a schedule of the loops or BLAS taken from a
        # stencil's default keeps (the same code whatever its value: one identity)
        free = ("impl", "threads", "mr", "lanes") if s.impl == "loops" else ("impl", "threads", "mr")
        return not s.swap and s.copy is not False and _as_default(s, _gemm_default(plan, threads),
                                                                  (*free, "swap", "copy"))
    if s.lanes != LANES:  # nor lanes to the GEMM
        return False
    vw = simd_width()
    if s.nr % vw or not fits(s.mr, s.nr, vw):
        return False
    if not s.pack_b and not plan.b_run_stride and (not plan.b_direct or plan.sizes[2] % s.nr):
        return False
    if not s.pack_a and plan.a_halo is not None and not s.pack_b and plan.b_run_stride:
        return False  # A from its padded copy takes B's panels; B by runs has its own micro-kernel
    if s.copy is False and (s.pack_a or plan.a_halo is None or not in_place(plan.a_halo)):
        return False  # the input in place of the copy means nothing to A packed or read otherwise
    return s.pack_a or plan.a_direct or plan.a_halo is not None
