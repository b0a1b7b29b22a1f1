"""Optuna samplers by name, with the fallback (and a note saying so) where a space does not suit one."""

from __future__ import annotations

import warnings
from typing import Any

import optuna

from ..errors import LuminalError

SAMPLERS = ("tpe", "random", "cmaes", "grid")
GRID_LIMIT = 4096


class _Grid(optuna.samplers.GridSampler):
    """Grid search under ask-and-tell: the tuner notices an exhausted grid itself (Optuna's
    GridSampler would call study.stop(), which only works inside study.optimize)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        pass


def _tpe(seed: int, size: int) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # trial 0 (the default) is the only random start: on the benchmark spaces
        # (benchmarks/search_efficiency.py) more random starts only delayed the search
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=1, multivariate=True)


def make_sampler(kind: str, seed: int, space: Any, what: str) -> tuple[optuna.samplers.BaseSampler, str | None]:
    """The sampler for ``space`` (a ScheduleSpace or FusionSpace) and a note when it fell back."""
    if kind not in SAMPLERS:
        raise LuminalError(f"unknown sampler {kind!r}; choose from {', '.join(SAMPLERS)}")
    size = space.size
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed), None
    if kind == "grid":
        if size <= GRID_LIMIT:
            return _Grid(space.grid(), seed=seed), None
        return _tpe(seed, size), f"{what}: spaces over {GRID_LIMIT} points are too big for grid search; using tpe"
    if kind == "cmaes":
        if space.numeric and len(space.params) >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.CmaEsSampler(seed=seed, with_margin=True, warn_independent_sampling=False), None
        why = "has categorical knobs" if not space.numeric else "has fewer than two numeric knobs"
        return _tpe(seed, size), f"{what}: CMA-ES needs two or more numeric knobs and this space {why}; using tpe"
    return _tpe(seed, size), None
