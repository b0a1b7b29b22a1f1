"""``luminal bench --trace``: the kernels of each run as a Chrome trace-event file (opens in Perfetto and
chrome://tracing), one span per kernel per run, named by the model nodes fused into it, as onnxruntime's profiler
names its spans by node."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..codegen.kernel import Kernel
from ..runtime.report import node_label, op_label

Span = tuple[int, int]  # (start, duration) in nanoseconds


def kernel_title(k: Kernel) -> str:
    """A kernel by the model nodes fused into it ("/layer1/conv/Conv +2 (Conv+BatchNormalization+Relu)"), else
    by its form and signature."""
    if not k.sources:
        return f"{k.form} {k.signature[:8]}"
    return f"{node_label(k.sources)} ({op_label(k.sources)})"


def trace_events(model: str, pid: int, kernels: Sequence[Kernel], runs: Sequence[Sequence[Span]],
                 origin_ns: int) -> list[dict[str, Any]]:
    """The events of one model: its process name, a span per run and within it one per kernel (times in
    microseconds from ``origin_ns``)."""
    us = lambda ns: (ns - origin_ns) / 1e3
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"luminal: {model}"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "kernels"}},
    ]
    for r, spans in enumerate(runs):
        if not spans:
            continue
        start, end = spans[0][0], spans[-1][0] + spans[-1][1]
        events.append({"name": f"run {r}", "cat": "run", "ph": "X", "ts": us(start), "dur": (end - start) / 1e3,
                       "pid": pid, "tid": 0, "args": {"run": r}})
        for i, (k, (t0, dur)) in enumerate(zip(kernels, spans)):
            events.append({"name": kernel_title(k), "cat": "kernel", "ph": "X", "ts": us(t0), "dur": dur / 1e3,
                           "pid": pid, "tid": 0,
                           "args": {"run": r, "kernel": i, "signature": k.signature, "form": str(k.form),
                                    "nodes": [name for name, _ in k.sources],
                                    "op_types": [op for _, op in k.sources]}})
    return events


@dataclass
class Trace:
    """The events of every model benched, each model a process, times from the first span's start."""

    events: list[dict[str, Any]] = field(default_factory=list)
    origin_ns: int | None = None
    models: int = 0

    def add(self, model: str, kernels: Sequence[Kernel], runs: Sequence[Sequence[Span]]) -> None:
        if self.origin_ns is None:
            self.origin_ns = min((spans[0][0] for spans in runs if spans), default=0)
        self.models += 1
        self.events += trace_events(model, self.models, kernels, runs, self.origin_ns)

    def write(self, path: str | Path) -> None:
        from .common import write_output

        write_output(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms"}) + "\n", str(path))
