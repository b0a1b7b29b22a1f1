"""What ``luminal check`` does: seeded inputs, onnxruntime, a luminal backend, a comparison."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..compare import compare
from ..config import DEFAULT_ATOL, DEFAULT_RTOL
from ..errors import LuminalError, require_file
from ..ir import Graph, run_reference
from ..values import Shape

if TYPE_CHECKING:
    from ..cache import TuningCache


# ops through which an input keeps its meaning as an index
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}
_DEFAULT_INT_HIGH = 2


@dataclass
class OutputCheck:
    name: str
    shape: list[int]
    dtype: str
    max_abs: float
    max_rel: float
    ok: bool
    reason: str = ""


@dataclass
class CheckReport:
    model: str
    backend: str
    atol: float
    rtol: float
    seed: int
    inputs: dict[str, dict[str, Any]]
    outputs: list[OutputCheck] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.outputs) and all(o.ok for o in self.outputs)


# ---------------------------------------------------------------- backends

def _run_reference(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return run_reference(graph, dict(feeds))


def _compiled(name: str) -> Callable[..., list[np.ndarray]]:
    def runner(graph: Graph, feeds: Mapping[str, np.ndarray], cache: TuningCache | None = None) -> list[np.ndarray]:
        from ..runtime.compile import compile_graph

        return compile_graph(graph, name, cache=cache).run(dict(feeds))

    return runner


# backend name -> runner(graph, feeds) returning the outputs in graph.output_names order
BACKENDS: dict[str, Callable[..., list[np.ndarray]]] = {
    "reference": _run_reference,
    "interpret": _compiled("interpret"),
    "cpu": _compiled("cpu"),
    "cuda": _compiled("cuda"),
    "auto": _compiled("auto"),
}


def run_backend(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str,
                cache: TuningCache | None = None) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``backend``; returns {output name: array}."""
    runner = BACKENDS.get(backend)
    if runner is None:
        raise LuminalError(f"backend {backend!r} is not available (available: {', '.join(sorted(BACKENDS))})")
    outs = runner(graph, feeds) if cache is None else runner(graph, feeds, cache)
    return dict(zip(graph.output_names, outs))


def open_cache(path: str | None) -> Any:
    """The tuning cache whose winners a compiled backend uses: the given file, which must exist, else the
    default one if present."""
    from ..cache import TuningCache, default_cache_path

    if path is not None:
        require_file(path, "tuning cache")
    if path is None and not Path(default_cache_path()).is_file():
        return None
    return TuningCache(path, readonly=True)


# ---------------------------------------------------------------- inputs

def _const_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    shapes[n.output[0]] = tuple(a.t.dims)
    return shapes


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For each graph input used (through casts and reshapes) as the indices of a
    Gather over a constant table, the smallest table extent along the gathered axis."""
    consts = _const_shapes(model)
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in model.graph.node:
        for i, name in enumerate(n.input):
            if name:
                users.setdefault(name, []).append((n, i))
    bounds: dict[str, int] = {}
    for inp in model.graph.input:
        if inp.name in consts:
            continue
        stack, seen, found = [inp.name], set(), []
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            for n, i in users.get(v, []):
                if n.op_type in _PASS_THROUGH and i == 0:
                    stack.extend(n.output)
                elif n.op_type == "Gather" and i == 1 and n.input[0] in consts:
                    axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                    dims = consts[n.input[0]]
                    if dims:
                        found.append(dims[axis % len(dims)])
        if found:
            bounds[inp.name] = max(1, min(found))
    return bounds


def make_inputs(inputs: list, model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for ``inputs`` (IOInfo: name, dtype, shape): floats standard normal,
    integers in [0, table size) for lookup indices and [0, 2) otherwise, bools fair."""
    rng = np.random.default_rng(seed)
    bounds = index_bounds(model)
    feeds: dict[str, np.ndarray] = {}
    for io in inputs:
        shape = tuple(io.shape)
        free = [d for d in shape if not isinstance(d, int)]
        if free:
            raise LuminalError(f"input {io.name!r} has unbound dimension {free[0]!r}; bind it with --shape")
        dt = np.dtype(_np_dtype(getattr(io, "declared", None) or io.dtype))
        if dt.kind == "f":
            x = rng.standard_normal(shape, dtype=np.float32).astype(dt)
        elif dt.kind in "iu":
            x = rng.integers(0, bounds.get(io.name, _DEFAULT_INT_HIGH), shape).astype(dt)
        elif dt.kind == "b":
            x = rng.random(shape) < 0.5
        else:
            raise LuminalError(f"input {io.name!r} has dtype {dt}, which luminal cannot feed")
        feeds[io.name] = x
    return feeds


def _np_dtype(dtype) -> np.dtype:
    return dtype.np if hasattr(dtype, "np") else np.dtype(dtype)


# ---------------------------------------------------------------- onnxruntime

def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:300]


def onnxruntime_session(model_path: str, threads: int, providers: tuple[str, ...] = ("CPUExecutionProvider",),
                        spinning: bool = True, optimize: bool = True) -> Any:
    """An onnxruntime session on ``threads`` intra-op threads (``spinning=False``: idle threads sleep;
    ``optimize=False``: the graph as written, without onnxruntime's fusions)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    # its errors come back as exceptions; its log would print them again, coloured (the process-wide logger
    # speaks before a session's own exists)
    ort.set_default_logger_severity(4)
    opts.log_severity_level = 4
    opts.intra_op_num_threads = threads
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model_path, opts, providers=list(providers))
    except Exception as e:
        raise LuminalError(f"onnxruntime cannot load {model_path}: {_one_line(e)}") from None


def quiet_run() -> Any:
    """onnxruntime run options that keep its log quiet (a failed run's error is the exception)."""
    import onnxruntime as ort

    opts = ort.RunOptions()
    opts.log_severity_level = 4
    return opts


def run_onnxruntime(model_path: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    # the model as written: onnxruntime's fused kernels (QDQ pairs folded into integer convs) round differently
    sess = onnxruntime_session(model_path, min(4, os.cpu_count() or 1), optimize=False)
    names = [o.name for o in sess.get_outputs()]
    try:
        outs = sess.run(names, dict(feeds), quiet_run())
    except Exception as e:
        raise LuminalError(f"onnxruntime cannot run the model: {_one_line(e)}") from None
    return dict(zip(names, outs))


def run_onnx_reference(model_path: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The outputs of the ONNX reference implementation (onnx.reference), or None where it cannot run the model.
    It implements some ops only from a later opset than models of older ones use (QuantizeLinear and
    DequantizeLinear from 19, which onnxruntime's quantizer writes at 10-13): those run converted to its newest
    opset by onnx's version converter."""
    from onnx import defs, version_converter
    from onnx.reference import ReferenceEvaluator

    def run(model: str | onnx.ModelProto) -> dict[str, np.ndarray]:
        ev = ReferenceEvaluator(model)
        return dict(zip(ev.output_names, ev.run(None, dict(feeds))))

    try:
        return run(model_path)
    except Exception:
        pass
    try:
        return run(version_converter.convert_version(onnx.load(model_path), defs.onnx_opset_version()))
    except Exception:
        return None


# ---------------------------------------------------------------- the check

def load_model_proto(path: str) -> onnx.ModelProto:
    p = require_file(path, "model")
    try:
        return onnx.load(str(p), load_external_data=False)
    except Exception as e:
        raise LuminalError(f"cannot read {path!r} as an ONNX model: {type(e).__name__}") from None


def magnitude(x: np.ndarray) -> float:
    """The largest finite magnitude of a float array past 1 (1 for other dtypes): what ``atol`` is a share of."""
    if x.dtype.kind not in "fc":
        return 1.0
    fin = np.abs(x[np.isfinite(x)])
    return max(1.0, float(fin.max())) if fin.size else 1.0


def compare_outputs(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                    atol: float, rtol: float) -> list[OutputCheck]:
    """Each output of ``want`` against ``got``: ``|a - b| <= atol * m + rtol * |b|`` per element, m the output's
    largest magnitude where it exceeds 1. Float32 rounding in a deep network grows with the magnitudes its sums
    carry, not with each element: where an output reaches 153 (torchvision's FCN-ResNet50 with random weights),
    onnxruntime's own graph with and without its optimisations differs by 2e-4 near zero."""
    checks = []
    for name, w in want.items():
        w = np.asarray(w)
        if name not in got:
            checks.append(OutputCheck(name, list(w.shape), str(w.dtype), float("nan"), float("nan"), False,
                                      "missing from luminal's outputs"))
            continue
        c = compare(np.asarray(got[name]), w, rtol, atol * magnitude(w))
        checks.append(OutputCheck(name, list(w.shape), str(w.dtype), c.max_abs, c.max_rel, c.ok, c.reason))
    return checks


def check_model(path: str, shapes: Mapping[str, Any] | None = None, backend: str = "reference",
                atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL, seed: int = 0,
                cache: str | None = None, max_memory: int | None = None) -> CheckReport:
    """Run the model on onnxruntime and on a luminal backend with the same seeded inputs; a model that needs
    more than ``max_memory`` bytes (default: the memory available) is refused before either runs."""
    from ..frontend_onnx.loader import Unbound, load_model
    from ..frontend_onnx.registry import DataDependent
    from .dynamic_run import declared_inputs, run_dynamic

    if backend not in BACKENDS:
        raise LuminalError(f"backend {backend!r} is not available (available: {', '.join(sorted(BACKENDS))})")
    proto = load_model_proto(path)
    t0 = time.perf_counter()
    try:
        imported = load_model(path, shapes, Unbound.WARN, max_memory=max_memory)
        graph, inputs, warnings = imported.graph, list(imported.inputs), list(imported.warnings)
    except DataDependent:  # output sizes the data decides: run in segments, as a session does
        graph = None
        inputs, warnings = declared_inputs(path, shapes)
    t1 = time.perf_counter()
    feeds = make_inputs(inputs, proto, seed)
    del proto
    report = CheckReport(model=str(path), backend=backend, atol=atol, rtol=rtol, seed=seed,
                         inputs={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
                         warnings=warnings)
    want = run_onnxruntime(str(path), feeds)
    t2 = time.perf_counter()
    got = (run_dynamic(path, feeds, backend, cache) if graph is None else
           run_backend(graph, feeds, backend, open_cache(cache) if backend != "reference" else None))
    t3 = time.perf_counter()
    report.outputs = compare_outputs(got, want, atol, rtol)
    report.seconds = {"import": round(t1 - t0, 3), "onnxruntime": round(t2 - t1, 3), backend: round(t3 - t2, 3)}
    if not report.ok:
        arbitrate(report, got, want, run_onnx_reference(str(path), feeds))
        report.seconds["onnx reference"] = round(time.perf_counter() - t3, 3)
    return report


def check_artifact(folder: str, atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
                   seed: int = 0) -> CheckReport:
    """An artifact's kernels (``compile -o``), as they load, against onnxruntime on the model they were compiled
    from, with the same seeded inputs."""
    from ..runtime.artifact import load_artifact, source_model

    model_path, _ = source_model(folder)
    t0 = time.perf_counter()
    compiled = load_artifact(folder, model_path=model_path)
    t1 = time.perf_counter()
    feeds = make_inputs(list(compiled.inputs), load_model_proto(str(model_path)), seed)
    report = CheckReport(model=str(folder), backend=compiled.backend.name, atol=atol, rtol=rtol, seed=seed,
                         inputs={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()})
    want = run_onnxruntime(str(model_path), feeds)
    t2 = time.perf_counter()
    got = dict(zip([o.name for o in compiled.outputs], compiled.run(dict(feeds))))
    t3 = time.perf_counter()
    report.outputs = compare_outputs(got, want, atol, rtol)
    report.seconds = {"load artifact": round(t1 - t0, 3), "onnxruntime": round(t2 - t1, 3),
                      report.backend: round(t3 - t2, 3)}
    if not report.ok:
        arbitrate(report, got, want, run_onnx_reference(str(model_path), feeds))
    return report


def arbitrate(report: CheckReport, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
              ref: Mapping[str, np.ndarray] | None) -> None:
    """Where luminal and onnxruntime disagree, the ONNX reference implementation decides: an output on which luminal
    matches it and onnxruntime does not passes, with a warning (onnxruntime's u8 x s8 kernels saturate on AVX2
    machines without VNNI, for one)."""
    if ref is None:
        return
    mine = {c.name: c for c in compare_outputs(got, ref, report.atol, report.rtol)}
    theirs = {c.name: c for c in compare_outputs(want, ref, report.atol, report.rtol)}
    for o in report.outputs:
        if not o.ok and o.name in mine and mine[o.name].ok and not theirs[o.name].ok:
            o.ok, o.reason = True, "matches the ONNX reference implementation, which onnxruntime does not"
            report.warnings.append(f"{o.name}: onnxruntime differs from the ONNX reference implementation (max abs "
                                   f"{theirs[o.name].max_abs:.3g}); luminal matches the reference")


def check_dynamic_artifact(folder: str, shapes: Mapping[str, Shape], atol: float, rtol: float,
                           seed: int) -> CheckReport:
    """An artifact of sizes known at run time, loaded as InferenceSession loads it, against onnxruntime on the model
    it holds, at ``shapes`` (None given: the first set of sizes it was compiled for)."""
    from ..runtime.dynamic_artifact import MODEL_FILE, load_dynamic_artifact, prebuilt_shapes
    from .dynamic_run import declared_inputs

    model = str(Path(folder) / MODEL_FILE)
    sizes = dict(shapes) or next(iter(prebuilt_shapes(folder)), {})
    t0 = time.perf_counter()
    dyn = load_dynamic_artifact(folder)
    t1 = time.perf_counter()
    inputs, warnings = declared_inputs(model, sizes)
    feeds = make_inputs(inputs, load_model_proto(model), seed)
    report = CheckReport(model=folder, backend=dyn.backend.name, atol=atol, rtol=rtol, seed=seed,
                         inputs={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
                         warnings=warnings)
    want = run_onnxruntime(model, feeds)
    t2 = time.perf_counter()
    got = dyn.run(dict(feeds))
    t3 = time.perf_counter()
    report.outputs = compare_outputs(got, want, atol, rtol)
    report.seconds = {"load artifact": round(t1 - t0, 3), "onnxruntime": round(t2 - t1, 3),
                      report.backend: round(t3 - t2, 3)}
    return report
