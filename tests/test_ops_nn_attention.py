"""Attention and RotaryEmbedding against onnxruntime and onnx's reference."""

from __future__ import annotations

import numpy as np
import ops_nn_harness as h
import pytest

from luminal.errors import LuminalError

rand = h.rand

B_, QL, KL = 2, 4, 6


def _qkv(qh=4, kvh=4, d=8, dv=5, three_d=False):
    if three_d:
        return rand(B_, QL, qh * d), rand(B_, KL, kvh * d, seed=1), rand(B_, KL, kvh * dv, seed=2)
    return rand(B_, qh, QL, d), rand(B_, kvh, KL, d, seed=1), rand(B_, kvh, KL, dv, seed=2)


def _both(inputs, attrs, n_out=1, out_names=None):
    h.check("Attention", inputs, attrs, n_out=n_out, opset=23, out_names=out_names)
    h.check_against_onnx_reference("Attention", inputs, attrs, opset=23, atol=1e-5)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)])
def test_attention_4d(heads, causal):
    _both(list(_qkv(*heads)), dict(is_causal=causal))


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_3d_gqa(causal):
    _both(list(_qkv(4, 2, three_d=True)), dict(q_num_heads=4, kv_num_heads=2, is_causal=causal))


@pytest.mark.parametrize("mask_shape", [(QL, KL), (B_, 1, QL, KL), (1, 4, QL, KL), (QL, KL - 2)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_masks(mask_shape, kind):
    both = _both if mask_shape[-1] == KL else (  # onnxruntime refuses masks shorter than the keys
        lambda inputs, attrs: h.check_against_onnx_reference("Attention", inputs, attrs, opset=23))
    rng = np.random.default_rng(3)
    if kind == "bool":
        mask = rng.random(mask_shape) < 0.7
        mask[..., 0] = True
    else:
        mask = rng.standard_normal(mask_shape).astype(np.float32)
    both([*_qkv(), mask], dict(scale=0.3))


def test_attention_fully_masked_row_is_zero():
    mask = np.ones((QL, KL), bool)
    mask[1] = False
    got, _ = h.luminal_run("Attention", [*_qkv(), mask], {}, opset=23)
    assert np.all(got["o0"][:, :, 1] == 0) and np.isfinite(got["o0"]).all()
    h.check_against_onnx_reference("Attention", [*_qkv(), mask], {}, opset=23)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_past_kv(causal):
    q, k, v = _qkv(4, 2)
    past_k, past_v = rand(B_, 2, 3, 8, seed=5), rand(B_, 2, 3, 5, seed=6)
    _both([q, k, v, None, past_k, past_v], dict(is_causal=causal), n_out=3)


@pytest.mark.parametrize("softcap", [0.0, 2.0])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_output_and_softcap(mode, softcap):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    mask = rand(QL, KL, seed=7)
    attrs = dict(qk_matmul_output_mode=mode, softcap=softcap)
    inputs = [*_qkv(), mask, None, None]
    names = ["y", "", "", "qk"]
    if softcap == 0:  # onnxruntime reports qk before the softcap; onnx's reference after it
        h.check("Attention", inputs, attrs, n_out=4, opset=23, out_names=names)
    got, _ = h.luminal_run("Attention", inputs, attrs, opset=23, out_names=names)
    node = helper.make_node("Attention", ["q", "k", "v", "m"], names, **attrs)
    want = ReferenceEvaluator(node).run(["y", "qk"], dict(zip("qkvm", [*inputs[:3], mask])))
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["qk"], want[1], rtol=1e-5, atol=1e-5)


def test_attention_bad_heads():
    with pytest.raises(LuminalError, match="heads"):
        h.luminal_run("Attention", list(_qkv(4, 3)), {}, opset=23)


def _rotary_inputs(three_d: bool, dim: int, positions: bool):
    b, s, heads, head = 2, 5, 3, 8
    x = rand(b, s, heads * head) if three_d else rand(b, heads, s, head)
    cache = 7 if positions else s
    cos, sin = rand(cache, dim // 2, seed=1), rand(cache, dim // 2, seed=2)
    pos = np.random.default_rng(0).integers(0, cache, (b, s)) if positions else None
    return [x, cos, sin, pos]


@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("dim", [8, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("three_d", [False, True])
def test_rotary_embedding(three_d, interleaved, dim, positions):
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=dim if dim != 8 else 0)
    if three_d:
        attrs["num_heads"] = 3
    inputs = _rotary_inputs(three_d, dim, positions)
    if not positions:
        inputs[1], inputs[2] = np.broadcast_to(inputs[1], (2, *inputs[1].shape)).copy(), \
            np.broadcast_to(inputs[2], (2, *inputs[2].shape)).copy()
    h.check_against_onnx_reference("RotaryEmbedding", inputs, attrs, opset=23)
    h.check("RotaryEmbedding", inputs, attrs, opset=23)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_update_rules(rule):
    b, t, hq, hkv, dk, dv = 2, 3, 4, 2, 3, 2
    q, k, v = h.rand(b, t, hq * dk), h.rand(b, t, hkv * dk, seed=1), h.rand(b, t, hkv * dv, seed=2)
    decay = -np.abs(h.rand(b, t, hkv, seed=3)) if rule.startswith("gated") else None
    beta = 1 / (1 + np.exp(-h.rand(b, t, hkv, seed=4))) if rule.endswith("delta") else None
    past = h.rand(b, hkv, dk, dv, seed=5)
    h.check("LinearAttention", [q, k, v, past, decay, beta],
            {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}, n_out=2, opset=27)


def test_linear_attention_without_decay_for_a_gated_rule_is_refused_in_one_line():
    with pytest.raises(LuminalError, match="update_rule 'gated' takes a decay and no beta") as e:
        h.luminal_run("LinearAttention", [h.rand(1, 2, 4), h.rand(1, 2, 4), h.rand(1, 2, 4)],
                      {"update_rule": "gated", "q_num_heads": 2, "kv_num_heads": 2}, n_out=2, opset=27)
    assert "\n" not in str(e.value)
