"""What compiling at run time costs: a session made without shapes against one compiled ahead of time for the
same sizes, and onnxruntime at those sizes.

For each size: the first run of a fresh session at that size (import, partition, kernels from a warm kernel
cache: the C libraries built once before), then the steady state, rounds interleaved between the session that
compiled at its first run, the one compiled ahead of time (``shapes=``), the latter's compiled model called without
the session (the floor: what the session's checks and variant lookup add shows against it) and onnxruntime. The
steady-state ratio (run-time compiled / ahead of time) should be 1 within 2%.

    python benchmarks/dynamic_shapes.py                          # bert-small at seq 16, 64, 128 on 4 threads
    python benchmarks/dynamic_shapes.py --model gpt2-small-torchscript.onnx --sizes 8,32 --threads 2
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

from benchutil import blas_threads_from_argv, median_time, spread

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS")

import numpy as np

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def _feeds(names: list[str], batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {n: rng.integers(0, 2, (batch, seq)).astype(np.int64) for n in names}


def bench(path: Path, batch: int, sizes: list[int], threads: int, rounds: int, reps: int, backend: str) -> dict:
    import onnxruntime as ort

    from luminal.runtime.session import InferenceSession

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in ref.get_inputs()]
    rng = np.random.default_rng(0)
    rows = []
    for seq in sizes:
        feeds = _feeds(names, batch, seq, rng)
        InferenceSession(path, backend=backend, threads=threads).run(None, feeds)  # warms the kernel cache
        lazy = InferenceSession(path, backend=backend, threads=threads)
        t0 = time.perf_counter()
        got = lazy.run(None, feeds)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ahead = InferenceSession(path, backend=backend, threads=threads, shapes={"batch": batch, "seq": seq})
        ahead_compile_s = time.perf_counter() - t0
        for a, b in zip(got, ref.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
        runners = {"run time": partial(lazy.run, None, feeds), "ahead of time": partial(ahead.run, None, feeds),
                   "compiled model": partial(ahead.model.run, feeds), "onnxruntime": partial(ref.run, None, feeds)}
        runs: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(rounds):
            for k, fn in runners.items():
                runs[k].append(median_time(fn, reps))
        st = {k: spread(v) for k, v in runs.items()}
        ratio = st["run time"]["median"] / st["ahead of time"]["median"]
        rows.append({"seq": seq, "first_run_s": first_s, "ahead_compile_s": ahead_compile_s, "steady": st,
                     "ratio_vs_ahead": ratio, "within_2pct": abs(ratio - 1) <= 0.02})
        print(f"seq {seq:4d}: first run {first_s * 1e3:8.1f} ms (ahead-of-time session made in "
              f"{ahead_compile_s * 1e3:.1f} ms); steady run time {st['run time']['median'] * 1e3:.3f} ms, "
              f"ahead of time {st['ahead of time']['median'] * 1e3:.3f} ms (x{ratio:.3f}), its compiled model "
              f"alone {st['compiled model']['median'] * 1e3:.3f} ms, onnxruntime "
              f"{st['onnxruntime']['median'] * 1e3:.3f} ms", flush=True)
    return {"model": path.name, "backend": backend, "threads": threads, "batch": batch, "rounds": rounds,
            "reps": reps, "sizes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-small-torchscript.onnx", help="a model of examples/models with "
                    "[batch, seq] int64 inputs")
    ap.add_argument("--sizes", default="16,64,128", help="sequence lengths")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    path = Path(a.model) if Path(a.model).is_file() else MODELS / a.model
    out = bench(path, a.batch, [int(s) for s in a.sizes.split(",")], a.threads, a.rounds, a.reps, a.backend)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
