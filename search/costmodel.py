"""A small Gaussian-process cost model over schedule points, in numpy.

Points are encoded knob by knob: an ordered knob as its position in [0, 1] (on a log2 scale when
all its choices are positive, so 64 and 128 are as close as 128 and 256), any other knob by its
choice index, compared only for equality. A knob's distance is |u - u'| (ordered) or [c != c']
(other). The kernel mixes two readings of those distances: exp(-scale * sum of distances), where
only points near each other covary, and the mean over knobs of exp(-scale * distance), where points
that share a knob's value covary whatever the other knobs are (a knob's main effect: one fast point
with one thread says the other one-thread points may be fast too). The mix, the scale and the
timing noise, and whether the ordered knobs' order is read at all, are hyperparameters: the model
averages the likeliest few choices, weighted by marginal likelihood. The target is log time; the
sampler proposes the point of most expected improvement.

Trials of other kernels with the same knobs (other studies) join as further tasks: points of two
different kernels covary ``rho`` times as much as points of one, and each kernel has its own
unknown offset and spread, so the others say which points are good, not how fast.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

SCALES = (0.5, 1.0, 2.0, 4.0)  # length-scale choices, weighed by marginal likelihood
MIXES = (0.0, 0.5, 1.0)  # weight of the per-knob (additive) reading, weighed likewise
NOISES = (0.05, 0.15, 0.5)  # variance of timing noise on standardised log time, weighed likewise
OFFSET = 1.0  # prior variance of a task's offset
ORDERED = (True, False)  # ordered knobs read by their order, or only compared for equality, likewise
BLOCK = 64  # rows per block of the triangular solves
KEEP = 6  # the model averages the likeliest hyperparameter choices, at most this many,
MIN_WEIGHT = 0.01  # and only those at least this likely relative to the likeliest


@dataclass(frozen=True)
class Encoding:
    ordered: np.ndarray  # bool per knob

    def distances(self, a: np.ndarray, b: np.ndarray, ordered: bool = True) -> np.ndarray:
        """Per-knob pairwise distances between rows of ``a`` and ``b`` (encoded points): knobs x len(a) x len(b);
        with ``ordered`` False, every knob's values are only compared for equality."""
        d = np.zeros((len(self.ordered), len(a), len(b)))
        for j, o in enumerate(self.ordered):
            x, y = a[:, j][:, None], b[:, j][None, :]
            d[j] = np.abs(x - y) if o and ordered else (x != y)
        return d


def _readings(dist: np.ndarray, graded: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The joint and the per-knob (additive) correlations of points ``dist`` apart (Encoding.distances); ``graded``:
    the knobs read by their order. The others are 0 or 1 apart, where exp(-scale * d) is 1 - (1 - e^-scale) d: their
    share of the additive reading is a count, with no exponential per knob (most of a proposal's time was those)."""
    additive = (~graded).sum() - (1 - math.exp(-scale)) * dist[~graded].sum(axis=0)
    if graded.any():
        additive = additive + np.exp(-scale * dist[graded]).sum(axis=0)
    return np.exp(-scale * dist.sum(axis=0)), additive / len(dist)


def _spread(y: np.ndarray) -> float:
    sd = float(np.std(y)) if len(y) > 2 else 0.0
    return sd if sd > 1e-9 else 0.0


def _covariance(joint: np.ndarray, additive: np.ndarray, same: np.ndarray, mix: float, rho: float) -> np.ndarray:
    """The kernel from the two readings (``_readings``); ``same``: whether the two points are of one kernel."""
    corr = (1 - mix) * joint + mix * additive
    return corr * np.where(same, 1.0, rho) + OFFSET * same


@dataclass
class Fit:
    """The model under one choice of hyperparameters."""
    alpha: np.ndarray
    chol: np.ndarray
    scale: float
    mix: float
    rho: float
    ordered: bool

    def mean(self, at: tuple[np.ndarray, np.ndarray], mine: np.ndarray) -> np.ndarray:
        """Posterior mean of candidates (as this kernel's points) from their readings (``_readings``) against the
        fitted points; ``mine``: which fitted points are this kernel's."""
        return _covariance(*at, mine[None, :], self.mix, self.rho) @ self.alpha

    def expected_improvement(self, at: tuple[np.ndarray, np.ndarray], own: tuple[np.ndarray, np.ndarray],
                             mine: np.ndarray) -> np.ndarray:
        """How much each candidate is expected to improve on this kernel's best point, on standardised log time,
        from the readings (``_readings``) between the candidates and the fitted points (``at``) and between this
        kernel's points (``mine``) and the fitted points (``own``). The best is where the posterior mean of this
        kernel's measured points is lowest, not their lowest measurement, which the timing noise flatters."""
        ks = _covariance(*at, mine[None, :], self.mix, self.rho)
        v = _forward(self.chol, ks.T)
        mean = ks @ self.alpha
        prior = 1 + OFFSET  # a point's prior variance: both readings are 1 at distance 0
        sd = np.sqrt(np.maximum(prior - (v * v).sum(axis=0), 1e-12))
        best = float(self.mean(own, mine).min()) if mine.any() else float(mean.min())
        z = (best - mean) / sd
        cdf = 0.5 * (1 + np.array([math.erf(u / math.sqrt(2)) for u in z]))
        return (best - mean) * cdf + sd * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)


@dataclass
class Model:
    """Fits under several hyperparameter choices, weighted by their posterior (their marginal likelihood under a
    uniform prior over the grid): a handful of points cannot single out one length scale, mix or reading of the
    knobs, and the likeliest alone swung between extremes from one trial to the next."""
    enc: Encoding
    x: np.ndarray
    task: np.ndarray  # 0: this kernel, i > 0: the i-th other kernel
    fits: list[Fit]
    weights: np.ndarray
    own: dict[tuple[bool, float], tuple]  # the fit's readings between this kernel's points and all, by (ordered, scale)

    def _each(self, cand: np.ndarray):
        """(weight, fit, the candidates' readings against the fitted points) for each fit."""
        dist: dict[bool, np.ndarray] = {}
        at: dict[tuple[bool, float], tuple] = {}
        for w, f in zip(self.weights, self.fits):
            key = (f.ordered, f.scale)
            if key not in at:
                if f.ordered not in dist:
                    dist[f.ordered] = self.enc.distances(cand, self.x, f.ordered)
                at[key] = _readings(dist[f.ordered], self.enc.ordered & f.ordered, f.scale)
            yield w, f, at[key]

    def mean(self, cand: np.ndarray) -> np.ndarray:
        """Posterior mean of standardised log time at candidates of this kernel."""
        mine = self.task == 0
        return sum(w * f.mean(at, mine) for w, f, at in self._each(cand))

    def expected_improvement(self, cand: np.ndarray) -> np.ndarray:
        mine = self.task == 0
        return sum(w * f.expected_improvement(at, self.own[f.ordered, f.scale], mine)
                   for w, f, at in self._each(cand))


def fit(enc: Encoding, x: np.ndarray, y: np.ndarray, others: list[tuple[np.ndarray, np.ndarray]],
        rho: float) -> Model:
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
    same = T[:, None] == T[None, :]
    orders = ORDERED if enc.ordered.any() else (True,)  # without ordered knobs the two readings are one
    dist = {o: enc.distances(X, X, o) for o in orders}
    readings = {(o, scale): _readings(dist[o], enc.ordered & o, scale) for o in orders for scale in SCALES}
    scored = []  # (log marginal likelihood, hyperparameters, Cholesky factor, its forward solve of Y)
    for (o, scale), mix in itertools.product(readings, MIXES):
        base = _covariance(*readings[o, scale], same, mix, rho)
        for noise in NOISES:
            try:
                chol = np.linalg.cholesky(base + noise * np.eye(len(X)))
            except np.linalg.LinAlgError:
                continue
            z = _forward(chol, Y)
            scored.append((-0.5 * float(z @ z) - float(np.sum(np.log(np.diag(chol)))), (o, scale, mix), chol, z))
    assert scored
    scored.sort(key=lambda s: -s[0])
    kept = [s for s in scored[:KEEP] if s[0] > scored[0][0] - math.log(1 / MIN_WEIGHT)]
    fits = [Fit(_backward(chol, z), chol, scale, mix, rho, o) for _, (o, scale, mix), chol, z in kept]
    w = np.exp(np.array([s[0] for s in kept]) - kept[0][0])
    mine = T == 0
    own = {(f.ordered, f.scale): tuple(r[mine] for r in readings[f.ordered, f.scale]) for f in fits}
    return Model(enc, X, T, fits, w / w.sum(), own)


# numpy has no triangular solve; its general one factors the whole matrix again, which took most of a fit's
# time. Substitution by blocks: each block's own small solve, and the rest one matrix product.
def _forward(low: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z with low @ z = b, for lower-triangular ``low`` (``b`` a vector or a matrix of columns)."""
    z = np.empty_like(b)
    for s in range(0, len(b), BLOCK):
        e = s + BLOCK
        z[s:e] = np.linalg.solve(low[s:e, s:e], b[s:e] - low[s:e, :s] @ z[:s])
    return z


def _backward(low: np.ndarray, z: np.ndarray) -> np.ndarray:
    """a with low.T @ a = z, for lower-triangular ``low``."""
    a = np.empty_like(z)
    for e in range(len(z), 0, -BLOCK):
        s = max(0, e - BLOCK)
        a[s:e] = np.linalg.solve(low[s:e, s:e].T, z[s:e] - low[e:, s:e].T @ a[e:])
    return a
