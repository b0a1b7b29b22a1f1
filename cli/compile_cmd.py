"""``luminal compile MODEL``: import, partition, pick schedules (tuning cache or defaults),
compile every kernel and optionally write an artifact directory."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import typer
from rich.table import Table

from ..config import cache_of, load_config
from ..errors import LuminalError
from ..values import Shape, format_duration
from .common import (
    CACHE_OPT,
    JSON_OPT,
    MAX_MEMORY_OPT,
    SHAPE_OPT,
    console,
    emit_json,
    handle_errors,
    max_memory_of,
    shown,
)
from .project import backend_of, chosen_models


def run_compile(model: str, backend: str, shapes: Mapping[str, Shape], out: str | None, cache: str | None,
                max_memory: int | None = None) -> dict:
    from ..runtime.artifact import write_artifact
    from ..runtime.compile import compile_graph, import_model, resolve_backend
    from .modelcheck import open_cache

    be = resolve_backend(backend)
    t0 = time.perf_counter()
    graph = import_model(model, shapes, max_memory=max_memory)
    t_import = time.perf_counter() - t0
    tc = open_cache(cache)
    try:
        compiled = compile_graph(graph, be, cache=tc)
    finally:
        if tc is not None:
            tc.close()
    s = compiled.stats
    result = {
        "model": str(model), "backend": be.name, "kernels": s.kernels, "forms": s.forms,
        "cache": {"hits": s.cache_hits, "misses": s.cache_misses, "invalid": s.invalid_schedules,
                  "used": tc is not None},
        "memory": {"planned_bytes": compiled.planned_bytes, "intermediate_bytes": compiled.intermediate_bytes},
        "import_s": round(t_import, 4), "compile_s": round(s.compile_s, 4),
        "inputs": [i.to_json() for i in compiled.inputs], "outputs": [o.to_json() for o in compiled.outputs],
    }
    if out:
        result["artifact"] = str(write_artifact(compiled, out, model, dict(shapes)))
    return result


def _show(r: dict) -> None:
    t = Table(title=f"compiled {shown(Path(r['model']).name)} for {r['backend']}", show_header=False)
    t.add_row("kernels", f"{r['kernels']} ({', '.join(f'{v} {k}' for k, v in sorted(r['forms'].items()))})")
    c = r["cache"]
    t.add_row("tuning cache", f"{c['hits']} hits, {c['misses']} misses" if c["used"] else "not used (defaults)")
    m = r["memory"]
    t.add_row("buffer memory", f"{m['planned_bytes']:,} B planned vs {m['intermediate_bytes']:,} B unshared")
    t.add_row("time", f"import {format_duration(r['import_s'])}, compile {format_duration(r['compile_s'])}")
    t.add_row("artifact", shown(r["artifact"]) if "artifact" in r else "not written (-o DIR writes one that "
                                                                          "check, bench and InferenceSession load)")
    console.print(t)


def compile_(
    model: str = typer.Argument(..., help="The ONNX model file."),
    backend: str = typer.Option(None, "--backend", help="auto, cuda, cpu or interpret (default: config, else auto)."),
    shape: list[str] = SHAPE_OPT,
    out: str = typer.Option(None, "-o", "--output", help="Write a loadable artifact to this directory: the kernels' "
                                                          "sources and built libraries, the weights, a manifest."),
    cache: str = CACHE_OPT,
    as_json: bool = JSON_OPT,
    max_memory: str = MAX_MEMORY_OPT,
) -> None:
    """Compile a model: kernels with tuned (cached) or default schedules; -o writes an artifact."""
    from ..frontend_onnx.loader import unbound_dims
    from ..frontend_onnx.registry import DataDependent
    from .compile_dynamic import run_compile_dynamic, show_dynamic

    if out == "-":  # '-' is stdout for the reports of the other commands; an artifact is a folder
        raise LuminalError("--output: an artifact is a folder, not stdout ('-'); give its path (./- if you mean it)")
    limit = max_memory_of(max_memory)
    config = load_config()
    chosen = chosen_models(model, shape, config)
    name, tc = backend_of(backend, config, "auto"), cache_of(cache, config)
    dynamic = bool(out) and (len(chosen) > 1 or bool(unbound_dims(model, chosen[0].shapes)))  # sizes at run time
    try:
        results = [] if dynamic else [run_compile(model, name, c.shapes, out, tc, limit) for c in chosen]
    except DataDependent as e:
        if not out:
            raise LuminalError(f"{e}; one static plan cannot hold it: compile -o DIR writes an artifact that runs "
                               "it in segments") from None
        dynamic = True
    if dynamic:
        r = run_compile_dynamic(model, name, [c.shapes for c in chosen], out, tc, limit)
        if as_json:
            emit_json(r)
        else:
            show_dynamic(r)
        return
    if as_json:
        emit_json(results[0] if len(results) == 1 else {"models": results})
    else:
        for r in results:
            _show(r)


def register(app: typer.Typer) -> None:
    app.command("compile")(handle_errors(compile_))
