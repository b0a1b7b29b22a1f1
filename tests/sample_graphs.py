"""Small example graphs built with the IR directly: a transformer layer and a CNN.

Used by kernel reports, AOT checks and tests when no exported ONNX model is at hand.
"""

from __future__ import annotations

import numpy as np

from luminal.ir import DType, Graph, Tensor, optimize


def _w(rng, *shape, scale: float | None = None, dtype: DType = DType.float32) -> Tensor:
    scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
    return Tensor.const((rng.standard_normal(shape) * scale).astype(dtype.np))


def _layernorm(x: Tensor, g: Tensor, b: Tensor) -> Tensor:
    m = x.mean((-1,), keepdim=True)
    v = x.sub(m).square().mean((-1,), keepdim=True)
    return x.sub(m).mul(v.add(1e-5).rsqrt()).mul(g).add(b)


def transformer_layer(batch: int = 1, seq: int = 16, dim: int = 32, heads: int = 2,
                      dtype: DType = DType.float32, seed: int = 0) -> Graph:
    """Pre-norm encoder layer: LN, QKV, softmax attention, out proj + residual, LN, GELU MLP + residual."""
    rng = np.random.default_rng(seed)
    hd = dim // heads
    x = inp = Tensor.input("x", (batch, seq, dim), dtype)
    ones, zeros = Tensor.const(np.ones(dim, dtype.np)), Tensor.const(np.zeros(dim, dtype.np))
    h = _layernorm(x, ones, zeros)
    qkv = h.matmul(_w(rng, dim, 3 * dim, dtype=dtype)).add(_w(rng, 3 * dim, scale=0.1, dtype=dtype))
    qkv = qkv.reshape((batch, seq, 3, heads, hd)).permute((2, 0, 3, 1, 4))
    q, k, v = (qkv.shrink(tuple((i, i + 1) if d == 0 else (0, s) for d, s in enumerate(qkv.shape)))
               .reshape((batch, heads, seq, hd)) for i in range(3))
    att = q.matmul(k.transpose(-1, -2)).mul(1.0 / np.sqrt(hd)).softmax(-1)
    o = att.matmul(v).permute((0, 2, 1, 3)).reshape((batch, seq, dim))
    x = x.add(o.matmul(_w(rng, dim, dim, dtype=dtype)))
    h = _layernorm(x, ones, zeros)
    u = h.matmul(_w(rng, dim, 4 * dim, dtype=dtype)).add(_w(rng, 4 * dim, scale=0.1, dtype=dtype))
    u = u.mul(u.mul(1.0 / np.sqrt(2.0)).erf().add(1.0)).mul(0.5)
    y = x.add(u.matmul(_w(rng, 4 * dim, dim, dtype=dtype)))
    return optimize(Graph([inp.node], [y.contiguous().node], ["y"]))


def small_cnn(batch: int = 1, size: int = 16, seed: int = 0) -> Graph:
    """conv3x3+bias+relu, strided conv3x3+relu, global average pool, linear."""
    from luminal.frontend_onnx.ops_nn_conv import conv

    rng = np.random.default_rng(seed)
    x = Tensor.input("x", (batch, 3, size, size), DType.float32)
    h = conv(x, _w(rng, 8, 3, 3, 3, scale=0.3), 1, (1, 1), (1, 1), [(1, 1), (1, 1)], [size, size])
    h = h.add(_w(rng, 1, 8, 1, 1, scale=0.1).expand(h.shape)).relu()
    o = (size + 2 - 3) // 2 + 1
    h = conv(h, _w(rng, 16, 8, 3, 3, scale=0.2), 1, (2, 2), (1, 1), [(1, 1), (1, 1)], [o, o]).relu()
    p = h.mean((2, 3))
    y = p.matmul(_w(rng, 16, 10))
    return optimize(Graph([x.node], [y.contiguous().node], ["logits"]))


SAMPLES = {"transformer_layer": transformer_layer, "small_cnn": small_cnn}
