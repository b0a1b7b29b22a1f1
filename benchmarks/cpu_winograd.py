"""Per layer: a 3x3 convolution (+ bias + ReLU) run kernel by kernel on the C backend with its default lowering
against the Winograd rewrite (F(2x2,3x3), F(4x4,3x3)), default schedules, rounds interleaved, median and p10/p90.

    python benchmarks/cpu_winograd.py --threads 2 --rounds 7
    python benchmarks/cpu_winograd.py --only "r50" --tiles 2
"""

from __future__ import annotations

import argparse
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
    from cpu_kernels import _runner

    from luminal.codegen.backend import get_backend
    from luminal.codegen.partition import winograd_convs
    from luminal.frontend_onnx.loader import Unbound, load_model
    from luminal.ir.winograd import rewrite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--tiles", default="2,4")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    tiles = [int(t) for t in args.tiles.split(",") if t]
    # every dense stride-1 3x3 layer of cpu_convs.py
    square = [x for x in LAYERS if x.k == 3 and x.stride == 1 and x.group == 1 and not x.transpose]
    for layer in (x for x in square if args.only in x.name):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "m.onnx"
            path.write_bytes(model(layer).SerializeToString())
            g = load_model(path, None, Unbound.REFUSE).graph
        feeds = {n.attrs["name"]: np.random.default_rng(0).standard_normal(n.shape).astype(np.float32)
                 for n in g.inputs}
        (at,) = winograd_convs(g)
        conv = g.toposort()[at]
        graphs = {"direct": g} | {f"F({t}x{t})": rewrite(g, {conv.id: t})[0] for t in tiles}
        runs = {}
        ref = None
        for name, gg in graphs.items():
            run, outs, nk = _runner(gg, feeds)
            run()
            got = get_backend("cpu").to_numpy(outs[0])
            ref = got if ref is None else ref
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            runs[name] = (run, nk, err)
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
        print(f"{layer.name}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
