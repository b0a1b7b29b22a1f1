"""Tuning cache speed: winner lookup with many trials stored (target < 1 ms) and import of a large
export (target < 10 s).

    python benchmarks/cache_bench.py [--trials 100000] [--kernels 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from luminal.cache import Fingerprint, TuningCache

DEV = Fingerprint.of("cpu", {"model": "bench cpu", "isa": ["avx2"], "cores": 16})
TC = Fingerprint.of("tc", {"codegen": "1", "cc": "bench cc"})


def _spread(ns: list[int]) -> dict[str, float]:
    q = statistics.quantiles(ns, n=10)
    return {"median_us": statistics.median(ns) / 1e3, "p10_us": q[0] / 1e3, "p90_us": q[-1] / 1e3,
            "max_us": max(ns) / 1e3, "n": len(ns)}


def populate(path: Path, n_trials: int, n_kernels: int) -> tuple[float, float]:
    rng = random.Random(0)
    t0, cpu0 = time.perf_counter(), time.process_time()
    with TuningCache(path) as c, c.transaction():
        for k in range(n_kernels):
            c.record_kernel(f"sig{k:06d}", "contraction", f"kernel {k}: acc = SumReduce(Mul(a, b))", {"a": [k, 64]})
        for i in range(n_trials):
            sig = f"sig{i % n_kernels:06d}"
            config = {"BLOCK_M": rng.choice([16, 32, 64, 128]), "BLOCK_N": rng.choice([32, 64, 128]),
                      "num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([2, 3, 4]), "trial": i}
            status = "ok" if rng.random() < 0.9 else rng.choice(["compile_error", "crash", "timeout"])
            samples = [rng.randint(10_000, 1_000_000) for _ in range(7)] if status == "ok" else None
            c.record_trial(sig, DEV, TC, config, status, samples)
            if samples:
                c.propose_winner(sig, DEV, TC, config, sorted(samples)[3], default_ns=1_000_000)
    return time.perf_counter() - t0, time.process_time() - cpu0


def bench_lookup(path: Path, n_kernels: int, repeats: int) -> dict[str, object]:
    rng = random.Random(1)
    with TuningCache(path, readonly=True) as c:
        warm = []
        for _ in range(repeats):
            sig = f"sig{rng.randrange(n_kernels):06d}"
            t = time.perf_counter_ns()
            w = c.best(sig, DEV.key, TC.key)
            warm.append(time.perf_counter_ns() - t)
            assert w is not None
        miss = []
        for _ in range(repeats):
            t = time.perf_counter_ns()
            c.best("no-such-kernel", DEV.key, TC.key)
            miss.append(time.perf_counter_ns() - t)
    cold = []
    for _ in range(50):  # what one `compile` pays: open the file, then look up
        t = time.perf_counter_ns()
        with TuningCache(path, readonly=True) as c:
            c.best("sig000007", DEV.key, TC.key)
        cold.append(time.perf_counter_ns() - t)
    return {"hit": _spread(warm), "miss": _spread(miss), "open_and_hit": _spread(cold)}


def bench_import(path: Path, tmp: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ("export.jsonl", "export.jsonl.gz"):
        dump = tmp / name
        t = time.perf_counter()
        with TuningCache(path, readonly=True) as c:
            records = c.export(dump)
        out[f"export_s[{name}]"] = time.perf_counter() - t
        out[f"export_mb[{name}]"] = dump.stat().st_size / 1e6
        fresh = tmp / f"fresh-{name}.db"
        for what, added in (("import", True), ("reimport", False)):  # into an empty cache, then all duplicates
            t, cpu = time.perf_counter(), time.process_time()
            with TuningCache(fresh) as c:
                report = c.import_(dump)
            out[f"{what}_s[{name}]"] = time.perf_counter() - t
            out[f"{what}_cpu_s[{name}]"] = time.process_time() - cpu  # wall minus waiting for a busy machine
            assert (report.trials_added > 0) == added
        out["records"] = records
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="luminal-cache-bench-") as d:
        tmp = Path(d)
        path = tmp / "bench.db"
        populate_s, populate_cpu_s = populate(path, args.trials, args.kernels)
        result = {"trials": args.trials, "kernels": args.kernels, "populate_s": populate_s,
                  "populate_cpu_s": populate_cpu_s,
                  "db_mb": sum(p.stat().st_size for p in tmp.glob("bench.db*")) / 1e6,
                  "lookup": bench_lookup(path, args.kernels, args.repeats), **bench_import(path, tmp)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    per_trial_us = populate_cpu_s / args.trials * 1e6
    print(f"{args.trials} trials over {args.kernels} kernels: populated in {populate_s:.1f} s, "
          f"{populate_cpu_s:.1f} s CPU ({per_trial_us:.0f} µs CPU per trial + winner proposal), "
          f"db {result['db_mb']:.1f} MB")
    for what, s in result["lookup"].items():
        print(f"best() {what:13s} median {s['median_us']:8.1f} µs  p10 {s['p10_us']:8.1f}  p90 {s['p90_us']:8.1f}"
              f"  max {s['max_us']:8.1f}  (n={s['n']})")
    for k, v in result.items():
        if k.startswith(("export_", "import_", "reimport_")):
            print(f"{k:30s} {v:8.2f}")


if __name__ == "__main__":
    main()
