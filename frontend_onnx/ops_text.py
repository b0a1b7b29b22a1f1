"""TfIdfVectorizer over token ids: n-gram counts as sums of products of comparisons."""

from __future__ import annotations

from functools import reduce

import numpy as np

from ..ir import DType, Tensor
from .ops_shape import stack
from .registry import OpContext, fail, need, op


def _pool(ctx: OpContext, lo: int, hi: int) -> list[tuple[tuple[int, ...], int]]:
    """The pool's n-grams of lo..hi items, each with its output column (ngram_counts gives where the n-grams of
    each length start; ids run over every length, the ones outside lo..hi included)."""
    pool = [int(v) for v in np.asarray(ctx.attr("pool_int64s"))]
    starts = [int(v) for v in ctx.attr("ngram_counts") or [0]]
    indexes = [int(v) for v in ctx.attr("ngram_indexes") or []]
    out, gram_id = [], 0
    for size, start in enumerate(starts, 1):
        end = starts[size] if size < len(starts) else len(pool)
        for k in range(start, end - size + 1, size):
            if lo <= size <= hi and gram_id < len(indexes):
                out.append((tuple(pool[k:k + size]), indexes[gram_id]))
            gram_id += 1
    return out


def _count(x: Tensor, gram: tuple[int, ...], skips: int) -> Tensor | None:
    """How often ``gram`` occurs along x's last axis, its items ``d`` apart for d = 1..skips+1 (a single item
    counted once, at d = 1)."""
    c = x.shape[-1]
    lead = [(0, s) for s in x.shape[:-1]]
    n = len(gram)
    terms = []
    for d in range(1, skips + 2 if n > 1 else 2):
        length = c - (n - 1) * d
        if length <= 0:
            break
        parts = [x.shrink([*lead, (j * d, j * d + length)]).eq(g) for j, g in enumerate(gram)]
        terms.append(reduce(Tensor.__and__, parts).cast(DType.float32).sum([x.ndim - 1]))
    return reduce(Tensor.add, terms) if terms else None


@op("TfIdfVectorizer")
def tfidf_vectorizer(ctx: OpContext) -> Tensor:
    """Per row, each pool n-gram's count (TF), whether it occurs (IDF) or its count times its weight (TFIDF);
    n-grams of min_gram_length..max_gram_length items, with up to max_skip_count items skipped between them."""
    x = need(ctx, 0)
    if x.ndim not in (1, 2) or x.dtype.is_float or x.dtype is DType.bool:
        raise fail(ctx, f"needs integer token ids of shape (C) or (B, C), got {x.dtype.name} {list(x.shape)}")
    if ctx.attr("pool_int64s") is None:
        raise fail(ctx, "needs pool_int64s (string pools are not supported)")
    mode = ctx.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise fail(ctx, f"mode {str(mode)[:20]!r}: expected TF, IDF or TFIDF")
    lo, hi = int(ctx.attr("min_gram_length", 1)), int(ctx.attr("max_gram_length", 1))
    indexes = [int(v) for v in ctx.attr("ngram_indexes") or []]
    weights = ctx.attr("weights")
    width = max(indexes) + 1 if indexes else 0
    columns: list[Tensor | None] = [None] * width
    for gram, col in _pool(ctx, lo, hi):
        count = _count(x, gram, int(ctx.attr("max_skip_count", 0)))
        before = columns[col]
        if count is not None:
            columns[col] = count if before is None else before.add(count)
    rows = x.shape[:-1]
    out = []
    for col, count in enumerate(columns):
        if count is None:
            out.append(Tensor.full(rows, 0.0, DType.float32))
            continue
        w = float(weights[col]) if weights is not None and len(weights) else 1.0
        out.append(count.gt(0).where(Tensor.full(rows, w, DType.float32), Tensor.full(rows, 0.0, DType.float32))
                   if mode == "IDF" else count.mul(w) if mode == "TFIDF" else count)
    return stack(out, x.ndim - 1)
