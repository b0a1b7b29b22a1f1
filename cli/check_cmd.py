"""``luminal check [MODEL]``: luminal's outputs against onnxruntime's on seeded inputs.

Without MODEL, every model of ``[tool.luminal]`` (pyproject.toml or luminal.toml) is checked
with its shapes and tolerances.
"""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.table import Table

from ..config import DEFAULT_ATOL, DEFAULT_RTOL, cache_of
from .common import CACHE_OPT, JSON_FILE_OPT, SHAPE_OPT, console, emit_json, handle_errors, parse_shapes, shown

DEFAULT_BACKEND = "reference"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _show(report, title: str) -> None:
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
    times = ", ".join(f"{k} {v:.2f} s" for k, v in report.seconds.items())
    console.print(("[green]ok[/]" if report.ok else "[red]out of tolerance[/]") + f" ({times})")


def register(app: typer.Typer) -> None:
    @app.command("check")
    @handle_errors
    def check(
        model: str = typer.Argument(None, help="The ONNX model file (default: the models of \\[tool.luminal])."),
        shape: list[str] = SHAPE_OPT,
        backend: str = typer.Option(None, "--backend",
                                    help=f"The luminal backend to check (default: {DEFAULT_BACKEND})."),
        atol: float = typer.Option(None, "--atol", help=f"Absolute tolerance (default: {DEFAULT_ATOL:g})."),
        rtol: float = typer.Option(None, "--rtol", help=f"Relative tolerance: |a-b| <= atol + rtol*|b| "
                                                         f"(default: {DEFAULT_RTOL:g})."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
        json_path: str = JSON_FILE_OPT,
        junit_path: str = typer.Option(None, "--junit", help="Write JUnit XML (one test case per model) to this file."),
        cache: str = CACHE_OPT,
    ) -> None:
        """Compare luminal's outputs with onnxruntime's on the same seeded random inputs."""
        from .modelcheck import check_model

        if model is not None:
            jobs = [(model, parse_shapes(shape), backend or DEFAULT_BACKEND,
                     DEFAULT_ATOL if atol is None else atol, DEFAULT_RTOL if rtol is None else rtol)]
        else:
            from ..config import load_config, models_of

            project = load_config()
            models = models_of(project)
            be = backend or (project.backend if project and project.backend else DEFAULT_BACKEND)
            cache = cache_of(cache, project)  # where tune put winners
            jobs = [(str(m.path), {**m.shapes, **parse_shapes(shape)}, be,
                     atol if atol is not None else (m.atol if m.atol is not None else DEFAULT_ATOL),
                     rtol if rtol is not None else (m.rtol if m.rtol is not None else DEFAULT_RTOL))
                    for m in models]
        reports = []
        for path, shapes, be, a, r in jobs:
            report = check_model(path, shapes, be, a, r, seed, cache=cache)
            reports.append(report)
            if json_path != "-":
                title = f"{path}: {be} vs onnxruntime (atol {a:g}, rtol {r:g}, seed {seed})"
                _show(report, title)
        if json_path:
            data = [dict(asdict(rep), ok=rep.ok) for rep in reports]
            emit_json(data[0] if model is not None else {"ok": all(rep.ok for rep in reports), "models": data},
                      json_path)
        if junit_path:
            from .junit import check_cases, write_junit

            write_junit(junit_path, "luminal check", check_cases(reports))
        if not all(rep.ok for rep in reports):
            raise typer.Exit(1)
