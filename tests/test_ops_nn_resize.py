"""Resize and Upsample against onnxruntime (and onnx's reference where onnxruntime departs from the spec)."""

from __future__ import annotations

import re

import numpy as np
import ops_nn_harness as h
import pytest
from frontend_util import session_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from luminal.codegen.kernel import Leaf
from luminal.codegen.partition import partition
from luminal.errors import LuminalError
from luminal.ir import Op

rand = h.rand

X = rand(1, 2, 4, 5)
E = np.array([], np.float32)
CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric", "tf_crop_and_resize"]
SCALES = [([1, 1, 2.0, 1.5], None), ([1, 1, 0.5, 0.6], None), (None, [1, 2, 7, 3]), (None, [1, 2, 1, 9])]
ROI = np.array([0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9], np.float32)


def _fractional_align_corners(attrs, scales, x) -> bool:
    """align_corners with scale * length not an integer: the spec (and onnx's reference) stretch by
    that fractional length, onnxruntime by the rounded output size; we follow the spec."""
    if attrs.get("coordinate_transformation_mode") != "align_corners" or scales is None:
        return False
    return any(float(np.float32(s)) * n != int(float(np.float32(s)) * n) for s, n in zip(scales, x.shape))


def _resize(attrs, scales, sizes, x=X, roi=E, opset=19, **kw):
    sc = E if scales is None else np.array(scales, np.float32)
    inputs = [x, roi, sc] + ([] if sizes is None else [np.array(sizes, np.int64)])
    if _fractional_align_corners(attrs, scales, x):
        return h.check_against_onnx_reference("Resize", inputs, attrs, opset=opset, consts={1, 2, 3},
                                              atol=kw.get("atol", 1e-5), rtol=kw.get("rtol", 1e-4))
    return h.check("Resize", inputs, attrs, consts={1, 2, 3}, opset=opset, **kw)


@pytest.mark.parametrize("scales,sizes", SCALES)
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest(ctm, nearest_mode, scales, sizes):
    attrs = dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest_mode,
                 extrapolation_value=-3.0)
    if ctm == "half_pixel_symmetric" and nearest_mode == "floor" and scales != [1, 1, 2.0, 1.5]:
        # a source coordinate of exactly 2.0 comes out as 1.9999999 in onnxruntime's float order
        sc = E if scales is None else np.array(scales, np.float32)
        inputs = [X, E, sc] + ([] if sizes is None else [np.array(sizes, np.int64)])
        h.check_against_onnx_reference("Resize", inputs, attrs, consts={1, 2, 3})
        return
    g = _resize(attrs, scales, sizes, roi=ROI if ctm == "tf_crop_and_resize" else E)
    assert Op.Mul not in h.op_counts(g)  # nearest is gathers only


@pytest.mark.parametrize("scales,sizes", SCALES)
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_linear_cubic(mode, ctm, scales, sizes):
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm, extrapolation_value=-3.0)
    _resize(attrs, scales, sizes, roi=ROI if ctm == "tf_crop_and_resize" else E, atol=1e-4)


@pytest.mark.parametrize("a,exclude", [(-0.5, 1), (-0.75, 0), (-0.75, 1)])
def test_resize_cubic_options(a, exclude):
    _resize(dict(mode="cubic", cubic_coeff_a=a, exclude_outside=exclude), [1, 1, 2.0, 1.5], None, atol=1e-4)
    _resize(dict(mode="cubic", cubic_coeff_a=a, exclude_outside=exclude), [1, 1, 0.5, 0.6], None, atol=1e-4)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_aspect_policy(policy):
    attrs = dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy=policy)
    h.check("Resize", [X, E, E, np.array([8, 8])], attrs, consts={1, 2, 3}, opset=19)
    h.check("Resize", [X, E, E, np.array([8, 3])], dict(attrs, axes=[3, 2]), consts={1, 2, 3}, opset=19)


def test_resize_trilinear_5d():
    x = rand(1, 1, 3, 4, 5)
    _resize(dict(mode="linear"), [1, 1, 2.0, 1.5, 0.6], None, x=x, atol=1e-4)


def test_resize_integer_input_nearest():
    x = np.arange(20, dtype=np.int32).reshape(1, 1, 4, 5)
    _resize(dict(mode="nearest"), [1, 1, 2.0, 1.5], None, x=x)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10_and_upsample(mode):
    sc = np.array([1, 1, 2.0, 3.0], np.float32)
    h.check("Resize", [X, sc], dict(mode=mode), consts={1}, opset=10)
    h.check("Resize", [X, np.array([1, 1, 0.5, 0.6], np.float32)], dict(mode="nearest"), consts={1}, opset=10)
    h.check("Upsample", [X, sc], dict(mode=mode), consts={1}, opset=9)
    h.check("Upsample", [X], dict(mode=mode, scales=[1.0, 1.0, 2.0, 3.0]), opset=7)


def test_resize_needs_scales_or_sizes():
    with pytest.raises(LuminalError, match="scales and sizes"):
        h.luminal_run("Resize", [X, E, E], dict(mode="linear"), consts={1, 2}, opset=19)


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.3], [1, 1, 0.7, 1.5]])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode, scales, ctm, exclude):
    x = rand(1, 2, 9, 11)
    attrs = dict(mode=mode, antialias=1, coordinate_transformation_mode=ctm, exclude_outside=exclude)
    _resize(attrs, scales, None, x=x, atol=1e-4)
    if not _fractional_align_corners(attrs, scales, x):  # else _resize compared with onnx's reference
        sc = np.array(scales, np.float32)
        h.check_against_onnx_reference("Resize", [x, E, sc], attrs, consts={1, 2}, atol=1e-4)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_2d(mode, padding, align):
    x = rand(2, 3, 5, 6)
    grid = (np.random.default_rng(4).random((2, 4, 7, 2)) * 3 - 1.5).astype(np.float32)  # some outside [-1, 1]
    grid[0, 0, 0] = [0.5, -0.25]  # exact tap positions and ties
    attrs = dict(mode=mode, padding_mode=padding, align_corners=align)
    if mode == "cubic" and padding == "border":
        # onnxruntime clamps each cubic tap instead of the out-of-range coordinate as the spec does
        h.check_against_onnx_reference("GridSample", [x, grid], attrs, opset=22, atol=1e-4)
    else:
        h.check("GridSample", [x, grid], attrs, opset=22, atol=1e-4)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode, padding):
    x = rand(1, 2, 3, 4, 5)
    grid = (np.random.default_rng(5).random((1, 2, 3, 4, 3)) * 2.6 - 1.3).astype(np.float32)
    h.check_against_onnx_reference("GridSample", [x, grid], dict(mode=mode, padding_mode=padding), opset=22,
                                   atol=1e-5)


def test_grid_sample_opset16_names():
    x, grid = rand(1, 2, 4, 4), (np.random.default_rng(6).random((1, 3, 3, 2)) * 2 - 1).astype(np.float32)
    h.check("GridSample", [x, grid], dict(mode="bilinear"), opset=16)
    h.check("GridSample", [x, grid], dict(mode="bicubic", align_corners=1), opset=16)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # onnx's reference divides by zero for a size-1 dim
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 1]])
def test_affine_grid(size, align):
    r = len(size) - 2
    theta = rand(2, r, r + 1, seed=8)
    h.check_against_onnx_reference("AffineGrid", [theta, np.array(size)], dict(align_corners=align), opset=20,
                                   consts={1}, atol=1e-5)
    if r == 2:
        h.check("AffineGrid", [theta, np.array(size)], dict(align_corners=align), opset=20, consts={1})


@pytest.mark.parametrize("shape,axes", [([3, 8], [1, 2]), ([7, 2, 6], None), ([1], [0])])
def test_center_crop_pad(shape, axes):
    x = rand(4, 5, 6)
    attrs = {} if axes is None else dict(axes=axes)
    h.check_against_onnx_reference("CenterCropPad", [x, np.array(shape)], attrs, opset=18, consts={1})


@pytest.mark.parametrize("ctm,nearest_mode", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")])
def test_nearest_integer_upsampling_is_a_broadcast_view(ctm, nearest_mode):
    # what PyTorch's nn.Upsample(mode="nearest") exports
    attrs = dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
    g = _resize(attrs, [1, 1, 2.0, 3.0], None)
    assert Op.Gather not in h.op_counts(g)
    assert len(partition(g, {})) == 1  # both axes' repeats merged by one reshape: one copy


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "asymmetric", "half_pixel_symmetric",
                                 "align_corners"])
@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
@pytest.mark.parametrize("sizes", [[2, 3, 14, 6], [2, 3, 21, 6], [1, 2, 28, 56], [1, 2, 7, 48], [1, 2, 14, 12],
                                   [2, 1, 21, 24]])
def test_resize_by_a_whole_factor_reads_views(mode, ctm, sizes):
    """An upsampling by a whole factor whose taps repeat with the output's phase (every mode but align_corners)
    reads the input through views, its borders repeated, with one weight per phase: no gather along the rows or
    the innermost dim, whatever the factor; the outputs as onnxruntime's, also on the C backend."""
    from codegen_util import compare_cpu

    x = rand(sizes[0], sizes[1], 7, 6)
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    g = _resize(attrs, None, sizes, x=x, atol=1e-4)
    along = {n.attrs["axis"] for n in g.toposort() if n.op is Op.Gather}
    if ctm != "align_corners":
        assert 2 not in along and (3 not in along or sizes[3] % 6)
        if mode != "nearest":  # the taps' sums are the output, not a wider map cut and copied to it
            kernels = partition(g, {})
            assert not [k for k in kernels if {o.op for o in k.ops} <= {Leaf.Load, Op.Contiguous}]
            # and they read zeros past the borders: no copy of the input with its borders repeated, one kernel
            # per resized axis
            assert len(kernels) == (sizes[2] != 7) + (sizes[3] != 6)
    compare_cpu(g, {"i0": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode,ctm", [("linear", "half_pixel"), ("linear", "pytorch_half_pixel"),
                                      ("cubic", "half_pixel"), ("linear", "asymmetric")])
@pytest.mark.parametrize("factor", [2, 3])
def test_phase_taps_past_the_borders_are_staged_zeros(mode, ctm, factor):
    """Along the innermost axis, rows long enough (from UNROLLED_STAGE_MIN blocks) stage the zero-padded taps once
    per row, shared by the phases unrolled under the loop over the blocks (the outer axis' taps are zero or not by
    rows); the weights moved off the borders give onnxruntime's values on the C backend."""
    from codegen_util import compare_cpu

    from luminal.codegen.c.backend import CPUBackend, source

    x = rand(1, 2, 10, 12)
    g = _resize(dict(mode=mode, coordinate_transformation_mode=ctm), None, [1, 2, 10 * factor, 12 * factor], x=x,
                atol=1e-4)
    kernels = partition(g, {})
    assert len(kernels) == 2
    inner = next(k for k in kernels if k.full[-1] == factor)
    src = source(inner, CPUBackend().default_schedule(inner), 2)
    assert re.search(r"float s\d+\[12\];", src) and "? in" not in src
    compare_cpu(g, {"i0": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sizes", [[1, 3, 13, 15], [2, 2, 12, 20]])
def test_gathered_upsampling_is_a_kernel_per_axis_innermost_first(mode, sizes):
    """An upsampling whose taps do not repeat with the phase (align_corners) gathers: an axis' taps sum in one
    kernel, their index tables the axis' length, and the innermost axis goes first, gathered on the input's rows
    (each of its elements a load of its own, where the outer axis reads whole rows); the outputs as
    onnxruntime's, also on the C backend."""
    from codegen_util import compare_cpu

    x = rand(sizes[0], sizes[1], 6, 7)
    g = _resize(dict(mode=mode, coordinate_transformation_mode="align_corners"), None, sizes, x=x, atol=1e-4)
    kernels = partition(g, {})
    assert [k.full for k in kernels] == [(*sizes[:2], 6, sizes[3]), tuple(sizes)]
    assert all(int(np.prod(b.shape)) <= max(sizes) for k in kernels for b in k.inputs if b.constant)
    compare_cpu(g, {"i0": x}, rtol=1e-4, atol=1e-4)


def _boxes(seed: int, count: int, size: float) -> np.ndarray:
    """Boxes (x1, y1, x2, y2), some reaching past the map's edges."""
    r = np.random.default_rng(seed)
    corner = r.uniform(-3, size, (count, 2))
    return np.concatenate([corner, corner + r.uniform(0.3, size, (count, 2))], 1).astype(np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [1, 2])
@pytest.mark.parametrize("opset, coords", [(10, None), (16, "half_pixel"), (16, "output_half_pixel")])
def test_roi_align(mode, ratio, opset, coords):
    """Bilinear samples in each box's bins, a box's corners past the map, spatial_scale, both modes (onnxruntime's
    max: the largest weighted tap), the coordinate modes (before opset 16 there was one, output_half_pixel); the
    boxes a model input, so the sample positions are computed in the graph."""
    x = rand(2, 3, 10, 12)
    attrs = dict(mode=mode, sampling_ratio=ratio, output_height=3, output_width=2, spatial_scale=0.5)
    if coords:
        attrs["coordinate_transformation_mode"] = coords
    h.check("RoiAlign", [x, _boxes(1, 5, 20.0), np.array([0, 1, 1, 0, 1], np.int64)], attrs, opset=opset,
            consts={2}, atol=1e-5)


@pytest.mark.parametrize("opset", [10, 16])
def test_roi_align_grid_from_each_box(opset, tmp_path):
    """sampling_ratio 0: each bin sampled as many times a side as it is pixels, a grid of its own per box; constant
    boxes group by grid, boxes from the model run on the host (onnx's reference took opset 16's default coordinate
    mode at opset 10: luminal's host op corrects it)."""
    x = rand(1, 2, 16, 16)
    boxes = np.array([[0, 0, 3, 3], [1, 2, 14, 9], [2, 2, 12, 15], [4, 1, 7, 4]], np.float32)
    attrs = dict(sampling_ratio=0, output_height=2, output_width=2)
    batch = np.zeros(4, np.int64)
    h.check("RoiAlign", [x, boxes, batch], attrs, opset=opset, consts={1, 2}, atol=1e-5)
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                            for k, v in (("x", x), ("rois", boxes))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(batch, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    session_matches_onnxruntime(model, {"x": x, "rois": boxes}, tmp_path, rtol=1e-5, atol=1e-5)
