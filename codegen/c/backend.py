"""The ``cpu`` backend: C kernels compiled by the system compiler, run through ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import math
import time
import weakref
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ...target import PAGE_BYTES, Target, detect_target
from ..backend import Knob, Schedule, register_backend
from ..kernel import Kernel
from . import build, schedule
from .blas import BlasKernel
from .contraction import emit_contraction, packed_b, plan_contraction
from .emit import emit_elementwise, emit_reduction, emit_reduction_lanes, lanes_apply
from .knobs import CSchedule, GemmSchedule, ReductionSchedule
from .normalize import normalize
from .stencil import emit_stencil, packed_weight

ALIGN = 64


def address(array: np.ndarray) -> int:
    """Where ``array``'s data starts: ``array.ctypes.data``, which costs 2 us a call, taken from a writable
    contiguous array's buffer in a quarter of that (a run binds and unbinds its inputs and outputs by address)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]  # numpy exports its buffer
    except (TypeError, ValueError, BufferError):  # read-only, empty or not contiguous
        return array.ctypes.data


def aligned_empty(shape: tuple[int, ...], dtype, align: int = ALIGN, offset: int = 0) -> np.ndarray:
    """An uninitialised array whose data starts ``offset`` bytes past a multiple of ``align``."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    if n == 0:
        return np.empty(shape, dtype)
    raw = np.empty(n + 2 * align, np.uint8)
    start = (-address(raw)) % align + offset % align
    return raw[start:start + n].view(dtype).reshape(shape)


# panels of constant B operands: id(B) -> {(kernel signature, NR): (panels, filled flag)}, dropped with B. The
# layout depends on how the kernel reads B and on NR, so every schedule of a kernel with that NR shares them (NR 0:
# a stencil's copy of its weight, ``stencil.packed_weight``).
_PANELS: dict[int, dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]] = {}


def _panels(b: np.ndarray, key: tuple[str, int], floats: int) -> list[np.ndarray]:
    per = _PANELS.get(id(b))
    if per is None:
        per = _PANELS[id(b)] = {}
        weakref.finalize(b, _PANELS.pop, id(b), None)
    if key not in per:
        per[key] = (aligned_empty((floats,), np.float32), np.zeros(1, np.int32))
    return list(per[key])


class CKernel:
    """A compiled kernel: call with buffers ordered as kernel.inputs then kernel outputs. ``shifts``: the bytes
    from each buffer's start to where the kernel reads it from (its window, ``codegen.window``). A kernel that
    packs a constant B once (``packed``: B's input index, the panels' size and layout) gets the panels and their
    filled flag as two more buffers, kept for as long as that B lives."""

    def __init__(self, fn, nbuf: int, threads: int, packed: tuple[int, int, tuple[str, int]] | None = None,
                 shifts: Sequence[int] = ()):
        self._fn = fn
        self._arr = ctypes.c_void_p * (nbuf + (2 if packed else 0))
        self.threads = threads
        address = ctypes.cast(fn, ctypes.c_void_p).value
        assert address is not None
        self.address: int = address
        self._last: tuple[list, Any] | None = None  # weak references to the last buffers, their pointer array
        self._packed = packed
        self.shifts = tuple(shifts) + (0,) * (nbuf - len(shifts))

    def pointers(self, buffers: Sequence[Any]):
        extra = []
        if self._packed:
            bi, floats, key = self._packed
            extra = _panels(buffers[bi], key, floats)
        return self._arr(*[b.ctypes.data + s for b, s in zip(buffers, self.shifts)],
                         *[b.ctypes.data for b in extra])

    def __call__(self, buffers: Sequence[Any]) -> None:
        last = self._last
        if last is None or len(last[0]) != len(buffers) or any(r() is not b for r, b in zip(last[0], buffers)):
            # weak: a search keeps hundreds of kernels, each must not pin its last (large) buffers; a live
            # buffer is the same object with the same address, a freed one no longer matches
            last = self._last = ([weakref.ref(b) for b in buffers], self.pointers(buffers))
        if self._fn(last[1], self.threads):
            raise MemoryError("a C kernel could not allocate its workspace")


# runs a sequence of kernels bound to fixed buffers in one call: b = {count, kernels, arguments, their threads, the
# most of those, where to write the clock before each kernel and after the last (CLOCK_MONOTONIC nanoseconds,
# perf_counter_ns's clock; null: not timed)}; built once per toolchain: an artifact ships its library with the
# kernels'. First it keeps the OpenMP team's workers off the caller's CPU (``lum_place``): on a virtual machine whose
# idle vCPUs halt, a worker woken after an idle gap was placed on the caller's own vCPU, where the two took turns,
# the caller spinning at each barrier while the worker waited, until the scheduler's load balancer moved it back
# (MobileNetV3, 2 threads, runs 50 ms apart: median 8.6-14.9 ms, p90 21-39, two migrations and up to 49 context
# switches a slow run; back to back 6.5-6.7; with the workers kept off the caller's CPU 7.3-7.7, p90 7.5-8.0). The
# caller's own affinity is never changed: only the team's other threads, whose ids the first run learns, are set to
# the caller's CPUs but the one it runs on, again whenever it runs on another.
SEQUENCE_SOURCE = """
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>
typedef int (*lum_fn_t)(void **, int);
static int64_t lum_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
#if defined(__linux__) && defined(_OPENMP)
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LUM_TEAM_MAX 256
/* per calling thread, as OpenMP keeps a team per calling thread */
static _Thread_local pid_t lum_tids[LUM_TEAM_MAX];
static _Thread_local int lum_asked = 0, lum_team = 0, lum_home = -1;
static void lum_place(int nt) {
    if (nt < 2)
        return;
    const int here = sched_getcpu();
    if (here < 0)
        return;
    if (nt > lum_asked) {  /* learn the team's thread ids */
        pid_t got[LUM_TEAM_MAX] = {0};
        int size = 0;
        #pragma omp parallel num_threads(nt)
        {
            const int t = omp_get_thread_num();
            if (t < LUM_TEAM_MAX) got[t] = (pid_t)syscall(SYS_gettid);
            if (t == 0) size = omp_get_num_threads();
        }
        lum_asked = nt;
        lum_team = size < LUM_TEAM_MAX ? size : LUM_TEAM_MAX;
        for (int t = 0; t < lum_team; t++) lum_tids[t] = got[t];
        lum_home = -1;
    }
    if (here == lum_home)
        return;
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) || !CPU_ISSET(here, &cpus) || CPU_COUNT(&cpus) < 2)
        return;
    CPU_CLR(here, &cpus);
    const pid_t pid = getpid();
    /* only threads of this process (none after a fork): one gone, the team is learnt again next run */
    for (int t = 1; t < lum_team; t++)
        if (lum_tids[t] <= 0 || syscall(SYS_tgkill, pid, lum_tids[t], 0)
                || sched_setaffinity(lum_tids[t], sizeof cpus, &cpus))
            lum_asked = lum_team = 0;
    lum_home = here;
}
#else
static void lum_place(int nt) { (void)nt; }
#endif
int lum_kernel(void **b, int nt) {
    (void)nt;
    const int64_t n = (int64_t)(intptr_t)b[0];
    const uintptr_t *fns = (const uintptr_t *)b[1];
    void **const *args = (void **const *)b[2];
    const int *nts = (const int *)b[3];
    int64_t *const stamps = (int64_t *)b[5];
    lum_place((int)(intptr_t)b[4]);
    for (int64_t i = 0; i < n; i++) {
        if (stamps) stamps[i] = lum_now();
        if (((lum_fn_t)fns[i])(args[i], nts[i])) return (int)(i + 1);
    }
    if (stamps) stamps[n] = lum_now();
    return 0;
}
"""


@lru_cache(maxsize=4)
def _sequence_fn(tc: build.Toolchain | None = None):
    return build.build([SEQUENCE_SOURCE], tc=tc)[0]


# the sum of n doubles, read by a team of nt threads (``CPUBackend.read_through``)
READ_SOURCE = """
#include <stdint.h>
int lum_kernel(void **b, int nt) {
    const double *x = (const double *)b[0];
    const int64_t n = (int64_t)(intptr_t)b[1];
    double s = 0;
    #pragma omp parallel for num_threads(nt) reduction(+:s) schedule(static)
    for (int64_t i = 0; i < n; i++) s += x[i];
    *(double *)b[2] = s;
    return 0;
}
"""


@lru_cache(maxsize=4)
def _read_fn(tc: build.Toolchain | None = None):
    return build.build([READ_SOURCE], tc=tc)[0]


class Launch:
    """Compiled kernels bound once to fixed buffers: each run of consecutive C kernels is one call into C
    with prebuilt pointer arrays; any other launchable (a BLAS kernel, a wrapper) is called in order."""

    def __init__(self, compiled: Sequence[Any], buffers: Sequence[Sequence[Any]], tc: build.Toolchain | None = None):
        self._tc = tc
        self._run: Any = None  # the sequence runner, looked up at the first call (not per run: its key hashes tc)
        self._steps: list[Any] = []
        self._keep: list[Any] = [list(b) for b in buffers]
        # where each bound buffer (by id: _keep holds them) is an argument: a pointer array's or a step's list's slot
        # (slots, index, bytes past the buffer's start: its window's) per site
        self._sites: dict[int, list[tuple[Any, int, int]]] = {}
        pending: list[tuple[int, Any, int]] = []
        for ck, bufs in zip(compiled, buffers):
            if type(ck) is CKernel:
                pointers = ck.pointers(bufs)
                pending.append((ck.address, pointers, ck.threads))
                self._note(bufs, pointers, ck.shifts)
                continue
            self._flush(pending)
            pending = []
            step = list(bufs)
            self._steps.append((ck, step))
            self._note(bufs, step, (0,) * len(step))
        self._flush(pending)

    def _note(self, buffers: Sequence[Any], slots: Any, shifts: Sequence[int]) -> None:
        for i, (b, s) in enumerate(zip(buffers, shifts)):
            self._sites.setdefault(id(b), []).append((slots, i, s))

    def binder(self, buffer: np.ndarray) -> Callable[[np.ndarray], None]:
        """A function pointing every argument bound to ``buffer`` at another array of its shape and dtype,
        C-contiguous and aligned to its element (generated C reads inputs with unaligned vector loads), until
        the next call; the caller keeps that array alive while launches use it, and binds ``buffer`` back."""
        sites = self._sites.get(id(buffer), [])
        pointers = [(slots, i, shift) for slots, i, shift in sites if not isinstance(slots, list)]
        lists = [(slots, i) for slots, i, _ in sites if isinstance(slots, list)]
        home = address(buffer)

        def bind(array: np.ndarray) -> None:
            at = home if array is buffer else address(array)
            for slots, i, shift in pointers:
                slots[i] = at + shift
            for slots, i in lists:
                slots[i] = array

        return bind

    def _flush(self, pending: list[tuple[int, Any, int]]) -> None:
        if not pending:
            return
        n = len(pending)
        fns = (ctypes.c_void_p * n)(*[p[0] for p in pending])
        args = (ctypes.c_void_p * n)(*[ctypes.addressof(p[1]) for p in pending])
        nts = (ctypes.c_int * n)(*[p[2] for p in pending])
        stamps = (ctypes.c_int64 * (n + 1))()
        head = (ctypes.c_void_p * 6)(n, ctypes.addressof(fns), ctypes.addressof(args), ctypes.addressof(nts),
                                     max(p[2] for p in pending), None)
        self._keep.append((fns, args, nts, [p[1] for p in pending]))
        self._steps.append((None, (head, stamps)))

    def __call__(self) -> None:
        self._launch(False)

    def spans(self) -> list[tuple[int, int]]:
        """Run once, timing each kernel: its (start, duration) in perf_counter nanoseconds, in launch order. The
        clock is read in C between the kernels of a sequence, which run as in an untimed launch (a kernel called
        on its own from Python found the team's threads placed and woken otherwise: ResNet-50's 123 kernels took
        60.2 ms so where the model ran in 53.2)."""
        return self._launch(True)

    def _launch(self, timed: bool) -> list[tuple[int, int]]:
        run = self._run
        if run is None:
            run = self._run = _sequence_fn(self._tc)
        out: list[tuple[int, int]] = []
        for ck, arg in self._steps:
            if ck is not None:
                t0 = time.perf_counter_ns() if timed else 0
                ck(arg)
                if timed:
                    out.append((t0, time.perf_counter_ns() - t0))
                continue
            head, stamps = arg
            if timed:  # the clock's slot is set for this call only: an untimed run stores nothing
                head[5] = ctypes.addressof(stamps)
            failed = run(head, 0)
            if timed:
                head[5] = None
                out += [(stamps[i], stamps[i + 1] - stamps[i]) for i in range(len(stamps) - 1)]
            if failed:
                raise MemoryError("a C kernel could not allocate its workspace")
        return out


def source(kernel: Kernel, sched: Schedule, threads: int) -> str:
    """The C source of ``kernel`` under ``sched`` on a target of ``threads`` threads."""
    kernel = kernel.windowed[0]
    return typed_source(kernel, _typed(kernel, sched, threads), threads)


def _typed(kernel: Kernel, sched: Schedule, threads: int) -> CSchedule:
    t = schedule.typed(kernel, sched, threads, choices=False)
    if t is None:
        raise ValueError(f"not a schedule of this {kernel.form} kernel: {sched}")
    return t


def typed_source(kernel: Kernel, sched: CSchedule, threads: int) -> str:
    if isinstance(sched, GemmSchedule):
        plan = plan_contraction(kernel, bool(sched.swap))
        assert plan is not None
        if sched.impl == "blas":
            return BlasKernel.epilogue_source(kernel, plan, threads)
        if sched.impl == "loops":
            return emit_reduction_lanes(kernel, sched.loops())
        if sched.impl == "stencil":
            return emit_stencil(kernel, sched, schedule.simd_width(), sched.mr)
        return emit_contraction(kernel, sched, schedule.simd_width())
    if isinstance(sched, ReductionSchedule):
        if sched.stencil:
            return emit_stencil(kernel, sched, schedule.simd_width())
        if sched.lanes and lanes_apply(kernel):
            return emit_reduction_lanes(kernel, sched)
        return emit_reduction(kernel, sched)
    return emit_elementwise(kernel, sched, schedule.simd_width())


class CPUBackend:
    """C kernels for ``target`` (detected here where none is given: its threads from the environment)."""

    name = "cpu"

    def __init__(self, target: Target | None = None, prebuilt: build.Toolchain | None = None):
        """``prebuilt``: the toolchain an artifact's kernel libraries were built with, used where no compiler is
        found (its libraries then load without one)."""
        self.target = target or detect_target("cpu")
        self.prebuilt = prebuilt

    def _toolchain(self) -> build.Toolchain | None:
        compiler = self.target.compiler
        return build.toolchain_of(compiler) if compiler is not None else self.prebuilt

    def available(self) -> str | None:
        return None if self._toolchain() is not None else build.missing_message()

    def threads(self) -> int:
        return self.target.threads

    def fork_safe(self) -> bool:
        # the OpenMP threads of a kernel library loaded here are not in a forked child, whose first
        # parallel region (GNU libgomp) would then wait for them forever
        return not build.libraries_loaded()

    # every kernel is emitted, and so scheduled, as it reads its inputs' windows (``codegen.window``)
    def space(self, kernel: Kernel) -> list[Knob]:
        return schedule.space(kernel.windowed[0], self.target.threads)

    def read_through(self, buffer: np.ndarray) -> float:
        """The sum of ``buffer`` (float64, C-contiguous), read by every thread the kernels run on: what a cache
        flush before a timed kernel reads, so that each core's caches are flushed and every thread is awake and
        busy when the kernel starts, as between the kernels of a model."""
        out = np.zeros(1)
        args = (ctypes.c_void_p * 3)(buffer.ctypes.data, buffer.size, out.ctypes.data)
        _read_fn(self._toolchain())(args, self.target.threads)
        return float(out[0])

    def default_schedule(self, kernel: Kernel) -> Schedule:
        return schedule.default_schedule(kernel.windowed[0], self.target.threads)

    def valid(self, kernel: Kernel, sched: Schedule) -> bool:
        return schedule.valid(kernel.windowed[0], sched, self.target.threads)

    def source(self, kernel: Kernel, sched: Schedule) -> str:
        return source(kernel, sched, self.target.threads)

    def in_place(self, kernel: Kernel, sched: Schedule) -> tuple[int, ...]:
        """The inputs ``kernel`` may write its output over under ``sched`` (``Kernel.in_place_inputs``): only the
        generated GEMM's, whose epilogue reads each element of them and then stores the same element, per element
        (a stencil's rows store whole vectors across a row's end, numpy's BLAS writes its product first), where
        the source leaves both unrestricted."""
        k = kernel.windowed[0]
        if not k.in_place_inputs:
            return ()
        t = _typed(k, sched, self.target.threads)
        if not (isinstance(t, GemmSchedule) and t.impl == "generated"):
            return ()
        emitted = set(normalize(k).in_place_inputs)
        return tuple(i for i in k.in_place_inputs if i in emitted)

    def identity(self, kernel: Kernel, sched: Schedule) -> str:
        # knobs past a kernel's sizes (a row block over all rows, a chunk over all columns, threads for a loop
        # that runs on one) leave the source as it is; the thread count matters where a parallel region is
        kernel = kernel.windowed[0]
        t = _typed(kernel, sched, self.target.threads)
        src = typed_source(kernel, t, self.target.threads)
        parallel = "omp parallel" in src or (isinstance(t, GemmSchedule) and t.impl == "blas")
        threads = (t.threads or self.target.threads) if parallel else 1
        return hashlib.sha1(f"{threads}\n{src}".encode()).hexdigest()

    def compile(self, items: Sequence[tuple[Kernel, Schedule]]) -> list[Any]:
        windows = [k.windowed for k, _ in items]
        typed = [(k, _typed(k, s, self.target.threads)) for (k, _), (_, s) in zip(windows, items)]
        fns = build.build([typed_source(k, t, self.target.threads) for k, t in typed], tc=self._toolchain())
        out: list[Any] = []
        for (k, t), (_, starts), fn in zip(typed, windows, fns):
            threads = t.threads or self.target.threads
            gemm = t if isinstance(t, GemmSchedule) else None
            blas = gemm is not None and gemm.impl == "blas"
            shifts = [s * b.dtype.itemsize for s, b in zip(starts, k.inputs)]
            packed = None if gemm is None else packed_weight(k) if gemm.impl == "stencil" else packed_b(k, gemm)
            ck: CKernel | BlasKernel = CKernel(fn, len(k.inputs) + len(k.outputs) + int(blas), threads, packed,
                                               () if blas else shifts)
            if gemm is not None and blas:
                plan = plan_contraction(k, bool(gemm.swap))
                assert plan is not None
                ck = BlasKernel(k, plan, ck, starts)
            out.append(ck)
        return out

    def launcher(self, compiled: Sequence[Any], buffers: Sequence[Sequence[Any]]) -> Launch:
        """The kernels bound to these (numpy) buffers, run in order by one call; buffers must stay put."""
        return Launch(compiled, buffers, self._toolchain())

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        a = np.asarray(array)
        out = aligned_empty(a.shape, a.dtype)
        np.copyto(out, a)
        return out

    def write(self, buffer: np.ndarray, array: np.ndarray) -> None:
        np.copyto(buffer, array, casting="unsafe")

    def to_numpy(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        return aligned_empty(tuple(shape), dtype)

    def empty_at(self, shape: tuple[int, ...], dtype, offset: int) -> np.ndarray:
        """A buffer that starts where a model's arena would put one at byte ``offset``, within a page: where two
        buffers of a kernel lie against each other in the L1's sets decides how fast a memory-bound kernel runs
        (a 1x1 conv 16 -> 64 over 256x256: 1026 us with its input and output at one offset into a page, 837 us
        with the output 2 KiB further on), so the search times each kernel on buffers placed as its model's."""
        return aligned_empty(tuple(shape), dtype, PAGE_BYTES, offset)

    def synchronize(self) -> None:
        return None

    def toolchain(self) -> dict[str, Any]:
        tc = self._toolchain()
        return {"backend": "cpu", **(tc.as_dict() if tc else {}), "simd_width": self.target.simd_width}


register_backend("cpu", CPUBackend)
