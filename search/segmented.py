"""Tuning a model cut by the data (runtime/segments.py): the model runs once on seeded inputs of the sizes given,
segment by segment as a session runs it, and each static segment's graph, at the sizes that came out, is tuned in
turn. Winners go to the tuning cache by kernel signature, where a later session's segments find them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..frontend_onnx.dims import InputDecl, bind
from ..ir.graph import Graph
from ..values import Shape
from .report import FusionReport, TuneReport


def seeded_feeds(path: str | Path, shapes: Mapping[str, Shape] | None, seed: int) -> dict[str, np.ndarray]:
    """Inputs of the model at ``shapes``: floats standard normal, integers in [0, 2), bools fair."""
    from ..frontend_onnx.importer import read_model
    from ..runtime.feeds import model_io

    specs = model_io(read_model(path)[0])[0]
    given = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in (shapes or {}).items()}
    bound = bind([InputDecl(s.name, s.dims) for s in specs], given)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = bound.shapes[s.name]
        if s.dtype.kind == "f":
            feeds[s.name] = rng.standard_normal(shape, dtype=np.float32).astype(s.dtype)
        elif s.dtype.kind == "b":
            feeds[s.name] = rng.random(shape) < 0.5
        else:
            feeds[s.name] = rng.integers(0, 2, shape).astype(s.dtype)
    return feeds


def tune_segments(graphs: list[Graph], name: str, budget_s: float, start: float,
                  tune_one: Callable[[Graph, float, Callable[[TuneReport], None] | None], TuneReport],
                  progress: Callable[[TuneReport], None] | None = None) -> TuneReport:
    """Each graph tuned by ``tune_one(graph, seconds, progress)`` with an equal share of the time left (a segment
    that ends early leaves its time to the next), the reports merged into one for the model ``name``."""
    done: list[TuneReport] = []
    for i, graph in enumerate(graphs):
        left = budget_s - (time.monotonic() - start)
        show = None if progress is None else (lambda r: progress(merged(name, [*done, r], budget_s)))
        done.append(tune_one(graph, max(left / (len(graphs) - i), 1e-3), show))
        if done[-1].stopped == "interrupted":
            break
    report = merged(name, done, budget_s)
    report.notes.insert(0, f"the model is cut where the data decides a size: its {len(graphs)} static segments were "
                           "tuned in turn at the sizes a run on seeded inputs gave them (end-to-end times are the "
                           "segments' summed, host steps left out)")
    return report


def merged(name: str, reports: list[TuneReport], budget_s: float) -> TuneReport:
    """One report for the segments' reports: their kernels, trials and winners together, times summed."""
    first, last = reports[0], reports[-1]
    interrupted = any(r.stopped == "interrupted" for r in reports)
    notes = [f"segment {i + 1}: {n}" for i, r in enumerate(reports) for n in r.notes]
    return replace(first, model=name, budget_s=budget_s, elapsed_s=sum(r.elapsed_s for r in reports),
                   reserve_s=last.reserve_s, current=last.current,
                   stopped="interrupted" if interrupted else last.stopped,
                   kernels=[k for r in reports for k in r.kernels], fusion=_fusion([r.fusion for r in reports]),
                   e2e_default_ns=_total([r.e2e_default_ns for r in reports]),
                   e2e_tuned_ns=_total([r.e2e_tuned_ns for r in reports]),
                   winners_written=sum(r.winners_written for r in reports),
                   winners_pulled=sum(r.winners_pulled for r in reports), notes=notes)


def _total(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def _fusion(reports: list[FusionReport | None]) -> FusionReport | None:
    """The segments' fusion searches as one (the edges each leaves unfused are its own graph's: not listed)."""
    fs = [f for f in reports if f is not None]
    if not fs:
        return None
    statuses: dict[str, int] = {}
    for f in fs:
        for k, v in f.statuses.items():
            statuses[k] = statuses.get(k, 0) + v
    return FusionReport(sum(f.edges for f in fs), sum(f.trials for f in fs), statuses,
                        _total([f.default_ns for f in fs]), _total([f.best_ns for f in fs]))
