"""How many trials TPE needs to get within 5% of the exhaustive best, against random search.

Each kernel's schedule space is cut down (some knobs fixed) until every valid point can be
compiled, verified and timed here with the C backend. The searches are then replayed against
that table of measured times, many seeds each, through the tuner's own ask/dedupe/prune loop
(search.tasks.StudyTask), so only the samplers differ. A trial is a new valid point measured;
repeats and invalid points cost nothing in the tuner and are not counted.

    python benchmarks/search_efficiency.py [--seeds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import numpy as np
import optuna

from luminal.codegen.backend import Knob, get_backend
from luminal.codegen.partition import partition
from luminal.ir.dtypes import DType
from luminal.ir.graph import Graph
from luminal.ir.tensor import Tensor
from luminal.search import tasks
from luminal.search.measure import Measurement, Measurer
from luminal.search.samplers import make_sampler
from luminal.search.space import ScheduleSpace, schedule_key
from luminal.search.tasks import StudyTask
from luminal.search.timing import TimingPlan


class Subspace:
    """A backend whose space is a few of the real knobs; the others are fixed."""

    def __init__(self, backend, keep: dict[str, tuple], fixed: dict):
        self.inner, self.keep, self.fixed = backend, keep, fixed
        self.name = backend.name

    def space(self, kernel):
        real = {k.name: k.choices for k in self.inner.space(kernel)}
        return [Knob(n, tuple(c for c in cs if c in real[n])) for n, cs in self.keep.items()]

    def default_schedule(self, kernel):
        return {**self.inner.default_schedule(kernel), **self.fixed}

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _graph(out: Tensor, *inputs: Tensor) -> Graph:
    return Graph([t.node for t in inputs], [out.contiguous().node], ["y"])


def _rand(shape, seed):
    return Tensor.const(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def kernels():
    """(name, kernel, knobs kept, knobs fixed): GEMMs, a softmax, a fused elementwise chain, a layer norm."""
    out = []
    gemm_keep = {"mr": (4, 6, 8, 12), "nr": (8, 16, 24, 32), "kc": (0, 128, 256), "mc": (48, 96, 192)}
    gemm_fix = {"impl": "generated", "threads": 1, "order": "nm", "pack_b": True, "nc": 256}
    for name, (m, k, n) in (("gemm 128x256x192", (128, 256, 192)), ("gemm 64x512x96 +bias+relu", (64, 512, 96)),
                            ("gemm 256x128x512", (256, 128, 512)), ("gemm 32x768x768 +bias+relu", (32, 768, 768))):
        x = Tensor.input("x", (m, k), DType.float32)
        y = x.matmul(_rand((k, n), 1))
        if "bias" in name:
            y = y.add(_rand((n,), 2)).relu()
        (kern,) = [kk for kk in partition(_graph(y, x)) if kk.form == "contraction"]
        out.append((name, kern, gemm_keep, gemm_fix))
    red_keep = {"vec": (0, 4, 8, 16), "unroll": (1, 2, 4), "rows_per_thread": (0, 1, 4, 16, 64), "threads": (1, 2)}
    for rows, cols in ((256, 512), (64, 2048)):
        x = Tensor.input("x", (rows, cols), DType.float32)
        (kern,) = [kk for kk in partition(_graph(x.softmax(-1), x)) if kk.form == "reduction"]
        out.append((f"softmax {rows}x{cols}", kern, red_keep, {}))
    x = Tensor.input("x", (128, 768), DType.float32)
    mu = x.sum(axes=(1,), keepdim=True).mul(1 / 768)
    d = x.sub(mu)
    ln = d.mul(d.mul(d).sum(axes=(1,), keepdim=True).mul(1 / 768).add(1e-5).rsqrt())
    ks = [kk for kk in partition(_graph(ln, x)) if kk.form == "reduction"]
    out.append(("layernorm 128x768", max(ks, key=lambda kk: len(kk.ops)), red_keep, {}))
    ew_keep = {"vec": (0, 4, 8, 16), "unroll": (1, 2, 4), "block": (1024, 4096, 16384, 65536, 1 << 30),
               "threads": (1, 2)}
    x = Tensor.input("x", (512, 1024), DType.float32)
    y = Tensor.input("y", (512, 1024), DType.float32)
    chain = x.mul(y).add(x.tanh()).sigmoid().mul(y.abs().sqrt())
    kern = max(partition(_graph(chain, x, y)), key=lambda kk: len(kk.ops))
    out.append(("elementwise chain 512x1024", kern, ew_keep, {}))
    return out


def exhaustive(backend, kernel, plan) -> dict[str, float]:
    """Median time of every valid point of the space (failed points are left out)."""
    space = ScheduleSpace(backend, kernel)
    points = []
    for combo in itertools.product(*[p.choices for p in space.params]):
        s = dict(space.default)
        s.update({p.name: v for p, v in zip(space.params, combo)})
        if space.valid(s):
            points.append(s)
    m = Measurer(backend, workers=2, plan=plan, timeout_s=20)
    try:
        table = {}
        for i in range(0, len(points), 8):
            chunk = points[i:i + 8]
            for s, r in zip(chunk, m.measure(kernel, chunk)):
                if r.ok:
                    table[schedule_key(s)] = r.median_ns
    finally:
        m.close()
    return table


def replay(backend, kernel, table: dict[str, float], sampler: str, seed: int, target: float) -> int:
    """Trials (new valid points) until the best is within ``target`` of the exhaustive best."""
    space = ScheduleSpace(backend, kernel)
    smp, _ = make_sampler(sampler, seed, space, "bench")
    study = optuna.create_study(sampler=smp, direction="minimize")
    task = StudyTask("bench", study, space, 1.0)
    task.key = schedule_key
    task.enqueue_default()  # as in the tuner, trial 0 is the default schedule
    best = float("inf")
    valid = len(table)
    trials = 0
    while trials < valid * 3:
        pending = task.ask(1)
        if not pending:
            return valid if best > target else trials
        trial, point = pending[0]
        t = table.get(schedule_key(point))
        m = Measurement("ok", [int(t)]) if t is not None else Measurement("compile_error")
        task.tell(trial, point, m)
        trials += 1
        if t is not None:
            best = min(best, t)
            if best <= target:
                return trials
    return trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="", help="substring of the kernel names to run")
    ap.add_argument("--tables", default=None,
                    help="JSON file of measured tables: read when it exists (replay only), else written")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tasks.ASK_S = float("inf")  # replays are offline: no wall-clock limit on proposals, so they are repeatable
    cpu = get_backend("cpu")
    plan = TimingPlan(warmup_s=0.02, cap_s=0.1, min_reps=10)
    rows = []
    saved = {}
    if args.tables and os.path.exists(args.tables):
        with open(args.tables) as f:
            saved = json.load(f)
    for name, kernel, keep, fixed in kernels():
        if args.only and args.only not in name:
            continue
        backend = Subspace(cpu, keep, fixed)
        t0 = time.time()
        table = saved[name] if name in saved else exhaustive(backend, kernel, plan)
        saved[name] = table
        t_meas = time.time() - t0
        if not table:
            print(f"{name}: no valid point ran", file=sys.stderr)
            continue
        best, default = min(table.values()), table.get(schedule_key(backend.default_schedule(kernel)))
        target = best * 1.05
        within = sum(1 for v in table.values() if v <= target)
        res = {s: [replay(backend, kernel, table, s, seed, target) for seed in range(args.seeds)]
               for s in ("tpe", "random")}
        row = {"kernel": name, "points": len(table), "within_5pct": within, "best_ns": best, "default_ns": default,
               "worst_ns": max(table.values()), "measure_s": round(t_meas, 1),
               **{f"{s}_median": statistics.median(v) for s, v in res.items()},
               **{f"{s}_mean": round(statistics.mean(v), 1) for s, v in res.items()},
               "trials": res}
        row["ratio"] = row["tpe_median"] / row["random_median"]
        rows.append(row)
        print(f"{name:28s} {len(table):4d} points ({within} within 5%), best {best / 1e3:8.1f} us, "
              f"worst {row['worst_ns'] / 1e3:8.1f} us | trials to 5%: tpe median {row['tpe_median']:5.1f} "
              f"(mean {row['tpe_mean']}), random median {row['random_median']:5.1f} (mean {row['random_mean']}) "
              f"-> ratio {row['ratio']:.2f}  [{t_meas:.0f} s to measure]", flush=True)
    if rows:
        tpe = sum(r["tpe_mean"] for r in rows)
        rnd = sum(r["random_mean"] for r in rows)
        print(f"total mean trials: tpe {tpe:.1f}, random {rnd:.1f}, ratio {tpe / rnd:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.tables:
        with open(args.tables, "w") as f:
            json.dump(saved, f)


if __name__ == "__main__":
    main()
