"""Sessions on models with symbolic dims: compiled for the sizes each run shows, variants kept (least recently used
dropped), reused, and safe from several threads; feeds whose sizes disagree refused in one line."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from runtime_util import make_model

from luminal.errors import LuminalError
from luminal.runtime.compile import compile_model
from luminal.runtime.session import InferenceSession
from luminal.runtime.variants import VariantCache


@pytest.fixture
def model_path(tmp_path):
    return make_model(tmp_path / "m.onnx")


def _ref(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _x(batch, seed=0):
    return np.random.default_rng(seed + batch).standard_normal((batch, 8)).astype(np.float32)


def test_no_shapes_needed_and_inputs_described_as_onnxruntime_does(model_path):
    sess = InferenceSession(model_path, backend="interpret")
    ref = _ref(model_path)
    mine = [(a.name, a.shape, a.type) for a in sess.get_inputs() + sess.get_outputs()]
    theirs = [(a.name, a.shape, a.type) for a in ref.get_inputs() + ref.get_outputs()]
    assert mine == theirs == [("x", ["batch", 8], "tensor(float)"), ("probs", ["batch", 12], "tensor(float)"),
                              ("peak", ["batch"], "tensor(float)")]


@pytest.mark.parametrize("which", ["input", "output"])
def test_an_element_type_onnx_does_not_define_is_refused_when_the_session_is_made(model_path, which):
    """A model with dynamic dims compiles at its first run; an input declared of element type 99 failed inside the
    feed check with a KeyError, now the session refuses the model with the name."""
    m = onnx.load(str(model_path))
    (m.graph.input if which == "input" else m.graph.output)[0].type.tensor_type.elem_type = 99
    onnx.save(m, str(model_path))
    with pytest.raises(LuminalError, match="declares element type 99, which ONNX does not define"):
        InferenceSession(model_path, backend="interpret")


def test_each_size_compiles_once_and_is_reused(model_path):
    sess, ref = InferenceSession(model_path, backend="interpret"), _ref(model_path)
    for batch in (2, 5, 2, 5, 1):
        x = _x(batch)
        for got, want in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    st = sess.variant_stats
    assert (st.misses, st.hits, st.evictions) == (3, 2, 0)


def test_least_recently_used_variant_is_dropped(model_path):
    sess = InferenceSession(model_path, backend="interpret", variants=2)
    for batch in (1, 2, 1, 3):  # 3 drops 2 (1 was used after it)
        sess.run(None, {"x": _x(batch)})
    assert sess.variant_stats.evictions == 1
    sess.run(None, {"x": _x(1)})
    assert sess.variant_stats.hits == 2  # 1 was kept
    sess.run(None, {"x": _x(2)})
    assert sess.variant_stats.misses == 4  # 2 was not


def test_runs_from_several_threads(model_path):
    # the C kernels (the Triton interpreter is not thread-safe)
    sess, ref = InferenceSession(model_path, backend="cpu", variants=4), _ref(model_path)
    batches = [1 + i % 3 for i in range(24)]
    start = threading.Barrier(6)

    def one(i):
        if i < 6:
            start.wait()  # the first runs of every size at once: each variant is still made once
        x = _x(batches[i], seed=i)
        return x, sess.run(None, {"x": x})

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(len(batches))))
    for x, got in results:
        for g, w in zip(got, ref.run(None, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    st = sess.variant_stats
    assert st.misses == 3 and st.hits == len(batches) - 3


def test_variant_cache_makes_a_key_once_under_contention():
    cache: VariantCache[int] = VariantCache(2)
    made = []
    lock = threading.Lock()

    def make():
        with lock:
            made.append(1)
        return 7

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(lambda _: cache.get("k", make), range(32))) == {7}
    assert len(made) == 1
    with pytest.raises(LuminalError, match="at least 1"):
        VariantCache(0)


def _two_inputs(tmp_path):
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_inconsistent_shapes_are_refused_in_one_line(tmp_path, model_path):
    sess = InferenceSession(_two_inputs(tmp_path), backend="interpret")
    a = np.ones((2, 3), np.float32)
    with pytest.raises(LuminalError, match=r"input 'b' dim 1 is dimension 'seq' = 4, but input 'a' dim 1 makes it 3"):
        sess.run(None, {"a": a, "b": np.ones((2, 4), np.float32)})
    with pytest.raises(LuminalError, match=r"input 'a': expected rank 2"):
        sess.run(None, {"a": np.ones(3, np.float32), "b": a})
    fixed = InferenceSession(model_path, backend="interpret")
    with pytest.raises(LuminalError, match=r"input 'x' dim 1: expected 8"):
        fixed.run(None, {"x": np.ones((2, 7), np.float32)})
    assert fixed.variant_stats.misses == 0  # refused before anything compiled


def test_shapes_given_compile_now_and_bind_the_runs(model_path):
    sess = InferenceSession(model_path, backend="interpret", shapes={"batch": 3})
    assert sess.get_inputs()[0].shape == [3, 8] and sess.variant_stats.misses == 1
    assert len(sess.model.kernels) > 0
    with pytest.raises(LuminalError, match="expected 3"):
        sess.run(None, {"x": _x(2)})
    with pytest.raises(LuminalError, match=r"neither an input nor a dimension name .*known: 'batch', 'x'"):
        InferenceSession(model_path, backend="interpret", shapes={"seq": 3})


def test_errors_speak_python_not_the_command_line(model_path):
    with pytest.raises(LuminalError) as e:
        compile_model(model_path, None, "interpret")
    assert "batch" in str(e.value) and "shapes=" in str(e.value) and "--shape" not in str(e.value)
    sess = InferenceSession(model_path, backend="interpret")
    with pytest.raises(LuminalError) as e:
        _ = sess.model
    assert "--shape" not in str(e.value)


def test_text_model_at_several_sequence_lengths():
    path = Path(__file__).resolve().parent.parent / "examples" / "models" / "bert-small-torchscript.onnx"
    sess, ref = InferenceSession(path, backend="cpu"), _ref(path)
    assert [i.shape for i in sess.get_inputs()] == [["batch", "seq"]] * 3
    rng = np.random.default_rng(0)
    for seq in (5, 12):
        feed = {i.name: rng.integers(0, 2, (1, seq)).astype(np.int64) for i in ref.get_inputs()}
        for got, want in zip(sess.run(None, feed), ref.run(None, feed)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_every_variant_takes_the_tuning_caches_winners(model_path, tmp_path):
    """A winner stored for the kernels at batch 3 serves the variant a session compiles at batch 3 (in a thread other
    than the one that made the session), and not the one at batch 2, whose kernels have other signatures."""
    from luminal.cache import TuningCache, backend_fingerprints
    from luminal.codegen.backend import get_backend
    from luminal.frontend_onnx.loader import Unbound, load_model
    from luminal.runtime.compile import compile_graph

    be = get_backend("cpu")
    at3 = compile_graph(load_model(model_path, {"batch": 3}, Unbound.REFUSE).graph, be)
    with TuningCache(tmp_path / "t.db") as c:
        for k, s in zip(at3.kernels, at3.schedules):
            c.set_winner(k.signature, *backend_fingerprints(be), s, 1000)
    sess = InferenceSession(model_path, backend="cpu", cache=tmp_path / "t.db")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(sess.run, None, {"x": _x(3)}).result()
    assert sess.model.stats.cache_hits == len(at3.kernels) > 0
    sess.run(None, {"x": _x(2)})
    assert sess.model.stats.cache_hits == 0 and sess.model.stats.cache_misses > 0
