"""Run ``luminal`` commands on fuzz cases and classify what happened.

A pool of worker processes imports luminal once; each case runs the typer app in a child forked from a
worker, with its stdin, stdout and stderr on files, a memory limit (RLIMIT_AS), its own process group and a
wall-clock timeout. The child behaves like the installed ``luminal`` script: an uncaught exception prints a
traceback and exits 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import multiprocessing.process
import os
import re
import resource
import select
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import typer

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


class Outcome(enum.Enum):
    OK = "ok"  # exit 0 or 1, no traceback
    REFUSAL = "refusal"  # exit 2 with exactly one line on stderr
    NOISY_REFUSAL = "noisy_refusal"  # exit 2 with no line or several lines on stderr
    TRACEBACK = "traceback"  # a Python traceback on stderr, whatever the exit code
    SIGNAL = "signal"  # killed by a signal (not our timeout)
    TIMEOUT = "timeout"  # still running at the deadline
    OTHER_EXIT = "other_exit"  # any other exit code
    NOT_REFUSED = "not_refused"  # exit 0 or 1 where the input is bad beyond doubt (exit 2 expected)
    RAW_CONTROL = "raw_control"  # exit 0, 1 or 2, but a terminal escape or other control character went out raw
    CHANGED_INPUT = "changed_input"  # exit 0, 1 or 2, but a file the command must only read changed (or -wal/-shm
    # appeared beside it), or a file named '-' was written

    @property
    def clean(self) -> bool:
        return self in (Outcome.OK, Outcome.REFUSAL)


@dataclass(frozen=True)
class Case:
    """One command on one set of files. Paths in ``argv`` are relative to the case's folder."""

    family: str
    index: int
    how: str  # what the mutator did, for people
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    fifos: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    readonly: bool = False  # the folder and its files read-only, the command run as an unprivileged user
    untouched: tuple[str, ...] = ()  # files the command must leave as they are
    must_refuse: bool = False  # the input is bad beyond doubt: only exit 2 is right
    names_from_files: bool = False  # its files hold names with control characters, which must not go out raw

    @property
    def name(self) -> str:
        return f"{self.family}-{self.index:06d}"

    @property
    def command(self) -> str:
        return _command_name(self.argv)


def _command_name(argv: tuple[str, ...]) -> str:
    words = [a for a in argv if a != "--debug"][:2]
    words = [a for a in words if not a.startswith("-")]
    return " ".join(words[:2] if words and words[0] == "cache" else words[:1])


@dataclass(frozen=True)
class Result:
    case: Case
    outcome: Outcome
    returncode: int | None
    seconds: float
    stderr: str
    stdout: str
    signature: str = ""
    debug_stderr: str = ""  # of the same case run with --debug, when it ended in an internal error


@dataclass(frozen=True)
class Limits:
    timeout: float = 60.0
    max_memory: int = 4 << 30  # bytes of address space per case


@dataclass
class Workspace:
    """Folders shared by every case of a run; the compiled kernels are shared by every run of the machine."""

    root: Path
    c_cache: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "luminal-fuzz-c-cache")

    def __post_init__(self) -> None:
        for d in (self.root, self.c_cache, self.root / "cases"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self.root / "cases", 0o755)
        os.chmod(self.c_cache, 0o777)  # unprivileged (read-only) cases build kernels too


def child_env(case_dir: Path, ws: Workspace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUMINAL_", "FORCE_COLOR", "PYTEST"))}
    env.update(LUMINAL_CACHE=str(case_dir / "default-cache.db"), LUMINAL_C_CACHE=str(ws.c_cache),
               XDG_CACHE_HOME=str(case_dir / "xdg"), OMP_NUM_THREADS="1", HOME=str(case_dir), NO_COLOR="1",
               COLUMNS="100", TERM="dumb")
    return env


def prepare(case: Case, case_dir: Path) -> None:
    case_dir.mkdir(parents=True)
    for folder in case.folders:
        (case_dir / folder).mkdir(parents=True, exist_ok=True)
    for name, data in case.files:
        path = case_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for name in case.fifos:
        os.mkfifo(case_dir / name)
    if case.readonly:
        for path in [case_dir, *case_dir.rglob("*")]:
            if not path.is_fifo():
                os.chmod(path, 0o555 if path.is_dir() else 0o444)
    else:
        os.chmod(case_dir, 0o755)


HARNESS_ERROR = 99  # the fuzzer itself failed to set a case up


def _child(app: typer.Typer, case: Case, case_dir: Path, ws: Workspace, limits: Limits) -> None:
    """Runs in the forked child; never returns."""
    code = HARNESS_ERROR
    try:
        os.setpgid(0, 0)
        os.chdir(case_dir)
        out_dir = case_dir.parent / f"{case_dir.name}.io"
        stdin = os.open(os.devnull, os.O_RDONLY)
        stdout = os.open(out_dir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        stderr = os.open(out_dir / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        # the worker's sys.stdout may not be fd 1 (pytest's capture): write where the installed script would
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      line_buffering=True)
        try:
            _isolate(case, case_dir, ws, limits)
        except BaseException:
            print("fuzz harness error:", file=sys.stderr)
            traceback.print_exc()
            raise
        code = _run_app(app, case.argv)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _isolate(case: Case, case_dir: Path, ws: Workspace, limits: Limits) -> None:
    env = child_env(case_dir, ws)
    os.environ.clear()
    os.environ.update(env)
    resource.setrlimit(resource.RLIMIT_AS, (limits.max_memory, limits.max_memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if case.readonly and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    # the worker is a daemonic pool process; the case must be a process that may start children of its own
    me = multiprocessing.process.current_process()
    me._config["daemon"] = False  # type: ignore[attr-defined]
    multiprocessing.process._children = set()  # type: ignore[attr-defined]
    sys.argv = ["luminal", *case.argv]


def _run_app(app: typer.Typer, argv: tuple[str, ...]) -> int:
    """What the installed ``luminal`` script does: an uncaught exception is a traceback and exit 1."""
    try:
        app(args=list(argv), prog_name="luminal")
        return 0
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _wait(pid: int, timeout: float) -> int | None:
    """The child's wait status, or None when it is still running at the deadline."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        return None
    return os.waitpid(pid, 0)[1]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def execute(app: typer.Typer, case: Case, ws: Workspace, limits: Limits, debug: bool = False) -> Result:
    """Run the case; with ``debug``, an internal error (exit 3) is run again with --debug for its trace."""
    result = _execute(app, case, ws, limits)
    if debug and result.outcome is Outcome.OTHER_EXIT and "Traceback" not in result.stderr:
        again = _execute(app, dataclasses.replace(case, argv=("--debug", *case.argv)), ws, limits)
        if "Traceback (most recent call last)" in again.stderr:
            sig = signature(case, Outcome.TRACEBACK, again.returncode, again.stderr)
            return Result(case, result.outcome, result.returncode, result.seconds, result.stderr, result.stdout,
                          sig.replace(" | ", f" | exit {result.returncode} ", 1), again.stderr)
    return result


def _execute(app: typer.Typer, case: Case, ws: Workspace, limits: Limits) -> Result:
    case_dir = ws.root / "cases" / case.name
    io_dir = ws.root / "cases" / f"{case.name}.io"
    for d in (case_dir, io_dir):
        if d.exists():
            _remove(d)
    io_dir.mkdir(parents=True)
    prepare(case, case_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(app, case, case_dir, ws, limits)
    status = _wait(pid, limits.timeout)
    seconds = time.monotonic() - start
    _kill_group(pid)
    if status is None:
        os.waitpid(pid, 0)
    stdout = _read(io_dir / "stdout")
    stderr = _read(io_dir / "stderr")
    returncode = None if status is None else os.waitstatus_to_exitcode(status)
    outcome = classify(returncode, stderr)
    note: tuple[str, ...] = ()
    if outcome.clean:
        outcome = oracles(case, case_dir, stdout + stderr, returncode) or outcome
        note = tuple(changes(case, case_dir)) if outcome is Outcome.CHANGED_INPUT else ()
    return Result(case, outcome, returncode, seconds, stderr, stdout,
                  signature(case, outcome, returncode, stderr, note))


# C0 controls but newline and tab, DEL, C1 controls, bidi overrides: out of a model's names onto a terminal
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")


def oracles(case: Case, case_dir: Path, output: str, returncode: int | None = 0) -> Outcome | None:
    """What a clean exit code can hide: bad input taken, raw control characters in the output, inputs changed
    behind the user's back."""
    if case.must_refuse and returncode in (0, 1):
        return Outcome.NOT_REFUSED
    if case.names_from_files and RAW.search(output.replace("\r\n", "\n")):
        return Outcome.RAW_CONTROL
    return Outcome.CHANGED_INPUT if changes(case, case_dir) else None


def changes(case: Case, case_dir: Path) -> list[str]:
    """The files of ``case.untouched`` that changed or grew a -wal/-shm, and a file named '-' written."""
    files = dict(case.files)
    out = []
    for name in case.untouched:
        path = case_dir / name
        if name in files and (not path.is_file() or path.read_bytes() != files[name]):
            out.append(f"{name} changed")
        out += [f"{name}{s} created" for s in ("-wal", "-shm")
                if Path(f"{path}{s}").exists() and f"{name}{s}" not in files]
    if (case_dir / "-").exists() and "-" not in files:
        out.append("wrote a file named '-'")
    return out


def _read(path: Path, limit: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _remove(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def classify(returncode: int | None, stderr: str) -> Outcome:
    if returncode is None:
        return Outcome.TIMEOUT
    if "Traceback (most recent call last)" in stderr:
        return Outcome.TRACEBACK
    if returncode < 0:
        return Outcome.SIGNAL
    if returncode in (0, 1):
        return Outcome.OK
    if returncode == 2:
        return Outcome.REFUSAL if len(stderr.strip("\n").splitlines()) == 1 else Outcome.NOISY_REFUSAL
    return Outcome.OTHER_EXIT


_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')


def signature(case: Case, outcome: Outcome, returncode: int | None, stderr: str, note: tuple[str, ...] = ()) -> str:
    """A key that groups failures with one cause: the command, the exception and the innermost luminal frame."""
    command = case.command
    if outcome is Outcome.TRACEBACK:
        lines = stderr.splitlines()
        frames = [m for line in lines if (m := _FRAME.match(line))]
        ours = [m for m in frames if str(REPO) in m["path"] and "/.venv/" not in m["path"]
                and "/tests/fuzz" not in m["path"]]
        where = ours[-1] if ours else (frames[-1] if frames else None)
        place = f"{_short(where['path'])}:{where['line']}" if where else "?"
        last = max((i for i, line in enumerate(lines) if _FRAME.match(line)), default=len(lines))
        raised = next((line for line in lines[last + 1:] if line and not line.startswith(" ")), "?")
        exc = raised.split(":")[0].rsplit(".", 1)[-1]
        return f"{command} | {exc} | {place}"
    if outcome is Outcome.NOISY_REFUSAL:
        first = stderr.strip().splitlines()[0] if stderr.strip() else "(empty stderr)"
        if first.startswith("Usage:"):
            return f"{command} | usage error in a box"
        return f"{command} | {len(stderr.strip().splitlines())} stderr lines | {_redact(first)[:80]}"
    if outcome is Outcome.SIGNAL and returncode is not None:
        return f"{command} | {signal.Signals(-returncode).name} | {case.how.split(';')[0][:60]}"
    if outcome is Outcome.OTHER_EXIT:
        final = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        return f"{command} | exit {returncode} | {_redact(final)[:80]}"
    if outcome is Outcome.TIMEOUT:
        return f"{command} | timeout | {case.how.split(';')[0][:60]}"
    if outcome is Outcome.NOT_REFUSED:
        return f"{command} | exit {returncode} on bad input | {case.how.split(';')[0][:60]}"
    if outcome is Outcome.RAW_CONTROL:
        return f"{command} | raw control character | {case.how.split(';')[0][:60]}"
    if outcome is Outcome.CHANGED_INPUT:
        return f"{command} | {', '.join(note)} | {case.how.split(';')[0][:60]}"
    return f"{command} | {outcome.value}"


def _short(path: str) -> str:
    return path.split(str(REPO) + "/", 1)[-1] if str(REPO) in path else path.rsplit("site-packages/", 1)[-1]


def _redact(text: str) -> str:
    """Keep a signature stable across cases: numbers and quoted names vary."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return re.sub(r"\d+", "N", text)


def save(result: Result, ws: Workspace, out: Path) -> Path:
    """Keep a failing case's files, command and output under ``out`` so it can be run again by hand."""
    case = result.case
    dest = out / result.outcome.value / case.name
    if dest.exists():
        _remove(dest)
    dest.mkdir(parents=True)
    for name, data in case.files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    setup = [f"mkdir -p {shlex.quote(f)}" for f in case.folders]
    setup += [f"rm -f {shlex.quote(f)} && mkfifo {shlex.quote(f)}" for f in case.fifos]
    if case.readonly:
        setup.append("chmod -R a-w .  # then run as a user other than root")
    env = "LUMINAL_CACHE=default-cache.db OMP_NUM_THREADS=1"
    script = ["#!/bin/sh", f"# {case.family} #{case.index}: {case.how}", 'cd "$(dirname "$0")"', *setup,
              f"{env} luminal {shlex.join(case.argv)}"]
    (dest / "cmd.sh").write_text("\n".join(script) + "\n")
    (dest / "stderr.txt").write_text(result.stderr)
    if result.debug_stderr:
        (dest / "debug-stderr.txt").write_text(result.debug_stderr)
    (dest / "stdout.txt").write_text(result.stdout[:20000])
    (dest / "result.txt").write_text(f"outcome: {result.outcome.value}\nreturncode: {result.returncode}\n"
                                     f"seconds: {result.seconds:.2f}\nsignature: {result.signature}\n")
    return dest


def cleanup(case: Case, ws: Workspace) -> None:
    for d in (ws.root / "cases" / case.name, ws.root / "cases" / f"{case.name}.io"):
        _remove(d)
