"""``luminal tune [MODEL] --budget 10m``: search fusion and schedules on the device, winners to the cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.live import Live
from rich.table import Table

from ..config import Config, cache_of, load_config, resolve
from ..errors import LuminalError
from ..values import format_duration, parse_duration
from .common import CACHE_OPT, JSON_FILE_OPT, SHAPE_OPT, console, emit_json, handle_errors
from .project import backend_of, chosen_models

if TYPE_CHECKING:
    from ..search.report import TuneReport

MAX_ROWS = 20  # kernels shown, the slowest first


def _t(ns: float | None) -> str:
    return format_duration(None if ns is None else ns / 1e9)


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _failed(statuses: dict[str, int]) -> int:
    return sum(v for s, v in statuses.items() if s != "ok")


def progress_table(report: TuneReport) -> Table:
    t = Table(title=f"tuning {report.model} on {report.backend}: {format_duration(report.elapsed_s)} of "
                    f"{format_duration(report.budget_s)}, {report.trials} trials")
    for col in ("kernel", "form", "count", "trials", "failed", "default", "best", "speedup"):
        t.add_column(col, justify="left" if col in ("kernel", "form") else "right")
    ranked = sorted(report.kernels, key=lambda k: -(k.best_ns or 0) * k.count)
    for k in ranked[:MAX_ROWS]:
        t.add_row(k.signature[:10], k.form, str(k.count), str(k.trials), str(_failed(k.statuses)), _t(k.default_ns),
                  _t(k.best_ns), _x(k.default_ns, k.best_ns))
    if len(ranked) > MAX_ROWS:
        rest = ranked[MAX_ROWS:]
        t.add_row(f"{len(rest)} more", "", str(sum(k.count for k in rest)), str(sum(k.trials for k in rest)),
                  str(sum(_failed(k.statuses) for k in rest)), "", "", "")
    f = report.fusion
    if f is not None:
        t.add_row("fusion", f"{f.edges} edges", "1", str(f.trials), str(_failed(f.statuses)), _t(f.default_ns),
                  _t(f.best_ns), _x(f.default_ns, f.best_ns))
    return t


def final_table(reports: list[TuneReport]) -> Table:
    t = Table(title="end-to-end latency (median)")
    for col in ("model", "trials", "before", "after", "speedup", "stopped"):
        t.add_column(col, justify="left" if col in ("model", "stopped") else "right")
    for r in reports:
        t.add_row(r.model, str(r.trials), _t(r.e2e_default_ns), _t(r.e2e_tuned_ns),
                  _x(r.e2e_default_ns, r.e2e_tuned_ns), r.stopped)
    return t


def tune_cmd(
    model: str = typer.Argument(None, help="The ONNX model; without it, the models in [tool.luminal]."),
    budget: str = typer.Option(None, "--budget", help="Time to spend: 30s, 10m, 1h (split across models)."),
    backend: str = typer.Option(None, "--backend", help="auto, cpu or cuda."),
    shape: list[str] = SHAPE_OPT,
    sampler: str = typer.Option("gp", "--sampler", help="gp (a Gaussian-process cost model over the valid "
                                "points that learns across kernels), tpe, random, cmaes or grid."),
    seed: int = typer.Option(0, "--seed", help="Seed of the samplers and of the verification inputs."),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: studies.db by the cache)."),
    workers: int = typer.Option(None, "--workers", help="Compile workers (default: min(4, cores))."),
    cache: str = CACHE_OPT,
    timeout: float = typer.Option(None, "--timeout", help="Seconds before a candidate counts as hung."),
    no_fusion: bool = typer.Option(False, "--no-fusion", help="Keep the default fusion; tune schedules only."),
    json_path: str = JSON_FILE_OPT,
) -> None:
    """Tune fusion decisions and kernel schedules on this machine; winners go to the tuning cache."""
    from ..search.samplers import SAMPLERS
    from ..search.tuner import tune

    if sampler not in SAMPLERS:
        raise LuminalError(f"unknown sampler {sampler!r}; choose from {', '.join(SAMPLERS)}")
    if workers is not None and workers < 0:
        raise LuminalError("--workers must be zero or more")
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
                     timeout_s=timeout, fusion=not no_fusion, threads=None if config is None else config.threads)
        reports.append(r)
        if not quiet:
            for note in r.notes:
                console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
        if r.stopped == "interrupted":
            break
    if not quiet:
        console.print(final_table(reports))
        console.print(f"winners in {reports[-1].cache}; studies in {reports[-1].storage}", soft_wrap=True)
    if json_path:
        emit_json({"models": [r.to_json() for r in reports]}, json_path)


def _budget(budget: str | None, config: Config | None) -> float:
    """Seconds to spend on all the models: --budget, else the configured budget; one of them is required."""
    seconds = resolve(None if budget is None else parse_duration(budget, "--budget"), config, lambda c: c.budget,
                      None)
    if seconds is None:
        raise LuminalError("--budget is required (e.g. --budget 10m), or set budget in [tool.luminal]")
    return seconds


def _timed_backend(backend: str | None, config: Config | None) -> str:
    """--backend, else the configured one, else auto; a configured backend that is never timed is auto."""
    if backend is None:
        backend = backend_of(None, config, "auto")
        if backend in ("reference", "interpret"):
            console.print(f"[yellow]note:[/] the configured backend {backend!r} is never timed; tuning with auto")
            backend = "auto"
    if backend not in ("auto", "cpu", "cuda"):
        raise LuminalError(f"cannot tune with backend {backend!r}: only auto, cpu and cuda are timed")
    return backend


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[TuneReport], None]]:
    """The live progress table of one model's tuning, shown from its first report on (a model refused while it
    loads leaves no empty table behind); nothing when ``quiet``."""
    live = None if quiet else Live(console=console, refresh_per_second=4, transient=False)
    started = False

    def show(report: TuneReport) -> None:
        nonlocal started
        if live is None:
            return
        if not started:
            live.start()
            started = True
        live.update(progress_table(report))

    try:
        yield show
    finally:
        if live is not None and started:
            live.stop()
            console.print()


def register(app: typer.Typer) -> None:
    app.command("tune")(handle_errors(tune_cmd))
