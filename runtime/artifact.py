"""Compiled artifacts: ``compile -o DIR`` writes them, ``InferenceSession(DIR)`` loads them
without importing or partitioning the model again."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..codegen.backend import Backend
from ..errors import LuminalError
from ..ir.dtypes import DType
from ..ir.nogc import gc_paused
from .compile import resolve_backend
from .model import CompiledModel, TensorSpec
from .serialize import kernel_from_json, kernel_to_json

FORMAT = "luminal-artifact"
FORMAT_VERSION = 3  # 2: an output buffer says whether it is final; 3: the shipped sequence runner reads the clock
MANIFEST = "manifest.json"


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fingerprints(backend: Backend) -> dict[str, Any]:
    try:
        from ..cache import backend_fingerprints

        dev, tc = backend_fingerprints(backend)
        return {"device": dev.key, "toolchain": tc.key, "device_info": dev.info}
    except Exception as e:  # fingerprints describe the artifact; their absence does not break it
        return {"error": f"{type(e).__name__}"}


@gc_paused()  # thousands of kernels' JSON and sources: young collections would each walk the whole model
def write_artifact(model: CompiledModel, out_dir: str | Path, model_path: str | Path | None = None,
                   shapes: dict | None = None) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise LuminalError(f"output path {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise LuminalError(f"output directory {out} is not empty and holds no luminal artifact")
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    ext = "py" if model.backend.name in ("cuda", "interpret") else "c"
    kernels = []
    for i, (k, s, src) in enumerate(zip(model.kernels, model.schedules, model.sources)):
        rel = f"kernels/k{i:03d}.{ext}"
        (out / rel).write_text(src)
        kernels.append({"signature": k.signature, "form": k.form, "schedule": s, "source": rel,
                        "source_sha256": hashlib.sha256(src.encode()).hexdigest(), "ir": kernel_to_json(k)})
    weights: dict[str, np.ndarray] = {}
    wdtypes: dict[str, str] = {}
    for n, arr in model.constants.items():
        wdtypes[str(n)] = DType.from_numpy(arr.dtype).value
        weights[f"c{n}"] = arr.view(np.uint16) if arr.dtype == DType.bfloat16.np else arr
    np.savez(out / "weights.npz", allow_pickle=False, **weights)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "luminal_version": __version__,
        "model": {"sha256": file_sha256(model_path) if model_path else None,
                  "path": str(Path(model_path).resolve()) if model_path else None,
                  "shapes": shapes or {}},
        "backend": model.backend.name, "toolchain": model.backend.toolchain(),
        "fingerprints": _fingerprints(model.backend),
        "inputs": [s.to_json() for s in model.inputs], "outputs": [s.to_json() for s in model.outputs],
        "kernels": kernels, "weights": {"file": "weights.npz", "dtypes": wdtypes},
        "stats": {"planned_bytes": model.planned_bytes, "intermediate_bytes": model.intermediate_bytes},
    }
    if model.backend.name == "cpu":
        manifest["build"] = _write_libraries(model, out)
    # compact: the C encoder writes it (indent takes the pure-Python one, seconds for thousands of kernels)
    (out / MANIFEST).write_text(json.dumps(manifest, separators=(",", ":"), default=str))
    return out


LIBRARIES = "lib"  # the artifact's folder of built kernel libraries


def _write_libraries(model: CompiledModel, out: Path) -> dict[str, Any]:
    """The C kernels' shared libraries, as built, next to their sources; what a loader needs to find them again
    (the toolchain, the CPU and the thread count they were built for: their names derive from these)."""
    from ..codegen.c import build
    from ..codegen.c.backend import SEQUENCE_SOURCE, CPUBackend

    backend = model.backend
    assert isinstance(backend, CPUBackend)
    tc = backend._toolchain()
    if tc is None:
        raise LuminalError(build.missing_message())
    (out / LIBRARIES).mkdir(exist_ok=True)
    names = []
    for sources in (list(model.sources), [SEQUENCE_SOURCE]):
        lib = build.library(sources, tc=tc)
        shutil.copyfile(lib, out / LIBRARIES / lib.name)
        names.append(lib.name)
    return {"toolchain": {"version": tc.version, "cflags": list(tc.cflags), "ldflags": list(tc.ldflags)},
            "cpu": build.cpu_id(), "threads": backend.target.threads, "libraries": names}


def _cpu_backend(d: Path, built: dict[str, Any], threads: int | None) -> Backend:
    """The C backend for an artifact whose kernel libraries were shipped: they load as they are where this machine's
    compiler (or, without one, the recorded toolchain), CPU and thread count give the same names; anything else
    rebuilds them from the sources, which needs a compiler."""
    from ..codegen.c import build
    from ..codegen.c.backend import CPUBackend
    from ..target import detect_target

    tc = built["toolchain"]
    prebuilt = build.Toolchain("", str(tc["version"]), tuple(map(str, tc["cflags"])), tuple(map(str, tc["ldflags"])))
    build.add_library_dir(d / LIBRARIES)
    return CPUBackend(detect_target("cpu", threads if threads is not None else int(built["threads"])), prebuilt)


def read_manifest(path: str | Path) -> dict:
    d = Path(path)
    f = d / MANIFEST
    if not f.is_file():
        raise LuminalError(f"{d} is not a luminal artifact (no {MANIFEST})")
    try:
        m = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LuminalError(f"{f} is not valid JSON") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise LuminalError(f"{d} is not a luminal artifact (foreign manifest)")
    if m.get("format_version") != FORMAT_VERSION:
        raise LuminalError(f"artifact format {m.get('format_version')!r} is not supported (expected "
                           f"{FORMAT_VERSION}); recompile the model")
    if m.get("luminal_version") != __version__:
        raise LuminalError(f"artifact was compiled by luminal {m.get('luminal_version')}, this is {__version__}; "
                           "recompile the model")
    return m


def is_artifact(path: str | Path) -> bool:
    """A folder holding a manifest: what ``compile -o`` writes."""
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def source_model(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX model an artifact was compiled from (where it was then) and the shapes it was compiled with."""
    m = read_manifest(path)
    info = m.get("model") or {}
    recorded = info.get("path")
    if not recorded or not Path(recorded).is_file():
        raise LuminalError(f"artifact {path} was compiled from {recorded!r}, which is not here: comparing with "
                           f"onnxruntime needs that model file")
    shapes = {str(k): tuple(v) if isinstance(v, list) else v for k, v in (info.get("shapes") or {}).items()}
    return Path(recorded), shapes


def load_artifact(path: str | Path, backend: str | Backend | None = None,
                  model_path: str | Path | None = None, threads: int | None = None) -> CompiledModel:
    d = Path(path)
    m = read_manifest(d)
    try:
        model_info = m["model"]
        recorded = model_info.get("sha256")
        check = model_path or model_info.get("path")
        if recorded and check and Path(check).is_file() and file_sha256(check) != recorded:
            raise LuminalError(f"artifact is stale: {Path(check).name} changed since it was compiled; recompile")
        if model_path and not recorded:
            raise LuminalError("artifact records no model hash; cannot check it against the model, recompile")
        name = m["backend"] if backend in (None, "auto") else backend
        built = m.get("build")
        be = _cpu_backend(d, built, threads) if name == "cpu" and m["backend"] == "cpu" and built else \
            resolve_backend(name, threads)
        if be.name == m["backend"]:
            theirs, ours = m.get("toolchain", {}).get("codegen"), be.toolchain().get("codegen")
            if theirs != ours:
                raise LuminalError(f"artifact kernels come from codegen {theirs!r}, this is {ours!r}; recompile")
        kernels, schedules = [], []
        for rec in m["kernels"]:
            k = kernel_from_json(rec["ir"])
            if k.signature != rec["signature"]:
                raise LuminalError("artifact kernel does not match its recorded signature: the artifact is damaged "
                                  "or this luminal identifies kernels otherwise; recompile")
            kernels.append(k)
            schedules.append(dict(rec["schedule"]))
            if be.name == m["backend"]:
                src = be.source(k, rec["schedule"])
                if hashlib.sha256(src.encode()).hexdigest() != rec["source_sha256"]:
                    raise LuminalError("artifact kernel source differs from what this luminal generates; recompile")
        inputs = [TensorSpec.from_json(s) for s in m["inputs"]]
        outputs = [TensorSpec.from_json(s) for s in m["outputs"]]
        dtypes = m["weights"]["dtypes"]
        constants = {}
        with np.load(d / m["weights"]["file"], allow_pickle=False) as z:
            for key, dt in dtypes.items():
                arr = z[f"c{int(key)}"]
                if dt == "bfloat16":
                    arr = arr.view(DType.bfloat16.np)
                constants[int(key)] = arr.astype(DType(dt).np, copy=False)
        # kernels read weights by their own shapes and dtypes: a weight that differs would be read out of bounds
        if any(n in constants and (constants[n].shape, constants[n].dtype) != (b.shape, b.dtype.np)
               for k in kernels for n, b in zip(k.input_nodes, k.inputs)):
            raise ValueError("a weight does not match the kernels that read it")
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as e:
        raise LuminalError(f"artifact {d} is malformed: {type(e).__name__}: {e}") from None
    for k, s in zip(kernels, schedules):
        if not be.valid(k, s):
            raise LuminalError(f"artifact schedule for kernel {k.signature} is not valid on backend {be.name!r}")
    return CompiledModel(be, kernels, schedules, inputs, outputs, constants)
