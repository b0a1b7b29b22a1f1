"""Normalisations, softmax family and activations against onnxruntime."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest

from luminal.errors import LuminalError
from luminal.ir import Op

rand = h.rand


X = rand(2, 4, 5, 6)


def _var(c):
    return np.abs(rand(c, seed=9)) + 0.1


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (3, 4), (2, 4, 3)])
def test_batch_norm(shape, const):
    c = shape[1]
    inputs = [rand(*shape), rand(c, seed=1), rand(c, seed=2), rand(c, seed=3), _var(c)]
    g = h.check("BatchNormalization", inputs, dict(epsilon=1e-3), consts={1, 2, 3, 4} if const else set(), opset=15)
    if const:
        # folded into one per-channel scale and shift
        counts = h.op_counts(g)
        assert counts.get(Op.Mul) == 1 and counts.get(Op.Add) == 1 and Op.Sqrt not in counts


def test_batch_norm_training_stats():
    inputs = [rand(2, 4, 5, 6), rand(4, seed=1), rand(4, seed=2), rand(4, seed=3), _var(4)]
    h.check("BatchNormalization", inputs, dict(training_mode=1, momentum=0.8), n_out=3, opset=15,
            consts={1, 2, 3, 4})


def test_instance_norm():
    h.check("InstanceNormalization", [X, rand(4, seed=1), rand(4, seed=2)], dict(epsilon=1e-4))
    h.check("InstanceNormalization", [rand(2, 3, 7), rand(3, seed=1), rand(3, seed=2)])


@pytest.mark.parametrize("axis", [-1, 1, 2, -2])
def test_layer_norm(axis):
    sh = X.shape[axis:]
    h.check("LayerNormalization", [X, rand(*sh, seed=1), rand(*sh, seed=2)], dict(axis=axis), n_out=3)


def test_layer_norm_no_bias_broadcast_scale():
    h.check("LayerNormalization", [X, rand(6, seed=1), None], dict(epsilon=1e-3))
    h.check("LayerNormalization", [X, rand(1, 6, seed=1)], dict(axis=2), n_out=1)


def test_layer_norm_float16():
    x = X.astype(np.float16)
    h.check("LayerNormalization", [x, rand(6, seed=1).astype(np.float16), rand(6, seed=2).astype(np.float16)],
            dict(), rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("attrs", [dict(size=3, alpha=0.01, beta=0.6, bias=1.5), dict(size=5), dict(size=1)])
def test_lrn(attrs):
    h.check("LRN", [X], attrs)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_family(op_type, opset, axis):
    h.check(op_type, [X], dict(axis=axis), opset=opset)


def test_softmax_defaults_and_ties():
    h.check("Softmax", [X], opset=11)
    h.check("Softmax", [X], opset=13)
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    h.check("Hardmax", [ties], opset=13)
    h.check("LogSoftmax", [np.array([[1e4, -1e4, 0]], np.float32)], opset=13)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = rand(3, 50) * 4
    h.check("Gelu", [x], dict(approximate=approximate), opset=20)


def test_mish():
    h.check("Mish", [rand(4, 30) * 6], opset=18)


def test_dropout_inference():
    h.check("Dropout", [X], n_out=2, opset=13)
    h.check("Dropout", [X, np.array(0.3, np.float32), np.array(False)], n_out=2, opset=13, consts={1, 2})
    h.check("Dropout", [X], dict(ratio=0.2), opset=10)


def test_dropout_training_refused():
    from luminal.frontend_onnx.ops_nn_util import RandomOpError

    # RandomOpError is what the conformance harness counts as unsupported (random output);
    # elsewhere it is an ordinary LuminalError (one line, exit 2)
    assert issubclass(RandomOpError, LuminalError)
    with pytest.raises(RandomOpError, match="training"):
        h.luminal_run("Dropout", [X, np.array(0.3, np.float32), np.array(True)], {}, 2, opset=13, consts={1, 2})
    # a zero ratio keeps every element, so training mode is deterministic
    h.check("Dropout", [X, np.array(0.0, np.float32), np.array(True)], n_out=2, opset=13, consts={1, 2})


@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_rms_norm(axis):
    h.check("RMSNormalization", [X, rand(*X.shape[axis:], seed=1)], dict(axis=axis, epsilon=1e-3), opset=23)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    h.check("GroupNormalization", [X, rand(4, seed=1), rand(4, seed=2)], dict(num_groups=groups), opset=21)


@pytest.mark.parametrize("axes", [None, [1, 3], [0, 1, 2, 3]])
def test_mean_variance_norm(axes):
    h.check("MeanVarianceNormalization", [X], {} if axes is None else dict(axes=axes), opset=13)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_norm(p, axis):
    x = X.copy()
    x[0, 0, 0, :] = 0
    x[:, 0, 0, 0] = 0  # zero norms give zeros, not NaN
    h.check("LpNormalization", [x], dict(p=p, axis=axis), opset=22)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -1])
@pytest.mark.parametrize("op_type", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_losses(op_type, reduction, weighted, ignore):
    x = rand(3, 5, 2, 4)
    target = np.random.default_rng(1).integers(0, 5, (3, 2, 4))
    if ignore is not None:
        target[0, 0, :2] = ignore
    inputs = [x, target] + ([np.abs(rand(5, seed=2)) + 0.1] if weighted else [])
    attrs = dict(reduction=reduction) | ({} if ignore is None else dict(ignore_index=ignore))
    n_out = 2 if op_type == "SoftmaxCrossEntropyLoss" else 1
    h.check(op_type, inputs, attrs, n_out=n_out, opset=13)
