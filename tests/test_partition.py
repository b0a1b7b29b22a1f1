"""Partition: default, none and random fusion decisions all compute the reference's results."""

import random

import numpy as np
import pytest

from luminal.codegen.kernel_eval import run_kernel
from luminal.codegen.partition import fusible_edges, partition
from luminal.ir import DType, Graph, Op, Tensor, optimize, run_reference

rng = np.random.default_rng(0)


def _layer(names=("x", "w", "b")):
    x = Tensor.input(names[0], (4, 6, 8), DType.float32)
    w = Tensor.const(rng.standard_normal((8, 8)).astype(np.float32))
    b = Tensor.const(rng.standard_normal((8,)).astype(np.float32))
    h = x.matmul(w).add(b).relu().add(x)
    m = h.mean((-1,), keepdim=True)
    v = h.sub(m).square().mean((-1,), keepdim=True)
    ln = h.sub(m).mul(v.add(1e-5).rsqrt())
    att = ln.matmul(ln.transpose()).mul(0.35).softmax(-1).matmul(ln)
    rms = att.mul(att.square().mean((-1,), keepdim=True).add(1e-6).rsqrt())
    g = x.gather(Tensor.const(np.array([3, 0, 7, 7, 1])).reshape((1, 1, 5)).expand((4, 6, 5)), 2).tanh()
    t = rms.permute((0, 2, 1)).exp()
    outs = [rms, g, t]
    return Graph([x.node], [o.contiguous().node for o in outs], ["a", "g", "t"])


def _run(graph, kernels, feeds):
    vals = {n.id: feeds[n.attrs["name"]] for n in graph.inputs}
    for n in graph.toposort():
        if n.op is Op.Constant:
            vals[n.id] = n.attrs["value"]
    for k in kernels:
        for nid, out in zip(k.output_nodes, run_kernel(k, [vals[i] for i in k.input_nodes])):
            vals[nid] = out
    return [vals[o.id] for o in graph.outputs]


@pytest.fixture(scope="module")
def layer():
    g = optimize(_layer())
    feeds = {"x": rng.standard_normal((4, 6, 8)).astype(np.float32)}
    return g, feeds, run_reference(g, feeds)


def test_default_partition_fuses_norms_and_softmax_into_single_kernels(layer):
    g, feeds, ref = layer
    kernels = partition(g)
    forms = [k.form for k in kernels]
    assert forms.count("contraction") == 3
    assert len(kernels) <= 10, forms
    for out, r in zip(_run(g, kernels, feeds), ref):
        np.testing.assert_allclose(out, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(12))
def test_any_subset_of_fusion_decisions_is_correct(layer, seed):
    g, feeds, ref = layer
    edges = fusible_edges(g)
    r = random.Random(seed)
    decisions = {e: False for e in edges} if seed == 0 else {e: r.random() < 0.5 for e in edges}
    kernels = partition(g, decisions)
    if seed == 0:
        assert len(kernels) > len(partition(g))
    for out, want in zip(_run(g, kernels, feeds), ref):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_signature_ignores_names_and_graph_order():
    a = partition(optimize(_layer(("x", "w", "b"))))
    b = partition(optimize(_layer(("input_ids;drop", "w2", "b2"))))
    assert [k.signature for k in a] == [k.signature for k in b]
    assert len({k.signature for k in a}) > 1


@pytest.mark.parametrize("pixels,channels", [(16, 256), (8, 64), (16, 128)])
def test_a_row_read_by_a_space_of_as_many_elements_is_not_fused_into_the_reduction(pixels, channels):
    """A global average pool over pixels x pixels read by a 1x1 conv to as many output channels as it summed
    pixels: the conv's product has the pool's element count, but broadcasts its row along the output channels,
    not the pooled pixels; fused as if it were the pool's space it summed the wrong elements. Every fusion
    decision gives the reference's outputs (the default's, all edges on, and random subsets)."""
    x = Tensor.input("x", (1, 32, pixels, pixels), DType.float32)
    w = Tensor.const(rng.standard_normal((channels, 32)).astype(np.float32))
    pooled = x.mean((2, 3), keepdim=True).reshape((1, 32))
    g = optimize(Graph([x.node], [pooled.matmul(w.transpose()).relu().contiguous().node], ["y"]))
    feeds = {"x": rng.standard_normal((1, 32, pixels, pixels)).astype(np.float32)}
    want = run_reference(g, feeds)
    edges = fusible_edges(g)
    r = random.Random(pixels)
    for decisions in (None, dict.fromkeys(edges, True), *({e: r.random() < 0.5 for e in edges} for _ in range(4))):
        got = _run(g, partition(g, decisions), feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_elementwise_branches_over_one_space_join_one_kernel():
    """An LSTM cell's gates: a sigmoid or tanh of each quarter of one product, combined into the cell and hidden
    states. Each branch starts its own kernel (it reads the product through a slice); the node that combines
    two of them joins one and takes the other in, so the step is the product and one kernel, not seven. A branch
    read through a slice (not element by element) stays out. Every fusion decision gives the reference's
    outputs."""
    hidden = 16
    h = Tensor.input("h", (1, hidden), DType.float32)
    c = Tensor.input("c", (1, hidden), DType.float32)
    w = Tensor.const(rng.standard_normal((hidden, 4 * hidden)).astype(np.float32))
    gates = h.matmul(w)
    i, o, f, g = (gates.shrink([(0, 1), (k * hidden, (k + 1) * hidden)]) for k in range(4))
    cell = f.sigmoid().mul(c).add(i.sigmoid().mul(g.tanh()))
    out = o.sigmoid().mul(cell.tanh())
    graph = optimize(Graph([h.node, c.node], [out.contiguous().node, cell.contiguous().node], ["h1", "c1"]))
    kernels = partition(graph)
    assert [k.form.name for k in kernels].count("elementwise") == 1 and len(kernels) == 2
    feeds = {"h": rng.standard_normal((1, hidden)).astype(np.float32),
             "c": rng.standard_normal((1, hidden)).astype(np.float32)}
    want = run_reference(graph, feeds)
    edges = fusible_edges(graph)
    r = random.Random(0)
    for decisions in (None, *({e: r.random() < 0.5 for e in edges} for _ in range(8))):
        for got, ref in zip(_run(graph, partition(graph, decisions), feeds), want):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # a branch that a third kernel reads, when the combining node also reads that kernel, is not taken in: taken,
    # the joined kernel would read the third and the third the joined (a cycle)
    x = Tensor.input("x", (4, hidden), DType.float32)
    a, c = x.sin(), x.recip()
    b = a.mul(Tensor.full((4, hidden), 2.0, DType.float32))
    y = c.gt(Tensor.full((4, hidden), 0.0, DType.float32)).where(a, b)
    graph = optimize(Graph([x.node], [y.contiguous().node], ["y"]))
    order = graph.toposort()
    pos = {n.id: i for i, n in enumerate(order)}
    (a_to_b,) = [e for e in fusible_edges(graph) if order[e[0]].op is Op.Sin and order[e[1]].op is Op.Mul]
    kernels = partition(graph, {a_to_b: False})
    made = {n for k in kernels for n in k.output_nodes}
    assert all(n in made or order[pos[n]].op in (Op.Input, Op.Constant) for k in kernels for n in k.input_nodes)
    feeds = {"x": rng.standard_normal((4, hidden)).astype(np.float32)}
    np.testing.assert_allclose(_run(graph, kernels, feeds)[0], run_reference(graph, feeds)[0], rtol=1e-5)
    # a branch read through a slice by the node combining it is not taken in
    x = Tensor.input("x", (1, 2 * hidden), DType.float32)
    a, b = x.exp(), x.tanh()
    mixed = a.shrink([(0, 1), (0, hidden)]).add(b.shrink([(0, 1), (hidden, 2 * hidden)])).add(
        a.shrink([(0, 1), (hidden, 2 * hidden)]))
    graph = optimize(Graph([x.node], [mixed.contiguous().node], ["y"]))
    feeds = {"x": rng.standard_normal((1, 2 * hidden)).astype(np.float32)}
    np.testing.assert_allclose(_run(graph, partition(graph), feeds)[0], run_reference(graph, feeds)[0], rtol=1e-5)


def test_gathers_summed_share_a_kernel():
    """Two lookups added (a token and a position embedding) join one kernel: a gather reads its table from
    another kernel's buffer, so summing two needs no buffer between them; a constant index table is read at its
    own shape, not as a full-size constant folded through its broadcast."""
    ids = Tensor.input("ids", (2, 5), DType.int64)
    tok = Tensor.const(rng.standard_normal((9, 4)).astype(np.float32))
    pos = Tensor.input("pos", (7, 4), DType.float32)
    e_tok = tok.reshape((1, 9, 4)).expand((2, 9, 4)).gather(ids.reshape((2, 5, 1)).expand((2, 5, 4)), 1)
    at = Tensor.const(np.array([0, -1, 2, -3, 4])).reshape((1, 5, 1)).expand((2, 5, 4))
    e_pos = pos.reshape((1, 7, 4)).expand((2, 7, 4)).gather(at, 1)
    g = optimize(Graph([ids.node, pos.node], [e_tok.add(e_pos).node], ["e"]))
    kernels = partition(g)
    assert len(kernels) == 1 and sum(o.op is Op.Gather for o in kernels[0].ops) == 2
    assert max(int(np.prod(b.shape)) for b in kernels[0].inputs if b.dtype is DType.int64 and b.constant) == 5
    feeds = {"ids": np.array([[0, 8, 3, 3, 1], [2, 7, 6, 5, 4]]), "pos": rng.standard_normal((7, 4)).astype(np.float32)}
    (got,), (want,) = _run(g, kernels, feeds), run_reference(g, feeds)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, tok.numpy()[feeds["ids"]] + feeds["pos"][[0, 6, 2, 4, 4]][None])


@pytest.mark.parametrize("idx", [[-1, 4], [-1, -2, 0, 2], [-5, 0, -5]])
def test_constant_gather_index_wraps_at_its_own_shape(idx):
    """Negative constant indices wrap at the table's own shape (one value after wrapping included), and the
    kernels read them as numpy indexes."""
    x = Tensor.input("x", (3, 5), DType.float32)
    i = Tensor.const(np.array(idx)).reshape((1, len(idx))).expand((3, len(idx)))
    g = optimize(Graph([x.node], [x.gather(i, 1).tanh().node], ["y"]))
    feeds = {"x": rng.standard_normal((3, 5)).astype(np.float32)}
    want = np.tanh(feeds["x"][:, idx])
    np.testing.assert_allclose(run_reference(g, feeds)[0], want, rtol=1e-6)
    np.testing.assert_allclose(_run(g, partition(g), feeds)[0], want, rtol=1e-6)
