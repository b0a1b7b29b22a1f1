"""The paired test a challenger must pass to replace the incumbent (the cache summarises samples itself)."""

from __future__ import annotations

import math

import numpy as np

MIN_GAIN = 0.02  # a challenger must be at least this much faster


def paired_ratios(challenger_ns: list[int], incumbent_ns: list[int]) -> np.ndarray:
    """Per-round time ratios of interleaved runs (round r of both ran back to back)."""
    n = min(len(challenger_ns), len(incumbent_ns))
    c = np.asarray(challenger_ns[:n], dtype=np.float64)
    i = np.maximum(np.asarray(incumbent_ns[:n], dtype=np.float64), 1.0)
    return c / i


def sign_test_p(wins: int, n: int) -> float:
    """One-sided sign test: the chance of at least ``wins`` wins in ``n`` fair coin flips."""
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def beats(challenger_ns: list[int], incumbent_ns: list[int], min_gain: float = MIN_GAIN, alpha: float = 0.05) -> bool:
    """Faster beyond the noise: over interleaved rounds the median time ratio is at least ``min_gain``
    below 1, and the challenger wins significantly more rounds than chance (sign test at ``alpha``),
    so a few spikes from a busy machine can neither fake nor hide a win."""
    r = paired_ratios(challenger_ns, incumbent_ns)
    if len(r) < 5:
        return False
    wins = int(np.count_nonzero(r < 1.0))
    return float(np.median(r)) <= 1.0 - min_gain and sign_test_p(wins, len(r)) < alpha
