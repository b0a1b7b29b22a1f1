"""``luminal inspect MODEL``: ONNX ops, primitives before and after the passes, inputs and outputs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ..config import load_config
from ..values import Shape, format_duration
from .common import (
    JSON_FILE_OPT,
    MAX_MEMORY_OPT,
    SHAPE_OPT,
    console,
    emit_json,
    handle_errors,
    max_memory_of,
    printable,
    shown,
)
from .project import one_model

if TYPE_CHECKING:
    from ..frontend_onnx import IOInfo
    from ..ir import Graph


def _io(items: Iterable[IOInfo]) -> list[dict]:
    return [{"name": i.name, "dtype": i.dtype.value, "shape": list(i.shape)} for i in items]


def inspect_model(model: str, shapes: Mapping[str, Shape], max_memory: int | None = None) -> tuple[dict, Graph]:
    """The report as plain data, and the optimised graph."""
    from ..frontend_onnx.loader import Unbound, load_model
    from ..ir import optimize

    t0 = time.perf_counter()
    res = load_model(model, shapes, Unbound.WARN, optimize=False, max_memory=max_memory)
    before = res.graph.primitive_counts()
    graph = optimize(res.graph)
    seconds = time.perf_counter() - t0
    after = graph.primitive_counts()
    data = {
        "model": model,
        "opset": res.opset,
        "onnx_ops": dict(res.onnx_op_counts),
        "onnx_nodes": sum(res.onnx_op_counts.values()),
        "primitives_before_passes": before,
        "primitives_after_passes": after,
        "primitive_nodes_before": sum(before.values()),
        "primitive_nodes_after": sum(after.values()),
        "inputs": _io(res.inputs),
        "outputs": _io(res.outputs),
        "bindings": dict(graph.bindings),
        "unbound": list(res.unbound),
        "warnings": list(res.warnings),
        "import_seconds": round(seconds, 3),
    }
    return data, graph


def _shape(s) -> str:
    return "x".join(map(str, s)) or "scalar"


def _print_kernels(rows: list[dict]) -> None:
    from ..runtime.report import node_label, op_label

    table = Table(title=f"kernels ({len(rows)})")
    names = [node_label(r["nodes"], 40) for r in rows]
    for col in ("#", "model nodes", "ops", "form", "signature", "fused primitives", "bytes", "FLOPs"):
        # the names are what a person looks for: the other columns wrap first
        wide = max(map(len, names), default=0) if col == "model nodes" else None
        table.add_column(col, justify="right" if col in ("#", "bytes", "FLOPs") else "left", min_width=wide)
    for i, r in enumerate(rows):
        fused = ", ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(r["primitives"].items()))
        table.add_row(str(i), shown(names[i]), shown(op_label(r["nodes"])), r["form"],
                      r.get("signature", "")[:12], fused, f"{r['bytes']:,}", f"{r['flops']:,}")
    console.print(table)
    total = sum(r["bytes"] for r in rows)
    console.print(f"{len(rows)} kernels, {total:,} bytes moved", soft_wrap=True)


def inspect_cmd(
    model: str = typer.Argument(..., help="The ONNX model file."),
    shape: list[str] = SHAPE_OPT,
    ir: bool = typer.Option(False, "--ir", help="Print the optimised primitive graph."),
    kernels: bool = typer.Option(False, "--kernels", help="List the kernels of the default fusion plan."),
    json_path: str = JSON_FILE_OPT,
    max_memory: str = MAX_MEMORY_OPT,
) -> None:
    """Show the model's ONNX ops, its primitives before and after the passes, and its inputs and outputs."""
    from ..ir import format_graph

    chosen = one_model(model, shape, load_config())
    data, graph = inspect_model(model, chosen.shapes, max_memory_of(max_memory))
    if kernels:
        from ..runtime.report import kernel_table

        data["kernels"] = kernel_table(graph)
    if json_path:
        emit_json(dict(data, ir=format_graph(graph)) if ir else data, json_path)
        if json_path == "-":
            return
    _print_report(model, data, graph, kernels, ir)


def _print_report(model: str, data: dict, graph: Graph, kernels: bool, ir: bool) -> None:
    """The report as tables, for people."""
    from ..ir import format_graph

    console.print(f"[bold]{shown(model)}[/]  opset {data['opset']}, {data['onnx_nodes']} ONNX nodes, "
                  f"{data['primitive_nodes_after']} primitives after passes "
                  f"(import {format_duration(data['import_seconds'])})", soft_wrap=True)
    io = Table(title="inputs and outputs")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind in ("inputs", "outputs"):
        for i in data[kind]:
            io.add_row(kind[:-1], shown(i["name"]), i["dtype"], _shape(i["shape"]))  # names: never markup
    console.print(io)
    ops = Table(title="ONNX ops")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for k, v in sorted(data["onnx_ops"].items(), key=lambda kv: (-kv[1], kv[0])):
        ops.add_row(shown(k), str(v))
    console.print(ops)
    prims = Table(title="primitives")
    for col in ("primitive", "before passes", "after passes"):
        prims.add_column(col, justify="left" if col == "primitive" else "right")
    before, after = data["primitives_before_passes"], data["primitives_after_passes"]
    for k in sorted(set(after) | set(before)):
        prims.add_row(k, str(before.get(k, 0)), str(after.get(k, 0)))
    prims.add_row("[bold]total[/]", str(data["primitive_nodes_before"]), str(data["primitive_nodes_after"]))
    console.print(prims)
    for w in data["warnings"]:
        console.print(f"[yellow]warning:[/] {shown(str(w))}", soft_wrap=True)
    if kernels:
        _print_kernels(data["kernels"])
    if ir:
        text = "\n".join(printable(line) for line in format_graph(graph).splitlines())
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("inspect")(handle_errors(inspect_cmd))
