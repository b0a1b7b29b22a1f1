"""``luminal check [MODEL]``: luminal's outputs against onnxruntime's on seeded inputs.

Without MODEL, every model of ``[tool.luminal]`` (pyproject.toml or luminal.toml) is checked
with its shapes and tolerances.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ..config import BACKENDS, DEFAULT_ATOL, DEFAULT_RTOL, cache_of, load_config
from ..target import resolve_backend
from ..values import format_duration, seed_of
from .common import (
    CACHE_OPT,
    JSON_FILE_OPT,
    MAX_MEMORY_OPT,
    SHAPE_OPT,
    console,
    emit_json,
    handle_errors,
    max_memory_of,
    one_stdout,
    shown,
)
from .project import backend_of, jobs, shapes_label

if TYPE_CHECKING:
    from .modelcheck import CheckReport

# what `compile` uses: a green check speaks of the kernels that ship
DEFAULT_BACKEND = "auto"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _show(report: CheckReport, title: str) -> None:
    """Names, paths and reasons come from the model: escaped, never read as markup."""
    table = Table(title=shown(title))
    for col in ("output", "shape", "dtype", "max abs err", "max rel err", "result"):
        table.add_column(col, justify="right" if "err" in col else "left")
    for o in report.outputs:
        verdict = "[green]pass[/]" if o.ok else f"[red]FAIL[/] {shown(o.reason)}"
        table.add_row(shown(o.name), "x".join(map(str, o.shape)) or "scalar", o.dtype, _fmt(o.max_abs),
                      _fmt(o.max_rel), verdict)
    console.print(table)
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {shown(str(w))}", soft_wrap=True)
    times = ", ".join(f"{k} {format_duration(v)}" for k, v in report.seconds.items())
    console.print(("[green]ok[/]" if report.ok else "[red]out of tolerance[/]") + f" ({times})")


def check(
    model: str = typer.Argument(None, help="The ONNX model file, or an artifact folder (compile -o) (default: the "
                                            "models of \\[tool.luminal])."),
    shape: list[str] = SHAPE_OPT,
    backend: str = typer.Option(None, "--backend",
                                help="The luminal backend to check: auto, cpu, cuda, interpret or reference (the numpy "
                                     "executor) (default: config, else auto, the backend compile uses)."),
    atol: float = typer.Option(None, "--atol", help=f"Absolute tolerance, times the output's largest magnitude "
                                                     f"where that exceeds 1 (default: config, else {DEFAULT_ATOL:g})."),
    rtol: float = typer.Option(None, "--rtol", help=f"Relative tolerance: |a-b| <= atol*max(1, max|b|) + rtol*|b| "
                                                     f"(default: config, else {DEFAULT_RTOL:g})."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    json_path: str = JSON_FILE_OPT,
    junit_path: str = typer.Option(None, "--junit", help="Write JUnit XML (one test case per model) to this file "
                                                         "('-': stdout)."),
    cache: str = CACHE_OPT,
    max_memory: str = MAX_MEMORY_OPT,
) -> None:
    """Compare luminal's outputs with onnxruntime's on the same seeded random inputs."""
    from ..runtime.artifact import is_artifact
    from ..runtime.dynamic_artifact import is_dynamic_artifact
    from .modelcheck import BACKENDS as BACKENDS_CHECKED
    from .modelcheck import check_artifact, check_dynamic_artifact, check_model

    seed_of(seed)
    quiet = one_stdout(json=json_path, junit=junit_path)
    config = load_config()
    todo = jobs(model, shape, config, atol, rtol)
    allowed = [*BACKENDS, *BACKENDS_CHECKED.keys() - set(BACKENDS)]  # and any a test registers
    backend = resolve_backend(backend_of(backend, config, DEFAULT_BACKEND, allowed))
    cache_path = cache_of(cache, config)  # where tune put winners
    reports = []
    for job in todo:
        if is_dynamic_artifact(job.path):  # sizes known at run time: at the sizes given, as a session loads it
            report = check_dynamic_artifact(str(job.path), job.shapes, job.atol, job.rtol, seed)
        elif is_artifact(job.path):  # the kernels compile -o built, as they load
            report = check_artifact(str(job.path), job.atol, job.rtol, seed)
        else:
            report = check_model(str(job.path), job.shapes, backend, job.atol, job.rtol, seed, cache=cache_path,
                                 max_memory=max_memory_of(max_memory))
        reports.append(report)
        if not quiet:
            sizes = f" at {shapes_label(job.shapes)}" if len(todo) > 1 and job.shapes else ""
            _show(report, f"{job.path}{sizes}: {report.backend} vs onnxruntime (atol {job.atol:g}, rtol {job.rtol:g}, "
                          f"seed {seed})")
    if json_path:
        data = [dict(asdict(rep), ok=rep.ok) for rep in reports]
        one = model is not None and len(data) == 1  # several --shape sizes: one report each
        emit_json(data[0] if one else {"ok": all(rep.ok for rep in reports), "models": data}, json_path)
    if junit_path:
        from .junit import check_cases, write_junit

        write_junit(junit_path, "luminal check", check_cases(reports))
    if not all(rep.ok for rep in reports):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("check")(handle_errors(check))
