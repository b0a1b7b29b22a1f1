"""``tune``: search fusion decisions and kernel schedules on the device within a time budget.

Trial 0 of every study is the default. The budget goes to whichever task promises the largest
drop in model time per second (see scheduler.py); fusion plans are timed end to end with the
best schedules known so far. At the end the top finalists of each kernel are re-timed together,
winners go to the tuning cache, and the model is timed before and after.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache.fingerprint import backend_fingerprints
from ..cache.schema import STATUSES
from ..codegen.backend import with_threads
from ..codegen.kernel import Kernel
from ..codegen.partition import (
    Decisions,
    default_algorithms,
    fusible_edges,
    fusion_key,
    lower,
    offered_flags,
    winograd_convs,
)
from ..errors import LuminalError
from ..ir.graph import Graph, Op
from ..runtime.model import arena_offsets
from ..runtime.plan import plan_run
from ..values import format_duration
from .jobs import Placement
from .measure import Measurement, Measurer, refuse_untimed
from .pool import pull_winners
from .report import TuneReport
from .samplers import SPACE_ATTR, Transfer, make_sampler
from .scheduler import pick, step_seconds
from .space import FusionSpace, ScheduleSpace
from .stats import beats
from .studies import Liveness, default_storage, open_storage, open_study, study_name
from .tasks import FusionTask, KernelTask
from .timing import TimingPlan, last_level_cache_bytes
from .worker import Cancelled

if TYPE_CHECKING:
    import optuna

    from ..codegen.backend import Backend

FINAL_SHARE = 0.15  # at most this share of the budget is kept for the final re-timing
E2E_SHARE = 0.3  # and at most this share for the end-to-end check after it


@dataclass
class _Clock:
    start: float
    budget_s: float

    @property
    def deadline(self) -> float:
        return self.start + self.budget_s


class _Stop:
    """Set by Ctrl-C / SIGTERM: the run ends cleanly and keeps what it found."""

    def __init__(self) -> None:
        self.flag = False
        self.old: dict[int, Any] = {}

    def __call__(self) -> bool:
        return self.flag

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.flag and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.flag = True

    def restore(self) -> None:
        for sig, h in self.old.items():
            signal.signal(sig, h)


def _plan_for(budget_s: float, graph: Graph, backend: Backend) -> TimingPlan:
    # short budgets time each candidate for less; the warm-up and repeat floor stay
    cap = min(0.25, max(0.02, budget_s / 400))
    # a model whose weights fit in the CPU's last-level cache finds them there on every run, so its kernels
    # are timed warm; a bigger one streams each weight from memory, so they are timed after a flush
    weights = sum(n.attrs["value"].nbytes for n in graph.toposort() if n.op is Op.Constant)
    flush = backend.name == "cuda" or weights > last_level_cache_bytes()
    return TimingPlan(warmup_s=min(0.05, cap), cap_s=cap, flush=flush)


class Tuner:
    def __init__(self, graph: Graph, backend: Backend, budget_s: float, *, model_name: str = "model",
                 sampler: str = "gp", seed: int = 0, storage: str | None = None, cache: Any = None,
                 workers: int | None = None, timeout_s: float | None = None, plan: TimingPlan | None = None,
                 fusion: bool = True, threads: int | None = None,
                 progress: Callable[[TuneReport], None] | None = None, liveness: Liveness | None = None,
                 trials: int | None = None, patience: int | None = None):
        from ..cache import TuningCache

        refuse_untimed(backend)
        if budget_s <= 0:
            raise LuminalError("the tuning budget must be positive")
        if threads:  # the kernels' thread count: their default and the thread knob's choices, here and in workers
            backend = with_threads(backend, threads)
        self.clock = _Clock(time.monotonic(), budget_s)
        self.graph = graph
        self.backend = backend
        self.seed = seed
        self.progress = progress
        self.stop = _Stop()
        self.cache = cache if isinstance(cache, TuningCache) else TuningCache(cache)
        self.storage_url = storage or default_storage(self.cache.path)
        self.storage = open_storage(self.storage_url, liveness)
        self.device, self.toolchain = backend_fingerprints(backend)
        self.workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        self.batch = max(1, self.workers)
        self.plan = plan or _plan_for(budget_s, graph, backend)
        # seconds the end-to-end check of the default against the tuned model takes, at most, before a whole
        # model was measured (``_e2e_reserve``)
        self.e2e_s = 2 * (self.plan.warmup_s + self.plan.cap_s) * 1.3 + 1.0
        self.model_s = math.inf  # wall seconds of the quickest whole-model measurement (a fusion step's) so far
        # the loop's steps end here, so that the finalists and the end-to-end check keep their time
        self.loop_end = self.clock.deadline - max(min(FINAL_SHARE * budget_s, 2.0 + 0.05 * budget_s), self.e2e_s)
        self.timeout_s = timeout_s if timeout_s is not None else min(20.0, max(2.0, budget_s / 20))
        self.keep_default = False
        self.max_trials, self.patience = trials, patience
        self.report = TuneReport(model_name, backend.name, self.device.key, self.toolchain.key, sampler, seed,
                                 budget_s, self.storage.shown, str(self.cache.path),
                                 reserve_s=self.clock.deadline - self.loop_end, timeout_s=self.timeout_s)
        self.sampler = sampler
        # the gp samplers learn from the other kernels of this device and toolchain, read once per proposal for all
        self.transfer = Transfer(self.storage, f"-{self.device.key}-{self.toolchain.key}") if sampler == "gp" else None
        self.threads = threads
        self.model_name = model_name
        self.tasks: dict[str, KernelTask] = {}
        # what an untuned compile runs: the search starts there, and the tuned model must beat it end to end
        self.default_decisions = default_algorithms(graph)
        lowered, default = lower(graph, self.default_decisions)
        self.fusion_key = fusion_key(graph, default)  # its tuned decisions' key in the cache
        edges = fusible_edges(graph) if fusion else []
        convs = winograd_convs(graph) if fusion else []
        flags = offered_flags(graph) if fusion else []
        self.fusion: FusionTask | None = None
        if edges or convs or flags:
            space = FusionSpace(edges, convs, self.default_decisions, flags)
            smp, note = make_sampler(sampler, seed, space, "fusion")
            study = open_study(self.storage, study_name(self.fusion_key, self.device.key, self.toolchain.key),
                               smp)
            self.fusion = FusionTask(study, space, note, self.storage.heartbeats)
            if note:
                self.report.notes.append(note)
        self.decisions: Decisions = dict(self.default_decisions)
        self._plan_kernels(lowered, default)
        # seconds the numpy reference of the whole model may take, on top of a candidate's timeout
        self.model_prep_s = 2.0 + sum(t.kernel.flops * t.count for t in self.tasks.values()) / 2e7

    # -- tasks ----------------------------------------------------------------
    def _plan_kernels(self, graph: Graph, partitioned: list[Kernel]) -> None:
        """Kernel tasks for the graph's partition under the current decisions: weights are occurrence counts (of
        the kernels a compiled model launches: not the concatenations written in place)."""
        counts: dict[str, int] = {}
        kernels: dict[str, Kernel] = {}
        elision, launched, plan = plan_run(partitioned, {n.id for n in graph.outputs}, self.backend.threads())
        arena = arena_offsets(launched, plan, elision)
        placements: dict[str, Placement] = {}
        for k in launched:
            sig = k.signature
            counts[sig] = counts.get(sig, 0) + 1
            kernels.setdefault(sig, k)
            placements.setdefault(sig, tuple(arena.get(n) for n in (*k.input_nodes, *k.output_nodes)))
        for t in self.tasks.values():
            t.state.weight = counts.get(t.signature, 0)
            t.placement = placements.get(t.signature, t.placement)
        for sig, k in kernels.items():
            if sig in self.tasks:
                continue
            space = ScheduleSpace(self.backend, k)
            smp, note = make_sampler(self.sampler, self.seed + int(sig[:8], 16), space, f"{k.form} kernels",
                                     self.transfer)
            name = study_name(f"kernel-{sig}", self.device.key, self.toolchain.key)
            # its knobs join the study's attributes before its first trial: the other kernels' samplers learn from it
            attrs = {SPACE_ATTR: [space.signature, space.described]} if space.described is not None else {}
            opener = lambda name=name, smp=smp, attrs=attrs: open_study(self.storage, name, smp, attrs)
            self.tasks[sig] = KernelTask(k, sig, opener, space, counts[sig], note, self.storage.heartbeats,
                                         placements[sig])
            self.cache.record_kernel(sig, k.form, k.canonical(),
                                     {"full": list(k.full), "nodes": [list(s) for s in k.sources]}, self.model_name)
            if note and note not in self.report.notes:
                self.report.notes.append(note)

    def schedules(self) -> dict[str, dict[str, Any]]:
        return {sig: t.incumbent for sig, t in self.tasks.items() if t.incumbent is not None}

    # -- measuring ----------------------------------------------------------
    def _record(self, task: KernelTask, schedule: dict[str, Any], m: Measurement) -> None:
        if m.status in STATUSES:  # not "skipped"
            self.cache.record_trial(task.signature, self.device, self.toolchain, schedule, m.status,
                                    m.samples_ns or None)

    def _kernel_step(self, task: KernelTask, m: Measurer) -> None:
        t0 = time.monotonic()
        compare = lambda pts: m.compare(task.kernel, pts, task.placement)
        if task.state.trials == 0:
            task.enqueue_default()
            initial = [task.space.default]
            w = self.cache.best(task.signature, self.device, self.toolchain)
            for extra in ([w.config] if w else []) + [task.previous_best()]:
                if extra is not None and task.space.valid(extra) and extra not in initial:
                    initial.append(extra)
            results = m.measure(task.kernel, initial, placement=task.placement)
            for sched, r in zip(initial, results):
                self._record(task, sched, r)
                task.tell(None, sched, r)
                if sched is initial[0]:
                    task.set_default(r)
                task.consider(sched, r, compare)
            task.state.record(task.best_ns * task.count, time.monotonic() - t0, len(initial))
            return
        pending = task.ask(self.batch)
        if not pending:
            return
        scheds = [p for _, p in pending]
        results = m.measure(task.kernel, scheds, deadline=self.loop_end, placement=task.placement)
        for (trial, sched), r in zip(pending, results):
            self._record(task, sched, r)
            task.tell(trial, sched, r)
        for sched, r in zip(scheds, results):
            task.consider(sched, r, compare)
        task.state.record(task.best_ns * task.count, time.monotonic() - t0, len(pending))

    def _fusion_step(self, task: FusionTask, m: Measurer) -> None:
        t0 = time.monotonic()
        scheds = self.schedules()
        compare = lambda pts: m.measure_model([(d, scheds) for d in pts], self.model_prep_s)
        pending: Sequence[tuple[optuna.Trial | None, Any]]
        first = task.state.trials == 0
        if first:
            task.enqueue_default()
            pending = [(None, p) for p in task.space.starts]
        else:
            pending = task.ask(1)
        if not pending:
            return
        for i, (trial, dec) in enumerate(pending):
            t1 = time.monotonic()
            r = m.measure_model([(dec, scheds)], self.model_prep_s, deadline=self.loop_end)[0]
            if r.ok:
                self.model_s = min(self.model_s, time.monotonic() - t1)
            task.tell(trial, dec, r)
            if first and i == 0:
                task.set_default(r)
            if task.consider(dec, r, compare) and task.incumbent is not None:
                self.decisions = dict(task.incumbent)
                self._plan_kernels(*lower(self.graph, self.decisions))
        task.state.record(task.best_ns, time.monotonic() - t0, len(pending))

    def _e2e_reserve(self) -> float:
        """Seconds kept for the end-to-end check: two whole models, each as long as the quickest measured so far
        (loading a ResNet-50's kernels and verifying it took 5 s of a 4-minute tune, where the finalists left it
        2 s and the check timed out), at most E2E_SHARE of the budget."""
        measured = 2 * self.model_s if math.isfinite(self.model_s) else 0.0
        return max(self.e2e_s, min(measured, E2E_SHARE * self.clock.budget_s))

    def _finish(self, m: Measurer) -> None:
        """Re-time each kernel's finalists together, then the whole model before and after (its time is
        kept back from the finalists)."""
        final_deadline = self.clock.deadline - self._e2e_reserve()
        for task in sorted(self.tasks.values(), key=lambda t: -t.best_ns * t.count):
            pts = task.finalists()
            if len(pts) < 2 or task.state.weight == 0:
                continue
            need = len(pts) * (self.plan.warmup_s + self.plan.cap_s) * 1.3 + 0.2
            if time.monotonic() + need > final_deadline or self.stop():
                continue
            task.settle(pts, m.compare(task.kernel, pts, task.placement))
        if self.fusion is not None or self.schedules():
            # the check that guards every winner starts whenever the budget is not over (its time is kept back
            # above; where the steps before it overran, it ends within one measurement past the budget)
            if time.monotonic() < self.clock.deadline and not self.stop():
                before, after = m.measure_model([(self.default_decisions, {}), (self.decisions, self.schedules())],
                                                self.model_prep_s)
                self.report.e2e_default_ns = before.median_ns if before.ok else None
                self.report.e2e_tuned_ns = after.median_ns if after.ok else None
                if not before.ok:
                    self.report.notes.append(f"the default model was not timed end to end ({before.status}: "
                                             f"{before.message})")
                if not after.ok:
                    self.report.notes.append(f"the tuned model did not verify end to end ({after.status}: "
                                             f"{after.message}); its kernels keep their own verified winners")
                elif before.ok and beats(before.samples_ns, after.samples_ns):
                    # winners found kernel by kernel must not lose together: then the default stays
                    self.keep_default = True
                    self.report.notes.append(
                        f"end to end the tuned model was slower than the default beyond the noise "
                        f"({format_duration(after.median_ns / 1e9)} vs {format_duration(before.median_ns / 1e9)}): "
                        f"no winners written")
            elif not self.stop():
                self.report.notes.append("no time was left to time the model end to end before and after")

    def _write_winners(self) -> None:
        winners: list[tuple[str, KernelTask | FusionTask, Any]] = []
        if not self.keep_default:
            winners = [(t.signature, t, t.incumbent) for t in self.tasks.values()]
        f = self.fusion
        if f is not None and f.incumbent is not None and not self.keep_default:
            winners.append((self.fusion_key, f, f.config(f.incumbent)))
        n = 0
        for key, task, config in winners:
            if task.inc is None or not task.inc.ok:
                continue
            d = task.default_ns
            self.cache.propose_winner(key, self.device, self.toolchain, config, max(1, int(task.inc.median_ns)),
                                      None if d is None else int(d))
            n += 1
        self.report.winners_written = n

    def _snapshot(self) -> TuneReport:
        r = self.report
        r.elapsed_s = time.monotonic() - self.clock.start
        r.kernels = [t.report() for t in self.tasks.values() if t.state.weight > 0 or t.trials]
        for kr in r.kernels:
            kr.nodes = [list(s) for s in self.tasks[kr.signature].kernel.sources]
        r.fusion = self.fusion.report() if self.fusion is not None else None
        return r

    def _trials(self) -> int:
        return sum(t.trials for t in self.tasks.values()) + (self.fusion.trials if self.fusion is not None else 0)

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self._snapshot())

    # -- the loop -------------------------------------------------------------
    def run(self) -> TuneReport:
        self.stop.install()
        m = Measurer(self.backend, self.graph, workers=self.workers if self.workers > 1 else 0, plan=self.plan,
                     timeout_s=self.timeout_s, seed=self.seed, threads=self.threads, stop=self.stop,
                     end=self.clock.deadline)
        try:
            self.report.stopped = "budget"
            while True:
                if self.stop():
                    self.report.stopped = "interrupted"
                    break
                states = [t.state for t in self.tasks.values()]
                if self.fusion is not None:
                    states.append(self.fusion.state)
                if self.max_trials is not None and self._trials() >= self.max_trials:
                    self.report.stopped = "trials"
                    break
                st = pick(states, patience=self.patience)
                if st is None:
                    stale = self.patience is not None and any(s.stale >= self.patience for s in states)
                    self.report.stopped = "patience" if stale else "exhausted"
                    break
                end = min(self.loop_end, self.clock.deadline - self._e2e_reserve())
                if time.monotonic() + step_seconds(st, states, self.batch) > end:
                    break
                self.report.current = st.name
                try:
                    if self.fusion is not None and st is self.fusion.state:
                        self._fusion_step(self.fusion, m)
                    else:
                        self._kernel_step(self.tasks[st.name], m)
                except Cancelled:
                    self.report.stopped = "interrupted"
                    break
                self._tick()
            if not self.stop():
                try:
                    self._finish(m)
                except Cancelled:
                    self.report.stopped = "interrupted"
        finally:
            m.close()
            self.stop.restore()
            self._write_winners()
            self.storage.close()
        if self.storage.shared and not self.keep_default:
            # the pool's best verified winners on this device, whichever machine measured them
            self.report.winners_pulled = pull_winners(self.storage, self.cache, self.device, self.toolchain).written
        self._tick()
        return self._snapshot()


def tune(model: str | Path | Graph, backend: str | Backend = "auto", budget_s: float = 60.0, *,
         shapes: dict | None = None, sampler: str = "gp", seed: int = 0, storage: str | None = None, cache: Any = None,
         workers: int | None = None, progress: Callable[[TuneReport], None] | None = None,
         timeout_s: float | None = None, plan: TimingPlan | None = None, fusion: bool = True,
         threads: int | None = None, liveness: Liveness | None = None, trials: int | None = None,
         patience: int | None = None, max_memory: int | None = None) -> TuneReport:
    """Tune a model (an ONNX path or an IR Graph) on ``backend`` for ``budget_s`` seconds, the time it takes to load
    counted (``threads``: Tuner's); at most ``trials`` trials in all, and a kernel left after ``patience`` trials
    without a gain. A model file that needs more than ``max_memory`` bytes (None: the memory available) is
    refused."""
    start = time.monotonic()
    refuse_untimed(backend)
    if isinstance(backend, str):
        from ..codegen.backend import get_backend

        backend = get_backend(backend, threads)
    be: Backend = backend

    def run(graph: Graph, name: str, seconds: float, show: Callable[[TuneReport], None] | None) -> TuneReport:
        t0 = time.monotonic()
        tuner = Tuner(graph, be, seconds, model_name=name, sampler=sampler, seed=seed, storage=storage, cache=cache,
                      workers=workers, timeout_s=timeout_s, plan=plan, fusion=fusion, threads=threads, progress=show,
                      liveness=liveness, trials=trials, patience=patience)
        tuner.clock.start = t0  # setting the tuner up counts too
        tuner.report.budget_s = budget_s
        return tuner.run()

    if isinstance(model, Graph):
        graph, name = model, "graph"
    else:
        from ..frontend_onnx.loader import Unbound, load_model
        from ..frontend_onnx.registry import DataDependent

        name = Path(model).name
        try:
            # winners are stored per kernel shape: a dim taken as 1 would tune kernels no later compile asks for
            graph = load_model(model, shapes, Unbound.REFUSE, max_memory=max_memory).graph
        except DataDependent:  # cut by the data: its static segments, at the sizes a seeded run gives them
            return _tune_cut(model, name, shapes, seed, budget_s, start, run, progress)
    report = run(graph, name, max(budget_s - (time.monotonic() - start), 1e-3), progress)
    report.budget_s = budget_s
    report.elapsed_s = time.monotonic() - start
    report.shapes = _plain_shapes(shapes)
    return report


def _plain_shapes(shapes: dict | None) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (shapes or {}).items()}


def _tune_cut(model: str | Path, name: str, shapes: dict | None, seed: int, budget_s: float, start: float,
              run: Callable[[Graph, str, float, Callable[[TuneReport], None] | None], TuneReport],
              progress: Callable[[TuneReport], None] | None) -> TuneReport:
    from ..runtime.segments import segment_graphs
    from .segmented import seeded_feeds, tune_segments

    graphs = segment_graphs(model, seeded_feeds(model, shapes, seed))
    if not graphs:
        raise LuminalError(f"{name}: nothing to tune, every node runs on the host")
    report = tune_segments(graphs, name, budget_s, start,
                           lambda g, seconds, show: run(g, name, seconds, show), progress)
    report.elapsed_s = time.monotonic() - start
    report.shapes = _plain_shapes(shapes)
    return report
