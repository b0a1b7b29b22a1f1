"""Tuning processes on one PostgreSQL study: trials per minute with 1, 2, 4 and 8 processes, and what the
storage itself costs per trial.

Every process tunes the same one-kernel graph (tests/search_util.py's small_graph) with a backend whose every
candidate takes a fixed 0.5 s to build, as a sleep (search_util.SleepBackend), so the two cores of a small machine
are not what limits the processes: the rate should grow with their number, and where it does not, the study
storage (or the tuner's own work around it) is the bottleneck. The random sampler draws the points (the gp
sampler's model fit costs CPU of its own, which is not the storage's). The rate is counted over the window in
which all the processes tune (from the last one's first step to the first one's last step), from the trial
counts each process reports after every step; the processes import first and then start together.

The storage's cost per trial (ask + tell, as the tuner does them: heartbeat, stale check, the dedupe read, the
trial's attributes) is then measured in one process with no timing at all: the wall time per trial, the time
spent inside database calls and their number, and the server's CPU per trial (its processes' CPU time from
/proc, over many trials), which is what bounds the number of machines one server serves (docs/distributed.md).

    python benchmarks/distributed_scaling.py [--procs 1 2 4 8] [--budget 30] [--json out.json]

It starts a throwaway PostgreSQL server (tests/postgres_util.py; fsync on, as a real one) unless --storage
names one (then the server's CPU is not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

import postgres_util  # noqa: E402
import search_util  # noqa: E402

COMPILE_S = 0.5
PADS = 256  # 8 speeds x 256 pads: more points than 8 processes measure in the budget

CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
import search_util as h
from luminal.search.tuner import tune

ticks = []
time.sleep(max(0.0, {start_at} - time.time()))  # all start together, once every process has imported
r = tune(h.small_graph(), h.SleepBackend(compile_s={compile_s}, unit_s=1e-4, pads=range({pads})), {budget},
         sampler="random", seed={seed}, cache={cache!r}, storage={url!r}, timeout_s=20, plan=h.PLAN, workers=0,
         fusion=False, progress=lambda rep: ticks.append((time.time(), rep.trials)))
print(json.dumps({{"ticks": ticks, "trials": r.trials, "stopped": r.stopped}}))
"""


def _run(n: int, url: str, budget: float, work: Path) -> dict:
    procs = []
    start_at = time.time() + 10 + 5 * n
    for i in range(n):
        script = work / f"child{n}_{i}.py"
        script.write_text(textwrap.dedent(CHILD.format(tests=str(TESTS), compile_s=COMPILE_S, pads=PADS,
                                                       budget=budget, seed=i, cache=str(work / f"c{n}_{i}.db"),
                                                       url=url, start_at=start_at)))
        procs.append(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=budget + 300)
        if p.returncode:
            raise SystemExit(f"a tuning process failed:\n{err[-3000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    # the window in which all tune: the last one's first step to the first one's last step of its loop (its final
    # tick comes after the finalists and the end-to-end check)
    start = max(o["ticks"][0][0] for o in outs)
    end = min(o["ticks"][-2][0] for o in outs)
    done = sum(_at(o["ticks"], end) - _at(o["ticks"], start) for o in outs)
    return {"processes": n, "window_s": end - start, "trials": done,
            "trials_per_min": 60 * done / (end - start) if end > start else float("nan")}


def _at(ticks: list[list[float]], t: float) -> float:
    """A process's trial count at time ``t``, read linearly between its ticks."""
    prev = ticks[0]
    for tick in ticks:
        if tick[0] >= t:
            if tick[0] == prev[0]:
                return tick[1]
            return prev[1] + (tick[1] - prev[1]) * (t - prev[0]) / (tick[0] - prev[0])
        prev = tick
    return ticks[-1][1]


def _storage_cost(url: str, server: postgres_util.PostgresServer | None, n: int = 300) -> dict:
    """ask + tell of ``n`` trials of one kernel study through the tuner's own task code, nothing timed."""
    from sqlalchemy import event

    from luminal.codegen.partition import partition
    from luminal.search.measure import Measurement
    from luminal.search.samplers import make_sampler
    from luminal.search.space import ScheduleSpace
    from luminal.search.studies import open_storage, open_study
    from luminal.search.tasks import KernelTask

    storage = open_storage(url)
    kernel = partition(search_util.small_graph())[0]
    space = ScheduleSpace(search_util.SleepBackend(pads=range(PADS)), kernel)
    sampler, _ = make_sampler("random", 0, space, "bench")
    study = open_study(storage, "luminal-kernel-cost-dev-tc", sampler)
    task = KernelTask(kernel, "cost", study, space, 1, None, storage.heartbeats)
    db = {"s": 0.0, "n": 0}
    started: list[float] = []
    event.listen(storage.rdb.engine, "before_cursor_execute", lambda *a: started.append(time.perf_counter()))

    def after(*a: object) -> None:
        db["s"] += time.perf_counter() - started.pop()
        db["n"] += 1

    event.listen(storage.rdb.engine, "after_cursor_execute", after)
    walls = []
    client0 = time.process_time()
    cpu0 = server.server_cpu_s() if server else None
    for i in range(n):
        t0 = time.perf_counter()
        for trial, point in task.ask(1):
            task.tell(trial, point, Measurement("ok", [1000 + i] * 5))
        walls.append(time.perf_counter() - t0)
    cpu = (server.server_cpu_s() - cpu0) / n if server else None
    client = (time.process_time() - client0) / n
    storage.close()
    return {"trials": n, "wall_ms_mean": 1e3 * statistics.mean(walls),
            "wall_ms_median": 1e3 * statistics.median(walls), "db_ms": 1e3 * db["s"] / n,
            "db_calls": db["n"] / n, "client_cpu_ms": 1e3 * client, "server_cpu_ms": None if cpu is None else 1e3 * cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--budget", type=float, default=30.0, help="seconds each process tunes")
    ap.add_argument("--storage", help="a PostgreSQL URL (default: a throwaway server)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    server = None
    if args.storage is None:
        bindir = postgres_util.bin_dir()
        if bindir is None:
            raise SystemExit("no PostgreSQL here (initdb, pg_ctl): install it or give --storage")
        server = postgres_util.PostgresServer(bindir, fsync=True).start()
    try:
        runs = []
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.procs:
                url = server.create_database(f"scale{n}") if server else args.storage
                runs.append(_run(n, url, args.budget, Path(tmp)))
                print(f"{n} processes: {runs[-1]['trials_per_min']:.1f} trials/min over {runs[-1]['window_s']:.0f} s",
                      flush=True)
        base = runs[0]["trials_per_min"] / runs[0]["processes"]
        for r in runs:
            r["scaling"] = r["trials_per_min"] / base
        cost = _storage_cost(server.create_database("cost") if server else args.storage, server)
    finally:
        if server is not None:
            server.close()
    print(f"{'processes':>9} {'trials/min':>10} {'x one':>6} {'per process':>11}")
    for r in runs:
        print(f"{r['processes']:>9} {r['trials_per_min']:>10.1f} {r['scaling']:>6.2f} "
              f"{r['scaling'] / r['processes']:>11.2f}")
    print(f"storage per trial (ask + tell, {cost['trials']} trials): {cost['wall_ms_mean']:.1f} ms wall "
          f"(median {cost['wall_ms_median']:.1f}), {cost['db_ms']:.1f} ms in {cost['db_calls']:.0f} database calls, "
          f"{cost['client_cpu_ms']:.1f} ms of the tuner's CPU"
          + (f", {cost['server_cpu_ms']:.2f} ms of server CPU" if cost["server_cpu_ms"] is not None else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "cost": cost, "cpus": os.cpu_count()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
