"""Optuna samplers by name, with the fallback (and a note saying so) where a space does not suit one.

``gp`` (search/costmodel.py) is Bayesian optimisation over a schedule space's valid points that
also learns from other kernels' trials in the same study storage; fusion decisions use TPE.
benchmarks/search_efficiency.py compares them.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import TrialState

from ..errors import LuminalError
from ..values import SEEDS
from .costmodel import Encoding, fit
from .space import Param, ScheduleSpace, params_of

if TYPE_CHECKING:
    from .studies import StudyStorage

SAMPLERS = ("gp", "tpe", "random", "cmaes", "grid")
GRID_LIMIT = 4096
ENUMERATE_LIMIT = 4096  # spaces up to this size are listed whole for the gp sampler
POOL = 512  # it ranks at most this many untried valid points (drawn at random) at each step
OTHER_POINTS = 400  # other kernels' latest trials, at most this many in all, shared among them evenly
RHO = 0.7  # how much a point's time on another kernel says about it on this one
WIDEN_AFTER = 2  # the trust region takes in one more changed knob after this many trials without a new best
SPACE_ATTR = "luminal_space"
TIE = 1e-6  # posterior means closer than this are equal (a flat model's differ by rounding)


def _changed(a: tuple, b: tuple) -> int:
    """How many knobs two points differ in."""
    return sum(u != v for u, v in zip(a, b))


class _Grid(optuna.samplers.GridSampler):
    """Grid search under ask-and-tell: the tuner notices an exhausted grid itself (Optuna's
    GridSampler would call study.stop(), which only works inside study.optimize)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        pass


def _tpe(seed: int) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # trial 0 (the default) is the only random start: on the benchmark spaces
        # (benchmarks/search_efficiency.py) more random starts only delayed the search
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=1, multivariate=True)


def make_sampler(kind: str, seed: int, space: Any, what: str,
                 transfer: Transfer | None = None) -> tuple[optuna.samplers.BaseSampler, str | None]:
    """The sampler for ``space`` (a ScheduleSpace or FusionSpace) and a note when it fell back; the gp sampler
    reads other kernels' trials through ``transfer`` where one is given (else through its study's storage)."""
    if kind not in SAMPLERS:
        raise LuminalError(f"unknown sampler {kind!r}; choose from {', '.join(SAMPLERS)}")
    seed %= SEEDS  # the tuner adds a kernel's signature hash to the run's seed; numpy takes 32 bits
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed), None
    if kind == "gp":
        if isinstance(space, ScheduleSpace) and space.params:
            return ModelSampler(space, seed, shared=transfer), None
        return _tpe(seed), None
    if kind == "grid":
        if space.size <= GRID_LIMIT:
            return _Grid(space.grid(), seed=seed), None
        return _tpe(seed), f"{what}: spaces over {GRID_LIMIT} points are too big for grid search; using tpe"
    if kind == "cmaes":
        if space.numeric and len(space.params) >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.CmaEsSampler(seed=seed, with_margin=True, warn_independent_sampling=False), None
        why = "has categorical knobs" if not space.numeric else "has fewer than two numeric knobs"
        return _tpe(seed), f"{what}: CMA-ES needs two or more numeric knobs and this space {why}; using tpe"
    return _tpe(seed), None


Observed = tuple[dict[str, Any], float]  # a completed trial's params and time


@dataclass
class _Kernel:
    """A study of the shared storage as the transfer sees it: another kernel's knobs and times, or nothing."""

    space: tuple[str, str] | None  # (space signature, described knobs); None: not a kernel study of this scope
    trials: list[tuple[int, dict[str, Any], float]] = field(default_factory=list)  # (number, params, time)

    @functools.cached_property
    def knobs(self) -> list[Param]:
        """The knobs, parsed from the described form once (a proposal reads them at every step)."""
        assert self.space is not None
        return params_of(self.space[1])


class Transfer:
    """The completed trials of every kernel study of one device and toolchain in a storage, for all the gp samplers
    of a run: each proposal reads only the trials finished (or created) since the last, in one query whatever the
    number of kernels (each sampler reading every study, as ModelSampler does alone, costs the square of it)."""

    def __init__(self, storage: StudyStorage, scope: str):
        self.storage = storage
        self.scope = scope  # the studies' name suffix: -{device key}-{toolchain key}
        self._studies: dict[int, _Kernel] = {}
        self._after = -1  # every trial up to this id is known or unfinished
        self._unfinished: set[int] = set()

    def refresh(self) -> None:
        for tid, sid, number, state, value, params in self.storage.finished_since(self._after, self._unfinished):
            if not state.is_finished():
                self._unfinished.add(tid)
                continue
            self._unfinished.discard(tid)
            self._after = max(self._after, tid)
            if state != TrialState.COMPLETE or value is None:
                continue
            kernel = self._studies.get(sid) or self._learn(sid)
            if kernel.space is not None:
                kernel.trials.append((number, params, value))

    def _learn(self, sid: int) -> _Kernel:
        rdb = self.storage.rdb
        attr = rdb.get_study_user_attrs(sid).get(SPACE_ATTR) if rdb.get_study_name_from_id(sid).endswith(
            self.scope) else None
        space = None
        if isinstance(attr, list) and len(attr) == 2 and all(isinstance(a, str) for a in attr):
            space = (str(attr[0]), str(attr[1]))
        self._studies[sid] = _Kernel(space)
        return self._studies[sid]

    def others(self, own: int, signature: str) -> list[tuple[list[Param], list[Observed]]]:
        """Other studies' knobs and completed trials (by number) whose space signature is ``signature``."""
        self.refresh()
        return [(k.knobs, [(p, v) for _, p, v in sorted(k.trials, key=lambda t: t[0])])
                for sid, k in self._studies.items() if sid != own and k.space is not None and k.space[0] == signature]


class ModelSampler(optuna.samplers.BaseSampler):
    """Bayesian optimisation over the valid points of a schedule space (search/costmodel.py).

    Each new point is the untried valid point (one per class of points that run the same code) of most
    expected improvement under a Gaussian process fitted on the measured trials, joined (``transfer``)
    by the trials of other kernels' studies in the same storage whose knobs are the same. Invalid points
    are never proposed. Ties are broken by the seed.

    Candidates come from a trust region (as in CASMOPOLITAN, Wan et al. 2021): the points that differ
    from this kernel's best measured point in at most ``radius`` knobs, one at first, one more after
    every WIDEN_AFTER trials without a new best, and the point the model expects fastest anywhere when it
    expects it to beat that best. With a few points, expected improvement favours the
    points least like the measured ones, corners that change every knob at once, whose times cannot say
    which knob made them slow; near the best, each trial says what one or two knobs are worth.
    Spaces too big to list are searched through a fresh random sample of the region at each step.
    """

    def __init__(self, space: ScheduleSpace, seed: int, transfer: bool = True, rho: float = RHO,
                 shared: Transfer | None = None):
        self.space = space
        self.transfer = transfer
        self.shared = shared
        self.rho = rho
        self.rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._enc = Encoding(np.array([p.ordinal for p in space.params], dtype=bool))
        self._names = [p.name for p in space.params]
        self._grid = [p.grid() for p in space.params]
        self._all: list[tuple] | None = None
        self._valid: dict[tuple, bool] = {}

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {p.name: p.distribution() for p in self.space.params}

    def sample_independent(self, study: optuna.Study, trial: Any, name: str, dist: Any) -> Any:
        return self._random.sample_independent(study, trial, name, dist)

    def _key(self, point: tuple) -> str:
        """The point's class: points that run the same code are one point to the search (ScheduleSpace.key)."""
        return self.space.key(self.space.decode(dict(zip(self._names, point))))

    def _is_valid(self, point: tuple) -> bool:
        if point not in self._valid:
            self._valid[point] = self.space.valid(self.space.decode(dict(zip(self._names, point))))
        return self._valid[point]

    def _candidates(self) -> list[tuple]:
        """The valid points: all of them, or a fresh random sample of a space too big to list."""
        if self._all is not None:
            return self._all
        if self.space.size <= ENUMERATE_LIMIT:
            self._all = [c for c in itertools.product(*self._grid) if self._is_valid(c)]
            return self._all
        pts = {tuple(g[self.rng.integers(len(g))] for g in self._grid) for _ in range(POOL)}
        return [c for c in sorted(pts, key=repr) if self._is_valid(c)]

    def _around(self, centre: tuple, radius: int) -> list[tuple]:
        """A random sample of the valid points at most ``radius`` knobs away from ``centre``: the centre with a
        random few of its knobs drawn anew."""
        grid = self._grid
        pts = set()
        for _ in range(POOL):
            pt = list(centre)
            for j in self.rng.permutation(len(grid))[:self.rng.integers(1, radius + 1)]:
                pt[j] = grid[j][self.rng.integers(len(grid[j]))]
            pts.add(tuple(pt))
        return [c for c in sorted(pts, key=repr) if self._is_valid(c)]

    def _untried(self, points: list[tuple], tried: set[str]) -> list[tuple]:
        """One point per class of ``points`` not in ``tried``."""
        classes, out = set(tried), []
        for c in points:
            k = self._key(c)
            if k not in classes:
                classes.add(k)
                out.append(c)
        return out

    def _near(self, everywhere: list[tuple], tried: set[str], centre: tuple, radius: int) -> list[tuple]:
        """The untried points of the trust region, widened until it holds one."""
        for r in range(radius, len(self.space.params) + 1):
            points = self._around(centre, r) if self._all is None else \
                [c for c in self._all if _changed(c, centre) <= r]
            near = self._untried(points, tried)
            if near:
                return near
        return everywhere

    def _region(self, trials: list) -> tuple[tuple | None, int]:
        """The trust region's centre, this kernel's best measured point, and its radius in knobs."""
        own = [(t.value, t.number, pt) for t in trials if t.state == TrialState.COMPLETE and t.value is not None
               if (pt := self._point(t.params)) is not None]
        if not own:
            return None, 0
        _, at, centre = min(own)
        stale = sum(1 for _, n, _ in own if n > at)
        return centre, min(1 + stale // WIDEN_AFTER, len(self.space.params))

    def _at_most_pool(self, points: list[tuple]) -> list[tuple]:
        """``points``, or POOL of them drawn at random."""
        if len(points) <= POOL:
            return points
        return [points[i] for i in self.rng.choice(len(points), POOL, replace=False)]

    def _features(self, points: list[tuple]) -> np.ndarray:
        return np.array([[p.position(v) for p, v in zip(self.space.params, pt)] for pt in points], dtype=float)

    def _point(self, params: dict[str, Any]) -> tuple | None:
        try:
            return tuple(params[n] for n in self._names)
        except KeyError:
            return None

    def _other_kernels(self, study: optuna.Study) -> list[tuple[np.ndarray, np.ndarray]]:
        """(features, log times) of other studies with this space's knobs. They are read at every proposal: a
        tuning run interleaves its kernels, a few trials each in turn, so what the others learnt is new each time
        (re-read every 8 trials, a kernel found its best before the others' first trials reached it)."""
        if not self.transfer:
            return []
        try:
            theirs = self._theirs(study)
        except (optuna.exceptions.OptunaError, NotImplementedError):  # a storage that cannot list its studies
            return []
        # the cost model's fit grows with the cube of its points: the latest of each, at most OTHER_POINTS in all
        each = max(3, OTHER_POINTS // max(1, len(theirs)))
        out = []
        for params, trials in theirs:
            x, y = self._measured(trials[-each:], params)
            if len(x) > 2:
                out.append((x, y))
        return out

    def _theirs(self, study: optuna.Study) -> list[tuple[list[Param], list[Observed]]]:
        """Other studies' knobs and completed trials: from the shared transfer, or read here from every study."""
        sig, described = self.space.signature, self.space.described
        if self.shared is not None:
            return self.shared.others(study._study_id, sig)
        storage = study._storage
        own = study._study_id
        theirs = []
        for s in storage.get_all_studies():  # this study's attributes too: no query of its own
            attr = s.user_attrs.get(SPACE_ATTR)
            if s._study_id == own:
                if described is not None and attr != [sig, described]:
                    study.set_user_attr(SPACE_ATTR, [sig, described])
            elif isinstance(attr, list) and attr[0] == sig:
                trials = storage.get_all_trials(s._study_id, deepcopy=False, states=(TrialState.COMPLETE,))
                theirs.append((params_of(attr[1]), [(t.params, t.value) for t in trials if t.value is not None]))
        return theirs

    def _measured(self, trials: list[Observed], params: list[Param]) -> tuple[np.ndarray, np.ndarray]:
        """Features and log times of completed trials (params, time) of a study whose knobs are ``params`` (this
        space's or another kernel's, whose values are placed on this space's scale; points it cannot place are
        left out)."""
        feats, ys = [], []
        for tp, value in trials:
            if value <= 0 or any(p.name not in tp for p in params):
                continue
            f = [mine.feature(p.decode(tp[p.name])) for mine, p in zip(self.space.params, params)]
            if None not in f:
                feats.append(f)
                ys.append(math.log(value))
        return np.array(feats, dtype=float).reshape(len(feats), len(params)), np.array(ys)

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        if not search_space or "fixed_params" in trial.system_attrs or "failed_trial" in trial.system_attrs:
            return {}  # an enqueued point, or a stale one asked again: its params are set
        trials = study.get_trials(deepcopy=False)
        tried = {self._key(pt) for t in trials if t.state != TrialState.WAITING
                 if (pt := self._point(t.params)) is not None}
        everywhere = self._untried(self._candidates(), tried)
        if not everywhere:
            return {}
        x, ys = self._measured([(t.params, t.value) for t in trials
                                if t.state == TrialState.COMPLETE and t.value is not None], self.space.params)
        others = self._other_kernels(study)
        centre, radius = self._region(trials)
        if centre is None and not others:
            return dict(zip(self._names, everywhere[int(self.rng.integers(len(everywhere)))]))
        model = fit(self._enc, x, ys, others, self.rho)
        pool = self._at_most_pool(everywhere if centre is None else self._near(everywhere, tried, centre, radius))
        if centre is not None:
            # the point the model expects fastest joins the region's when it beats the centre: other kernels'
            # trials, or the knobs' effects added up, can point far from this kernel's best
            everywhere = self._at_most_pool(everywhere)
            mean = model.mean(self._features([centre, *everywhere]))
            guess = everywhere[int(np.argmin(mean[1:]))]
            if mean[1:].min() < mean[0] - TIE and guess not in pool:
                pool.append(guess)
        gain = model.expected_improvement(self._features(pool))
        ties = np.flatnonzero(gain == gain.max())  # broken by the seed
        pick = pool[int(self.rng.choice(ties))]
        return dict(zip(self._names, pick))
