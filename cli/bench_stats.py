"""Timing statistics for `luminal bench`: interleaved rounds, percentiles, bootstrap confidence intervals."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# resampled values held in memory at once by the bootstrap (float64 elements)
_BOOTSTRAP_CHUNK = 2_000_000


@dataclass(frozen=True)
class Summary:
    runs: int
    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    min_s: float
    throughput_per_s: float  # inferences per second at the median latency


def summarize(samples: Sequence[float]) -> Summary:
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    p10, med, p90 = np.percentile(x, [10, 50, 90])
    return Summary(runs=int(x.size), median_s=float(med), p10_s=float(p10), p90_s=float(p90),
                   mean_s=float(x.mean()), min_s=float(x.min()),
                   throughput_per_s=float(1.0 / med) if med > 0 else float("inf"))


@dataclass(frozen=True)
class Interval:
    """``estimate`` with a two-sided ``confidence`` interval [low, high]."""

    estimate: float
    low: float
    high: float
    confidence: float


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """The median of the rounds' own ratios numerator[i] / denominator[i] (sample i of both from round i)."""
    return float(np.median(np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)))


def bootstrap_ratio(numerator: Sequence[float], denominator: Sequence[float], *, paired: bool = False,
                    n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> Interval:
    """The ratio numerator / denominator, with a percentile bootstrap interval: median(numerator) /
    median(denominator), or where ``paired`` the median of the rounds' own ratios.

    ``paired``: the samples were taken in the same interleaved rounds (sample i of both in round i), so rounds
    are resampled together and drift that hit both in a round cancels out. A host that switches between a fast
    and a slow phase puts each round in one of them, where the ratio of medians could take one runtime's median
    from each phase.
    """
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("no samples")
    if paired and a.size != b.size:
        raise ValueError("paired samples must have the same length")
    rounds = a / b if paired else None
    estimate = paired_ratio(numerator, denominator) if paired else float(np.median(a) / np.median(b))
    rng = np.random.default_rng(seed)
    ratios = np.empty(n_boot)
    rows = max(1, _BOOTSTRAP_CHUNK // max(a.size, b.size))
    for start in range(0, n_boot, rows):
        k = min(rows, n_boot - start)
        ia = rng.integers(0, a.size, (k, a.size))
        if rounds is not None:
            ratios[start:start + k] = np.median(rounds[ia], axis=1)
        else:
            ib = rng.integers(0, b.size, (k, b.size))
            ratios[start:start + k] = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high), confidence)


def measure_interleaved(runners: Mapping[str, Callable[[], object]], *, warmup_s: float = 1.0,
                        runs: int | None = None, time_s: float | None = None, min_runs: int = 5,
                        max_runs: int = 20_000, seed: int = 0,
                        clock: Callable[[], int] = time.perf_counter_ns,
                        progress: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of every runner, measured in rounds: each round calls every runner once, in a
    seeded random order, so slow drift (thermal, other load) hits all of them alike. Sample i of every
    runner comes from round i.

    Warm-up runs whole rounds until ``warmup_s`` has passed (at least one round). Then ``runs`` rounds,
    or rounds until ``time_s`` seconds of measuring have passed (at least ``min_runs``, at most
    ``max_runs``).
    """
    if not runners:
        raise ValueError("nothing to measure")
    if runs is None and time_s is None:
        raise ValueError("give runs or time_s")
    names = list(runners)
    rng = np.random.default_rng(seed)
    start = clock()
    while True:
        for name in names:
            runners[name]()
        if clock() - start >= warmup_s * 1e9:
            break
    samples: dict[str, list[float]] = {name: [] for name in names}
    start = clock()
    done = 0
    while True:
        if runs is not None:
            if done >= runs:
                break
        elif done >= max_runs or (done >= min_runs and time_s is not None and clock() - start >= time_s * 1e9):
            break
        for k in rng.permutation(len(names)):
            name = names[k]
            t0 = clock()
            runners[name]()
            samples[name].append((clock() - t0) / 1e9)
        done += 1
        if progress is not None:
            progress(done)
    return samples
