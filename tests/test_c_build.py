"""Building C kernels: the disk cache, parallel compiles, the no-compiler message, random fusion decisions."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
from codegen_util import fusion_block, graph

from luminal.codegen import backend as backend_mod
from luminal.codegen.c import build, schedule
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import fusible_edges, partition
from luminal.errors import LuminalError
from luminal.ir import DType, Graph, Tensor, optimize, run_reference

RNG = np.random.default_rng(3)


_CACHE_SCRIPT = """
import json, sys
import numpy as np
from luminal.codegen.c import build
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.partition import partition
from luminal.ir import DType, Graph, Tensor, optimize
x = Tensor.input("x", (3, 7, 11), DType.float32)
y = x.softmax(-1).mul(x.sum((0,), keepdim=True).expand((3, 7, 11)))
g = optimize(Graph([x.node], [y.contiguous().node], ["y"]))
be = CPUBackend()
ks = partition(g, {})
be.compile([(k, be.default_schedule(k)) for k in ks])
print(json.dumps({"kernels": len(ks), **build.STATS}))
"""


def _compile_in_subprocess(env):
    r = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_disk_cache_second_compile_compiles_nothing(tmp_path):
    import os

    env = {**os.environ, "LUMINAL_C_CACHE": str(tmp_path / "c")}
    first = _compile_in_subprocess(env)
    assert first["kernels"] >= 2 and first["compile"] == first["kernels"] and first["link"] == 1
    second = _compile_in_subprocess(env)
    assert second["compile"] == 0 and second["link"] == 0
    assert len(list((tmp_path / "c").glob("*.so"))) == 1


def test_cache_dir_respects_env(tmp_path, monkeypatch):
    monkeypatch.delenv("LUMINAL_C_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "luminal" / "c"
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path / "own"))
    assert build.cache_dir() == tmp_path / "own"


def test_in_process_recompile_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_C_CACHE", str(tmp_path))
    g = fusion_block(3)
    be = CPUBackend()
    items = [(k, be.default_schedule(k)) for k in partition(g, {})]
    before = dict(build.STATS)
    be.compile(items)
    mid = dict(build.STATS)
    assert mid["compile"] - before["compile"] == len({be.source(k, s) for k, s in items})
    be.compile(items)
    assert mid == build.STATS


def test_no_compiler_gives_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    be = CPUBackend()
    msg = be.available()
    assert msg and "\n" not in msg and "install gcc or clang" in msg
    with pytest.raises(LuminalError, match="install gcc or clang"):
        backend_mod.get_backend("cpu")


def test_generated_source_has_no_model_strings():
    x = Tensor.input("secret_input_name", (5, 3), DType.float32)
    g = optimize(Graph([x.node], [x.exp().contiguous().node], ["secret_output_name"]))
    be = CPUBackend()
    for k in partition(g, {}):
        src = be.source(k, be.default_schedule(k))
        assert "secret" not in src


def test_random_fusion_decisions_are_correct():
    g = fusion_block(3)
    xv = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    want = run_reference(g, {"x": xv})
    edges = fusible_edges(g)
    rnd = random.Random(1)
    decisions = [{}, {e: False for e in edges}] + [{e: rnd.random() < 0.5 for e in edges} for _ in range(6)]
    seen = set()
    for dec in decisions:
        ks = partition(g, dec)
        seen.add(len(ks))
        got = run_graph(g, {"x": xv}, dec)
        for w, r in zip(want, got):
            np.testing.assert_allclose(r, w, rtol=2e-5, atol=2e-6)
    assert len(seen) >= 3


def test_thread_count_from_env_and_schedule(monkeypatch):
    monkeypatch.setenv("LUMINAL_NUM_THREADS", "3")
    x = Tensor.input("x", (1000, 600), DType.float32)  # enough work for three threads (threads_for)
    g = graph([x], [x.softmax(-1)])
    be = CPUBackend()
    (k,) = partition(g, {})
    s = be.default_schedule(k)
    assert be.compile([(k, s)])[0].threads == 3
    assert be.compile([(k, {**s, "threads": 1})])[0].threads == 1
    xv = RNG.standard_normal((1000, 600)).astype(np.float32)
    for threads in (1, 2, 3):
        got = run_graph(g, {"x": xv}, schedules=[{**s, "threads": threads}])
        np.testing.assert_allclose(got[0], run_reference(g, {"x": xv})[0], rtol=1e-5, atol=1e-7)


def test_the_default_thread_count_grows_with_the_work(monkeypatch):
    """One thread per LOOP_GRAIN operations for a kernel without a GEMM (GRAIN for a product), at most the
    configured count: a small kernel does not wake a team."""
    monkeypatch.setenv("LUMINAL_NUM_THREADS", "8")
    be = CPUBackend()
    counts = []
    for rows in (8, 64, 512):
        x = Tensor.input("x", (rows, 512), DType.float32)
        (k,) = partition(graph([x], [x.softmax(-1)]), {})
        counts.append(be.default_schedule(k)["threads"])
        work = k.flops + rows * 512
        assert counts[-1] == max((c for c in (2, 4, 8) if c * schedule.LOOP_GRAIN <= work), default=1)
    assert counts[0] == 1 and counts[-1] == 8 and counts == sorted(counts)
    # a product keeps GRAIN: 64 x 64 x 64 (786K operations) on 2 threads, where a loop's grain would take 8
    a = Tensor.input("a", (64, 64), DType.float32)
    w = Tensor.const(RNG.standard_normal((64, 64)).astype(np.float32))
    (p,) = [k for k in partition(graph([a], [a.matmul(w)]), {}) if k.form == "contraction"]
    work = p.flops + math.prod(p.full)
    assert be.default_schedule(p)["threads"] == max(c for c in (1, 2, 4, 8) if c * schedule.GRAIN <= work) == 2


def test_buffers_are_aligned():
    be = CPUBackend()
    for shape in [(3,), (5, 7), (1,), (2, 1, 3)]:
        assert be.empty(shape, np.float32).ctypes.data % 64 == 0
        assert be.from_numpy(np.ones(shape, np.float16)).ctypes.data % 64 == 0


def test_openmp_thread_setting_pins_the_default_and_the_thread_knob(monkeypatch):
    """A backend made without a Target takes its thread count from OMP_NUM_THREADS (LUMINAL_NUM_THREADS first), read
    once when it is made: the kernels' parallel regions name their thread count, so it must reach the schedule."""
    monkeypatch.delenv("LUMINAL_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")
    x = Tensor.input("x", (1000, 600), DType.float32)
    (k,) = partition(graph([x], [x.softmax(-1)]), {})
    be = CPUBackend()
    s = be.default_schedule(k)
    assert s["threads"] == 3 and be.compile([(k, s)])[0].threads == 3
    assert dict((kn.name, kn.choices) for kn in be.space(k))["threads"] == (1, 2, 3)
    monkeypatch.setenv("LUMINAL_NUM_THREADS", "2")  # luminal's own setting first
    assert be.default_schedule(k)["threads"] == 3  # read when the backend was made, not later
    be = CPUBackend()
    assert be.default_schedule(k)["threads"] == 2
    # a schedule made where more threads were set, or with 0 for the default count, still runs here
    assert be.valid(k, s) and be.valid(k, {**s, "threads": 0}) and not be.valid(k, {**s, "threads": -1})
    assert be.compile([(k, {**s, "threads": 0})])[0].threads == 2
