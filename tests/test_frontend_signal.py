"""DFT, STFT and MelWeightMatrix against numpy's FFT and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model, run_ours
from onnx import helper

from luminal.errors import LuminalError

RNG = np.random.default_rng(7)
I64 = np.int64


def _complex(y: np.ndarray) -> np.ndarray:
    return y[..., 0] + 1j * y[..., 1]


def _signal(shape, parts: int) -> np.ndarray:
    return RNG.standard_normal((*shape, parts)).astype(np.float32)


def _dft_model(x, opset, axis, length=None, **attrs):
    """DFT over ``axis``: an attribute before opset 20, an input from it on."""
    inits = {} if length is None else {"n": np.array(length, I64)}
    inputs = ["x", "" if length is None else "n"]
    if opset >= 20:
        inputs.append("axis")
        inits["axis"] = np.array(axis, I64)
    else:
        attrs["axis"] = axis
    while not inputs[-1]:
        inputs.pop()
    return make_model(helper.make_node("DFT", inputs, ["y"], **attrs), {"x": x}, inits, opset=opset)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("axis,length", [(1, None), (2, None), (-2, 4), (1, 9)])
def test_dft_forward_is_numpys_fft(opset, parts, axis, length):
    x = _signal((2, 6, 5), parts)
    (y,) = run_ours(_dft_model(x, opset, axis, length), {"x": x})
    signal = x[..., 0] if parts == 1 else _complex(x)
    np.testing.assert_allclose(_complex(y), np.fft.fft(signal, n=length, axis=axis % 4), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [None, 6, 7])
def test_onesided_forward_and_inverse_are_rfft_and_irfft(length):
    x = _signal((3, 8), 1)
    (y,) = run_ours(_dft_model(x, 17, 1, length, onesided=1), {"x": x})
    np.testing.assert_allclose(_complex(y), np.fft.rfft(x[..., 0], n=length, axis=1), rtol=1e-4, atol=1e-4)
    spectrum = _signal((3, 5), 2)
    (z,) = run_ours(_dft_model(spectrum, 17, 1, length, inverse=1, onesided=1), {"x": spectrum})
    assert z.shape[-1] == 1
    np.testing.assert_allclose(z[..., 0], np.fft.irfft(_complex(spectrum), n=length, axis=1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("parts", [1, 2])
def test_inverse_dft_is_numpys_ifft_and_undoes_the_dft(parts):
    x = _signal((4, 6), parts)
    (y,) = run_ours(_dft_model(x, 20, 1, inverse=1), {"x": x})
    signal = x[..., 0] if parts == 1 else _complex(x)
    np.testing.assert_allclose(_complex(y), np.fft.ifft(signal, axis=1), rtol=1e-4, atol=1e-5)
    nodes = [helper.make_node("DFT", ["x"], ["f"], axis=1), helper.make_node("DFT", ["f"], ["y"], axis=1, inverse=1)]
    (back,) = run_ours(make_model(nodes, {"x": x}, opset=17), {"x": x})
    np.testing.assert_allclose(back[..., 0], x[..., 0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_matches_onnxruntime(opset):
    x = _signal((2, 16, 3), 2)
    assert_matches(_dft_model(x, opset, 1), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("window", [False, True])
def test_stft_matches_onnxruntime(onesided, window):
    x = _signal((2, 40), 1)
    inits = {"step": np.array(6, I64), "len": np.array(16, I64)}
    inputs = ["x", "step", "", "len"]
    if window:
        inits["w"] = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(np.float32)
        inputs = ["x", "step", "w"]
    node = helper.make_node("STFT", inputs, ["y"], onesided=onesided)
    (y,) = assert_matches(make_model(node, {"x": x}, inits), {"x": x}, rtol=1e-4, atol=1e-4)
    frames = np.stack([x[:, f * 6:f * 6 + 16, 0] * (inits["w"] if window else 1) for f in range(1 + (40 - 16) // 6)], 1)
    want = np.fft.rfft(frames, axis=-1) if onesided else np.fft.fft(frames, axis=-1)
    np.testing.assert_allclose(_complex(y), want, rtol=1e-4, atol=1e-4)


def test_stft_reads_a_signal_without_its_last_axis_as_real():
    x = RNG.standard_normal((2, 30)).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "", "len"], ["y"])
    assert_matches(make_model(node, {"x": x}, {"step": np.array(5, I64), "len": np.array(10, I64)}), {"x": x},
                   rtol=1e-4, atol=1e-4)


def test_stft_of_a_complex_signal():
    x = _signal((1, 20), 2)
    node = helper.make_node("STFT", ["x", "step", "", "len"], ["y"], onesided=0)
    (y,) = run_ours(make_model(node, {"x": x}, {"step": np.array(4, I64), "len": np.array(8, I64)}), {"x": x})
    frames = np.stack([_complex(x)[:, f * 4:f * 4 + 8] for f in range(4)], 1)
    np.testing.assert_allclose(_complex(y), np.fft.fft(frames, axis=-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mels,n,rate,low,high", [(8, 64, 8000, 0.0, 4000.0), (20, 400, 16000, 30.0, 7600.0)])
def test_mel_weight_matrix_matches_onnxruntime(mels, n, rate, low, high):
    inits = {"m": np.array(mels, I64), "n": np.array(n, I64), "r": np.array(rate, I64),
             "lo": np.array(low, np.float32), "hi": np.array(high, np.float32)}
    node = helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["y"])
    (y,) = assert_matches(make_model(node, {}, inits), {})
    assert y.shape == (n // 2 + 1, mels) and y.max() == 1


def test_a_spectrogram_on_the_c_backend():
    from luminal.frontend_onnx import load
    from luminal.runtime.compile import compile_graph

    x = _signal((2, 256), 1)
    w = np.hanning(64).astype(np.float32)
    nodes = [helper.make_node("STFT", ["x", "step", "w"], ["s"]),
             helper.make_node("ReduceSumSquare", ["s", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, {"x": x}, {"step": np.array(16, I64), "w": w, "axes": np.array([-1], I64)}, opset=18)
    (got,) = compile_graph(load(model).graph, "cpu").run({"x": x})
    frames = np.stack([x[:, f * 16:f * 16 + 64, 0] * w for f in range(13)], 1)
    np.testing.assert_allclose(got, np.abs(np.fft.rfft(frames, axis=-1)) ** 2, rtol=1e-3, atol=1e-3)


def test_refusals_are_one_clear_line():
    x = _signal((2, 6), 2)
    with pytest.raises(LuminalError, match="DFT over the axis of real and imaginary parts"):
        run_ours(_dft_model(x, 17, 2), {"x": x})
    with pytest.raises(LuminalError, match=r"last axis holds 1 \(real\) or 2"):
        y = _signal((2, 6), 3)
        run_ours(_dft_model(y, 17, 1), {"x": y})
    node = helper.make_node("STFT", ["x", "step", "w", "len"], ["y"])
    inits = {"step": np.array(2, I64), "w": np.ones(4, np.float32), "len": np.array(5, I64)}
    with pytest.raises(LuminalError, match="window of shape"):
        run_ours(make_model(node, {"x": x}, inits), {"x": x})
