"""Winners from a shared study storage: the best verified trial of every study of one device and toolchain,
whichever machine measured it, written into this machine's tuning cache (``luminal cache pull``, and the end
of a ``luminal tune`` on a shared storage)."""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import TrialState

from ..cache import Fingerprint, TuningCache
from .studies import PREFIX, StudyStorage
from .tasks import CONFIG_ATTR, DEFAULT_ATTR


@dataclass(frozen=True)
class PullReport:
    studies: int  # studies of this device and toolchain with a verified trial
    written: int  # winners new in the cache or faster than its own
    kept: int  # the cache's own winner was as fast or faster, or nothing beat the default


def pull_winners(storage: StudyStorage, cache: TuningCache, device: Fingerprint, toolchain: Fingerprint) -> PullReport:
    """For every study named for ``device`` and ``toolchain``: its fastest trial with a verified measurement (its
    time and the point as the cache stores it), proposed to the cache, which keeps the faster winner; none where
    the default's time (a machine's own baseline) was as fast."""
    suffix = f"-{device.key}-{toolchain.key}"
    rdb = storage.rdb
    studies = written = 0
    for s in rdb.get_all_studies():
        name = s.study_name
        if not (name.startswith(PREFIX) and name.endswith(suffix)) or len(name) <= len(PREFIX) + len(suffix):
            continue
        key = name[len(PREFIX):-len(suffix)].removeprefix("kernel-")
        trials = rdb.get_all_trials(s._study_id, deepcopy=False, states=(TrialState.COMPLETE,))
        measured = [t for t in trials if isinstance(t.user_attrs.get(CONFIG_ATTR), dict) and t.value]
        if not measured:
            continue
        best = min(measured, key=lambda t: (t.value, t.number))
        default = s.user_attrs.get(DEFAULT_ATTR)
        default_ns = int(default) if isinstance(default, int | float) and default > 0 else None
        studies += 1
        if default_ns is not None and best.value is not None and best.value >= default_ns:
            continue  # nothing beat the default
        written += cache.propose_winner(key, device, toolchain, best.user_attrs[CONFIG_ATTR],
                                        max(1, int(best.value or 1)), default_ns)
    return PullReport(studies, written, studies - written)
