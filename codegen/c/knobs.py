"""The schedule knobs of C kernels, declared once per kind of kernel: a GEMM (the contractions the C GEMM
reads), a reduction, an elementwise loop. ``schedule.py`` derives the space, defaults and validity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..kernel import Kernel
from ..knobs import KnobValue, knob
from .contraction import in_place_halo, plan_contraction, swappable
from .emit import lanes_apply
from .halo import tile_rows
from .stencil import BLOCK_ROWS, plan_stencil, separable, unrolled


@dataclass(frozen=True)
class Ctx:
    """What the knobs' choices depend on besides the kernel."""

    kernel: Kernel
    vw: int  # float32 lanes of the target's vector unit
    threads: tuple[int, ...]  # the thread counts the target offers


def _knob(choices: Callable[[Ctx], tuple[KnobValue, ...]], conditional: bool = False,
          accepts: Callable[[KnobValue], bool] | None = None, optional: bool = False) -> Any:
    return knob(choices, conditional=conditional, accepts=accepts, optional=optional)


def _any_count(v: KnobValue) -> bool:
    # any count runs (0: the default count): a schedule made on a machine with other cores
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _impls(c: Ctx) -> tuple[str, ...]:
    plan = plan_contraction(c.kernel)
    floats = plan is not None and c.kernel.ops[plan.mul].dtype.is_float  # numpy's BLAS multiplies floats only
    stencil = ("stencil",) if plan_stencil(c.kernel) is not None else ()
    return ("generated", "blas", "loops", *stencil) if floats else ("generated", "loops")


def _mrs(c: Ctx) -> tuple[int, ...]:
    # one or two rows (a matrix-vector product against a weight packed once): a tile of more rows would spend
    # its multiplies on rows that do not exist
    plans = [p for p in (plan_contraction(c.kernel), plan_contraction(c.kernel, True)) if p is not None]
    base = (1, 2, 4, 6, 7, 8, 10, 12) if any(p.sizes[1] <= 2 for p in plans) else (4, 6, 7, 8, 10, 12)
    # and a conv's output row over its padded copy, in one tile where it is a little longer than those
    rows = {r for p in plans if p.a_halo for r in tile_rows(p.a_halo.width)} - set(base)
    # and a stencil's blocks of output rows (``stencil.block``)
    if plan_stencil(c.kernel) is not None:
        rows |= set(range(2, BLOCK_ROWS + 1)) - set(base)
    return (*base, *sorted(rows))


MC_BLOCKS = (24, 48, 72, 96, 144, 192, 288, 384)  # a GEMM tile's rows (MC)
NC_BLOCKS = (64, 96, 128, 192, 256, 384, 512, 1024)  # and columns (NC)


@dataclass(frozen=True)
class GemmSchedule:
    """A contraction: packed panels and an MR x NR register tile (``generated``), numpy's BLAS, the lanes
    reduction's loops, or a stencil over a few taps (``stencil.py``: a depthwise conv)."""

    impl: Literal["generated", "blas", "loops", "stencil"] = _knob(_impls)
    mr: int = _knob(_mrs)
    nr: int = _knob(lambda c: tuple(c.vw * m for m in (1, 2, 3, 4)))
    mc: int = _knob(lambda c: MC_BLOCKS)
    nc: int = _knob(lambda c: NC_BLOCKS)
    kc: int = _knob(lambda c: (0, 64, 128, 256, 512))
    order: Literal["mn", "nm"] = _knob(lambda c: ("mn", "nm"))
    pack_b: bool = _knob(lambda c: (True, False))
    pack_a: bool = _knob(lambda c: (True, False))
    lanes: int = _knob(lambda c: (16, 64, 256))
    threads: int = _knob(lambda c: c.threads, accepts=_any_count)
    # a conv: A and B's roles exchanged (its output pixels the rows where they were the columns, or back), the
    # orientation the default's rules did not take; left out (a schedule stored before the knob): theirs
    swap: bool | None = _knob(lambda c: (False, True) if swappable(c.kernel) else (), conditional=True,
                              optional=True)
    # a conv over its padded input: the copy (True), or the input read where it lies, a border tile's rows that
    # meet the padding copied between zeros (False); left out (a schedule stored before the knob): the copy
    copy: bool | None = _knob(lambda c: (True, False) if in_place_halo(c.kernel) else (), conditional=True,
                              optional=True)

    def loops(self) -> ReductionSchedule:
        """The schedule the lanes reduction's loops run ``impl == "loops"`` with: this block of output
        columns and thread count, every other loop knob as it is by default."""
        return ReductionSchedule(vec=0, unroll=1, threads=self.threads, rows_per_thread=0, stash=True,
                                 lanes=self.lanes)


@dataclass(frozen=True)
class _Loops:
    """The knobs every loop kernel (a reduction, an elementwise loop) has, first in its schedule."""

    vec: int = _knob(lambda c: (0, 4, 8, 16))
    unroll: int = _knob(lambda c: (1, 2, 4))
    threads: int = _knob(lambda c: c.threads, accepts=_any_count)


def _pool_impls(c: Ctx) -> tuple[KnobValue, ...]:
    if plan_stencil(c.kernel) is None:
        return ()
    return ("loops", *(("stencil",) if unrolled(c.kernel) else ()), *(("separable",) if separable(c.kernel) else ()))


@dataclass(frozen=True)
class ReductionSchedule(_Loops):
    rows_per_thread: int = _knob(lambda c: (0, 1, 4, 16, 64))
    stash: bool = _knob(lambda c: (True, False))
    # reductions that vectorise across their innermost kept dim: its block of output columns
    lanes: int | None = _knob(lambda c: (0, 16, 64, 256) if lanes_apply(c.kernel) else (), conditional=True)
    # reductions over a few taps of one input (a pool): the loops above, or a stencil (``stencil.py``) that
    # reads only ``threads``, its taps one by one or (a pool whose windows overlap) separable; left out (a
    # schedule stored before the knob): the loops
    impl: Literal["loops", "stencil", "separable"] | None = _knob(_pool_impls, conditional=True, optional=True)

    @property
    def stencil(self) -> bool:
        """Whether the pool is read as a stencil (either form), which reads no knob but ``threads``."""
        return self.impl in ("stencil", "separable")


@dataclass(frozen=True)
class ElementwiseSchedule(_Loops):
    block: int = _knob(lambda c: (1024, 4096, 16384, 65536, 1 << 30))


CSchedule = GemmSchedule | ReductionSchedule | ElementwiseSchedule
LoopSchedule = ReductionSchedule | ElementwiseSchedule  # what the loop emitters read


def schedule_type(kernel: Kernel) -> type[CSchedule]:
    if plan_contraction(kernel) is not None:
        return GemmSchedule
    return ReductionSchedule if kernel.reduce_axes else ElementwiseSchedule
