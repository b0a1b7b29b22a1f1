"""InferenceSession: onnxruntime's interface over a model file or an artifact directory; a model with symbolic dims
is compiled for the input sizes each run shows, the first time it sees them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import LuminalError
from .dynamic import DynamicModel
from .dynamic_artifact import is_dynamic_artifact, load_dynamic_artifact
from .feeds import IOSpec, constrain
from .model import CompiledModel, CompileStats
from .variants import DEFAULT_SIZE, VariantStats

if TYPE_CHECKING:
    from ..cache import TuningCache


@dataclass(frozen=True)
class NodeArg:
    """As onnxruntime's: ``shape`` holds a size, a symbolic dim's name, or None where the model names none."""

    name: str
    shape: list[int | str | None]
    type: str


class InferenceSession:
    """``InferenceSession(model.onnx | artifact_dir, backend="auto", shapes=None, cache=None, threads=None,
    variants=8)``.

    ``shapes`` fixes sizes ({dim name: size} or {input name: its whole shape}); where every input's shape is then
    known, the model is compiled now, else at the first run at each set of sizes. ``cache``: the tuning cache (a
    file or an open TuningCache) whose winners the kernels take (None: the default cache, where one exists).
    ``threads``: the C kernels' thread count (None: LUMINAL_NUM_THREADS, else OMP_NUM_THREADS, else every core).
    ``variants``: how many compiled sizes are kept (the least recently used is dropped). ``run`` is safe to call
    from several threads."""

    def __init__(self, path_or_artifact_dir: str | Path, backend: str = "auto", shapes: dict[str, Any] | None = None,
                 cache: str | Path | TuningCache | None = None, providers: Any = None, threads: int | None = None,
                 variants: int = DEFAULT_SIZE):
        from .compile import resolve_backend

        p = Path(path_or_artifact_dir)
        if p.is_dir() and is_dynamic_artifact(p):
            self._model = load_dynamic_artifact(p, backend, threads, cache, variants)
        elif p.is_dir():
            from .artifact import load_artifact

            compiled = load_artifact(p, backend, threads=threads)
            specs = [IOSpec.of_spec(s) for s in compiled.inputs]
            self._model = DynamicModel(None, specs, [IOSpec.of_spec(s) for s in compiled.outputs],
                                       compiled.backend, cache, variants)
            self._model.add(compiled)
        elif p.is_file():
            self._model = DynamicModel.of_file(p, resolve_backend(backend, threads), cache, variants)
        else:
            raise LuminalError(f"no model file or artifact directory at {p}")
        if shapes:
            self._model.inputs = constrain(self._model.inputs, shapes)
        whole = {s.name: tuple(d for d in s.dims if isinstance(d, int)) for s in self._model.inputs
                 if s.dims is not None}
        if all(s.dims is not None and len(whole.get(s.name, ())) == len(s.dims) for s in self._model.inputs):
            self._model.last_model = self._model.prepare(whole).model

    @property
    def model(self) -> CompiledModel:
        """The compiled model of the latest run (or of the shapes given), where it was one whole-model variant."""
        if self._model.last_model is None:
            raise LuminalError("no compiled model yet: this session compiles at the first run at each set of sizes "
                               "(or give every size in shapes=), and a model cut into segments has one per segment")
        return self._model.last_model

    @property
    def variant_stats(self) -> VariantStats:
        """Hits, misses (compilations) and evictions of the compiled variants."""
        return self._model.variants.stats

    @property
    def compile_stats(self) -> list[CompileStats]:
        """Each compiled variant's kernels, forms and tuning cache hits, the least recently used first (a model cut by
        the data has one per segment)."""
        return [seg.model.stats for seg in self._model.variants.values() if seg.model is not None]

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, s.shape, s.type) for s in self._model.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, s.shape, s.type) for s in self._model.outputs]

    def get_providers(self) -> list[str]:
        return [self._model.backend.name]

    def run(self, output_names: list[str] | None, input_feed: dict[str, Any], run_options: Any = None
            ) -> list[np.ndarray]:
        wanted = list(output_names) if output_names else None
        if wanted:
            names = [o.name for o in self._model.outputs]
            bad = [n for n in wanted if n not in names]
            if bad:
                raise LuminalError(f"unknown output name(s) {', '.join(map(repr, bad))}; "
                                   f"expected {', '.join(map(repr, names))}")
        results = self._model.run(input_feed)  # by name, in the graph's order
        return [results[n] for n in wanted] if wanted else list(results.values())
