"""Strided, masked views: how a consumer reads a producer's contiguous buffer.

A View maps an index ``i`` of its own ``shape`` to the flat element
``offset + sum(strides[k] * i[k])`` of the buffer it reads. It is valid where
every mask constraint ``lo <= sum(coeffs[k] * i[k]) < hi`` holds; elsewhere it
reads 0 (pad). Every movement that is an affine change of index (permute,
broadcast, slice with steps, pad, sliding windows) is exact on a View; a reshape
that would need division of indices returns None and the caller materialises
a ``Contiguous`` node.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

Constraint = tuple[tuple[int, ...], int, int]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=1 << 12)
def _contiguous(shape: tuple[int, ...]) -> View:
    return View(shape, contiguous_strides(shape))


_strides_of = functools.lru_cache(maxsize=1 << 12)(contiguous_strides)  # a view's shape is a tuple of ints


def reads_dim(view: View, d: int) -> bool:
    """Whether the element a view reads depends on dim ``d`` of its index."""
    return view.strides[d] != 0 or any(c[d] for c, _, _ in view.mask)


@dataclass(frozen=True, slots=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    mask: tuple[Constraint, ...] = ()

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> View:
        return _contiguous(tuple(map(int, shape)))  # immutable: equal shapes share one

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return self.offset == 0 and not self.mask and self.strides == _strides_of(self.shape)

    @property
    def never_valid(self) -> bool:
        return any(not any(c) and not (lo <= 0 < hi) for c, lo, hi in self.mask) or self.numel == 0

    def __repr__(self) -> str:
        m = f", mask={list(self.mask)}" if self.mask else ""
        o = f", offset={self.offset}" if self.offset else ""
        return f"View({list(self.shape)}, strides={list(self.strides)}{o}{m})"

    # -- affine core -------------------------------------------------------
    def _affine(self, shape: tuple[int, ...], rows: list[tuple[int, ...]], base: list[int],
                extra: tuple[Constraint, ...] = ()) -> View:
        """New view where old index j = rows[j] . new_index + base[j]."""
        n = len(shape)
        strides = tuple(sum(self.strides[j] * rows[j][k] for j in range(self.ndim)) for k in range(n))
        offset = self.offset + sum(self.strides[j] * base[j] for j in range(self.ndim))
        mask = []
        for c, lo, hi in self.mask:
            shift = sum(c[j] * base[j] for j in range(self.ndim))
            mask.append((tuple(sum(c[j] * rows[j][k] for j in range(self.ndim)) for k in range(n)),
                         lo - shift, hi - shift))
        return View(tuple(shape), strides, offset, tuple(mask) + extra).simplify()

    def simplify(self) -> View:
        if self.numel == 0:
            return View(self.shape, tuple(0 for _ in self.shape), 0, ())
        keep = []
        strides = list(self.strides)
        for k, s in enumerate(self.shape):
            if s == 1:
                strides[k] = 0
        for c, lo, hi in self.mask:
            c = tuple(0 if self.shape[k] == 1 else v for k, v in enumerate(c))
            lo_v = sum(min(0, v * (s - 1)) for v, s in zip(c, self.shape))
            hi_v = sum(max(0, v * (s - 1)) for v, s in zip(c, self.shape))
            if lo <= lo_v and hi_v < hi:
                continue
            if hi_v < lo or lo_v >= hi:
                return View(self.shape, tuple(0 for _ in self.shape), 0, ((tuple(0 for _ in self.shape), 1, 0),))
            if (c, lo, hi) not in keep:
                keep.append((c, lo, hi))
        return View(self.shape, tuple(strides), self.offset, tuple(keep))

    def _eye(self) -> list[tuple[int, ...]]:
        return [tuple(int(j == k) for k in range(self.ndim)) for j in range(self.ndim)]

    # -- movements ---------------------------------------------------------
    def permute(self, order: tuple[int, ...]) -> View:
        assert sorted(order) == list(range(self.ndim)), order
        rows = [tuple(int(order[k] == j) for k in range(self.ndim)) for j in range(self.ndim)]
        return self._affine(tuple(self.shape[o] for o in order), rows, [0] * self.ndim)

    def expand(self, shape: tuple[int, ...]) -> View:
        assert len(shape) == self.ndim, (self.shape, shape)
        rows = self._eye()
        for j, (a, b) in enumerate(zip(self.shape, shape)):
            if a != b:
                assert a == 1, (self.shape, shape)
                rows[j] = tuple(0 for _ in shape)
        return self._affine(tuple(shape), rows, [0] * self.ndim)

    def slice(self, starts: tuple[int, ...], steps: tuple[int, ...], sizes: tuple[int, ...]) -> View:
        """Element k of dim j is old element starts[j] + steps[j] * k (steps may be negative)."""
        rows = [tuple(steps[j] if k == j else 0 for k in range(self.ndim)) for j in range(self.ndim)]
        return self._affine(tuple(sizes), rows, list(starts))

    def shrink(self, ranges: tuple[tuple[int, int], ...]) -> View:
        return self.slice(tuple(a for a, _ in ranges), (1,) * self.ndim, tuple(b - a for a, b in ranges))

    def pad(self, pads: tuple[tuple[int, int], ...]) -> View:
        """Pad (before, after) per dim with invalid (zero) elements; negative pads shrink."""
        if any(a < 0 or b < 0 for a, b in pads):
            v = self.shrink(tuple((max(0, -a), s - max(0, -b)) for (a, b), s in zip(pads, self.shape)))
            return v.pad(tuple((max(0, a), max(0, b)) for a, b in pads))
        shape = tuple(s + a + b for s, (a, b) in zip(self.shape, pads))
        extra = tuple((tuple(int(k == j) for k in range(self.ndim)), a, a + s)
                      for j, (s, (a, b)) in enumerate(zip(self.shape, pads)) if a or b)
        return self._affine(shape, self._eye(), [-a for a, _ in pads], extra)

    def window(self, dim: int, out: int, size: int, stride: int = 1, dilation: int = 1) -> View:
        """Replace ``dim`` by two dims (out, size): element (o, k) is old o*stride + k*dilation."""
        shape = (*self.shape[:dim], out, size, *self.shape[dim + 1:])
        rows = []
        for j in range(self.ndim):
            if j < dim:
                rows.append(tuple(int(k == j) for k in range(len(shape))))
            elif j == dim:
                rows.append(tuple(stride if k == dim else dilation if k == dim + 1 else 0 for k in range(len(shape))))
            else:
                rows.append(tuple(int(k == j + 1) for k in range(len(shape))))
        return self._affine(shape, rows, [0] * self.ndim)

    def reshape(self, shape: tuple[int, ...]) -> View | None:
        shape = tuple(int(s) for s in shape)
        if shape == self.shape:
            return self
        assert math.prod(shape) == self.numel, (self.shape, shape)
        if self.numel == 0:
            return View.contiguous(shape)
        if self.is_contiguous:
            return View.contiguous(shape)
        # drop size-1 dims: their index is always 0
        olds = [j for j, s in enumerate(self.shape) if s != 1]
        dims = [self.shape[j] for j in olds]
        strides = [self.strides[j] for j in olds]
        mask = [(tuple(c[j] for j in olds), lo, hi) for c, lo, hi in self.mask]
        news = [k for k, s in enumerate(shape) if s != 1]
        new_strides = [0] * len(shape)
        new_mask = [[0] * len(shape) for _ in mask]
        i = k = 0
        while i < len(dims):
            gi, gk = [i], [news[k]]
            po, pn = dims[i], shape[news[k]]
            while po != pn:
                if po < pn:
                    i += 1
                    gi.append(i)
                    po *= dims[i]
                else:
                    k += 1
                    gk.append(news[k])
                    pn *= shape[news[k]]
            i += 1
            k += 1
            if len(gi) > 1:
                for a, b in itertools.pairwise(gi):
                    if strides[a] != strides[b] * dims[b]:
                        return None
                if any(m[0][j] for m in mask for j in gi):
                    return None
            stride = strides[gi[-1]]
            suffix = 1
            for kk in reversed(gk):
                new_strides[kk] = stride * suffix
                for mi, m in enumerate(mask):
                    if len(gi) == 1:
                        new_mask[mi][kk] = m[0][gi[0]] * suffix
                suffix *= shape[kk]
        out_mask = tuple((tuple(nm), lo, hi) for nm, (_, lo, hi) in zip(new_mask, mask))
        return View(shape, tuple(new_strides), self.offset, out_mask).simplify()

    # -- evaluation --------------------------------------------------------
    def index_arrays(self):
        """(flat index array, valid array or None) over the view's shape, for numpy."""
        import numpy as np

        idx = np.full(self.shape, self.offset, dtype=np.int64)
        grids = [np.arange(s, dtype=np.int64).reshape([-1 if k == j else 1 for k in range(self.ndim)])
                 for j, s in enumerate(self.shape)]
        for g, st in zip(grids, self.strides):
            if st:
                idx = idx + g * st
        valid = None
        for c, lo, hi in self.mask:
            e = sum((g * v for g, v in zip(grids, c) if v), np.zeros((1,) * self.ndim, dtype=np.int64))
            ok = (e >= lo) & (e < hi)
            valid = ok if valid is None else valid & ok
        if valid is not None:
            valid = np.broadcast_to(valid, self.shape)
        return idx, valid


def part_range(view: View, numel: int) -> tuple[int, int, int] | None:
    """(first element in the space ``view`` reads into, first element read, count) where ``view`` reads a contiguous
    range of a contiguous buffer of ``numel`` elements (in any shape) in order, zero-padded along one axis outside
    which every dim is 1: a part of a concatenation that is one contiguous range of it, or a slice of one along
    that axis; else None."""
    full = view.shape
    if len(view.mask) != 1:
        return None
    (c, before, end), = view.mask
    if sorted(c) != [0] * (len(c) - 1) + [1]:
        return None
    a = c.index(1)
    if math.prod(full[:a]) != 1 or before < 0 or end > full[a]:
        return None
    strides = _strides_of(full)
    if any(st != strides[d] for d, st in enumerate(view.strides) if d != a or end - before > 1):
        return None
    inner = math.prod(full[a + 1:])
    first, count = view.offset + view.strides[a] * before, (end - before) * inner
    return (before * inner, first, count) if first >= 0 and first + count <= numel else None


def whole_parts(reads: list[tuple[int, View, int]]) -> dict[int, int] | None:
    """Where each source lies whole in the space its views read into, from (source, view, its numel) per read:
    its reads (``part_range``), in order, tile it at one shift; None where any read is no such range or any source
    is not read whole so."""
    ranges: dict[int, list[tuple[int, int, int]]] = {}
    sizes: dict[int, int] = {}
    for src, view, numel in reads:
        r = part_range(view, numel)
        if r is None:
            return None
        ranges.setdefault(src, []).append(r)
        sizes[src] = numel
    at = {}
    for src, rs in ranges.items():
        rs.sort(key=lambda r: r[1])
        ends = [0, *(first + count for _, first, count in rs)]
        if len({o - f for o, f, _ in rs}) != 1 or [f for _, f, _ in rs] != ends[:-1] or ends[-1] != sizes[src]:
            return None
        at[src] = rs[0][0] - rs[0][1]
    return at


def extent(view: View, coef: tuple[int, ...]) -> tuple[int, int]:
    """The least and greatest value of ``coef . index`` over the view's valid indices, as far as its box and its
    mask bound it: where ``coef`` is a whole multiple of a masked combination over that combination's dims (a
    padded window's rows, o + k, read at the rows' stride), the mask bounds that part of the sum."""
    bounds: dict[tuple[int, ...], tuple[int, int]] = {}
    for c, a, b in view.mask:
        bx = box(c, view.shape)
        lo, hi = bounds.get(c, (bx[0], bx[1] + 1))
        bounds[c] = (max(lo, a), min(hi, b))
    lo = hi = 0
    free = [c != 0 for c in coef]
    for c, (a, b) in bounds.items():
        dims = [k for k, x in enumerate(c) if x]
        m = coef[dims[0]] // c[dims[0]] if dims else 0
        if m == 0 or a >= b or not all(free[k] and coef[k] == m * c[k] for k in dims):
            continue
        lo, hi = lo + min(m * a, m * (b - 1)), hi + max(m * a, m * (b - 1))
        for k in dims:
            free[k] = False
    rest = box(tuple(x if f else 0 for x, f in zip(coef, free)), view.shape)
    return lo + rest[0], hi + rest[1]


def box(coef: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int]:
    """The least and greatest value of ``coef . index`` over indices in ``shape``."""
    return (sum(min(0, c * (s - 1)) for c, s in zip(coef, shape)),
            sum(max(0, c * (s - 1)) for c, s in zip(coef, shape)))


def rebase(view: View, shape: tuple[int, ...], onto: View) -> View | None:
    """``view``, which reads a contiguous tensor of ``shape``, reading instead what ``onto`` (a view of that shape)
    reads; None where ``view`` walks neither whole dims of ``shape`` nor whole runs of the dims ``onto`` keeps
    adjacent (a reshape that merged dims it keeps apart, or split them) and is no reshape of ``onto`` either,
    which only a copy in ``shape``'s order serves."""
    if view.is_contiguous and view.numel == math.prod(shape):  # a reshape: merges dims ``onto`` keeps adjacent
        return onto.reshape(view.shape)
    found = _walk(view, shape, onto)
    if found is not None:
        return found
    # a view that walks across dims of ``shape`` (a slice of an upsample's value reshaped to the larger map):
    # the same walk over ``shape`` with every run of dims merged that ``onto`` keeps adjacent and in order
    merged = _merged(shape, onto)
    joined = None if merged == shape else onto.reshape(merged)
    return None if joined is None else _walk(view, merged, joined)


def _merged(shape: tuple[int, ...], onto: View) -> tuple[int, ...]:
    """``shape`` with each run of adjacent dims merged that ``onto`` (a view of that shape) walks as one."""
    out: list[int] = []
    inner: int | None = None  # onto's stride of the innermost dim of more than one element merged into out[-1]
    for size, st in zip(shape, onto.strides):
        if out and (size == 1 or inner is None or (st and inner == st * size)):
            out[-1] *= size
        else:
            out.append(size)
        inner = st if size > 1 else inner
    return tuple(out)


def _walk(view: View, shape: tuple[int, ...], onto: View) -> View | None:
    """``rebase`` where each of ``view``'s dims steps through one dim of ``shape``."""
    strides = contiguous_strides(shape)
    rows = [[0] * view.ndim for _ in shape]
    for k, (size, st) in enumerate(zip(view.shape, view.strides)):
        if st == 0 or size == 1:
            continue
        d = next((d for d in reversed(range(len(shape)))
                  if shape[d] > 1 and st % strides[d] == 0 and abs(st // strides[d]) < shape[d]), None)
        if d is None:
            return None
        rows[d][k] = st // strides[d]
    base = [0] * len(shape)
    rem = view.offset
    for d in reversed(range(len(shape))):
        lo, hi = extent(view, tuple(rows[d]))
        base[d] = rem if d == 0 else (rem + lo) % shape[d] - lo
        rem = (rem - base[d]) // shape[d] if d else 0
        if base[d] + lo < 0 or base[d] + hi >= shape[d]:
            return None
    return onto._affine(view.shape, [tuple(r) for r in rows], base, view.mask)
