"""End-to-end CPU latency: luminal's cpu backend (default schedules) against onnxruntime's CPU EP.

Both sides use the same thread count; rounds are interleaved; outputs are
checked against onnxruntime before timing. Models and shapes come from
examples/models/manifest.json (export them with examples/export_models.py).

    python benchmarks/cpu_models.py                     # the small models
    python benchmarks/cpu_models.py --size full --only bert --rounds 9
    python benchmarks/cpu_models.py --size cnn --threads 2 --rounds 5   # ResNet-50, MobileNetV3, YOLO, DB, CRNN,
                                                        # DeepLab, the light model-zoo graphs (--sizes cnn)
    python benchmarks/cpu_models.py --size vision --threads 2          # torchvision's (--sizes vision)
    python benchmarks/cpu_models.py --size quant --threads 2           # onnxruntime-quantized CNNs (--sizes quant)
    python benchmarks/cpu_models.py --size tf2onnx --threads 2         # Keras models through tf2onnx, and
    python benchmarks/cpu_models.py --size paddle2onnx --threads 2     # Paddle's through paddle2onnx
                                                        # (examples/export_foreign.py)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchutil import blas_threads_from_argv, by_placement, placement_note, placement_probe, spread, timed_rounds

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS")

import numpy as np

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
SIZES = ("small", "full", "cnn", "vision", "quant", "tf2onnx", "paddle2onnx")  # the manifest's groups


def manifest_models(size: str, only: str = "") -> list[tuple[str, dict]]:
    """The exported models of group ``size`` whose file names hold ``only``, by name, with their manifest entries."""
    manifest = json.loads((MODELS / "manifest.json").read_text())
    return [(name, info) for name, info in sorted(manifest.items()) if info.get("size") == size and only in name]


def seeded_feeds(sess, rng) -> dict[str, np.ndarray]:
    feeds = {}
    for i in sess.get_inputs():
        shape = [int(d) for d in i.shape]
        if "int" in i.type:
            # 0/1: valid token ids, token types and attention masks alike
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.int64 if "int64" in i.type else np.int32)
        elif "bool" in i.type:
            feeds[i.name] = np.ones(shape, bool)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def bench(name: str, info: dict, threads: int, rounds: int, reps: int) -> dict:
    import onnxruntime as ort

    from luminal.cli.bench_stats import paired_ratio
    from luminal.runtime.session import InferenceSession

    path = MODELS / name
    t0 = time.perf_counter()
    ours = InferenceSession(path, backend="cpu", shapes=info.get("shapes") or {}, threads=threads)
    compile_s = time.perf_counter() - t0
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = seeded_feeds(ours, np.random.default_rng(0))
    ort_feeds = {i.name: feeds[i.name] for i in ref.get_inputs() if i.name in feeds}
    got = ours.run(None, feeds)
    want = ref.run(None, ort_feeds)
    err = max(float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()
                    / (np.abs(np.asarray(w, np.float64)).max() + 1e-30)) for g, w in zip(got, want))
    (tl, tr), tags = timed_rounds([lambda: ours.run(None, feeds), lambda: ref.run(None, ort_feeds)], rounds, reps,
                                  placement_probe())

    def stats(ts):
        return {f"{k}_ms": 1e3 * v for k, v in spread(ts).items()}

    row = {"model": name, "compile_s": compile_s, "max_rel_err": err, "kernels": len(ours.model.kernels),
           "luminal": stats(tl), "onnxruntime": stats(tr)}
    row["speedup_vs_ort"] = paired_ratio(tr, tl)
    row["placement"] = by_placement(tags, tl, tr)
    lu, ox = row["luminal"], row["onnxruntime"]
    print(f"{name:32s} kernels={row['kernels']:4d} err={err:.1e} compile={compile_s:.1f}s  "
          f"luminal={lu['median_ms']:.2f}ms [{lu['p10_ms']:.2f},{lu['p90_ms']:.2f}]  "
          f"onnxruntime={ox['median_ms']:.2f}ms [{ox['p10_ms']:.2f},{ox['p90_ms']:.2f}]  "
          f"speedup={row['speedup_vs_ort']:.2f}x{placement_note(row['placement'])}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--only", default="", help="substring of the model file names to run")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from luminal.target import cores

    threads = args.threads or cores()
    load = os.getloadavg()[0]
    print(f"threads={threads} load average={load:.1f}")
    rows = []
    for name, info in manifest_models(args.size, args.only):
        try:
            rows.append(bench(name, info, threads, args.rounds, args.reps))
        except Exception as e:  # one failing model does not stop the others
            print(f"{name:32s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
    speedups = [r["speedup_vs_ort"] for r in rows if "speedup_vs_ort" in r]
    geomean = statistics.geometric_mean(speedups) if speedups else None
    if speedups:
        print(f"geomean speedup {geomean:.2f}x over {len(speedups)} models, lowest {min(speedups):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/cpu_models.py", *sys.argv[1:]]), "threads": threads,
            "load_average_at_start": load, "geomean_speedup_vs_ort": geomean, "models": rows}, indent=1))


if __name__ == "__main__":
    main()
