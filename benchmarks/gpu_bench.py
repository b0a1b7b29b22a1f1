"""Example models on the GPU: luminal (backend cuda) vs onnxruntime's CUDA execution provider.

    python benchmarks/gpu_bench.py [--models small|full|all] [--budget-s 240] [--cache F] [--json out.json]

Each model goes the way of ``luminal bench --backend cuda`` (cli.benchlib.bench_model): outputs
checked against onnxruntime first, then both timed in interleaved rounds, host<->device copies
included on both sides; medians, p10..p90 and the speedup with its confidence interval. Models that
no longer fit the wall-clock budget are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def bench_all(chosen: list[tuple[str, dict]], budget_s: float, backend: str, cache: str | None) -> list[dict]:
    from luminal.cli.benchlib import Settings, bench_model
    from luminal.cli.project import Job

    deadline = time.perf_counter() + budget_s
    results = []
    for n, (f, e) in enumerate(chosen):
        left = deadline - time.perf_counter()
        need = 90.0 if e.get("size") == "full" else 30.0  # import + JIT + warm-up, roughly
        if left < need:
            r = {"name": f, "status": "skipped", "message": f"{left:.0f} s of budget left"}
        else:
            time_s = min(10.0, max(1.0, (left - need) / (len(chosen) - n) * 0.5))
            settings = Settings(backend=backend, time_s=time_s, warmup_s=min(1.0, time_s / 4), cache=cache)
            try:
                r = bench_model(Job(f, MODELS / f, e["shapes"]), settings)
            except Exception as ex:  # one failing model must not hide the others' numbers
                r = {"name": f, "status": "error", "message": f"{type(ex).__name__}: {str(ex)[:300]}"}
        results.append(r)
        if r["status"] == "ok":
            ours, theirs = (r["runtimes"][k]["median_s"] * 1e3 for k in ("luminal", "onnxruntime"))
            err = max((o["max_abs"] or 0.0) for o in r["parity"]["outputs"])
            print(f"{f:<34} luminal {ours:8.3f} ms  onnxruntime {theirs:8.3f} ms  "
                  f"speedup {r['speedup']['onnxruntime']['ratio']:.2f}x  err {err:.2e}", flush=True)
        else:
            print(f"{f:<34} {r['status']}: {r.get('message', '')}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", choices=("small", "full", "all"), default="all")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="wall-clock budget; models that no longer fit are listed as skipped")
    ap.add_argument("--cache", help="tuning cache to take schedules from")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    import torch

    from luminal.cli.benchlib import sanitize

    if not torch.cuda.is_available():
        print("no CUDA GPU visible", file=sys.stderr)
        return 2
    manifest = json.loads((MODELS / "manifest.json").read_text()) if (MODELS / "manifest.json").is_file() else {}
    chosen = [(f, e) for f, e in sorted(manifest.items(), key=lambda fe: (fe[1].get("size") != "small", fe[0]))
              if (args.models == "all" or e.get("size") == args.models) and (MODELS / f).is_file()
              and e.get("exporter", "torchscript") == "torchscript"]
    results = bench_all(chosen, args.budget_s, "cuda", args.cache)
    if args.json:
        Path(args.json).write_text(json.dumps(sanitize({"device": torch.cuda.get_device_name(0),
                                                        "results": results}), indent=1))
    statuses = [r["status"] for r in results]
    return 0 if "ok" in statuses and "error" not in statuses else 1


if __name__ == "__main__":
    sys.exit(main())
