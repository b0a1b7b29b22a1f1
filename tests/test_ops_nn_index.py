"""Gathers, OneHot, Tile, Trilu, Pad, DepthToSpace/SpaceToDepth and CumSum against onnxruntime; TensorScatter against
the ONNX reference."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest

from luminal.errors import LuminalError
from luminal.ir import Op

rand = h.rand


D = rand(5, 4, 3)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx", [np.array(2), np.array([[0, -1], [2, 1]]), np.array([3, 0, 1, -2]), np.array([[[1]]])])
@pytest.mark.parametrize("const", [False, True])
def test_gather(axis, idx, const):
    idx = (idx % 3 if axis == -1 else idx).astype(np.int64)
    h.check("Gather", [D, idx], dict(axis=axis), consts={1} if const else set())


def test_gather_int32_indices_and_int_data():
    h.check("Gather", [D, np.array([[1, 2]], np.int32)], dict(axis=1), consts={1})
    h.check("Gather", [np.arange(20, dtype=np.int64).reshape(4, 5), np.array([3, -1])], dict(axis=0))


@pytest.mark.parametrize("axis,ishape", [(1, (3, 4, 2)), (0, (2, 4, 3)), (2, (5, 4, 6)), (-1, (2, 2, 2))])
def test_gather_elements(axis, ishape):
    n = D.shape[axis]
    idx = np.random.default_rng(0).integers(-n, n, ishape)
    h.check("GatherElements", [D, idx], dict(axis=axis))


@pytest.mark.parametrize("data,idx,b", [
    ((5, 4, 3), [[0, 1], [4, 3], [-1, 0]], 0),
    ((5, 4, 3), [[[1], [2]], [[0], [1]]], 0),
    ((5, 4, 3), [[0, 1, 2], [4, 3, 0]], 0),
    ((5, 4, 3), [[1, 2], [3, 0], [0, 0], [1, 1], [2, 2]], 1),
    ((2, 3, 4), [[[1], [2]], [[0], [1]]], 1),
    ((2, 3, 4), [[[0, 1]], [[2, 3]]], 1),
])
def test_gather_nd(data, idx, b):
    h.check("GatherND", [rand(*data), np.array(idx, np.int64)], dict(batch_dims=b))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_hot(axis):
    idx = np.array([[0, 3], [-1, 5]])
    h.check("OneHot", [idx, np.array(4), np.array([0.5, 2.0], np.float32)], dict(axis=axis), consts={1})
    h.check("OneHot", [np.array([1, 2]), np.array([3]), np.array([0, 1])], dict(axis=axis), consts={1})


@pytest.mark.parametrize("reps", [[2, 1, 3], [1, 1, 1], [1, 3, 1]])
def test_tile(reps):
    h.check("Tile", [D, np.array(reps)], consts={1})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 1, -2, 7])
@pytest.mark.parametrize("shape", [(2, 4, 5), (5, 3)])
def test_trilu(upper, k, shape):
    h.check("Trilu", [rand(*shape), None if k is None else np.array(k)], dict(upper=upper), consts={1}, opset=14)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    h.check("Pad", [D, np.array([1, 0, 2, 2, 1, 1])], dict(mode=mode), consts={1}, opset=19)
    h.check("Pad", [D, np.array([2, -1, 0, 1]), None, np.array([1, 2])], dict(mode=mode), consts={1, 3}, opset=19)
    h.check("Pad", [D, np.array([-1, 0, 0, 0, 3, -1])], dict(mode=mode), consts={1}, opset=19)


def test_pad_values_and_old_opset():
    h.check("Pad", [D, np.array([1, 0, 2, 2, 1, 1]), np.array(1.5, np.float32)], consts={1, 2}, opset=13)
    h.check("Pad", [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([1, 1, 0, 2]), np.array(-7)],
            consts={1, 2}, opset=13)
    h.check("Pad", [D], dict(pads=[1, 0, 2, 2, 1, 1], value=2.0), opset=2)
    h.check("Pad", [D], dict(pads=[1, 0, 2, 2, 1, 1], mode="reflect"), opset=2)


def test_pad_reflect_uses_gathers_not_contiguous_copies():
    _, g = h.luminal_run("Pad", [D, np.array([1, 1, 1, 1, 1, 1])], dict(mode="reflect"), opset=19, consts={1})
    counts = h.op_counts(g)
    assert counts.get(Op.Gather) == 3


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    h.check("DepthToSpace", [rand(2, 8, 3, 2)], dict(blocksize=2, mode=mode))
    h.check("DepthToSpace", [rand(1, 18, 2, 2)], dict(blocksize=3, mode=mode))


def test_space_to_depth():
    h.check("SpaceToDepth", [rand(2, 3, 4, 6)], dict(blocksize=2))
    h.check("SpaceToDepth", [rand(1, 2, 6, 3)], dict(blocksize=3))


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum(exclusive, reverse):
    attrs = dict(exclusive=exclusive, reverse=reverse)
    h.check("CumSum", [D, np.array(1)], attrs, consts={1})
    h.check("CumSum", [D, np.array(-1, np.int32)], attrs, consts={1})
    h.check("CumSum", [np.arange(10, dtype=np.int64).reshape(2, 5), np.array(1)], attrs, consts={1})
    h.check("CumSum", [rand(7), np.array(0)], attrs, consts={1})


def test_cumsum_is_a_contraction():
    _, g = h.luminal_run("CumSum", [rand(3, 6), np.array(1)], {}, consts={1})
    counts = h.op_counts(g)
    assert counts.get(Op.Mul) == 1 and counts.get(Op.SumReduce) == 1


def _unique_indices(n: int, ishape: tuple[int, ...], axis: int, seed: int = 0) -> np.ndarray:
    """Indices along ``axis`` without repeats in any line (so reduction 'none' is well defined)."""
    rng = np.random.default_rng(seed)
    lines = int(np.prod(ishape)) // ishape[axis]
    idx = np.stack([rng.permutation(n)[:ishape[axis]] for _ in range(lines)])
    rest = [s for k, s in enumerate(ishape) if k != axis]
    idx = np.moveaxis(idx.reshape([*rest, ishape[axis]]), -1, axis)
    return np.where(rng.random(idx.shape) < 0.3, idx - n, idx).astype(np.int64)  # some negative


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min", "mul"])
@pytest.mark.parametrize("axis,ishape", [(0, (2, 4, 3)), (1, (5, 2, 3)), (2, (3, 2, 2)), (-1, (5, 4, 3))])
def test_scatter_elements(reduction, axis, ishape):
    idx = _unique_indices(D.shape[axis], ishape, axis % 3)
    h.check("ScatterElements", [D, idx, rand(*ishape, seed=3)], dict(axis=axis, reduction=reduction), opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min", "mul"])
@pytest.mark.parametrize("idx", [[[0], [3]], [[1, 2], [4, 0], [-1, 1]], [[0, 1, 2], [4, 3, 0]]])
def test_scatter_nd(reduction, idx):
    idx = np.array(idx)
    upd = rand(*(idx.shape[:-1] + D.shape[idx.shape[-1]:]), seed=4)
    h.check("ScatterND", [D, idx, upd], dict(reduction=reduction), opset=18)


def test_scatter_int_and_legacy():
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    h.check("ScatterND", [data, np.array([[1], [2]]), np.array([[9, 9, 9, 9], [7, 7, 7, 7]])], opset=13)
    h.check("ScatterElements", [data, np.array([[1, 0]]), np.array([[-5, -6]])], dict(axis=1), opset=13)
    h.check("Scatter", [data, np.array([[1, 0]]), np.array([[-5, -6]])], dict(axis=1), opset=9)


def test_scatter_mul_with_zeros_and_signs():
    upd = np.array([[[2.0, -3.0, 0.0], [-1.5, -2.0, 4.0]]], np.float32)
    h.check("ScatterND", [D, np.array([[1], [1]]), upd.reshape(2, 3)[:, None, :].repeat(4, 1)],
            dict(reduction="mul"), opset=18)


def test_scatter_unknown_reduction_refused():
    with pytest.raises(LuminalError, match="reduction"):
        h.luminal_run("ScatterND", [D, np.array([[0]]), rand(1, 4, 3)], dict(reduction="xor"), opset=18)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(exclusive, reverse):
    x = rand(3, 6)
    x[1, 2] = 0.0
    x[2, :] = np.abs(x[2, :]) + 0.5
    attrs = dict(exclusive=exclusive, reverse=reverse)
    h.check_against_onnx_reference("CumProd", [x, np.array(1)], attrs, opset=26, consts={1}, rtol=1e-5, atol=1e-6)
    h.check_against_onnx_reference("CumProd", [x, np.array(0)], attrs, opset=26, consts={1}, rtol=1e-5, atol=1e-6)
    ints = np.array([[1, -2, 3, 0, 2], [2, 2, -1, 3, 1]], np.int64)
    h.check_against_onnx_reference("CumProd", [ints, np.array(-1)], attrs, opset=26, consts={1})


CACHE = rand(2, 3, 6, 4)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("writes", [None, np.array([0, 4]), np.array([3, 5])])
@pytest.mark.parametrize("axis", [-2, 1])
def test_tensor_scatter_writes_each_batch_entrys_rows_at_its_index(mode, writes, axis):
    """The KV-cache update of opset 24: past rows outside the written span stay, circular writes wrap."""
    update = rand(2, 2, 6, 4) if axis == 1 else rand(2, 3, 2, 4)
    if mode == "linear" and writes is not None and writes.max() + 2 > CACHE.shape[axis]:
        writes = writes % (CACHE.shape[axis] - 1)
    h.check_against_onnx_reference("TensorScatter", [CACHE, update, writes], dict(mode=mode, axis=axis), opset=24)


def test_tensor_scatter_refuses_an_update_that_does_not_fit():
    with pytest.raises(LuminalError, match="does not fit"):
        h.luminal_run("TensorScatter", [CACHE, rand(2, 3, 7, 4)], dict(), opset=24)
    with pytest.raises(LuminalError, match="non-batch axis"):
        h.luminal_run("TensorScatter", [CACHE, CACHE], dict(axis=0), opset=24)


def test_tensor_scatter_on_the_c_backend():
    from frontend_util import make_model
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from luminal.frontend_onnx import load
    from luminal.runtime.compile import compile_graph

    feeds = {"past": rand(2, 3, 8, 4), "upd": rand(2, 3, 3, 4), "w": np.array([6, 1])}
    node = helper.make_node("TensorScatter", list(feeds), ["y"], mode="circular", axis=2)
    m = make_model(node, feeds, opset=24)
    (got,) = compile_graph(load(m).graph, "cpu").run(feeds)
    np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(None, feeds)[0])


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("cond", [[True, False, True], [False, True], [False, False, False, False]])
def test_compress_with_a_constant_condition(axis, cond):
    attrs = {} if axis is None else {"axis": axis}
    h.check("Compress", [D, np.array(cond)], attrs, consts={1})


def test_compress_refuses_a_condition_from_the_inputs():
    with pytest.raises(LuminalError, match="size depends on the data of its condition"):
        h.luminal_run("Compress", [D, np.array([True, False])], {"axis": 0}, 1, 17, set())
    with pytest.raises(LuminalError, match="true past the 4 slices"):
        h.luminal_run("Compress", [D, np.array([0, 0, 0, 0, 1], dtype=bool)], {"axis": 1}, 1, 17, {1})


def test_pad_edge_is_views():
    """An edge pad indexes a progression whose ends repeat: each axis reads its first and last elements broadcast
    and the rest as a slice, joined, with no gather; the values as onnxruntime's."""
    g = h.check("Pad", [D, np.array([1, 0, 2, 2, 1, 1])], dict(mode="edge"), consts={1}, opset=19)
    assert Op.Gather not in h.op_counts(g)
