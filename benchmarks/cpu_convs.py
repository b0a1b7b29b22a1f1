"""Single convolution layers on the CPU: luminal (default schedules, or a tuning cache's winners) against
onnxruntime's CPU EP, same thread count, rounds interleaved, median and p10/p90 per layer.

Each layer is one ONNX model (Conv with seeded weights and a bias, or ConvTranspose), built here with
onnx.helper; outputs are checked against onnxruntime before timing.

    python benchmarks/cpu_convs.py --threads 2                       # untuned, every layer
    python benchmarks/cpu_convs.py --only dw --rounds 15 --json out.json
    python benchmarks/cpu_convs.py --tune 120 --cache /tmp/convs.db  # luminal tune --budget 120s per layer first
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchutil import blas_threads_from_argv, by_placement, placement_note, placement_probe, spread, timed_rounds

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS")

import numpy as np


@dataclass(frozen=True)
class Layer:
    name: str
    n: int  # batch
    cin: int
    cout: int
    hw: int  # input height and width
    k: int
    stride: int = 1
    pad: int = -1  # -1: k // 2
    group: int = 1
    transpose: bool = False
    dilation: int = 1
    output_padding: int = 0  # a ConvTranspose's

    @property
    def pads(self) -> int:
        return self.k // 2 * self.dilation if self.pad < 0 else self.pad

    @property
    def macs(self) -> int:
        if self.transpose:
            return self.n * self.cin * self.cout * self.k * self.k * self.hw * self.hw // self.group
        out = (self.hw + 2 * self.pads - self.dilation * (self.k - 1) - 1) // self.stride + 1
        return self.n * self.cout * out * out * self.k * self.k * self.cin // self.group


LAYERS = [
    Layer("3x3 64->16 160", 1, 64, 16, 160, 3),
    Layer("dw3x3 96 112", 1, 96, 96, 112, 3, group=96),
    Layer("dw5x5 240 28", 1, 240, 240, 28, 5, group=240),
    Layer("3x3 64->64 56", 1, 64, 64, 56, 3),
    Layer("1x1 32->64 160", 1, 32, 64, 160, 1),
    Layer("stem 3x3s2 3->16 640", 1, 3, 16, 640, 3, stride=2),
    Layer("3x3s2 128->256 40", 1, 128, 256, 40, 3, stride=2),
    Layer("r50 1x1 64->256 56", 1, 64, 256, 56, 1),
    Layer("r50 3x3 128 28", 1, 128, 128, 28, 3),
    Layer("r50 3x3 256 14", 1, 256, 256, 14, 3),
    Layer("r50 3x3 512 7", 1, 512, 512, 7, 3),
    Layer("vgg 3x3 256 56", 1, 256, 256, 56, 3),
    Layer("yolo 3x3 128 40", 1, 128, 128, 40, 3),
    Layer("3x3 32->32 112", 1, 32, 32, 112, 3),
    Layer("r50 1x1 2048->512 7", 1, 2048, 512, 7, 1),
    Layer("r50 stem 7x7s2 3->64 224", 1, 3, 64, 224, 7, stride=2),
    Layer("mbv2 expand 1x1 24->144 56", 1, 24, 144, 56, 1),
    Layer("mbv2 dw3x3 144 56", 1, 144, 144, 56, 3, group=144),
    Layer("mbv2 project 1x1 144->24 56", 1, 144, 24, 56, 1),
    Layer("dw3x3 x2 32->64 56", 1, 32, 64, 56, 3, group=32),
    Layer("dw3x3s2 64 112", 1, 64, 64, 112, 3, stride=2, group=64),
    Layer("dw5x5s2 672 14", 1, 672, 672, 14, 5, stride=2, group=672),
    Layer("dw5x5 960 7", 1, 960, 960, 7, 5, group=960),
    Layer("convT 2x2s2 64->32 80", 1, 64, 32, 80, 2, stride=2, pad=0, transpose=True),
    Layer("convT 3x3s2 op1 64->32 80", 1, 64, 32, 80, 3, stride=2, pad=1, transpose=True, output_padding=1),
    Layer("convT 4x4s2 128->64 32", 1, 128, 64, 32, 4, stride=2, pad=1, transpose=True),
    Layer("3x3 36->20 57 (odd)", 1, 36, 20, 57, 3),
    Layer("3x3 64->64 56 b8", 8, 64, 64, 56, 3),
    Layer("atrous 3x3 256 d2 28", 1, 256, 256, 28, 3, dilation=2),
    Layer("atrous 3x3 512 d4 33", 1, 512, 512, 33, 3, dilation=4),
    Layer("aspp 3x3 960->256 d6 16", 1, 960, 256, 16, 3, dilation=6),
    Layer("aspp 3x3 960->256 d12 16", 1, 960, 256, 16, 3, dilation=12),
    Layer("regnet g25 3x3s2 400 14", 1, 400, 400, 14, 3, stride=2, group=25),
    Layer("regnet g25 3x3 400 7", 1, 400, 400, 7, 3, group=25),
    Layer("regnetx g2 3x3s2 32 112", 1, 32, 32, 112, 3, stride=2, group=2),
    Layer("regnetx g4 3x3s2 64 56", 1, 64, 64, 56, 3, stride=2, group=4),
    Layer("resnext g32 3x3 128 56", 1, 128, 128, 56, 3, group=32),
    Layer("resnext g32 3x3s2 1024 14", 1, 1024, 1024, 14, 3, stride=2, group=32),
    Layer("convnext dw7x7 96 56", 1, 96, 96, 56, 7, group=96),
    Layer("dw9x9 64 40", 1, 64, 64, 40, 9, group=64),
]


def model(layer: Layer, seed: int = 0):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    k, g = layer.k, layer.group
    if layer.transpose:
        wshape = [layer.cin, layer.cout // g, k, k]
        out = (layer.hw - 1) * layer.stride - 2 * layer.pads + k + layer.output_padding
    else:
        wshape = [layer.cout, layer.cin // g, k, k]
        out = (layer.hw + 2 * layer.pads - layer.dilation * (k - 1) - 1) // layer.stride + 1
    fan_in = math.prod(wshape[1:])
    w = (rng.standard_normal(wshape) / math.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(layer.cout).astype(np.float32) * 0.1
    node = helper.make_node("ConvTranspose" if layer.transpose else "Conv", ["x", "w", "b"], ["y"],
                            kernel_shape=[k, k], strides=[layer.stride] * 2, pads=[layer.pads] * 4, group=g,
                            **({"dilations": [layer.dilation] * 2} if layer.dilation > 1 else {}),
                            **({"output_padding": [layer.output_padding] * 2} if layer.output_padding else {}))
    graph = helper.make_graph(
        [node], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [layer.n, layer.cin, layer.hw, layer.hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [layer.n, layer.cout, out, out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bench(layer: Layer, path: Path, threads: int, rounds: int, reps: int, cache: str | None) -> dict:
    import onnxruntime as ort

    from luminal.cli.bench_stats import paired_ratio
    from luminal.runtime.session import InferenceSession

    ours = InferenceSession(path, backend="cpu", cache=cache, threads=threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal([layer.n, layer.cin, layer.hw, layer.hw]).astype(np.float32)
    (got,) = ours.run(None, {"x": x})
    (want,) = ref.run(None, {"x": x})
    err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))
    (tl, tr), tags = timed_rounds([lambda: ours.run(None, {"x": x}), lambda: ref.run(None, {"x": x})], rounds, reps,
                                  placement_probe())
    lu, ox = ({f"{k}_ms": 1e3 * v for k, v in spread(ts).items()} for ts in (tl, tr))
    row = {"layer": layer.name, "max_rel_err": err, "kernels": len(ours.model.kernels), "luminal": lu,
           "onnxruntime": ox, "speedup_vs_ort": paired_ratio(tr, tl),
           "gflops": 2 * layer.macs / lu["median_ms"] / 1e6, "placement": by_placement(tags, tl, tr)}
    row["line"] = (f"{layer.name:30s} k={row['kernels']} err={err:.0e}  luminal={lu['median_ms']:7.3f}ms "
                   f"[{lu['p10_ms']:.3f},{lu['p90_ms']:.3f}]  onnxruntime={ox['median_ms']:7.3f}ms "
                   f"[{ox['p10_ms']:.3f},{ox['p90_ms']:.3f}]  {row['gflops']:5.1f} GFLOP/s  "
                   f"speedup={row['speedup_vs_ort']:.2f}x{placement_note(row['placement'])}")
    return row


def _one(args: argparse.Namespace, threads: int) -> None:
    """Tune (with --tune) and time one layer; its row is the last line printed, as JSON."""
    (layer,) = [x for x in LAYERS if x.name == args.one]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layer.onnx"
        path.write_bytes(model(layer).SerializeToString())
        cache = args.cache or str(Path(tmp) / "cache.db")  # untuned: an empty cache, not the user's
        try:
            if args.tune:
                tune = "from luminal.cli.main import main; main()"
                subprocess.run([sys.executable, "-c", tune, "tune", str(path), "--backend", "cpu", "--budget",
                                f"{args.tune}s", "--cache", cache], check=True, stdout=subprocess.DEVNULL,
                               env={**os.environ, "LUMINAL_NUM_THREADS": str(threads)})
            row = bench(layer, path, threads, args.rounds, args.reps, cache)
        except Exception as e:
            row = {"layer": layer.name, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", default="", help="substring of the layer names to run")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tune", type=float, default=0, help="seconds of `luminal tune` per layer before timing")
    ap.add_argument("--cache", default=None, help="tuning cache to read (and, with --tune, to fill)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # one layer, in a process of its own
    args = ap.parse_args()
    from luminal.target import cores

    threads = args.threads or cores()
    if args.one is not None:
        _one(args, threads)
        return
    print(f"threads={threads} load average={os.getloadavg()[0]:.1f}")
    rows = []
    for layer in LAYERS:
        if args.only not in layer.name:
            continue
        # each layer in a fresh process, as a user runs one model: sessions left behind by earlier layers
        # (theirs and onnxruntime's threads) slowed later layers by up to 1.8x
        cmd = [sys.executable, __file__, "--one", layer.name, "--threads", str(threads), "--rounds",
               str(args.rounds), "--reps", str(args.reps), "--tune", str(args.tune)]
        done = subprocess.run(cmd + (["--cache", args.cache] if args.cache else []), stdout=subprocess.PIPE,
                              text=True)
        lines = done.stdout.strip().splitlines()
        try:
            row = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            row = {"layer": layer.name, "error": f"exit {done.returncode}"}
        print(row.get("line") or f"{layer.name:30s} failed: {row['error'][:200]}", flush=True)
        rows.append(row)
    ok = [r["speedup_vs_ort"] for r in rows if "speedup_vs_ort" in r]
    if ok:
        geo = statistics.geometric_mean(ok)
        print(f"geomean speedup {geo:.2f}x over {len(ok)} layers, min {min(ok):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "tuned_s": args.tune, "layers": rows}, indent=1))


if __name__ == "__main__":
    main()
