"""Tuning progress read from the Optuna storage that `luminal tune` wrote, for the bench report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import LuminalError

MAX_STUDIES = 24


def study_labels(models: list[dict[str, Any]]) -> dict[str, str]:
    """The cache key that names each study of the benched models' kernels and fusion plans ("kernel-<signature>",
    "fusion-<signature>"), with what a person calls it: the model, and the kernel's model nodes."""
    labels = {}
    for m in models:
        model = f"{m['name']}: " if len(models) > 1 else ""
        if m.get("fusion_key"):
            labels[m["fusion_key"]] = f"{model}fusion plan"
        for k in m.get("kernels", []):
            if k.get("signature"):
                labels[f"kernel-{k['signature']}"] = f"{model}{k['name']}"
    return labels


def label_of(study: str, labels: Mapping[str, str]) -> str | None:
    """What ``labels`` calls the study of that name (luminal-<key>-<device>-<toolchain>), None when none."""
    from ..search.studies import PREFIX

    return next((label for key, label in labels.items() if study.startswith(f"{PREFIX}{key}-")), None)


def tuning_progress(storage: str, max_studies: int = MAX_STUDIES,
                    keep: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """Per study that ``keep`` keeps (by name; the ones with most finished trials first): every finished trial's
    value and the best value so far, as [trial number, value] pairs."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if "://" not in storage:
        if not Path(storage).is_file():
            raise LuminalError(f"Optuna storage {storage!r} not found")
        storage = f"sqlite:///{storage}"
    from ..search.studies import checked_url

    checked_url(storage, must_exist=True)
    try:
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    except Exception as e:
        raise LuminalError(f"cannot read the Optuna storage {storage!r}: {type(e).__name__}") from None
    summaries = [s for s in summaries if keep is None or keep(s.study_name)]
    summaries.sort(key=lambda s: -s.n_trials)
    out = []
    for summary in summaries[:max_studies]:
        try:
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            directions = study.directions
            trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        except Exception as e:
            raise LuminalError(f"cannot read study {summary.study_name!r}: {type(e).__name__}") from None
        if len(directions) != 1:
            continue
        minimize = directions[0] == optuna.study.StudyDirection.MINIMIZE
        values, best = [], []
        best_so_far = None
        for t in sorted(trials, key=lambda t: t.number):
            if t.value is None:
                continue
            values.append([t.number, float(t.value)])
            if best_so_far is None or (t.value < best_so_far if minimize else t.value > best_so_far):
                best_so_far = float(t.value)
            best.append([t.number, best_so_far])
        out.append({"study": summary.study_name, "direction": "minimize" if minimize else "maximize",
                    "trials": values, "best": best})
    return out
