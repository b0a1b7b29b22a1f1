"""InferenceSession: onnxruntime's interface over a compiled model or an artifact directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LuminalError
from .model import CompiledModel, TensorSpec

_ONNX_NAME = {"float32": "float", "float64": "double"}  # numpy names onnxruntime spells otherwise


def onnx_type(spec: TensorSpec) -> str:
    """The type onnxruntime would report for this input or output, e.g. ``tensor(uint8)``."""
    name = _np(spec).name
    return f"tensor({_ONNX_NAME.get(name, name)})"


def _np(spec: TensorSpec) -> np.dtype:
    return np.dtype(spec.declared) if spec.declared else spec.dtype.np


@dataclass(frozen=True)
class NodeArg:
    name: str
    shape: list[int]
    type: str


class InferenceSession:
    """``InferenceSession(model.onnx | artifact_dir, backend="auto", shapes=None, threads=None)``: ``threads``
    is the C kernels' thread count (None: LUMINAL_NUM_THREADS, else OMP_NUM_THREADS, else every core)."""

    def __init__(self, path_or_artifact_dir: str | Path, backend: str = "auto", shapes: dict | None = None,
                 cache: Any = None, providers: Any = None, threads: int | None = None):
        p = Path(path_or_artifact_dir)
        if p.is_dir():
            from .artifact import load_artifact

            self._model: CompiledModel = load_artifact(p, backend, threads=threads)
        elif p.is_file():
            from .compile import compile_model, resolve_backend

            self._model = compile_model(p, shapes, resolve_backend(backend, threads), cache)
        else:
            raise LuminalError(f"no model file or artifact directory at {p}")
        self._specs = {s.name: s for s in self._model.inputs}
        self._names = [s.name for s in self._model.outputs]

    @property
    def model(self) -> CompiledModel:
        return self._model

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, list(s.shape), onnx_type(s)) for s in self._model.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, list(s.shape), onnx_type(s)) for s in self._model.outputs]

    def get_providers(self) -> list[str]:
        return [self._model.backend.name]

    def run(self, output_names: list[str] | None, input_feed: dict[str, Any], run_options: Any = None
            ) -> list[np.ndarray]:
        if not isinstance(input_feed, dict):
            raise LuminalError("input_feed must be a dict of input name -> array")
        specs, names = self._specs, self._names
        unknown = [k for k in input_feed if k not in specs]
        if unknown:
            raise LuminalError(f"unknown input name(s) {', '.join(map(repr, unknown))}; "
                               f"expected {', '.join(map(repr, specs))}")
        missing = [k for k in specs if k not in input_feed]
        if missing:
            raise LuminalError(f"missing input(s) {', '.join(map(repr, missing))}")
        feeds = {name: _check(specs[name], value) for name, value in input_feed.items()}
        wanted = names if not output_names else list(output_names)
        bad = [n for n in wanted if n not in names]
        if bad:
            raise LuminalError(f"unknown output name(s) {', '.join(map(repr, bad))}; "
                               f"expected {', '.join(map(repr, names))}")
        results = self._model.run(feeds)
        return [results[names.index(n)] for n in wanted]


def _check(spec: TensorSpec, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    want = _np(spec)
    if arr.dtype != want and not (arr.dtype.kind in "biu" and np.can_cast(arr.dtype, want, "safe")):
        raise LuminalError(f"input {spec.name!r}: expected {want.name}, got {arr.dtype}")
    if tuple(arr.shape) != tuple(spec.shape):
        raise LuminalError(f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(arr.shape)} "
                           "(the model was compiled for fixed shapes; recompile with --shape)")
    return arr
