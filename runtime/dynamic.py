"""A model compiled for the sizes each run shows: the first run at a set of input sizes compiles a variant for
them (the tuning cache's winners apply, since kernels are keyed by their shapes), later runs at those sizes reuse
it. A model whose outputs' sizes depend on the data runs as segments with host steps between them (segments.py),
each segment a variant of its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.backend import Backend
from ..errors import LuminalError
from ..frontend_onnx.host import Value
from ..frontend_onnx.registry import DataDependent
from ..frontend_onnx.structure import clean
from .feeds import IOSpec, check_feeds, model_io
from .model import CompiledModel
from .segments import Key, Segment, Source
from .variants import DEFAULT_SIZE, VariantCache

if TYPE_CHECKING:
    from ..cache import TuningCache


class DynamicModel:
    """``path``: the ONNX model variants are made from (None: only the variants added, e.g. from an artifact).
    ``cache``: the tuning cache file (or an open cache) whose winners each variant's kernels take."""

    def __init__(self, path: str | Path | None, inputs: list[IOSpec], outputs: list[IOSpec], backend: Backend,
                 cache: str | Path | TuningCache | None = None, variants: int = DEFAULT_SIZE,
                 data_files: Iterable[Path] = ()) -> None:
        self.path = Path(path) if path is not None else None
        self.inputs = inputs
        self.outputs = outputs
        self.backend = backend
        self.cache = cache
        self.variants: VariantCache[Segment] = VariantCache(variants)
        self.runs_kept = variants  # runs' worth of variants: a run cut into segments takes one entry per segment
        self.source: Source | None = None  # read when a run first needs a cut
        self.last_model: CompiledModel | None = None  # the whole-model variant of the latest run, if it was one
        # the files variants are made from (the model's and its external data's), as they were when it was made
        self.stamps = {f: _stamp(f) for f in ([self.path, *data_files] if self.path is not None else [])}

    @staticmethod
    def of_file(path: str | Path, backend: Backend, cache: str | Path | TuningCache | None = None,
                variants: int = DEFAULT_SIZE) -> DynamicModel:
        from ..frontend_onnx.importer import _external_tensors, read_model

        if not Path(path).is_file():
            raise LuminalError(f"model {str(path)!r} not found")
        proto, base, _ = read_model(path)
        inputs, outputs = model_io(proto)
        data = {base / e.value for t in _external_tensors(proto) for e in t.external_data if e.key == "location"} \
            if base is not None else set()
        return DynamicModel(path, inputs, outputs, backend, cache, variants, sorted(data))

    # ------------------------------------------------------------ variants

    @staticmethod
    def key(shapes: Mapping[str, tuple[int, ...]], inputs: list[IOSpec]) -> Key:
        return ("model", tuple(tuple(shapes[s.name]) for s in inputs))

    def add(self, model: CompiledModel) -> None:
        """A whole-model variant made elsewhere (an artifact's): runs at its input shapes use it."""
        self.variants.put(self.key({s.name: s.shape for s in model.inputs}, self.inputs), Segment(0, model, {}, None))

    def prepare(self, shapes: Mapping[str, tuple[int, ...]]) -> Segment:
        """The variant for these input shapes, compiled now if it is not yet."""
        env = {s.name: np.broadcast_to(np.zeros((), s.dtype), shapes[s.name]) for s in self.inputs}
        return self.variants.get(self.key(shapes, self.inputs), partial(self._first, env))

    def _unchanged(self) -> None:
        """Refuse to make a variant from a model file rewritten since the session was made: its variants would mix
        two models."""
        for f, stamp in self.stamps.items():
            if _stamp(f) != stamp:
                raise LuminalError(f"{'model' if f == self.path else 'external data'} file {str(f)!r} changed since "
                                   "this session was made (rewritten, truncated or removed): make a new session to "
                                   "run it")

    def _open_cache(self) -> TuningCache | None:
        from ..cache import TuningCache, default_cache_path

        if self.cache is None:
            path = default_cache_path()
            return TuningCache(path, readonly=True) if path.is_file() else None
        if isinstance(self.cache, TuningCache):  # its own connection: a variant is made in whichever thread runs
            return TuningCache(self.cache.path, readonly=True) if self.cache.path.is_file() else self.cache
        return TuningCache(self.cache, readonly=True)

    def _with_cache(self, make: partial[Segment]) -> Segment:
        tc = self._open_cache()
        try:
            return make(tc)
        finally:
            if tc is not None and tc is not self.cache:
                tc.close()

    def _first(self, env: Mapping[str, np.ndarray]) -> Segment:
        if self.path is None:
            shapes = ", ".join(f"{n}={list(v.shape)}" for n, v in env.items())
            raise LuminalError(f"no compiled variant for input shapes {shapes}, and no model to compile one from")
        if self.source is None:  # a Source holds what it read; else the variant is read from the file
            self._unchanged()
            try:
                return self._with_cache(partial(self._whole, env))
            except DataDependent:
                self.source = Source(self.path)
        return self._with_cache(partial(self._segment, 0, env, {}))

    def _whole(self, env: Mapping[str, np.ndarray], tc: TuningCache | None) -> Segment:
        from ..frontend_onnx.loader import API_HINT, Unbound, load_model
        from .compile import compile_graph

        assert self.path is not None
        graph = load_model(self.path, {n: tuple(v.shape) for n, v in env.items()}, Unbound.REFUSE, hint=API_HINT).graph
        return Segment(0, compile_graph(graph, self.backend, cache=tc), {}, None)

    def _segment(self, start: int, env: Mapping[str, Value], carried: Mapping[str, np.ndarray],
                 tc: TuningCache | None) -> Segment:
        assert self.source is not None
        return self.source.build(start, env, carried, self.backend, tc)

    # ------------------------------------------------------------ runs

    def run(self, input_feed: object) -> dict[str, np.ndarray]:
        """The outputs by name, for feeds checked against the inputs' declared types and dims."""
        feeds = check_feeds(self.inputs, input_feed)
        seg = self.variants.get(("model", tuple(feeds[s.name].shape for s in self.inputs)),
                                partial(self._first, feeds))
        self.last_model = seg.model if seg.cut is None else None
        if seg.cut is None and seg.model is not None and not seg.constants:  # a whole model: the common case
            model = seg.model
            with seg.lock:
                outs = dict(zip((o.name for o in model.outputs), model.run(feeds)))
            return self._named(outs, feeds)
        env: dict[str, Value] = dict(feeds)
        segments = 1
        while True:
            seg.run(env)
            if seg.cut is None:
                break
            # room for this run's segments, ``runs_kept`` times over: an LRU of fewer entries than a run has
            # segments would drop each one before the next run reached it, and compile every segment every run
            segments += 1
            self.variants.hold(segments * self.runs_kept)
            src = self.source
            assert src is not None
            host = src.host(seg.cut)
            env.update(host.run({n: env[n] if n in env else src.initializer(n) for n in host.inputs}))
            start = seg.cut + 1
            seg = self.variants.get(src.key(start, env, seg.carried_digest, seg.carried),
                                    partial(self._with_cache, partial(self._segment, start, dict(env), seg.carried)))
        return self._named(env, feeds)

    def _named(self, values: Mapping[str, Value], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs by name: computed, an input passed through, or an initializer."""
        out = {}
        for o in self.outputs:
            v = values[o.name] if o.name in values else feeds[o.name] if o.name in feeds else self._initializer(o.name)
            if isinstance(v, list):
                raise LuminalError(f"graph output {clean(o.name)!r} is a sequence; only tensor outputs are supported")
            out[o.name] = v
        return out

    def _initializer(self, name: str) -> np.ndarray:
        if self.source is None:
            self._unchanged()
            self.source = Source(self.path) if self.path is not None else None
        if self.source is None or not self.source.is_initializer(name):
            raise LuminalError(f"output {name!r} was not computed")
        return self.source.initializer(name)


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a rewritten file from the one read (None: gone)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
