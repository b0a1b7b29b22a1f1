"""MatMul, Gemm and Einsum: broadcast Mul + SumReduce contractions; Det."""

from __future__ import annotations

import itertools
from functools import reduce

from ..ir import Tensor
from .registry import OpContext, fail, need, op


@op("MatMul")
def matmul_op(ctx: OpContext) -> Tensor:
    a, b = need(ctx, 0), need(ctx, 1)
    try:
        return a.matmul(b)
    except ValueError as e:
        raise fail(ctx, str(e)) from None


@op("Gemm")
def gemm_op(ctx: OpContext) -> Tensor:
    a, b, c = need(ctx, 0), need(ctx, 1), ctx.input(2)
    if a.ndim != 2 or b.ndim != 2:
        raise fail(ctx, "A and B must be 2-D")
    if ctx.attr("transA", 0):
        a = a.transpose()
    if ctx.attr("transB", 0):
        b = b.transpose()
    if a.shape[1] != b.shape[0]:
        raise fail(ctx, f"shapes {list(a.shape)} and {list(b.shape)} do not match")
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    y = a.matmul(b)
    if alpha != 1.0:
        y = y.mul(alpha)
    if c is not None and beta != 0.0:
        c = c.cast(y.dtype)
        if beta != 1.0:
            c = c.mul(beta)
        y = y.add(c.expand(y.shape))
    return y


def _parse(ctx: OpContext, eq: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Operand and output subscripts as label lists; '...' becomes labels '.0', '.1', ..."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise fail(ctx, f"equation has {len(terms)} operands, node has {len(ranks)}")
    n_ell = 0
    ops: list[list[str]] = []
    for term, rank in zip(terms, ranks):
        labels = _labels(ctx, term, rank)
        ops.append(labels)
        n_ell = max(n_ell, sum(1 for x in labels if x.startswith(".")))
    if arrow:
        out = _labels(ctx, rhs, None, n_ell)
    else:
        counts: dict[str, int] = {}
        for labels in ops:
            for x in labels:
                counts[x] = counts.get(x, 0) + 1
        ell = [f".{k - n_ell}" for k in range(n_ell)]
        out = ell + sorted(x for x, n in counts.items() if n == 1 and not x.startswith("."))
    return ops, out


def _labels(ctx: OpContext, term: str, rank: int | None, n_ell: int = 0) -> list[str]:
    if term.count("...") > 1:
        raise fail(ctx, "more than one ellipsis in a term")
    head, ell, tail = term.partition("...")
    for ch in head + tail:
        if not ch.isalpha():
            raise fail(ctx, "einsum subscripts must be letters")
    if not ell:
        if rank is not None and len(term) != rank:
            raise fail(ctx, f"subscript {term!r} does not match rank {rank}")
        return list(term)
    k = (rank - len(head) - len(tail)) if rank is not None else n_ell
    if k < 0:
        raise fail(ctx, f"subscript {term!r} does not match rank {rank}")
    # ellipsis dims are right-aligned across operands
    return list(head) + [f".{j - k}" for j in range(k)] + list(tail)


def _diagonal(t: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """Collapse repeated labels of one operand to their diagonal (multiply by identity and sum)."""
    while len(set(labels)) < len(labels):
        seen: dict[str, int] = {}
        for j, x in enumerate(labels):
            if x in seen:
                i = seen[x]
                break
            seen[x] = j
        n = t.shape[i]
        eye = Tensor.iota((n, n), 0).eq(Tensor.iota((n, n), 1)).cast(t.dtype)
        shape = [1] * t.ndim
        shape[i], shape[j] = n, n
        t = t.mul(eye.reshape(shape).expand(t.shape)).sum((j,))
        labels = labels[:j] + labels[j + 1:]
    return t, labels


def _align(t: Tensor, labels: list[str], order: list[str], sizes: dict[str, int]) -> Tensor:
    perm = [labels.index(x) for x in order if x in labels]
    t = t.permute(perm) if perm else t
    shape = [t.shape[perm.index(labels.index(x))] if x in labels else 1 for x in order]
    return t.reshape(shape).expand([sizes[x] for x in order])


@op("Einsum")
def einsum_op(ctx: OpContext) -> Tensor:
    ts = [need(ctx, k) for k in range(len(ctx.node.input))]
    eq = str(ctx.attr("equation"))
    ops, out = _parse(ctx, eq, [t.ndim for t in ts])
    sizes: dict[str, int] = {}
    work = []
    for t, labels in zip(ts, ops):
        t, labels = _diagonal(t, labels)
        for x, s in zip(labels, t.shape):
            if sizes.get(x, 1) not in (1, s) and s != 1:
                raise fail(ctx, f"subscript {x!r} has sizes {sizes[x]} and {s}")
            sizes[x] = max(sizes.get(x, 1), s)
        work.append((t, labels))
    if any(x not in sizes for x in out if not x.startswith(".")):
        raise fail(ctx, "output subscript not in any input")
    for x in out:
        sizes.setdefault(x, 1)
    dtype = ts[0].dtype
    work = [(t.cast(dtype), labels) for t, labels in work]
    cur, cur_labels = work[0]
    # labels of the first operand no one else needs are summed right away
    later = set(out).union(*(set(lb) for _, lb in work[1:]))
    own = [j for j, x in enumerate(cur_labels) if x not in later]
    if own:
        cur = cur.sum(own)
        cur_labels = [x for x in cur_labels if x in later]
    for k in range(1, len(work)):
        t, labels = work[k]
        later = set(out).union(*(set(lb) for _, lb in work[k + 1:]))
        union = list(dict.fromkeys(cur_labels + labels))
        keep = [x for x in union if x in later]
        summed = [x for x in union if x not in later]
        order = keep + summed
        a = _align(cur, cur_labels, order, sizes)
        b = _align(t, labels, order, sizes)
        p = a.mul(b)
        cur = p.sum(tuple(range(len(keep), len(order)))) if summed else p
        cur_labels = keep
    extra = [j for j, x in enumerate(cur_labels) if x not in out]
    if extra:
        cur = cur.sum(extra)
        cur_labels = [x for x in cur_labels if x in out]
    return _align(cur, cur_labels, out, sizes)


# Det expands over the n! permutations: beyond 5x5 (120 products) it is refused
DET_MAX = 5


@op("Det")
def det_op(ctx: OpContext) -> Tensor:
    """Determinants over the last two axes, expanded over the permutations (Leibniz's formula): the IR has no
    pivoted elimination, and the matrices models take determinants of are small."""
    x = need(ctx, 0)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] == 0:
        raise fail(ctx, f"needs square matrices in its last two axes, got shape {list(x.shape)}")
    n, batch = x.shape[-1], x.shape[:-2]
    if n > DET_MAX:
        raise fail(ctx, f"{n}x{n} matrices: expanded over permutations only up to {DET_MAX}x{DET_MAX}")
    whole = [(0, s) for s in batch]
    entry = [[x.shrink([*whole, (i, i + 1), (j, j + 1)]).reshape(batch) for j in range(n)] for i in range(n)]
    out: Tensor | None = None
    for perm in itertools.permutations(range(n)):
        term = reduce(Tensor.mul, (entry[i][p] for i, p in enumerate(perm)))
        odd = sum(perm[a] > perm[b] for a in range(n) for b in range(a + 1, n)) % 2
        out = (term.neg() if odd else term) if out is None else out.sub(term) if odd else out.add(term)
    assert out is not None
    return out
