"""Every example model's latency after `tune --budget` against the untuned default and onnxruntime (CPU).

The three run interleaved, round by round (luminal bench's measure_interleaved), on the same seeded
inputs and the same thread count; the tuned model is also checked against the untuned one.

    python examples/export_models.py --small-only      # once
    python benchmarks/tune_models.py --budget 10m [--size small|full|cnn|all] [--only NAME] [--json out.json]

``--size cnn`` tunes the CNN group of benchmarks/cpu_models.py (examples/export_models.py --sizes cnn).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from luminal.cache import TuningCache
from luminal.cli.bench_stats import measure_interleaved, paired_ratio, summarize
from luminal.cli.modelcheck import load_model_proto, make_inputs, onnxruntime_session
from luminal.config import parse_duration
from luminal.frontend_onnx import load
from luminal.runtime.compile import compile_graph
from luminal.search.tuner import tune

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


def bench(path: Path, shapes: dict, budget_s: float, cache: Path, storage: str, threads: int, rounds: int,
          seed: int) -> dict:
    imported = load(str(path), shapes)
    graph = imported.graph
    feeds = make_inputs(imported.inputs, load_model_proto(str(path)), seed)
    t0 = time.monotonic()
    report = tune(graph, "cpu", budget_s, cache=cache, storage=storage, seed=seed, threads=threads)
    tune_s = time.monotonic() - t0
    default = compile_graph(graph, "cpu")
    tuned = compile_graph(graph, "cpu", cache=TuningCache(cache))  # with the tuned fusion decisions too
    # idle onnxruntime threads sleep, as in luminal bench: spinning ones took the cores from whichever
    # luminal run came next in a round (ResNet-18 default 49 vs tuned 62 ms spinning, 43 vs 42 not)
    sess = onnxruntime_session(str(path), threads, spinning=False)
    out_names = [o.name for o in sess.get_outputs()]
    runners = {"luminal default": lambda: default.run(feeds), "luminal tuned": lambda: tuned.run(feeds),
               "onnxruntime": lambda: sess.run(out_names, feeds)}
    a, b = default.run(feeds), tuned.run(feeds)
    agree = all(np.allclose(x, y, rtol=1e-3, atol=1e-4, equal_nan=True) for x, y in zip(a, b))
    samples = measure_interleaved(runners, runs=rounds, seed=seed)
    stats = {k: summarize(v) for k, v in samples.items()}
    res = {k: {"median_us": _us(s.median_s), "p10_us": _us(s.p10_s), "p90_us": _us(s.p90_s)} for k, s in stats.items()}
    f = report.fusion
    # the fusion plan the tune found (what the tuned model runs where the tune's end-to-end check kept it)
    plan = {"unfused": len(f.unfused), "edges": f.edges, "winograd": len(f.winograd), "convs": f.convs,
            "channels_last": len(f.channels_last), "layouts": f.layouts} if f is not None else None
    return {"model": path.name, "shapes": shapes, "budget_s": budget_s, "tune_s": round(tune_s, 1),
            "trials": report.trials, "statuses": report.statuses, "kernels": len(report.kernels), "fusion": plan,
            "stopped": report.stopped, "tuned_matches_default": agree, "latency": res,
            "speedup_vs_default": paired_ratio(samples["luminal default"], samples["luminal tuned"]),
            "tuned_vs_onnxruntime": paired_ratio(samples["onnxruntime"], samples["luminal tuned"]), "threads": threads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="10m")
    ap.add_argument("--size", default="small", choices=("small", "full", "cnn", "all"))
    ap.add_argument("--only", default="", help="substring of model file names")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=None,
                    help="tuning cache, its studies next to it (default: a fresh one in a new temporary folder)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    manifest_path = MODELS / "manifest.json"
    if not manifest_path.exists():
        sys.exit("no example models: run python examples/export_models.py first")
    manifest = json.loads(manifest_path.read_text())
    budget = parse_duration(args.budget, "--budget")
    cache = Path(args.cache or Path(tempfile.mkdtemp(prefix="luminal-tune-models-")) / "tuning.db")
    cache.parent.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{cache.parent / 'studies.db'}"
    rows = []
    for name, info in sorted(manifest.items()):
        if (args.size != "all" and info["size"] != args.size) or args.only not in name:
            continue
        try:
            row = bench(MODELS / name, info["shapes"], budget, cache, storage, args.threads, args.rounds, args.seed)
        except Exception as e:  # one model failing must not hide the others' numbers
            row = {"model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        rows.append(row)
        if "error" in row:
            print(f"{name:34s} ERROR {row['error']}", flush=True)
            continue
        lat = row["latency"]
        print(f"{name:34s} default {lat['luminal default']['median_us']:9.1f} us  tuned "
              f"{lat['luminal tuned']['median_us']:9.1f} us  onnxruntime {lat['onnxruntime']['median_us']:9.1f} us"
              f"  | {row['speedup_vs_default']:.2f}x vs default, {row['tuned_vs_onnxruntime']:.2f}x vs ort"
              f"  ({row['trials']} trials, {row['tune_s']:.0f} s, matches default: {row['tuned_matches_default']})"
              + (f"  fusion: unfused {fp['unfused']}/{fp['edges']}, winograd {fp['winograd']}/{fp['convs']},"
                 f" channels-last {fp['channels_last']}/{fp['layouts']}" if (fp := row["fusion"]) else ""),
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
