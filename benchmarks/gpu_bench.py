"""Example models on the GPU: luminal (backend cuda) vs onnxruntime's CUDA execution provider.

    python benchmarks/gpu_bench.py [--models small|full|all] [--budget-s 240] [--json out.json]

Outputs are checked against onnxruntime first; then both run interleaved (one luminal
run, one onnxruntime run, repeated) so drift hits both alike. Reports medians and the
spread (p10..p90) per model, host<->device copies included on both sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def _feeds(inputs, rng) -> dict:
    feeds = {}
    for i in inputs:
        if "float" in i.type:
            feeds[i.name] = rng.standard_normal(i.shape).astype(np.float16 if "16" in i.type else np.float32)
        else:
            feeds[i.name] = rng.integers(0, 2, i.shape).astype(np.int64 if "int64" in i.type else np.int32)
    return feeds


def _stats(samples: list[float]) -> dict:
    s = sorted(samples)
    q = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]
    return {"median_ms": statistics.median(s) * 1e3, "p10_ms": q(0.1) * 1e3, "p90_ms": q(0.9) * 1e3, "n": len(s)}


def bench_model(name: str, path: Path, shapes: dict, seconds: float, cache) -> dict:
    import onnxruntime as ort

    from luminal.runtime.session import InferenceSession

    t0 = time.perf_counter()
    ours = InferenceSession(path, backend="cuda", shapes=shapes, cache=cache)
    compile_s = time.perf_counter() - t0
    theirs = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    feeds = _feeds(ours.get_inputs(), np.random.default_rng(0))
    names = [o.name for o in ours.get_outputs()]
    got, ref = ours.run(None, feeds), theirs.run(names, feeds)
    err = max(float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0 for a, b in zip(got, ref))
    for _ in range(3):  # warm up both (JIT, autotune caches, allocator)
        ours.run(None, feeds)
        theirs.run(names, feeds)
    a_s, b_s = [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(a_s) < 5:
        t = time.perf_counter()
        ours.run(None, feeds)
        a_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs.run(names, feeds)
        b_s.append(time.perf_counter() - t)
        if len(a_s) >= 1000:
            break
    a, b = _stats(a_s), _stats(b_s)
    return {"model": name, "kernels": len(ours.model.kernels), "compile_s": round(compile_s, 2), "max_abs_err": err,
            "luminal": a, "onnxruntime_cuda": b, "speedup": b["median_ms"] / a["median_ms"],
            "providers": theirs.get_providers()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", choices=("small", "full", "all"), default="all")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="wall-clock budget; models that no longer fit are listed as skipped")
    ap.add_argument("--cache", help="tuning cache to take schedules from")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible", file=sys.stderr)
        return 2
    manifest = json.loads((MODELS / "manifest.json").read_text()) if (MODELS / "manifest.json").is_file() else {}
    chosen = [(f, e) for f, e in sorted(manifest.items(), key=lambda fe: (fe[1].get("size") != "small", fe[0]))
              if (args.models == "all" or e.get("size") == args.models) and (MODELS / f).is_file()
              and e.get("exporter", "torchscript") == "torchscript"]
    cache = None
    if args.cache:
        from luminal.cache import TuningCache

        cache = TuningCache(args.cache, readonly=True)
    deadline = time.perf_counter() + args.budget_s
    results = []
    for n, (f, e) in enumerate(chosen):
        left = deadline - time.perf_counter()
        need = 90.0 if e.get("size") == "full" else 30.0  # import + JIT + warm-up, roughly
        if left < need:
            results.append({"model": f, "skipped": f"{left:.0f} s of budget left"})
            continue
        timing_s = min(10.0, max(1.0, (left - need) / (len(chosen) - n) * 0.5))
        try:
            r = bench_model(f, MODELS / f, e["shapes"], timing_s, cache)
        except Exception as ex:  # one failing model must not hide the others' numbers
            r = {"model": f, "error": f"{type(ex).__name__}: {str(ex)[:300]}"}
        results.append(r)
        if "error" in r:
            print(f"{f:<34} ERROR {r['error']}", flush=True)
        elif "skipped" in r:
            print(f"{f:<34} skipped: {r['skipped']}", flush=True)
        else:
            lum, ort_ms = r["luminal"]["median_ms"], r["onnxruntime_cuda"]["median_ms"]
            print(f"{f:<34} luminal {lum:8.3f} ms  ort-cuda {ort_ms:8.3f} ms  "
                  f"speedup {r['speedup']:.2f}x  err {r['max_abs_err']:.2e}", flush=True)
    out = {"device": torch.cuda.get_device_name(0), "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if any("luminal" in r for r in results) and all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
