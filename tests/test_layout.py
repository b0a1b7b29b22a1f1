"""Channels-last as a per-convolution decision (``ir.layout``): views moved onto a permuted storage against numpy,
random layout assignments (with random fusion and Winograd decisions) over a small CNN against onnxruntime on
the C backend, the decision through the search space, a tune with a fake backend, the tuning cache and compile,
and a convolution over a channels-last model input (a transposed read of its rows)."""

from __future__ import annotations

import random

import numpy as np
import optuna
import pytest
import search_util as helpers
from frontend_util import make_model, run_ort
from onnx import helper

from luminal.cache import TuningCache, backend_fingerprints
from luminal.cache.export import _fusion_config
from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import (
    ChannelsLast,
    Winograd,
    apply_algorithms,
    decisions_config,
    decisions_from_config,
    default_algorithms,
    fusible_edges,
    fusion_key,
    layout_convs,
    lower,
    winograd_convs,
)
from luminal.frontend_onnx import load
from luminal.ir import layout, run_reference
from luminal.ir.view import View, rebase
from luminal.ir.winograd import TILES
from luminal.runtime.compile import compile_graph
from luminal.search.space import FusionSpace, flag_name
from luminal.search.tuner import tune


def _moved(rng: random.Random, shape: tuple[int, ...]) -> View:
    """A random chain of movements (pads, slices with negative steps, permutes, windows, broadcasts, flattens)."""
    v = View.contiguous(shape)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["pad", "slice", "permute", "window", "expand", "reshape"])
        if op == "pad":
            v = v.pad(tuple((rng.randint(-1, 3), rng.randint(-1, 3)) if s > 2 else (rng.randint(0, 2), 0)
                            for s in v.shape))
        elif op == "slice":
            starts, steps, sizes = [], [], []
            for s in v.shape:
                step = rng.choice([1, 1, 2, -1])
                size = rng.randint(1, max(1, (s + abs(step) - 1) // abs(step)))
                starts.append(rng.randint(0, s - 1 - (size - 1) * step) if step > 0
                              else rng.randint((size - 1) * -step, s - 1))
                steps.append(step)
                sizes.append(size)
            v = v.slice(tuple(starts), tuple(steps), tuple(sizes))
        elif op == "permute":
            v = v.permute(tuple(rng.sample(range(v.ndim), v.ndim)))
        elif op == "window":
            d = rng.randrange(v.ndim)
            k, st = rng.randint(1, v.shape[d]), rng.randint(1, 2)
            v = v.window(d, (v.shape[d] - k) // st + 1, k, st)
        elif op == "expand" and (r := v.reshape((*v.shape, 1))) is not None:
            v = r.expand((*v.shape, 3))
        elif op == "reshape" and (r := v.reshape((v.numel,))) is not None:
            v = r
    return v


def test_rebase_reads_the_same_elements_from_a_permuted_storage():
    rng = random.Random(0)
    checked = moved = 0
    while checked < 600:
        shape = tuple(rng.randint(1, 6) for _ in range(rng.randint(2, 4)))
        order = tuple(rng.sample(range(len(shape)), len(shape)))
        v = _moved(rng, shape)
        if v.numel == 0 or v.numel > 20000:
            continue
        checked += 1
        data = np.arange(int(np.prod(shape))).reshape(shape)
        onto = View.contiguous(tuple(shape[k] for k in order)).permute(tuple(order.index(k) for k in range(len(order))))
        r = rebase(v, shape, onto)
        if r is None:
            continue
        moved += 1
        idx, valid = v.index_arrays()
        idx2, valid2 = r.index_arrays()
        ok = np.ones(v.shape, bool) if valid is None else valid
        assert (ok == (np.ones(v.shape, bool) if valid2 is None else valid2)).all()
        want = data.ravel()[np.clip(idx, 0, data.size - 1)]
        got = data.transpose(order).ravel()[np.clip(idx2, 0, data.size - 1)]
        assert (got[ok] == want[ok]).all(), (v, r)
    assert moved > 450  # most chains walk whole dims; a flatten does not and gets None


def test_rebase_refuses_a_view_that_merges_dims_the_storage_keeps_apart():
    onto = View.contiguous((2, 5, 7, 6)).permute((0, 3, 1, 2))  # (n, c, h, w) stored as (n, h, w, c)
    assert rebase(View.contiguous((2, 30, 7)), (2, 6, 5, 7), onto) is None  # c and h: apart in the storage
    assert rebase(View.contiguous((2, 6, 5, 7)), (2, 6, 5, 7), onto) == onto
    merged = rebase(View.contiguous((2, 6, 35)), (2, 6, 5, 7), onto)  # h and w: adjacent there
    assert merged == View((2, 6, 35), (210, 1, 6))


def test_rebase_walks_across_dims_the_storage_keeps_adjacent():
    """A view that walks across dims of the logical shape (the channel half of a concatenation reading an
    upsample's (n, c, h, 2, w, 2) value as (n, 2c, 2h, 2w)) is rebased onto a storage that keeps the merged dims
    adjacent and in order ((n, h, 2, w, 2, c)), reading the same elements; onto one that keeps them apart it is
    refused."""
    shape = (2, 3, 4, 2, 5, 2)
    part = View.contiguous((2, 3, 8, 10)).pad(((0, 0), (0, 4), (0, 0), (0, 0)))  # channels 0-2 of 7
    data = np.arange(int(np.prod(shape))).reshape(shape)
    for order, kept in [((0, 2, 3, 4, 5, 1), True), ((0, 2, 4, 3, 5, 1), False)]:
        onto = View.contiguous(tuple(shape[k] for k in order)).permute(tuple(order.index(k) for k in range(6)))
        r = rebase(part, shape, onto)
        assert (r is not None) == kept
        if r is None:
            continue
        idx, valid = part.index_arrays()
        idx2, valid2 = r.index_arrays()
        assert valid is not None and valid2 is not None and (valid == valid2).all()
        want = data.ravel()[np.clip(idx, 0, data.size - 1)]
        got = data.transpose(order).ravel()[np.clip(idx2, 0, data.size - 1)]
        assert (got[valid] == want[valid]).all()


def _cnn(seed: int = 0):
    """A small CNN of odd sizes, batch 2: convs with strides 1 and 2, asymmetric pads, dilation 2, groups 2,
    depthwise (multiplier 1 and 2), 1x1, bias with ReLU / SiLU / HardSwish, a residual add, max and average
    pools, a concatenation, a ConvTranspose, a nearest Resize, a global average pool, a flatten and a Gemm."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        fan = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)

    inits = {"w1": w(24, 5, 3, 3), "b1": w(24, 1)[:, 0], "w2": w(16, 24, 3, 3), "b2": w(16, 1)[:, 0],
             "w3": w(16, 1, 3, 3), "w4": w(16, 16, 1, 1), "b4": w(16, 1)[:, 0], "w5": w(48, 8, 3, 3),
             "w6": w(96, 1, 3, 3), "w7": w(96, 16, 2, 2), "wf": w(10, 96).T.copy(), "bf": w(10, 1)[:, 0],
             "w8": w(32, 24, 3, 3), "scales": np.array([1, 1, 2, 2], np.float32)}
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["a"]),
        n("Conv", ["a", "w8"], ["z"], pads=[1, 1, 1, 1]),
        n("Conv", ["a", "w2", "b2"], ["c2"], pads=[1, 0, 0, 1], strides=[2, 2]),
        n("Sigmoid", ["c2"], ["s2"]),
        n("Mul", ["c2", "s2"], ["b"]),
        n("Conv", ["b", "w3"], ["c3"], pads=[1, 1, 1, 1], group=16),
        n("HardSwish", ["c3"], ["c"]),
        n("Conv", ["c", "w4", "b4"], ["d"]),
        n("Add", ["d", "b"], ["r"]),
        n("Relu", ["r"], ["e"]),
        n("Conv", ["e", "w5"], ["f"], pads=[2, 2, 2, 2], dilations=[2, 2], group=2),
        n("Conv", ["f", "w6"], ["g"], pads=[1, 1, 1, 1], group=48),
        n("MaxPool", ["g"], ["h"], kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["f"], ["i"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        n("Concat", ["f", "i"], ["j"], axis=1),
        n("ConvTranspose", ["j", "w7"], ["k"], strides=[2, 2]),
        n("Resize", ["h", "", "scales"], ["up"], mode="nearest"),
        n("GlobalAveragePool", ["g"], ["l"]),
        n("Flatten", ["l"], ["fl"]),
        n("Gemm", ["fl", "wf", "bf"], ["m"]),
    ]
    x = rng.standard_normal((2, 5, 13, 11)).astype(np.float32)
    model = make_model(nodes, {"x": x}, inits, outputs=["m", "k", "up", "e", "z"])
    return model, {"x": x}


@pytest.fixture(scope="module")
def cnn():
    model, feeds = _cnn()
    return load(model).graph, feeds, run_ort(model, feeds)


def _close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.reshape(b.shape), b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))


def test_every_convolution_may_be_stored_channels_last(cnn):
    g, feeds, want = cnn
    convs = layout_convs(g)
    # the ConvTranspose's contraction too; not the depthwise convs (one and two outputs per input: fewer than
    # MIN_CHANNELS) nor the Gemm (its weight-read axis is last already)
    assert len(convs) == 6
    everything = {ChannelsLast(p): True for p in convs}
    new, _ = apply_algorithms(g, everything)
    assert not any(layout.eligible(n) for n in new.toposort())  # each rewritten: the weight-read axes are innermost now
    _close(run_reference(new, feeds), want)
    _close(run_graph(g, feeds, decisions=everything), want)
    # the first alone: the next two convs (one of them stride 1, computed by a GEMM over a padded copy of its
    # input) read its channels-last output in place
    _close(run_graph(g, feeds, decisions={ChannelsLast(convs[0]): True}), want)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_layout_assignments_give_onnxruntime_s_outputs(cnn, seed):
    """Random channels-last choices, with random fusion edges and Winograd tiles, on the C backend."""
    g, feeds, want = cnn
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g),
                        [*map(ChannelsLast, layout_convs(g))])
    rng = random.Random(seed)
    point = next(p for p in iter(lambda: space.random(rng), None)
                 if 0 < sum(isinstance(d, ChannelsLast) for d in p) < space.count(ChannelsLast))
    _close(run_graph(g, feeds, decisions=point), want)


def test_the_value_follows_its_layout_into_the_epilogue(cnn):
    """A bias, an activation and a residual add after a channels-last conv stay fused into it, the next conv
    reads it in place, and a graph output made from it is copied back to the logical order (the one kernel more)."""
    g, _, _ = cnn
    order = g.toposort()
    named = {order[p].origin[0]: p for p in layout_convs(g) if order[p].origin}
    first, one_by_one = named["c1"], named["d"]
    base = lower(g, {})[1]
    kernels = lower(g, {ChannelsLast(first): True})[1]
    assert len(kernels) == len(base)  # ReLU fused, the stride-2 conv reads it in place
    assert kernels[0].outputs[0][1].shape[-1] == 24 and base[0].outputs[0][1].shape[-1] != 24
    kernels = lower(g, {ChannelsLast(one_by_one): True})[1]
    assert len(kernels) == len(base) + 1
    (conv,) = [k for k in kernels if ("r", "Add") in k.sources]
    assert conv.contraction is not None and ("e", "Relu") in conv.sources and conv.outputs[0][1].shape[-1] == 16
    def copies(ks):
        return [k for k in ks if k.contraction is None and k.outputs[0][1].shape == (2, 16, 6, 5)]

    assert len(copies(kernels)) == 1 and not copies(base)


def test_the_fusion_space_offers_the_decision(cnn):
    g, _, _ = cnn
    convs = layout_convs(g)
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g), [*map(ChannelsLast, convs)])
    assert all(flag_name(ChannelsLast(p)) in space.grid() for p in convs)
    assert not any(isinstance(d, ChannelsLast) for d in space.default)  # untuned: the logical order
    point = space.decode({flag_name(ChannelsLast(convs[1])): True})
    assert point[ChannelsLast(convs[1])] is True and space.decode(space.encode(point)) == point
    config = decisions_config(point)
    assert config == {"unfused": [], "channels_last": [convs[1]]}
    assert decisions_from_config(g, config) == {ChannelsLast(convs[1]): True}
    assert decisions_from_config(g, {"unfused": [], "channels_last": [10 ** 6]}) == {}
    _fusion_config(config)


class _ChannelsFirstIsSlow(helpers.FakeBackend):
    """A kernel summing the conv's products whose output does not end in its channels takes 40 units; every other
    kernel its speed."""

    channels = 16

    def compile(self, items):
        out = super().compile(items)
        for f, (k, _) in zip(out, items):
            kept = [s for s in k.outputs[0][1].shape if s != 1]
            if k.reduce_axes and kept[-1] != self.channels:
                f.schedule = {**f.schedule, "speed": 40}
        return out


def test_tune_picks_channels_last_and_compile_applies_it_from_the_cache(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 5, 7)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": x},
                       {"w": rng.standard_normal((16, 4, 1, 1)).astype(np.float32)})
    g = load(model).graph
    (node,) = layout_convs(g)
    backend = _ChannelsFirstIsSlow(modes=("ok",), speeds=(1, 2), virtual=True)
    report = tune(g, backend, 20, sampler="grid", cache=tmp_path / "tuning.db", timeout_s=2.0, plan=helpers.PLAN,
                  storage=f"sqlite:///{tmp_path / 'studies.db'}", workers=1)
    assert report.fusion is not None and report.fusion.layouts == 1
    assert report.fusion.channels_last == [node]
    with TuningCache(tmp_path / "tuning.db", readonly=True) as c:
        w = c.best(fusion_key(g), *backend_fingerprints(backend))
        assert w is not None and w.config["channels_last"] == [node]
        compiled = compile_graph(g, backend, cache=c)
    assert len(compiled.kernels) == 2  # the conv, then the output's copy back to the logical order
    np.testing.assert_allclose(compiled.run({"x": x})[0], run_reference(g, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("stride", "pads"), [(1, (1, 1, 1, 1)), (2, (1, 0, 1, 1)), (1, (0, 0, 0, 0))])
def test_a_conv_over_a_channels_last_input(stride, pads):
    """An NHWC model input transposed to NCHW (as tf2onnx exports): the conv reads its rows at the channel count's
    stride; the default direct contraction's padded copy of the input must read them so."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 19, 17, 24)).astype(np.float32)
    inits = {"w": (rng.standard_normal((32, 24, 3, 3)) / 15).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["y"], pads=list(pads), strides=[stride, stride])]
    model = make_model(nodes, {"x": x}, inits)
    (want,) = run_ort(model, {"x": x})
    (got,) = run_graph(load(model).graph, {"x": x})
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def _chain(hw: int, then: str, out_too: bool = False):
    """1x1 conv (A) -> ReLU, read by ``then`` ("1x1" or "3x3" conv B) and by an add of B's output, which a 1x1
    conv reads; ``out_too``: A's value is a graph output as well."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 48, hw, hw)).astype(np.float32)
    k = 1 if then == "1x1" else 3
    inits = {"wa": (rng.standard_normal((64, 48, 1, 1)) / 7).astype(np.float32),
             "ba": rng.standard_normal(64).astype(np.float32),
             "wb": (rng.standard_normal((64, 64, k, k)) / 8 / k).astype(np.float32),
             "wc": (rng.standard_normal((16, 64, 1, 1)) / 8).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa", "ba"], ["a"]), n("Relu", ["a"], ["r"]),
             n("Conv", ["r", "wb"], ["b"], pads=[k // 2] * 4), n("Add", ["b", "r"], ["s"]),
             n("Conv", ["s", "wc"], ["y"])]
    model = make_model(nodes, {"x": x}, inits, outputs=["y", "r"] if out_too else ["y"])
    return model, {"x": x}


@pytest.mark.parametrize(("hw", "then", "out_too", "stored"), [
    (7, "1x1", False, True),    # short rows read by a 1x1 conv (and an add that follows the layout)
    (14, "1x1", False, True),
    (28, "1x1", False, True),
    (56, "1x1", False, False),  # long rows: the logical order's vectors are full
    (7, "3x3", False, False),   # a 3x3 reads it
    (7, "1x1", True, False),    # a graph output
])
def test_untuned_compiles_store_channels_last_where_the_cost_model_prefers_it(hw, then, out_too, stored):
    model, feeds = _chain(hw, then, out_too)
    g = load(model).graph
    first = layout_convs(g)[0]
    assert (ChannelsLast(first) in default_algorithms(g)) == stored
    names = [n.origin[0] for n in layout.defaults(g, g.toposort())]
    assert ("a" in names) == stored and ("b" in names) == (then == "1x1" and hw <= 28)  # B: 1x1 read by a 1x1
    want = run_ort(model, feeds)
    _close(run_graph(g, feeds), want)
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g),
                        [*map(ChannelsLast, layout_convs(g))])
    assert space.encode(space.default)[flag_name(ChannelsLast(first))] == stored


def _readers(kind: str):
    """1x1 conv A (64 channels at 7x7) -> ReLU, then ``kind``: "gap" a 1x1 conv and a global average pool read
    it, "pool" a 1x1 conv and a 2x2 average pool, "shuffle" a 1x1 conv through a channel shuffle, "gap only" the
    global pool alone."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 32, 7, 7)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((64, 32, 1, 1)) / 6).astype(np.float32),
             "wb": (rng.standard_normal((16, 64, 1, 1)) / 8).astype(np.float32),
             "split": np.array([1, 4, 16, 7, 7], np.int64), "whole": np.array([1, 64, 7, 7], np.int64)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("Relu", ["a"], ["r"])]
    outputs = ["y"]
    if kind == "shuffle":
        nodes += [n("Reshape", ["r", "split"], ["r5"]), n("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
                  n("Reshape", ["t5", "whole"], ["s"]), n("Conv", ["s", "wb"], ["y"])]
    else:
        nodes += [] if kind == "gap only" else [n("Conv", ["r", "wb"], ["y"])]
        pool = n("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]) if kind == "pool" \
            else n("GlobalAveragePool", ["r"], ["p"])
        nodes.append(pool)
        outputs = ["p"] if kind == "gap only" else ["y", "p"]
    return make_model(nodes, {"x": x}, inits, outputs=outputs), {"x": x}


@pytest.mark.parametrize(("kind", "stored"), [("gap", True), ("pool", False), ("shuffle", False),
                                              ("gap only", False)])
def test_the_default_needs_a_1x1_reader_and_no_copy(kind, stored):
    """A global pool reads a channels-last value as well as any order; a 2x2 pool does not; a channel shuffle
    would read a copy; and without a 1x1 conv reading it there is nothing to gain."""
    model, feeds = _readers(kind)
    g = load(model).graph
    assert bool(layout.defaults(g, g.toposort())) == stored
    kernels = lower(g)[1]
    assert len(kernels) == len(lower(g, {})[1])  # no copy either way
    _close(run_graph(g, feeds), run_ort(model, feeds))


def test_a_grouped_convolution_s_groups_merge_in_place():
    """A grouped conv's output is its (group, channel) axes merged: stored channels-last, the merge is the
    stored view reshaped, so the ReLU after it fuses into the contraction; not the default (grouped)."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 32, 7, 7)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], group=2), helper.make_node("Relu", ["c"], ["y"])],
                       {"x": x}, {"w": (rng.standard_normal((64, 16, 1, 1)) / 4).astype(np.float32)})
    g = load(model).graph
    (node,) = layout_convs(g)
    assert not layout.defaults(g, g.toposort())
    kernels = lower(g, {ChannelsLast(node): True})[1]
    (conv,) = [k for k in kernels if k.contraction is not None]
    assert ("y", "Relu") in conv.sources and conv.outputs[0][1].shape[-1] == 64
    _close(run_graph(g, {"x": x}, decisions={ChannelsLast(node): True}), run_ort(model, {"x": x}))


def test_a_residual_add_fuses_into_the_convolution_before_it():
    """conv B (logical order) + the channels-last value it skipped from: the add follows B, the latest of its
    operands, and fuses into B's kernel reading the stored value through its view (no kernel more)."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 32, 7, 7)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((64, 32, 1, 1)) / 6).astype(np.float32),
             "wb": (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("Relu", ["a"], ["r"]), n("Conv", ["r", "wb"], ["b"], pads=[1] * 4),
             n("Add", ["b", "r"], ["s"]), n("GlobalAveragePool", ["s"], ["y"])]
    model = make_model(nodes, {"x": x}, inits)
    g = load(model).graph
    first = layout_convs(g)[0]
    kernels = lower(g, {ChannelsLast(first): True})[1]
    assert len(kernels) == len(lower(g, {})[1])
    (conv,) = [k for k in kernels if ("b", "Conv") in k.sources]
    assert ("s", "Add") in conv.sources and conv.outputs[0][1].shape[1] == 64  # logical order: channels second
    _close(run_graph(g, {"x": x}, decisions={ChannelsLast(first): True}), run_ort(model, {"x": x}))


def _pooled():
    """3x3 conv (32 channels) -> ReLU, read by a padded 3x3 stride-2 max pool and an average pool with
    asymmetric pads that leaves them out of its count, their sum read by a 1x1 conv."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 8, 15, 13)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((32, 8, 3, 3)) / 8).astype(np.float32),
             "wb": (rng.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
             n("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("AveragePool", ["r"], ["q"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2],
               count_include_pad=0),
             n("Add", ["p", "q"], ["s"]), n("Conv", ["s", "wb"], ["y"])]
    return make_model(nodes, {"x": x}, inits), {"x": x}


def test_pools_follow_the_layout():
    """Pools over a channels-last value are computed channels-last (their vectors along the channels, read and
    written contiguously), the add after them follows, and the next conv reads their output in place: no copy."""
    model, feeds = _pooled()
    g = load(model).graph
    first = layout_convs(g)[0]
    base = lower(g, {})[1]
    kernels = lower(g, {ChannelsLast(first): True})[1]
    assert len(kernels) == len(base)
    pools = [k for k in kernels if k.form == "reduction"]
    assert len(pools) == 2 and all(k.outputs[0][1].shape == (2, 8, 7, 32) for k in pools)
    assert all(k.outputs[0][1].shape == (2, 32, 8, 7) for k in base if k.form == "reduction")
    _close(run_graph(g, feeds, decisions={ChannelsLast(first): True}), run_ort(model, feeds))


@pytest.mark.parametrize(("size", "pad"), [(3, 1), (2, 0)])
def test_a_max_pool_over_a_silu_follows_the_layout(size, pad):
    """A max pool over a product that is no contraction's (a SiLU, x * sigmoid(x)) is computed channels-last, with
    its padding (a Where that fills it) and without."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((1, 8, 14, 14)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((32, 8, 3, 3)) / 8).astype(np.float32),
             "wb": (rng.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]), n("Sigmoid", ["a"], ["g"]), n("Mul", ["a", "g"], ["r"]),
             n("MaxPool", ["r"], ["p"], kernel_shape=[size, size], strides=[2, 2], pads=[pad] * 4),
             n("Conv", ["p", "wb"], ["y"])]
    model = make_model(nodes, {"x": x}, inits)
    g = load(model).graph
    first = layout_convs(g)[0]
    kernels = lower(g, {ChannelsLast(first): True})[1]
    assert [k.outputs[0][1].shape[:4] for k in kernels if k.form == "reduction"] == [(1, 7, 7, 32)]
    _close(run_graph(g, {"x": x}, decisions={ChannelsLast(first): True}), run_ort(model, {"x": x}))


@pytest.mark.parametrize(("c", "k", "stride", "pads", "dil", "n", "w"), [
    (24, 3, 1, [1, 1, 1, 1], 1, 1, 11),   # channels not a multiple of the vector
    (40, 5, 2, [2, 2, 2, 2], 1, 2, 11),   # 5x5 at stride 2, two images, in blocks: two chunks of channels
    (20, 3, 2, [0, 1, 1, 0], 1, 1, 11),   # asymmetric pads
    (33, 3, 1, [2, 2, 2, 2], 2, 1, 11),   # dilation 2
    (72, 5, 1, [2, 1, 2, 3], 1, 1, 30),   # 5x5 in blocks: three chunks of channels, the last overlapping the one
    # before, blocks away from the padding, the columns left over, the padding's (asymmetric)
])
def test_a_depthwise_conv_follows_a_channels_last_input(c, k, stride, pads, dil, n, w):
    """A depthwise conv over a channels-last value is computed channels-last (``layout._channelwise``), as a
    stencil along the channels whose taps' weights are vectors (``stencil._lane_input``): it walked the pixels
    at the channels' stride. Its epilogue (bias, hardswish) follows and the next conv reads it in place (no
    kernel more than in the logical order); with a channel multiplier it stays in the logical order, reading a
    copy of its input in that order (``layout._narrow``: 0.42 -> 0.28 ms for 48 channels at 56x56). Against
    onnxruntime, under its default schedule and on one thread, and compiled, over two runs (the weight's copy made
    on the first)."""
    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.c.stencil import LANE_TAPS, plan_stencil

    rng = np.random.default_rng(16)
    x = rng.standard_normal((n, 8, 13, w)).astype(np.float32)
    for mult in (2, 1):
        inits = {"wa": (rng.standard_normal((c, 8, 1, 1)) / 3).astype(np.float32),
                 "ba": rng.standard_normal(c).astype(np.float32),
                 "wd": (rng.standard_normal((c * mult, 1, k, k)) / k).astype(np.float32),
                 "bd": rng.standard_normal(c * mult).astype(np.float32),
                 "wc": (rng.standard_normal((16, c * mult, 1, 1)) / 6).astype(np.float32)}
        nd = helper.make_node
        nodes = [nd("Conv", ["x", "wa", "ba"], ["a"]), nd("Relu", ["a"], ["r"]),
                 nd("Conv", ["r", "wd", "bd"], ["d"], name="dw", group=c, kernel_shape=[k, k], strides=[stride] * 2,
                    pads=pads, dilations=[dil] * 2),
                 nd("HardSwish", ["d"], ["h"]), nd("Conv", ["h", "wc"], ["y"])]
        model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
        g = load(model).graph
        first = {ChannelsLast(layout_convs(g)[0]): True}
        new, kernels = lower(g, first)
        (dw,) = [kk for kk in kernels if ("dw", "Conv") in kk.sources]
        shape = dw.outputs[0][1].shape
        assert (shape[-1] == c) == (mult == 1) and len(kernels) == len(lower(g, {})[1]) + (mult == 2)
        be = CPUBackend()
        base = be.default_schedule(dw)
        stencil = plan_stencil(dw)
        assert mult == 2 or (stencil is not None and stencil.lanes and base["impl"] == "stencil")
        # a window of at least LANE_TAPS taps runs its pixels in blocks along their columns, each block's vectors
        # of input loaded once for its taps (``stencil.lane_block``)
        assert mult == 2 or ("const float *lum_g0 =" in be.source(dw, base)) == (k * k >= LANE_TAPS)
        want = run_ort(model, feeds)
        for sched in [base, {**base, "threads": 1}] if mult == 1 else [base]:
            scheds = [sched if kk is dw else None for kk in kernels]
            _close(run_graph(new, feeds, schedules=scheds, kernels=kernels), want)
    # the copy of the weight is made on the first run and read on the next, with other inputs
    compiled = compile_graph(g, "cpu", decisions=first)
    for seed in (1, 2):
        other = {"x": np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)}
        _close(compiled.run(other), run_ort(model, other))


def test_a_global_pool_over_a_hardswish_reads_it_where_the_convolution_stored_it():
    """A squeeze-excitation's global average over a hardswish of a channels-last conv: the hardswish's product
    (a Mul a SumReduce reads, but no contraction's: neither operand is a weight) follows the layout into the
    conv's epilogue, and the pool reads that one value in its stored order. Kept in the logical order, the pool
    recomputed the hardswish from the conv's output, reading it twice against its grain (960 channels at 16x16
    inside DeepLabV3, 2 threads: 173 us, 12 now)."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((48, 8, 1, 1)) / 3).astype(np.float32),
             "wb": (rng.standard_normal((48, 48, 1, 1)) / 7).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("HardSwish", ["a"], ["h"]), n("GlobalAveragePool", ["h"], ["p"]),
             n("Conv", ["p", "wb"], ["s"]), n("Sigmoid", ["s"], ["g"]), n("Mul", ["h", "g"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    first = {ChannelsLast(layout_convs(g)[0]): True}
    (pool,) = [k for k in lower(g, first)[1] if k.form == "reduction"]
    assert len(pool.inputs) == 1 and pool.inputs[0].shape == (1, 9, 9, 48)
    _close(run_graph(g, feeds, decisions=first), run_ort(model, feeds))


def test_a_concatenation_of_channels_last_parts_follows_them():
    """Two channels-last convs concatenated along the channels (a SqueezeNet fire module): the concatenation is
    computed channels-last, each part read in place, and the next conv reads it so; with one part in the
    logical order it stays in the logical order."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((2, 8, 11, 9)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((16, 8, 1, 1)) / 3).astype(np.float32),
             "wb": (rng.standard_normal((24, 8, 3, 3)) / 8).astype(np.float32),
             "wc": (rng.standard_normal((16, 40, 1, 1)) / 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("Relu", ["a"], ["ra"]), n("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1]),
             n("Relu", ["b"], ["rb"]), n("Concat", ["ra", "rb"], ["c"], axis=1), n("Conv", ["c", "wc"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    first, second, _ = layout_convs(g)
    both = {ChannelsLast(first): True, ChannelsLast(second): True}

    def concat(decisions):
        (k,) = [k for k in lower(g, decisions)[1] if ("c", "Concat") in k.sources]
        return k.outputs[0][1].shape

    assert concat(both) == (2, 11, 9, 40) and concat({ChannelsLast(first): True}) == (2, 40, 11, 9)
    want = run_ort(model, feeds)
    _close(run_graph(g, feeds, decisions=both), want)
    _close(run_graph(g, feeds, decisions={ChannelsLast(second): True}), want)


def test_tune_measures_every_convolution_channels_last_first(tmp_path):
    """The fusion search's first step measures, after the default, the default with every convolution it may
    store channels-last so stored: a layout of the whole graph, which a sampler setting flags one by one reaches
    only by chance. On a fake backend where only such kernels are fast the tune ends there, and that point is the
    study's second trial."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 16, 5, 7)).astype(np.float32)
    names = ["x", "a", "b", "c", "y"]
    nodes = [helper.make_node("Conv", [names[i], f"w{i}"], [names[i + 1]]) for i in range(4)]
    model = make_model(nodes, {"x": x}, {f"w{i}": (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
                                         for i in range(4)})
    g = load(model).graph
    convs = layout_convs(g)
    assert len(convs) == 4
    space = FusionSpace(fusible_edges(g), winograd_convs(g), default_algorithms(g), [*map(ChannelsLast, convs)])
    assert space.starts[1] == space.default | {ChannelsLast(p): True for p in convs}
    backend = _ChannelsFirstIsSlow(modes=("ok",), speeds=(1, 2), virtual=True)
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    report = tune(g, backend, 10, sampler="random", cache=tmp_path / "tuning.db", timeout_s=2.0, plan=helpers.PLAN,
                  storage=storage, workers=1)
    assert report.fusion is not None and report.fusion.channels_last == convs
    (fusion,) = [s for s in optuna.get_all_study_names(storage) if fusion_key(g) in s]
    trials = optuna.load_study(study_name=fusion, storage=storage).get_trials(deepcopy=False)
    assert len(trials) >= 2 and trials[1].params == space.encode(space.starts[1])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_an_upsample_follows_the_layout_into_a_concatenation(mode):
    """An upsample of a channels-last conv (nearest: a copy of its repeats; linear: its taps' products) is
    computed channels-last, so the concatenation with another channels-last conv at the larger size follows
    them and the 1x1 conv after it reads it in place (an FPN's or a YOLO neck's pattern). It was computed in the
    logical order, reading the conv against its grain, and the concatenation and the next conv with it."""
    rng = np.random.default_rng(18)
    x = rng.standard_normal((2, 8, 10, 12)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((24, 8, 3, 3)) / 8).astype(np.float32),
             "wb": (rng.standard_normal((20, 8, 1, 1)) / 3).astype(np.float32),
             "wc": (rng.standard_normal((16, 44, 1, 1)) / 7).astype(np.float32),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["a"], ["r"]),
             n("Resize", ["r", "", "scales"], ["u"], mode=mode), n("Conv", ["x", "wb"], ["b"]),
             n("Concat", ["u", "b"], ["c"], axis=1), n("Conv", ["c", "wc"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    first, second, _ = layout_convs(g)
    both = {ChannelsLast(first): True, ChannelsLast(second): True}
    kernels = lower(g, both)[1]
    (concat,) = [k for k in kernels if ("c", "Concat") in k.sources]
    upsample = [k for k in kernels if ("u", "Resize") in k.sources]
    assert concat.outputs[0][1].shape == (2, 10, 12, 44) and len(kernels) == len(lower(g, {})[1])
    assert all(k.outputs[0][1].shape[-1] == 24 for k in upsample)  # as the conv stores it, channels innermost
    want = run_ort(model, feeds)
    _close(run_graph(g, feeds, decisions=both), want)
    _close(run_graph(g, feeds, decisions={ChannelsLast(first): True}), want)


def test_a_channel_shuffle_stays_one_copy_into_the_logical_order():
    """A copy that its reader needs in the logical order (a channel shuffle: reshape, transpose, reshape, which
    merges dims a channels-last storage keeps apart) is not computed channels-last: that would be a copy the
    reader copies again."""
    model, feeds = _readers("shuffle")
    g = load(model).graph
    first = {ChannelsLast(layout_convs(g)[0]): True}
    kernels = lower(g, first)[1]
    assert len(kernels) == len(lower(g, {})[1])
    (shuffle,) = [k for k in kernels if k.form == "elementwise"]
    assert shuffle.outputs[0][1].shape == (1, 16, 4, 7, 7)
    _close(run_graph(g, feeds, decisions=first), run_ort(model, feeds))


def test_winograd_transforms_follow_a_channels_last_input():
    """A Winograd conv over a channels-last value: its input transforms (contractions with a constant matrix that
    reads no channel) are computed with the channels innermost (``layout._channelwise``), reading and writing
    vectors of channels where they walked the pixels at the channels' stride (inside the YOLO-style detector, a
    64-channel 80x80 map's first transform 1291 -> 138 us). Against onnxruntime, with F(2x2) and F(4x4)."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal((2, 8, 13, 11)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((24, 8, 1, 1)) / 3).astype(np.float32),
             "wb": (rng.standard_normal((16, 24, 3, 3)) / 14).astype(np.float32),
             "bb": rng.standard_normal(16).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("Relu", ["a"], ["r"]),
             n("Conv", ["r", "wb", "bb"], ["b"], pads=[1, 1, 1, 1]), n("Relu", ["b"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    (node,) = winograd_convs(g)
    want = run_ort(model, feeds)
    for tile in TILES:
        decisions = {ChannelsLast(layout_convs(g)[0]): True, Winograd(node, tile): True}
        kernels = lower(g, decisions)[1]
        transforms = [k for k in kernels if k.form == "contraction" and len(k.inputs) == 2
                      and k.inputs[1].shape == (tile + 2, tile + 2)][:2]
        assert len(transforms) == 2 and all(k.outputs[0][1].shape[-2:] == (24, 1) for k in transforms)
        _close(run_graph(g, feeds, decisions=decisions), want)


@pytest.mark.parametrize(("k", "pad", "out_pad"), [(2, 0, 0), (3, 1, 1), (4, 1, 0)])
def test_a_transposed_conv_stores_its_phases_beside_its_pixels(k, pad, out_pad):
    """A stride-2 ConvTranspose stored channels-last keeps each phase beside the pixel it interleaves with (its
    output (n, h, phase, w, phase, channels): the larger map channels-last as a reshape), so its bias and ReLU
    stay in its kernel and the next conv reads it in place. With its phases beside its channels, the larger
    map was a transposing copy of the whole value (inside the DB text detector, 16 channels at 320x320: 1.9 ms).
    A kernel larger than the stride is one contraction per phase, whose sum follows the same order."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 8, 9, 11)).astype(np.float32)
    inits = {"wa": (rng.standard_normal((16, 8, 1, 1)) / 3).astype(np.float32),
             "wt": (rng.standard_normal((16, 24, k, k)) / 8).astype(np.float32),
             "bt": rng.standard_normal(24).astype(np.float32),
             "wb": (rng.standard_normal((16, 24, 3, 3)) / 14).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "wa"], ["a"]),
             n("ConvTranspose", ["a", "wt", "bt"], ["t"], strides=[2, 2], pads=[pad] * 4, output_padding=[out_pad] * 2),
             n("Relu", ["t"], ["r"]), n("Conv", ["r", "wb"], ["y"], pads=[1, 1, 1, 1])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    convs = layout_convs(g)
    decisions = {ChannelsLast(c): True for c in convs}
    kernels = lower(g, decisions)[1]
    assert len(kernels) == len(lower(g, {})[1]) + 1  # the graph output's copy into the logical order
    (up,) = [kk for kk in kernels if ("r", "Relu") in kk.sources]
    assert up.outputs[0][1].shape[-1] == 24 and up.outputs[0][1].numel == 2 * 18 * 22 * 24
    _close(run_graph(g, feeds, decisions=decisions), run_ort(model, feeds))


def test_a_narrow_head_over_a_channels_last_value_reads_a_logical_copy():
    """A 3x3 conv of one output channel (a segmentation head) after a channels-last conv stays in the logical order
    and reads a copy of its input in that order, made once (``layout._narrow``): over the channels-last value its
    windows were packed by gathers at the channels' stride. A 1x1 head reads the value in place (its K, the
    channels, contiguous)."""
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 8, 13, 11)).astype(np.float32)
    for k in (3, 1):
        inits = {"wa": (rng.standard_normal((24, 8, 3, 3)) / 8).astype(np.float32),
                 "wb": (rng.standard_normal((1, 24, k, k)) / 14).astype(np.float32)}
        n = helper.make_node
        nodes = [n("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
                 n("Conv", ["r", "wb"], ["y"], pads=[k // 2] * 4)]
        model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
        g = load(model).graph
        first = {ChannelsLast(layout_convs(g)[0]): True}
        kernels = lower(g, first)[1]
        copies = [kk for kk in kernels if kk.form == "elementwise"]
        assert [kk.outputs[0][1].shape for kk in copies] == ([(2, 24, 13, 11)] if k == 3 else [])
        _close(run_graph(g, feeds, decisions=first), run_ort(model, feeds))


@pytest.mark.parametrize(("multiplier", "out_too", "stored"), [(1, False, True), (2, False, False),
                                                               (1, True, False)])
def test_the_default_stores_a_1x1_conv_channels_last_for_the_depthwise_conv_after_it(multiplier, out_too, stored):
    """1x1 expansion -> hardswish -> depthwise 3x3 (stride 2, its windows padded) -> global-pool gate (a
    squeeze-excitation) -> 1x1 projection, at 14x14: the depthwise conv follows the expansion's layout, so the
    expansion is stored channels-last by default; not where the depthwise conv has a channel multiplier (which
    stays in the logical order) or its value is a graph output."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((1, 24, 14, 14)).astype(np.float32)
    c = 72
    inits = {"we": (rng.standard_normal((c, 24, 1, 1)) / 5).astype(np.float32),
             "wd": (rng.standard_normal((c * multiplier, 1, 3, 3)) / 3).astype(np.float32),
             "bd": rng.standard_normal(c * multiplier).astype(np.float32),
             "ws": (rng.standard_normal((c * multiplier, c * multiplier, 1, 1)) / 9).astype(np.float32),
             "wp": (rng.standard_normal((40, c * multiplier, 1, 1)) / 9).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "we"], ["e"]), n("HardSwish", ["e"], ["h"]),
             n("Conv", ["h", "wd", "bd"], ["d"], group=c, pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["d"], ["r"]),
             n("GlobalAveragePool", ["r"], ["p"]), n("Conv", ["p", "ws"], ["q"]), n("Sigmoid", ["q"], ["gate"]),
             n("Mul", ["r", "gate"], ["s"]), n("Conv", ["s", "wp"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits, outputs=["y", "r"] if out_too else ["y"]), {"x": x}
    g = load(model).graph
    names = [nd.origin[0] for nd in layout.defaults(g, g.toposort())]
    assert ("e" in names) == stored, names
    kernels = lower(g)[1]
    assert len(kernels) == len(lower(g, {})[1])  # no copy either way
    # stored so, the depthwise conv's kernel writes the channels innermost
    assert any(k.outputs[0][1].shape == (1, 7, 7, c * multiplier) for k in kernels) == stored
    _close(run_graph(g, feeds), run_ort(model, feeds))


def test_the_default_stores_convs_channels_last_that_an_exporter_reads_transposed():
    """tf2onnx's graph of a Keras MobileNetV3, its transpositions left in place: an NHWC input, and each conv
    between a Transpose to NCHW and one back to NHWC, its bias or batch norm and activation after the latter.
    The 1x1 convs are stored channels-last by default and the depthwise conv over their NHWC value computes its
    channels innermost, so every batch norm and activation fuses into its conv; the stem over the image's three
    channels stays in the logical order (its epilogue a pass of its own)."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, 30, 30, 3)).astype(np.float32)
    c = 48
    inits = {"w0": (rng.standard_normal((16, 3, 3, 3)) / 5).astype(np.float32),
             "we": (rng.standard_normal((c, 16, 1, 1)) / 4).astype(np.float32),
             "wd": (rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32),
             "wp": (rng.standard_normal((24, c, 1, 1)) / 7).astype(np.float32),
             **{f"b{i}": rng.standard_normal(n).astype(np.float32) for i, n in enumerate((16, c, c, 24))},
             "s2": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    n = helper.make_node
    to_nchw, to_nhwc = {"perm": [0, 3, 1, 2]}, {"perm": [0, 2, 3, 1]}
    nodes = [n("Transpose", ["x"], ["x1"], **to_nchw), n("Conv", ["x1", "w0"], ["c0"], strides=[2, 2], pads=[1] * 4),
             n("Transpose", ["c0"], ["t0"], **to_nhwc), n("Add", ["t0", "b0"], ["a0"]), n("HardSwish", ["a0"], ["h0"]),
             n("Transpose", ["h0"], ["x2"], **to_nchw), n("Conv", ["x2", "we"], ["c1"]),
             n("Transpose", ["c1"], ["t1"], **to_nhwc), n("Add", ["t1", "b1"], ["a1"]), n("Relu", ["a1"], ["r1"]),
             n("Transpose", ["r1"], ["x3"], **to_nchw),
             n("Conv", ["x3", "wd"], ["c2"], group=c, strides=[2, 2], pads=[1] * 4),
             n("Transpose", ["c2"], ["t2"], **to_nhwc), n("Mul", ["t2", "s2"], ["m2"]), n("Add", ["m2", "b2"], ["a2"]),
             n("Relu", ["a2"], ["r2"]), n("Transpose", ["r2"], ["x4"], **to_nchw), n("Conv", ["x4", "wp"], ["c3"]),
             n("Transpose", ["c3"], ["t3"], **to_nhwc), n("Add", ["t3", "b3"], ["y"])]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    names = [nd.origin[0] for nd in layout.defaults(g, g.toposort())]
    assert sorted(names) == ["c1", "c3"], names
    kernels = lower(g)[1]
    assert [k.form for k in kernels] == ["contraction", "elementwise", "contraction", "contraction", "contraction"]
    _close(run_graph(g, feeds), run_ort(model, feeds))


@pytest.mark.parametrize("variant", ["bias_and_relu", "read_in_order_too", "full_size_operand", "nchw_input"])
def test_a_conv_whose_epilogue_precedes_the_exporters_transpose_is_stored_channels_last(variant):
    """A conv over an NHWC input whose bias (ONNX's Conv bias) and ReLU come before the Transpose back to NHWC, then
    a residual add of the NHWC input: the bias and ReLU follow the stored order, so the conv is stored channels-last
    by default and the residual fuses into it (one kernel). Not where the ReLU's value is also read in the logical
    order (a graph output), nor where an elementwise node before the Transpose takes another operand as large (an
    NCHW residual): those would read it transposed instead; nor over an NCHW input, whose rows the conv would then
    read across the channels' stride. The reference's outputs either way."""
    rng = np.random.default_rng(41)
    c = 32
    nchw = variant == "nchw_input"
    x = rng.standard_normal((1, c, 12, 12) if nchw else (1, 12, 12, c)).astype(np.float32)
    inits = {"w": (rng.standard_normal((c, c, 1, 1)) / 6).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32)}
    n = helper.make_node
    to_nchw, to_nhwc = {"perm": [0, 3, 1, 2]}, {"perm": [0, 2, 3, 1]}
    nodes = [n("Transpose", ["x"], ["x0"], **to_nhwc), n("Transpose", ["x0"], ["x1"], **to_nchw)] if nchw else \
        [n("Transpose", ["x"], ["x1"], **to_nchw), n("Identity", ["x"], ["x0"])]
    nodes.append(n("Conv", ["x1", "w", "b"], ["c"]))
    nodes += [n("Add", ["c", "x1"], ["a"]), n("Relu", ["a"], ["r"])] if variant == "full_size_operand" else \
        [n("Relu", ["c"], ["r"])]
    nodes += [n("Transpose", ["r"], ["t"], **to_nhwc), n("Add", ["t", "x0"], ["y"])]
    outputs = ["y", "r"] if variant == "read_in_order_too" else ["y"]
    model, feeds = make_model(nodes, {"x": x}, inits, outputs=outputs), {"x": x}
    g = load(model).graph
    names = [nd.origin[0] for nd in layout.defaults(g, g.toposort())]
    assert names == (["c"] if variant == "bias_and_relu" else []), names
    forms = [k.form for k in lower(g)[1]]
    assert (forms == ["contraction"]) == (variant == "bias_and_relu"), forms
    _close(run_graph(g, feeds), run_ort(model, feeds))


def test_a_depthwise_conv_over_a_norm_moved_channels_last_computes_channels_innermost():
    """ConvNeXt's first stage: its stem's LayerNorm over the channels moved last (permute, norm, permute back),
    then a depthwise 7x7 conv. No conv is stored channels-last, yet the depthwise conv reads a value stored with
    its channels innermost, so it computes them innermost too (1.59 -> 0.37 ms at 56x56, 96 channels), and the
    next norm over its channels reads its value in order."""
    rng = np.random.default_rng(37)
    c = 32
    x = rng.standard_normal((1, 3, 48, 48)).astype(np.float32)
    inits = {"ws": (rng.standard_normal((c, 3, 4, 4)) / 7).astype(np.float32),
             "g": rng.uniform(0.5, 1.5, c).astype(np.float32), "b": rng.standard_normal(c).astype(np.float32),
             "wd": (rng.standard_normal((c, 1, 7, 7)) / 7).astype(np.float32),
             "bd": rng.standard_normal(c).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "ws"], ["s"], strides=[4, 4]), n("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
             n("LayerNormalization", ["t", "g", "b"], ["ln"], axis=-1, epsilon=1e-6),
             n("Transpose", ["ln"], ["u"], perm=[0, 3, 1, 2]),
             n("Conv", ["u", "wd", "bd"], ["d"], group=c, pads=[3] * 4),
             n("Transpose", ["d"], ["e"], perm=[0, 2, 3, 1]),
             n("LayerNormalization", ["e", "g", "b"], ["y"], axis=-1, epsilon=1e-6)]
    model, feeds = make_model(nodes, {"x": x}, inits), {"x": x}
    g = load(model).graph
    assert not layout.defaults(g, g.toposort())
    kernels = lower(g)[1]
    assert any(k.outputs[0][1].shape == (1, 12, 12, c) for k in kernels if k.form == "contraction")
    _close(run_graph(g, feeds), run_ort(model, feeds))
