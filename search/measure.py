"""Measure candidates: compile in a pool of worker processes, verify and time in one isolated worker.

Statuses: ok, compile_error, crash, timeout, wrong_result. A bad candidate costs its
worker (which is replaced), never the tuning run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..codegen.kernel import Kernel
from ..codegen.partition import Decisions
from ..errors import LuminalError
from ..ir.graph import Graph
from .jobs import CompileJob, KernelJob, Measurement, ModelJob, Placement
from .timing import TimingPlan
from .worker import Cancelled, Worker, WorkerContext, WorkerLost, wait_any

if TYPE_CHECKING:
    from ..codegen.backend import Backend


PAIRED_MIN_REPS = 15


def refuse_untimed(backend: Backend | str) -> None:
    """The interpreter (a backend or its name) checks correctness only: nothing on it is timed."""
    if (backend if isinstance(backend, str) else backend.name) == "interpret":
        raise LuminalError("the Triton interpreter is for correctness only and is never timed; "
                           "tune with --backend cuda on a GPU or --backend cpu")


class Measurer:
    def __init__(self, backend: Backend, graph: Graph | None = None, workers: int = 1, plan: TimingPlan | None = None,
                 timeout_s: float = 10.0, seed: int = 0, threads: int | None = None,
                 stop: Callable[[], bool] | None = None, end: float | None = None):
        """``end``: the monotonic time no compile or timing may wait past (the tuning budget's end)."""
        refuse_untimed(backend)
        self.end = end
        self.backend = backend
        self.plan = plan or TimingPlan()
        self.timeout_s = timeout_s
        self.seed = seed
        self.stop = stop
        ctx = WorkerContext(backend, graph, threads)
        self.timer = Worker(ctx)
        self.pool = [Worker(WorkerContext(backend, None, threads)) for _ in range(max(0, workers))]

    # -- compile pool -------------------------------------------------------
    def compile_many(self, kernel: Kernel, schedules: list[dict[str, Any]]) -> list[Measurement | None]:
        """Compile candidates in parallel (fills the backend's build cache); None where no pool exists."""
        if not self.pool or len(schedules) < 2:
            return [None] * len(schedules)
        results: list[Measurement | None] = [None] * len(schedules)
        todo = list(enumerate(schedules))
        busy: dict[int, tuple[int, float]] = {}  # pool slot -> (candidate, deadline)
        while todo or busy:
            for w, worker in enumerate(self.pool):
                if w not in busy and todo:
                    i, s = todo.pop(0)
                    worker.submit(CompileJob(kernel, s))
                    busy[w] = (i, self._capped(time.monotonic() + self.timeout_s * 3))
            wait_any([self.pool[w] for w in busy], Worker.POLL_S)
            for w in list(busy):
                i, deadline = busy[w]
                try:
                    reply = self.pool[w].try_recv()
                except WorkerLost as e:
                    results[i] = Measurement("compile_error", message=f"compiler {e}")
                    del busy[w]
                    continue
                if reply is not None:
                    results[i] = reply.outcomes[0]
                    del busy[w]
                elif time.monotonic() > deadline:
                    self.pool[w].kill()
                    results[i] = Measurement("timeout", message="compile timed out")
                    del busy[w]
                elif self.stop is not None and self.stop():
                    for w2 in busy:
                        self.pool[w2].kill()
                    raise Cancelled()
        return results

    # -- timing -------------------------------------------------------------
    def _budget(self, n: int, prep_s: float) -> float:
        p = self.plan
        per = p.warmup_s + p.cap_s * 1.5
        return self.timeout_s + prep_s + n * per

    def _capped(self, deadline: float) -> float:
        """``deadline``, or the end when that comes first: a slow compile or run spends the budget too."""
        return deadline if self.end is None else min(deadline, self.end)

    def _run(self, job: Any, n: int, prep_s: float) -> list[Measurement]:
        now = time.monotonic()
        try:
            reply = self.timer.call(job, max(0.01, self._capped(now + self._budget(n, prep_s)) - now), self.stop)
        except WorkerLost as e:
            return [Measurement(e.status, message=str(e)) for _ in range(n)]
        if reply.poisoned:
            self.timer.kill()
        return reply.outcomes

    def _paired(self, n: int) -> TimingPlan:
        """Paired comparisons need enough rounds for the sign test to speak."""
        if n < 2 or self.plan.min_reps >= PAIRED_MIN_REPS:
            return self.plan
        return replace(self.plan, min_reps=PAIRED_MIN_REPS)

    def _late(self, deadline: float | None, n: int = 1) -> bool:
        est = n * (self.plan.warmup_s + self.plan.cap_s * 1.2)
        return deadline is not None and time.monotonic() + est > deadline

    def measure(self, kernel: Kernel, schedules: list[dict[str, Any]], deadline: float | None = None,
                placement: Placement = ()) -> list[Measurement]:
        """Each candidate verified and timed on its own (a bad one only fails itself), on buffers placed as
        ``placement`` says; candidates that would start past ``deadline`` come back ``skipped``."""
        if self._late(deadline):
            return [Measurement("skipped") for _ in schedules]
        compiled = self.compile_many(kernel, schedules)
        out = []
        for s, c in zip(schedules, compiled):
            if c is not None and c.status != "ok":
                out.append(c)
            elif self._late(deadline):
                out.append(Measurement("skipped"))
            else:
                out.extend(self.compare(kernel, [s], placement))
        return out

    def compare(self, kernel: Kernel, schedules: list[dict[str, Any]], placement: Placement = ()) -> list[Measurement]:
        """Candidates that ran before, verified again and timed together, interleaved round by round."""
        job = KernelJob(kernel, schedules, self.seed, self._paired(len(schedules)), placement)
        return self._run(job, len(schedules), _prep_seconds(kernel))

    def measure_model(self, variants: list[tuple[Decisions, dict[str, dict[str, Any]]]],
                      prep_s: float = 5.0, deadline: float | None = None) -> list[Measurement]:
        if self._late(deadline, len(variants)):
            return [Measurement("skipped") for _ in variants]
        # a whole model is its own context: no flush (it was there so one kernel would see what a model leaves)
        plan = replace(self._paired(len(variants)), flush=False)
        return self._run(ModelJob(variants, self.seed, plan), len(variants), prep_s)

    def close(self) -> None:
        for w in [self.timer, *self.pool]:
            w.close()


def _prep_seconds(kernel: Kernel) -> float:
    """Time allowed for the numpy reference of a kernel, on top of the candidate's timeout."""
    return 0.5 + kernel.flops / 5e7
