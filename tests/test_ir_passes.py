"""Tensor compositions and passes agree with numpy; passes shrink graphs without changing results."""

import math

import numpy as np
import pytest

from luminal.ir import DType, Graph, Op, Tensor, format_graph, optimize, run_reference
from luminal.ir.graph import Node
from luminal.ir.passes import cse, fold_constants, simplify
from luminal.ir.tensor import FOLD_LIMIT
from luminal.ir.view import View

rng = np.random.default_rng(1)
X = (rng.standard_normal((3, 7)) * 3).astype(np.float32)

UNARY = {
    "exp": (lambda t: t.exp(), np.exp),
    "log": (lambda t: t.abs().add(0.1).log(), lambda x: np.log(np.abs(x) + 0.1)),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "erf": (lambda t: t.erf(), np.vectorize(math.erf)),
    "atan": (lambda t: t.atan(), np.arctan),
    "asin": (lambda t: t.mul(0.1).asin(), lambda x: np.arcsin(x * 0.1)),
    "floor": (lambda t: t.floor(), np.floor),
    "ceil": (lambda t: t.ceil(), np.ceil),
    "round": (lambda t: t.mul(2).round(), lambda x: np.round(x * 2)),
    "abs": (lambda t: t.abs(), np.abs),
    "sign": (lambda t: t.sign(), np.sign),
    "cos": (lambda t: t.cos(), np.cos),
    "softplus": (lambda t: t.softplus(), lambda x: np.log1p(np.exp(x))),
    "pow": (lambda t: t.abs().pow(Tensor.const(np.float32(1.3))), lambda x: np.abs(x) ** 1.3),
    "softmax": (lambda t: t.softmax(-1), lambda x: np.exp(x - x.max(-1, keepdims=True))
                / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "argmax": (lambda t: t.argmax(1, keepdim=False), lambda x: x.argmax(1)),
    "min": (lambda t: t.min((0,)), lambda x: x.min(0)),
    "mean": (lambda t: t.mean((0, 1)), lambda x: x.mean()),
    "matmul": (lambda t: t.matmul(t.transpose()), lambda x: x @ x.T),
    "mod": (lambda t: t.mod(2.5), lambda x: np.fmod(x, 2.5)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_composition_matches_numpy(name):
    build, ref = UNARY[name]
    x = Tensor.input("x", X.shape, DType.float32)
    y = build(x)
    g = Graph([x.node], [y.contiguous().node], ["y"])
    for graph in (g, optimize(g)):
        (out,) = run_reference(graph, {"x": X})
        np.testing.assert_allclose(out, ref(X.astype(np.float64)), rtol=2e-5, atol=2e-6)


def test_erf_error_is_below_1e_6():
    xs = np.linspace(-6, 6, 100001).astype(np.float32)
    x = Tensor.input("x", xs.shape, DType.float32)
    (out,) = run_reference(Graph([x.node], [x.erf().node], ["y"]), {"x": xs})
    assert np.abs(out - np.vectorize(math.erf)(xs.astype(np.float64))).max() <= 1e-6


def test_constant_subgraphs_fold_at_build_time():
    shape = Tensor.const(np.array([2, 3, 4]))
    n = shape.mul(2).add(1).sum()
    assert n.is_const and n.scalar() == 2 * 9 + 3


def test_simplify_removes_identities():
    x = Tensor.input("x", (4,), DType.float32)
    y = x.mul(1.0).add(0.0).recip().recip().mul(2.0).mul(3.0)
    g = optimize(Graph([x.node], [y.contiguous().node], ["y"]))
    counts = g.primitive_counts()
    assert "Recip" not in counts and counts.get("Mul") == 1, format_graph(g)
    (out,) = run_reference(g, {"x": np.arange(4, dtype=np.float32)})
    np.testing.assert_allclose(out, np.arange(4) * 6.0)


@pytest.mark.parametrize("value", [1.0, 2.0])
def test_a_padded_constant_is_no_scalar(value):
    # the zeros the padding reads: x * pad(1) is no x, (x * pad(a)) * 3 no x * 3a, x / pad(2) no x * 0.5
    x = Tensor.input("x", (5,), DType.float32)
    c = Tensor.full((3,), value, DType.float32).pad(((1, 1),))
    assert c.scalar() is None
    ys = [x.mul(c), x.mul(c).mul(3.0), x.div(c)]
    g = optimize(Graph([x.node], [y.contiguous().node for y in ys], ["a", "b", "c"]))
    xv = np.arange(1, 6, dtype=np.float32)
    cv = np.array([0, value, value, value, 0], np.float32)
    with np.errstate(divide="ignore"):
        wants = (xv * cv, xv * cv * 3, xv / cv)
    for got, want in zip(run_reference(g, {"x": xv}), wants):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cse_merges_equal_subexpressions():
    x = Tensor.input("x", (4,), DType.float32)
    a = x.exp().add(x.exp())
    g = Graph([x.node], [a.node], ["y"])
    assert g.primitive_counts()["Exp2"] == 2
    g2 = cse(simplify(fold_constants(g)))
    assert g2.primitive_counts()["Exp2"] == 1


def test_a_fold_stores_no_more_than_a_constant_it_reads():
    """Past FOLD_LIMIT a node of constants folds when it is no larger than one of them (a dequantised weight), and
    stays a kernel when it broadcasts them larger; at build time (Tensor) and in the pass alike."""
    n = FOLD_LIMIT + 8
    big = Tensor.const(np.arange(n, dtype=np.int32) % 251 - 125)
    w = big.cast(DType.float32).mul(0.5)
    assert w.is_const and w.node.shape == (n,)
    np.testing.assert_array_equal(w.numpy(), (np.arange(n) % 251 - 125) * 0.5)
    row = Tensor.const(np.arange(n // 8, dtype=np.float32)).reshape((1, n // 8))
    wide = row.expand((9, n // 8)).add(Tensor.const(np.arange(9, dtype=np.float32)).reshape((9, 1)))
    assert not wide.is_const
    c = big.node
    cast = Node(Op.Cast, ((c, View.contiguous(c.shape)),), c.shape, DType.float32, {})
    (folded,) = fold_constants(Graph([], [cast], ["y"])).outputs
    assert folded.op is Op.Constant and folded.attrs["value"].dtype == np.float32
    wider = Node(Op.Cast, ((c, View((2, n), (0, 1))),), (2, n), DType.float32, {})
    (kept,) = fold_constants(Graph([], [wider], ["y"])).outputs
    assert kept.op is Op.Cast


def test_printer_never_needs_names_from_graph():
    x = Tensor.input("a weird; name", (2,), DType.float32)
    text = format_graph(Graph([x.node], [x.exp().node], ["out"]))
    assert "Exp2" in text and "Input" in text


def test_gather_negative_indices_and_int_ops():
    data = Tensor.input("d", (5, 3), DType.float32)
    idx = Tensor.const(np.array([[-1, 0, 2]]))
    y = data.gather(idx.expand((1, 3)), 0)
    d = rng.standard_normal((5, 3)).astype(np.float32)
    (out,) = run_reference(Graph([data.node], [y.contiguous().node], ["y"]), {"d": d})
    np.testing.assert_array_equal(out, d[[-1, 0, 2], [0, 1, 2]][None])
    q = Tensor.const(np.array([7, -7, 9])).int_div(Tensor.const(np.array([2, 2, -4])))
    assert q.numpy().tolist() == [3, -3, -2]


def test_conv_as_window_contraction_matches_numpy():
    x = Tensor.input("x", (1, 2, 5, 5), DType.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    xp = x.pad(((0, 0), (0, 0), (1, 1), (1, 1)))
    win = xp.window(2, 3, 3, stride=2).window(4, 3, 3, stride=2)  # N C OH KH OW KW
    win = win.permute((0, 2, 4, 1, 3, 5)).reshape((1, 1, 3, 3, 2, 3, 3))
    wt = Tensor.const(w).reshape((1, 3, 1, 1, 2, 3, 3))
    y = win.expand((1, 3, 3, 3, 2, 3, 3)).mul(wt.expand((1, 3, 3, 3, 2, 3, 3))).sum((4, 5, 6))
    g = optimize(Graph([x.node], [y.contiguous().node], ["y"]))
    assert Op.SumReduce.value in g.primitive_counts()
    xv = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    (out,) = run_reference(g, {"x": xv})
    xpv = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expect = np.zeros((1, 3, 3, 3), np.float32)
    for o in range(3):
        for i in range(3):
            for j in range(3):
                expect[0, o, i, j] = (xpv[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o]).sum()
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_comparisons_with_nan_match_numpy():
    xs = np.array([np.nan, 1.0, 2.0, -np.inf], np.float32)
    ys = np.array([1.0, np.nan, 2.0, -np.inf], np.float32)
    x, y = Tensor.input("x", (4,), DType.float32), Tensor.input("y", (4,), DType.float32)
    outs = [x.le(y), x.ge(y), x.eq(y), x.ne(y)]
    got = run_reference(optimize(Graph([x.node, y.node], [o.node for o in outs], list("abcd"))), {"x": xs, "y": ys})
    for g, want in zip(got, [xs <= ys, xs >= ys, xs == ys, xs != ys]):
        np.testing.assert_array_equal(g, want)


def test_scalar_shortcuts_and_folding_keep_shapes():
    two = Tensor.const(np.float32(2.0))
    one = Tensor.const(np.array([3.0], np.float32))
    assert two.div(one).shape == (1,) and two.pow(Tensor.const(np.array([2.0], np.float32))).shape == (1,)
    assert Tensor.const(np.array([1.0, 2.0], np.float32)).shrink([(0, 1)]).reshape(()).exp().shape == ()


def test_half_precision_exp_is_rounded_once():
    xs = np.linspace(-8, 8, 4001).astype(np.float16)
    x = Tensor.input("x", xs.shape, DType.float16)
    (out,) = run_reference(optimize(Graph([x.node], [x.exp().node], ["y"])), {"x": xs})
    want = np.exp(xs.astype(np.float64))
    assert np.abs(out.astype(np.float64) / want - 1).max() <= 2 ** -11


def test_folding_keeps_a_broadcast_constant_small():
    """An elementwise node of constants folds along the dims its sources move along and stays broadcast over the
    rest; values as numpy's, scalars and fully read constants folded as before."""
    row = np.array([-2.0, 3.0, -5.0], np.float32)
    t = Tensor.const(row).reshape((1, 3, 1)).expand((4, 3, 5))
    y = t.lt(0).where(t.add(7.0), t).mul(2.0)
    assert y.is_const and y.node.shape == (1, 3, 1)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to((np.where(row < 0, row + 7, row) * 2)[None, :, None],
                                                             (4, 3, 5)))
    grid = Tensor.const(np.arange(6, dtype=np.float32).reshape(2, 3))
    full = grid.mul(Tensor.const(row).reshape((1, 3)).expand((2, 3)))
    assert full.node.shape == (2, 3)
    np.testing.assert_array_equal(full.numpy(), np.arange(6).reshape(2, 3) * row)
