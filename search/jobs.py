"""What the worker processes do: compile a candidate, verify and time kernels, time whole models.

Everything here runs inside a worker; a crash or a hang takes only the worker down.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen.kernel import Kernel
from ..codegen.kernel_eval import run_kernel
from ..codegen.partition import Decisions
from ..ir.dtypes import DType
from ..ir.graph import Graph
from .timing import CpuTimer, CudaTimer, TimingPlan, interleaved, make_timer
from .verify import mismatch, random_inputs

if TYPE_CHECKING:
    from ..codegen.backend import Backend



@dataclass
class Measurement:
    """One candidate's result: its status, its timing samples (ok only) and why it failed."""

    status: str
    samples_ns: list[int] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples_ns)

    @property
    def median_ns(self) -> float:
        return float(np.median(self.samples_ns)) if self.samples_ns else float("inf")


@dataclass
class CompileJob:
    kernel: Kernel
    schedule: dict[str, Any]


# where a compiled model's arena puts each buffer of a kernel (inputs then outputs): its byte offset into the
# arena, None where the model keeps it elsewhere (a weight, the model's input or output); () where no model says
Placement = tuple[int | None, ...]


@dataclass
class KernelJob:
    """Verify each schedule against the reference, then time the good ones interleaved, all on one set of
    buffers placed as ``placement`` says."""

    kernel: Kernel
    schedules: list[dict[str, Any]]
    seed: int
    plan: TimingPlan
    placement: Placement = ()


@dataclass
class ModelJob:
    """Verify and time whole-model variants, each a (decisions, schedules by signature) pair."""

    variants: list[tuple[Decisions, dict[str, dict[str, Any]]]]
    seed: int
    plan: TimingPlan


@dataclass
class Reply:
    outcomes: list[Measurement]
    poisoned: bool = False  # the device context is unusable: replace the worker


def _key(kernel: Kernel, schedule: dict[str, Any]) -> str:
    # kernels of one signature may read different windows, which a compiled kernel binds (its shifts)
    return kernel.signature + json.dumps([kernel.windowed[1], schedule], sort_keys=True, default=str)


def _sentinel(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """Output buffers start as garbage so a kernel that writes nothing cannot pass."""
    if dtype.is_float:
        return np.full(shape, np.nan, dtype.np)
    if dtype is DType.bool:
        return np.ones(shape, dtype.np)
    return np.full(shape, -77, dtype.np)


class JobRunner:
    """State kept by one worker process: the backend, compiled candidates, prepared inputs."""

    MAX_COMPILED = 512
    MAX_PREPARED = 8

    def __init__(self, backend: Backend, graph: Graph | None):
        self.backend = backend
        self.graph = graph
        self.compiled: dict[str, Any] = {}
        self.prepared: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self.placed: dict[tuple[str, Placement], list[Any]] = {}
        self.model_ref: tuple[int, list[np.ndarray], list[np.ndarray]] | None = None
        self._timer: CpuTimer | CudaTimer | None = None

    @property
    def timer(self) -> CpuTimer | CudaTimer:
        if self._timer is None:
            self._timer = make_timer(self.backend)
        return self._timer

    @property
    def device(self) -> bool:
        return self.backend.name == "cuda"

    def handle(self, job: Any) -> Reply:
        if isinstance(job, CompileJob):
            return Reply([self._compile_only(job)])
        if isinstance(job, KernelJob):
            return self._kernel(job)
        if isinstance(job, ModelJob):
            return self._model(job)
        raise TypeError(type(job).__name__)

    def _compile(self, kernel: Kernel, schedule: dict[str, Any]) -> Any:
        key = _key(kernel, schedule)
        if key not in self.compiled:
            if len(self.compiled) >= self.MAX_COMPILED:
                self.compiled.pop(next(iter(self.compiled)))
            self.compiled[key] = self.backend.compile([(kernel, schedule)])[0]
        return self.compiled[key]

    def _compile_only(self, job: CompileJob) -> Measurement:
        t0 = time.perf_counter_ns()
        try:
            self.backend.compile([(job.kernel, job.schedule)])
        except Exception as e:
            return Measurement("compile_error", message=_one_line(e))
        return Measurement("ok", [time.perf_counter_ns() - t0])

    def _prepare(self, kernel: Kernel, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The kernel's random inputs and the reference's outputs for them."""
        sig = kernel.signature
        if sig not in self.prepared:
            arrays = random_inputs([(b.shape, b.dtype) for b in kernel.inputs], seed)
            expected = run_kernel(kernel, arrays)
            if len(self.prepared) >= self.MAX_PREPARED:
                self.prepared.pop(next(iter(self.prepared)))
            self.prepared[sig] = (arrays, expected)
        return self.prepared[sig]

    def _buffers(self, kernel: Kernel, seed: int, placement: Placement) -> list[Any]:
        """The kernel's buffers, its inputs holding the prepared values, then its outputs, each placed as
        ``placement`` says (``Backend.empty_at``): one set for every candidate of the kernel, since
        where its buffers lie against each other moves a memory-bound kernel's time by a fifth."""
        key = (kernel.signature, placement)
        if key not in self.placed:
            arrays, _ = self._prepare(kernel, seed)
            specs = [(b.shape, b.dtype.np) for b in kernel.inputs] + [(b.shape, b.dtype.np) for _, b in kernel.outputs]
            be = self.backend
            bufs = [be.empty(shape, dtype) if offset is None else be.empty_at(shape, dtype, offset)
                    for (shape, dtype), offset in zip(specs, placement or [None] * len(specs))]
            for buf, a in zip(bufs, arrays):
                self.backend.write(buf, a)
            if len(self.placed) >= self.MAX_PREPARED:
                self.placed.pop(next(iter(self.placed)))
            self.placed[key] = bufs
        return self.placed[key]

    def _kernel(self, job: KernelJob) -> Reply:
        k = job.kernel
        _, expected = self._prepare(k, job.seed)
        args = self._buffers(k, job.seed, job.placement)
        outs = args[len(k.inputs):]
        reduce_len = int(np.prod([k.full[a] for a in k.reduce_axes])) if k.reduce_axes else 1
        outcomes: list[Measurement] = []
        runs = []
        for sched in job.schedules:
            try:
                fn = self._compile(k, sched)
            except Exception as e:
                outcomes.append(Measurement("compile_error", message=_one_line(e)))
                continue
            try:
                for o, (_, b) in zip(outs, k.outputs):
                    self.backend.write(o, _sentinel(b.shape, b.dtype))
                fn(args)
                self.backend.synchronize()
                got = [self.backend.to_numpy(o) for o in outs]
            except Exception as e:
                outcomes.append(Measurement("crash", message=_one_line(e)))
                if self.device:
                    return _lost(outcomes, len(job.schedules))
                continue
            bad = next((m for (_, b), g, e in zip(k.outputs, got, expected)
                        if (m := mismatch(g, e, b.dtype, reduce_len))), None)
            if bad:
                outcomes.append(Measurement("wrong_result", message=bad))
                continue
            outcomes.append(Measurement("ok"))
            # timed through the backend's launcher, as a compiled model runs it (the cpu backend's keeps the
            # OpenMP workers off the caller's CPU there)
            runs.append((len(outcomes) - 1, self.backend.launcher([fn], [args])))
        return self._time(outcomes, runs, job.plan)

    def _time(self, outcomes: list[Measurement], runs: list, plan: TimingPlan) -> Reply:
        if not runs:
            return Reply(outcomes)
        try:
            samples = interleaved(self.timer, [r for _, r in runs], plan, self.backend.synchronize)
        except Exception as e:
            for i, _ in runs:
                outcomes[i] = Measurement("crash", message=_one_line(e))
            return Reply(outcomes, poisoned=self.device)
        for (i, _), s in zip(runs, samples):
            outcomes[i].samples_ns = s
        return Reply(outcomes)

    def _model(self, job: ModelJob) -> Reply:
        from ..ir.reference import run
        from .endtoend import ModelRunner

        g = self.graph
        if g is None:
            raise RuntimeError("this worker has no model")
        if self.model_ref is None or self.model_ref[0] != job.seed:
            feeds = random_inputs([(n.shape, n.dtype) for n in g.inputs], job.seed)
            expected = run(g, dict(zip(g.input_names, feeds)))
            self.model_ref = (job.seed, feeds, [np.asarray(e) for e in expected])
        _, feeds, expected = self.model_ref
        outcomes: list[Measurement] = []
        runs = []
        for decisions, schedules in job.variants:
            try:
                runner = ModelRunner(g, self.backend, decisions, schedules, self._compile)
                runner.feed(feeds)
            except Exception as e:
                outcomes.append(Measurement("compile_error", message=_one_line(e)))
                continue
            try:
                runner()
                self.backend.synchronize()
                got = runner.outputs()
            except Exception as e:
                outcomes.append(Measurement("crash", message=_one_line(e)))
                if self.device:
                    return _lost(outcomes, len(job.variants))
                continue
            bad = next((m for n, a, e in zip(g.outputs, got, expected) if (m := mismatch(a, e, n.dtype, 64))), None)
            outcomes.append(Measurement("wrong_result", message=bad) if bad else Measurement("ok"))
            if not bad:
                runs.append((len(outcomes) - 1, runner))
        return self._time(outcomes, runs, job.plan)


def _lost(outcomes: list[Measurement], n: int) -> Reply:
    """The device context is unusable: the candidates not run yet crash with it (one outcome per candidate)."""
    rest = [Measurement("crash", message="device context lost") for _ in range(n - len(outcomes))]
    return Reply(outcomes + rest, poisoned=True)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    msg = f"{type(e).__name__}: {text[0] if text else ''}".strip()
    if os.environ.get("LUMINAL_DEBUG"):
        msg += "\n" + traceback.format_exc()
    return msg[:500]
