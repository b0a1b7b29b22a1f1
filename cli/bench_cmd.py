"""``luminal bench [MODEL]``: luminal against onnxruntime on the same inputs, with a regression gate."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..config import DEFAULT_ATOL, DEFAULT_RTOL, Config, cache_of, load_config, resolve
from ..errors import LuminalError
from ..target import thread_count
from ..values import (
    at_least,
    at_most,
    format_duration,
    format_fixed,
    non_negative,
    parse_duration,
    parse_fraction,
    seed_of,
)
from .common import (
    MAX_MEMORY_OPT,
    SHAPE_OPT,
    console,
    emit_json,
    err_console,
    handle_errors,
    max_memory_of,
    one_stdout,
    shown,
    write_output,
)
from .project import Job, backend_of, jobs

if TYPE_CHECKING:
    from .bench_trace import Trace
    from .benchlib import Settings

DEFAULT_TIME_S = 5.0
DEFAULT_MAX_REGRESSION = 0.05
MAX_RUNS = 1_000_000  # rounds; every sample is kept in the report
MAX_TIME_S = 86400.0  # of measuring, or of warming up, per model


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
            table.add_row(shown(m["name"]), "-", "[red]wrong outputs[/]", "", "", "", "")
            continue
        for name, r in m["runtimes"].items():
            s = m["speedup"].get(name)
            speed = f"{s['ratio']:.3g}x [{s['low']:.3g},{s['high']:.3g}]" if s else ""
            table.add_row(shown(m["name"]), name, format_fixed(r["median_s"] * 1e3, 4),
                          f"{format_fixed(r['p10_s'] * 1e3)}-{format_fixed(r['p90_s'] * 1e3)}",
                          format_fixed(r["throughput_per_s"], 4), str(r["runs"]), speed)
        for name in m.get("skipped", {}):  # why: in a note below the table
            table.add_row(shown(m["name"]), name, "[yellow]skipped[/]", "", "", "", "")
    return table


KERNEL_ROWS = 10  # the slowest kernels shown per model


def _kernel_table(m: dict) -> Table:
    """A model's slowest kernels, named after the model nodes fused into them."""
    kernels = sorted(m["kernels"], key=lambda k: -k["seconds"])
    total = sum(k["seconds"] for k in kernels) or 1.0
    table = Table(title=f"{shown(m['name'])}: slowest kernels of {len(kernels)} (luminal)",
                  title_justify="left")
    for col in ("kernel", "form", "time", "share"):
        table.add_column(col, justify="left" if col in ("kernel", "form") else "right")
    for k in kernels[:KERNEL_ROWS]:
        table.add_row(shown(k["name"]), k.get("form", ""), format_duration(k["seconds"]),
                      f"{k['seconds'] / total:.0%}")
    return table


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
    atol: float = typer.Option(None, "--atol", help=f"Parity tolerance, times an output's largest magnitude past 1 "
                                                     f"(default: config, else {DEFAULT_ATOL:g})."),
    rtol: float = typer.Option(None, "--rtol", help=f"Parity tolerance (default: config, else {DEFAULT_RTOL:g})."),
    confidence: float = typer.Option(0.95, "--confidence", help="Level of the bootstrap intervals."),
    json_path: str = typer.Option(None, "--json", help="Write every sample and the environment as JSON "
                                                       "('-': stdout)."),
    html_path: str = typer.Option(None, "--html", help="Write a self-contained HTML report with plots "
                                                       "('-': stdout)."),
    trace_path: str = typer.Option(None, "--trace", help="Write the kernels of each profiled run as a Chrome "
                                                         "trace-event file (opens in Perfetto; '-': stdout)."),
    baseline: str = typer.Option(None, "--baseline", help="A previous --json file to gate against "
                                                          "(default: config baseline, when it exists)."),
    max_regression: str = typer.Option(None, "--max-regression",
                                       help="Allowed slowdown, e.g. 5% (default: config, else 5%)."),
    storage: str = typer.Option(None, "--storage", help="Optuna storage of `luminal tune` (URL or SQLite "
                                                        "file) for the tuning progress in the report "
                                                        "(default with --html: studies.db by the cache)."),
    config_path: str = typer.Option(None, "--config", help="Use this pyproject.toml or luminal.toml."),
    max_memory: str = MAX_MEMORY_OPT,
) -> None:
    """Time luminal against onnxruntime on the same seeded inputs, after checking that the outputs agree.

    Runtimes take turns in each round (seeded order), so drift hits all alike; the speedup comes with a
    paired bootstrap confidence interval. Exit 1 on wrong outputs, or on a regression beyond the noise
    (--baseline); 2 on bad input."""
    from .bench_gate import read_bench_json
    from .benchlib import new_document, sanitize

    config = load_config(path=config_path)
    models = jobs(model, shape, config, atol, rtol, config_path)
    backend = backend_of(backend, config, "auto")
    _check_options(runs, time_s, confidence, warmup, threads, seed)
    limit = max_memory_of(max_memory)
    quiet = one_stdout(json=json_path, html=html_path, trace=trace_path)
    threads = _threads(threads, config)
    gate = _gate_of(baseline, max_regression, config)
    base_doc = read_bench_json(gate.baseline) if gate.baseline else None
    settings = _settings(backend, against, runs, time_s, warmup, seed, threads, cache_of(cache, config), confidence,
                         limit)
    doc = new_document(settings)
    storage = storage if storage is not None or not html_path else _default_storage(settings.cache)
    if storage:
        from .bench_tuning import tuning_progress

        tuning_progress(storage, keep=lambda name: False)  # before the timings: a bad storage fails fast
    from .bench_trace import Trace

    trace = Trace() if trace_path else None
    _measure(doc, models, settings, trace)
    if storage:
        doc["tuning"] = _tuning_of(storage, doc["models"])
    if base_doc is not None:
        _gate(doc, base_doc, gate, settings)
    doc = sanitize(doc)
    _write(doc, json_path, html_path)
    if trace is not None and trace_path:
        trace.write(trace_path)
    if not _print_outcome(doc, err_console if quiet else console):
        raise typer.Exit(1)


@dataclass(frozen=True)
class _Gate:
    baseline: str | None  # the previous --json document to compare with; None: not gated
    allowed: float  # the slowdown allowed, as a fraction


def _check_options(runs: int | None, time_s: float | None, confidence: float, warmup: float,
                   threads: int | None, seed: int) -> None:
    if runs is not None and time_s is not None:
        raise LuminalError("give --runs or --time, not both")
    at_least(runs, "--runs", 2)
    at_most(runs, "--runs", MAX_RUNS)
    if time_s is not None:
        parse_duration(time_s, "--time")
    if not 0 < confidence < 1:
        raise LuminalError(f"--confidence: must be between 0 and 1, got {confidence:g}")
    at_most(time_s, "--time", MAX_TIME_S, " s")
    non_negative(warmup, "--warmup")
    at_most(warmup, "--warmup", MAX_TIME_S, " s")
    thread_count(threads, "--threads")
    seed_of(seed)


def _threads(threads: int | None, config: Config | None) -> int:
    """The thread count of every runtime: --threads, else the configured one, else the environment's, else every
    core."""
    from ..target import default_threads

    return resolve(threads, config, lambda c: c.threads, default_threads())


def _gate_of(baseline: str | None, max_regression: str | None, config: Config | None) -> _Gate:
    """--baseline, else the configured baseline where it exists; --max-regression, else configured, else 5%."""
    allowed = resolve(None if max_regression is None else parse_fraction(max_regression, "--max-regression"),
                      config, lambda c: c.max_regression, DEFAULT_MAX_REGRESSION)
    if baseline is None and config and config.baseline:
        if config.baseline.is_file():
            baseline = str(config.baseline)
        else:
            note = f"configured baseline {config.baseline} does not exist yet; not gated (write it with --json)"
            err_console.print(f"[yellow]note:[/] {shown(note)}", soft_wrap=True)
    return _Gate(baseline, allowed)


def _settings(backend: str, against: str, runs: int | None, time_s: float | None, warmup: float, seed: int,
              threads: int, cache: str | None, confidence: float, max_memory: int | None = None) -> Settings:
    from ..target import resolve_backend
    from .benchlib import Settings, parse_against

    return Settings(backend=resolve_backend(backend), against=parse_against(against), runs=runs,
                    time_s=None if runs is not None else (time_s or DEFAULT_TIME_S), warmup_s=warmup,
                    seed=seed, threads=threads, cache=cache, confidence=confidence, max_memory=max_memory)


def _tuning_of(storage: str, models: list[dict]) -> list[dict]:
    """The tuning progress of the benched models' own kernels and fusion plans (a shared studies.db holds other
    models' studies too), each study labelled by its model and kernel."""
    from .bench_tuning import label_of, study_labels, tuning_progress

    labels = study_labels(models)
    studies = tuning_progress(storage, keep=lambda name: label_of(name, labels) is not None)
    return [dict(s, label=label_of(s["study"], labels) or s["study"]) for s in studies]


def _measure(doc: dict, models: list[Job], settings: Settings, trace: Trace | None = None) -> None:
    """Each model's entry into ``doc``, a progress bar on stderr meanwhile."""
    from .benchlib import bench_model

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        for m in models:
            task = progress.add_task(f"{m.name}: compiling", total=settings.runs)

            def step(name: str, k: int, task: TaskID = task) -> None:
                progress.update(task, description=f"{name}: rounds", completed=k)

            doc["models"].append(bench_model(m, settings, step, trace))
            progress.remove_task(task)


def _gate(doc: dict, base_doc: dict, gate: _Gate, settings: Settings) -> None:
    from .bench_gate import gate as compare_to_baseline

    results = compare_to_baseline(doc, base_doc, gate.allowed, confidence=settings.confidence, seed=settings.seed)
    doc["regression"] = {"baseline": str(gate.baseline), "max_regression": gate.allowed,
                         "results": [asdict(r) for r in results]}


def _write(doc: dict, json_path: str | None, html_path: str | None) -> None:
    if json_path:
        emit_json(doc, json_path)
    if html_path:
        from .bench_report import render_html

        write_output(render_html(doc), html_path)


def _print_outcome(doc: dict, out: Console) -> bool:
    """The table, warnings, errors and the gate's verdicts; False when a model's outputs were wrong or it
    regressed."""
    out.print(_table(doc))
    for m in doc["models"]:
        if m.get("kernels"):
            out.print(_kernel_table(m))
    ok = True
    for m in doc["models"]:
        for name, why in m.get("skipped", {}).items():
            err_console.print(f"[yellow]note:[/] {shown(m['name'])}: {name} skipped: {shown(why)}", soft_wrap=True,
                              highlight=False)
        for w in m["warnings"]:
            err_console.print(f"[yellow]warning:[/] {shown(m['name'] + ': ' + w)}", soft_wrap=True,
                              highlight=False)
        if m["status"] != "ok":
            err_console.print(f"[bold red]error:[/] {shown(m['message'])}", soft_wrap=True, highlight=False)
            ok = False
    for r in (doc.get("regression") or {}).get("results", []):
        if r["failed"]:
            err_console.print(f"[bold red]regression:[/] {shown(r['message'])}", soft_wrap=True, highlight=False)
            ok = False
        else:
            out.print(f"baseline: {shown(r['message'])}", soft_wrap=True, highlight=False)
    return ok


def register(app: typer.Typer) -> None:
    app.command("bench")(handle_errors(bench))
