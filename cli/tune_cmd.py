"""``luminal tune [MODEL] --budget 10m``: search fusion and schedules on the device, winners to the cache."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.live import Live
from rich.table import Table

from .common import CACHE_OPT, JSON_FILE_OPT, SHAPE_OPT, console, emit_json, fail, handle_errors, parse_shapes

MAX_ROWS = 20  # kernels shown, the slowest first


def _t(ns: float | None) -> str:
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _failed(statuses: dict[str, int]) -> int:
    return sum(v for s, v in statuses.items() if s != "ok")


def progress_table(report) -> Table:
    t = Table(title=f"tuning {report.model} on {report.backend}: {report.elapsed_s:.0f} of {report.budget_s:.0f} s, "
                    f"{report.trials} trials")
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


def final_table(reports) -> Table:
    t = Table(title="end-to-end latency (median)")
    for col in ("model", "trials", "before", "after", "speedup", "stopped"):
        t.add_column(col, justify="left" if col in ("model", "stopped") else "right")
    for r in reports:
        t.add_row(r.model, str(r.trials), _t(r.e2e_default_ns), _t(r.e2e_tuned_ns),
                  _x(r.e2e_default_ns, r.e2e_tuned_ns), r.stopped)
    return t


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @handle_errors
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
        from ..config import cache_of, load_config, models_of, parse_duration
        from ..search.samplers import SAMPLERS
        from ..search.tuner import tune

        if sampler not in SAMPLERS:
            fail(f"unknown sampler {sampler!r}; choose from {', '.join(SAMPLERS)}")
        if workers is not None and workers < 0:
            fail("--workers must be zero or more")
        config = load_config()
        if model is not None:
            jobs = [(model, parse_shapes(shape))]
        else:
            if shape:
                fail("--shape needs a MODEL; configured models take their shapes from the configuration")
            jobs = [(str(m.path), dict(m.shapes)) for m in models_of(config)]  # its LuminalError: one line, exit 2
        if budget is None and (config is None or config.budget is None):
            fail("--budget is required (e.g. --budget 10m), or set budget in [tool.luminal]")
        total = parse_duration(budget, "--budget") if budget is not None else config.budget
        if backend is None:
            backend = (config.backend if config and config.backend else None) or "auto"
            if backend in ("reference", "interpret"):
                console.print(f"[yellow]note:[/] the configured backend {backend!r} is never timed; tuning with auto")
                backend = "auto"
        if backend not in ("auto", "cpu", "cuda"):
            fail(f"cannot tune with backend {backend!r}: only auto, cpu and cuda are timed")
        cache_path = cache_of(cache, config)
        threads = config.threads if config else None

        reports = []
        quiet = json_path == "-"
        for path, shapes in jobs:
            if not Path(path).exists():
                fail(f"model {path} does not exist")
            live = None if quiet else Live(console=console, refresh_per_second=4, transient=False)

            def show(r, live=live):
                if live is not None:
                    live.update(progress_table(r))

            if live is not None:
                live.start()
            try:
                r = tune(path, backend, total / len(jobs), shapes=shapes, sampler=sampler, seed=seed,
                         storage=storage, cache=cache_path, workers=workers, progress=show, timeout_s=timeout,
                         fusion=not no_fusion, threads=threads)
            finally:
                if live is not None:
                    live.stop()
                    console.print()
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
