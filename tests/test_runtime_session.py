"""InferenceSession, artifacts, buffer plan and the compile command."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from runtime_util import make_model
from sample_graphs import small_cnn, transformer_layer

from luminal.errors import LuminalError
from luminal.ir import DType, Graph, Tensor, optimize, run_reference
from luminal.runtime.artifact import write_artifact
from luminal.runtime.compile import compile_graph, compile_model
from luminal.runtime.plan import plan_buffers
from luminal.runtime.session import InferenceSession
from luminal.target import host_simd_width


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


BACKENDS = ["interpret", pytest.param("cuda", marks=pytest.mark.skipif(not _cuda(), reason="no CUDA GPU here"))]


@pytest.fixture
def model_path(tmp_path):
    return make_model(tmp_path / "m.onnx")


@pytest.mark.parametrize("backend", BACKENDS)
def test_session_matches_onnxruntime(model_path, backend):
    sess = InferenceSession(model_path, backend=backend, shapes={"batch": 3})
    ins, outs = sess.get_inputs(), sess.get_outputs()
    assert [(i.name, i.shape, i.type) for i in ins] == [("x", [3, 8], "tensor(float)")]
    assert [o.name for o in outs] == ["probs", "peak"]
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    ref = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = sess.run(None, {"x": x})
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    peak, = sess.run(["peak"], {"x": x})
    np.testing.assert_allclose(peak, ref[1], rtol=1e-5, atol=1e-5)


def test_bad_inputs_refused(model_path):
    sess = InferenceSession(model_path, backend="interpret", shapes={"batch": 2})
    x = np.zeros((2, 8), np.float32)
    for feed, msg in [({"y": x}, "unknown input"), ({}, "missing input"), ({"x": x.astype(np.float64)}, "float32"),
                      ({"x": np.zeros((3, 8), np.float32)}, "shape"), ({"x": x.astype(np.int64)}, "float32")]:
        with pytest.raises(LuminalError, match=msg):
            sess.run(None, feed)
    with pytest.raises(LuminalError, match="unknown output"):
        sess.run(["nope"], {"x": x})


def test_artifact_round_trip(model_path, tmp_path, monkeypatch):
    compiled = compile_model(model_path, {"batch": 2}, "interpret")
    out = write_artifact(compiled, tmp_path / "art", model_path, {"batch": 2})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["sha256"] and manifest["backend"] == "interpret"
    assert all((out / k["source"]).is_file() and k["signature"] and k["schedule"] for k in manifest["kernels"])
    # loading must not import or partition the model again
    import luminal.codegen.partition as part
    import luminal.frontend_onnx as fe

    monkeypatch.setattr(part, "partition", lambda *a, **k: pytest.fail("re-partitioned"))
    monkeypatch.setattr(fe, "load", lambda *a, **k: pytest.fail("re-imported"))
    sess = InferenceSession(out)
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    for a, b in zip(sess.run(None, {"x": x}), compiled.run({"x": x})):
        np.testing.assert_array_equal(a, b)


def test_stale_and_foreign_artifacts_refused(model_path, tmp_path):
    compiled = compile_model(model_path, {"batch": 2}, "interpret")
    out = write_artifact(compiled, tmp_path / "art", model_path, {"batch": 2})
    make_model(model_path, seed=5)  # the model changed after compiling
    with pytest.raises(LuminalError, match="stale"):
        InferenceSession(out)
    manifest = json.loads((out / "manifest.json").read_text())
    for patch, msg in [({"luminal_version": "0.0.1"}, "recompile"), ({"format": "other"}, "not a luminal artifact")]:
        (out / "manifest.json").write_text(json.dumps({**manifest, **patch, "model": {"sha256": None}}))
        with pytest.raises(LuminalError, match=msg):
            InferenceSession(out)
    bad = json.loads(json.dumps(manifest))
    bad["model"] = {"sha256": None}
    bad["kernels"][0]["signature"] = "0" * len(bad["kernels"][0]["signature"])  # another build's identities
    (out / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(LuminalError, match=r"recorded signature.*recompile"):
        InferenceSession(out)
    bad = json.loads(json.dumps(manifest))
    bad["model"] = {"sha256": None}
    bad["kernels"][0]["ir"]["full"][0] += 1
    (out / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(LuminalError, match=r"signature|malformed"):
        InferenceSession(out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LuminalError, match="not a luminal artifact"):
        InferenceSession(tmp_path / "empty")


def test_buffer_plan_reuses_memory():
    # a chain a -> b -> c -> d: a and c can share, b and d can share
    launches = [([], [(1, 1000)]), ([1], [(2, 1000)]), ([2], [(3, 1000)]), ([3], [(4, 1000)]), ([4], [(5, 4)])]
    p = plan_buffers(launches, keep={5})
    assert p.naive_bytes == 4000 and p.arena_bytes == 2 * 1024
    for a in p.slots.values():
        for b in p.slots.values():
            if a is not b and not (a.last < b.first or b.last < a.first):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


@pytest.mark.parametrize("build", [transformer_layer, small_cnn])
def test_sample_graphs_end_to_end(build):
    g = build()
    m = compile_graph(g, "interpret")
    x = np.random.default_rng(0).standard_normal(g.inputs[0].shape).astype(np.float32)
    got, = m.run({g.inputs[0].attrs["name"]: x})
    want, = run_reference(g, {g.inputs[0].attrs["name"]: x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert m.planned_bytes <= m.intermediate_bytes + 256 * len(m.plan.slots)
    if build is transformer_layer:
        assert len(m.kernels) <= 10


def test_cache_schedules_used(tmp_path):
    from luminal.cache import TuningCache, backend_fingerprints
    from luminal.codegen.backend import get_backend
    from luminal.codegen.partition import partition

    a = Tensor.input("a", (20, 48), DType.float32)
    b = Tensor.input("b", (48, 24), DType.float32)
    g = optimize(Graph([a.node, b.node], [a.matmul(b).contiguous().node, a.softmax(-1).contiguous().node],
                       ["y", "s"]))
    kernels = partition(g)
    mm = next(k for k in kernels if k.form == "contraction")
    tuned = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 2, "num_stages": 2,
             "SPLIT_K": 2, "PRECISION": "ieee"}
    with TuningCache(tmp_path / "t.db") as c:
        c.set_winner(mm.signature, *backend_fingerprints(get_backend("interpret")), tuned, 1000)
    with TuningCache(tmp_path / "t.db", readonly=True) as c:
        m = compile_graph(g, "interpret", cache=c)
    assert (m.stats.cache_hits, m.stats.cache_misses) == (1, len(kernels) - 1)
    assert m.schedules[m.kernels.index(next(k for k in m.kernels if k.form == "contraction"))] == tuned
    feeds = {"a": np.random.default_rng(0).standard_normal((20, 48)).astype(np.float32),
             "b": np.random.default_rng(1).standard_normal((48, 24)).astype(np.float32)}
    for x, y in zip(m.run(feeds), run_reference(g, feeds)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_kernel_table_transformer_layer():
    from luminal.runtime.report import kernel_table

    rows = kernel_table(transformer_layer())
    assert 1 <= len(rows) <= 10
    assert {r["form"] for r in rows} >= {"contraction", "reduction"}
    assert all(r["bytes"] > 0 and r["flops"] > 0 and r["fused"] >= 1 for r in rows)
    mm = next(r for r in rows if r["form"] == "contraction")
    assert mm["primitives"]["SumReduce"] == 1 and mm["primitives"]["Mul"] >= 1


def test_compile_uses_the_tuned_fusion_decisions(tmp_path):
    from luminal.cache import TuningCache, backend_fingerprints
    from luminal.codegen.backend import get_backend
    from luminal.codegen.partition import fusible_edges, fusion_key

    x = Tensor.input("x", (6, 10), DType.float32)
    g = optimize(Graph([x.node], [x.exp().add(1.0).softmax(-1).contiguous().node], ["y"]))
    backend = get_backend("cpu")
    unfused = [list(e) for e in fusible_edges(g)]
    with TuningCache(tmp_path / "t.db") as c:
        c.set_winner(fusion_key(g), *backend_fingerprints(backend), {"unfused": unfused}, 1000)
    with TuningCache(tmp_path / "t.db", readonly=True) as c:
        tuned = compile_graph(g, backend, cache=c)
    default = compile_graph(g, backend)
    assert len(tuned.kernels) > len(default.kernels)
    xv = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    np.testing.assert_allclose(tuned.run({"x": xv})[0], default.run({"x": xv})[0], rtol=1e-6)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_constant_outputs_and_masked_scalar_constants(backend):
    """Graph outputs that are constants (0-d too) come back in their shape; a scalar constant read
    through a pad mask is a kernel input like any weight."""
    x = Tensor.input("x", (4, 4), DType.float32)
    c0, c1 = Tensor.const(np.float32(3.0)), Tensor.const(np.arange(4.0, dtype=np.float32))
    g = optimize(Graph([x.node], [x.exp().pad(((1, 1), (1, 1)), value=1.0).contiguous().node, c0.node, c1.node],
                       ["y", "c0", "c1"]))
    m = compile_graph(g, backend)
    xv = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    want = run_reference(g, {"x": xv})
    for _ in range(2):
        got = m.run({"x": xv})
        assert [a.shape for a in got] == [(6, 6), (), (4,)]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def test_artifact_weights_must_match_their_kernels(model_path, tmp_path):
    compiled = compile_model(model_path, {"batch": 2}, "interpret")
    out = write_artifact(compiled, tmp_path / "art", model_path, {"batch": 2})
    with np.load(out / "weights.npz") as z:
        weights = {k: z[k] for k in z.files}
    big = max(weights, key=lambda k: weights[k].size)
    weights[big] = weights[big][:1]  # truncated: a kernel would read past its end
    np.savez(out / "weights.npz", **weights)
    with pytest.raises(LuminalError, match="malformed"):
        InferenceSession(out)


def test_a_winner_tuned_before_a_knob_existed_still_applies(tmp_path):
    """A cache outlives the knobs of its time: a winner without a knob added since takes that knob's default."""
    from luminal.cache import TuningCache, backend_fingerprints
    from luminal.codegen.backend import get_backend
    from luminal.codegen.partition import partition

    a = Tensor.input("a", (20, 48), DType.float32)
    w = Tensor.const(np.random.default_rng(3).standard_normal((48, 24)).astype(np.float32))
    g = optimize(Graph([a.node], [a.matmul(w).contiguous().node], ["y"]))
    (mm,) = [k for k in partition(g) if k.form == "contraction"]
    be = get_backend("cpu")
    vw = host_simd_width()
    old = {k: v for k, v in {**be.default_schedule(mm), "mr": 4, "nr": vw}.items() if k != "lanes"}
    with TuningCache(tmp_path / "t.db") as c:
        c.set_winner(mm.signature, *backend_fingerprints(be), old, 1000)
    with TuningCache(tmp_path / "t.db", readonly=True) as c:
        m = compile_graph(g, "cpu", cache=c)
    assert m.stats.cache_hits == 1 and m.stats.invalid_schedules == 0
    assert m.schedules[0]["mr"] == 4 and m.schedules[0]["lanes"] == 64
