"""Helpers shared by the CPU benchmark scripts (run as scripts, so their folder is on sys.path).

numpy is imported lazily: ``blas_threads_from_argv`` must run before it loads.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable

# A cache line's round trip between two threads on the first two CPUs this process may run on: 50-90 ns where they
# share a die (and its L3), 330-360 across two, where a host puts a VM's two vCPUs now on one die, now on two, a few
# seconds each (2 vCPUs of an AMD EPYC: two dies about a tenth to a quarter of the rounds; per layer both runtimes
# slower there, by different amounts: an atrous pyramid's conv split by taps 1.10x onnxruntime on one die, 0.85x on
# two). Rounds are tagged with it, so a ratio can be read per placement.
TWO_DIES_NS = 200
_PROBE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
static _Atomic int flag;
static int rounds, cpus[2];
static void pin(int c) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static void *pong(void *a) {
    (void)a; pin(cpus[1]);
    for (int i = 0; i < rounds; i++) { while (atomic_load(&flag) != 1) ; atomic_store(&flag, 0); }
    return 0;
}
static void *ping(void *out) {
    pthread_t t; pin(cpus[0]); atomic_store(&flag, 0);
    if (pthread_create(&t, 0, pong, 0)) { *(double *)out = -1; return 0; }
    struct timespec a = {0}, b = {0};
    for (int i = 0; i < rounds; i++) {
        if (i == rounds / 2) clock_gettime(CLOCK_MONOTONIC, &a);  /* the first half wakes and places the threads */
        atomic_store(&flag, 1); while (atomic_load(&flag) != 0) ;
    }
    clock_gettime(CLOCK_MONOTONIC, &b); pthread_join(t, 0);
    *(double *)out = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (rounds - rounds / 2);
    return 0;
}
/* a kernel's signature (``codegen.c.build``): b[0] the round trip in ns (-1: no threads), b[1] the two CPUs and
   the round trips to time */
int lum_kernel(void **b, int nt) {
    (void)nt; const int *arg = (const int *)b[1]; pthread_t t;
    *(double *)b[0] = -1; cpus[0] = arg[0]; cpus[1] = arg[1]; rounds = arg[2];
    if (!pthread_create(&t, 0, ping, b[0])) pthread_join(t, 0);
    return 0;
}
"""


def blas_threads_from_argv(*names: str) -> None:
    """Set the environment variables ``names`` (unless set) to the ``--threads N`` of the command line: numpy's
    BLAS reads its thread count when numpy loads."""
    t = next((a.split("=", 1)[1] if "=" in a else sys.argv[i + 2] for i, a in enumerate(sys.argv[1:])
              if a.startswith("--threads")), "0")
    if t != "0":
        for name in names:
            os.environ.setdefault(name, t)


def median_time(fn, reps: int) -> float:
    """The median wall time of ``reps`` calls of ``fn``, in seconds."""
    import numpy as np

    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def spread(xs: list[float]) -> dict:
    """Median, 10th and 90th percentile (as ``luminal bench`` summarises its samples)."""
    from luminal.cli.bench_stats import summarize

    s = summarize(xs)
    return {"median": s.median_s, "p10": s.p10_s, "p90": s.p90_s}


def placement_probe() -> Callable[[], str | None] | None:
    """A function naming where the first two CPUs of this process lie now: "one die" or "two dies"
    (``TWO_DIES_NS``), None where its threads could not start; None with fewer than two CPUs, or no C compiler to
    build the probe with."""
    from luminal.codegen.c import build

    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2 or build.toolchain() is None:
        return None
    (fn,) = build.build([_PROBE])
    ns = ctypes.c_double()
    arg = (ctypes.c_int * 3)(*cpus, 6000)
    bufs = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p), ctypes.cast(arg, ctypes.c_void_p))

    def probe() -> str | None:
        fn(bufs, 1)
        return None if ns.value < 0 else "two dies" if ns.value > TWO_DIES_NS else "one die"

    return probe


def timed_rounds(fns: list[Callable[[], object]], rounds: int, reps: int,
                 probe: Callable[[], str | None] | None) -> tuple[list[list[float]], list[str | None]]:
    """Per function the median seconds of ``reps`` calls in each of ``rounds`` interleaved rounds, and each round's
    placement (the probe's before and after it where they agree, else None)."""
    times: list[list[float]] = [[] for _ in fns]
    tags: list[str | None] = []
    for _ in range(rounds):
        before = probe() if probe else None
        for ts, fn in zip(times, fns):
            ts.append(median_time(fn, reps))
        after = probe() if probe else None
        tags.append(before if before == after else None)
    return times, tags


def placement_note(split: dict) -> str:
    """``by_placement``'s split as a few words for a result line ("" where every round was on one die)."""
    if not split or set(split) == {"one die"}:
        return ""
    return "  " + ", ".join(f"{tag}: {v['rounds']} rounds {v['speedup']:.2f}x" for tag, v in split.items())


def by_placement(tags: list[str | None], ours: list[float], theirs: list[float]) -> dict:
    """Per placement the rounds tagged so: their count and the median of their own ratios theirs / ours."""
    from luminal.cli.bench_stats import paired_ratio

    out = {}
    for tag in sorted({t for t in tags if t}):
        idx = [i for i, t in enumerate(tags) if t == tag]
        out[tag] = {"rounds": len(idx), "speedup": paired_ratio([theirs[i] for i in idx], [ours[i] for i in idx])}
    return out
