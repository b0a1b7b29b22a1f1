"""onnxruntime's com.microsoft Attention, MultiHeadAttention, EmbedLayerNormalization and RotaryEmbedding (what
its transformer optimizer writes into BERT, GPT-2 and LLaMA-style graphs), their dynamically quantised forms
(QAttention, QEmbedLayerNormalization) and onnxruntime-genai's GroupQueryAttention, composed from matmuls, masks and
softmax as onnxruntime's CPU kernels compute them: a masked key adds ``mask_filter_value`` (-10000) to its score, a
key past a causal query's position takes the lowest float."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..ir import DType, Tensor
from .ops_nn_attention import NEG_INF, _band, _heads, attend, rotary_embedding_op
from .ops_nn_index import gather_axis
from .ops_nn_quant import _centred, _dequant, _scaled_product
from .ops_reduce import normalise
from .ops_shape import concat, stack
from .registry import MS, OpContext, fail, need, op, wants

LOWEST = float(np.finfo(np.float32).min)


def _key_mask(ctx: OpContext, mask: Tensor, batch: int, q_len: int, total: int) -> Tensor:
    """Attention's mask_index as an additive (batch, 1, q or 1, total) mask of 0 and mask_filter_value: key lengths
    (batch), lengths then starts (2 x batch), a 0/1 mask per key (batch, total) or per query and key (batch, q,
    total)."""
    fill = float(ctx.attr("mask_filter_value", -10000.0))
    if mask.ndim == 1 and mask.shape[0] in (batch, 2 * batch):
        keys = Tensor.iota((batch, total), 1, DType.int32)
        ends = mask.shrink([(0, batch)]).cast(DType.int32).reshape((batch, 1))
        dead = keys.ge(ends.expand((batch, total)))
        if mask.shape[0] == 2 * batch:
            starts = mask.shrink([(batch, 2 * batch)]).cast(DType.int32).reshape((batch, 1))
            dead = dead | keys.lt(starts.expand((batch, total)))
        dead = dead.reshape((batch, 1, 1, total))
    elif mask.ndim == 2 and tuple(mask.shape) == (batch, total):
        dead = mask.le(0).reshape((batch, 1, 1, total))
    elif mask.ndim == 3 and tuple(mask.shape) == (batch, q_len, total):
        dead = mask.le(0).reshape((batch, 1, q_len, total))
    else:
        raise fail(ctx, f"mask_index of shape {list(mask.shape)} is not one onnxruntime's CPU kernel takes "
                        f"({batch}, {2 * batch}, ({batch}, {total}) or ({batch}, {q_len}, {total}))")
    return dead.where(Tensor.full(dead.shape, fill, DType.float32), Tensor.full(dead.shape, 0.0, DType.float32))


def _attend(ctx: OpContext, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None,
            scale: float) -> Tensor:
    """softmax(scale q k^T + mask + bias) v over (batch, heads, seq, head) q, k and v; a causal query's later keys
    at the lowest float."""
    dt = q.dtype
    scores = q.matmul(k.transpose()).mul(scale)
    q_len, total = scores.shape[2:]
    if mask is not None:
        scores = scores.add(mask.cast(dt).expand(scores.shape))
    if int(ctx.attr("unidirectional", 0)):
        allowed = Tensor.const(_band(q_len, total, np.array([total - q_len]), 0, None)).expand(scores.shape)
        scores = allowed.where(scores, Tensor.full(scores.shape, LOWEST, dt))
    if bias is not None:
        scores = scores.add(bias.cast(dt).expand(scores.shape))
    return scores.softmax(3).matmul(v)


def _merge(y: Tensor) -> Tensor:
    """(batch, heads, seq, head) -> (batch, seq, heads*head)."""
    b, h, s, d = y.shape
    return y.permute([0, 2, 1, 3]).reshape((b, s, h * d))


def _num_heads(ctx: OpContext, *hidden: int) -> int:
    heads = int(ctx.attr("num_heads", 0))
    if heads <= 0 or any(h % heads for h in hidden):
        raise fail(ctx, f"num_heads {heads} must be positive and divide the hidden sizes {list(hidden)}")
    return heads


def _scale(ctx: OpContext, head: int) -> float:
    scale = float(ctx.attr("scale", 0.0) or 0.0)
    return scale if scale else 1 / math.sqrt(head)


@op("Attention", domain=MS)
def attention(ctx: OpContext) -> list[Tensor | None]:
    """Self-attention over one packed projection: input @ weights + bias split into Q, K and V (by
    qkv_hidden_sizes), the past's keys and values before this step's, present = (2, batch, heads, total, head)."""
    x, w = need(ctx, 0), need(ctx, 1)
    sizes = _packed_sizes(ctx, x, w)
    return _packed_attention(ctx, x.matmul(w.cast(x.dtype)), ctx.input(2), sizes, ctx.input(3), ctx.input(4),
                             ctx.input(5))


@op("QAttention", domain=MS)
def quantized_attention(ctx: OpContext) -> list[Tensor | None]:
    """Attention over an 8-bit input and weight (what onnxruntime's dynamic quantisation makes of Attention): the
    projection an exact integer product scaled by the input's scale and the weight's (per tensor or per column),
    then as Attention."""
    x, w, x_scale, w_scale = need(ctx, 0), need(ctx, 1), need(ctx, 3), need(ctx, 4)
    sizes = _packed_sizes(ctx, x, w)
    acc = _centred(x, ctx.input(6)).matmul(_centred(w, ctx.input(7), -1))
    return _packed_attention(ctx, _scaled_product(acc, x_scale, w_scale, need(ctx, 2)), None, sizes, ctx.input(5),
                             ctx.input(8), None)


def _packed_sizes(ctx: OpContext, x: Tensor, w: Tensor) -> list[int]:
    """The widths of Q, K and V in the packed projection's columns (qkv_hidden_sizes, else thirds)."""
    if int(ctx.attr("do_rotary", 0)) or int(ctx.attr("past_present_share_buffer", 0)):
        raise fail(ctx, "do_rotary and past_present_share_buffer are not supported")
    if x.ndim != 3 or w.ndim != 2 or w.shape[0] != x.shape[2]:
        raise fail(ctx, f"input {list(x.shape)} and weights {list(w.shape)} do not fit (batch, seq, hidden) @ "
                        "(hidden, q + k + v)")
    sizes = [int(s) for s in ctx.attr("qkv_hidden_sizes") or [w.shape[1] // 3] * 3]
    if len(sizes) != 3 or sum(sizes) != w.shape[1] or sizes[0] != sizes[1]:
        raise fail(ctx, f"qkv_hidden_sizes {sizes} do not split the weights' {w.shape[1]} columns")
    return sizes


def _packed_attention(ctx: OpContext, qkv: Tensor, b: Tensor | None, sizes: list[int], mask: Tensor | None,
                      past: Tensor | None, attn_bias: Tensor | None) -> list[Tensor | None]:
    heads = _num_heads(ctx, *sizes)
    if b is not None:
        qkv = qkv.add(b.cast(qkv.dtype).expand(qkv.shape))
    batch, seq, _ = qkv.shape
    cuts = np.cumsum([0, *sizes])
    q, k, v = (_heads(qkv.shrink([(0, batch), (0, seq), (int(cuts[i]), int(cuts[i + 1]))]), heads)
               for i in range(3))
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2 or tuple(past.shape[1:3]) != (batch, heads):
            raise fail(ctx, f"past {list(past.shape)} is not (2, {batch}, {heads}, past, head)")
        k = concat([_at(past, 0).cast(k.dtype), k], 2)
        v = concat([_at(past, 1).cast(v.dtype), v], 2)
    total = k.shape[2]
    key_mask = None if mask is None else _key_mask(ctx, mask, batch, seq, total)
    y = _merge(_attend(ctx, q, k, v, key_mask, attn_bias, _scale(ctx, sizes[0] // heads)))
    present = stack([k, v], 0) if wants(ctx, 1) and sizes[1] == sizes[2] else None
    return [y, present]


def _at(x: Tensor, i: int) -> Tensor:
    return x.shrink([(i, i + 1)] + [(0, s) for s in x.shape[1:]]).squeeze([0])


@op("MultiHeadAttention", domain=MS)
def multi_head_attention(ctx: OpContext) -> list[Tensor | None]:
    """Attention over separate query, key and value (batch, seq, hidden) with an optional packed bias (q + k + v),
    key_padding_mask (key lengths or a 0/1 mask per key), attention_bias and past keys and values (batch, heads,
    past, head); present_key and present_value hold the past and this step's."""
    q, k, v = need(ctx, 0), ctx.input(1), ctx.input(2)
    bias, pad_mask, attn_bias, past_k, past_v = (ctx.input(i) for i in range(3, 8))
    if k is None or v is None or q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise fail(ctx, "only separate 3-D query, key and value are supported (not packed or per-head forms)")
    heads = _num_heads(ctx, q.shape[2], k.shape[2], v.shape[2])
    if bias is not None:
        cuts = np.cumsum([0, q.shape[2], k.shape[2], v.shape[2]])
        q, k, v = (t.add(bias.shrink([(int(cuts[i]), int(cuts[i + 1]))]).cast(t.dtype).expand(t.shape))
                   for i, t in enumerate((q, k, v)))
    batch, seq = q.shape[:2]
    qh, kh, vh = _heads(q, heads), _heads(k, heads), _heads(v, heads)
    if past_k is not None and past_v is not None:
        kh, vh = concat([past_k.cast(kh.dtype), kh], 2), concat([past_v.cast(vh.dtype), vh], 2)
    total = kh.shape[2]
    mask = None
    if pad_mask is not None:
        if pad_mask.ndim == 1 and pad_mask.shape[0] != batch:
            raise fail(ctx, f"key_padding_mask {list(pad_mask.shape)} is not ({batch}) or ({batch}, {total})")
        mask = _key_mask(ctx, pad_mask, batch, seq, total)
    y = _merge(_attend(ctx, qh, kh, vh, mask, attn_bias, _scale(ctx, q.shape[2] // heads)))
    return [y, kh if wants(ctx, 1) else None, vh if wants(ctx, 2) else None]


@op("EmbedLayerNormalization", domain=MS)
def embed_layer_norm(ctx: OpContext) -> list[Tensor | None]:
    """LayerNorm(word[input_ids] + position[position_ids, else 0..seq) + segment[segment_ids]) over the hidden
    size; mask_index the number of ones in each row of the mask (zeros without one); embedding_sum before the
    norm."""
    tables = [ctx.input(i) for i in (2, 3, 4, 5, 6)]
    return _embed_layer_norm(ctx, need(ctx, 0), ctx.input(1), tables, ctx.input(7), ctx.input(8))


@op("QEmbedLayerNormalization", domain=MS)
def quantized_embed_layer_norm(ctx: OpContext) -> list[Tensor | None]:
    """EmbedLayerNormalization over 8-bit tables, gamma and beta (each with its scale and zero point: inputs 8-12
    and 13-17), dequantised at import."""
    tables = [None if ctx.input(i) is None else _dequant(need(ctx, i), need(ctx, i + 6), ctx.input(i + 11))
              for i in (2, 3, 4, 5, 6)]
    return _embed_layer_norm(ctx, need(ctx, 0), ctx.input(1), tables, ctx.input(7), None)


def _embed_layer_norm(ctx: OpContext, ids: Tensor, segments: Tensor | None, tables: list[Tensor | None],
                      mask: Tensor | None, position_ids: Tensor | None) -> list[Tensor | None]:
    words, positions, segment_table, gamma, beta = tables
    if ids.ndim != 2 or words is None or positions is None or gamma is None or beta is None:
        raise fail(ctx, f"input_ids {list(ids.shape)} is not (batch, seq), or a word or position table, gamma or "
                        "beta is missing")
    batch, seq = ids.shape
    s = gather_axis(words, ids, 0)
    if position_ids is None:
        pos = positions.shrink([(0, seq), (0, positions.shape[1])]).unsqueeze([0]).expand(s.shape)
    else:
        pos = gather_axis(positions, position_ids, 0).expand(s.shape)
    s = s.add(pos)
    if segments is not None and segment_table is not None:
        s = s.add(gather_axis(segment_table, segments, 0))
    y = normalise(s, (2,), float(ctx.attr("epsilon", 1e-12)))[0]
    y = y.mul(gamma.expand(y.shape)).add(beta.expand(y.shape))
    ones = Tensor.full((batch,), 0, DType.int32) if mask is None else mask.ne(0).cast(DType.int32).sum((1,))
    return [y, ones if wants(ctx, 1) else None, s if wants(ctx, 2) else None]


@op("RotaryEmbedding", domain=MS)
def ms_rotary_embedding(ctx: OpContext) -> Tensor:
    """The default domain's RotaryEmbedding with onnxruntime's inputs (input, position_ids, cos_cache, sin_cache):
    position_ids of one element is the first position of every row; a 3-D input without num_heads has heads of
    twice the cache's width."""
    x, pos, cos, sin = need(ctx, 0), need(ctx, 1), need(ctx, 2), need(ctx, 3)
    if x.ndim not in (3, 4) or cos.ndim != 2:
        raise fail(ctx, f"input {list(x.shape)} and cos_cache {list(cos.shape)} are not (batch, seq, hidden) or "
                        "(batch, heads, seq, head) and (positions, rotary dim / 2)")
    seq = x.shape[2] if x.ndim == 4 else x.shape[1]
    if pos.numel == 1:
        first = pos.reshape((1, 1)).cast(DType.int64)
        pos = first.add(Tensor.const(np.arange(seq, dtype=np.int64)).reshape((1, seq))).expand((x.shape[0], seq))
    attrs = dict(ctx.attrs)
    if x.ndim == 3 and not int(attrs.get("num_heads", 0)):
        head = int(attrs.get("rotary_embedding_dim", 0)) or 2 * cos.shape[1]
        attrs["num_heads"] = x.shape[2] // head
    return rotary_embedding_op(dataclasses.replace(ctx, inputs=[x, cos, sin, pos], attrs=attrs))


@op("GroupQueryAttention", domain=MS)
def group_query_attention(ctx: OpContext) -> list[Tensor | None]:
    """Grouped-query attention with a KV cache, as onnxruntime's CPU kernel: this step's keys and values (rotated
    where asked) go into the cache after each batch entry's past, seqlens_k + 1 - sequence_length positions (none
    on a first prompt: total_sequence_length == sequence_length); the query at absolute position past + i attends to
    the cache's keys up to it (the last local_window_size of them where set; every key of its entry when not causal),
    query head h to key head h // (num_heads / kv_num_heads)."""
    q, k, v, heads, kv_heads, head = _gqa_projections(ctx)
    past_k, past_v, seqlens, total = ctx.input(3), ctx.input(4), need(ctx, 5), _gqa_total(ctx)
    cos, sin, position_ids, bias, sink = (ctx.input(i) for i in range(7, 12))
    batch, seq, _ = q.shape
    past_len = 0 if past_k is None else past_k.shape[2]
    for name, p in (("past_key", past_k), ("past_value", past_v)):
        if p is not None and (p.ndim != 4 or tuple(p.shape) != (batch, kv_heads, past_len, head)):
            raise fail(ctx, f"{name} {list(p.shape)} is not ({batch}, {kv_heads}, past, {head})")
    if (past_k is None) != (past_v is None) or seqlens.numel != batch or total < seq:
        raise fail(ctx, f"past_key and past_value come together, seqlens_k has one value per batch entry "
                        f"({batch}), total_sequence_length ({total}) is at least the sequence ({seq})")
    out = q.dtype
    dt = DType.float32 if out in (DType.float16, DType.bfloat16) else out  # half types computed in float
    qh, kh, vh = (_heads(x.cast(dt), n) for x, n in ((q, heads), (k, kv_heads), (v, kv_heads)))
    lengths = seqlens.reshape((batch, 1)).cast(DType.int64).add(1)  # each entry's keys after this step
    past = Tensor.full((batch, 1), 0, DType.int64) if total == seq else lengths.sub(seq)
    at = past.expand((batch, seq)).add(Tensor.iota((batch, seq), 1, DType.int64))  # each query's position
    if int(ctx.attr("do_rotary", 0)):
        if cos is None or sin is None:
            raise fail(ctx, "do_rotary needs cos_cache and sin_cache")
        pos = at if position_ids is None else position_ids.cast(DType.int64)
        qh, kh = (_rotate(ctx, t, pos, cos, sin) for t in (qh, kh))
    cache = max(total, past_len)
    present_k, present_v = _into_cache(past_k, kh, past, cache), _into_cache(past_v, vh, past, cache)
    group = heads // kv_heads
    grouped = (batch, kv_heads, group, cache, head)  # each key head read by its group of query heads
    mask = _gqa_allowed(ctx, at, lengths, cache).reshape((batch, 1, 1, seq, cache))
    mask = mask.where(Tensor.full(mask.shape, 0.0, dt), Tensor.full(mask.shape, NEG_INF, dt))
    mask = mask.expand((batch, kv_heads, group, seq, cache))
    if bias is not None:
        if bias.ndim != 4 or bias.shape[2] != seq or bias.shape[3] > cache:
            raise fail(ctx, f"attention_bias {list(bias.shape)} is not (batch or 1, heads or 1, {seq}, {total})")
        bias = bias.cast(dt).pad([(0, 0), (0, 0), (0, 0), (0, cache - bias.shape[3])])
        mask = mask.add(bias.expand((batch, heads, seq, cache)).reshape(mask.shape))
    if sink is not None:
        sink = sink.cast(dt).reshape((1, kv_heads, group, 1, 1))
    elif int(ctx.attr("smooth_softmax", 0)):
        sink = Tensor.full((1, 1, 1, 1, 1), 0.0, dt)
    y, _ = attend(ctx, qh.reshape((batch, kv_heads, group, seq, head)).mul(_scale(ctx, head)),
                  present_k.reshape((batch, kv_heads, 1, cache, head)).expand(grouped),
                  present_v.reshape((batch, kv_heads, 1, cache, head)).expand(grouped), mask, dt, sink)
    y = _merge(y.reshape((batch, heads, seq, head)))
    return [y.cast(out), present_k.cast(out) if wants(ctx, 1) else None, present_v.cast(out) if wants(ctx, 2) else None]


_GQA_UNSUPPORTED = {12: "k_scale (a quantised cache)", 13: "v_scale (a quantised cache)",
                    14: "q_norm_weight (onnxruntime's CPU kernel refuses it too)", 15: "k_norm_weight",
                    16: "query_seqlens (a chunked prefill)"}


def _gqa_projections(ctx: OpContext) -> tuple[Tensor, Tensor, Tensor, int, int, int]:
    """Query, key and value (batch, seq, heads * head), split from a packed query where key and value are absent;
    num_heads, kv_num_heads and the head size. What the op leaves out is refused here."""
    for i, name in _GQA_UNSUPPORTED.items():
        if ctx.input(i) is not None:
            raise fail(ctx, f"{name} is not supported")
    if int(ctx.attr("sliding_window_cache", 0)) or int(ctx.attr("qk_output", 0)) or wants(ctx, 3):
        raise fail(ctx, "sliding_window_cache and qk_output are not supported")
    if any(str(ctx.attr(a, "NONE")) != "NONE" for a in ("k_quant_type", "v_quant_type")):
        raise fail(ctx, "a quantised KV cache is not supported")
    q, k, v = need(ctx, 0), ctx.input(1), ctx.input(2)
    heads, kv_heads = int(ctx.attr("num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads or q.ndim != 3:
        raise fail(ctx, f"num_heads {heads} must be a positive multiple of kv_num_heads {kv_heads}, query "
                        "(batch, seq, hidden)")
    batch, seq, width = q.shape
    if k is None and v is None:  # packed: query, key, value along the hidden axis
        if width % (heads + 2 * kv_heads):
            raise fail(ctx, f"packed QKV of {width} is not (num_heads + 2 * kv_num_heads) heads")
        head = width // (heads + 2 * kv_heads)
        cuts = np.cumsum([0, heads * head, kv_heads * head, kv_heads * head])
        q, k, v = (q.shrink([(0, batch), (0, seq), (int(cuts[i]), int(cuts[i + 1]))]) for i in range(3))
    if k is None or v is None:
        raise fail(ctx, "key and value must be given together")
    head = q.shape[2] // heads
    if q.shape[2] % heads or tuple(k.shape) != (batch, seq, kv_heads * head) or k.shape != v.shape:
        raise fail(ctx, f"query {list(q.shape)}, key {list(k.shape)} and value {list(v.shape)} do not fit "
                        f"{heads} and {kv_heads} heads over (batch, {seq}, hidden)")
    return q, k, v, heads, kv_heads, head


def _gqa_total(ctx: OpContext) -> int:
    t = need(ctx, 6)
    if not t.is_const or t.numel != 1:
        raise fail(ctx, "total_sequence_length must be one value known when the model is compiled (a constant, or "
                        "computed from input shapes)")
    return int(t.numpy().reshape(-1)[0])


def _gqa_allowed(ctx: OpContext, at: Tensor, lengths: Tensor, cache: int) -> Tensor:
    """(batch, seq, cache): the keys each query attends to, by the queries' positions ``at`` (batch, seq) and the
    entries' ``lengths`` (batch, 1)."""
    batch, seq = at.shape
    keys = Tensor.iota((batch, seq, cache), 2, DType.int64)
    at = at.reshape((batch, seq, 1)).expand(keys.shape)
    allowed = keys.lt(lengths.reshape((batch, 1, 1)).expand(keys.shape))
    if int(ctx.attr("causal", 1)):
        allowed = allowed & keys.le(at)
        window = int(ctx.attr("local_window_size", -1))
        if window > 0:
            allowed = allowed & keys.gt(at.sub(window))
    return allowed


def _rotate(ctx: OpContext, x: Tensor, pos: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    attrs = {"interleaved": int(ctx.attr("rotary_interleaved", 0)), "rotary_embedding_dim": 2 * cos.shape[1]}
    return rotary_embedding_op(dataclasses.replace(ctx, inputs=[x, cos, sin, pos], attrs=attrs))


def _into_cache(past: Tensor | None, new: Tensor, at: Tensor, cache: int) -> Tensor:
    """(batch, heads, cache, head): the past's first ``at`` positions of each batch entry, then ``new``, then
    zeros."""
    batch, heads, seq, head = new.shape
    shape = (batch, heads, cache, head)
    pos = Tensor.iota(shape, 2, DType.int64)
    start = at.reshape((batch, 1, 1, 1)).expand(shape)
    step = new.expand(shape) if seq == 1 else new.gather(pos.sub(start).maximum(0).minimum(seq - 1), 2)
    step = pos.lt(start.add(seq)).where(step, Tensor.full(shape, 0.0, new.dtype))
    if past is None:
        return step
    old = past.cast(new.dtype).shrink([(0, batch), (0, heads), (0, min(past.shape[2], cache)), (0, head)])
    old = old.pad([(0, 0), (0, 0), (0, cache - old.shape[2]), (0, 0)])
    return pos.lt(start).where(old, step)
