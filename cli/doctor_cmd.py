"""``luminal doctor``: what this machine offers (versions, GPU, C compiler, OpenMP, cache) and
whether a backend can run here (exit 1 when the chosen one cannot)."""

from __future__ import annotations

import platform
import sys
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ..config import BACKENDS, cache_of, load_config
from ..errors import LuminalError
from .common import CACHE_OPT, JSON_OPT, console, emit_json, handle_errors
from .project import backend_of

PACKAGES = ("numpy", "onnx", "onnxruntime", "triton", "torch", "optuna", "sqlite-utils", "typer", "rich")


def _cache_info(path: str | None) -> dict[str, Any]:
    from ..cache import TuningCache, default_cache_path

    where = default_cache_path() if path is None else path
    info: dict[str, Any] = {"path": str(where), "exists": False, "size_bytes": 0, "status": "not created yet"}
    try:
        from pathlib import Path

        if not Path(where).expanduser().exists():
            return info
        with TuningCache(where, readonly=True) as c:
            s = c.stats()
        info.update(exists=True, size_bytes=s.size_bytes, kernels=s.kernels, trials=s.trials, winners=s.winners,
                    status="ok")
    except LuminalError as e:
        info.update(exists=True, status=str(e))
    return info


def collect(cache: str | None = None) -> dict[str, Any]:
    """Everything doctor reports, as plain data."""
    from .. import __version__
    from ..target import cpu_info, cuda_info, detect_c_compiler, package_version, resolve_backend

    cc = detect_c_compiler()
    gpu = cuda_info()
    triton = package_version("triton")
    torch = package_version("torch")
    backends = {
        "cuda": (gpu is not None and triton is not None and torch is not None,
                 "no NVIDIA GPU visible" if gpu is None else "triton and torch are needed" if not (triton and torch)
                 else "ok"),
        "cpu": (cc is not None, "ok" if cc else "no working C compiler (tried $CC, cc, gcc, clang)"),
        "interpret": (triton is not None and torch is not None, "ok" if triton and torch
                      else "triton and torch are needed"),
        "reference": (True, "ok"),
    }
    auto = resolve_backend("auto")
    backends["auto"] = (backends[auto][0], f"picks {auto}: {backends[auto][1]}")
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "platform": platform.platform()},
        "packages": {"luminal": __version__, **{p: package_version(p) for p in PACKAGES}},
        "cpu": cpu_info(),
        "gpu": gpu,
        "c_compiler": None if cc is None else {
            "path": cc.path, "version": cc.version, "flags": list(cc.flags),
            "openmp": cc.openmp, "march_native": cc.march_native},
        "openmp": bool(cc and cc.openmp),
        "cache": _cache_info(cache),
        "backends": {k: {"ok": ok, "detail": why} for k, (ok, why) in backends.items()},
    }


def _show(data: dict[str, Any], backend: str) -> None:
    t = Table(show_header=False, title="luminal doctor", title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("python", escape(f"{data['python']['version']} ({data['python']['executable']})"))
    for name, v in data["packages"].items():
        t.add_row(name, v or "[dim]not installed[/]")
    cpu = data["cpu"]
    isa = " ".join(cpu["isa"]) or "no SIMD flags"
    t.add_row("cpu", escape(f"{cpu['model']} ({cpu['arch']}, {cpu['cores']} cores; {isa})"))
    gpu = data["gpu"]
    t.add_row("gpu", "none" if gpu is None else escape(
              f"{gpu['name']} (sm {gpu['capability']}, {gpu['sm_count']} SMs, {gpu['memory_bytes'] / 2**30:.0f} GiB, "
              f"driver {gpu['driver'] or '?'}, CUDA {gpu['cuda'] or '?'})"))
    cc = data["c_compiler"]
    t.add_row("c compiler", "none" if cc is None else escape(
              f"{cc['path']}: {cc['version']}; -march=native {'works' if cc['march_native'] else 'fails'}"))
    t.add_row("openmp", "yes (-fopenmp)" if data["openmp"] else "no")
    c = data["cache"]
    t.add_row("cache", escape(f"{c['path']} ({c['size_bytes'] / 1e6:.2f} MB; {c['status']})"))
    for name, b in data["backends"].items():
        mark = "[green]ok[/]" if b["ok"] else "[red]unavailable[/]"
        chosen = " [bold](checked)[/]" if name == backend else ""
        detail = f": {escape(b['detail'])}" if not b["ok"] or name == "auto" else ""
        t.add_row(f"backend {name}", f"{mark}{detail}{chosen}")
    console.print(t, highlight=False)


def doctor(
    backend: str = typer.Option(None, "--backend", help="Backend that must work here: " + "|".join(BACKENDS)
                                + " (default: config, else auto)."),
    cache: str = CACHE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """What this machine offers: GPU, C compiler, OpenMP, versions, the tuning cache."""
    config = load_config()
    backend = backend_of(backend, config, "auto")
    data = collect(cache_of(cache, config))
    ok = data["backends"][backend]["ok"]
    data["checked_backend"] = backend
    data["ok"] = ok
    if as_json:
        emit_json(data)
    else:
        _show(data, backend)
        if not ok:
            console.print(f"backend {backend} cannot run here: {data['backends'][backend]['detail']}",
                          markup=False)
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(handle_errors(doctor))
