"""Models that a single static graph cannot hold (an output's size depends on the data) checked and run as a
session runs them: the inputs from the model's declared dims, the run cut into compiled segments and host steps."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..errors import LuminalError
from ..frontend_onnx.dims import InputDecl, bind
from ..frontend_onnx.importer import IOInfo, onnx_dtype, read_model
from ..runtime.feeds import model_io
from ..values import Shape


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

