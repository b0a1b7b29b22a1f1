"""Per layer: a 3x3 convolution (+ bias + ReLU) compiled on the C backend directly against the Winograd rewrite
(F(2x2,3x3), F(3x3,3x3), F(4x4,3x3)), default schedules, each run as a compiled model (its buffers planned,
concatenations written in place), rounds interleaved, median and p10/p90.

    python benchmarks/cpu_winograd.py --threads 2 --rounds 7
    python benchmarks/cpu_winograd.py --only "r50" --tiles 2
    python benchmarks/cpu_winograd.py --batch 8 --only "64->64 56"   # also each tile image by image

With ``--batch N`` every layer runs over N images, and each Winograd tile also image by image (``ByImage``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

from benchutil import blas_threads_from_argv, median_time, spread

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")

import numpy as np


def main() -> None:
    from cpu_convs import LAYERS, model

    from luminal.codegen.partition import ByImage, Decisions, Winograd, winograd_convs
    from luminal.frontend_onnx.loader import Unbound, load_model
    from luminal.ir.winograd import TILES
    from luminal.runtime.compile import compile_graph

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--tiles", default="", help="comma-separated tile sizes (default: every one of the set)")
    ap.add_argument("--batch", type=int, default=0, help="every layer over this many images (default: its own)")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    tiles = [int(t) for t in args.tiles.split(",") if t] or list(TILES)
    # every dense stride-1 3x3 layer of cpu_convs.py
    square = [x for x in LAYERS if x.k == 3 and x.stride == 1 and x.group == 1 and not x.transpose]
    if args.batch:
        square = list({(name := x.name.removesuffix(" b8")): dataclasses.replace(x, name=name, n=args.batch)
                       for x in square}.values())
    for layer in (x for x in square if args.only in x.name):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "m.onnx"
            path.write_bytes(model(layer).SerializeToString())
            g = load_model(path, None, Unbound.REFUSE).graph
        feeds = {n.attrs["name"]: np.random.default_rng(0).standard_normal(n.shape).astype(np.float32)
                 for n in g.inputs}
        convs = winograd_convs(g)
        if len(convs) != 1:  # an atrous pyramid's conv split by its taps (frontend_onnx.ops_nn_conv) into 1x1 ones
            print(f"{layer.name} x{layer.n}: {len(convs)} Winograd candidates, skipped", flush=True)
            continue
        (at,) = convs
        variants: dict[str, Decisions] = {"direct": {}} | {f"F({t}x{t})": {Winograd(at, t): True} for t in tiles}
        if layer.n > 1:
            variants |= {f"F({t}x{t}) by image": {Winograd(at, t): True, ByImage(at): True} for t in tiles}
        runs = {}
        ref = None
        for name, decisions in variants.items():
            compiled = compile_graph(g, "cpu", decisions=decisions)
            got = compiled.run(feeds)[0]
            ref = got if ref is None else ref
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            runs[name] = (lambda c=compiled, f=feeds: c.run(f), len(compiled.launched), err)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.rounds):
            for name, (run, _, _) in runs.items():
                times[name].append(median_time(run, args.reps))
        base = float(np.median(times["direct"]))
        cells = []
        for name, (_, nk, err) in runs.items():
            sp = spread(times[name])
            med, lo, hi = sp["median"], sp["p10"], sp["p90"]
            cells.append(f"{name} {med * 1e3:.2f} ms [{lo * 1e3:.2f}-{hi * 1e3:.2f}] x{base / med:.2f} "
                         f"({nk} kernels, rel err {err:.1e})")
        print(f"{layer.name} x{layer.n}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
