"""Pooling reductions as stencils (the taps of the input alone, read in place, padding from the view's masks):
MaxPool and AveragePool through the ONNX frontend, by default and with the reduction's loops, against the
reference executor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from codegen_util import compare_cpu, graph
from onnx import TensorProto, helper

from luminal.codegen.c import schedule, stencil
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.stencil import plan_stencil
from luminal.codegen.kernel import REDUCE_OPS
from luminal.codegen.partition import partition
from luminal.frontend_onnx import load
from luminal.frontend_onnx.ops_nn_util import windows
from luminal.ir import DType, Op, Tensor

RNG = np.random.default_rng(29)


def _model(op: str, shape: tuple[int, ...], **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _source(op: str, shape: tuple[int, ...], **attrs) -> str:
    (k,) = [k for k in partition(load(_model(op, shape, **attrs)).graph, {}) if plan_stencil(k) is not None]
    be = CPUBackend()
    return be.source(k, be.default_schedule(k))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("shape,k,s,pads,span", [
    ((1, 4, 9, 111), 3, 2, (1, 1, 1, 1), 113),
    ((1, 4, 9, 27), 3, 1, (1, 1, 1, 1), 29),
    ((1, 4, 9, 7), 3, 1, (1, 1, 1, 1), 9),
    ((1, 4, 9, 16), 5, 1, (2, 2, 2, 2), 20),
    ((1, 4, 9, 111), 2, 2, (0, 0, 0, 0), 110),  # windows side by side, not overlapping
])
def test_a_pool_is_separable_where_its_windows_overlap(op, shape, k, s, pads, span):
    """By default a pool is separable where its windows overlap along the row: a max always, an average where
    its rows span at least SUM_SPAN vectors of input columns (at a stride, more than STRIDED_SUM_SPAN)."""
    vw = schedule.simd_width()
    wide = op == "MaxPool" or (span >= stencil.SUM_SPAN * vw if s == 1 else span > stencil.STRIDED_SUM_SPAN * vw)
    assert ("lum_col[" in _source(op, shape, **_attrs(k, s, pads, 1, 0))) == (wide and k > s)


def _impls(be: CPUBackend, k) -> list[dict]:
    """The kernel's default schedule with each of the stencil's forms (a separable one where the pool is)."""
    base = be.default_schedule(k)
    forms = next(kn.choices for kn in be.space(k) if kn.name == "impl")
    return [{**base, "impl": f} for f in forms if f != "loops"]


def _check(op: str, shape: tuple[int, ...], x: np.ndarray | None = None, **attrs) -> None:
    """The pool's reduction is a stencil by default, and that, on one thread, and the reduction's loops agree
    with the reference."""
    g = load(_model(op, shape, **attrs)).graph
    ks = partition(g, {})
    reds = [k for k in ks if any(o.op in REDUCE_OPS for o in k.ops)]
    assert len(reds) == 1
    k = reds[0]
    assert plan_stencil(k) is not None
    be = CPUBackend()
    base = be.default_schedule(k)
    # windows that overlap along the row (undilated, wider than the stride, over 2-D maps) may share each
    # column's reduction over the window's rows (a separable pool)
    ks_, ss_ = attrs["kernel_shape"], attrs["strides"]
    overlap = len(ks_) == 2 and attrs.get("dilations", [1])[0] == 1 and ks_[-1] > ss_[-1]
    # a window of more taps than a row unrolls is a stencil only where separable (and is so by default)
    unrolled = math.prod(ks_) <= stencil.WINDOW_TAPS_MAX
    assert next(kn.choices for kn in be.space(k) if kn.name == "impl") == \
        ("loops", *(["stencil"] if unrolled else []), *(["separable"] if overlap else []))
    assert base["impl"] in (("stencil", "separable") if unrolled else ("separable",))
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32) if x is None else x}
    forms = _impls(be, k)
    assert [("lum_col[" in be.source(k, f)) for f in forms] == [*([False] if unrolled else []),
                                                                  *([True] if overlap else [])]
    scheds = [*forms, *[{**f, "threads": 1} for f in forms], {**base, "impl": "loops"},
              {**base, "impl": "loops", "lanes": 0}]
    for s in scheds:
        if s.get("lanes") == 0 and "lanes" not in base:
            continue
        assert be.valid(k, s), s
        compare_cpu(g, feeds, 1e-6, 1e-6, schedules=[s if kk is k else None for kk in ks], kernels=ks)


CASES = [
    # (shape, kernel, strides, pads, dilations, ceil_mode)
    ((1, 16, 28, 28), 3, 1, (1, 1, 1, 1), 1, 0),        # rows wider than a vector, stride 1
    ((1, 8, 56, 56), 3, 2, (1, 1, 1, 1), 1, 0),         # stride 2
    ((2, 5, 9, 11), 3, 2, (1, 1, 1, 1), 1, 0),          # odd sizes, batch 2
    ((1, 7, 13, 37), 3, 2, (0, 1, 1, 0), 1, 0),         # asymmetric pads
    ((1, 3, 12, 21), 2, 2, (0, 0, 0, 0), 1, 0),         # 2x2 stride 2, no padding: no masks
    ((1, 4, 10, 80), 2, 2, (0, 0, 0, 0), 1, 0),         # 2x2 stride 2, rows of 40: whole vectors
    ((1, 6, 10, 21), 3, 1, (2, 2, 2, 2), 2, 0),         # dilation 2
    ((1, 3, 8, 9), 5, 1, (2, 2, 2, 2), 1, 0),           # 5x5, a row narrower than a vector
    ((1, 20, 7, 7), 3, 1, (1, 1, 1, 1), 1, 0),          # a 7x7 map
    ((1, 19, 14, 14), 3, 2, (0, 0, 0, 0), 1, 1),        # ceil_mode: the last window runs past the input
    ((1, 5, 17, 40), 5, 1, (0, 2, 2, 1), 1, 1),         # 5x5, asymmetric pads, ceil_mode at stride 1
    ((2, 3, 11, 35), 3, 2, (2, 1, 1, 2), 2, 1),         # stride 2, dilation 2, ceil_mode
    ((1, 6, 20, 20), 9, 1, (4, 4, 4, 4), 1, 0),         # an SPP block's 9x9 and 13x13 at stride 1 (YOLO): 81 taps
    ((1, 5, 13, 19), 13, 1, (6, 5, 6, 7), 1, 0),        # unrolled, 169 only separable; asymmetric pads
]


def _attrs(k: int, s: int, pads, dil: int, ceil: int, nd: int = 2) -> dict:
    attrs = {"kernel_shape": [k] * nd, "strides": [s] * nd, "pads": list(pads), "ceil_mode": ceil}
    if dil != 1:
        attrs["dilations"] = [dil] * nd
    return attrs


@pytest.mark.parametrize("shape,k,s,pads,dil,ceil", CASES)
def test_max_pool(shape, k, s, pads, dil, ceil):
    _check("MaxPool", shape, **_attrs(k, s, pads, dil, ceil))


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("shape,k,s,pads,dil,ceil", CASES)
def test_average_pool(shape, k, s, pads, dil, ceil, include):
    _check("AveragePool", shape, count_include_pad=include, **_attrs(k, s, pads, dil, ceil))


def test_max_pool_nan_and_infinities():
    """A NaN among a window's taps gives NaN; -inf and +inf inputs take part as numbers."""
    shape = (1, 17, 23, 40)
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = RNG.choice(flat.size, 300, replace=False)
    flat[idx[:100]] = np.nan
    flat[idx[100:200]] = -np.inf
    flat[idx[200:]] = np.inf
    x[0, 3] = -np.inf  # a whole plane of -inf: windows of -inf and padding
    x[0, 4, :, :2] = np.nan  # NaN at the left border
    x[0, 5, -1, -3:] = np.nan  # and at the bottom right corner
    x[0, 6, ::2, ::2] = np.inf  # windows holding both infinities (whose sum is NaN) and no NaN
    x[0, 6, 1::2, 1::2] = -np.inf
    for k, s, pads in ((3, 1, (1, 1, 1, 1)), (3, 2, (1, 0, 0, 1)), (2, 2, (0, 0, 0, 0))):
        _check("MaxPool", shape, x, **_attrs(k, s, pads, 1, 0))
    _check("AveragePool", shape, np.where(np.isnan(x), 1.0, x).astype(np.float32),
           **_attrs(3, 1, (1, 1, 1, 1), 1, 0))


def test_max_pool_nan_at_every_tap():
    """A NaN at any one tap of a window (plane c holds it at tap c of the windows around it) gives NaN: the
    max keeps the first tap's NaN, the flags the others'."""
    shape = (1, 9, 11, 40)
    x = RNG.standard_normal(shape).astype(np.float32)
    for c in range(9):
        x[0, c, 4 + c // 3, 17 + c % 3] = np.nan
    for k, s, pads in ((3, 1, (0, 0, 0, 0)), (3, 2, (0, 0, 0, 0)), (3, 1, (1, 1, 1, 1))):
        _check("MaxPool", shape, x, **_attrs(k, s, pads, 1, 0))


def test_max_pool_negative_inputs_with_masks():
    """A max over masked taps (the IR's masked loads read zero) sees zero where a tap lies outside the input,
    in every part of a row: the padding rows, the border vectors, the interior."""
    shape = (1, 4, 9, 40)
    for k, s, pads in ((3, 1, ((1, 2), (2, 1))), (3, 2, ((1, 1), (1, 1))), (5, 1, ((3, 0), (0, 4)))):
        x = Tensor.input("x", shape, DType.float32)
        outs = [(n + p[0] + p[1] - k) // s + 1 for n, p in zip(shape[2:], pads)]
        xw = windows(x, 2, pads, outs, (k, k), (s, s), (1, 1)).permute((0, 1, 2, 4, 3, 5))
        g = graph([x], [xw.max((4, 5))])
        ks = partition(g, {})
        (kern,) = [kk for kk in ks if plan_stencil(kk) is not None]
        st = plan_stencil(kern)
        assert st is not None and kern.ops[st.red].op is Op.MaxReduce
        feeds = {"x": (-np.abs(RNG.standard_normal(shape)) - 1).astype(np.float32)}
        be = CPUBackend()
        base = be.default_schedule(kern)
        assert base["impl"] == "separable"
        for sc in (*_impls(be, kern), {**base, "impl": "loops"}):
            compare_cpu(g, feeds, 1e-6, 1e-6, schedules=[sc if kk is kern else None for kk in ks], kernels=ks)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_1d(op):
    _check(op, (2, 6, 50), **_attrs(3, 2, (1, 1), 1, 0, nd=1))
    _check(op, (1, 3, 31), **_attrs(5, 1, (2, 1), 1, 1, nd=1))


def _pooled(pre: list, shape: tuple[int, ...], outputs: tuple[str, ...] = ("y",), **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    nodes = [*pre, helper.make_node("MaxPool", ["r"], list(outputs), **attrs)]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, None)
            for o in outputs]
    g = helper.make_graph(nodes, "pool", [x], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("pre,copies", [
    ([helper.make_node("Relu", ["x"], ["r"])], 0),
    ([helper.make_node("Clip", ["x", "lo"], ["r"])], 0),  # a lower bound of 0.5
    ([helper.make_node("Relu", ["x"], ["q"]), helper.make_node("Concat", ["q", "q"], ["r"], axis=1)], 0),
    ([helper.make_node("LeakyRelu", ["x"], ["r"], alpha=0.1)], 1),  # below 0: padded with the lowest value
    ([helper.make_node("Clip", ["x", "neg"], ["r"])], 1),
])
def test_a_max_pool_over_values_of_at_least_0_reads_its_padding_as_0(pre, copies):
    """Over a ReLU's (or a Clip's at 0.5, or a concatenation of them) the padding may be 0, read by the view
    without a padded copy; below 0 it is the lowest value, in a copy of its own. Against onnxruntime."""
    import onnxruntime as ort

    shape = (1, 3, 9, 11)
    m = _pooled(pre, shape, kernel_shape=[3, 3], pads=[1, 2, 1, 0], strides=[2, 2])
    m.graph.initializer.extend([helper.make_tensor("lo", TensorProto.FLOAT, [], [0.5]),
                                helper.make_tensor("neg", TensorProto.FLOAT, [], [-0.5])])
    x = (RNG.standard_normal(shape) - 1).astype(np.float32)  # most values below 0
    g = load(m).graph
    ks = partition(g, {})
    padded = [k for k in ks if any(o.op is Op.Where for o in k.ops) and k.full[-1] > shape[-1]]
    assert len(padded) == copies
    from luminal.runtime.compile import compile_graph

    (got,) = compile_graph(g, "cpu").run({"x": x})
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_a_lowest_value_copy_reads_its_constant_mask_before_selecting():
    """The padded copy under a 5x5 max pool over a LeakyRelu, its rows too short to stage their masked reads,
    reads its mask (a constant, one element whatever the index) before selecting, which the vectoriser
    if-converts (a byte read under the window's mask was a branch per element: AVX2 has no masked byte load);
    the input, outside its buffer in the padding, stays under the mask. Against onnxruntime."""
    import onnxruntime as ort

    from luminal.runtime.compile import compile_graph

    shape = (2, 5, 13, 20)
    m = _pooled([helper.make_node("LeakyRelu", ["x"], ["r"], alpha=0.1)], shape, kernel_shape=[5, 5],
                pads=[2, 2, 2, 2], strides=[1, 1])
    g = load(m).graph
    (copy,) = [k for k in partition(g, {}) if any(o.op is Op.Where for o in k.ops) and k.full[-1] > shape[-1]]
    be = CPUBackend()
    src = be.source(copy, be.default_schedule(copy))
    assert "const uint8_t lum_x = " in src and "? in" in src
    x = (RNG.standard_normal(shape) - 1).astype(np.float32)
    (got,) = compile_graph(g, "cpu").run({"x": x})
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_a_max_pool_asked_for_indices_keeps_the_lowest_padding():
    """An index of a maximum of 0 could land on padding read as 0: with Indices the padding stays the lowest."""
    import onnxruntime as ort

    m = _pooled([helper.make_node("Relu", ["x"], ["r"])], (1, 2, 5, 5), ("y", "i"), kernel_shape=[3, 3],
                pads=[1, 1, 1, 1])
    x = -np.abs(RNG.standard_normal((1, 2, 5, 5))).astype(np.float32)  # every ReLU value 0
    from luminal.runtime.compile import compile_graph

    got = compile_graph(load(m).graph, "cpu").run({"x": x})
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_two_rows_a_vector(sixteen_lanes, include):
    """A 5x5 average pool at stride 2 onto rows of 7 (or 6 with ceil_mode): two rows a vector
    (``stencil.row_pairs``), the divisor per pixel in both halves."""
    for shape, ceil in (((1, 8, 14, 14), 0), ((2, 5, 13, 12), 1)):
        attrs = {**_attrs(5, 2, (2, 2, 2, 2), 1, ceil), "count_include_pad": include}
        assert "lum_pv" in _source("AveragePool", shape, **attrs)
        _check("AveragePool", shape, **attrs)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_row_blocks(sixteen_lanes, include):
    """An average pool read tap by tap (rows narrower than a vector) computes its rows in blocks
    (``stencil.block``), the divisor per pixel in each row of a block and of the padding's."""
    for shape, k, pads in (((2, 8, 12, 12), 3, (1, 1, 1, 1)), ((1, 8, 15, 10), 5, (2, 1, 2, 2))):
        attrs = {**_attrs(k, 1, pads, 1, 0), "count_include_pad": include}
        assert "int64_t lum_rb =" in _source("AveragePool", shape, **attrs)
        _check("AveragePool", shape, **attrs)
