"""Tuning tasks: one per distinct kernel (its schedule study) and one for the model's fusion decisions.

A task asks its study for new points (invalid ones are pruned before any compile, repeats are
answered from earlier measurements), keeps every measured point, and an incumbent that a
challenger replaces only by winning paired, interleaved runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..codegen.kernel import Kernel
from ..codegen.partition import ByImage, ChannelsLast, Decisions, decisions_config
from .jobs import Placement
from .measure import Measurement
from .report import FusionReport, KernelReport
from .scheduler import TaskState
from .space import FusionSpace, ScheduleSpace, decisions_key
from .stats import MIN_GAIN, beats
from .studies import Heartbeats, ask, fail_stale

MAX_ASK = 40  # proposals tried per slot before the space counts as exhausted
ASK_S = 2.0  # and the time they may take
SAMPLING_WAIT_S = 2.0  # without heartbeats, at most this long a proposal waits for an earlier trial to get its point
DEFAULT_ATTR = "luminal_default_ns"  # study attribute: the default point's median time (a process's measurement)
CONFIG_ATTR = "config"  # trial attribute: the point as the tuning cache stores it, on every verified measurement


class StudyTask:
    def __init__(self, name: str, study: optuna.Study | Callable[[], optuna.Study], space: Any, weight: float,
                 heartbeats: Heartbeats | None = None):
        self._study = study
        self.heartbeats = heartbeats
        self._trial_keys: dict[int, str] = {}  # trial id -> its point's key, once its params are all set
        self.space = space
        self.rng = random.Random(name)
        self.state = TaskState(name, weight)
        self.seen: dict[str, tuple[Any, Measurement]] = {}
        self.invalid: set[str] = set()
        self.elsewhere: set[str] = set()  # points another process of a shared study measures or has measured
        self.incumbent: Any = None
        self.inc: Measurement | None = None
        self.default_m: Measurement | None = None
        self.statuses: dict[str, int] = {}
        self.cached = 0
        self.pruned = 0
        self.trials = 0

    @property
    def study(self) -> optuna.Study:
        """Opened on first use: a model may have many kernels the budget never reaches."""
        if not isinstance(self._study, optuna.Study):
            self._study = self._study()
        return self._study

    def key(self, point: Any) -> str:
        raise NotImplementedError

    def enqueue_default(self) -> None:
        """Queue the space's ``starts`` as the study's first trials (measured by the first step: answered from
        memory when asked)."""
        # a grid covers them anyway (and Optuna's grid would spend a grid point on each)
        grid = isinstance(self.study.sampler, optuna.samplers.GridSampler)
        if not grid and not self.study.get_trials(deepcopy=False):
            for point in self.space.starts:
                self.study.enqueue_trial(self.space.encode(point), skip_if_exists=True)

    def previous_best(self) -> Any:
        """The best point a previous run of this study measured (resuming), or None."""
        try:
            return self.space.decode(self.study.best_trial.params)
        except ValueError:
            return None

    def _exhausted(self, extra: int = 0) -> bool:
        return len(self.seen.keys() | self.elsewhere) + len(self.invalid) + extra >= self.space.size

    def ask(self, n: int) -> list[tuple[optuna.Trial, Any]]:
        """Up to ``n`` new valid points; invalid ones are pruned and repeats answered from memory, or from another
        process's trial of the same point in a shared study."""
        fail_stale(self.study)
        pending: list[tuple[optuna.Trial, Any]] = []
        keys: set[str] = set()
        t_end = time.monotonic() + ASK_S
        for _ in range(n):
            found = False
            for _attempt in range(MAX_ASK):
                if self._exhausted(len(keys)) or time.monotonic() > t_end:
                    break
                if self._claim(pending, keys):
                    found = True
                    break
            while not found and not self._exhausted(len(keys)) and time.monotonic() <= t_end:
                point = self._unseen(keys)
                if point is None:
                    break
                # queued, the point may be popped by another process, and this one may pop another's
                self.study.enqueue_trial(self.space.encode(point))
                found = self._claim(pending, keys)
            if not found:
                break
        if not pending:
            self.state.done = True  # the sampler only proposes what it has seen
        if self._exhausted(len(keys)):
            self.state.done = True
        return pending

    def _claim(self, pending: list[tuple[optuna.Trial, Any]], keys: set[str]) -> bool:
        """Ask a trial and keep its point for timing (True), or finish the trial at once: pruned where the point
        is invalid, answered where this process or another has measured it or is measuring it. A trial another
        process failed while this one sampled it (this one stalled past the grace period, a server away; the
        point is asked again there) is dropped, as ``_finish`` leaves one failed while it was timed."""
        trial = None
        try:
            trial = self._ask()
            point = self.space.suggest(trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            if trial is not None and self.heartbeats is not None:
                self.heartbeats.release(trial)
            return False
        k = self.key(point)
        if k in self.invalid or not self.space.valid(point):
            self.invalid.add(k)
            self.pruned += 1
            self._finish(trial, state=TrialState.PRUNED)
            return False
        if k in self.seen or k in keys:
            self.cached += 1
            m = self.seen[k][1] if k in self.seen else None
            if m is not None and m.ok:
                self._finish(trial, m.median_ns)
            else:
                self._finish(trial, state=TrialState.PRUNED)
            return False
        other = self._taken(trial, k)
        if other is not None:
            self.cached += 1
            self.elsewhere.add(k)
            self._answer(trial, other)
            return False
        pending.append((trial, point))
        keys.add(k)
        return True

    def _ask(self) -> optuna.Trial:
        trial = ask(self.study)
        if self.heartbeats is not None:
            self.heartbeats.hold(self.study, trial)
        return trial

    def _finish(self, trial: optuna.Trial, value: float | None = None, state: TrialState | None = None,
                attrs: dict[str, Any] | None = None) -> None:
        """Tell the trial and stop its heartbeat; one another process failed meanwhile (this one stalled past the
        grace period, and the point was asked again there) is left as it is."""
        try:
            for key, v in (attrs or {}).items():
                trial.set_user_attr(key, v)
            self.study.tell(trial, value, state=None if value is not None else state, skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass
        finally:
            if self.heartbeats is not None:
                self.heartbeats.release(trial)

    def _key_of(self, t: FrozenTrial, names: set[str]) -> str | None:
        """The point key of another trial, once its params are all set (None while they are being sampled)."""
        tid = t._trial_id
        if tid not in self._trial_keys:
            if not names <= t.params.keys():
                return None
            self._trial_keys[tid] = self.key(self.space.decode(t.params))
        return self._trial_keys[tid]

    def _taken(self, trial: optuna.Trial, k: str) -> FrozenTrial | None:
        """Another trial of point ``k`` that counts instead of this one: finished, or running under an earlier id
        (two processes that draw one point at once: the later one yields). An earlier trial still being sampled
        is waited for, so that two processes never both miss each other (however slow a loaded machine samples);
        one whose process died is failed once its heartbeat is stale."""
        names = set(self.space.grid())
        t_end = time.monotonic() + self._sampling_wait()
        t_stale = time.monotonic() + 1.0
        while True:
            sampling = False
            for t in self.study.get_trials(deepcopy=False):
                if t._trial_id == trial._trial_id or t.state in (TrialState.WAITING, TrialState.FAIL):
                    continue
                earlier = t._trial_id < trial._trial_id
                tk = self._key_of(t, names)
                if tk is None:
                    sampling |= earlier and t.state == TrialState.RUNNING
                elif tk == k and (earlier or t.state != TrialState.RUNNING):
                    return t
            if not sampling or time.monotonic() > t_end:
                return None
            if time.monotonic() > t_stale:
                fail_stale(self.study)
                t_stale = time.monotonic() + 1.0
            time.sleep(0.02)

    def _sampling_wait(self) -> float:
        """How long an earlier trial may take to get its point: a process that holds it beats its heartbeat, and one
        that died is failed after the grace period; a trial killed before its first beat is given up on then too."""
        rdb = self.heartbeats.rdb if self.heartbeats is not None else None
        if rdb is None or not rdb.heartbeat_interval:
            return SAMPLING_WAIT_S
        return float(rdb.grace_period or 2 * rdb.heartbeat_interval) + rdb.heartbeat_interval

    def _answer(self, trial: optuna.Trial, other: FrozenTrial) -> None:
        """A point another trial measured (its time), breaks (pruned), or is measuring (this trial failed)."""
        if other.state == TrialState.COMPLETE and other.value is not None:
            self._finish(trial, other.value)
        else:
            self._finish(trial, state=TrialState.PRUNED if other.state == TrialState.PRUNED else TrialState.FAIL)

    def _unseen(self, keys: set[str]) -> Any:
        """A random valid point not measured nor pending here (the sampler only proposes points it has seen),
        or None."""
        for _ in range(200):
            point = self.space.random(self.rng)
            k = self.key(point)
            if k in self.seen or k in keys or k in self.invalid or k in self.elsewhere:
                continue
            if not self.space.valid(point):
                self.invalid.add(k)
                continue
            return point
        return None

    def config(self, point: Any) -> Any:
        """The point as the tuning cache stores it."""
        return point

    def tell(self, trial: optuna.Trial | None, point: Any, m: Measurement) -> None:
        """Record a measured point (trial None: measured outside the study)."""
        if m.status != "skipped":
            self.seen[self.key(point)] = (point, m)
            self.statuses[m.status] = self.statuses.get(m.status, 0) + 1
            self.trials += 1
        if trial is None:
            return
        attrs: dict[str, Any] = {"status": m.status}
        if m.message:
            attrs["message"] = m.message[:300]
        if m.ok:
            attrs.update(_plain(CONFIG_ATTR, self.config(point)))
            self._finish(trial, m.median_ns, attrs=attrs)
        elif m.status == "skipped":
            self._finish(trial, state=TrialState.FAIL, attrs=attrs)
        else:
            # a broken point is told as pruned: TPE ranks pruned trials below every complete one and so
            # learns to avoid the region, where failed trials would teach it nothing
            self._finish(trial, state=TrialState.PRUNED, attrs=attrs)

    def set_default(self, m: Measurement) -> None:
        """The default point's measurement; its time joins the study's attributes (pulled with the winners)."""
        self.default_m = m
        if m.ok:
            with contextlib.suppress(optuna.exceptions.OptunaError):
                self.study.set_user_attr(DEFAULT_ATTR, m.median_ns)

    def consider(self, point: Any, m: Measurement, compare: Callable[[list[Any]], list[Measurement]]) -> bool:
        """Make ``point`` the incumbent if it beats it in paired, interleaved runs."""
        if not m.ok:
            return False
        if self.inc is None:
            self.incumbent, self.inc = point, m
            return True
        if m.median_ns >= self.inc.median_ns * (1 - MIN_GAIN / 2):
            return False
        both = compare([self.incumbent, point])
        if len(both) == 2 and all(x.ok for x in both) and beats(both[1].samples_ns, both[0].samples_ns):
            self.incumbent, self.inc = point, both[1]
            return True
        if len(both) == 2 and both[0].ok:
            self.inc = both[0]  # a fresher measurement of the incumbent
        return False

    def finalists(self, k: int = 3) -> list[Any]:
        ok = sorted((m.median_ns, key) for key, (_, m) in self.seen.items() if m.ok)
        keys = [key for _, key in ok[:k]]
        pts = [self.seen[key][0] for key in keys]
        for extra in (self.incumbent, self.space.default):
            if extra is not None and self.key(extra) not in keys and self.key(extra) in self.seen \
                    and self.seen[self.key(extra)][1].ok:
                pts.append(extra)
                keys.append(self.key(extra))
        return pts

    def settle(self, points: list[Any], ms: list[Measurement]) -> None:
        """After the finalists ran together: the fastest replaces the incumbent if it beats it there."""
        got = {self.key(p): m for p, m in zip(points, ms) if m.ok}
        inc_key = self.key(self.incumbent) if self.incumbent is not None else None
        if self.key(self.space.default) in got:
            self.default_m = got[self.key(self.space.default)]
        if not got:
            return
        best_key = min(got, key=lambda k: got[k].median_ns)
        best = next(p for p in points if self.key(p) == best_key)
        if inc_key not in got:
            self.incumbent, self.inc = best, got[best_key]
            return
        self.inc = got[inc_key]
        if best_key != inc_key and beats(got[best_key].samples_ns, got[inc_key].samples_ns):
            self.incumbent, self.inc = best, got[best_key]

    @property
    def best_ns(self) -> float:
        return self.inc.median_ns if self.inc is not None else math.inf

    @property
    def default_ns(self) -> float | None:
        """The default point's median time, once it ran fine."""
        d = self.default_m
        return d.median_ns if d is not None and d.ok else None


class KernelTask(StudyTask):
    def __init__(self, kernel: Kernel, signature: str, study: optuna.Study | Callable[[], optuna.Study],
                 space: ScheduleSpace, count: int, note: str | None, heartbeats: Heartbeats | None = None,
                 placement: Placement = ()):
        super().__init__(signature, study, space, count, heartbeats)
        self.kernel = kernel
        self.signature = signature
        self.count = count
        self.note = note
        self.placement = placement  # where the model being tuned puts its buffers (updated as its decisions change)

    def key(self, point: dict[str, Any]) -> str:
        return self.space.key(point)

    def report(self) -> KernelReport:
        return KernelReport(self.signature, self.kernel.form, self.count, self.trials, dict(self.statuses),
                            self.default_ns, self.inc.median_ns if self.inc else None,
                            self.incumbent, self.note, self.cached, self.pruned)


class FusionTask(StudyTask):
    def __init__(self, study: optuna.Study, space: FusionSpace, note: str | None, heartbeats: Heartbeats | None = None):
        super().__init__("fusion", study, space, 1.0, heartbeats)
        self.note = note

    def key(self, point: Decisions) -> str:
        return decisions_key(point)

    def config(self, point: Decisions) -> dict[str, list[Any]]:
        return decisions_config(point)

    def report(self) -> FusionReport:
        best = self.config(self.incumbent or {})
        return FusionReport(len(self.space.edges), self.trials, dict(self.statuses), self.default_ns,
                            self.inc.median_ns if self.inc else None, best["unfused"], len(self.space.convs),
                            best.get("winograd", []), self.space.count(ChannelsLast), best.get("channels_last", []),
                            self.space.count(ByImage), best.get("by_image", []))


def _plain(key: str, value: Any) -> dict[str, Any]:
    """``{key: value}`` where the value is plain JSON (what a trial attribute and the cache hold), else ``{}``."""
    try:
        return {key: json.loads(json.dumps(value))}
    except (TypeError, ValueError):
        return {}
