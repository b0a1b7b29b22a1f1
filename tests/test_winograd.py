"""Winograd F(2x2,3x3) and F(4x4,3x3) as a per-convolution decision: the rewritten graph against the reference
executor and onnxruntime on the C backend, the convolutions it leaves alone, the tolerance that checks it, a batch
image by image, and the decisions through the search space, a tune with a fake backend, the tuning cache and
compile."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import search_util as helpers
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.cache import TuningCache, backend_fingerprints
from luminal.cache.export import Bad, _fusion_config
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.check import run_graph
from luminal.codegen.c.contraction import SWAP_MAX_MACS, plan_contraction
from luminal.codegen.c.stencil import plan_stencil
from luminal.codegen.partition import (
    ByImage,
    Winograd,
    apply_algorithms,
    decisions_config,
    decisions_from_config,
    default_algorithms,
    fusible_edges,
    fusion_key,
    image_convs,
    lower,
    partition,
    winograd_convs,
)
from luminal.frontend_onnx import load
from luminal.ir import DType, Graph, Op, Tensor, optimize, run_reference, winograd
from luminal.runtime.compile import compile_graph
from luminal.search.space import FusionSpace, conv_name, flag_name
from luminal.search.tuner import tune
from luminal.search.verify import mismatch


def _conv_model(n, c, m, hw, pads=(1, 1, 1, 1), group=1, k=3, stride=1, dilation=1, bias_relu=True, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = (rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(np.float32)
    inits = {"w": w}
    ins = ["x", "w"]
    if bias_relu:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["y" if not bias_relu else "c"], pads=list(pads), group=group,
                              strides=[stride, stride], dilations=[dilation, dilation], kernel_shape=[k, k])]
    if bias_relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return make_model(nodes, {"x": x}, inits), {"x": x}


CASES = [  # (batch, in channels, out channels, (h, w), pads (top, left, bottom, right), groups)
    (1, 16, 16, (8, 8), (1, 1, 1, 1), 1),     # whole tiles
    (1, 5, 7, (9, 11), (1, 1, 1, 1), 1),      # channels not a multiple of 16, odd outputs: tiles cropped
    (1, 17, 33, (7, 6), (0, 0, 0, 0), 1),     # no pad
    (1, 6, 4, (9, 7), (2, 1, 0, 2), 1),       # asymmetric pads
    (3, 8, 6, (6, 10), (1, 1, 1, 1), 1),      # batch > 1
    (2, 8, 6, (10, 9), (1, 1, 1, 1), 2),      # groups 2
    (1, 3, 16, (13, 13), (1, 1, 1, 1), 1),    # few input channels
]


@pytest.mark.parametrize("tile", winograd.TILES)
def test_the_derived_transforms_compute_a_tile_of_the_correlation(tile):
    """Each tile's (BT, G, AT), derived from its interpolation points (``winograd._toom_cook``), gives a tile of
    a 3x3 correlation to float64 rounding; BT's entries are integers (its scales moved into G)."""
    bt, g, at = winograd._TRANSFORMS[tile]
    assert bt.shape == (tile + 2, tile + 2) and g.shape == (tile + 2, 3) and at.shape == (tile, tile + 2)
    assert np.array_equal(bt, np.round(bt))
    rng = np.random.default_rng(tile)
    d, w = rng.standard_normal((tile + 2, tile + 2)), rng.standard_normal((3, 3))
    want = np.array([[np.sum(d[i:i + 3, j:j + 3] * w) for j in range(tile)] for i in range(tile)])
    np.testing.assert_allclose(at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("tile", winograd.TILES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[0]}c{c[1]}m{c[2]}-{c[3][0]}x{c[3][1]}-p{c[4]}-g{c[5]}")
def test_winograd_matches_the_reference_and_onnxruntime(case, tile):
    n, c, m, hw, pads, group = case
    model, feeds = _conv_model(n, c, m, hw, pads, group)
    g = load(model).graph
    (node,) = winograd_convs(g)
    decisions = {Winograd(node, tile): True}
    new, kernels = lower(g, decisions)
    # the input transform's rows and columns, the channels, the output transform's columns and rows
    assert sum(x.op is Op.SumReduce for x in new.toposort()) == 5
    # bias and ReLU fuse after it: into the copy to the output's layout where the tiles cover the output, else
    # into the crop
    oh, ow = (hw[0] + pads[0] + pads[2] - 2, hw[1] + pads[1] + pads[3] - 2)
    whole = oh % tile == 0 and ow % tile == 0
    assert len(kernels) <= (6 if whole else 7)
    last = {o.op for o in kernels[-1].ops}
    assert {Op.Contiguous, Op.Add, Op.Where} <= last
    assert sum(k.form == "elementwise" for k in kernels) <= (1 if whole else 2)
    # the columns' input transform is a stencil reading its tiles ``tile`` apart (``stencil.STEP_MAX``), where a
    # row holds more than one tile
    steps = [st.step for k in kernels if k.form == "contraction" and (st := plan_stencil(k)) is not None]
    assert (tile in steps) == (-(-ow // tile) > 1)
    got = run_graph(g, feeds, decisions=decisions)[0]
    want = run_reference(g, feeds)[0].reshape(got.shape)
    scale = float(np.abs(want).max())
    tol = (2e-6 if tile == 2 else 2e-5) * max(1.0, scale)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=0, atol=tol)
    # the same graph computed directly agrees with it too, and keeps its one kernel
    assert len(lower(g, {})[1]) == 1


@pytest.mark.parametrize("what", [{"stride": 2}, {"k": 5, "pads": (2, 2, 2, 2)},
                                  {"stride": 2, "dilation": 3, "pads": (3, 3, 3, 3)},
                                  {"group": 8}, {"k": 1, "pads": (0, 0, 0, 0)}])
def test_other_convolutions_are_left_alone(what):
    model, _ = _conv_model(1, 8, 8, (9, 9), **what)
    g = load(model).graph
    assert winograd_convs(g) == []
    pos = {x.id: i for i, x in enumerate(g.toposort())}
    reduce_at = [pos[x.id] for x in g.toposort() if x.op is Op.SumReduce]
    new, edges = apply_algorithms(g, {Winograd(p, 2): True for p in reduce_at})
    assert new is g and edges == {}


@pytest.mark.parametrize("tile", winograd.TILES)
@pytest.mark.parametrize(("n", "hw", "dilation", "stride", "pads"), [
    (1, (9, 9), 2, 1, (2, 2, 2, 2)),  # an atrous 3x3: the output's 9 rows as 5 positions of 2 phases, cropped
    (2, (12, 13), 3, 1, (3, 2, 1, 3)),  # a batch, dilation 3, asymmetric pads
    (1, (17, 16), 4, 2, (4, 4, 4, 4)),  # stride 2 with dilation 4: taps twice the output's step apart
])
def test_dilated_convolutions_compute_by_phases(n, hw, dilation, stride, pads, tile):
    """A dilated 3x3 conv is a Winograd candidate: its output split into phases, each an image of a conv over
    every r-th input row, merged back in place. Its four transforms are stencils where a row holds more than one
    tile (the phases outside the tiles: with the output's column phase innermost, the last one was a GEMM summing 2
    to 6 points). Outputs match the reference and onnxruntime."""
    model, feeds = _conv_model(n, 8, 8, hw, pads, dilation=dilation, stride=stride, seed=5)
    g = load(model).graph
    (node,) = winograd_convs(g)
    new, kernels = lower(g, {Winograd(node, tile): True})
    assert len(kernels) > 1 and sum(x.op is Op.SumReduce for x in new.toposort()) == 5
    alpha = tile + 2
    transforms = [k for k in kernels if k.form == "contraction"
                  and any(b.constant and b.shape in ((alpha, alpha), (tile, alpha)) for b in k.inputs)]
    assert len(transforms) == 4  # their innermost kept dim: the tiles along a row (one, on the smallest maps)
    assert all(plan_stencil(k) is not None for k in transforms if k.full[-2] > 1)
    got = run_graph(g, feeds, decisions={Winograd(node, tile): True})[0]
    want = run_reference(g, feeds)[0].reshape(got.shape)
    tol = (2e-6 if tile == 2 else 2e-5) * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=0, atol=tol)


@pytest.mark.parametrize(("n", "c", "hw", "dilation", "tile"), [
    (1, 128, 32, 2, 4), (1, 64, 32, 2, 4), (1, 48, 32, 2, 0), (2, 64, 32, 2, 0), (2, 96, 32, 2, 4),
    (1, 64, 128, 4, 4), (1, 256, 7, 2, 0), (1, 256, 28, 2, 3), (1, 128, 33, 4, 3), (1, 128, 20, 2, 2)])
def test_a_dilated_convolution_s_phases_count_as_images(n, c, hw, dilation, tile):
    """One image's 32x32 map at dilation 2 is four phases of 16x16: the untuned default takes F(4x4) from
    PHASES_F4_MIN_CHANNELS (64), two images' from the channels a batch needs (96); sixteen phases of 32x32 as
    four. A 7x7 map at dilation 2 is four phases of 4x4, too small for any tile (on one 7x7
    image F(2x2) takes 256 channels). Four phases of 14x14 are 100 tiles of F(3x3) against 196 of F(2x2), and
    sixteen of 9x9 144 against 400, both enough to read its larger weight over: F(3x3); four of 10x10 are as many
    tiles either way: F(2x2)."""
    model, _ = _conv_model(n, c, c, (hw, hw), (dilation,) * 4, dilation=dilation)
    (red,) = [r for r in load(model).graph.toposort() if winograd.eligible(r)]
    assert winograd.default_tile(red) == tile


def test_a_conv_whose_weight_is_an_input_is_left_alone():
    x = Tensor.input("x", (1, 4, 6, 6), DType.float32)
    w = Tensor.input("w", (4, 4, 3, 3), DType.float32)
    from luminal.frontend_onnx.ops_nn_conv import conv

    y = conv(x, w, 1, [1, 1], [1, 1], [(1, 1), (1, 1)], [6, 6])
    g = optimize(Graph([x.node, w.node], [y.contiguous().node], ["y"]))
    assert winograd_convs(g) == []


@pytest.mark.parametrize("tile", winograd.TILES)
def test_the_tolerance_accepts_winograd_and_rejects_wrong_results(tile):
    """What tune checks a plan with (search.verify.mismatch, as the model job calls it) on a ResNet-like layer:
    realistic magnitudes, 256 channels. Winograd's own error passes; a wrong value in one output, or the output
    of a wrong transform, does not."""
    model, feeds = _conv_model(1, 256, 64, (14, 14), seed=3, bias_relu=False)
    g = load(model).graph
    (node,) = winograd_convs(g)
    want = run_reference(g, feeds)[0]
    got = run_graph(g, feeds, decisions={Winograd(node, tile): True})[0].reshape(want.shape)
    assert np.abs(got - want).max() > 0  # it does differ from the direct sum
    assert mismatch(got, want, DType.float32, 64) is None
    bad = got.copy()
    bad[0, 3, 5, 7] += 0.05 * float(np.abs(want).max())
    assert mismatch(bad, want, DType.float32, 64) is not None
    shifted = np.roll(got, 1, axis=-1)  # a tile transform that is off by one column
    assert mismatch(shifted, want, DType.float32, 64) is not None


def _small_conv(bias_relu=False):
    model, feeds = _conv_model(1, 4, 4, (6, 6), bias_relu=bias_relu)
    return load(model).graph, feeds


def test_the_fusion_space_offers_the_decision():
    g, _ = _small_conv(bias_relu=True)
    edges, convs = fusible_edges(g), winograd_convs(g)
    space = FusionSpace(edges, convs)
    assert len(convs) == 1 and conv_name(convs[0]) in space.grid()
    assert space.size == 2 ** len(edges) * (1 + len(winograd.TILES))
    assert not any(isinstance(k, Winograd) for k in space.default)  # untuned: computed directly
    point = space.decode({conv_name(convs[0]): 4})
    assert point[Winograd(convs[0], 4)] is True and space.decode(space.encode(point)) == point
    # the cache's config holds it; a record written before the decision existed still loads
    config = decisions_config(point)
    assert config == {"unfused": [], "winograd": [[convs[0], 4]]}
    assert decisions_from_config(g, config) == {Winograd(convs[0], 4): True}
    assert decisions_from_config(g, {"unfused": []}) == {}
    assert decisions_config(space.default) == {"unfused": []}
    _fusion_config(config)
    with pytest.raises(Bad):
        _fusion_config({"unfused": [], "winograd": [[1]]})


def test_edge_decisions_follow_the_rewrite():
    """An edge after the convolution (bias add -> ReLU) left unfused stays unfused in the rewritten graph."""
    g, feeds = _small_conv(bias_relu=True)
    (node,) = winograd_convs(g)
    order = g.toposort()
    after = [e for e in fusible_edges(g) if order[e[0]].op is Op.Add]
    assert after
    decisions = {Winograd(node, 2): True, after[0]: False}
    new, edges = apply_algorithms(g, decisions)
    new_order = new.toposort()
    assert [(new_order[a].op, new_order[b].op) for (a, b, _), v in edges.items() if not v] == \
           [(order[after[0][0]].op, order[after[0][1]].op)]
    assert len(lower(g, decisions)[1]) == len(lower(g, {Winograd(node, 2): True})[1]) + 1
    got = run_graph(g, feeds, decisions=decisions)[0]
    np.testing.assert_allclose(got, run_reference(g, feeds)[0].reshape(got.shape), atol=1e-5)


class _DirectIsSlow(helpers.FakeBackend):
    """A convolution's direct contraction (3 x 3 taps summed) takes 40 units; every other kernel its speed."""

    def compile(self, items):
        out = super().compile(items)
        for f, (k, _) in zip(out, items):
            if tuple(k.full[i] for i in k.reduce_axes)[-2:] == (3, 3):
                f.schedule = {**f.schedule, "speed": 40}
        return out


def test_tune_picks_winograd_and_compile_applies_it_from_the_cache(tmp_path):
    g, feeds = _small_conv()
    (node,) = winograd_convs(g)
    backend = _DirectIsSlow(modes=("ok",), speeds=(1, 2), virtual=True)
    report = tune(g, backend, 20, sampler="grid", cache=tmp_path / "tuning.db", timeout_s=2.0, plan=helpers.PLAN,
                  storage=f"sqlite:///{tmp_path / 'studies.db'}", workers=1)
    assert report.fusion is not None and report.fusion.convs == 1
    assert report.fusion.winograd and report.fusion.winograd[0][0] == node
    with TuningCache(tmp_path / "tuning.db", readonly=True) as c:
        w = c.best(fusion_key(g), *backend_fingerprints(backend))
        assert w is not None and w.config["winograd"] == report.fusion.winograd
        model = compile_graph(g, backend, cache=c)
    assert len(model.kernels) >= 3 and model.stats.kernels == len(model.kernels)
    np.testing.assert_allclose(model.run(feeds)[0], run_reference(g, feeds)[0].reshape(1, 4, 6, 6), atol=1e-5)


@pytest.mark.parametrize(("n", "c", "m", "hw", "tile"), [
    (1, 128, 128, 16, 4), (1, 128, 96, 16, 4),  # F(4x4): many channels on maps above 14x14
    (2, 96, 128, 16, 4), (1, 64, 64, 16, 4), (1, 40, 96, 16, 4),  # fewer for one image than for a batch, fewer
    (1, 24, 32, 56, 4), (1, 16, 32, 56, 0), (2, 32, 32, 56, 0),  # still on one image's maps of 56x56 and more
    (1, 192, 192, 14, 2), (1, 128, 160, 10, 2),  # F(2x2) on small maps, from as many channels for a batch as for one
    (4, 128, 128, 14, 2), (1, 256, 256, 6, 2), (1, 224, 224, 7, 0),  # image; more on the smallest maps
    (1, 96, 128, 14, 0), (1, 128, 128, 7, 0), (1, 64, 64, 6, 0), (1, 32, 48, 14, 0),  # fewer on a small map
    (2, 64, 64, 16, 0), (1, 32, 96, 16, 0), (1, 32, 256, 16, 0), (1, 16, 16, 6, 0),  # fewer on a larger map; few
])
def test_untuned_compiles_take_winograd_where_the_cost_model_prefers_it(n, c, m, hw, tile):
    """Many channels, fewer for one image's maps above 14x14 and fewer still from 56x56: F(4x4) or, on maps of 14x14
    and less, F(2x2) by default,
    in ``lower`` without decisions, in the search's default point and in an untuned compile; else directly. Either
    way the outputs are the reference's."""
    model, feeds = _conv_model(n, c, m, (hw, hw), seed=3)
    g = load(model).graph
    (node,) = winograd_convs(g)
    (red,) = [r for r in g.toposort() if winograd.eligible(r)]
    assert winograd.default_tile(red) == tile
    by_image = {ByImage(node): True} if tile and n >= winograd.BY_IMAGE_MIN_IMAGES else {}
    assert default_algorithms(g) == ({Winograd(node, tile): True} | by_image if tile else {})
    untuned, kernels = lower(g)
    assert (untuned is g) == (not tile)
    assert len(kernels) == len(lower(g, default_algorithms(g))[1])
    assert len(kernels) > len(lower(g, {})[1]) if tile else len(kernels) == len(partition(g))
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g))
    assert space.encode(space.default)[conv_name(node)] == tile
    got = run_graph(g, feeds)[0]
    want = run_reference(g, feeds)[0].reshape(got.shape)
    assert mismatch(got, want, DType.float32, 9 * c) is None


@pytest.mark.parametrize(("hw", "tiles_as_columns"), [
    (56, True),  # 196 tiles in 224 lanes: each of the 36 products is small, the pack of its tiles not worth them
    (28, False),  # 49 tiles in 64 lanes pad more than WASTE_SMALL: the tiles are the rows, packed per call
])
def test_a_winograd_product_s_tiles_take_the_orientation_measured_for_one_product(sixteen_lanes, hw, tiles_as_columns):
    """On 16-lane vectors, an F(4x4) conv 64 -> 64's batch of 36 products (tiles x channels) is oriented as one of
    them would be, not as one product of their total size: its tiles stay the columns, read in place, where they pad
    less than WASTE_SMALL; the other orientation stays in the search's space; both give the reference's outputs."""
    model, feeds = _conv_model(1, 64, 64, (hw, hw), seed=5)
    g = load(model).graph
    (node,) = winograd_convs(g)
    decisions = {Winograd(node, 4): True}
    rewritten, kernels = lower(g, decisions)
    (product,) = [k for k in kernels if (p := plan_contraction(k)) is not None and len(p.batch) == 2]
    plan = plan_contraction(product)
    tiles = (hw // 4) ** 2
    assert plan.size("batch") == 36 and (math.prod(plan.sizes) >= SWAP_MAX_MACS) is tiles_as_columns
    assert (plan.size("n") == tiles) is tiles_as_columns and plan.b_direct is tiles_as_columns
    be = CPUBackend()
    assert {kn.name: kn.choices for kn in be.space(product)}["swap"] == (False, True)
    want = run_reference(g, feeds)[0]
    for swap in (False, True):
        schedule = be.default_schedule(product) | {"swap": swap, "pack_a": True, "pack_b": True}
        assert be.valid(product, schedule)
        got = run_graph(rewritten, feeds, schedules=[schedule if k is product else None for k in kernels],
                        kernels=kernels)[0]
        assert mismatch(got, want.reshape(got.shape), DType.float32, 9 * 64) is None


@pytest.mark.parametrize("vw", [4, 16])
@pytest.mark.parametrize("tile", winograd.TILES)
def test_the_transforms_load_each_row_once_for_all_their_points(lanes, vw, tile):
    """Each transform's stencil sums a row of its input with a constant matrix's rows (the points: nu, xi, i or j,
    which its input does not read): a row's vectors are loaded once and summed with each point's weights in turn
    (``lum_u``), and at a stride past 2 the tiles' lanes come from whole loads; the conv against the reference, its
    transforms by the stencil on one thread and two."""
    lanes(vw)
    model, feeds = _conv_model(2, 6, 5, (13, 38), seed=7)
    g = load(model).graph
    (node,) = winograd_convs(g)
    decisions = {Winograd(node, tile): True}
    rewritten, kernels = lower(g, decisions)
    be = CPUBackend()
    alpha = tile + 2
    transforms = [k for k in kernels if k.form == "contraction" and plan_stencil(k) is not None
                  and any(b.constant and b.shape in ((alpha, alpha), (tile, alpha)) for b in k.inputs)]
    assert len(transforms) == 4
    want = run_reference(g, feeds)[0]
    for threads in (1, 2):
        schedules = [be.default_schedule(k) | {"impl": "stencil", "threads": threads} if k in transforms else None
                     for k in kernels]
        sources = [be.source(k, s) for k, s in zip(kernels, schedules) if s is not None]
        assert all("lum_u < " in src for src in sources)
        assert any(f"lum_ph{tile}_" in src for src in sources) is (tile > 2)
        got = run_graph(rewritten, feeds, schedules=schedules, kernels=kernels)[0]
        assert mismatch(got, want.reshape(got.shape), DType.float32, 9 * 6) is None


@pytest.mark.parametrize(("c", "tile"), [(64, 0), (128, 4)])
def test_a_channels_last_input_is_convolved_directly_by_default_below_128_channels(c, tile):
    """An NHWC input behind its Transpose (as tf2onnx exports): the transforms would walk its pixels at the
    channels' stride, so the default computes a convolution of fewer than 128 channels directly (the search may
    still take a tile) and one of more by F(4x4), as it does the same convolution over an NCHW input. Either way
    onnxruntime's outputs."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 24, 20, c)).astype(np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) / (3 * c ** 0.5)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": x}, {"w": w})
    g = load(model).graph
    (red,) = [r for r in g.toposort() if winograd.eligible(r)]
    assert winograd.default_tile(red) == tile and bool(default_algorithms(g)) == bool(tile)
    assert winograd_convs(g)  # a point of the search either way
    nchw, _ = _conv_model(1, c, c, (24, 20), seed=8)
    (red,) = [r for r in load(nchw).graph.toposort() if winograd.eligible(r)]
    assert winograd.default_tile(red) == 4
    (want,) = run_ort(model, {"x": x})
    np.testing.assert_allclose(run_graph(g, {"x": x})[0].reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_a_tuned_direct_choice_overrides_the_default(tmp_path):
    """A fusion winner that computes a many-channel convolution directly is what compile takes from the cache,
    found under the key of the imported graph although the untuned lowering rewrote it."""
    model, _ = _conv_model(1, 128, 128, (16, 16), bias_relu=False, seed=4)
    g = load(model).graph
    backend = helpers.FakeBackend(modes=("ok",), speeds=(1,), virtual=True)
    assert len(compile_graph(g, backend).kernels) > 1  # untuned: Winograd
    with TuningCache(tmp_path / "tuning.db") as c:
        c.propose_winner(fusion_key(g), *backend_fingerprints(backend), {"unfused": []}, 100, 200)
    with TuningCache(tmp_path / "tuning.db", readonly=True) as c:
        model = compile_graph(g, backend, cache=c)
    assert len(model.kernels) == 1


@pytest.mark.parametrize("tile", winograd.TILES)
def test_a_batch_image_by_image_runs_one_image_s_kernels_per_image(tile):
    """Image by image, each image's transforms and products are kernels of one image's size that differ only in
    the window of the input they read (the first, whose padded reads reach into the image before only where
    masked): one signature per stage, not per image. The images' outputs are concatenated in place (the copy is
    not launched); the outputs are the reference's and onnxruntime's."""
    n = 3
    model, feeds = _conv_model(n, 8, 6, (10, 9), seed=7)
    g = load(model).graph
    (node,) = winograd_convs(g)
    assert image_convs(g) == [node]
    decisions = {Winograd(node, tile): True, ByImage(node): True}
    new, kernels = lower(g, decisions)
    assert sum(x.op is Op.SumReduce for x in new.toposort()) == 5 * n
    per_image = (len(kernels) - 2) // n  # then the concatenation, and the bias and ReLU that read it
    assert per_image >= 6 and len(kernels) == n * per_image + 2
    assert sorted(Counter(k.signature for k in kernels).values()) == [1, 1] + [n] * per_image
    compiled = compile_graph(g, "cpu", decisions=decisions)
    assert len(compiled.kernels) - len(compiled.launched) == 1
    want = run_reference(g, feeds)[0].reshape(compiled.run(feeds)[0].shape)
    tol = (2e-6 if tile == 2 else 2e-5) * max(1.0, float(np.abs(want).max()))
    for _ in range(2):  # the second run over the buffers the first left
        got = compiled.run(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
        np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=0, atol=tol)
    # without a Winograd decision there is nothing to take image by image
    assert len(lower(g, {ByImage(node): True})[1]) == 1


@pytest.mark.parametrize(("n", "what", "offered"), [
    (2, {}, True), (2, {"group": 2}, True), (1, {}, False),
    (2, {"dilation": 2, "pads": (2, 2, 2, 2)}, False),  # by phases, which are images of their own
])
def test_which_convolutions_may_run_image_by_image(n, what, offered):
    model, feeds = _conv_model(n, 8, 8, (10, 10), **what)
    g = load(model).graph
    (node,) = winograd_convs(g)
    assert image_convs(g) == ([node] if offered else [])
    decisions = {Winograd(node, 4): True, ByImage(node): True}
    got = run_graph(g, feeds, decisions=decisions)[0]
    want = run_reference(g, feeds)[0].reshape(got.shape)
    assert mismatch(got, want, DType.float32, 72) is None


def test_the_search_space_and_the_cache_hold_the_image_by_image_decision():
    model, _ = _conv_model(4, 8, 8, (8, 8), bias_relu=False)
    g = load(model).graph
    edges, (node,) = fusible_edges(g), winograd_convs(g)
    space = FusionSpace(edges, winograd_convs(g), None, [*map(ByImage, image_convs(g))])
    assert space.size == 2 ** len(edges) * (1 + len(winograd.TILES)) * 2 and flag_name(ByImage(node)) in space.grid()
    assert not any(isinstance(k, ByImage) for k in space.default)
    point = space.decode({conv_name(node): 4, flag_name(ByImage(node)): True})
    assert point[ByImage(node)] is True and space.decode(space.encode(point)) == point
    assert ByImage(node) not in space.decode({flag_name(ByImage(node)): True})  # computed directly: no images to split
    config = decisions_config(point)
    assert config == {"unfused": [], "winograd": [[node, 4]], "by_image": [node]}
    assert decisions_from_config(g, config) == {Winograd(node, 4): True, ByImage(node): True}
    assert decisions_from_config(g, config | {"by_image": [10 ** 6, "x"]}) == {Winograd(node, 4): True}
    _fusion_config(config)
    with pytest.raises(Bad):
        _fusion_config(config | {"by_image": [[node]]})


@pytest.mark.parametrize(("n", "c", "tile", "by_image"), [
    (4, 64, 4, True), (8, 128, 4, True),  # from 4 images, as few channels as for one image, image by image
    (2, 64, 0, False), (2, 128, 4, False),  # 2 images: together, from as many channels as a batch needs
    (4, 32, 0, False),  # too few channels either way
])
def test_untuned_compiles_take_a_batch_of_four_or_more_images_image_by_image(n, c, tile, by_image):
    model, feeds = _conv_model(n, c, c, (16, 16), seed=2)
    g = load(model).graph
    (node,) = winograd_convs(g)
    (red,) = [r for r in g.toposort() if winograd.eligible(r)]
    assert winograd.default_tile(red) == tile
    assert (ByImage(node) in default_algorithms(g)) == by_image
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g), [*map(ByImage, image_convs(g))])
    assert space.encode(space.default)[flag_name(ByImage(node))] == by_image
    if by_image:
        assert sum(x.op is Op.SumReduce for x in lower(g)[0].toposort()) == 5 * n
    got = run_graph(g, feeds)[0]
    want = run_reference(g, feeds)[0].reshape(got.shape)
    assert mismatch(got, want, DType.float32, 9 * c) is None


class _BatchesAreSlow(helpers.FakeBackend):
    """A contraction over the whole batch (an axis of 5 images: the direct one, or a Winograd stage over all
    images) takes 1000 units; every other kernel its speed."""

    def compile(self, items):
        out = super().compile(items)
        for f, (k, _) in zip(out, items):
            if k.reduce_axes and 5 in k.full:
                f.schedule = {**f.schedule, "speed": 1000}
        return out


def test_tune_picks_image_by_image_and_compile_applies_it_from_the_cache(tmp_path):
    model, feeds = _conv_model(5, 4, 4, (6, 6), bias_relu=False)
    g = load(model).graph
    (node,) = image_convs(g)
    backend = _BatchesAreSlow(modes=("ok",), speeds=(1, 2), virtual=True)
    report = tune(g, backend, 20, sampler="grid", cache=tmp_path / "tuning.db", timeout_s=2.0, plan=helpers.PLAN,
                  storage=f"sqlite:///{tmp_path / 'studies.db'}", workers=1)
    assert report.fusion is not None and report.fusion.images == 1 and report.fusion.by_image == [node]
    with TuningCache(tmp_path / "tuning.db", readonly=True) as c:
        w = c.best(fusion_key(g), *backend_fingerprints(backend))
        assert w is not None and w.config["by_image"] == [node] and w.config["winograd"][0][0] == node
        compiled = compile_graph(g, backend, cache=c)
    assert not any(k.reduce_axes and 5 in k.full for k in compiled.kernels)
    np.testing.assert_allclose(compiled.run(feeds)[0], run_reference(g, feeds)[0].reshape(5, 4, 6, 6), atol=1e-5)
