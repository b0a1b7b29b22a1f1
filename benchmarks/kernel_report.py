"""Kernel counts, bytes moved, buffer memory and compile time per example model.

    python benchmarks/kernel_report.py [--models small|full|none] [--aot] [--json out.json]

Before fusion = every fusion decision "no"; after = the default partition. The small
transformer layer built with the IR must need at most 10 kernels (checked, exit 1 if not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from luminal.codegen.partition import fusible_edges, partition
from luminal.codegen.triton import schedule as sched
from luminal.codegen.triton.emit import emit
from luminal.runtime.plan import plan_kernels

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sample_graphs import SAMPLES

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
MAX_TRANSFORMER_KERNELS = 10


def _memory(graph, kernels) -> dict:
    plan = plan_kernels(kernels, {o.id for o in graph.outputs})
    return {"planned_bytes": plan.arena_bytes, "intermediate_bytes": plan.naive_bytes}


def report(name: str, graph, import_s: float, aot: bool) -> dict:
    t0 = time.perf_counter()
    fused = partition(graph)
    sources = [emit(k, sched.default(k)) for k in fused]
    t_compile = time.perf_counter() - t0
    unfused = partition(graph, {e: False for e in fusible_edges(graph)})
    row = {
        "model": name, "kernels_unfused": len(unfused), "kernels_fused": len(fused),
        "forms": dict(Counter(k.form for k in fused)),
        "bytes_unfused": sum(k.bytes_moved for k in unfused), "bytes_fused": sum(k.bytes_moved for k in fused),
        "flops": sum(k.flops for k in fused), "memory": _memory(graph, fused),
        "import_s": round(import_s, 3), "partition_emit_s": round(t_compile, 3),
        "source_lines": sum(s.count("\n") for s in sources),
    }
    if aot:
        from luminal.codegen.triton.aot import compile_aot

        t1 = time.perf_counter()
        shared = {}
        for arch in (80, 90):
            infos = [compile_aot(k, sched.default(k), arch) for k in fused]
            shared[f"sm_{arch}"] = {"max_shared": max(i.shared for i in infos), "all_fit": all(i.fits for i in infos)}
        row["aot"] = {**shared, "aot_s": round(time.perf_counter() - t1, 2)}
    return row


def _onnx_models(size: str) -> list[tuple[str, Path, dict]]:
    manifest = MODELS / "manifest.json"
    if size == "none" or not manifest.is_file():
        return []
    entries = json.loads(manifest.read_text())
    return [(f, MODELS / f, e["shapes"]) for f, e in sorted(entries.items())
            if e.get("size") == size and (MODELS / f).is_file()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", choices=("small", "full", "none"), default="small")
    ap.add_argument("--aot", action="store_true", help="also compile every kernel for sm_80 and sm_90")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    rows = []
    for name, build in SAMPLES.items():
        t0 = time.perf_counter()
        g = build()
        rows.append(report(f"ir:{name}", g, time.perf_counter() - t0, args.aot))
    for name, path, shapes in _onnx_models(args.models):
        from luminal.errors import LuminalError
        from luminal.frontend_onnx import load

        t0 = time.perf_counter()
        try:
            g = load(str(path), shapes).graph
        except LuminalError as e:
            rows.append({"model": name, "error": str(e)})
            continue
        rows.append(report(name, g, time.perf_counter() - t0, args.aot))
    fmt = "{:<34} {:>8} {:>7} {:>14} {:>14} {:>12} {:>12} {:>8}"
    print(fmt.format("model", "unfused", "fused", "bytes unfused", "bytes fused", "planned B", "unshared B",
                     "time s"))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<34} error: {r['error']}")
            continue
        print(fmt.format(r["model"], r["kernels_unfused"], r["kernels_fused"], r["bytes_unfused"], r["bytes_fused"],
                         r["memory"]["planned_bytes"], r["memory"]["intermediate_bytes"],
                         f"{r['import_s'] + r['partition_emit_s']:.2f}"))
    tl = next(r for r in rows if r["model"] == "ir:transformer_layer")
    ok = tl["kernels_fused"] <= MAX_TRANSFORMER_KERNELS
    print(f"transformer layer: {tl['kernels_fused']} kernels (limit {MAX_TRANSFORMER_KERNELS}): "
          f"{'ok' if ok else 'TOO MANY'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "transformer_ok": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
