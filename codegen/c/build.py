"""Compile generated C into shared libraries, cached on disk, loaded with ctypes.

Each kernel source compiles to an object file named by a hash of source,
flags and compiler version; the objects of one ``build`` call link into one
shared library named by the hash of its objects. A second build of the same
kernels finds the library and runs no compiler at all.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...errors import LuminalError
from ...target import CompilerInfo, detect_c_compiler

# compiler invocations in this process (tests check that a cached build runs none)
STATS = {"compile": 0, "link": 0}
# value-preserving: no errno from libm, no FP-exception side effects (lets gcc if-convert and vectorise)
_EXTRA_FLAGS = ("-fno-math-errno", "-fno-trapping-math", "-std=gnu11")
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}
# folders of prebuilt kernel libraries (artifacts'), searched before anything is compiled
_library_dirs: list[Path] = []


def add_library_dir(path: str | Path) -> None:
    """Look for kernel libraries in ``path`` too: a library built there from the same sources, toolchain and CPU
    (its name says which) is loaded without running a compiler."""
    with _lock:
        if Path(path) not in _library_dirs:
            _library_dirs.append(Path(path))


@dataclass(frozen=True)
class Toolchain:
    cc: str
    version: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"cc": self.version, "cflags": list(self.cflags), "ldflags": list(self.ldflags)}


@lru_cache(maxsize=4)
def toolchain_of(info: CompilerInfo) -> Toolchain:
    """The flags kernels compile and link with on compiler ``info`` (probed once per compiler)."""
    base = tuple(f for f in info.flags if f != "-shared")
    extra = tuple(f for f in _EXTRA_FLAGS if _accepts(info.path, (*base, f)))
    omp = ("-fopenmp",) if "-fopenmp" in base else ()
    return Toolchain(info.path, info.version, base + extra, ("-shared", "-fPIC", *omp))


def toolchain() -> Toolchain | None:
    """The detected C compiler's toolchain; None without a working compiler."""
    info = detect_c_compiler()
    return toolchain_of(info) if info is not None else None


def _accepts(cc: str, flags: tuple[str, ...]) -> bool:
    with tempfile.TemporaryDirectory(prefix="luminal-cc-") as tmp:
        src = os.path.join(tmp, "p.c")
        Path(src).write_text("int lum_probe(int x) { return x + 1; }\n")
        try:
            r = subprocess.run([cc, *flags, "-c", src, "-o", os.path.join(tmp, "p.o")],
                               capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


def cache_dir() -> Path:
    if os.environ.get("LUMINAL_C_CACHE"):
        d = Path(os.environ["LUMINAL_C_CACHE"])
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = Path(base) / "luminal" / "c"
    d.mkdir(parents=True, exist_ok=True)
    return d


@lru_cache(maxsize=1)
def cpu_id() -> str:
    """The CPU model and ISA flags: -march=native objects must not be shared across different CPUs."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))]
    except OSError:
        import platform

        lines = [platform.machine(), platform.processor()]
    return hashlib.sha256("".join(sorted(set(lines))).encode()).hexdigest()[:16]


def source_hash(source: str, tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (source, "\0", tc.version, "\0", " ".join(tc.cflags), "\0", cpu_id()):
        h.update(part.encode())
    return h.hexdigest()[:24]


def symbol(h: str) -> str:
    return f"lum_k_{h}"


def _run(cmd: list[str], what: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise LuminalError(f"C compiler could not run ({what}): {e}") from None
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise LuminalError(f"C compiler failed on {what}: {first.strip()}")


def _compile_object(source: str, h: str, tc: Toolchain, d: Path) -> Path:
    obj = d / f"{h}.o"
    if obj.exists():
        return obj
    src = d / f"{h}.c"
    tmp_src = d / f"{h}.{os.getpid()}.{threading.get_ident()}.c"
    tmp_src.write_text(source)
    os.replace(tmp_src, src)
    tmp_obj = d / f"{h}.{os.getpid()}.{threading.get_ident()}.o"
    with _lock:
        STATS["compile"] += 1
    _run([tc.cc, *tc.cflags, f"-Dlum_kernel={symbol(h)}", "-c", str(src), "-o", str(tmp_obj)], f"kernel {h}")
    os.replace(tmp_obj, obj)
    return obj


def library(sources: list[str], jobs: int | None = None, tc: Toolchain | None = None) -> Path:
    """The shared library of ``sources`` built with ``tc`` (else the detected toolchain) for this CPU: found
    prebuilt (an artifact's, or in the cache), else compiled into the cache."""
    return _library(sources, jobs, tc)[0]


def _library(sources: list[str], jobs: int | None, tc: Toolchain | None) -> tuple[Path, list[str]]:
    """``library``, and the hash of each source (its function's symbol)."""
    tc = tc or toolchain()
    if tc is None:
        raise LuminalError(missing_message())
    hashes = [source_hash(s, tc) for s in sources]
    uniq = sorted(set(hashes))
    lib_hash = hashlib.sha256((" ".join(uniq) + "|" + " ".join(tc.ldflags)).encode()).hexdigest()[:24]
    name = f"lib{lib_hash}.so"
    prebuilt = next((p / name for p in _library_dirs if (p / name).is_file()), None)
    if prebuilt is not None:
        return prebuilt, hashes
    if not tc.cc:  # a toolchain read from an artifact, whose compiler is not here
        raise LuminalError(f"{missing_message()}; the prebuilt kernels were built for another CPU, compiler or "
                           f"thread count, so they must be rebuilt from their sources")
    d = cache_dir()
    lib = d / name
    if not lib.exists():
        by_hash = dict(zip(hashes, sources))
        jobs = jobs or max(1, min(len(uniq), os.cpu_count() or 1))
        with ThreadPoolExecutor(jobs) as pool:
            objs = list(pool.map(lambda h: _compile_object(by_hash[h], h, tc, d), uniq))
        tmp = d / f"lib{lib_hash}.{os.getpid()}.{threading.get_ident()}.so"
        with _lock:
            STATS["link"] += 1
        _run([tc.cc, *tc.ldflags, *map(str, objs), "-o", str(tmp), "-lm"], "link")
        os.replace(tmp, lib)
    return lib, hashes


def build(sources: list[str], jobs: int | None = None, tc: Toolchain | None = None) -> list[Callable[..., int]]:
    """Compile (with ``tc``, else the detected toolchain) and load; returns one C function per source,
    ``int f(void **bufs, int nthreads)`` (0: ok)."""
    lib, hashes = _library(sources, jobs, tc)
    with _lock:
        handle = _loaded.get(str(lib))
        if handle is None:
            # read by the OpenMP runtime when it loads with the first kernel library: waiting threads
            # sleep instead of spinning, which measured up to 50x faster on a shared, loaded machine
            # (a spinning waiter steals the core the straggler needs), after a short spin (10000 pauses,
            # 0.37 ms on a Zen 2) that bridges the gaps between the kernels of one run, where a wake-up
            # per parallel region and barrier cost a model of 200 kernels 20% (light_inception_v2 on 2
            # threads: 20 -> 16 ms fastest, 25 -> 20 ms median); set them yourself to override
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            os.environ.setdefault("GOMP_SPINCOUNT", "10000")
            handle = ctypes.CDLL(str(lib))
            _loaded[str(lib)] = handle
    fns = []
    for h in hashes:
        f = getattr(handle, symbol(h))
        f.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        f.restype = ctypes.c_int
        fns.append(f)
    return fns


def libraries_loaded() -> int:
    """How many kernel libraries this process has loaded (each brings the OpenMP runtime's threads)."""
    return len(_loaded)


def missing_message() -> str:
    return "no C compiler found: install gcc or clang (or set CC)"
