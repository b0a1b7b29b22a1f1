"""Share the budget across tasks the way Ansor's gradient-based task scheduler does.

The objective is the model's estimated time, sum over tasks of weight x best time. Each
task's gradient mixes how much it improved lately (backward) with how much it could still
improve (optimistic forward); the scheduler picks the task whose next trials promise the
largest drop per second spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ALPHA = 0.2  # weight of the backward-looking part (Ansor's alpha)
WINDOW = 3  # trials the backward difference looks over


@dataclass
class TaskState:
    name: str
    weight: float  # how often the kernel runs in the model (the fusion task: 1)
    best_ns: float = math.inf
    history: list[float] = field(default_factory=list)  # best after each trial
    seconds: float = 0.0  # wall time spent on this task
    done: bool = False  # space exhausted or nothing left to learn

    @property
    def trials(self) -> int:
        return len(self.history)

    def record(self, best_ns: float, seconds: float, n: int = 1) -> None:
        self.best_ns = min(self.best_ns, best_ns)
        self.history.extend([self.best_ns] * n)
        self.seconds += seconds

    @property
    def stale(self) -> int:
        """Trials since the best last improved (all of them while nothing ran)."""
        best = self.history[-1] if self.history else math.inf
        if not math.isfinite(best):
            return self.trials
        return self.trials - 1 - self.history.index(best)

    @property
    def seconds_per_trial(self) -> float:
        return self.seconds / self.trials if self.trials else 0.0

    def gradient(self) -> float:
        """d(model time)/d(trials): negative, the more negative the more promising."""
        if not self.trials:
            return -math.inf
        if not math.isfinite(self.best_ns):
            return 0.0  # nothing runs yet: no estimate of what more trials would bring
        n = self.trials
        back = 0.0
        if n > WINDOW and math.isfinite(self.history[-WINDOW - 1]):
            back = (self.history[-1] - self.history[-WINDOW - 1]) / WINDOW
        forward = -self.best_ns / n
        return self.weight * (ALPHA * back + (1 - ALPHA) * forward)


def step_seconds(task: TaskState, tasks: list[TaskState], batch: int) -> float:
    """Seconds ``task``'s next step of ``batch`` trials should take; a task not yet measured (a kernel the
    fusion search has just made) is assumed as slow per trial as the slowest measured one."""
    if task.trials:
        return task.seconds_per_trial * batch
    return max((t.seconds_per_trial for t in tasks if t.trials), default=0.0)


def pick(tasks: list[TaskState], min_trials: int = 1, patience: int | None = None) -> TaskState | None:
    """The next task to spend trials on: any below ``min_trials`` first (in order), then the best
    gradient per second; a task whose last ``patience`` trials found nothing better is left."""
    live = [t for t in tasks if not t.done and t.weight > 0 and (patience is None or t.stale < patience)]
    if not live:
        return None
    for t in live:
        if t.trials < min_trials:
            return t
    return min(live, key=lambda t: t.gradient() / max(t.seconds_per_trial, 1e-3))
