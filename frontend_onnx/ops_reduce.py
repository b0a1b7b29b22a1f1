"""Reductions: Reduce*, ArgMax/ArgMin, and onnxruntime's fused normalisations and matmuls."""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, Tensor
from ..ir.tensor import FOLD_LIMIT
from . import registry
from .importer import const_tensor
from .ops_elementwise import fused_activation
from .ops_shape import axes_arg, concat, norm_axis
from .registry import MS, OpContext, need, need_ints, op

# the opset where each op's axes moved from an attribute to an input
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def prod(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    """Exact product: pairwise multiplication of halves along the flattened reduced axes."""
    if x.is_const and x.numel <= FOLD_LIMIT:  # one numpy call, not log2(n) folded multiplications
        return const_tensor(np.prod(x.numpy(), axis=axes, keepdims=keepdim, dtype=x.dtype.compute.np), x.dtype)
    rest = [k for k in range(x.ndim) if k not in axes]
    n = math.prod(x.shape[a] for a in axes)
    y = x.permute(rest + list(axes)).reshape([x.shape[k] for k in rest] + [n])
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        y = y.pad([(0, 0)] * len(rest) + [(size - n, 0)], value=1)
    lead = [(0, x.shape[k]) for k in rest]
    while size > 1:
        size //= 2
        y = y.shrink([*lead, (0, size)]).mul(y.shrink([*lead, (size, 2 * size)]))
    out_shape = [1 if k in axes else s for k, s in enumerate(x.shape)] if keepdim else [x.shape[k] for k in rest]
    return y.reshape(out_shape)


def _empty_identity(kind: str, dtype: DType):
    big = float("inf") if dtype.is_float else np.iinfo(dtype.np).max if dtype.is_int else 1
    return {
        "ReduceSum": 0, "ReduceSumSquare": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceProd": 1,
        "ReduceMax": -big if dtype is not DType.bool else 0, "ReduceMin": big,
        "ReduceLogSum": float("-inf"), "ReduceLogSumExp": float("-inf"), "ReduceMean": float("nan"),
    }[kind]


def logsumexp(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    m = x.max(axes, keepdim=True)
    m = m.isinf().where(Tensor.full(m.shape, 0, m.dtype), m)
    s = x.sub(m.expand(x.shape)).exp().sum(axes, keepdim=True).log().add(m)
    return s if keepdim else s.reshape([d for k, d in enumerate(x.shape) if k not in axes])


def lp_norm(x: Tensor, p: float, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    """(sum |x|^p)^(1/p) over ``axes``."""
    if p == 1:
        return x.abs().sum(axes, keepdim)
    if p == 2:
        return x.mul(x).sum(axes, keepdim).sqrt()
    return x.abs().pow(float(p)).sum(axes, keepdim).pow(1.0 / p)


_REDUCE = {
    "ReduceSum": lambda x, a, k: x.sum(a, k),
    "ReduceMean": lambda x, a, k: x.mean(a, k),
    "ReduceMax": lambda x, a, k: x.max(a, k),
    "ReduceMin": lambda x, a, k: x.min(a, k),
    "ReduceProd": prod,
    "ReduceSumSquare": lambda x, a, k: x.mul(x).sum(a, k),
    "ReduceL1": lambda x, a, k: lp_norm(x, 1, a, k),
    "ReduceL2": lambda x, a, k: lp_norm(x, 2, a, k),
    "ReduceLogSum": lambda x, a, k: x.sum(a, k).log(),
    "ReduceLogSumExp": logsumexp,
}


@op(*_REDUCE)
def reduce_op(ctx: OpContext) -> Tensor:
    kind = ctx.node.op_type
    x = need(ctx, 0)
    axes = axes_arg(ctx, _AXES_INPUT_SINCE.get(kind, 18))
    keepdim = bool(ctx.attr("keepdims", 1))
    if not axes and not ctx.attr("noop_with_empty_axes", 0):
        axes = list(range(x.ndim))
    # no axes with noop_with_empty_axes: each element reduced alone (ReduceSumSquare squares it, ReduceL1 takes its
    # absolute value), as onnxruntime and onnx's reference do
    red = tuple(sorted({norm_axis(a, x.ndim) for a in axes or ()}))
    shape = [1 if k in red else s for k, s in enumerate(x.shape)] if keepdim else \
        [s for k, s in enumerate(x.shape) if k not in red]
    if any(x.shape[a] == 0 for a in red):
        dtype = x.dtype
        value = _empty_identity(kind, dtype)
        if dtype.is_int and isinstance(value, float) and not math.isfinite(value):
            dtype = DType.float32
        return Tensor.full(shape, value, dtype)
    return _REDUCE[kind](x, red, keepdim)


@op("ArgMax", "ArgMin")
def arg_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.ndim)
    keepdim = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    if x.dtype is DType.bool:
        x = x.cast(DType.int32)
    if ctx.node.op_type == "ArgMin":
        x = x.neg()
    return x.argmax(axis, keepdim, last)


# -- com.microsoft fused normalisations and FusedMatMul (onnxruntime's optimised graphs) -------


def normalise(x: Tensor, axes: tuple[int, ...], eps: float, rms: bool = False):
    """(x - mean) / sqrt(var + eps) over ``axes``, or x / sqrt(mean(x^2) + eps) when ``rms``;
    returns (y, mean (None when rms), inverse std, var), the statistics with kept dims."""
    mean = None
    d = x
    if not rms:
        mean = x.mean(axes, keepdim=True)
        d = x.sub(mean.expand(x.shape))
    var = d.mul(d).mean(axes, keepdim=True)
    inv = var.add(eps).rsqrt()
    return d.mul(inv.expand(x.shape)), mean, inv, var


@op("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS)
def skip_layer_norm(ctx: OpContext) -> list[Tensor | None]:
    rms = ctx.node.op_type == "SkipSimplifiedLayerNormalization"
    x, skip, gamma = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    beta, bias = (None, ctx.input(3)) if rms else (ctx.input(3), ctx.input(4))
    s = x.add(skip)
    if bias is not None:
        s = s.add(bias)
    y, mean, inv, _ = normalise(s.cast(DType.float32), (s.ndim - 1,), float(ctx.attr("epsilon", 1e-12)), rms)
    y = y.cast(s.dtype).mul(gamma)
    return [y if beta is None else y.add(beta), mean, inv, s]


@op("FusedMatMul", domain=MS)
def fused_matmul(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        raise NotImplementedError("FusedMatMul with transBatchA/transBatchB")
    if ctx.attr("transA", 0):
        a = a.transpose(-1, -2)
    if ctx.attr("transB", 0):
        b = b.transpose(-1, -2)
    y = a.matmul(b)
    alpha = float(ctx.attr("alpha", 1.0))
    return y if alpha == 1.0 else y.mul(alpha)


@op("FusedGemm", domain=MS)
def fused_gemm(ctx: OpContext) -> Tensor:
    gemm = registry.lookup("", "Gemm")
    if gemm is None:
        raise NotImplementedError("Gemm")
    y = gemm(ctx)
    assert isinstance(y, Tensor), "Gemm has one output"
    return fused_activation(ctx, y, [ctx.attr("activation_alpha"), ctx.attr("activation_beta")])


ROUNDS_MAX_K = 16  # up to this k, k rounds of (max, its first index, mask it out); past it a sorting network


@op("TopK")
def topk(ctx: OpContext) -> list[Tensor]:
    """The k largest (or smallest) along ``axis``, sorted, the lower index first among equal values: for a
    small k, k rounds of a max over the axis; else a bitonic network (``_bitonic_topk``)."""
    x = need(ctx, 0)
    k = need_ints(ctx, 1)[0] if ctx.opset >= 10 else int(ctx.attr("k"))
    axis = norm_axis(int(ctx.attr("axis", -1)), x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} out of range for an axis of {n}")
    if k == 0:
        shape = [0 if d == axis else s for d, s in enumerate(x.shape)]
        return [Tensor.full(shape, 0, x.dtype), Tensor.full(shape, 0, DType.int64)]
    largest = bool(ctx.attr("largest", 1))
    work = x.cast(DType.int64) if x.dtype is DType.bool else x
    work = work if largest else work.neg()
    floor = float("-inf") if work.dtype.is_float else int(np.iinfo(work.dtype.np).min)
    if k > ROUNDS_MAX_K:
        order = [d for d in range(x.ndim) if d != axis] + [axis]
        rows = work.permute(order).reshape((-1, n))
        idx = _bitonic_topk(rows, k, floor)
        shape = [x.shape[d] for d in order[:-1]] + [k]
        back = [order.index(d) for d in range(x.ndim)]
        best = idx.cast(DType.int64).reshape(shape).permute(back)
        return [x.gather(best, axis), best]
    idx = Tensor.iota(x.shape, axis, DType.int64)
    free = Tensor.full(x.shape, True, DType.bool)
    values, indices = [], []
    for _ in range(k):
        # the first free index holding the largest free value (a taken slot never wins a tie)
        m = free.where(work, Tensor.full(x.shape, floor, work.dtype)).max((axis,), keepdim=True)
        hit = work.eq(m.expand(x.shape)) & free
        best = hit.where(idx.neg(), Tensor.full(x.shape, -n, DType.int64)).max((axis,), keepdim=True).neg()
        values.append(x.gather(best, axis))
        indices.append(best)
        free = free & idx.ne(best.expand(x.shape))
    return [concat(values, axis), concat(indices, axis)]


def _bitonic_topk(x: Tensor, k: int, floor: float | int) -> Tensor:
    """The int32 indices (R, k) of the k first of rows ``x`` (R, n) in descending order, the lower index first
    among equal values (the caller gathers the values from what ``x`` was made of). A bitonic network of
    compare-exchanges, each stage one elementwise step over views: the row padded with ``floor`` to N = 2^p,
    sorted in blocks of K = 2^q >= k (alternately descending and ascending), then per level each pair of blocks
    keeps its K first (the elementwise winner of a descending and an ascending block, a bitonic sequence) and
    sorts them again: (n log^2 K) work, log^2 N steps."""
    rows, n = x.shape
    big = 1 << max(0, (n - 1).bit_length())
    K = min(big, 1 << max(0, (k - 1).bit_length()))
    v = x.pad([(0, 0), (0, big - n)], floor) if big > n else x
    i = Tensor.iota((rows, big), 1, DType.int32)  # the padding's indices come after every element's

    def first(av: Tensor, ai: Tensor, bv: Tensor, bi: Tensor) -> Tensor:
        return av.gt(bv) | (av.eq(bv) & ai.lt(bi))

    def halves(t: Tensor, width: int) -> tuple[Tensor, Tensor]:
        """Each block of 2 * width elements of the rows' split into its two halves, (rows, blocks, width) each."""
        blocks = t.shape[1] // (2 * width)
        pairs = t.reshape((rows, blocks, 2, width))
        lo, hi = (pairs.shrink([(0, rows), (0, blocks), (h, h + 1), (0, width)]).reshape((rows, blocks, width))
                  for h in (0, 1))
        return lo, hi

    def stage(v: Tensor, i: Tensor, j: int, block: int) -> tuple[Tensor, Tensor]:
        """Compare-exchange at distance j, blocks of ``block`` alternately descending and ascending (all
        descending where ``block`` covers the row)."""
        size = v.shape[1]
        (av, bv), (ai, bi) = halves(v, j), halves(i, j)
        keep = first(av, ai, bv, bi)
        if block < size:
            g = size // (2 * j)
            desc = (np.arange(g) * 2 * j // block) % 2 == 0
            keep = keep.eq(Tensor.const(desc.reshape(1, g, 1)).expand(keep.shape))

        def joined(a: Tensor, b: Tensor) -> Tensor:
            lo, hi = keep.where(a, b), keep.where(b, a)
            return concat([lo.unsqueeze([2]), hi.unsqueeze([2])], 2).reshape((rows, size))

        return joined(av, bv), joined(ai, bi)

    s = 2
    while s <= K:  # blocks of K sorted
        j = s // 2
        while j >= 1:
            v, i = stage(v, i, j, s)
            j //= 2
        s *= 2
    while v.shape[1] > K:  # each pair of blocks: its K first (descending against ascending), sorted
        (av, bv), (ai, bi) = halves(v, K), halves(i, K)
        win = first(av, ai, bv, bi)
        v, i = (win.where(a, b).reshape((rows, -1)) for a, b in ((av, bv), (ai, bi)))
        j = K // 2
        while j >= 1:
            v, i = stage(v, i, j, K)
            j //= 2
    return i.shrink([(0, rows), (0, k)])
