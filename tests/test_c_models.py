"""The example models on the cpu backend with random fusion decisions and random valid schedules."""

from __future__ import annotations

import random

import numpy as np
import pytest

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import fusible_edges, partition
from luminal.ir import run_reference


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bert", "gpt2", "resnet", "vit"])
def test_small_models_random_fusion_and_schedules(small_models, model):
    from luminal.frontend_onnx import load

    from .conftest import MODELS_DIR

    name = f"{model}-small-torchscript.onnx"
    info = small_models[name]
    g = load(str(MODELS_DIR / name), info["shapes"]).graph
    rng = np.random.default_rng(0)
    feeds = {n.attrs["name"]: (rng.standard_normal(n.shape) if n.dtype.is_float else rng.integers(0, 2, n.shape))
             .astype(n.dtype.np) for n in g.inputs}
    want = run_reference(g, feeds)
    be = CPUBackend()
    rnd = random.Random(model)
    edges = fusible_edges(g)
    for _ in range(2):
        ks = partition(g, {e: rnd.random() < 0.7 for e in edges})
        scheds = []
        for k in ks:
            space = be.space(k)
            s = be.default_schedule(k)
            for _ in range(50):
                cand = {kn.name: rnd.choice(kn.choices) for kn in space}
                if be.valid(k, cand):
                    s = cand
                    break
            scheds.append(s)
        got = run_graph(g, feeds, schedules=scheds, kernels=ks)
        for w, r in zip(want, got):
            w64, r64 = w.astype(np.float64), r.astype(np.float64)
            assert np.abs(r64 - w64).max() <= 1e-4 * max(1.0, np.abs(w64).max())
