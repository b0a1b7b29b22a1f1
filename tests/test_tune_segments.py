"""tune of a model cut by the data: its static segments are tuned at the sizes a seeded run gives them, and a later
session's segments take the winners from the tuning cache."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import search_util as helpers
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cache import TuningCache
from luminal.codegen import backend as backends
from luminal.runtime.session import InferenceSession
from luminal.search.tuner import tune


def _cut_model(path):
    """x [n, 4] -> MatMul -> h; NonZero over h's row sums of |h| + 1 (all n rows: the count is the data's to say, the
    sizes stay known) -> Gather of h's rows -> MatMul -> y [n, 3]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.float32(1), "one"), numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Abs", ["h"], ["a"]),
             helper.make_node("Add", ["a", "one"], ["b"]),
             helper.make_node("ReduceSum", ["b", "ax1"], ["s"], keepdims=0),
             helper.make_node("NonZero", ["s"], ["nz"]), helper.make_node("Reshape", ["nz", "flat"], ["idx"]),
             helper.make_node("Gather", ["h", "idx"], ["g"], axis=0), helper.make_node("MatMul", ["g", "w2"], ["y"])]
    g = helper.make_graph(nodes, "cut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_tune_of_a_cut_model_serves_the_sessions_segments(tmp_path, monkeypatch):
    model, db = _cut_model(tmp_path / "cut.onnx"), tmp_path / "tuning.db"
    fake = helpers.FakeBackend(modes=("ok",), speeds=(1, 8), virtual=True)
    report = tune(model, fake, 300, shapes={"n": 5}, cache=db, storage=f"sqlite:///{tmp_path / 'studies.db'}",
                  sampler="grid", workers=1, fusion=False, timeout_s=5.0, plan=helpers.PLAN)
    assert report.stopped == "exhausted" and "static segments" in report.notes[0]
    tuned = {k.signature for k in report.kernels}

    monkeypatch.setitem(backends._BACKENDS, "fake", lambda target: fake)
    sess = InferenceSession(model, backend="fake", cache=db)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    (want,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    stats = sess.compile_stats
    assert len(stats) == 2  # the segment before the NonZero and the one after it
    assert all(s.cache_hits == s.kernels > 0 and s.cache_misses == 0 for s in stats), stats
    with TuningCache(db) as cache:
        winners = {sig for sig in tuned if cache.best(sig, *_keys(fake)) is not None}
    assert winners == tuned and len(tuned) == sum(s.kernels for s in stats)


def _keys(backend):
    from luminal.cache import backend_fingerprints

    return backend_fingerprints(backend)


def test_cli_tunes_a_cut_model_at_the_sizes_given(tmp_path):
    from luminal.cli import tune_cmd

    model = _cut_model(tmp_path / "cut.onnx")
    r = invoke(tune_cmd, args=["tune", str(model), "--backend", "cpu", "--shape", "n=6", "--budget", "6s",
                               "--trials", "4", "--no-fusion", "--cache", str(tmp_path / "c.db"), "--storage",
                               f"sqlite:///{tmp_path / 's.db'}", "--json", "-"])
    assert r.exit_code == 0, r.output
    (m,) = json.loads(r.output[r.output.index("{"):])["models"]
    assert m["model"] == "cut.onnx" and "static segments" in m["notes"][0]
    forms = [k["form"] for k in m["kernels"]]
    assert forms.count("contraction") == 2, forms  # a MatMul on either side of the NonZero
