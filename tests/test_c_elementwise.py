"""Generated C elementwise and gather kernels against the reference executor."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_util import compare_cpu, graph

from luminal.codegen.c.check import run_graph
from luminal.codegen.partition import partition
from luminal.ir import DType, Tensor, run_reference

RNG = np.random.default_rng(7)


def _check(outs: list[Tensor], feeds: dict, names=None, rtol=2e-6, atol=2e-6, decisions=None):
    g = graph(list(_INPUTS), outs, names)
    compare_cpu(g, feeds, rtol, atol, decisions=decisions)
    return g


_INPUTS: list[Tensor] = []


def _input(name, shape, dtype=DType.float32):
    t = Tensor.input(name, shape, dtype)
    _INPUTS.append(t)
    return t


@pytest.fixture(autouse=True)
def _fresh_inputs():
    _INPUTS.clear()
    yield
    _INPUTS.clear()


def test_views_broadcasts_and_odd_sizes():
    x = _input("x", (3, 1, 5, 7))
    y = _input("y", (4, 1, 7))
    z = _input("z", (1,))
    outs = [
        x.add(y.reshape((1, 4, 1, 7)).expand((3, 4, 5, 7))),          # broadcast on axes 0 and 2
        x.expand((3, 4, 5, 7)).mul(z.reshape((1, 1, 1, 1)).expand((3, 4, 5, 7))),  # broadcast everywhere
        x.permute((3, 2, 1, 0)).exp(),                                 # transposed read
        x.slice((2, 0, 4, 6), (-1, 1, -2, -3), (3, 1, 3, 3)).sin(),    # negative steps
        x.slice((0, 0, 1, 1), (2, 1, 2, 3), (2, 1, 2, 2)).sqrt(),      # strided slice (nan for < 0)
        x.pad(((1, 0), (0, 2), (2, 1), (0, 3))).add(1.0),              # padded (masked) view
        x.pad(((0, 0), (0, 0), (-1, -2), (1, 1))).recip(),            # negative pad = shrink, then pad
        x.flip(3).log(),
        z.add(2.0),                                                    # size 1
    ]
    feeds = {"x": RNG.standard_normal((3, 1, 5, 7)).astype(np.float32),
             "y": RNG.standard_normal((4, 1, 7)).astype(np.float32),
             "z": np.array([0.5], np.float32)}
    _check(outs, feeds, rtol=3e-6)


def test_reshape_of_transposed_view_unravels():
    x = _input("x", (6, 10))
    t = x.permute((1, 0))  # (10, 6), not reshapeable as a view
    out = t.reshape((4, 15)).mul(2.0).add(t.reshape((4, 15)).tanh())
    feeds = {"x": RNG.standard_normal((6, 10)).astype(np.float32)}
    _check([out], feeds, rtol=1e-5, atol=1e-6)


def test_special_values():
    x = _input("x", (16,))
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, 3e38, -3e38, 128.5, -150.0,
                     200.0, -200.0, 0.5, 2.0], np.float32)
    # float -> int of values beyond the int range is platform-defined in the reference: kept in range
    in_range = x.abs().lt(1e9).where(x, 7.0)
    outs = [x.exp2(), x.log2(), x.sqrt(), x.recip(), x.sin(), x.mod(1.5), x.lt(0.5), x.exp(),
            in_range.cast(DType.int64), in_range.cast(DType.int32), x.cast(DType.bool), x.relu(), x.maximum(1.0),
            x.cast(DType.float16), x.cast(DType.bfloat16)]
    _check(outs, {"x": vals}, rtol=2e-6, atol=0)


@pytest.mark.parametrize("dt", [DType.float32, DType.float16, DType.bfloat16])
def test_round_floor_ceil_exact(dt):
    """Half to even at every tie, on both sides of zero, up to where floats are whole (2**22..2**24), and NaN,
    infinities and the largest floats kept: the reference and the C backend against numpy, exactly."""
    edges = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 2.6, -2.6, -7.5, 123456.5, -123457.5, 0.49999997, -0.49999997,
             1.4999999, 4194304.5, -4194304.5, 4194305.5, 8388607.0, 8388608.0, -8388609.0, 16777216.0, 3e38,
             -3e38, np.inf, -np.inf, np.nan, 0.0, 1e-40, -1e-40, 2.5e-7]
    with np.errstate(over="ignore"):
        v = np.concatenate([np.array(edges, np.float32), RNG.uniform(-300, 300, 2000).astype(np.float32),
                            np.arange(-40, 40, dtype=np.float32) / 4]).astype(dt.np)
    x = _input("x", v.shape, dt)
    outs = [x.round(), x.floor(), x.ceil()]
    g = _check(outs, {"x": v}, rtol=0, atol=0)
    wide = v.astype(np.float32)
    for got, f in zip(run_reference(g, {"x": v}), (np.round, np.floor, np.ceil)):
        np.testing.assert_array_equal(got.astype(np.float32), f(wide).astype(dt.np).astype(np.float32))


def test_exp2_accuracy_dense():
    x = _input("x", (200000,))
    v = np.linspace(-160, 130, 200000, dtype=np.float32)
    _check([x.exp2()], {"x": v}, rtol=3e-7, atol=3e-45)  # denormal results: one ulp


def test_log2_accuracy_dense():
    x = _input("x", (200000,))
    v = np.concatenate([np.logspace(-45, 38, 100000, dtype=np.float64).astype(np.float32),
                        np.linspace(0.5, 2.0, 99990, dtype=np.float32),
                        np.array([0, -0.0, -1, np.inf, -np.inf, np.nan, 1, 2, 1e-45, 3.4e38], np.float32)])
    _check([x.log2()], {"x": v}, rtol=3e-7, atol=2e-7)


def test_integer_and_bool_ops():
    a = _input("a", (5, 6), DType.int64)
    b = _input("b", (5, 6), DType.int32)
    c = _input("c", (5, 6), DType.bool)
    av = RNG.integers(-20, 20, (5, 6)).astype(np.int64)
    av[0, 0] = np.iinfo(np.int64).min
    bv = RNG.integers(-5, 5, (5, 6)).astype(np.int32)
    bv[0, :3] = [0, -1, 0]
    cv = RNG.random((5, 6)) < 0.5
    outs = [a.mod(b.cast(DType.int64)), b.mod(b.add(3)), a.mul(3).add(b.cast(DType.int64)), a.lt(0),
            c.logical_not(), c & a.lt(3), c | b.lt(0), c.where(a, a.neg()), b.cast(DType.float32).mul(0.5),
            c.cast(DType.float32), a.add(np.iinfo(np.int64).max)]
    _check(outs, {"a": av, "b": bv, "c": cv})


def test_iota_and_gather():
    x = _input("x", (4, 9, 3))
    idx = _input("i", (4, 5, 3), DType.int64)
    io = Tensor.iota((4, 5, 3), 1, DType.int64)
    outs = [x.gather(idx, 1).mul(2.0),
            x.gather(idx.add(io).mod(9), 1),
            x.permute((0, 2, 1)).gather(idx.permute((0, 2, 1)), 2).exp(),   # gather through a transposed view
            io.cast(DType.float32).add(Tensor.iota((4, 5, 3), 2, DType.int32).cast(DType.float32))]
    iv = RNG.integers(-3, 12, (4, 5, 3)).astype(np.int64)  # out-of-range indices are clamped
    _check(outs, {"x": RNG.standard_normal((4, 9, 3)).astype(np.float32), "i": iv}, rtol=3e-6)


@pytest.mark.parametrize("dt", [DType.float16, DType.bfloat16])
def test_half_precision_inputs_and_outputs(dt):
    x = _input("x", (7, 33), dt)
    y = _input("y", (33,), DType.float32)
    outs = [x.mul(1.5).add(y.reshape((1, 33)).expand((7, 33)).cast(dt)).tanh(),
            x.cast(DType.float32).exp(), x.sigmoid()]
    xv = RNG.standard_normal((7, 33)).astype(dt.np)
    _check(outs, {"x": xv, "y": RNG.standard_normal(33).astype(np.float32)}, rtol=1e-2, atol=1e-2)


def test_big_elementwise_runs_parallel_and_matches():
    x = _input("x", (300, 1001))
    y = _input("y", (1001,))
    out = x.mul(y.reshape((1, 1001)).expand((300, 1001))).gelu() if hasattr(x, "gelu") else \
        x.mul(y.reshape((1, 1001)).expand((300, 1001))).erf()
    g = _check([out], {"x": RNG.standard_normal((300, 1001)).astype(np.float32),
                       "y": RNG.standard_normal(1001).astype(np.float32)}, rtol=1e-5, atol=2e-6)
    assert [k.form for k in partition(g, {})] == ["elementwise"]


@pytest.mark.parametrize("phases", [2, 3, 4])
def test_short_innermost_dims_are_unrolled_under_the_loop_outside(phases):
    """An output whose innermost dim has at most SMALL_INNER elements (phases interleaved by padding and adding,
    a pixel shuffle's permute, rows of 3 coordinates) loops over the dim outside it, the innermost unrolled; the
    block knob splits that loop (37 rows: odd blocks) and the outputs stay the reference's."""
    import random

    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.c.emit import SMALL_INNER
    from luminal.codegen.c.normalize import normalize

    assert phases <= SMALL_INNER
    parts = [_input(f"p{i}", (2, 5, 37)) for i in range(phases)]
    woven = None
    for i, p in enumerate(parts):  # y[n, c, 37, phases]: part i at phase i
        v = p.reshape((2, 5, 37, 1)).pad(((0, 0), (0, 0), (0, 0), (i, phases - 1 - i)))
        woven = v if woven is None else woven.add(v)
    x = _input("x", (2, phases, 37, 5))
    shuffle = x.permute((0, 2, 3, 1)).exp()  # channels last: (2, 37, 5, phases)
    feeds = {t.node.attrs["name"]: RNG.standard_normal(t.shape).astype(np.float32) for t in _INPUTS}
    g = _check([woven.relu(), shuffle], feeds, rtol=1e-5)
    be = CPUBackend()
    rnd = random.Random(phases)
    for k in partition(g, {}):
        assert k.form == "elementwise" and k.full[-1] == phases
        src = be.source(k, be.default_schedule(k))
        assert f"const int64_t i{len(normalize(k).full) - 1} = {phases - 1};" in src  # the last unrolled copy
        for _ in range(3):
            s = {kn.name: rnd.choice(kn.choices) for kn in be.space(k)}
            if be.valid(k, s):
                compare_cpu(g, feeds, 1e-5, 2e-6, schedules=[s if kk is k else None for kk in partition(g, {})],
                            kernels=partition(g, {}))


def test_short_dims_outside_a_short_innermost_one_are_unrolled_with_it():
    """A permutation of short dims ([.., 5, 3, 2] from [.., 2, 3, 5]: a dilated Winograd conv's phases put back)
    unrolls the short dims outside the innermost too, while all hold at most UNROLLED_MAX elements, under the loop
    over the dim outside them; with only the innermost unrolled it looped over rows of 2. Outputs stay the
    reference's under every block size."""
    from luminal.codegen.c.backend import CPUBackend
    from luminal.codegen.c.emit import SMALL_INNER, UNROLLED_MAX
    from luminal.codegen.c.normalize import normalize

    x = _input("x", (3, 2, 3, 5, 7))
    y = x.permute((0, 4, 3, 2, 1)).add(1.0)  # (3, 7, 5, 3, 2)
    feeds = {"x": RNG.standard_normal((3, 2, 3, 5, 7)).astype(np.float32)}
    g = _check([y], feeds, rtol=1e-6)
    be = CPUBackend()
    (k,) = partition(g, {})
    n = len(normalize(k).full)
    assert UNROLLED_MAX >= 3 * 2 and SMALL_INNER < 5
    src = be.source(k, be.default_schedule(k))
    assert re.search(rf"const int64_t i{n - 2} = 2;\s*const int64_t i{n - 1} = 1;", src)  # the last copy
    assert f"for (int64_t i{n - 3} = j0; i{n - 3} < j1; i{n - 3}++)" in src
    for block in (1, 2, 16384):
        s = be.default_schedule(k) | {"block": block}
        compare_cpu(g, feeds, 1e-6, 0, schedules=[s], kernels=[k])


def test_zero_size_tensors():
    x = _input("x", (0, 5))
    y = _input("y", (3, 0))
    w = _input("w", (0, 4))
    outs = [x.exp(), x.sum((0,)), y.sum((1,)), y.max((0,)), x.add(1.0).mul(2.0)]
    feeds = {"x": np.zeros((0, 5), np.float32), "y": np.zeros((3, 0), np.float32), "w": np.zeros((0, 4), np.float32)}
    _check(outs, feeds)
    # an empty contraction sums nothing (the reference returns uninitialised memory here, so compare with zeros)
    g = graph([y, w], [y.matmul(w)], ["mm"])
    (got,) = run_graph(g, {"y": feeds["y"], "w": feeds["w"]})
    np.testing.assert_array_equal(got, np.zeros((3, 4), np.float32))


def test_random_valid_schedules_agree():
    import random

    from luminal.codegen.c.backend import CPUBackend

    be = CPUBackend()
    x = _input("x", (70, 129))
    y = _input("y", (129, 70))
    outs = [x.mul(y.transpose(0, 1)).exp().add(x.pad(((0, 0), (2, 0))).shrink(((0, 70), (0, 129)))),
            x.sigmoid(), x.lt(0.0).where(x, y.transpose(0, 1).sin())]
    g = graph([x, y], outs, ["a", "b", "c"])
    feeds = {"x": RNG.standard_normal((70, 129)).astype(np.float32),
             "y": RNG.standard_normal((129, 70)).astype(np.float32)}
    want = run_reference(g, feeds)
    ks = partition(g, {})
    rnd = random.Random(2)
    for _ in range(6):
        scheds = []
        for k in ks:
            while True:
                s = {kn.name: rnd.choice(kn.choices) for kn in be.space(k)}
                if be.valid(k, s):
                    break
            scheds.append(s)
        for w, r in zip(want, run_graph(g, feeds, schedules=scheds, kernels=ks)):
            np.testing.assert_allclose(r, w, rtol=3e-6, atol=3e-6)


def test_masked_loads_of_long_rows_are_staged_and_agree():
    """Rows of 32 or more copy their masked loads (pads, the halves of a concat, reversed or strided slices)
    into arrays between the mask's bounds before the loop; a row past STAGE_MAX reads them in place."""
    from luminal.codegen.c.backend import CPUBackend

    x = _input("x", (3, 40, 61))
    w = _input("w", (2, 5000))
    outs = [x.pad(((0, 0), (1, 1), (3, 2)), value=float("-inf")).exp(),     # a max pool's -inf padding
            x.pad(((0, 0), (0, 0), (0, 61))).add(x.pad(((0, 0), (0, 0), (61, 0))).mul(2.0)),  # a concat
            x.flip(2).pad(((0, 0), (0, 0), (5, 5))).slice((0, 0, 1), (1, 1, 2), (3, 40, 35)).neg(),
            w.pad(((0, 0), (7, 9))).sqrt()]
    feeds = {"x": RNG.standard_normal((3, 40, 61)).astype(np.float32),
             "w": RNG.random((2, 5000)).astype(np.float32)}
    g = _check(outs, feeds)
    be = CPUBackend()
    ks = [k for k in partition(g, {}) if k.form == "elementwise"]
    staged = ["for (int64_t j = 0; j < nl; j++)" in be.source(k, be.default_schedule(k)) for k in ks]
    assert staged.count(True) == 3 and staged.count(False) == 1, staged
    want = run_reference(g, feeds)
    for block in (1024, 4096, 1 << 30):
        scheds = [dict(be.default_schedule(k), block=block) if k.form == "elementwise" else be.default_schedule(k)
                  for k in partition(g, {})]
        for wv, r in zip(want, run_graph(g, feeds, schedules=scheds, kernels=partition(g, {}))):
            np.testing.assert_allclose(r, wv, rtol=3e-6, atol=3e-6)


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.int64])
def test_a_row_that_one_concat_input_lives_on_reads_only_that_one(dtype):
    """A concat along an outer axis is a sum of inputs padded by rows: a row that one of them lives on reads it in
    place and takes the others as zeros (DenseNet's concatenations, 3-12x faster), with the epilogue fused; rows
    where several live (two pads that overlap) or none (padding rows of all) run the general loop."""
    from luminal.codegen.c.backend import CPUBackend
    from luminal.frontend_onnx.ops_shape import concat

    xs = [_input(f"x{i}", (2, c, 5, 37), dtype) for i, c in enumerate((3, 1, 4, 2))]
    cat = concat(xs, 1)
    # channel 0 holds x2 alone, 1-3 x0 and x2, 4-9 neither; then padded by 2 and 1 channels
    overlap = xs[0].pad(((0, 0), (1, 6), (0, 0), (0, 0))).add(xs[2].pad(((0, 0), (0, 6), (0, 0), (0, 0))))
    outs = [cat.mul(cat) if dtype is DType.int64 else cat.relu(), overlap.pad(((0, 0), (2, 1), (0, 0), (0, 0)))]
    rng = np.random.default_rng(3)
    feeds = {f"x{i}": (rng.integers(-9, 9, x.shape) if dtype is DType.int64 else rng.standard_normal(x.shape))
             .astype(dtype.np) for i, x in enumerate(xs)}
    g = _check(outs, feeds, rtol=1e-3 if dtype is DType.float16 else 2e-6)
    be = CPUBackend()
    ks = [k for k in partition(g, {}) if k.form == "elementwise" and len(k.inputs) > 1]  # the concat, the overlap
    assert len(ks) == 2 and all("switch (lum_one)" in be.source(k, be.default_schedule(k)) for k in ks)


@pytest.mark.parametrize("n", [1, 2])
def test_transposed_reads_are_copied_by_block_transposes(n):
    """A float32 load that walks the innermost dim at a stride and another dim contiguously (a channels-last value
    into the logical order, the other way, a logical part of a channels-last concatenation) is copied into tiles
    by block transposes (lum_tr), the columns its mask allows only; 21 channels and rows of 37x23 leave partial
    tiles; a float16 load reads in place; random schedules agree with the reference."""
    from codegen_util import random_schedules

    from luminal.codegen.c.backend import CPUBackend
    from luminal.frontend_onnx.ops_shape import concat

    x = _input("x", (n, 37, 23, 21))  # channels last
    y = _input("y", (n, 21, 37, 23))
    z = _input("z", (n, 18, 37, 23))
    h = _input("h", (n, 23, 21, 20), DType.float16)
    outs = [x.permute((0, 3, 1, 2)).add(y).relu(), y.permute((0, 2, 3, 1)).exp(),
            concat([x, z.permute((0, 2, 3, 1))], 3).neg(), h.permute((0, 3, 1, 2)).exp()]
    rng = np.random.default_rng(5)
    feeds = {t.node.attrs["name"]: rng.standard_normal(t.shape).astype(t.dtype.np) for t in _INPUTS}
    g = _check(outs, feeds, rtol=1e-5)
    be = CPUBackend()
    kernels = partition(g, {})
    tiled = {k.outputs[0][1].shape: "lum_tr(" in be.source(k, be.default_schedule(k)) for k in kernels}
    assert tiled == {(n, 21, 37, 23): True, (n, 37, 23, 21): True, (n, 37, 23, 39): True, (n, 20, 23, 21): False}
    cat = next(k for k in kernels if k.outputs[0][1].shape == (n, 37, 23, 39))
    assert "if (hi > lo) lum_tr(" in be.source(cat, be.default_schedule(cat))
    for i, k in enumerate(kernels):
        for s in random_schedules(be, k, 3, seed=i):
            compare_cpu(g, feeds, 1e-5, 2e-6, schedules=[s if kk is k else None for kk in kernels], kernels=kernels)
