"""Attention (opset 23+) and RotaryEmbedding, composed from matmuls, masks and softmax."""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, Tensor, broadcast_shape
from .ops_nn_index import gather_axis
from .ops_shape import concat, stack
from .registry import OpContext, fail, need, need_const, op, wants

NEG_INF = float("-inf")


def _heads(x: Tensor, heads: int) -> Tensor:
    """(batch, seq, heads*d) -> (batch, heads, seq, d)."""
    b, s, hidden = x.shape
    return x.reshape((b, s, heads, hidden // heads)).permute([0, 2, 1, 3])


def _additive(mask: Tensor, dtype: DType) -> Tensor:
    if mask.dtype is DType.bool:
        return mask.where(Tensor.full(mask.shape, 0.0, dtype), Tensor.full(mask.shape, NEG_INF, dtype))
    return mask.cast(dtype)


def _band(q_len: int, kv_len: int, offset: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    """Allowed (batch or 1, 1, q, kv): key j for query i when lo <= (i + offset) - j <= hi (None: unbounded)."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    diff = (i + offset.reshape(-1, 1, 1, 1)) - j
    allowed = np.ones(diff.shape, dtype=bool)
    if lo is not None:
        allowed &= diff >= lo
    if hi is not None:
        allowed &= diff <= hi
    return allowed


def _split_heads(ctx: OpContext, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K and V as (batch, heads, seq, head); 3-D inputs are split by q_num_heads and kv_num_heads."""
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
        raise fail(ctx, "Q, K and V must all be 3-D or all 4-D")
    if q.ndim == 4:
        return q, k, v
    qh, kvh = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if qh <= 0 or kvh <= 0 or q.shape[2] % qh or k.shape[2] % kvh or v.shape[2] % kvh:
        raise fail(ctx, "3-D inputs need q_num_heads and kv_num_heads that divide the hidden sizes")
    return _heads(q, qh), _heads(k, kvh), _heads(v, kvh)


def _allowed(ctx: OpContext, q_len: int, kv_len: int, past_len: int | None) -> np.ndarray | None:
    """Where a query may attend a key, from is_causal, the window sizes and nonpad_kv_seqlen; None: anywhere."""
    nonpad = None
    if ctx.input(6) is not None:
        nonpad = need_const(ctx, 6).reshape(-1).astype(np.int64)
    if nonpad is not None and past_len is not None:
        raise fail(ctx, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if past_len is not None:
        offset = np.array([past_len])
    elif nonpad is not None:
        offset = nonpad - q_len
    else:
        offset = np.array([0])
    allowed = None
    if ctx.attr("is_causal", 0):
        allowed = _band(q_len, kv_len, offset, 0, None)
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if left >= 0 or right >= 0:
        win = _band(q_len, kv_len, offset, -right if right >= 0 else None, left if left >= 0 else None)
        allowed = win if allowed is None else allowed & win
    if nonpad is not None:
        pad_ok = (np.arange(kv_len)[None, :] < nonpad[:, None]).reshape(-1, 1, 1, kv_len)
        allowed = pad_ok if allowed is None else allowed & pad_ok
    return allowed


def _bias(ctx: OpContext, mask: Tensor | None, dt: DType, q_len: int, kv_len: int,
          past_len: int | None) -> Tensor | None:
    """The additive mask on the scores: the attn_mask input plus -inf where attending is not allowed."""
    bias = None
    if mask is not None:
        if mask.shape[-1] < kv_len:
            fill = False if mask.dtype is DType.bool else NEG_INF
            mask = mask.pad([(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])], value=fill)
        bias = _additive(mask, dt)
    allowed = _allowed(ctx, q_len, kv_len, past_len)
    if allowed is None:
        return bias
    c = Tensor.const(np.where(allowed, 0.0, NEG_INF).astype(dt.np), dt)
    if bias is None:
        return c
    both = broadcast_shape(bias.shape, c.shape)
    return bias.expand(both).add(c.expand(both))


def attend(ctx: OpContext, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dt: DType,
           sink: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T + bias) v over scaled q and k (any number of leading dims), and the qk output its
    qk_matmul_output_mode asks for; ``sink`` (broadcast over the rows) one more logit in each row's denominator."""
    qk = q.matmul(k.transpose())
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    if softcap > 0:
        qk = qk.mul(1 / softcap).tanh().mul(softcap)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    scores = qk if bias is None else qk.add(bias.expand(qk.shape))
    qk_out = scores if mode == 2 else qk
    work = scores.cast(DType.float32) if ctx.attr("softmax_precision") is not None else scores
    if sink is None:
        p = _masked_softmax(work)
    else:
        extra = sink.cast(work.dtype).expand((*work.shape[:-1], 1))
        p = _masked_softmax(concat([work, extra], work.ndim - 1)).shrink([(0, n) for n in work.shape])
    if bias is not None:
        dead = bias.max((bias.ndim - 1,), keepdim=True).eq(NEG_INF).expand(p.shape)
        p = dead.where(Tensor.full(p.shape, 0.0, p.dtype), p)
    p = p.cast(dt)
    if mode == 3:
        qk_out = p
    return p.matmul(v), qk_out


@op("Attention")
def attention_op(ctx: OpContext) -> list[Tensor | None]:
    q, k, v = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    mask, past_k, past_v = ctx.input(3), ctx.input(4), ctx.input(5)
    if (past_k is None) != (past_v is None):
        raise fail(ctx, "past_key and past_value must be given together")
    dt = q.dtype
    three_d = q.ndim == 3
    q, k, v = _split_heads(ctx, q, k, v)
    batch, qh, q_len, head = q.shape
    kvh = k.shape[1]
    if qh % kvh or v.shape[1] != kvh:
        raise fail(ctx, f"{qh} query heads cannot share {kvh} key/value heads")
    scale = ctx.attr("scale")
    scale = 1 / math.sqrt(head) if scale is None else float(scale)
    root = float(np.float32(math.sqrt(scale)))
    past_len = None
    if past_k is not None and past_v is not None:
        past_len = past_k.shape[2]
        k = concat([past_k.cast(dt), k], 2)
        v = concat([past_v.cast(dt), v], 2)
    present_k, present_v = k, v
    bias = _bias(ctx, mask, dt, q_len, k.shape[2], past_len)
    if qh != kvh:  # grouped-query attention: each key/value head serves qh/kvh query heads in a row
        rep = qh // kvh
        k = k.unsqueeze([2]).expand((batch, kvh, rep, *k.shape[2:])).reshape((batch, qh, *k.shape[2:]))
        v = v.unsqueeze([2]).expand((batch, kvh, rep, *v.shape[2:])).reshape((batch, qh, *v.shape[2:]))
    y, qk_out = attend(ctx, q.mul(root), k.mul(root), v, bias, dt)
    if three_d:
        y = y.permute([0, 2, 1, 3]).reshape((batch, q_len, -1))
    return [y, present_k if wants(ctx, 1) else None, present_v if wants(ctx, 2) else None,
            qk_out.cast(dt) if wants(ctx, 3) else None]


def _masked_softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis; a row that is all -inf gives zeros, not NaN."""
    axis = x.ndim - 1
    m = x.max((axis,), keepdim=True)
    m = m.eq(NEG_INF).where(Tensor.full(m.shape, 0.0, m.dtype), m)
    e = x.sub(m.expand(x.shape)).exp()
    s = e.sum((axis,), keepdim=True)
    s = s.eq(0).where(Tensor.full(s.shape, 1.0, s.dtype), s)
    return e.mul(s.recip().expand(x.shape))


@op("RotaryEmbedding")
def rotary_embedding_op(ctx: OpContext) -> Tensor:
    x, cos, sin, pos = need(ctx, 0), need(ctx, 1), need(ctx, 2), ctx.input(3)
    four_d = x.ndim == 4
    if four_d:
        t = x.permute([0, 2, 1, 3])  # (batch, seq, heads, head)
    elif x.ndim == 3:
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0 or x.shape[2] % heads:
            raise fail(ctx, "3-D input needs num_heads dividing the hidden size")
        t = x.reshape((*x.shape[:2], heads, x.shape[2] // heads))
    else:
        raise fail(ctx, "input must be 3-D or 4-D")
    batch, seq, heads, head = t.shape
    dim = int(ctx.attr("rotary_embedding_dim", 0)) or head
    half = dim // 2
    if pos is not None:
        cos, sin = gather_axis(cos, pos, 0), gather_axis(sin, pos, 0)
    if cos.shape[-1] != half or sin.shape[-1] != half:
        raise fail(ctx, "cos/sin cache width must be rotary_embedding_dim / 2")
    shape = (batch, seq, heads, half)
    cos = cos.cast(x.dtype).reshape((*cos.shape[:-1], 1, half)).expand(shape)
    sin = sin.cast(x.dtype).reshape((*sin.shape[:-1], 1, half)).expand(shape)
    rot = t.shrink([(0, batch), (0, seq), (0, heads), (0, dim)])
    if ctx.attr("interleaved", 0):
        pairs = rot.reshape((batch, seq, heads, half, 2))
        x1 = pairs.shrink([(0, batch), (0, seq), (0, heads), (0, half), (0, 1)]).reshape(shape)
        x2 = pairs.shrink([(0, batch), (0, seq), (0, heads), (0, half), (1, 2)]).reshape(shape)
    else:
        x1 = rot.shrink([(0, batch), (0, seq), (0, heads), (0, half)])
        x2 = rot.shrink([(0, batch), (0, seq), (0, heads), (half, dim)])
    real = cos.mul(x1).sub(sin.mul(x2))
    imag = sin.mul(x1).add(cos.mul(x2))
    if ctx.attr("interleaved", 0):
        rotated = stack([real, imag], 4).reshape((batch, seq, heads, dim))
    else:
        rotated = concat([real, imag], 3)
    if dim < head:
        rotated = concat([rotated, t.shrink([(0, batch), (0, seq), (0, heads), (dim, head)])], 3)
    return rotated.permute([0, 2, 1, 3]) if four_d else rotated.reshape(x.shape)


# -- LinearAttention (opset 27): a recurrent state updated once per position ----------------------------------


_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads32(x: Tensor, heads: int) -> Tensor:
    return _heads(x.cast(DType.float32), heads)


def _at(x: Tensor, i: int) -> Tensor:
    """Position i of a (B, H, T, D) tensor: (B, H, D)."""
    b, h, _, d = x.shape
    return x.shrink([(0, b), (0, h), (i, i + 1), (0, d)]).reshape((b, h, d))


def _linear_attention_checks(ctx: OpContext, q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int]:
    rule = ctx.attr("update_rule", "gated_delta")
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if rule not in _UPDATE_RULES:
        raise fail(ctx, f"update_rule {str(rule)[:20]!r}: expected one of {', '.join(_UPDATE_RULES)}")
    if not isinstance(hq, int) or not isinstance(hkv, int) or hq <= 0 or hkv <= 0 or hq % hkv:
        raise fail(ctx, f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    if any(x.ndim != 3 for x in (q, k, v)) or q.shape[2] % hq or k.shape[2] % hkv or v.shape[2] % hkv:
        raise fail(ctx, f"query, key, value {[list(x.shape) for x in (q, k, v)]}: expected (B, T, heads * D)")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (ctx.input(4) is not None) or delta != (ctx.input(5) is not None):
        raise fail(ctx, f"update_rule {rule!r} takes {'a' if gating else 'no'} decay and {'a' if delta else 'no'} beta")
    return hq, hkv


@op("LinearAttention")
def linear_attention_op(ctx: OpContext) -> list[Tensor | None]:
    """Per position t: the state (B, Hkv, dk, dv) decays by exp(decay_t) (gated rules), takes k_t v_t^T, where the
    delta rules first replace v_t by beta_t (v_t - state^T k_t); output_t is scale q_t^T state, each kv head read by
    q_num_heads / kv_num_heads query heads. Unrolled over the sequence, whose length the import knows."""
    q, k, v = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    past, decay, beta = ctx.input(3), ctx.input(4), ctx.input(5)
    hq, hkv = _linear_attention_checks(ctx, q, k, v)
    b, t, _ = q.shape
    dk, dv, group = q.shape[2] // hq, v.shape[2] // hkv, hq // hkv
    q4, k4, v4 = _heads32(q, hq), _heads32(k, hkv), _heads32(v, hkv)
    full = (b, hkv, dk, dv)
    if decay is not None:
        if decay.ndim != 3 or decay.shape[2] not in (hkv, hkv * dk):
            raise fail(ctx, f"decay {list(decay.shape)}: expected (B, T, {hkv}) or (B, T, {hkv * dk})")
        decay = _heads32(decay, hkv).exp()
    if beta is not None:
        if beta.ndim != 3 or beta.shape[2] not in (hkv, 1):
            raise fail(ctx, f"beta {list(beta.shape)}: expected (B, T, {hkv}) or (B, T, 1)")
        beta = _heads32(beta, beta.shape[2])
    if past is not None and tuple(past.shape) != full:
        raise fail(ctx, f"past_state {list(past.shape)}: expected {list(full)}")
    state = past.cast(DType.float32) if past is not None else Tensor.full(full, 0.0, DType.float32)
    scale = float(ctx.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(dk)
    outs = []
    for i in range(t):
        kt, vt = _at(k4, i), _at(v4, i)
        if decay is not None:
            state = state.mul(_at(decay, i).reshape((b, hkv, -1, 1)).expand(full))
        if beta is not None:
            retrieved = state.mul(kt.reshape((b, hkv, dk, 1)).expand(full)).sum([2])
            vt = _at(beta, i).expand((b, hkv, dv)).mul(vt.sub(retrieved))
        state = state.add(kt.reshape((b, hkv, dk, 1)).expand(full).mul(vt.reshape((b, hkv, 1, dv)).expand(full)))
        read = state if group == 1 else state.reshape((b, hkv, 1, dk, dv)).expand((b, hkv, group, dk, dv)).reshape(
            (b, hq, dk, dv))
        qt = _at(q4, i).reshape((b, hq, dk, 1)).expand((b, hq, dk, dv))
        outs.append(qt.mul(read).sum([2]).mul(scale).reshape((b, hq, 1, dv)))
    out = concat(outs, 2).permute([0, 2, 1, 3]).reshape((b, t, hq * dv)).cast(q.dtype)
    return [out, state.cast(past.dtype if past is not None else q.dtype)]
