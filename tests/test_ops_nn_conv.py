"""Conv, ConvTranspose and pooling against onnxruntime, and the shape of their primitive graphs."""

from __future__ import annotations

import math

import numpy as np
import ops_nn_harness as h
import pytest
from codegen_util import compare_cpu

from luminal.frontend_onnx import ops_nn_conv
from luminal.ir import Op

rand = h.rand


CONV_CASES = [
    ((2, 4, 7, 8), (6, 2, 3, 3), dict(group=2, strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2])),
    ((2, 4, 7, 8), (6, 2, 3, 2), dict(group=2, auto_pad="SAME_LOWER", strides=[2, 3])),
    ((2, 4, 7, 8), (6, 4, 3, 2), dict(auto_pad="SAME_UPPER", strides=[2, 3])),
    ((1, 3, 9), (4, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2])),
    ((1, 3, 9), (4, 3, 3), dict(pads=[2, 1], dilations=[3])),
    ((1, 2, 5, 4, 6), (4, 2, 3, 2, 3), dict(auto_pad="VALID")),
    ((1, 2, 5, 4, 6), (4, 1, 2, 2, 2), dict(group=2, pads=[1, 0, 1, 0, 1, 1], strides=[2, 1, 2])),
    ((1, 6, 6, 6), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),  # depthwise
    ((1, 3, 5, 5), (8, 3, 1, 1), dict()),  # pointwise
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs, ws, attrs, bias):
    inputs = [rand(*xs), rand(*ws, seed=1)] + ([rand(ws[0], seed=2)] if bias else [])
    h.check("Conv", inputs, attrs, consts={1, 2})


def test_conv_is_one_contraction():
    g = h.check("Conv", [rand(2, 4, 9, 9), rand(8, 2, 3, 3, seed=1), rand(8, seed=2)],
                dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1]), consts={1, 2})
    counts = h.op_counts(g)
    assert counts.get(Op.Mul) == 1 and counts.get(Op.SumReduce) == 1
    assert Op.Contiguous not in counts and Op.Gather not in counts
    red = next(n for n in g.toposort() if n.op is Op.SumReduce)
    assert len(red.attrs["axes"]) == 3  # (C/group, kh, kw) in one reduction


def test_conv_weight_as_input():
    h.check("Conv", [rand(1, 2, 6, 6), rand(3, 2, 3, 3, seed=1)], dict(pads=[1, 1, 1, 1]))


CONVT_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 2), dict(group=2, strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 0])),
    ((2, 4, 5, 6), (4, 3, 3, 2), dict(strides=[2, 2], output_shape=[11, 13])),
    # an output_shape past the whole result (12 and 17 of 14 and 19): the rest at the end, as onnxruntime's
    ((1, 4, 4, 6), (4, 3, 3, 2), dict(group=2, strides=[3, 3], output_shape=[14, 19])),
    ((1, 2, 4), (2, 3, 3), dict(strides=[3], output_shape=[14], auto_pad="SAME_UPPER")),
    ((2, 4, 5, 6), (4, 3, 3, 2), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((2, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 5), (2, 3, 3), dict(dilations=[2], strides=[3])),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])),
    ((1, 3, 4, 4), (3, 2, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 4, 5), (2, 2, 3, 3), dict(strides=[2, 2], dilations=[2, 2], output_padding=[1, 0])),
    ((1, 2, 4, 5), (2, 2, 3, 3), dict(strides=[3, 2], pads=[4, 3, 2, 4])),  # pads swallow whole taps
    ((2, 2, 5), (2, 3, 4), dict(strides=[4], pads=[1, 2], output_padding=[3])),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(dilations=[2, 1], pads=[1, 0, 2, 1])),  # stride 1: one phase
    ((1, 2, 6, 5), (2, 3, 3, 2), dict(strides=[2, 2], dilations=[3, 2], pads=[1, 0, 0, 1])),  # gcd 1 and 2
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose(xs, ws, attrs, bias):
    m = ws[1] * attrs.get("group", 1)
    inputs = [rand(*xs), rand(*ws, seed=1)] + ([rand(m, seed=2)] if bias else [])
    h.check("ConvTranspose", inputs, attrs, consts={1, 2})


@pytest.mark.parametrize("value", [1.0, 0.02])
@pytest.mark.parametrize("ws,attrs", [((3, 2, 1, 2), dict(strides=[2, 3])), ((1, 1, 1), dict(strides=[2]))])
def test_a_conv_transpose_of_one_repeated_weight_value_short_of_its_stride(ws, attrs, value):
    # phases past the kernel multiply the weight's zero padding, which a weight of ones must not lose
    x = rand(1, ws[0], *(4,) * (len(ws) - 2))
    h.check("ConvTranspose", [x, np.full(ws, value, np.float32)], attrs, consts={1})


def test_strided_conv_transpose_does_not_multiply_inserted_zeros():
    x, w = rand(1, 4, 5, 6), rand(4, 3, 3, 3, seed=1)
    g = h.check("ConvTranspose", [x, w], dict(strides=[2, 2], pads=[1, 1, 1, 1]), consts={1})
    muls = [n for n in g.toposort() if n.op is Op.Mul]
    assert len(muls) == 4  # one convolution per output phase
    # each of the 9x11 output positions multiplies only the taps of its phase: along the rows, 5 positions of the
    # even phase take tap 1, 4 of the odd taps 0 and 2; along the columns 6 and 5 (C_in * C_out each)
    assert sum(n.numel for n in muls) == 4 * 3 * (5 * 1 + 4 * 2) * (6 * 1 + 5 * 2)


POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 1]),
    dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(kernel_shape=[2, 2], auto_pad="VALID", strides=[3, 3]),
    dict(kernel_shape=[2, 2], strides=[3, 2], ceil_mode=1),
]


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_max_pool(attrs):
    x = rand(2, 3, 7, 8)
    h.check("MaxPool", [x], attrs, opset=12)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("attrs", POOL_CASES[:3])
def test_max_pool_indices(attrs, storage_order):
    h.check("MaxPool", [rand(2, 3, 7, 8)], dict(attrs, storage_order=storage_order), n_out=2, opset=12)


def test_max_pool_1d_3d():
    h.check("MaxPool", [rand(2, 3, 9)], dict(kernel_shape=[3], strides=[2], pads=[1, 1]))
    h.check("MaxPool", [rand(1, 2, 5, 4, 6)], dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2]))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", POOL_CASES)
def test_average_pool(attrs, count_include_pad):
    h.check("AveragePool", [rand(2, 3, 7, 8)], dict(attrs, count_include_pad=count_include_pad), opset=19)


def test_average_pool_1d_3d():
    h.check("AveragePool", [rand(2, 3, 9)], dict(kernel_shape=[3], strides=[2], pads=[1, 1]))
    attrs = dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 1], count_include_pad=1)
    h.check("AveragePool", [rand(1, 2, 5, 4, 6)], attrs)


def test_max_pool_graph_has_no_contraction():
    _, g = h.luminal_run("MaxPool", [rand(1, 2, 8, 8)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    counts = h.op_counts(g)
    assert counts.get(Op.MaxReduce) == 1 and Op.Mul not in counts
    red = next(n for n in g.toposort() if n.op is Op.MaxReduce)
    assert red.srcs[0][0].op is not Op.Contiguous  # windows are views of the padded input


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_pool(op_type, shape):
    h.check(op_type, [rand(*shape)])


def test_bad_conv_is_a_luminal_error():
    from luminal.errors import LuminalError

    with pytest.raises(LuminalError, match="group"):
        h.luminal_run("Conv", [rand(1, 3, 5, 5), rand(4, 2, 3, 3)], dict(group=2))
    with pytest.raises(LuminalError, match="too small"):
        h.luminal_run("Conv", [rand(1, 2, 2, 2), rand(4, 2, 3, 3)], dict())


def test_conv_float16():
    x, w = rand(1, 2, 6, 6).astype(np.float16), rand(3, 2, 3, 3, seed=1).astype(np.float16)
    h.check("Conv", [x, w], dict(pads=[1, 1, 1, 1]), consts={1}, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    x = rand(2, 3, 7, 8)
    h.check("LpPool", [x], dict(p=p, kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]), opset=18)
    h.check("GlobalLpPool", [x], dict(p=p), opset=2)


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("attrs", [
    dict(),
    dict(pads=[1, 1, 1, 1], strides=[2, 1]),
    dict(group=2, offset_group=2, dilations=[2, 1], pads=[1, 0, 2, 1]),
])
def test_deform_conv(attrs, with_mask):
    group, og = attrs.get("group", 1), attrs.get("offset_group", 1)
    x, w = rand(2, 4, 6, 7), rand(6, 4 // group, 3, 2, seed=1)
    pads = attrs.get("pads", [0, 0, 0, 0])
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    oh = (6 + pads[0] + pads[2] - (2 * dl[0] + 1)) // st[0] + 1
    ow = (7 + pads[1] + pads[3] - (1 * dl[1] + 1)) // st[1] + 1
    offset = rand(2, og * 6 * 2, oh, ow, seed=2) * 1.5
    inputs = [x, w, offset, rand(6, seed=3)]
    if with_mask:
        inputs.append(np.abs(rand(2, og * 6, oh, ow, seed=4)))
    h.check("DeformConv", inputs, attrs, opset=22, atol=1e-4)


def test_deform_conv_against_onnx_reference():
    # onnx's reference loops in Python: a small case
    x, w = rand(1, 2, 4, 4), rand(2, 1, 2, 2, seed=1)
    offset, mask = rand(1, 2 * 4 * 2, 4, 4, seed=2), np.abs(rand(1, 2 * 4, 4, 4, seed=3))
    attrs = dict(group=2, offset_group=2, pads=[1, 0, 0, 1], strides=[1, 1])
    h.check_against_onnx_reference("DeformConv", [x, w, offset, None, mask], attrs, opset=22, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [dict(), dict(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2])])
def test_col2im(attrs):
    image, block = [5, 6], [2, 3]
    s, p, d = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0]), attrs.get("dilations", [1, 1])
    counts = [(image[i] + p[i] + p[i + 2] - (block[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(2)]
    x = rand(2, 3 * 6, counts[0] * counts[1])
    h.check("Col2Im", [x, np.array(image), np.array(block)], attrs, opset=18, consts={1, 2})


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state(past, activation):
    x, w, b = h.rand(2, 3, 6), h.rand(3, 1, 4, seed=1), h.rand(3, seed=2)
    inputs = [x, w, b, h.rand(2, 3, 3, seed=3) if past else None]
    h.check("CausalConvWithState", inputs, {"activation": activation}, n_out=2, opset=27)


@pytest.mark.parametrize(("size", "kernel", "strides", "pads"), [
    (8, [2, 2], [2, 2], [0, 0, 0, 0]), (7, [3, 3], [2, 2], [1, 1, 1, 1]), (7, [3], [1], [0, 0])])
def test_max_unpool_puts_max_pool_values_back(size, kernel, strides, pads):
    # overlapping windows (3 by 2) pick the same element more than once: it is put back once
    from frontend_util import assert_matches, make_model
    from onnx import helper

    x = h.rand(2, 3, *([size] * len(kernel)))
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=kernel, strides=strides, pads=pads)
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=kernel, strides=strides, pads=pads)
    assert_matches(make_model([pool, unpool], {"x": x}, opset=22), {"x": x})


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose_by_phase_on_the_c_backend(xs, ws, attrs):
    """One conv per output phase over the taps of its residue, interleaved: on the C backend (its interleave an
    elementwise kernel over a short innermost dim) against the reference, itself checked against onnxruntime."""
    m = ws[1] * attrs.get("group", 1)
    inputs = [rand(*xs), rand(*ws, seed=1), rand(m, seed=2)]
    g = h.check("ConvTranspose", inputs, attrs, consts={1, 2})
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)


PHASE_CASES = [  # taps that never overlap: one contraction in the output's layout
    ((1, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2])),
    ((2, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2], group=2)),
    ((1, 3, 4, 5), (3, 2, 1, 2), dict(strides=[2, 3])),  # kernel short of the stride: zero phases
    ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[3, 3], pads=[1, 0, 2, 1])),
    ((1, 3, 4, 5), (3, 2, 2, 2), dict(strides=[2, 2], output_padding=[1, 1])),
    ((1, 2, 7), (2, 3, 4), dict(strides=[4], pads=[1, 2])),
    ((1, 2, 3, 2, 3), (2, 2, 2, 1, 2), dict(strides=[2, 1, 2])),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", PHASE_CASES)
def test_conv_transpose_without_overlap_is_one_contraction(xs, ws, attrs, bias):
    m = ws[1] * attrs.get("group", 1)
    inputs = [rand(*xs), rand(*ws, seed=1)] + ([rand(m, seed=2)] if bias else [])
    g = h.check("ConvTranspose", inputs, attrs, consts={1, 2})
    assert [n.op for n in g.toposort()].count(Op.SumReduce) == 1
    assert [n.op for n in g.toposort()].count(Op.Add) == int(bias)  # no overlap-add
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)  # the C GEMM writes the output in phases


# (input, weight, attributes, per spatial dim the (output position, tap) pairs the contractions keep: the
# output's length times the taps kept, or where the convolution splits by taps, each tap's live positions)
DEAD_TAP_CASES = [
    ((1, 8, 6, 6), (4, 8, 3, 3), dict(pads=[6, 6, 6, 6], dilations=[6, 6]), (6 * 1, 6 * 1)),  # an atrous 1x1
    ((1, 8, 6, 6), (4, 8, 3, 3), dict(pads=[3, 3, 3, 3], dilations=[3, 3]), (3 + 6 + 3, 3 + 6 + 3)),  # 2/3 live
    ((1, 8, 4, 4), (4, 8, 3, 3), dict(pads=[1, 1, 1, 1]), (4 * 3, 4 * 3)),  # 5/6 live: kept whole
    ((1, 4, 5, 7), (4, 4, 3, 3), dict(pads=[9, 0, 9, 0], dilations=[9, 3]), (5 * 1, 1 * 3)),
    # one output row, whose only live tap lies right of the input's start: a crop
    ((2, 4, 5, 5), (6, 2, 5, 3), dict(group=2, pads=[7, 1, 2, 1], dilations=[3, 1], strides=[2, 1]), (1 * 1, 5 * 3)),
    ((1, 3, 9), (4, 3, 4), dict(pads=[11, 2], dilations=[4]), (3 * 1 + 4 * 2 + 1 * 3 + 2 * 2,)),  # 18 of 40 live
    # the first and last output positions read padding alone: bands of zeros
    ((1, 3, 4), (2, 3, 5), dict(pads=[5, 5], strides=[3]), (1 * 3 + 1 * 3,)),
    ((1, 2, 3, 4, 3), (3, 2, 3, 3, 3), dict(pads=[4, 1, 4, 4, 1, 4], dilations=[4, 1, 4]), (3 * 1, 4 * 3, 3 * 1)),
    # 3/5 live along both dims: taps 0, 1 and 2 over 4, 10 and 4 rows
    ((1, 4, 10, 10), (5, 4, 3, 3), dict(pads=[6, 6, 6, 6], dilations=[6, 6]), (18, 18)),
    ((2, 4, 10, 9), (6, 2, 3, 3), dict(group=2, pads=[6, 6, 6, 6], dilations=[6, 6], strides=[1, 2]), (18, 9)),
    ((1, 3, 9), (2, 3, 3), dict(pads=[9, 9], dilations=[9]), (9 * 1,)),  # only the centre tap ever reads
]


@pytest.mark.parametrize("xs,ws,attrs,pairs", DEAD_TAP_CASES)
def test_conv_reads_only_live_taps(xs, ws, attrs, pairs, monkeypatch):
    """Taps that meet only the zero padding (a dilated kernel over a small map) leave the contraction: at every
    output position, or, where the others are at most SPLIT_LIVE of the work, per tap over the positions it reads
    the input at (the split's saving floor taken away for these small convs); the outputs as onnxruntime's, on
    the reference executor and the C backend."""
    monkeypatch.setattr(ops_nn_conv, "SPLIT_MIN_MACS", 0)
    inputs = [rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)]
    g = h.check("Conv", inputs, attrs, consts={1, 2})
    macs = sum(math.prod(n.srcs[0][1].shape) for n in g.toposort() if n.op is Op.SumReduce)
    assert macs == xs[0] * ws[0] * ws[1] * math.prod(pairs)
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)


def _weight_reads(g) -> int:
    """Elements of constant operands the graph's contractions multiply by (each slice of a weight as often as it
    is read)."""
    return sum(math.prod(s.shape) for n in g.toposort() if n.op is Op.Mul for s, _ in n.srcs
               if s.op is Op.Constant and len(s.shape) > 1)


def test_an_atrous_conv_over_a_small_map_reads_each_tap_of_its_weight_once():
    """An atrous pyramid's rate 12 over a 16x16 map (DeepLabV3's at a 256x256 input): along each dim taps 0 and 2
    read the input at 4 of the 16 output positions, so the convolution splits by taps, nine contractions over 16
    to 256 positions, and reads each tap's slice of the weight once (split into bands of positions that read the
    same taps, the centre tap's would be read by all nine)."""
    inputs = [rand(1, 256, 16, 16), rand(64, 256, 3, 3, seed=1), rand(64, seed=2)]
    g = h.check("Conv", inputs, dict(pads=[12] * 4, dilations=[12, 12]), consts={1, 2}, atol=1e-4)  # 768-term sums
    reduces = [n for n in g.toposort() if n.op is Op.SumReduce]
    assert len(reduces) == 9
    assert sum(math.prod(n.srcs[0][1].shape) for n in reduces) == 64 * 256 * (4 + 16 + 4) ** 2
    assert _weight_reads(g) == 64 * 256 * 9
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-4)


def test_a_depthwise_conv_over_a_small_map_stays_whole():
    """A depthwise 5x5 over a 4x4 map reads the padding at 30% of its (position, tap) pairs, but they are 80K
    multiply-adds, less than the split's floor: one contraction (its stencil beats 25 small kernels and their
    sum)."""
    inputs = [rand(1, 672, 4, 4), rand(672, 1, 5, 5, seed=1)]
    g = h.check("Conv", inputs, dict(pads=[2] * 4, group=672), consts={1})
    assert [n.op for n in g.toposort()].count(Op.SumReduce) == 1


@pytest.mark.parametrize("k,width", [(2, 16), (3, 16), (4, 16), (2, 10), (3, 9)])
def test_a_conv_transpose_s_phases_are_stored_together(k, width, lanes):
    """A ConvTranspose k x k at stride k (no overlap): the contraction's rows are (output channel, row phase,
    column phase), the output's innermost dim the column phase, next to the input's columns. The epilogue stores
    the k rows of a column phase together, so each store fills a run of the output, also where a tile's columns
    span input rows (a width short of the panels); the outputs as onnxruntime's and the reference executor's.
    Eight lanes: the orientation takes the pixels as columns where a row of them fills a vector."""
    lanes(8)
    from luminal.codegen.c.backend import CPUBackend, source
    from luminal.codegen.partition import partition
    from luminal.target import detect_target

    inputs = [rand(1, 8, 6, width), rand(8, 4, k, k, seed=1), rand(4, seed=2)]
    g = h.check("ConvTranspose", inputs, dict(strides=[k, k]), consts={1, 2})
    (kernel,) = [x for x in partition(g, {}) if x.form == "contraction"]
    be = CPUBackend(detect_target("cpu"))
    assert f"for (int64_t i = 0; i < mcur; i += {k}) {{" in source(kernel, be.default_schedule(kernel), 2)
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)


def _random_conv(rng):
    """A random 1-d or 2-d convolution whose taps often reach past the input: (input shape, weight shape, attrs)."""
    nd = int(rng.integers(1, 3))
    group = int(rng.choice([1, 2]))
    cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    n = int(rng.integers(1, 3))
    size = [int(rng.integers(2, 9)) for _ in range(nd)]
    kernel = [int(rng.integers(1, 5)) for _ in range(nd)]
    dil = [int(rng.integers(1, 5)) for _ in range(nd)]
    stride = [int(rng.integers(1, 4)) for _ in range(nd)]
    pads = [int(rng.integers(0, (k - 1) * d + 3)) for k, d in zip(kernel * 2, dil * 2)]
    for d in range(nd):  # at least one output position
        while size[d] + pads[d] + pads[nd + d] < (kernel[d] - 1) * dil[d] + 1:
            pads[d] += 1
    attrs = dict(group=group, strides=stride, dilations=dil, pads=pads, kernel_shape=kernel)
    return (n, cg * group, *size), (mg * group, cg, *kernel), attrs


@pytest.mark.parametrize("seed", range(24))
def test_random_convs_split_by_taps_wherever_a_pair_reads_padding(seed, monkeypatch):
    """With the split's thresholds taken away (any dead (position, tap) pair splits, at any size), random convs
    (1-d and 2-d, groups, strides, dilations, pads past the kernel's reach) give onnxruntime's outputs on the
    reference executor and the C backend."""
    monkeypatch.setattr(ops_nn_conv, "SPLIT_LIVE", 1.0)
    monkeypatch.setattr(ops_nn_conv, "SPLIT_MIN_MACS", 0)
    xs, ws, attrs = _random_conv(np.random.default_rng(seed))
    inputs = [rand(*xs, seed=seed), rand(*ws, seed=seed + 100), rand(ws[0], seed=seed + 200)]
    g = h.check("Conv", inputs, attrs, consts={1, 2})
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(12))
def test_random_conv_transposes_without_overlap(seed):
    """Random ConvTransposes whose taps never overlap (kernel <= stride: one contraction, its phases stored
    together where the output's innermost dim is the column phase), over widths that do and do not fill the
    panels, with groups, batches and output padding: onnxruntime's outputs on the reference executor and the C
    backend."""
    rng = np.random.default_rng(seed)
    s = [int(rng.integers(2, 5)), int(rng.integers(2, 5))]
    k = [int(rng.integers(1, s[0] + 1)), int(rng.integers(1, s[1] + 1))]
    group, n = int(rng.choice([1, 2])), int(rng.integers(1, 3))
    xs = (n, int(rng.integers(1, 5)) * group, int(rng.integers(2, 9)), int(rng.integers(3, 40)))
    ws = (xs[1], int(rng.integers(1, 6)), *k)
    attrs = dict(strides=s, group=group, output_padding=[int(rng.integers(0, s[0])), int(rng.integers(0, s[1]))])
    inputs = [rand(*xs, seed=seed), rand(*ws, seed=seed + 100), rand(ws[1] * group, seed=seed + 200)]
    g = h.check("ConvTranspose", inputs, attrs, consts={1, 2})
    compare_cpu(g, {"i0": inputs[0]}, rtol=1e-4, atol=1e-5)
