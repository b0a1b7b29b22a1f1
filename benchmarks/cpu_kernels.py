"""CPU kernel benchmark: generated C kernels against onnxruntime's CPU EP and a plain memory copy.

GEMMs (float32): GFLOP/s of the generated contraction kernel (and the BLAS
schedule) next to onnxruntime's MatMul with the same thread count, both
operands as runtime inputs (so both sides pack per call). Memory-bound
kernels over 16M floats: achieved bandwidth as a ratio to ``np.copyto``.
Rounds are interleaved; each round times every contender once (median of a
few calls), and the report gives the median and p10/p90 over rounds.

    python -m luminal.benchmarks.cpu_kernels            # or: python benchmarks/cpu_kernels.py
    python benchmarks/cpu_kernels.py --threads 2 --rounds 15 --only gemm --json out.json
"""

from __future__ import annotations

import argparse
import json
import os

from benchutil import blas_threads_from_argv, median_time, spread

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")

import numpy as np

GEMMS = [  # (name, batch, M, K, N)
    ("gemm 1024^3", 1, 1024, 1024, 1024),
    ("bert qkv 128x768x768", 1, 128, 768, 768),
    ("bert ffn1 128x768x3072", 1, 128, 768, 3072),
    ("bert ffn2 128x3072x768", 1, 128, 3072, 768),
    ("bert attn 12x128x64x128", 12, 128, 64, 128),
]


def _runner(graph, feeds: dict[str, np.ndarray], overrides: dict | None = None):
    """A closure running the graph kernel by kernel on preallocated buffers (``overrides`` on the default
    schedule of every contraction)."""
    from luminal.codegen.backend import get_backend
    from luminal.codegen.c.check import bind
    from luminal.codegen.partition import partition

    be = get_backend("cpu")
    kernels = partition(graph, {})
    schedules = [{**be.default_schedule(k), **overrides} if overrides and k.form == "contraction" else None
                 for k in kernels]
    run, outs, kernels = bind(graph, feeds, schedules=schedules, kernels=kernels, backend=be)
    return run, outs, len(kernels)


ORT_SPIN = False


def _ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    # idle workers sleep, like the OpenMP passive wait policy of the generated kernels (--ort-spin to change)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if ORT_SPIN else "0")
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _onnx_matmul(batch: int, m: int, k: int, n: int):
    from onnx import TensorProto, helper

    sa = [batch, m, k] if batch > 1 else [m, k]
    sb = [batch, k, n] if batch > 1 else [k, n]
    sc = [batch, m, n] if batch > 1 else [m, n]
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, sa),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, sb)],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, sc)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def bench_gemms(threads: int, rounds: int, reps: int, impls: list[str]) -> list[dict]:
    from luminal.ir import DType, Graph, Tensor, optimize

    rng = np.random.default_rng(0)
    out = []
    for name, batch, m, k, n in GEMMS:
        shape_a = (batch, m, k) if batch > 1 else (m, k)
        shape_b = (batch, k, n) if batch > 1 else (k, n)
        a = Tensor.input("a", shape_a, DType.float32)
        b = Tensor.input("b", shape_b, DType.float32)
        graph = optimize(Graph([a.node, b.node], [a.matmul(b).contiguous().node], ["c"]))
        feeds = {"a": rng.standard_normal(shape_a).astype(np.float32),
                 "b": rng.standard_normal(shape_b).astype(np.float32)}
        want = feeds["a"] @ feeds["b"]
        contenders = {}
        for impl in impls:
            run, outs, _ = _runner(graph, feeds, {"impl": impl})
            run()
            err = float(np.abs(outs[0] - want).max() / (np.abs(want).max() + 1e-30))
            assert err < 1e-4, (name, impl, err)
            contenders[f"luminal-{impl}"] = run
        sess = _ort_session(_onnx_matmul(batch, m, k, n), threads)
        contenders["onnxruntime"] = lambda s=sess, f=feeds: s.run(None, f)
        flops = 2.0 * batch * m * n * k
        times: dict[str, list[float]] = {c: [] for c in contenders}
        # numpy's BLAS threads spin for a while after each call and starve whatever runs next on a small
        # machine (measured: onnxruntime 142 -> 64 GFLOP/s at 1024^3 on 2 cores), so the BLAS schedule is
        # timed in its own rounds after the others
        groups = [[c for c in contenders if c != "luminal-blas"], [c for c in contenders if c == "luminal-blas"]]
        for group in groups:
            for c in group:
                median_time(contenders[c], 3)
            for _ in range(rounds):
                for c in group:
                    times[c].append(median_time(contenders[c], reps))
        row = {"case": name, "flops": flops}
        for c, ts in times.items():
            row[c] = spread([flops / t / 1e9 for t in ts])
        for impl in impls:
            row[f"ratio-{impl}"] = row[f"luminal-{impl}"]["median"] / row["onnxruntime"]["median"]
        out.append(row)
        print(f"{name:28s} " + "  ".join(
            f"{c}={row[c]['median']:.1f} [{row[c]['p10']:.1f},{row[c]['p90']:.1f}]" for c in contenders)
            + "  GFLOP/s  " + " ".join(f"ratio({i})={row[f'ratio-{i}']:.2f}" for i in impls), flush=True)
    return out


def bench_memory(rounds: int, reps: int) -> list[dict]:
    from luminal.ir import DType, Graph, Tensor, optimize, run_reference

    rng = np.random.default_rng(0)
    rows, cols = 16384, 1024
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    src = np.empty_like(x)
    dst = np.empty_like(x)
    src[...] = x

    def copy():
        np.copyto(dst, src)

    cases = {}
    t = Tensor.input("x", (rows, cols), DType.float32)
    chain = t.mul(1.5).add(0.25).relu().sigmoid()
    cases["elementwise chain"] = optimize(Graph([t.node], [chain.contiguous().node], ["y"]))
    t2 = Tensor.input("x", (rows, cols), DType.float32)
    cases["softmax"] = optimize(Graph([t2.node], [t2.softmax(-1).contiguous().node], ["y"]))
    out = []
    nbytes = 2 * x.nbytes
    for name, graph in cases.items():
        run, outs, nk = _runner(graph, {"x": x})
        run()
        np.testing.assert_allclose(outs[0], run_reference(graph, {"x": x})[0], rtol=1e-4, atol=1e-5)
        tc, tk = [], []
        median_time(copy, 3)
        median_time(run, 3)
        for _ in range(rounds):
            tc.append(median_time(copy, reps))
            tk.append(median_time(run, reps))
        bw_copy = spread([nbytes / t / 1e9 for t in tc])
        bw_k = spread([nbytes / t / 1e9 for t in tk])
        ratio = bw_k["median"] / bw_copy["median"]
        out.append({"case": name, "kernels": nk, "copy_GBps": bw_copy, "luminal_GBps": bw_k, "ratio": ratio})
        print(f"{name:28s} kernels={nk} luminal={bw_k['median']:.1f} [{bw_k['p10']:.1f},{bw_k['p90']:.1f}] GB/s  "
              f"copy={bw_copy['median']:.1f} [{bw_copy['p10']:.1f},{bw_copy['p90']:.1f}] GB/s  ratio={ratio:.2f}",
              flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="threads for both sides (default: all cores)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=["gemm", "memory"], default=None)
    ap.add_argument("--impl", default="generated,blas", help="contraction schedules to time")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ort-spin", action="store_true", help="let onnxruntime's idle threads spin (its default)")
    args = ap.parse_args()
    global ORT_SPIN
    ORT_SPIN = args.ort_spin
    from luminal.target import cores

    threads = args.threads or cores()
    os.environ["LUMINAL_NUM_THREADS"] = str(threads)
    print(f"threads={threads} load average={os.getloadavg()[0]:.1f} ort_spin={ORT_SPIN}")
    res = {"threads": threads}
    if args.only in (None, "gemm"):
        res["gemm"] = bench_gemms(threads, args.rounds, args.reps, args.impl.split(","))
    if args.only in (None, "memory"):
        res["memory"] = bench_memory(args.rounds, args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
