"""``luminal tune [MODEL] --budget 10m``: search fusion and schedules on the device, winners to the cache."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.live import Live
from rich.table import Table

from ..config import Config, cache_of, load_config, resolve
from ..errors import LuminalError
from ..target import thread_count
from ..values import at_least, format_duration, parse_duration, seed_of
from .common import (
    CACHE_OPT,
    JSON_FILE_OPT,
    MAX_MEMORY_OPT,
    SHAPE_OPT,
    console,
    emit_json,
    err_console,
    handle_errors,
    max_memory_of,
    printable,
    shown,
)
from .project import backend_of, chosen_models

if TYPE_CHECKING:
    from ..search.report import KernelReport, TuneReport

MAX_ROWS = 20  # kernels shown, the slowest first
PLAIN_EVERY_S = 5.0  # seconds between progress lines when the output is not a terminal


def _t(ns: float | None) -> str:
    return format_duration(None if ns is None else ns / 1e9)


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _failed(statuses: dict[str, int]) -> int:
    return sum(v for s, v in statuses.items() if s not in ("ok", "timeout"))


def _kernel_name(k: KernelReport) -> str:
    from ..runtime.report import node_label, op_label

    return f"{node_label(k.nodes, 40)} ({op_label(k.nodes)})" if k.nodes else k.signature[:10]


def estimated_speedup(report: TuneReport) -> float | None:
    """The model's kernels, default against best so far, weighted by how often each runs (an estimate: the
    end-to-end timing at the end says what it is)."""
    timed = [k for k in report.kernels if k.default_ns and k.best_ns]
    best = sum(k.best_ns * k.count for k in timed if k.best_ns)
    return sum(k.default_ns * k.count for k in timed if k.default_ns) / best if best else None


def _clock(report: TuneReport) -> str:
    return (f"{format_duration(report.elapsed_s)} of {format_duration(report.budget_s)} (the last "
            f"{format_duration(report.reserve_s)} kept for the final timing)")


def progress_line(report: TuneReport) -> str:
    """One line of progress for a log: elapsed of the budget, trials, the best estimated speedup so far and the
    kernel worked on (names from the model, shown as written: print it without markup)."""
    speedup = estimated_speedup(report)
    n = report.trials
    line = (f"tuning {printable(report.model)}: {_clock(report)}, {n} trial{'' if n == 1 else 's'}, best "
            f"{'-' if speedup is None else f'{speedup:.2f}x'} (estimated)")
    current = next((k for k in report.kernels if k.signature == report.current), None)
    if current is not None:
        line += f", on {printable(_kernel_name(current))}"
    elif report.current == "fusion":
        line += ", on the fusion plan"
    return line


def progress_table(report: TuneReport) -> Table:
    t = Table(title=f"tuning {shown(report.model)} on {report.backend}: {_clock(report)}, {report.trials} trials")
    for col in ("kernel", "form", "count", "trials", "failed", "timeouts", "default", "best", "speedup"):
        t.add_column(col, justify="left" if col in ("kernel", "form") else "right")
    ranked = sorted(report.kernels, key=lambda k: -(k.best_ns or 0) * k.count)
    for k in ranked[:MAX_ROWS]:
        t.add_row(shown(_kernel_name(k)), k.form, str(k.count), str(k.trials), str(_failed(k.statuses)),
                  str(k.statuses.get("timeout", 0)), _t(k.default_ns), _t(k.best_ns), _x(k.default_ns, k.best_ns))
    if len(ranked) > MAX_ROWS:
        rest = ranked[MAX_ROWS:]
        t.add_row(f"{len(rest)} more", "", str(sum(k.count for k in rest)), str(sum(k.trials for k in rest)),
                  str(sum(_failed(k.statuses) for k in rest)), str(sum(k.statuses.get("timeout", 0) for k in rest)),
                  "", "", "")
    f = report.fusion
    if f is not None:
        plan = (f"{f.edges} edges" + (f", winograd {len(f.winograd)}/{f.convs}" if f.convs else "")
                + (f", channels-last {len(f.channels_last)}/{f.layouts}" if f.layouts else "")
                + (f", image by image {len(f.by_image)}/{f.images}" if f.images else ""))
        t.add_row("fusion", plan, "1", str(f.trials), str(_failed(f.statuses)),
                  str(f.statuses.get("timeout", 0)), _t(f.default_ns), _t(f.best_ns), _x(f.default_ns, f.best_ns))
    return t


def final_table(reports: list[TuneReport]) -> Table:
    t = Table(title="end-to-end latency (median)")
    for col in ("model", "trials", "before", "after", "speedup", "stopped"):
        t.add_column(col, justify="left" if col in ("model", "stopped") else "right")
    for r in reports:
        t.add_row(shown(r.model), str(r.trials), _t(r.e2e_default_ns), _t(r.e2e_tuned_ns),
                  _x(r.e2e_default_ns, r.e2e_tuned_ns), r.stopped)
    return t


def notes_of(report: TuneReport) -> list[str]:
    """What a person should know about a run besides its table: the tuner's notes and the candidates that ran
    out of time."""
    notes = list(report.notes)
    timeouts = report.statuses.get("timeout", 0)
    if timeouts:
        notes.append(f"{timeouts} candidate{'s' if timeouts > 1 else ''} timed out (each may take "
                     f"{format_duration(report.timeout_s)}; --timeout sets it)")
    return notes


def tune_cmd(
    model: str = typer.Argument(None, help="The ONNX model; without it, the models in \\[tool.luminal]."),
    budget: str = typer.Option(None, "--budget", help="Time to spend: 30s, 10m, 1h (split across models; loading "
                                                      "and compiling count)."),
    backend: str = typer.Option(None, "--backend", help="auto, cpu or cuda."),
    shape: list[str] = SHAPE_OPT,
    trials: int = typer.Option(None, "--trials", help="Stop after N trials per model."),
    patience: int = typer.Option(None, "--patience", help="Leave a kernel after N trials without a gain."),
    sampler: str = typer.Option("gp", "--sampler", help="gp (a Gaussian-process cost model over the valid "
                                "points that learns across kernels), tpe, random, cmaes or grid."),
    seed: int = typer.Option(0, "--seed", help="Seed of the samplers and of the verification inputs."),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: studies.db by the cache)."),
    workers: int = typer.Option(None, "--workers", help="Compile workers (default: min(4, cores))."),
    cache: str = CACHE_OPT,
    timeout: float = typer.Option(None, "--timeout", help="Seconds before a candidate counts as hung "
                                                          "(default: budget/20, between 2 and 20)."),
    no_fusion: bool = typer.Option(False, "--no-fusion", help="Keep the default fusion; tune schedules only."),
    json_path: str = JSON_FILE_OPT,
    max_memory: str = MAX_MEMORY_OPT,
) -> None:
    """Tune fusion decisions and kernel schedules on this machine; winners go to the tuning cache.

    On a terminal a live table shows the progress, elsewhere (a log) one line every few seconds. Ctrl-C stops:
    what was found is saved, and the exit code is 130."""
    from ..search.samplers import SAMPLERS
    from ..search.studies import checked_url
    from ..search.tuner import tune

    if sampler not in SAMPLERS:
        raise LuminalError(f"--sampler: expected one of {', '.join(SAMPLERS)}, got {sampler!r}")
    thread_count(workers, "--workers")
    seed_of(seed)
    if storage is not None:
        checked_url(storage)
    at_least(trials, "--trials")
    at_least(patience, "--patience")
    if timeout is not None:
        parse_duration(timeout, "--timeout")
    limit = max_memory_of(max_memory)
    config = load_config()
    models = chosen_models(model, shape, config)
    total = _budget(budget, config)
    backend = _timed_backend(backend, config)
    quiet = json_path == "-"
    reports: list[TuneReport] = []
    for m in models:
        with _progress(quiet) as show:
            r = tune(str(m.path), backend, total / len(models), shapes=dict(m.shapes), sampler=sampler, seed=seed,
                     storage=storage, cache=cache_of(cache, config), workers=workers, progress=show,
                     timeout_s=timeout, fusion=not no_fusion, threads=None if config is None else config.threads,
                     trials=trials, patience=patience, max_memory=limit)
        reports.append(r)
        if not quiet:
            for note in notes_of(r):
                console.print(f"[yellow]note:[/] {shown(note)}", soft_wrap=True)
        if r.stopped == "interrupted":
            break
    if not quiet:
        console.print(final_table(reports))
        console.print(f"winners in {shown(reports[-1].cache)}; studies in {shown(reports[-1].storage)}",
                      soft_wrap=True)
    if json_path:
        emit_json({"models": [r.to_json() for r in reports]}, json_path)
    if reports[-1].stopped == "interrupted":
        err_console.print("interrupted: the winners found so far are saved", highlight=False)
        raise typer.Exit(130)


def _budget(budget: str | None, config: Config | None) -> float:
    """Seconds to spend on all the models: --budget, else the configured budget; one of them is required."""
    seconds = resolve(None if budget is None else parse_duration(budget, "--budget"), config, lambda c: c.budget,
                      None)
    if seconds is None:
        raise LuminalError("--budget is required (e.g. --budget 10m), or set budget in [tool.luminal]")
    return seconds


def _timed_backend(backend: str | None, config: Config | None) -> str:
    """--backend, else the configured one, else auto; a configured backend that is never timed is auto."""
    configured = backend is None
    backend = backend_of(backend, config, "auto")  # refuses what is no backend at all
    if configured and backend in ("reference", "interpret"):
        console.print(f"[yellow]note:[/] the configured backend {backend!r} is never timed; tuning with auto")
        backend = "auto"
    if backend not in ("auto", "cpu", "cuda"):
        raise LuminalError(f"cannot tune with backend {backend!r}: only auto, cpu and cuda are timed")
    return backend


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[TuneReport], None]]:
    """One model's progress, from its first report on (a model refused while it loads leaves no empty table behind):
    on a terminal a live table; elsewhere a line every PLAIN_EVERY_S seconds and one at the end; nothing when
    ``quiet``."""
    if quiet:
        yield lambda report: None
        return
    if console.is_terminal:
        with _live() as table:
            yield table
        return
    with _lines() as lines:
        yield lines


@contextmanager
def _lines() -> Iterator[Callable[[TuneReport], None]]:
    """A line every PLAIN_EVERY_S seconds, and the last report's line at the end (each line once)."""
    last: list[TuneReport] = []
    printed_at, printed = [-math.inf], [""]

    def line(report: TuneReport) -> None:
        text = progress_line(report)
        if text != printed[0]:
            console.print(text, markup=False, highlight=False, soft_wrap=True)
            console.file.flush()
        printed[0] = text

    def show(report: TuneReport) -> None:
        last[:] = [report]
        if time.monotonic() - printed_at[0] >= PLAIN_EVERY_S:
            printed_at[0] = time.monotonic()
            line(report)

    yield show
    if last:
        line(last[0])


@contextmanager
def _live() -> Iterator[Callable[[TuneReport], None]]:
    live = Live(console=console, refresh_per_second=4, transient=False)
    started = False

    def show(report: TuneReport) -> None:
        nonlocal started
        if not started:
            live.start()
            started = True
        live.update(progress_table(report))

    try:
        yield show
    finally:
        if started:
            live.stop()
            console.print()


def register(app: typer.Typer) -> None:
    app.command("tune")(handle_errors(tune_cmd))
