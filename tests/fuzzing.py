"""The fuzzer's driver: make the base files, run every case in a pool of workers, count the outcomes.

Used by ``benchmarks/fuzz.py`` (the command) and ``tests/test_fuzz.py`` (the CI slice).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from fuzz_cases import FAMILIES, TINY, Base, Context, make_case
from fuzz_runner import REPO, Limits, Outcome, Result, Workspace, cleanup, execute, save
from fuzz_seeds import load_seeds

# imported by each worker before its first case, so a forked case pays for none of them
PRELOAD = ("numpy", "onnx", "onnxruntime", "optuna", "sqlite_utils", "luminal.frontend_onnx", "luminal.runtime",
           "luminal.codegen.c", "luminal.search.tuner", "luminal.cache", "luminal.cli.modelcheck")


@dataclass(frozen=True)
class FuzzConfig:
    seed: int = 0
    count: int = 100  # cases per family
    workers: int = 1
    families: tuple[str, ...] = FAMILIES
    limits: Limits = field(default_factory=Limits)
    out: Path | None = None  # where failing cases are saved; None: nowhere
    workdir: Path | None = None  # scratch space; None: a temporary folder


@dataclass(frozen=True)
class Failure:
    family: str
    index: int
    outcome: str
    signature: str
    how: str
    argv: tuple[str, ...]
    seconds: float
    stderr_tail: str
    saved: str


@dataclass(frozen=True)
class Summary:
    config: FuzzConfig
    seconds: float
    counts: dict[str, dict[str, int]]  # family -> outcome -> cases
    failures: tuple[Failure, ...]
    busy: dict[str, tuple[int, float]]  # command -> (cases, seconds they ran)

    @property
    def cases(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def total(self, outcome: Outcome) -> int:
        return sum(c.get(outcome.value, 0) for c in self.counts.values())

    def signatures(self) -> dict[str, list[Failure]]:
        out: dict[str, list[Failure]] = {}
        for f in self.failures:
            out.setdefault(f.signature, []).append(f)
        return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.config.seed, "count_per_family": self.config.count, "workers": self.config.workers,
            "families": list(self.config.families), "timeout_s": self.config.limits.timeout,
            "max_memory_bytes": self.config.limits.max_memory, "cases": self.cases,
            "seconds": round(self.seconds, 1), "cases_per_second": round(self.cases / max(self.seconds, 1e-9), 2),
            "counts": self.counts,
            "seconds_per_case": {c: round(s / n, 3) for c, (n, s) in sorted(self.busy.items())},
            "signatures": [{"signature": sig, "outcome": fs[0].outcome, "count": len(fs),
                            "example": fs[0].saved or f"{fs[0].family} #{fs[0].index}", "how": fs[0].how}
                           for sig, fs in self.signatures().items()],
            "failures": [f.__dict__ | {"argv": list(f.argv)} for f in self.failures],
        }


# ---------------------------------------------------------------- base files


def _python(code: str, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _luminal(args: list[str], cwd: Path, env: dict[str, str]) -> bool:
    """Run a setup command; a failure is reported, not fatal: the fuzzer still has the rows written below."""
    proc = _python("from luminal.cli.main import main; main()", args, cwd, env)
    if proc.returncode != 0:
        print(f"fuzz setup: luminal {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}",
              file=sys.stderr)
    return proc.returncode == 0


# rows of every table and status, with this machine's fingerprints, beside those a real tune wrote
_ROWS = """
import sys
from luminal.cache import TuningCache, Fingerprint, backend_fingerprints
from luminal.codegen.backend import get_backend
try:
    dev, tc = backend_fingerprints(get_backend("cpu"))
except Exception:
    dev, tc = Fingerprint.of("cpu", {"model": "fuzz"}), Fingerprint.of("tc", {"cc": "fuzz"})
with TuningCache(sys.argv[1]) as c:
    c.record_kernel("f00dfeed01", "elementwise", "out = Add(x, y)", {"x": [8]}, model="tiny.onnx")
    c.record_kernel("f00dfeed02", "reduction", "r = SumReduce(x)", {"x": [8, 8]})
    for i in range(4):
        c.record_trial("f00dfeed01", dev, tc, {"vec": 2 ** i}, "ok", [400 - 50 * i, 410 - 50 * i])
    for status in ("compile_error", "crash", "timeout", "wrong_result"):
        c.record_trial("f00dfeed01", dev, tc, {"vec": 64}, status)
    c.propose_winner("f00dfeed01", dev, tc, {"vec": 8}, 255, default_ns=405)
    c.propose_winner("f00dfeed02", dev, tc, {"threads": 1}, 1000, default_ns=1000)
"""


def make_base(ws: Workspace, tiny: bytes) -> Base:
    """A tuning cache written by a real (short) tune and the cache API, its export and a bench report."""
    d = ws.root / "base"
    d.mkdir(exist_ok=True)
    (d / TINY).write_bytes(tiny)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    env.update(LUMINAL_CACHE=str(d / "tuning.db"), LUMINAL_C_CACHE=str(ws.c_cache), OMP_NUM_THREADS="1")
    _luminal(["tune", TINY, "--backend", "cpu", "--budget", "2s", "--workers", "1", "--cache", "tuning.db",
              "--storage", "sqlite:///studies.db"], d, env)
    proc = _python(_ROWS, [str(d / "tuning.db")], d, env)
    if proc.returncode != 0:
        raise RuntimeError(f"fuzz setup: cannot write a tuning cache: {proc.stderr[-2000:]}")
    _luminal(["cache", "export", "export.jsonl", "--cache", "tuning.db"], d, env)
    if not _luminal(["bench", TINY, "--backend", "cpu", "--runs", "5", "--warmup", "0", "--threads", "1", "--json",
                     "bench.json", "--cache", "tuning.db"], d, env):
        (d / "bench.json").write_text('{"models": [{"samples": {"luminal": [1.0, 2.0], "onnxruntime": [1.5, 2.5]}}]}')
    db = sqlite3.connect(d / "tuning.db")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        row = db.execute("SELECT signature FROM kernels ORDER BY signature LIMIT 1").fetchone()
    finally:
        db.close()
    export = d / "export.jsonl"
    return Base((d / "tuning.db").read_bytes(), export.read_bytes() if export.exists() else b"{}\n",
                (d / "bench.json").read_bytes(), row[0] if row else "0000")


# ---------------------------------------------------------------- workers

_APP: typer.Typer | None = None
_CTX: Context | None = None
_WS: Workspace | None = None
_CONFIG: FuzzConfig | None = None


def _surface(app: typer.Typer) -> dict[str, frozenset[str]]:
    """Each command of the app (``bench``, ``cache prune``) and its option names; ``cache``: its subcommands."""
    group = typer.main.get_command(app)
    out: dict[str, frozenset[str]] = {"": frozenset(o for p in group.params for o in p.opts + p.secondary_opts)}
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        out[name] = frozenset(o for p in cmd.params for o in p.opts + p.secondary_opts)
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            out[f"{name} {sub_name}"] = frozenset(o for p in sub.params for o in p.opts + p.secondary_opts)
        if hasattr(cmd, "commands"):
            out[name] = frozenset(cmd.commands)
    return out


def _init(config: FuzzConfig, ws: Workspace, base: Base) -> None:
    global _APP, _CTX, _WS, _CONFIG
    log = os.open(ws.root / f"worker-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)  # before luminal's consoles exist, so they see no terminal
    os.dup2(log, 2)
    os.environ["NO_COLOR"] = "1"
    os.environ.pop("FORCE_COLOR", None)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from luminal.cli import main

    main._register()
    seeds = tuple(load_seeds())
    scratch = ws.root / f"scratch-{os.getpid()}"
    scratch.mkdir(exist_ok=True)
    tiny = next(s for s in seeds if s.name == "matmul")
    _APP, _WS, _CONFIG = main.app, ws, config
    _CTX = Context(config.seed, seeds, tiny, base, _surface(main.app), scratch)


def _task(job: tuple[str, int]) -> tuple[str, str, Failure | None, str, float]:
    assert _APP is not None and _CTX is not None and _WS is not None and _CONFIG is not None
    family, index = job
    case = make_case(family, index, _CTX)
    result = execute(_APP, case, _WS, _CONFIG.limits, debug="--debug" in _CTX.surface[""])
    failure = None
    if not result.outcome.clean:
        saved = str(save(result, _WS, _CONFIG.out)) if _CONFIG.out else ""
        failure = _failure(result, saved)
    cleanup(case, _WS)
    return family, result.outcome.value, failure, case.command, result.seconds


def _failure(result: Result, saved: str) -> Failure:
    case = result.case
    return Failure(case.family, case.index, result.outcome.value, result.signature, case.how, case.argv,
                   round(result.seconds, 2), result.stderr[-1500:], saved)


def run_fuzz(config: FuzzConfig, progress: Callable[[int, int], None] | None = None) -> Summary:
    """Run ``config.count`` cases of each family; ``progress(done, total)`` is called as cases finish."""
    with tempfile.TemporaryDirectory(prefix="luminal-fuzz-", dir=config.workdir) as tmp:
        ws = Workspace(Path(tmp))
        seeds = load_seeds()
        base = make_base(ws, next(s for s in seeds if s.name == "matmul").data)
        jobs = [(family, i) for i in range(config.count) for family in config.families]
        counts: dict[str, Counter[str]] = {f: Counter() for f in config.families}
        failures: list[Failure] = []
        busy: dict[str, tuple[int, float]] = {}
        start = time.monotonic()
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(config.workers, initializer=_init, initargs=(config, ws, base)) as pool:
            for done, (family, outcome, failure, command, took) in enumerate(pool.imap_unordered(_task, jobs), 1):
                counts[family][outcome] += 1
                n, total = busy.get(command, (0, 0.0))
                busy[command] = (n + 1, total + took)
                if failure:
                    failures.append(failure)
                if progress:
                    progress(done, len(jobs))
        seconds = time.monotonic() - start
    failures.sort(key=lambda f: (f.family, f.index))
    return Summary(config, seconds, {f: dict(sorted(c.items())) for f, c in counts.items()}, tuple(failures), busy)


__all__ = ["REPO", "FuzzConfig", "Summary", "run_fuzz"]
