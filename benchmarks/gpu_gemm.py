"""Matrix products on the GPU: luminal's kernels (default, and tuned where asked) against torch.matmul (cuBLAS).

    python benchmarks/gpu_gemm.py [--dtypes float32,float16,bfloat16] [--sweep] [--tune-s 0] [--json out.json]

Each case is an ONNX MatMul of an input A (M x K) and a constant B (K x N), compiled for the cuda backend. Both
sides are timed on the same device tensors as the search times candidates (search.timing: CUDA events around each
launch, L2 evicted first, rounds interleaved); reported: median TFLOP/s, p10..p90, and the largest error against
torch's product relative to its largest magnitude. With --sweep, a fixed list of tiles (SWEEP) is timed on the
SWEPT cases too. With --tune-s, `luminal tune --backend cuda` spends that long on each TUNED case first and the
tuned kernels are timed as a third column.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# (name, M, K, N): square products, and BERT-base / GPT-2 projections at 1 x 128 and 32 x 128 tokens
CASES = [
    ("square-1024", 1024, 1024, 1024),
    ("square-4096", 4096, 4096, 4096),
    ("bert-qkv-b1", 128, 768, 2304),
    ("bert-ffn1-b1", 128, 768, 3072),
    ("bert-ffn2-b1", 128, 3072, 768),
    ("bert-qkv-b32", 4096, 768, 2304),
    ("bert-ffn1-b32", 4096, 768, 3072),
    ("bert-ffn2-b32", 4096, 3072, 768),
]
TUNED = (("square-4096", "float16"), ("bert-ffn1-b32", "bfloat16"))
# contraction tiles timed one by one with --sweep: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
SWEEP = [(64, 64, 32, 4, 3), (128, 128, 32, 4, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
         (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 256, 64, 8, 3)]
SWEPT = ("square-4096", "bert-ffn1-b32", "bert-qkv-b1", "bert-ffn2-b1")
LUMINAL = "import sys; from luminal.cli.main import main; sys.argv[0] = 'luminal'; main()"


def _model(path: Path, m: int, k: int, n: int, dtype: str, seed: int) -> np.ndarray:
    import ml_dtypes
    import onnx
    from onnx import helper, numpy_helper

    elem = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
            "bfloat16": onnx.TensorProto.BFLOAT16}[dtype]
    b = np.random.default_rng(seed).standard_normal((k, n), dtype=np.float32) / np.sqrt(k)
    init = numpy_helper.from_array(b.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype), "B")
    g = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "gemm",
                          [helper.make_tensor_value_info("A", elem, [m, k])],
                          [helper.make_tensor_value_info("Y", elem, [m, n])], [init])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return b


def bench_case(path: Path, b: np.ndarray, m: int, k: int, n: int, dtype: str, cache: Path | None,
               rounds: int, sweep: bool) -> dict:
    import torch
    from benchutil import spread

    from luminal.cache import TuningCache
    from luminal.runtime.compile import compile_model
    from luminal.search.timing import TimingPlan, interleaved, make_timer

    tdt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda").to(tdt)
    tb = torch.from_numpy(b).cuda().to(tdt)
    sides = {"default": compile_model(path, backend="cuda")}
    if cache is not None:
        sides["tuned"] = compile_model(path, backend="cuda", cache=TuningCache(cache))
    ref = (a.float() @ tb.float())
    out: dict = {"M": m, "K": k, "N": n, "dtype": dtype}
    launch = {"torch": lambda: torch.matmul(a, tb)}
    for name, cm in sides.items():
        (inp,) = cm.inputs
        cm._values[inp.node].copy_(a)
        launch[name] = cm._launch
        launch[name]()
        torch.cuda.synchronize()
        y = cm._values[cm.outputs[0].node].float()
        out[f"{name}_rel_err"] = float((y - ref).abs().max() / ref.abs().max())
    flop = 2.0 * m * k * n
    if sweep:
        (kern,), be = sides["default"].kernels, sides["default"].backend
        points = [{**be.default_schedule(kern), "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw,
                   "num_stages": ns} for bm, bn, bk, nw, ns in SWEEP]
        points = [p for p in points if be.valid(kern, p)]
        args = sides["default"]._args[0]
        for p, ck in zip(points, be.compile([(kern, p) for p in points])):
            launch["x".join(str(p[key]) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))] = \
                functools.partial(ck, args)
    # the search's own timing: CUDA events around each launch, L2 evicted before it, candidates in rounds
    timer = make_timer(sides["default"].backend)
    samples = interleaved(timer, list(launch.values()), TimingPlan(cap_s=0.1, min_reps=rounds), torch.cuda.synchronize)
    for name, ns in zip(launch, samples):
        s = spread([flop / (t * 1e-9) / 1e12 for t in ns])
        out[name] = {"median_tflops": s["median"], "p10": s["p10"], "p90": s["p90"]}
    for name in launch:
        if name != "torch":
            out[f"{name}_vs_torch"] = out[name]["median_tflops"] / out["torch"]["median_tflops"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--tune-s", type=int, default=0, help="tuning budget per tuned case (0: none)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sweep", action="store_true", help="also time the SWEEP tiles on the SWEPT cases")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            for i, (name, m, k, n) in enumerate(CASES):
                path = Path(tmp) / f"{name}-{dtype}.onnx"
                b = _model(path, m, k, n, dtype, seed=i)
                cache = None
                if args.tune_s and (name, dtype) in TUNED:
                    cache = Path(tmp) / f"{name}-{dtype}.db"
                    tune = subprocess.run([sys.executable, "-c", LUMINAL, "tune", str(path), "--backend", "cuda",
                                           "--budget", f"{args.tune_s}s", "--cache", str(cache)],
                                          check=False, capture_output=True, text=True)
                    print("\n".join((tune.stdout + tune.stderr).strip().splitlines()[-8:]), flush=True)
                try:
                    r = {"name": name, **bench_case(path, b, m, k, n, dtype, cache, args.rounds,
                                                          args.sweep and name in SWEPT)}
                except Exception as ex:  # one failing case must not hide the others' numbers
                    r = {"name": name, "dtype": dtype, "error": f"{type(ex).__name__}: {str(ex)[:300]}"}
                results.append(r)
                if args.json:  # after each case: a later failure keeps the numbers so far
                    Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(0),
                                                           "results": results}, indent=1))
                if "error" in r:
                    print(f"{name:<14} {dtype:<9} error: {r['error']}", flush=True)
                    continue
                cols = "  ".join(f"{s} {r[s]['median_tflops']:7.1f}" for s in ("torch", "default", "tuned") if s in r)
                ratio = "  ".join(f"{s}/torch {r[f'{s}_vs_torch']:.2f}" for s in ("default", "tuned") if s in r)
                print(f"{name:<14} {dtype:<9} TFLOP/s {cols}  {ratio}  err {r['default_rel_err']:.1e}", flush=True)
                swept = sorted((v["median_tflops"], p) for p, v in r.items() if p[0].isdigit() and isinstance(v, dict))
                if swept:
                    print("    tiles (TFLOP/s):", "  ".join(f"{p} {t:.0f}" for t, p in reversed(swept)), flush=True)
    return 0 if results and not any("error" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
