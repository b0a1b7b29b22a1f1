"""What `luminal bench` does for one model: seeded inputs, a parity check against onnxruntime, then luminal
and its peers timed in interleaved rounds; the results as a plain JSON-ready dict (tests/schemas/bench.schema.json).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..errors import LuminalError
from .bench_stats import bootstrap_ratio, measure_interleaved, summarize
from .project import Job

if TYPE_CHECKING:
    from .bench_trace import Trace

SCHEMA_ID = "luminal-bench/1"
SUBJECT = "luminal"
PEERS = ("onnxruntime", "torch")


@dataclass(frozen=True)
class Settings:
    backend: str = "auto"
    against: tuple[str, ...] = ("onnxruntime",)
    runs: int | None = None
    time_s: float | None = 5.0
    warmup_s: float = 1.0
    seed: int = 0
    threads: int = 1
    cache: str | None = None
    confidence: float = 0.95
    n_boot: int = 2000
    max_memory: int | None = None  # bytes a model may need (None: the memory available)


@dataclass
class Runner:
    """``call`` runs one inference on fixed inputs; ``outputs`` returns {output name: array}."""

    name: str
    call: Callable[[], object]
    outputs: Callable[[], dict[str, np.ndarray]]
    info: dict[str, Any] = field(default_factory=dict)
    kernel_times: Callable[[Trace | None], list[dict[str, Any]]] | None = None  # adds its runs' spans to a trace
    warnings: list[str] = field(default_factory=list)


def parse_against(text: str | None) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in (text or "onnxruntime").split(",") if p.strip()))
    bad = [n for n in names if n not in PEERS]
    if bad or not names:
        raise LuminalError(f"--against: unknown runtime {bad[0] if bad else text!r} (choose from {', '.join(PEERS)})")
    return names


# ---------------------------------------------------------------- runners

def luminal_runner(model: Job, imported: Any, feeds: dict[str, np.ndarray], settings: Settings,
                   artifact: Path | None = None) -> Runner:
    """The model compiled by luminal with the tuning cache's winners, or as ``artifact`` holds it (the ``reference``
    backend runs the numpy reference executor instead: correct, never fast, for tests)."""
    if imported is None and artifact is None:
        return segmented_runner(model, feeds, settings)
    graph = imported.graph
    if artifact is not None:
        from ..runtime.artifact import load_artifact

        compiled = load_artifact(artifact, threads=settings.threads)
        names = [o.name for o in compiled.outputs]
        call = lambda: compiled.run(feeds)
        return Runner(SUBJECT, call, lambda: dict(zip(names, call())),
                      {"backend": compiled.backend.name, "artifact": str(artifact)},
                      lambda trace: profile_kernels(compiled, feeds, model.name, trace))
    if settings.backend == "reference":
        from ..ir import run_reference

        names = list(graph.output_names)
        call = lambda: run_reference(graph, feeds)
        return Runner(SUBJECT, call, lambda: dict(zip(names, call())), {"backend": "reference"})
    from ..cache import TuningCache
    from ..codegen.backend import get_backend
    from ..runtime.compile import compile_graph

    backend = get_backend(settings.backend, settings.threads)
    cache = TuningCache(settings.cache, readonly=True)
    try:
        compiled = compile_graph(graph, backend, cache=cache)
    finally:
        cache.close()
    names = [o.name for o in compiled.outputs]
    call = lambda: compiled.run(feeds)
    info = {"backend": settings.backend, "cache": str(cache.path), "compile": asdict(compiled.stats)}
    return Runner(SUBJECT, call, lambda: dict(zip(names, call())), info,
                  lambda trace: profile_kernels(compiled, feeds, model.name, trace))


def segmented_runner(model: Job, feeds: dict[str, np.ndarray], settings: Settings) -> Runner:
    """A model cut where the data decides a size: compiled segments and host steps, as InferenceSession runs it
    (no per-kernel times)."""
    from ..codegen.backend import get_backend
    from ..runtime.dynamic import DynamicModel

    if settings.backend == "reference":
        raise LuminalError(f"{model.name}: the reference executor runs one static graph, and this model's output "
                           "sizes depend on the data")
    dyn = DynamicModel.of_file(model.path, get_backend(settings.backend, settings.threads), settings.cache)
    dyn.run(feeds)  # compiles its segments for these sizes
    return Runner(SUBJECT, lambda: dyn.run(feeds), lambda: dyn.run(feeds),
                  {"backend": settings.backend, "cache": str(settings.cache), "segmented": True})


def dynamic_artifact_runner(model: Job, folder: Path, feeds: dict[str, np.ndarray], settings: Settings
                            ) -> Runner:
    """An artifact of sizes known at run time, as InferenceSession(DIR) runs it: the variant it holds for these sizes,
    else one compiled (or segments, for a model cut by the data) before the timing starts."""
    from ..runtime.dynamic_artifact import load_dynamic_artifact

    dyn = load_dynamic_artifact(folder, threads=settings.threads, cache=settings.cache)
    dyn.run(feeds)
    compiled = dyn.last_model  # None: the model runs in segments, whose kernels are not profiled
    return Runner(SUBJECT, lambda: dyn.run(feeds), lambda: dyn.run(feeds),
                  {"backend": dyn.backend.name, "artifact": str(folder)},
                  None if compiled is None else lambda trace: profile_kernels(compiled, feeds, model.name, trace))


def profile_kernels(compiled: Any, feeds: dict[str, np.ndarray], model: str = "model", trace: Trace | None = None,
                    repeats: int = 5) -> list[dict[str, Any]]:
    """Median time of each kernel of a CompiledModel over ``repeats`` runs (CompiledModel.spans), each named after
    the model nodes fused into it; the runs' spans go to ``trace`` too. Empty for a model that cannot profile its
    kernels."""
    from .bench_trace import kernel_title

    spans = getattr(compiled, "spans", None)
    if spans is None:
        return []
    runs = spans(feeds, repeats)
    if trace is not None:
        trace.add(model, compiled.launched, runs)
    return [{"name": f"#{i} {kernel_title(k)}", "signature": k.signature, "form": str(k.form),
             "nodes": [list(s) for s in k.sources], "seconds": float(np.median([run[i][1] for run in runs])) / 1e9}
            for i, k in enumerate(compiled.launched)]


def onnxruntime_runner(model: Job, feeds: dict[str, np.ndarray], settings: Settings,
                       gpu: bool = False) -> Runner:
    import onnxruntime as ort

    from .modelcheck import onnxruntime_session, quiet_run

    providers = ["CPUExecutionProvider"]
    warnings = []
    if gpu and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    elif gpu:
        warnings.append("onnxruntime has no CUDA execution provider here (install onnxruntime-gpu); "
                        "it runs on the CPU")
    # idle worker threads that spin would steal the cores from the runtime timed next in the round
    sess = onnxruntime_session(str(model.path), settings.threads, tuple(providers), spinning=False)
    names = [o.name for o in sess.get_outputs()]
    run_options = quiet_run()
    call = lambda: sess.run(names, feeds, run_options)
    info = {"version": ort.__version__, "providers": sess.get_providers(), "threads": settings.threads}
    return Runner("onnxruntime", call, lambda: dict(zip(names, call())), info, warnings=warnings)


def torch_runner(model: Job, feeds: dict[str, np.ndarray], settings: Settings, gpu: bool = False) -> Runner:
    """torch through onnx2torch, when that converter is installed."""
    try:
        import onnx2torch
        import torch
    except ImportError:
        raise LuminalError("--against torch needs the onnx2torch converter, which is not installed") from None
    torch.set_num_threads(settings.threads)
    device = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    try:
        module = onnx2torch.convert(str(model.path)).eval().to(device)
    except Exception as e:
        raise LuminalError(f"onnx2torch cannot convert {model.name}: {' '.join(str(e).split())[:200]}") from None
    args = [torch.from_numpy(np.ascontiguousarray(v)).to(device) for v in feeds.values()]

    def call():
        with torch.inference_mode():
            out = module(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    def outputs():
        out = call()
        out = out if isinstance(out, tuple | list) else [out]
        return {f"output{i}": o.detach().cpu().numpy() for i, o in enumerate(out)}

    return Runner("torch", call, outputs, {"version": torch.__version__, "device": device,
                                            "threads": settings.threads})


# ---------------------------------------------------------------- one model

def _finite(x: float) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def parity_entry(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], atol: float,
                 rtol: float) -> dict[str, Any]:
    from .modelcheck import compare_outputs

    checks = compare_outputs(got, want, atol, rtol)
    outputs = [dict(asdict(c), max_abs=_finite(c.max_abs), max_rel=_finite(c.max_rel)) for c in checks]
    return {"atol": atol, "rtol": rtol, "ok": bool(checks) and all(c.ok for c in checks), "outputs": outputs}


def parity_message(name: str, parity: dict[str, Any]) -> str:
    bad = next(o for o in parity["outputs"] if not o["ok"])
    detail = bad["reason"] or f"max abs err {bad['max_abs']:.3g}, max rel err {bad['max_rel']:.3g}"
    return (f"{name}: luminal's output {bad['name']!r} differs from onnxruntime's ({detail}; atol {parity['atol']:g}, "
            f"rtol {parity['rtol']:g}); no speed reported for wrong outputs")


def timings_entry(runners: list[Runner], samples: dict[str, list[float]], settings: Settings) -> dict[str, Any]:
    runtimes = {r.name: {"info": r.info, **asdict(summarize(samples[r.name])), "samples_s": samples[r.name]}
                for r in runners}
    speedup = {}
    for r in runners:
        if r.name == SUBJECT:
            continue
        ci = bootstrap_ratio(samples[r.name], samples[SUBJECT], paired=True, n_boot=settings.n_boot,
                             confidence=settings.confidence, seed=settings.seed)
        speedup[r.name] = {"ratio": ci.estimate, "low": ci.low, "high": ci.high, "confidence": ci.confidence}
    return {"runtimes": runtimes, "speedup": speedup}


def _peers(model: Job, feeds: dict[str, np.ndarray], settings: Settings,
           gpu: bool) -> tuple[list[Runner], dict[str, str]]:
    """The peers of ``--against`` that can run the model (each made and run once), and why each other cannot:
    one peer that cannot convert or run a model leaves the others timed."""
    peers, skipped = [], {}
    for name in settings.against:
        try:
            peer = onnxruntime_runner(model, feeds, settings, gpu) if name == "onnxruntime" \
                else torch_runner(model, feeds, settings, gpu)
            peer.call()
        except Exception as e:  # a peer's own failure, in its own words: converters raise anything
            message = str(e) if isinstance(e, LuminalError) else f"{type(e).__name__}: {' '.join(str(e).split())}"
            skipped[name] = message[:300]
            continue
        peers.append(peer)
    return peers, skipped


def _artifact_of(model: Job) -> tuple[Job, Path | None, Path | None]:
    """The model to compare with and feed, and the artifact that is timed: one of a static plan (compile -o at one
    set of sizes: compared on the model it came from, at its sizes), or of sizes known at run time (compared on the
    model it holds, at the sizes given, else the first it holds a variant for)."""
    from ..runtime.artifact import is_artifact, source_model
    from ..runtime.dynamic_artifact import MODEL_FILE, is_dynamic_artifact, prebuilt_shapes

    if is_dynamic_artifact(model.path):
        shapes = dict(model.shapes) or next(iter(prebuilt_shapes(model.path)), {})
        return replace(model, path=model.path / MODEL_FILE, shapes=shapes), None, model.path
    if is_artifact(model.path):
        onnx_path, shapes = source_model(model.path)
        return replace(model, path=onnx_path, shapes=shapes), model.path, None
    return model, None, None


def bench_model(model: Job, settings: Settings,
                progress: Callable[[str, int], None] | None = None, trace: Trace | None = None) -> dict[str, Any]:
    """Parity first, then timings (and the kernels' spans into ``trace``). When luminal's outputs are wrong the
    entry has status "wrong-outputs", a "message", and no timings."""
    from ..frontend_onnx.loader import Unbound, load_model
    from ..frontend_onnx.registry import DataDependent
    from .dynamic_run import declared_inputs
    from .modelcheck import load_model_proto, make_inputs

    model, artifact, dynamic = _artifact_of(model)
    proto = load_model_proto(str(model.path))  # refuses a missing or unreadable file
    t0 = time.perf_counter()
    try:
        imported = load_model(model.path, model.shapes, Unbound.WARN, max_memory=settings.max_memory)
        inputs = list(imported.inputs)
    except DataDependent:  # output sizes the data decides: timed as a session runs it, in segments
        imported, (inputs, _) = None, declared_inputs(model.path, model.shapes)
    feeds = make_inputs(inputs, proto, settings.seed)
    del proto
    t1 = time.perf_counter()
    gpu = settings.backend == "cuda"
    subject = (dynamic_artifact_runner(model, dynamic, feeds, settings) if dynamic is not None
               else luminal_runner(model, imported, feeds, settings, artifact))
    t2 = time.perf_counter()
    peers, skipped = _peers(model, feeds, settings, gpu)
    reference = next((p for p in peers if p.name == "onnxruntime"), None)
    reference = reference or onnxruntime_runner(model, feeds, settings, gpu)
    entry: dict[str, Any] = {
        "name": model.name,
        "path": str(artifact or dynamic or model.path),
        "shapes": {k: list(v) if isinstance(v, tuple) else v for k, v in model.shapes.items()},
        "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
        "warnings": [str(w) for w in getattr(imported, "warnings", []) or []],
        "seconds": {"import": round(t1 - t0, 4), "compile": round(t2 - t1, 4)},
    }
    entry["warnings"] += [w for r in (subject, *peers) for w in r.warnings]
    if skipped:
        entry["skipped"] = skipped
    try:
        want = reference.outputs()
    except Exception as e:
        raise LuminalError(f"onnxruntime cannot run {model.name}: {' '.join(str(e).split())[:300]}") from None
    entry["parity"] = parity_entry(subject.outputs(), want, model.atol, model.rtol)
    if not entry["parity"]["ok"]:
        entry.update(status="wrong-outputs", message=parity_message(model.name, entry["parity"]))
        return entry
    runners = [subject, *peers]
    samples = measure_interleaved({r.name: r.call for r in runners}, warmup_s=settings.warmup_s,
                                  runs=settings.runs, time_s=settings.time_s, seed=settings.seed,
                                  progress=(lambda k: progress(model.name, k)) if progress else None)
    entry.update(timings_entry(runners, samples, settings))
    entry["kernels"] = subject.kernel_times(trace) if subject.kernel_times else []
    if settings.backend != "reference" and imported is not None:  # where tune keeps its fusion decisions
        from ..codegen.partition import fusion_key

        entry["fusion_key"] = fusion_key(imported.graph)
    entry["status"] = "ok"
    return entry


# ---------------------------------------------------------------- the whole document

def environment(backend: str, threads: int) -> dict[str, Any]:
    """Who measured: versions, the device and toolchain fingerprints of the backend that ran (for a compiled
    backend, the keys its winners are stored under in the tuning cache)."""
    from ..cache.fingerprint import backend_fingerprints, device_fingerprint, toolchain_fingerprint
    from ..target import package_version

    if backend == "reference":  # the numpy executor: no codegen backend, nothing tuned
        device, toolchain = device_fingerprint(backend), toolchain_fingerprint(backend)
    else:
        from ..codegen.backend import get_backend

        device, toolchain = backend_fingerprints(get_backend(backend, threads))
    return {
        "luminal": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "cpu_count": os.cpu_count() or 1,
        "threads": threads,
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "LUMINAL_CACHE")},
        "versions": {n: package_version(n) for n in ("numpy", "onnx", "onnxruntime", "torch", "triton", "optuna")},
        "device": {"key": device.key, "info": device.info},
        "toolchain": {"key": toolchain.key, "info": toolchain.info},
    }


def new_document(settings: Settings) -> dict[str, Any]:
    s = asdict(settings)
    s["against"] = list(settings.against)
    return {
        "schema": SCHEMA_ID,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": environment(settings.backend, settings.threads),
        "settings": s,
        "models": [],
    }


def sanitize(value: Any) -> Any:
    """Non-finite floats become null so the document is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return value
