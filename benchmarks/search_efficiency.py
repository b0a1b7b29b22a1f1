"""How many trials each sampler needs to get within 5% of the exhaustive best, against random search.

Every valid point of each kernel's schedule space is compiled, verified and timed here with the C
backend: the tuner's whole space for the reductions and the elementwise chain, the five blocking
knobs whole for the GEMMs (their layout and thread knobs fixed, or the table would take hours), a
conv's orientation, packing and tiles, a depthwise conv's implementations and tiles. The
searches are then replayed against that table of measured times, many seeds each, through the
tuner's own ask/dedupe/prune loop (search.tasks.KernelTask), so only the samplers differ. Each
replayed measurement is the table's time off by the machine's noise (NOISE), so the searches see
what a tuner sees; a search hits when the point's table time is within 5% of the best. A trial is
a new valid point measured; repeats, points that run the same code as one measured before (the
backend's identity: same source, same threads) and invalid points cost nothing in the tuner and
are not counted. Random search's mean is taken over RANDOM_SEEDS times the seeds: its spread is
wide and its replays cheap. Two replays show the gp sampler learning from other kernels' trials in
one study storage (each kernel runs to TRANSFER_KEEP trials for the others to learn from):
``gp+together`` tunes the kernels together, one trial each in turn, as a tuning run interleaves
its kernels; ``gp+earlier`` tunes them one after another, each learning from the ones before it,
as a model learns from the models tuned earlier into a kept storage.

    python benchmarks/search_efficiency.py [--seeds 20] [--json out.json] [--tables tables.json ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import optuna

from luminal.codegen.backend import Knob, get_backend
from luminal.codegen.partition import partition
from luminal.frontend_onnx.ops_nn_conv import conv
from luminal.ir.dtypes import DType
from luminal.ir.graph import Graph
from luminal.ir.tensor import Tensor
from luminal.search import tasks
from luminal.search.measure import Measurement, Measurer
from luminal.search.samplers import make_sampler
from luminal.search.space import ScheduleSpace, schedule_key
from luminal.search.tasks import KernelTask
from luminal.search.timing import TimingPlan

METHODS = ("random", "tpe", "gp", "gp+earlier", "gp+together")
WITHIN = 0.05  # a search hits when it has measured a point this close to the exhaustive best
NOISE = 0.04  # log-normal spread of a replayed measurement around the table's median: 2-7% measured (--tables A B C)
TRANSFER_KEEP = 20  # trials each kernel gets in the transfer replays, for the other kernels to learn from
RANDOM_SEEDS = 10  # random search's replays are cheap and its spread wide: its mean is over this many times the seeds


class Subspace:
    """A backend whose space is a few of the real knobs; the others are fixed."""

    def __init__(self, backend, keep: dict[str, tuple], fixed: dict):
        self.inner, self.keep, self.fixed = backend, keep, fixed
        self.name = backend.name

    def space(self, kernel):
        real = {k.name: k.choices for k in self.inner.space(kernel)}
        return [Knob(n, tuple(c for c in cs if c in real[n])) for n, cs in self.keep.items() if n in real]

    def default_schedule(self, kernel):
        return {**self.inner.default_schedule(kernel), **self.fixed}

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _graph(out: Tensor, *inputs: Tensor) -> Graph:
    return Graph([t.node for t in inputs], [out.contiguous().node], ["y"])


def _rand(shape, seed):
    return Tensor.const(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def kernels():
    """(name, kernel, knobs kept or None for all, knobs fixed): GEMMs, convs, softmaxes, a layer norm, an
    elementwise chain."""
    out = []
    # the GEMMs' five blocking knobs whole (every choice the tuner had when the tables were measured: KC 64 came
    # later, the default of strided convs read from their padded copy alone); their layout and thread knobs fixed
    gemm_keep = {"mr": (4, 6, 8, 12), "nr": (8, 16, 24, 32), "mc": (24, 48, 72, 96, 144, 192, 288),
                 "nc": (64, 128, 256, 512, 1024), "kc": (0, 128, 256, 512)}
    gemm_fix = {"impl": "generated", "threads": 1, "order": "nm", "pack_b": True}
    for name, (m, k, n) in (("gemm 128x256x192", (128, 256, 192)), ("gemm 64x512x96 +bias+relu", (64, 512, 96)),
                            ("gemm 256x128x512", (256, 128, 512)), ("gemm 32x768x768 +bias+relu", (32, 768, 768))):
        x = Tensor.input("x", (m, k), DType.float32)
        y = x.matmul(_rand((k, n), 1))
        if "bias" in name:
            y = y.add(_rand((n,), 2)).relu()
        (kern,) = [kk for kk in partition(_graph(y, x)) if kk.form == "contraction"]
        out.append((name, kern, gemm_keep, gemm_fix))
    for rows, cols in ((256, 512), (64, 2048)):
        x = Tensor.input("x", (rows, cols), DType.float32)
        (kern,) = [kk for kk in partition(_graph(x.softmax(-1), x)) if kk.form == "reduction"]
        out.append((f"softmax {rows}x{cols}", kern, None, {}))
    x = Tensor.input("x", (128, 768), DType.float32)
    mu = x.sum(axes=(1,), keepdim=True).mul(1 / 768)
    d = x.sub(mu)
    ln = d.mul(d.mul(d).sum(axes=(1,), keepdim=True).mul(1 / 768).add(1e-5).rsqrt())
    ks = [kk for kk in partition(_graph(ln, x)) if kk.form == "reduction"]
    out.append(("layernorm 128x768", max(ks, key=lambda kk: len(kk.ops)), None, {}))
    # convs: both orientations (the pixels as the GEMM's columns or its rows), B and A packed or read in place,
    # the tiles; and a depthwise conv's implementations (the stencil, loops, the GEMM's tiles)
    conv_keep = {"swap": (False, True), "pack_b": (True, False), "pack_a": (True, False), "mr": (4, 6, 8, 12),
                 "nr": (16, 32, 48), "mc": (24, 96, 288), "nc": (64, 256, 1024)}
    conv_fix = {"impl": "generated", "threads": 1, "order": "nm", "kc": 0}
    dw_keep = {"impl": ("generated", "blas", "loops", "stencil"), "mr": (2, 3, 4, 5, 6, 7, 8, 12), "nr": (16, 32, 48),
               "nc": (64, 256, 1024)}
    for name, cin, cout, group, k, hw, keep, fix in (
            ("conv 3x3 32->32 56x56 +bias+relu", 32, 32, 1, 3, 56, conv_keep, conv_fix),
            ("conv 1x1 512->1000 13x13 +bias+relu", 512, 1000, 1, 1, 13, conv_keep, conv_fix),
            ("depthwise 3x3 96 56x56 +bias+relu", 96, 96, 96, 3, 56, dw_keep, {"threads": 1})):
        x = Tensor.input("x", (1, cin, hw, hw), DType.float32)
        w = _rand((cout, cin // group, k, k), 3)
        y = conv(x, w, group, [1, 1], [1, 1], [(k // 2, k // 2)] * 2, [hw, hw])
        y = y.add(_rand((cout,), 4).reshape((1, cout, 1, 1)).expand(y.shape)).relu()
        (kern,) = [kk for kk in partition(_graph(y, x)) if kk.form == "contraction"]
        out.append((name, kern, keep, fix))
    x = Tensor.input("x", (512, 1024), DType.float32)
    y = Tensor.input("y", (512, 1024), DType.float32)
    chain = x.mul(y).add(x.tanh()).sigmoid().mul(y.abs().sqrt())
    kern = max(partition(_graph(chain, x, y)), key=lambda kk: len(kk.ops))
    out.append(("elementwise chain 512x1024", kern, None, {}))
    return out


def exhaustive(backend, kernel, plan) -> dict[str, float]:
    """Median time of one valid point per class of points that run the same code (failed ones left out)."""
    space = ScheduleSpace(backend, kernel)
    points, classes = [], set()
    for combo in itertools.product(*[p.choices for p in space.params]):
        s = dict(space.default)
        s.update({p.name: v for p, v in zip(space.params, combo)})
        if space.valid(s) and space.key(s) not in classes:
            classes.add(space.key(s))
            points.append(s)
    m = Measurer(backend, workers=2, plan=plan, timeout_s=20)
    try:
        ok = []
        for i in range(0, len(points), 8):
            chunk = points[i:i + 8]
            ok += [s for s, r in zip(chunk, m.measure(kernel, chunk)) if r.ok]
        # then all of them together, one run of each per round: the machine's drift over the minutes a
        # table takes falls on every point alike, not on the points measured while it lasted
        return {schedule_key(s): r.median_ns for s, r in zip(ok, m.compare(kernel, ok)) if r.ok}
    finally:
        m.close()


def by_class(backend, kernel, table: dict[str, float]) -> dict[str, float]:
    """The table over classes of points that run the same code: the median of what was measured in each
    (tables measured before classes were known hold every member)."""
    space = ScheduleSpace(backend, kernel)
    members: dict[str, list[float]] = {}
    for k, t in table.items():
        members.setdefault(space.key(json.loads(k)), []).append(t)
    return {c: float(np.median(v)) for c, v in members.items()}


class Search:
    """One kernel's search replayed against its table (by class, ``by_class``), one trial per ``step``."""

    def __init__(self, backend, kernel, table: dict[str, float], sampler: str, seed: int, storage=None):
        self.space = ScheduleSpace(backend, kernel)
        self.table = table
        self.target = min(table.values()) * (1 + WITHIN)
        self.rng = np.random.default_rng(seed)
        smp, _ = make_sampler(sampler, seed, self.space, "bench")
        study = optuna.create_study(sampler=smp, direction="minimize", storage=storage)
        self.task = KernelTask(kernel, "bench", study, self.space, 1, None)
        self.task.enqueue_default()  # as in the tuner, trial 0 is the default schedule
        self.trials, self.hit, self.over = 0, None, False

    def going(self, keep: int = 0) -> bool:
        """Not yet hit, or short of ``keep`` trials (for other kernels to learn from), and the space not spent."""
        return not self.over and self.trials < len(self.table) * 3 and (self.hit is None or self.trials < keep)

    def step(self) -> None:
        pending = self.task.ask(1)
        if not pending:
            self.over = True
            return
        trial, point = pending[0]
        t = self.table.get(self.space.key(point))
        # the search sees a measurement, off the table's median by the machine's noise; whether it hit is
        # judged on the table
        m = Measurement("ok", [int(t * math.exp(self.rng.normal(0, NOISE)))]) if t is not None \
            else Measurement("compile_error")
        self.task.tell(trial, point, m)
        self.trials += 1
        if self.hit is None and t is not None and t <= self.target:
            self.hit = self.trials

    @property
    def result(self) -> int:
        """Trials (new classes of valid points) to the first within WITHIN of the exhaustive best."""
        return self.hit if self.hit is not None else len(self.table)


def _common(tables: list[dict[str, float]]) -> list[str]:
    return sorted(set.intersection(*(set(t) for t in tables)))


def mean_table(tables: list[dict[str, float]]) -> dict[str, float]:
    """The geometric mean of several measurements of a table, over the points all of them hold."""
    return {k: float(np.exp(np.mean([np.log(t[k]) for t in tables]))) for k in _common(tables)}


def disagreement(tables: list[dict[str, float]]) -> float:
    """How far apart measurements of one point are, once each table's drift as a whole is taken out: the
    standard deviation of a point's log times across tables, averaged over points (about the relative spread)."""
    logs = np.log([[t[k] for k in _common(tables)] for t in tables])
    logs -= logs.mean(axis=1, keepdims=True)
    return float(logs.std(axis=0, ddof=1).mean())


def _pct(v: list[float], q: float) -> float:
    return float(np.percentile(v, q))


def _cell(v: list[int], random_mean: float) -> str:
    mean = statistics.mean(v)
    return f"{mean:6.1f} [{_pct(v, 10):3.0f}-{_pct(v, 90):3.0f}] ({mean / random_mean:4.2f})"


def searches(todo, seeds: int) -> dict[str, dict[str, list[int]]]:
    """Trials to WITHIN per method, kernel and seed (random over RANDOM_SEEDS times the seeds)."""
    res = {m: {name: [] for name, *_ in todo} for m in METHODS}
    for seed in range(seeds * RANDOM_SEEDS):
        for m in METHODS if seed < seeds else ("random",):
            storage = optuna.storages.InMemoryStorage() if "+" in m else None
            runs = [Search(backend, kernel, table, m.split("+")[0], seed * 1000 + i, storage)
                    for i, (name, kernel, backend, table) in enumerate(todo)]
            keep = TRANSFER_KEEP if storage else 0
            if m == "gp+earlier":  # one after another, each kernel learning from the ones before it
                for r in runs:
                    while r.going(keep):
                        r.step()
            else:  # alone, or together in one storage: one trial each in turn
                while any(r.going(keep) for r in runs):
                    for r in runs:
                        if r.going(keep):
                            r.step()
            for (name, *_), r in zip(todo, runs):
                res[m][name].append(r.result)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="", help="substring of the kernel names to run")
    ap.add_argument("--tables", nargs="+", default=[],
                    help="JSON files of measured tables. A kernel they hold is not measured again; with several "
                         "files, a point's time is the geometric mean of theirs. Kernels none holds are measured "
                         "and saved in the last file")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tasks.ASK_S = float("inf")  # replays are offline: no wall-clock limit on proposals, so they are repeatable
    cpu = get_backend("cpu")
    plan = TimingPlan(warmup_s=0.02, cap_s=0.1, min_reps=10)
    loaded = [json.loads(Path(p).read_text()) if os.path.exists(p) else {} for p in args.tables]
    measured = False
    todo = []
    for name, kernel, keep, fixed in kernels():
        if args.only and args.only not in name:
            continue
        backend = Subspace(cpu, keep, fixed) if keep else cpu
        t0 = time.time()
        held = [t[name] for t in loaded if name in t]
        table = mean_table(held) if held else exhaustive(backend, kernel, plan)
        if not held and loaded:
            loaded[-1][name] = table
            measured = True
        if not table:
            print(f"{name}: no valid point ran", file=sys.stderr)
            continue
        classes = by_class(backend, kernel, table)
        within = sum(1 for v in classes.values() if v <= min(classes.values()) * (1 + WITHIN))
        agree = f", {len(held)} tables {disagreement(held):.0%} apart" if len(held) > 1 else ""
        print(f"{name:28s} {len(table):4d} points in {len(classes):3d} classes, {within} within {WITHIN:.0%} of "
              f"the best {min(classes.values()) / 1e3:.1f} us "
              f"(worst {max(table.values()) / 1e3:.1f} us) [{time.time() - t0:.0f} s to measure{agree}]", flush=True)
        todo.append((name, kernel, backend, classes))
    if measured:
        Path(args.tables[-1]).write_text(json.dumps(loaded[-1]))
    if not todo:
        return
    res = searches(todo, args.seeds)
    print(f"\ntrials to within {WITHIN:.0%} of the exhaustive best, {args.seeds} seeds ({args.seeds * RANDOM_SEEDS} "
          "for random): mean [p10-p90] (mean / random's)")
    print(f"gp+together and gp+earlier tune the kernels in one study storage, {TRANSFER_KEEP} trials each, so each "
          "learns from the others' trials: together in turn, or in this order; the other methods tune each alone")
    print(f"{'kernel':28s}" + "".join(f"{m:>24s}" for m in METHODS))
    rows = []
    for name, _, _, table in todo:
        rnd = statistics.mean(res["random"][name])
        row = {"kernel": name, "points": len(table)}
        for m in METHODS:
            v = res[m][name]
            row[m] = {"mean": statistics.mean(v), "p10": _pct(v, 10), "p90": _pct(v, 90), "trials": v}
        rows.append(row)
        print(f"{name:28s}" + "".join(f"{_cell(res[m][name], rnd):>24s}" for m in METHODS))
    totals = {m: [sum(r) for r in zip(*(res[m][name] for name, *_ in todo))] for m in METHODS}
    rnd = statistics.mean(totals["random"])
    print(f"{'total':28s}" + "".join(f"{_cell(v, rnd):>24s}" for v in totals.values()))
    if args.json:
        summary = {m: {"mean": statistics.mean(v), "p10": _pct(v, 10), "p90": _pct(v, 90),
                       "ratio_to_random": statistics.mean(v) / rnd} for m, v in totals.items()}
        with open(args.json, "w") as f:
            json.dump({"seeds": args.seeds, "random_seeds": args.seeds * RANDOM_SEEDS, "transfer_keep": TRANSFER_KEEP,
                       "total": summary, "kernels": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
