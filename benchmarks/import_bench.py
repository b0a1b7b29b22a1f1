"""Import + passes time and peak memory for the full-size example transformers.

    python benchmarks/import_bench.py [--models bert-full-torchscript,gpt2-full-torchscript] [--json F]
                                      [--repeat 1] [--models-dir examples/models]

Each measurement runs in a fresh subprocess: the time of ``frontend_onnx.load``
(read, import, optimise) and the growth of the peak resident set (VmHWM) over
the process's resident set before the load, set against the model's size on
disk (with its external data). Targets: under 5 s and under 2x the model size.
The file is read once and the weights stay views of its bytes; "views" is the share of
the graph's constant bytes that are such views (not copies), and "anon" the growth of the
private (non-file) resident set.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = "bert-full-torchscript,gpt2-full-torchscript,bert-full-dynamo,gpt2-full-dynamo"
TARGET_SECONDS, TARGET_MEMORY_RATIO = 5.0, 2.0

_CHILD = r"""
import json, sys, time
from pathlib import Path

def status(key):
    # this process's own counters: ru_maxrss would include the parent's footprint at fork
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])

def of_file(a):
    while isinstance(a, numpy.ndarray):
        a = a.base
    return isinstance(a.obj if isinstance(a, memoryview) else a, bytes)

import numpy
from onnx.external_data_helper import _get_all_tensors, uses_external_data
from luminal import ir
from luminal.frontend_onnx import importer
path, shapes = Path(sys.argv[1]), json.loads(sys.argv[2])
base, base_anon = status("VmRSS"), status("RssAnon")
t0 = time.perf_counter()
res = importer.load(str(path), shapes)
t1 = time.perf_counter()
peak, anon = status("VmHWM"), status("RssAnon")
prims, nodes = sum(res.graph.primitive_counts().values()), sum(res.onnx_op_counts.values())
consts = [n.attrs["value"] for n in res.graph.toposort() if n.op is ir.Op.Constant]
const_bytes = sum(v.nbytes for v in consts)
view_bytes = sum(v.nbytes for v in consts if of_file(v))
del res, consts
m = importer.read_model(path)[0]  # the external data files it names
files = {next((e.value for e in t.external_data if e.key == "location"), None)
         for t in _get_all_tensors(m) if uses_external_data(t)}
size = path.stat().st_size + sum((path.parent / f).stat().st_size for f in files if f)
print(json.dumps({"seconds": t1 - t0, "base_kib": base, "peak_kib": peak, "bytes": size,
                  "anon_kib": anon - base_anon, "views": view_bytes / max(const_bytes, 1),
                  "primitives": prims, "onnx_nodes": nodes}))
"""


def measure(path: Path, shapes: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", _CHILD, str(path), json.dumps(shapes)], capture_output=True,
                       text=True, timeout=1800, env=env)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    size = r["bytes"]
    grown = (r["peak_kib"] - r["base_kib"]) * 1024
    return {"seconds": round(r["seconds"], 3), "model_mb": round(size / 2**20, 1),
            "peak_growth_mb": round(grown / 2**20, 1), "memory_ratio": round(grown / size, 2),
            "peak_rss_mb": round(r["peak_kib"] / 1024, 1), "anon_growth_mb": round(r["anon_kib"] / 1024, 1),
            "views": round(r["views"], 3), "onnx_nodes": r["onnx_nodes"],
            "primitives": r["primitives"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated names in examples/models")
    ap.add_argument("--models-dir", default=str(REPO / "examples" / "models"))
    ap.add_argument("--repeat", type=int, default=1, help="runs per model; the fastest is kept")
    ap.add_argument("--json", metavar="F", help="write the results as JSON ('-' for stdout)")
    a = ap.parse_args(argv)
    mdir = Path(a.models_dir)
    manifest = json.loads((mdir / "manifest.json").read_text()) if (mdir / "manifest.json").exists() else {}
    results = {}
    for name in [m for m in a.models.split(",") if m]:
        path = mdir / (name if name.endswith(".onnx") else name + ".onnx")
        if not path.exists():
            results[name] = {"error": f"{path} not found (run examples/export_models.py)"}
            continue
        shapes = manifest.get(path.name, {}).get("shapes", {})
        runs = [measure(path, shapes) for _ in range(max(1, a.repeat))]
        ok = [r for r in runs if "error" not in r]
        best = min(ok, key=lambda r: r["seconds"]) if ok else runs[0]
        if ok:
            best["meets_target"] = best["seconds"] < TARGET_SECONDS and best["memory_ratio"] < TARGET_MEMORY_RATIO
        results[name] = dict(best, shapes=shapes)
    if a.json:
        text = json.dumps(results, indent=2)
        if a.json == "-":
            print(text)
            return 0
        Path(a.json).write_text(text + "\n")
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"import + passes (targets: < {TARGET_SECONDS:g} s, < {TARGET_MEMORY_RATIO:g}x model size)")
    for col in ("model", "seconds", "model MB", "peak growth MB", "x model", "anon MB", "views", "ONNX nodes",
                "primitives", "target"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, r in results.items():
        if "error" in r:
            table.add_row(name, "[red]" + r["error"] + "[/]", *[""] * 8)
            continue
        table.add_row(name, f"{r['seconds']:.2f}", f"{r['model_mb']:.0f}", f"{r['peak_growth_mb']:.0f}",
                      f"{r['memory_ratio']:.2f}", f"{r['anon_growth_mb']:.0f}", f"{r['views']:.0%}",
                      str(r["onnx_nodes"]), str(r["primitives"]),
                      "[green]met[/]" if r["meets_target"] else "[red]missed[/]")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
