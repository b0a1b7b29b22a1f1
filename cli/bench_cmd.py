"""``luminal bench [MODEL]``: luminal against onnxruntime on the same inputs, with a regression gate."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..config import DEFAULT_ATOL, DEFAULT_RTOL, cache_of
from ..errors import LuminalError
from .common import SHAPE_OPT, console, emit_json, err_console, handle_errors, parse_shapes

DEFAULT_TIME_S = 5.0
DEFAULT_MAX_REGRESSION = 0.05


def _models(model: str | None, shape: list[str] | None, atol: float | None, rtol: float | None,
            config_path: str | None, config):
    """What to bench: MODEL (taking name, shapes and tolerances from the configuration when it lists the
    same file), else every configured model. Command-line options win."""
    from ..config import ModelConfig, models_of
    from .benchlib import BenchModel

    if model:
        path = Path(model)
        known = {m.path: m for m in config.models} if config else {}
        found = known.get(path.resolve()) if path.is_file() else None
        m = found or ModelConfig(path.stem, path, {}, config.atol if config else None,
                                 config.rtol if config else None)
        configured = [ModelConfig(m.name, path, parse_shapes(shape) if shape else m.shapes, m.atol, m.rtol)]
    elif shape:
        raise LuminalError("--shape needs a MODEL; configured models take their shapes from the config")
    else:
        configured = models_of(config, Path(config_path) if config_path else None)
    return [BenchModel(m.name, m.path, dict(m.shapes),
                       atol if atol is not None else (m.atol if m.atol is not None else DEFAULT_ATOL),
                       rtol if rtol is not None else (m.rtol if m.rtol is not None else DEFAULT_RTOL))
            for m in configured]


def _default_storage(cache: str | None) -> str | None:
    """The studies.db that `luminal tune` keeps next to the cache, when it exists."""
    from ..cache import default_cache_path
    from ..search.studies import default_storage

    url = default_storage(Path(cache) if cache else default_cache_path())
    return url if Path(url.removeprefix("sqlite:///")).is_file() else None


def _table(doc: dict) -> Table:
    confidence = doc["settings"]["confidence"]
    table = Table(title=f"luminal bench: {doc['settings']['backend']}, {doc['environment']['threads']} threads",
                  caption=f"speedup = peer median / luminal median, [{confidence:.0%} CI]")
    for col in ("model", "runtime", "median ms", "p10-p90 ms", "runs/s", "n", "speedup"):
        table.add_column(col, justify="left" if col in ("model", "runtime") else "right")
    for m in doc["models"]:
        if m["status"] != "ok":
            table.add_row(escape(m["name"]), "-", "[red]wrong outputs[/]", "", "", "", "")
            continue
        for name, r in m["runtimes"].items():
            s = m["speedup"].get(name)
            speed = f"{s['ratio']:.3g}x [{s['low']:.3g},{s['high']:.3g}]" if s else ""
            table.add_row(escape(m["name"]), name, f"{r['median_s'] * 1e3:.4g}",
                          f"{r['p10_s'] * 1e3:.3g}-{r['p90_s'] * 1e3:.3g}", f"{r['throughput_per_s']:.4g}",
                          str(r["runs"]), speed)
    return table


def register(app: typer.Typer) -> None:
    @app.command("bench")
    @handle_errors
    def bench(
        model: str = typer.Argument(None, help="The ONNX model; without it, every model of the project configuration."),
        shape: list[str] = SHAPE_OPT,
        backend: str = typer.Option(None, "--backend",
                                    help="auto, cuda, cpu, interpret or reference (default: config, else auto)."),
        cache: str = typer.Option(None, "--cache", help="Tuning cache to compile with (default: config, "
                                                        "$LUMINAL_CACHE, ~/.cache/luminal/tuning.db)."),
        against: str = typer.Option("onnxruntime", "--against",
                                    help="Peers, comma-separated: onnxruntime (same threads; CUDA EP on a GPU), "
                                         "torch (only where the onnx2torch converter is installed)."),
        runs: int = typer.Option(None, "--runs", help="Measure exactly N interleaved rounds."),
        time_s: float = typer.Option(None, "--time", help=f"Measure rounds for this many seconds per model "
                                                          f"(default {DEFAULT_TIME_S:g})."),
        warmup: float = typer.Option(1.0, "--warmup", help="Seconds of warm-up rounds before measuring."),
        threads: int = typer.Option(None, "--threads", help="CPU threads for every runtime (default: config, "
                                                            "else all cores)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the inputs, the round order and the bootstrap."),
        atol: float = typer.Option(None, "--atol", help=f"Parity tolerance (default: config, else {DEFAULT_ATOL:g})."),
        rtol: float = typer.Option(None, "--rtol", help=f"Parity tolerance (default: config, else {DEFAULT_RTOL:g})."),
        confidence: float = typer.Option(0.95, "--confidence", help="Level of the bootstrap intervals."),
        json_path: str = typer.Option(None, "--json", help="Write every sample and the environment as JSON "
                                                           "('-': stdout)."),
        html_path: str = typer.Option(None, "--html", help="Write a self-contained HTML report with plots."),
        baseline: str = typer.Option(None, "--baseline", help="A previous --json file to gate against "
                                                              "(default: config baseline, when it exists)."),
        max_regression: str = typer.Option(None, "--max-regression",
                                           help="Allowed slowdown, e.g. 5% (default: config, else 5%)."),
        storage: str = typer.Option(None, "--storage", help="Optuna storage of `luminal tune` (URL or SQLite "
                                                            "file) for the tuning progress in the report "
                                                            "(default with --html: studies.db by the cache)."),
        config_path: str = typer.Option(None, "--config", help="Use this pyproject.toml or luminal.toml."),
    ) -> None:
        """Time luminal against onnxruntime on the same seeded inputs, after checking that the outputs agree.

        Runtimes take turns in each round (seeded order), so drift hits all alike; the speedup comes with a
        paired bootstrap confidence interval. Exit 1 on wrong outputs, or on a regression beyond the noise
        (--baseline); 2 on bad input."""
        from ..config import BACKENDS, load_config, parse_fraction
        from .bench_gate import gate, read_bench_json
        from .benchlib import Settings, bench_model, new_document, parse_against, resolve_backend, sanitize

        config = load_config(path=config_path)
        models = _models(model, shape, atol, rtol, config_path, config)
        backend = backend or (config.backend if config and config.backend else "auto")
        if backend not in BACKENDS:
            raise LuminalError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
        if runs is not None and time_s is not None:
            raise LuminalError("give --runs or --time, not both")
        if runs is not None and runs < 2:
            raise LuminalError("--runs must be at least 2")
        if time_s is not None and not time_s > 0:
            raise LuminalError("--time must be positive")
        if not 0 < confidence < 1:
            raise LuminalError("--confidence must be between 0 and 1")
        if warmup < 0:
            raise LuminalError("--warmup must not be negative")
        if threads is not None and threads < 1:
            raise LuminalError("--threads must be at least 1")
        if threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(threads)  # read by OpenMP when luminal's kernels load
        threads = threads or (config.threads if config and config.threads else os.cpu_count() or 1)
        allowed = parse_fraction(max_regression, "--max-regression") if max_regression is not None else (
            config.max_regression if config and config.max_regression is not None else DEFAULT_MAX_REGRESSION)
        if baseline is None and config and config.baseline:
            if config.baseline.is_file():
                baseline = str(config.baseline)
            else:
                note = f"configured baseline {config.baseline} does not exist yet; not gated (write it with --json)"
                err_console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
        base_doc = read_bench_json(baseline) if baseline else None
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))

        settings = Settings(backend=resolve_backend(backend), against=parse_against(against), runs=runs,
                            time_s=None if runs is not None else (time_s or DEFAULT_TIME_S), warmup_s=warmup,
                            seed=seed, threads=threads,
                            cache=cache_of(cache, config),
                            confidence=confidence)
        doc = new_document(settings)
        if storage is None and html_path:
            storage = _default_storage(settings.cache)
        if storage:
            from .bench_tuning import tuning_progress

            doc["tuning"] = tuning_progress(storage)  # before the timings: a bad storage fails fast
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True) as progress:
            for m in models:
                task = progress.add_task(f"{m.name}: compiling", total=runs)
                step = lambda name, k, task=task: progress.update(task, description=f"{name}: rounds",  # noqa: E731
                                                                  completed=k)
                doc["models"].append(bench_model(m, settings, step))
                progress.remove_task(task)
        if base_doc is not None:
            results = gate(doc, base_doc, allowed, confidence=confidence, seed=seed)
            doc["regression"] = {"baseline": str(baseline), "max_regression": allowed,
                                 "results": [asdict(r) for r in results]}
        doc = sanitize(doc)
        if json_path:
            emit_json(doc, json_path)
        if html_path:
            from .bench_report import render_html

            Path(html_path).write_text(render_html(doc), encoding="utf-8")
        out = err_console if json_path == "-" else console
        out.print(_table(doc))
        failed = False
        for m in doc["models"]:
            for w in m["warnings"]:
                err_console.print(f"[yellow]warning:[/] {escape(m['name'] + ': ' + w)}", soft_wrap=True,
                                  highlight=False)
            if m["status"] != "ok":
                err_console.print(f"[bold red]error:[/] {escape(m['message'])}", soft_wrap=True, highlight=False)
                failed = True
        for r in (doc.get("regression") or {}).get("results", []):
            if r["failed"]:
                err_console.print(f"[bold red]regression:[/] {escape(r['message'])}", soft_wrap=True, highlight=False)
                failed = True
            else:
                out.print(f"baseline: {escape(r['message'])}", soft_wrap=True, highlight=False)
        if failed:
            raise typer.Exit(1)
