"""Helpers shared by the CPU benchmark scripts (run as scripts, so their folder is on sys.path).

numpy is imported lazily: ``blas_threads_from_argv`` must run before it loads.
"""

from __future__ import annotations

import os
import sys
import time


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
