"""MatMul, Gemm and Einsum against onnxruntime."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest

from luminal.errors import LuminalError
from luminal.ir import Op

rand = h.rand



@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((4,), (2, 4, 6)), ((3, 4), (4,)),
                                 ((2, 3, 4), (4, 2))])
def test_matmul(a, b):
    g = h.check("MatMul", [rand(*a), rand(*b, seed=1)])
    counts = h.op_counts(g)
    assert counts.get(Op.Mul) == 1 and counts.get(Op.SumReduce) == 1


def test_matmul_1d_1d():
    got, _ = h.luminal_run("MatMul", [rand(5), rand(5, seed=1)], {})
    np.testing.assert_allclose(got["o0"], rand(5) @ rand(5, seed=1), rtol=1e-5)


def test_matmul_int():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    h.check("MatMul", [a, a.T.copy()])


@pytest.mark.parametrize("attrs", [dict(), dict(transA=1), dict(transB=1), dict(beta=0.0),
                                   dict(transA=1, transB=1, alpha=0.5, beta=2.0)])
@pytest.mark.parametrize("cshape", [None, (5,), (3, 1), (1, 5), (3, 5), ()])
def test_gemm(attrs, cshape):
    a = rand(4, 3) if attrs.get("transA") else rand(3, 4)
    b = rand(5, 4, seed=1) if attrs.get("transB") else rand(4, 5, seed=1)
    inputs = [a, b] + ([] if cshape is None else [rand(*cshape, seed=2) if cshape else np.float32(1.5)])
    h.check("Gemm", inputs, attrs, opset=13)


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ij->ji", [(3, 4)]),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 5)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ijk->", [(2, 3, 4)]),
    ("abc,cd->abd", [(2, 1, 3), (3, 4)]),
    ("...i->...", [(2, 3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("Ab,bC->CA", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM)
def test_einsum(eq, shapes):
    h.check("Einsum", [rand(*s, seed=k) for k, s in enumerate(shapes)], dict(equation=eq), opset=12)


def test_einsum_bad_equation():
    with pytest.raises(LuminalError, match="rank"):
        h.luminal_run("Einsum", [rand(3, 4)], dict(equation="ijk->i"), opset=12)
    with pytest.raises(LuminalError, match="operands"):
        h.luminal_run("Einsum", [rand(3, 4)], dict(equation="ij,jk->ik"), opset=12)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (2, 4, 4), (2, 1, 5, 5)])
def test_det(shape):
    h.check("Det", [rand(*shape)], opset=22)


def test_det_of_a_singular_matrix_is_zero():
    x = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 1]], np.float32)
    got, _ = h.luminal_run("Det", [x], {}, opset=22)
    assert abs(float(got["o0"])) < 1e-5


def test_det_beyond_five_by_five_is_refused_in_one_line():
    with pytest.raises(LuminalError, match=r"6x6 matrices: expanded over permutations only up to 5x5") as e:
        h.luminal_run("Det", [rand(6, 6)], {}, opset=22)
    assert "\n" not in str(e.value)
