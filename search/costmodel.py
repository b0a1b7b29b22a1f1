"""A small Gaussian-process cost model over schedule points, in numpy.

Points are encoded knob by knob: an ordered knob as its position in [0, 1] (on a log2 scale when
all its choices are positive, so 64 and 128 are as close as 128 and 256), any other knob by its
choice index, compared only for equality. A knob's distance is |u - u'| (ordered) or [c != c']
(other). The kernel mixes two readings of those distances: exp(-scale * sum of distances), where
only points near each other covary, and the mean over knobs of exp(-scale * distance), where points
that share a knob's value covary whatever the other knobs are (a knob's main effect: one fast point
with one thread says the other one-thread points may be fast too). The mix, the scale and the
timing noise are picked by marginal likelihood. The target is log time; the sampler proposes the
point of most expected improvement.

Trials of other kernels with the same knobs (other studies) join as further tasks: points of two
different kernels covary ``rho`` times as much as points of one, and each kernel has its own
unknown offset and spread, so the others say which points are good, not how fast.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

SCALES = (0.5, 1.0, 2.0, 4.0)  # length-scale choices, picked by marginal likelihood
MIXES = (0.0, 0.5, 1.0)  # weight of the per-knob (additive) reading, picked likewise
NOISES = (0.05, 0.15, 0.5)  # variance of timing noise on standardised log time, picked likewise
OFFSET = 1.0  # prior variance of a task's offset


@dataclass(frozen=True)
class Encoding:
    ordered: np.ndarray  # bool per knob

    def distances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per-knob pairwise distances between rows of ``a`` and ``b`` (encoded points): knobs x len(a) x len(b)."""
        d = np.zeros((len(self.ordered), len(a), len(b)))
        for j, ordered in enumerate(self.ordered):
            x, y = a[:, j][:, None], b[:, j][None, :]
            d[j] = np.abs(x - y) if ordered else (x != y)
        return d


def _readings(dist: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The joint and the per-knob (additive) correlations of points ``dist`` apart (Encoding.distances)."""
    return np.exp(-scale * dist.sum(axis=0)), np.exp(-scale * dist).mean(axis=0)


def _spread(y: np.ndarray) -> float:
    sd = float(np.std(y)) if len(y) > 2 else 0.0
    return sd if sd > 1e-9 else 0.0


@dataclass
class Fit:
    enc: Encoding
    x: np.ndarray
    task: np.ndarray  # 0: this kernel, i > 0: the i-th other kernel
    alpha: np.ndarray
    chol: np.ndarray
    scale: float
    mix: float
    rho: float

    def _cov(self, a: np.ndarray, ta: np.ndarray, b: np.ndarray, tb: np.ndarray) -> np.ndarray:
        return self._kernel(self.enc.distances(a, b), ta[:, None] == tb[None, :])

    def _kernel(self, dist: np.ndarray, same: np.ndarray) -> np.ndarray:
        return self._mixed(*_readings(dist, self.scale), same)

    def _mixed(self, joint: np.ndarray, additive: np.ndarray, same: np.ndarray) -> np.ndarray:
        corr = (1 - self.mix) * joint + self.mix * additive
        return corr * np.where(same, 1.0, self.rho) + OFFSET * same

    def expected_improvement(self, cand: np.ndarray) -> np.ndarray:
        """How much each of ``cand`` is expected to improve on this kernel's best point, on standardised log time.
        The best is where the posterior mean of this kernel's measured points is lowest, not their lowest
        measurement, which the timing noise flatters."""
        ks = self._cov(cand, np.zeros(len(cand), dtype=int), self.x, self.task)
        v = _forward(self.chol, ks.T)
        mean = ks @ self.alpha
        # a point's prior variance: the kernel at distance 0 from itself, the same for every point
        prior = float(self._kernel(np.zeros((len(self.enc.ordered), 1)), np.ones(1, dtype=bool))[0])
        sd = np.sqrt(np.maximum(prior - (v * v).sum(axis=0), 1e-12))
        own = self.task == 0
        best = float((self._cov(self.x[own], self.task[own], self.x, self.task) @ self.alpha).min()) \
            if own.any() else float(mean.min())
        z = (best - mean) / sd
        cdf = 0.5 * (1 + np.array([math.erf(u / math.sqrt(2)) for u in z]))
        return (best - mean) * cdf + sd * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def fit(enc: Encoding, x: np.ndarray, y: np.ndarray, others: list[tuple[np.ndarray, np.ndarray]],
        rho: float) -> Fit:
    """Fit on this kernel's points ``x`` with log times ``y`` and other kernels' (x, log time)."""
    xs, ts, vals = [x], [np.zeros(len(x), dtype=int)], []
    spreads = []
    for i, (ox, oy) in enumerate(others):
        if len(ox) > 2 and (osd := _spread(oy)) > 0:
            xs.append(ox)
            ts.append(np.full(len(ox), i + 1))
            vals.append((oy - np.mean(oy)) / osd)
            spreads.append(osd)
    # with too few points of its own to say how spread its times are, this kernel borrows the others' spread
    sd = _spread(y) or (float(np.mean(spreads)) if spreads else 1.0)
    vals.insert(0, (y - np.mean(y)) / sd if len(y) else y)
    X, T, Y = np.concatenate(xs), np.concatenate(ts), np.concatenate(vals)
    best_fit = None
    dist = enc.distances(X, X)  # the same for every length scale
    same = T[:, None] == T[None, :]
    readings = {scale: _readings(dist, scale) for scale in SCALES}
    for scale, mix, noise in itertools.product(SCALES, MIXES, NOISES):
        f = Fit(enc, X, T, np.zeros(0), np.zeros(0), scale, mix, rho)
        k = f._mixed(*readings[scale], same) + noise * np.eye(len(X))
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            continue
        z = _forward(chol, Y)
        ll = -0.5 * float(z @ z) - float(np.sum(np.log(np.diag(chol))))
        if best_fit is None or ll > best_fit[0]:
            f.chol = chol
            best_fit = (ll, f, z)
    assert best_fit is not None
    _, f, z = best_fit
    f.alpha = _backward(f.chol, z)
    return f


# numpy has no triangular solve; its general one factors the matrix again, which took most of a fit's time
def _forward(low: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z with low @ z = b, for lower-triangular ``low`` (``b`` a vector or a matrix of columns)."""
    z = np.empty_like(b)
    for i in range(len(b)):
        z[i] = (b[i] - low[i, :i] @ z[:i]) / low[i, i]
    return z


def _backward(low: np.ndarray, z: np.ndarray) -> np.ndarray:
    """a with low.T @ a = z, for lower-triangular ``low``."""
    a = np.empty_like(z)
    for i in reversed(range(len(z))):
        a[i] = (z[i] - low[i + 1:, i] @ a[i + 1:]) / low[i, i]
    return a
