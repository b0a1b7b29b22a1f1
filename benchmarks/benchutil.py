"""Timing helpers shared by the CPU benchmark scripts (run as scripts, so their folder is on sys.path)."""

from __future__ import annotations

import time

import numpy as np


def median_time(fn, reps: int) -> float:
    """The median wall time of ``reps`` calls of ``fn``, in seconds."""
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def spread(xs: list[float]) -> dict:
    """Median, 10th and 90th percentile."""
    a = np.asarray(xs)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90))}
