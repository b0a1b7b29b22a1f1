"""Models that a single static graph cannot hold (an output's size depends on the data) checked and run as a
session runs them: the inputs from the model's declared dims, the run cut into compiled segments and host steps."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import LuminalError
from ..frontend_onnx.dims import InputDecl, bind
from ..frontend_onnx.importer import IOInfo, onnx_dtype, read_model
from ..runtime.feeds import model_io
from ..values import Shape

if TYPE_CHECKING:
    from .modelcheck import CheckReport


def declared_inputs(path: str | Path, shapes: Mapping[str, Shape] | None) -> tuple[list[IOInfo], list[str]]:
    """The model's inputs at the sizes ``shapes`` gives (dims nobody bound as 1, named in the warnings)."""
    specs = model_io(read_model(path)[0])[0]
    given = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in (shapes or {}).items()}
    bound = bind([InputDecl(s.name, s.dims) for s in specs], given)
    warnings = list(bound.warnings)
    if bound.unbound:
        warnings.append(f"unbound dimensions default to 1: {', '.join(bound.unbound)}")
    return [IOInfo(s.name, onnx_dtype(s.elem), bound.shapes[s.name], s.dtype.name) for s in specs], warnings


def run_dynamic(path: str | Path, feeds: Mapping[str, np.ndarray], backend: str,
                cache: str | None = None) -> dict[str, np.ndarray]:
    """The model's outputs by name, run in segments on a compiled ``backend``."""
    from ..runtime.compile import resolve_backend
    from ..runtime.dynamic import DynamicModel

    if backend == "reference":
        raise LuminalError("the reference executor runs one static graph, and this model's output sizes depend on "
                           "the data: check it on a compiled backend (cpu, cuda or interpret)")
    return DynamicModel.of_file(path, resolve_backend(backend), cache).run(dict(feeds))


def check_dynamic_artifact(folder: str, shapes: Mapping[str, Shape], atol: float, rtol: float,
                           seed: int) -> CheckReport:
    """An artifact of sizes known at run time, loaded as InferenceSession loads it, against onnxruntime on the model
    it holds, at ``shapes`` (None given: the first set of sizes it was compiled for)."""
    import time

    from ..runtime.dynamic_artifact import MODEL_FILE, load_dynamic_artifact, prebuilt_shapes
    from .modelcheck import CheckReport, compare_outputs, load_model_proto, make_inputs, run_onnxruntime

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
