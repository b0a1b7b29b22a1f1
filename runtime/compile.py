"""Graph or model file -> CompiledModel, with schedules from the tuning cache where it has them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.backend import Backend, Schedule, get_backend
from ..codegen.kernel import Kernel
from ..codegen.partition import Decisions, lower
from ..ir.graph import Graph, Op
from ..ir.nogc import gc_paused
from ..values import Shape
from .model import CompiledModel, CompileStats, TensorSpec

if TYPE_CHECKING:
    from ..cache import TuningCache
    from ..cache.fingerprint import Fingerprint



def resolve_backend(backend: str | Backend, threads: int | None = None) -> Backend:
    """A backend object as it is, else the backend of that name (``threads``: its target's, None: the default)."""
    return get_backend(backend, threads) if isinstance(backend, str) else backend


def graph_specs(graph: Graph) -> tuple[list[TensorSpec], list[TensorSpec], dict[int, np.ndarray]]:
    dec = graph.declared
    inputs = [TensorSpec(n.attrs["name"], n.id, n.shape, n.dtype, dec.get(n.attrs["name"])) for n in graph.inputs]
    outputs = [TensorSpec(name, n.id, n.shape, n.dtype, dec.get(name))
               for name, n in zip(graph.output_names, graph.outputs)]
    constants = {n.id: n.attrs["value"] for n in graph.toposort() if n.op is Op.Constant}
    return inputs, outputs, constants


def choose_schedules(kernels: list[Kernel], backend: Backend, schedules: dict[str, Schedule] | None,
                     cache: TuningCache | None, keys: tuple[Fingerprint, Fingerprint] | None,
                     stats: CompileStats) -> list[Schedule]:
    """Per kernel: an explicit schedule (by signature), else the cache's winner (under the backend's
    ``keys``), else the default."""
    out = []
    for k in kernels:
        sig = k.signature
        chosen = (schedules or {}).get(sig)
        if chosen is None and cache is not None and keys is not None:
            winner = cache.best(sig, *keys)
            if winner is not None:  # knobs added since it was tuned take their default
                chosen = {**backend.default_schedule(k), **winner.config}
                stats.cache_hits += 1
            else:
                stats.cache_misses += 1
        if chosen is not None and not backend.valid(k, chosen):
            stats.invalid_schedules += 1
            chosen = None
        out.append(chosen if chosen is not None else backend.default_schedule(k))
    return out


@gc_paused()  # the lowering, planning and building walk the whole graph: see ir.nogc
def compile_graph(graph: Graph, backend: str | Backend = "auto", schedules: dict[str, Schedule] | None = None,
                  decisions: Decisions | None = None, cache: TuningCache | None = None) -> CompiledModel:
    t0 = time.perf_counter()
    be = resolve_backend(backend)
    keys = None
    imported = graph
    graph, kernels = lower(imported, decisions)
    if cache is not None:
        from ..cache import backend_fingerprints
        from ..codegen.partition import decisions_from_config, fusion_key

        keys = backend_fingerprints(be)
        tuned = cache.best(fusion_key(imported, kernels), *keys) if decisions is None else None
        if tuned is not None:  # the fusion decisions a tuning run stored for this graph on this device
            graph, kernels = lower(imported, decisions_from_config(imported, tuned.config))
    stats = CompileStats(kernels=len(kernels), forms=dict(Counter(k.form for k in kernels)))
    chosen = choose_schedules(kernels, be, schedules, cache, keys, stats)
    inputs, outputs, constants = graph_specs(graph)
    model = CompiledModel(be, kernels, chosen, inputs, outputs, constants, stats=stats)
    stats.compile_s = time.perf_counter() - t0
    return model


def import_model(path: str | Path, shapes: Mapping[str, Shape] | None = None, hint: str | None = None,
                 max_memory: int | None = None) -> Graph:
    """The model's graph for compiling: a dim nobody bound is refused, as the kernels would be made for 1
    (``hint``: how the caller gives sizes; None: the command line's ``--shape``), and so is a model that needs
    more than ``max_memory`` bytes (None: the memory available)."""
    from ..frontend_onnx.loader import CLI_HINT, Unbound, load_model

    return load_model(path, shapes, Unbound.REFUSE, hint=hint or CLI_HINT, max_memory=max_memory).graph


def compile_model(path: str | Path, shapes: Mapping[str, Shape] | None = None, backend: str | Backend = "auto",
                  cache: TuningCache | None = None, max_memory: int | None = None) -> CompiledModel:
    """The model at ``path`` compiled for ``shapes`` (every symbolic dim bound; at most ``max_memory`` bytes
    needed, None: the memory available)."""
    from ..frontend_onnx.loader import API_HINT

    graph = import_model(path, shapes, API_HINT, max_memory)
    return compile_graph(graph, backend, cache=cache)
