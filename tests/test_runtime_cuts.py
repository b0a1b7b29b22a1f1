"""Ops whose output's size depends on the data: the session cuts the graph there, runs the op on the host and
compiles the next segment for the sizes that come out. Each against onnxruntime, empty results included."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from luminal.errors import LuminalError
from luminal.runtime.compile import compile_model
from luminal.runtime.session import InferenceSession

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _save(tmp_path, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o) if isinstance(o, str) else o
                                               for o in outputs], list(inits))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _positives(prefix=()):
    """count = number of x > 0 (a value only the run knows), as an int64 [1]."""
    return [*prefix, helper.make_node("Greater", ["x", "zero"], ["pos"]),
            helper.make_node("Cast", ["pos"], ["posi"], to=I64),
            helper.make_node("ReduceSum", ["posi", "axis0"], ["count"], keepdims=1)]


BASE = [_const("zero", np.float32(0)), _const("axis0", np.array([0], np.int64))]
X = helper.make_tensor_value_info("x", F, ["n"])


def case_nonzero(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("NonZero", ["pos"], ["nz"]),
             helper.make_node("Reshape", ["nz", "m1"], ["idx"]), helper.make_node("Gather", ["x", "idx"], ["g"]),
             helper.make_node("Mul", ["g", "g"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y", "nz"], [*BASE, _const("m1", np.array([-1], np.int64))])


def case_compress(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("Compress", ["x", "pos"], ["c"], axis=0), helper.make_node("Exp", ["c"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], BASE)


def case_unique(tmp_path):
    nodes = [helper.make_node("Floor", ["x"], ["f"]),
             helper.make_node("Unique", ["f"], ["u", "i", "inv", "cnt"], sorted=1),
             helper.make_node("Add", ["u", "u"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y", "i", "inv", "cnt"], BASE)


def case_topk(tmp_path):
    nodes = [*_positives(), helper.make_node("TopK", ["x", "count"], ["v", "k"]),
             helper.make_node("Neg", ["v"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y", "k"], BASE)


def case_range(tmp_path):
    nodes = [*_positives(), helper.make_node("Squeeze", ["count"], ["c0"]),
             helper.make_node("Range", ["start", "c0", "one"], ["r"]), helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Mul", ["rf", "rf"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], [*BASE, _const("start", np.int64(0)), _const("one", np.int64(1))])


def case_constant_of_shape_and_expand(tmp_path):
    nodes = [*_positives(), helper.make_node("ConstantOfShape", ["count"], ["z"],
                                             value=helper.make_tensor("v", F, [1], [3.0])),
             helper.make_node("Concat", ["count", "one"], ["shape"], axis=0),
             helper.make_node("Expand", ["x1", "shape"], ["e"]), helper.make_node("Reshape", ["e", "count"], ["er"]),
             helper.make_node("Add", ["z", "er"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], [*BASE, _const("one", np.array([1], np.int64)),
                                               _const("x1", np.array([[2.0]], np.float32))])


def case_slice(tmp_path):
    nodes = [*_positives(), helper.make_node("Slice", ["x", "axis0", "count"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], BASE)


CASES = [case_nonzero, case_compress, case_unique, case_topk, case_range, case_constant_of_shape_and_expand,
         case_slice]
INPUTS = [np.array([1.5, -2.0, 3.25, 4.0, 1.5], np.float32), np.array([-1.0, -2.0, -0.5], np.float32),
          np.array([0.5, 2.5, -3.0, 7.0, 0.5, 2.5, 9.0, -1.0], np.float32), np.array([1.5, -2.0, 3.25, 4.0, 1.5],
                                                                                     np.float32)]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__[5:])
def test_cut_op_matches_onnxruntime(tmp_path, make):
    path = make(tmp_path)
    sess = InferenceSession(path, backend="interpret", variants=64)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for x in INPUTS:  # the second gives empty results (no positives)
        got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert sess.variant_stats.hits >= 2  # the last input repeats the first's sizes: every part reused


def test_a_run_of_more_segments_than_variants_kept_is_reused_whole(tmp_path):
    """Twelve cuts in one run (a detector's per-class NonZero and TopK), the default 8 variants kept: the cache
    grows to hold the run's segments, so the same input again compiles nothing."""
    nodes, prev = [], "x"
    for c in range(12):
        nodes += [helper.make_node("Greater", [prev, "zero"], [f"p{c}"]),
                  helper.make_node("NonZero", [f"p{c}"], [f"nz{c}"]),
                  helper.make_node("Reshape", [f"nz{c}", "m1"], [f"i{c}"]),
                  helper.make_node("Gather", [prev, f"i{c}"], [f"g{c}"]),
                  helper.make_node("Sub", [f"g{c}", "one"], [f"s{c}"])]
        prev = f"s{c}"
    path = _save(tmp_path, nodes, [X], [prev], [*BASE, _const("m1", np.array([-1], np.int64)),
                                                _const("one", np.float32(0.5))])
    sess = InferenceSession(path, backend="interpret")
    x = np.linspace(-1, 8, 40).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6)
    stats = sess.variant_stats
    assert stats.misses == 13 and stats.evictions == 0 and stats.hits == 13


def test_static_compile_refuses_a_cut_in_one_line(tmp_path):
    with pytest.raises(LuminalError, match=r"^node 'NonZero'|^node .*NonZero.* computed at run time|NonZero"):
        compile_model(case_nonzero(tmp_path), {"n": 4}, "interpret")


def _nms_model(tmp_path, boxes: int):
    """A detector's tail: boxes [1, N, 4] and scores [1, 1, N] -> NonMaxSuppression -> the kept boxes, scaled."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxout", "iou", "thr"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["which"], axis=1),
             helper.make_node("Squeeze", ["boxes", "axis0"], ["b2"]),
             helper.make_node("Gather", ["b2", "which"], ["kept"], axis=0),
             helper.make_node("Mul", ["kept", "scale"], ["out"])]
    ins = [helper.make_tensor_value_info("boxes", F, [1, "n", 4]),
           helper.make_tensor_value_info("scores", F, [1, 1, "n"])]
    inits = [_const("maxout", np.array([10], np.int64)), _const("iou", np.array([0.5], np.float32)),
             _const("thr", np.array([0.3], np.float32)), _const("two", np.int64(2)),
             _const("axis0", np.array([0], np.int64)), _const("scale", np.float32(2.0))]
    return _save(tmp_path, nodes, ins, ["out", "sel"], inits)


def test_non_max_suppression_matches_onnxruntime_including_no_boxes(tmp_path):
    path = _nms_model(tmp_path, 6)
    sess = InferenceSession(path, backend="interpret")
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n, low in [(6, 0.0), (9, 0.0), (6, 0.0), (5, -1.0)]:
        xy = rng.uniform(0, 10, (1, n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + rng.uniform(1, 4, (1, n, 2)).astype(np.float32)], axis=2)
        scores = rng.uniform(0, 1, (1, 1, n)).astype(np.float32) if low == 0 else np.full((1, 1, n), 0.1, np.float32)
        feed = {"boxes": boxes, "scores": scores}
        got, want = sess.run(None, feed), ref.run(None, feed)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert got[1].shape == (0, 3)  # the last: every score under the threshold, no boxes


def test_constant_inputs_fold_at_import(tmp_path):
    """NonMaxSuppression on constants needs no run: the import folds it and the model compiles statically."""
    nodes = [helper.make_node("NonMaxSuppression", ["b", "s", "maxout"], ["sel"]),
             helper.make_node("Cast", ["sel"], ["self"], to=F), helper.make_node("Add", ["self", "x"], ["y"])]
    inits = [_const("b", np.array([[[0, 0, 1, 1], [0, 0, 1, 1.1], [5, 5, 6, 6]]], np.float32)),
             _const("s", np.array([[[0.9, 0.8, 0.7]]], np.float32)), _const("maxout", np.array([5], np.int64))]
    path = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", F, [1])], ["y"], inits)
    model = compile_model(path, None, "interpret")
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones(1, np.float32)})
    np.testing.assert_allclose(model.run({"x": np.ones(1, np.float32)})[0], want[0])


def test_loop_with_a_trip_count_from_the_data_runs_on_the_host(tmp_path):
    """Loop(n = number of x > 0): y doubles n times; the trip count is known only when the run has x."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "acc"], ["acc2"]),
                              helper.make_node("Identity", ["cond"], ["cond2"])], "body",
                             [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", 9, []),
                              helper.make_tensor_value_info("acc", F, ["n"])],
                             [helper.make_tensor_value_info("cond2", 9, []), helper.make_tensor_value_info("acc2", F,
                                                                                                           ["n"])])
    nodes = [*_positives(), helper.make_node("Squeeze", ["count"], ["trip"]),
             helper.make_node("Loop", ["trip", "", "x"], ["looped"], body=body),
             helper.make_node("Neg", ["looped"], ["y"])]
    path = _save(tmp_path, nodes, [X], ["y"], BASE)
    sess, ref = InferenceSession(path, backend="interpret"), ort.InferenceSession(str(path),
                                                                                 providers=["CPUExecutionProvider"])
    for x in INPUTS[:3]:
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6)


def test_if_whose_branches_differ_in_shape_runs_on_the_host(tmp_path):
    then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0), helper.make_node("Greater", ["m", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["branch"], then_branch=then, else_branch=other),
             helper.make_node("Relu", ["branch"], ["y"])]
    path = _save(tmp_path, nodes, [X], ["y"], BASE)
    sess, ref = InferenceSession(path, backend="interpret"), ort.InferenceSession(str(path),
                                                                                 providers=["CPUExecutionProvider"])
    for x in INPUTS[:2]:  # the first takes the then branch (twice as long), the second the other
        got, want = sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want)


def test_a_model_cut_by_the_data_runs_from_several_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    path = case_nonzero(tmp_path)
    sess = InferenceSession(path, backend="cpu", variants=64)  # C kernels: the Triton interpreter is not thread-safe
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    xs = [np.random.default_rng(i).standard_normal(3 + i % 4).astype(np.float32) for i in range(24)]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda x: sess.run(None, {"x": x}), xs))
    for x, got in zip(xs, results):
        for g, w in zip(got, ref.run(None, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=1e-6)


# -- sequences crossing a cut ---------------------------------------------------------------

def case_sequence_across_a_cut(tmp_path):
    """A sequence made before the cut (SplitToSequence of x) and read after it (ConcatFromSequence)."""
    nodes = [helper.make_node("SplitToSequence", ["x2"], ["s"], axis=0, keepdims=0),
             *_positives(), helper.make_node("TopK", ["x", "count"], ["v", "k"]),
             helper.make_node("ReduceSum", ["v"], ["t"], keepdims=0),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0), helper.make_node("Add", ["c", "t"], ["y"])]
    return _save(tmp_path, [helper.make_node("Unsqueeze", ["x", "axis0"], ["x1"]),
                            helper.make_node("Concat", ["x1", "x1"], ["x2"], axis=0), *nodes], [X], ["y"], BASE)


def case_sequence_read_by_a_host_step(tmp_path):
    """SequenceAt at a position the data decides runs on the host, reading a sequence a segment made."""
    nodes = [helper.make_node("Unsqueeze", ["x", "axis0"], ["x1"]), helper.make_node("Neg", ["x1"], ["xn"]),
             helper.make_node("Concat", ["x1", "xn"], ["x2"], axis=0),
             helper.make_node("SplitToSequence", ["x2"], ["s"], axis=0, keepdims=1),
             helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0), helper.make_node("Greater", ["t", "zero"], ["g"]),
             helper.make_node("Cast", ["g"], ["i"], to=I64), helper.make_node("SequenceAt", ["s", "i"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], BASE)


def case_sequence_made_by_a_host_step(tmp_path):
    """SplitToSequence with split sizes from the data runs on the host; the next segment reads its sequence."""
    nodes = [*_positives(), helper.make_node("Shape", ["x"], ["n"]), helper.make_node("Sub", ["n", "count"], ["rest"]),
             helper.make_node("Concat", ["count", "rest"], ["split"], axis=0),
             helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=0),
             helper.make_node("SequenceAt", ["s", "zi"], ["first"]),
             helper.make_node("SequenceAt", ["s", "onei"], ["sec"]),
             helper.make_node("ReduceSum", ["first", "axis0"], ["f"], keepdims=1),
             helper.make_node("Exp", ["sec"], ["e"]), helper.make_node("Add", ["e", "f"], ["y"])]
    return _save(tmp_path, nodes, [X], ["y"], [*BASE, _const("zi", np.int64(0)), _const("onei", np.int64(1))])


def case_empty_sequence_across_a_cut(tmp_path):
    """An empty sequence made before the cut; after it, x's positives inserted and concatenated."""
    nodes = [helper.make_node("SequenceEmpty", [], ["s"], dtype=F),
             helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("Compress", ["x", "pos"], ["c"], axis=0),
             helper.make_node("SequenceInsert", ["s", "c"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "c"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)]
    return _save(tmp_path, nodes, [X], ["y"], BASE)


@pytest.mark.parametrize("make", [case_sequence_across_a_cut, case_sequence_read_by_a_host_step,
                                  case_sequence_made_by_a_host_step, case_empty_sequence_across_a_cut],
                         ids=lambda f: f.__name__[5:])
@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_sequences_cross_cuts_and_host_steps(tmp_path, make, backend):
    path = make(tmp_path)
    sess = InferenceSession(path, backend=backend)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for x in INPUTS:
        got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_sequence_output_of_a_cut_model_is_refused_in_one_line(tmp_path):
    nodes = [*_positives(), helper.make_node("SplitToSequence", ["x", "count"], ["s"], axis=0)]
    path = _save(tmp_path, nodes, [X], [helper.make_tensor_sequence_value_info("s", F, None)], BASE)
    sess = InferenceSession(path, backend="interpret")
    with pytest.raises(LuminalError, match="graph output 's' is a sequence"):
        sess.run(None, {"x": INPUTS[0]})


@pytest.mark.parametrize("seed", range(6))
def test_host_non_max_suppression_is_the_references(seed):
    """The host's NonMaxSuppression (numpy, each kept box suppressing at once) against onnx's reference op on
    random batches: both box encodings, corners in either order, empty boxes, tied and equal scores, thresholds
    given or absent, a limit per class that cuts."""
    from frontend_util import make_model
    from onnx.reference import ReferenceEvaluator

    from luminal.frontend_onnx.host import HostNode, _with_absent

    rng = np.random.default_rng(seed)
    nb, nc, n = 1 + seed % 2, 1 + seed % 3, 40 + 17 * seed
    boxes = rng.uniform(0, 10, (nb, n, 4)).astype(np.float32)
    boxes[:, ::7, 2] = boxes[:, ::7, 0]  # empty boxes
    scores = rng.integers(0, 6, (nb, nc, n)).astype(np.float32) / 5  # many ties
    named = ["boxes", "scores", "maxout", "iou", "thr"][:3 + seed % 3]
    node = helper.make_node("NonMaxSuppression", named, ["sel"], center_point_box=seed % 2)
    feeds = {"boxes": boxes, "scores": scores, "maxout": np.array([3 + 4 * seed], np.int64),
             "iou": np.array([0.1 * (1 + seed % 5)], np.float32), "thr": np.array([0.3], np.float32)}
    feeds = {k: v for k, v in feeds.items() if k in named}
    got = HostNode(node, {"": 17}, {}).run(feeds)["sel"]
    filled, absent = _with_absent(node)  # the reference op reads an absent threshold from an empty array
    full = {**feeds, **absent}
    want = ReferenceEvaluator(make_model(filled, full)).run(None, full)[0]
    assert got.shape[0] > 0
    np.testing.assert_array_equal(got, want)
