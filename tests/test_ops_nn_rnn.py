"""LSTM, GRU and RNN against onnxruntime (layout 1 against onnxruntime with transposed tensors)."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest
from codegen_util import compare_cpu

from luminal.errors import LuminalError
from luminal.ir import Op

rand = h.rand

S, B, IN, H = 4, 2, 3, 5


def _inputs(direction: str, full: bool):
    d = 2 if direction == "bidirectional" else 1
    ins = [rand(S, B, IN), rand(d, 4 * H, IN, seed=1) * 0.5, rand(d, 4 * H, H, seed=2) * 0.5]
    if full:
        ins += [rand(d, 8 * H, seed=3), np.full(B, S, np.int32), rand(d, B, H, seed=4), rand(d, B, H, seed=5),
                rand(d, 3 * H, seed=6)]
    return ins


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm(direction, full):
    h.check("LSTM", _inputs(direction, full), dict(hidden_size=H, direction=direction), n_out=3, opset=14,
            consts={4})


def test_lstm_options():
    ins = _inputs("forward", False)
    attrs = dict(hidden_size=H, clip=0.5, input_forget=1, activations=["HardSigmoid", "Tanh", "Relu"],
                 activation_alpha=[0.3], activation_beta=[0.4])
    h.check("LSTM", ins, attrs, n_out=3, opset=14)
    h.check("LSTM", ins, dict(hidden_size=H), n_out=2, opset=14, out_names=["", "yh"])


def test_lstm_layout_1():
    x, w, r, b, _, h0, c0, _p = _inputs("bidirectional", True)
    attrs = dict(hidden_size=H, direction="bidirectional")
    want = h.ort_run("LSTM", [x, w, r, b, None, h0, c0], attrs, {"o0": x, "o1": x, "o2": x}, opset=14)
    t = lambda a: a.transpose(1, 0, 2).copy()
    got, _ = h.luminal_run("LSTM", [t(x), w, r, b, None, t(h0), t(c0)], dict(attrs, layout=1), 3, opset=14)
    np.testing.assert_allclose(got["o0"], want["o0"].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["o1"], t(want["o1"]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["o2"], t(want["o2"]), rtol=1e-4, atol=1e-5)


def test_lstm_projection_is_one_matmul_per_direction():
    _, g = h.luminal_run("LSTM", _inputs("forward", False), dict(hidden_size=H), 3, opset=14)
    # one input projection + one recurrent matmul per step
    assert h.op_counts(g).get(Op.SumReduce) == 1 + S


@pytest.mark.parametrize("known", [True, False])  # a constant, or an input of the model (tf2onnx's masks)
@pytest.mark.parametrize("lens", [[S, 2], [1, 3], [0, S]])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op_type,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_uneven_sequence_lengths(op_type, gates, direction, lens, known):
    ins = _gated_inputs(gates, direction, True) if op_type != "LSTM" else _inputs(direction, True)
    ins[4] = np.array(lens, np.int32)
    n_out = 3 if op_type == "LSTM" else 2
    g = h.check(op_type, ins, dict(hidden_size=H, direction=direction), n_out=n_out, opset=14,
                consts={4} if known else set())
    assert any(n.op is Op.Input and n.attrs.get("name") == "i4" for n in g.toposort()) != known


def test_sequence_lengths_from_the_model_on_the_c_backend():
    ins = _inputs("bidirectional", True)
    ins[4] = np.array([1, 3], np.int32)
    g = h.check("LSTM", ins, dict(hidden_size=H, direction="bidirectional"), n_out=3, opset=14)
    compare_cpu(g, {f"i{k}": a for k, a in enumerate(ins)}, rtol=1e-4, atol=1e-5)


def test_bad_sequence_lengths_refused():
    ins = _inputs("forward", True)
    ins[4] = np.array([S + 1, S], np.int32)
    with pytest.raises(LuminalError, match="sequence_lens"):
        h.luminal_run("LSTM", ins, dict(hidden_size=H), 3, opset=14, consts={4})


def _gated_inputs(gates: int, direction: str, full: bool):
    d = 2 if direction == "bidirectional" else 1
    ins = [rand(S, B, IN), rand(d, gates * H, IN, seed=1) * 0.5, rand(d, gates * H, H, seed=2) * 0.5]
    if full:
        ins += [rand(d, 2 * gates * H, seed=3), np.full(B, S, np.int32), rand(d, B, H, seed=4)]
    return ins


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru(direction, full, linear_before_reset):
    attrs = dict(hidden_size=H, direction=direction, linear_before_reset=linear_before_reset)
    h.check("GRU", _gated_inputs(3, direction, full), attrs, n_out=2, opset=14, consts={4})


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn(direction, full):
    h.check("RNN", _gated_inputs(1, direction, full), dict(hidden_size=H, direction=direction), n_out=2, opset=14,
            consts={4})


def test_gru_rnn_options():
    attrs = dict(hidden_size=H, clip=0.3, activations=["HardSigmoid", "Relu"], activation_alpha=[0.3],
                 activation_beta=[0.4])
    h.check("GRU", _gated_inputs(3, "forward", False), attrs, n_out=2, opset=14)
    h.check("RNN", _gated_inputs(1, "forward", False), dict(hidden_size=H, activations=["Relu"]), n_out=2, opset=14)


def test_gru_layout_1():
    x, w, r, b, _, h0 = _gated_inputs(3, "bidirectional", True)
    attrs = dict(hidden_size=H, direction="bidirectional")
    want = h.ort_run("GRU", [x, w, r, b, None, h0], attrs, {"o0": x, "o1": x}, opset=14)
    t = lambda a: a.transpose(1, 0, 2).copy()
    got, _ = h.luminal_run("GRU", [t(x), w, r, b, None, t(h0)], dict(attrs, layout=1), 2, opset=14)
    np.testing.assert_allclose(got["o0"], want["o0"].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["o1"], t(want["o1"]), rtol=1e-4, atol=1e-5)
