"""Schedule knobs of C kernels: the space, a default that always works, and validity."""

from __future__ import annotations

import math

from ...target import host_simd_width as simd_width
from ..backend import Knob, Schedule
from ..kernel import Kernel
from .contraction import TILE, plan_contraction
from .emit import LANES, lanes_apply

# operations a thread must have before another joins: waking a sleeping team took 60-120 us per kernel on a
# 2-core VM, where softmaxes and layer norms of 0.6-1.0M operations ran 1.6-2x faster on one thread than on two,
# and an elementwise chain of 4.7M on two
GRAIN = 1 << 20


def _thread_choices(n: int) -> tuple[int, ...]:
    # counts, not 0 for "all": on the knob's scale all threads is the most, and a cost model reading the order
    # took one thread (the fastest for small reductions) for a near neighbour of the default
    return tuple(sorted({1, n} | {2 ** k for k in range(1, 8) if 2 ** k < n}))


def threads_for(kernel: Kernel, threads: int) -> int:
    """One thread per GRAIN operations of the kernel (its flops, and a load or store per element), at most
    ``threads`` (the target's): as a parallel loop with a grain size splits (PyTorch's parallel_for, TVM's),
    since waking a sleeping team costs more than a small kernel's whole run."""
    work = kernel.flops + math.prod(kernel.full)
    return max((c for c in _thread_choices(threads) if c <= max(1, work // GRAIN)), default=1)


def space(kernel: Kernel, threads: int) -> list[Knob]:
    """The knobs of ``kernel`` on a target of ``threads`` threads."""
    knob = Knob("threads", _thread_choices(threads))
    plan = plan_contraction(kernel)
    if plan is not None:
        vw = simd_width()
        floats = kernel.ops[plan.mul].dtype.is_float  # numpy's BLAS multiplies floats only
        return [
            Knob("impl", ("generated", "blas", "loops") if floats else ("generated", "loops")),
            Knob("mr", (4, 6, 8, 12)),
            Knob("nr", tuple(vw * m for m in (1, 2, 3, 4))),
            Knob("mc", (24, 48, 72, 96, 144, 192, 288)),
            Knob("nc", (64, 128, 256, 512, 1024)),
            Knob("kc", (0, 128, 256, 512)),
            Knob("order", ("mn", "nm")),
            Knob("pack_b", (True, False)),
            Knob("pack_a", (True, False)),
            Knob("lanes", (16, 64, 256)),
            knob,
        ]
    knobs = [Knob("vec", (0, 4, 8, 16)), Knob("unroll", (1, 2, 4)), knob]
    if kernel.reduce_axes:
        knobs.append(Knob("rows_per_thread", (0, 1, 4, 16, 64)))
        knobs.append(Knob("stash", (True, False)))
        if lanes_apply(kernel):
            knobs.append(Knob("lanes", (0, 16, 64, 256)))
    else:
        knobs.append(Knob("block", (1024, 4096, 16384, 65536, 1 << 30)))
    return knobs


def default_schedule(kernel: Kernel, threads: int) -> Schedule:
    """A schedule of ``kernel`` that always works, for a target of ``threads`` threads."""
    plan = plan_contraction(kernel)
    if plan is not None:
        vw = simd_width()
        nb, m, n, _ = plan.sizes
        # few rows of A against a B packed on every call: packing costs more than reading B in place. A weight
        # is packed once, and its panels then stream contiguously: inside BERT-base, 768x768 and 768x3072 ran
        # 17% faster than with the weight read in place, 3072x768 at par
        direct = not plan.b_const and plan.b_direct and n % (2 * vw) == 0 and m <= 128
        if direct:
            mc = 48 if m > 24 else 24  # measured best with B read in place (M = 128: 1.2-1.6x over 72/96)
        else:
            # one row block when M fits, else 96: a short last block only costs its own rows, while small
            # blocks reload every B panel per block (M=256, N=196, K=2304: 96 rows 1.9x faster than 24)
            mc = min((c for c in (24, 48, 72, 96, 144) if c >= m), default=96)
        nc = 128 if plan.b_const else 256
        # enough MC x NC tiles to keep every thread busy
        while nb * -(-m // mc) * -(-n // nc) < 4 * threads and (nc > 64 or mc > 24):
            if nc > 64:
                nc //= 2
            else:
                mc = max(c for c in (24, 48, 72) if c < mc)
        # A rows read in place with unit stride measured faster than packed panels on every shape tried
        # (convs 1.0-1.45x, 1024^3 1.1x, 128x768x3072 1.45x): the MR row streams prefetch well
        direct_a = plan.a_direct
        # N within one vector (a few rows with swapped roles): a 12 x VW tile wastes half the lanes of 6 x 2VW
        mr, nr = (12, vw) if n <= vw and not direct else (TILE[0], TILE[1] * vw)
        # one row against a batch of B blocks (a depthwise conv: M = 1, K = its taps) reuses nothing a GEMM
        # tile could keep: loops that sum the taps over a block of output columns
        impl = "loops" if m == 1 and nb > 1 else "generated"
        return {"impl": impl, "mr": mr, "nr": nr, "mc": mc, "nc": nc, "kc": 256, "order": "nm",
                "pack_b": not direct, "pack_a": not direct_a, "lanes": LANES, "threads": threads}
    if kernel.reduce_axes:
        s = {"vec": 0, "unroll": 1, "threads": threads_for(kernel, threads), "rows_per_thread": 0, "stash": True}
        if lanes_apply(kernel):
            s["lanes"] = LANES
        return s
    return {"vec": 0, "unroll": 1, "threads": threads_for(kernel, threads), "block": 16384}


def valid(kernel: Kernel, sched: Schedule, threads: int) -> bool:
    knobs = {k.name: k for k in space(kernel, threads)}
    for name, value in sched.items():
        if name == "threads":  # any count runs (0: the default count): a schedule made on a machine with other cores
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return False
        elif name not in knobs or value not in knobs[name].choices:
            return False
    if set(sched) != set(knobs):
        return False
    plan = plan_contraction(kernel)
    if plan is None:
        return not (sched["vec"] and sched["unroll"] > 1)  # unrolled loops are vectorised by gcc itself
    if sched["impl"] != "generated":  # the GEMM's knobs mean nothing to a library call or loops
        d = default_schedule(kernel, threads)
        free = ("impl", "threads", "lanes") if sched["impl"] == "loops" else ("impl", "threads")
        return all(sched[k] == d[k] for k in d if k not in free)
    if sched["lanes"] != LANES:  # nor lanes to the GEMM
        return False
    vw = simd_width()
    regs = 32 if vw == 16 else 16
    mr, nr = sched["mr"], sched["nr"]
    if nr % vw or mr * (nr // vw) + nr // vw + 1 > regs:
        return False
    if sched["mc"] % mr or sched["nc"] % nr:
        return False
    if not sched["pack_b"] and (not plan.b_direct or plan.sizes[2] % nr):
        return False
    return sched["pack_a"] or plan.a_direct
