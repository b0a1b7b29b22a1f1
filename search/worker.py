"""Worker processes that may die: a candidate that crashes, hangs or poisons the device takes only its worker.

The parent sends one job at a time over a pipe and waits with a timeout; a dead or
late worker is killed and started again on the next job.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import connection
from typing import TYPE_CHECKING, Any, Literal

from ..ir.graph import Graph
from ..target import Target

if TYPE_CHECKING:
    from ..codegen.backend import Backend



class WorkerLost(Exception):
    """The worker crashed or ran past its timeout; ``status`` says which."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class Cancelled(Exception):
    """The tuning run was asked to stop while a job was in flight."""


@dataclass
class WorkerContext:
    """What a worker needs to rebuild its state: the backend (an object under fork, its Target or name under spawn),
    the model graph for end-to-end jobs (pickled bytes under spawn), and the thread count."""

    backend: Backend | Target | str
    graph: Graph | bytes | None = None
    threads: int | None = None


def _deep(fn: Callable[[], Any]) -> Any:
    """Run fn in a thread with a large stack: pickling a long chain of IR nodes recurses deeply."""
    out: list[Any] = []
    old_size = threading.stack_size(512 << 20)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 200_000))
    try:
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
    finally:
        threading.stack_size(old_size)
        sys.setrecursionlimit(old_limit)
    if not out:
        raise RuntimeError("could not (un)pickle the model graph")
    return out[0]


def start_method(backend: Backend) -> Literal["fork", "spawn"]:
    """fork, the fastest, where a forked child can run the backend's kernels; else spawn."""
    return "fork" if "fork" in mp.get_all_start_methods() and backend.fork_safe() else "spawn"


def _die_with_parent() -> None:
    """A worker must not outlive a tuning process that was killed (SIGKILL leaves it no time to stop us)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _serve(conn: Any, ctx: WorkerContext) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if not os.environ.get("LUMINAL_DEBUG"):
        faulthandler.disable()  # a crashing candidate is expected here, not a bug to dump
    if ctx.threads:
        os.environ["OMP_NUM_THREADS"] = str(ctx.threads)
        os.environ.setdefault("OMP_DYNAMIC", "false")
    backend = ctx.backend
    graph = ctx.graph
    if isinstance(graph, bytes):
        data = graph
        graph = _deep(lambda: pickle.loads(data))
    if isinstance(backend, str | Target):
        from ..codegen.backend import get_backend

        backend = get_backend(backend)
    from .jobs import JobRunner

    runner = JobRunner(backend, graph)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        conn.send(runner.handle(job))


class Worker:
    POLL_S = 0.05

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        self.proc: Any = None
        self.conn: Any = None
        self.restarts = 0

    def _start(self) -> None:
        # decided at every start: the backend may have become unsafe to fork since the last one
        ctx = self.ctx
        method: Literal["fork", "spawn"] = "spawn"
        if not isinstance(ctx.backend, str | Target):
            method = start_method(ctx.backend)
        if method == "spawn" and not isinstance(ctx.backend, str | Target):
            graph = ctx.graph
            if graph is not None and not isinstance(graph, bytes):
                graph = _deep(lambda: pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
            made_for = getattr(ctx.backend, "target", None)
            ctx = self.ctx = WorkerContext(made_for if isinstance(made_for, Target) else ctx.backend.name, graph,
                                           ctx.threads)
        context = mp.get_context("fork") if method == "fork" else mp.get_context("spawn")
        parent, child = context.Pipe()
        proc = context.Process(target=_serve, args=(child, ctx), daemon=True)
        try:
            proc.start()
        finally:
            child.close()
        self.proc = proc  # only a started one: kill() joins it
        self.conn = parent

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def submit(self, job: Any) -> None:
        if not self.alive:
            if self.proc is not None:
                self.restarts += 1
            self._start()
        self.conn.send(job)

    def try_recv(self, wait_s: float = 0.0) -> Any:
        """The reply if one came within ``wait_s``, else None; WorkerLost if the worker died."""
        try:
            if self.conn.poll(wait_s):
                return self.conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        if not self.proc.is_alive():
            raise self._died()
        return None

    def _died(self) -> WorkerLost:
        self.proc.join(1)
        code = self.proc.exitcode
        self.kill()
        return WorkerLost("crash", f"worker died ({_exit_reason(code)})")

    def wait(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.try_recv(self.POLL_S)
            if reply is not None:
                return reply
            if stop is not None and stop():
                self.kill()
                raise Cancelled()
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerLost("timeout", f"no answer within {timeout_s:.1f} s")

    def call(self, job: Any, timeout_s: float, stop: Callable[[], bool] | None = None) -> Any:
        self.submit(job)
        return self.wait(timeout_s, stop)

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def close(self) -> None:
        if self.alive:
            try:
                self.conn.send(None)
                self.proc.join(2)
            except (OSError, ValueError):
                pass
        self.kill()
        self.proc = None


def wait_any(workers: list[Worker], timeout_s: float) -> None:
    """Until one of ``workers`` has answered or died, or ``timeout_s`` has passed."""
    connection.wait([x for w in workers for x in (w.conn, w.proc.sentinel)], timeout_s)


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
