"""A conv's input read in place from a copy with its padding made real (a halo), by a GEMM whose rows are its
output pixels.

A convolution's A operand, read through windows over a padded input, is an affine view with mask constraints
(the padding). Copied once per call into a buffer that holds the zeros of the padding (the input's masked axes
widened), the same view has no mask: every window row is a plain offset. With unit stride along the innermost
output dim, output pixel (oh, ow) reads ``oh * R + ow`` plus a K term, R the copy's row pitch; over a "wide"
row space of R columns per output row (the R - OW columns past the row land in tile rows the epilogue skips)
the GEMM's rows are consecutive addresses. The micro-kernel then broadcasts MR neighbouring input values per K
row, against vectors of a weight packed once: no im2col, and rows of any length share tiles (as onnxruntime's
NCHWc and XNNPACK's direct convolutions, on the plain layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.view import View
from ..kernel import Kernel

MAX_WASTE = 1.3  # wide rows at most this much longer than the output rows (a stride-1 conv: (W + pads) / W)


@dataclass(frozen=True)
class Halo:
    """The padded copy of A's input and A's view into it."""

    source: tuple[int, ...]  # the input's shape
    shape: tuple[int, ...]  # the copy's shape: the input's, each masked axis widened by its padding
    before: tuple[int, ...]  # per axis, the zeros before the input's first element
    view: View  # A over the kernel's dims, into the copy: no mask
    pitch: int  # R: the copy's stride along the outer output-pixel dim (the wide row), or the row itself
    width: int  # the output row's length (OW): columns of a wide row that are outputs
    rows: int  # output rows (OH; 1 where the pixels are one dim)
    reach: int  # one past the farthest element a K row of pixel 0 reads, batch terms included

    @property
    def wide(self) -> int:
        """The GEMM's rows: ``rows`` wide rows of ``pitch`` columns."""
        return self.rows * self.pitch


def plan_halo(kernel: Kernel, a: int, m: tuple[int, ...], k: tuple[int, ...], batch: tuple[int, ...]) -> Halo | None:
    """The padded copy A (op ``a``) can be read in place from, with rows ``m`` as wide rows, or None: every dim
    that moves A walks one axis of its (contiguous) input with a positive step, each mask bounds one axis by its
    extent (the padding), the innermost row dim has unit step in the copy and some K dim walks its axis (a
    window), and the wide rows are at most MAX_WASTE times the output rows."""
    op = kernel.ops[a]
    view, full = op.attr("view"), kernel.full
    source = kernel.inputs[op.attr("buf")].shape
    alpha = _row_major(source)
    moving = [d for d in range(len(full)) if full[d] != 1 and view.strides[d]]
    walked = _walks(view.strides, moving, source)
    if walked is None:
        return None
    axis, coef = walked
    off = [0] * len(source)
    masked: dict[int, tuple[int, ...]] = {}  # axis: the coefficients of its mask
    for co, lo, hi in view.mask:
        dims = [d for d in range(len(full)) if co[d]]
        axes = {axis.get(d) for d in dims}
        if len(axes) != 1 or None in axes or any(co[d] != coef[d] for d in dims):
            return None
        (x,) = axes
        if x is None or x in masked or hi - lo != source[x]:
            return None
        masked[x], off[x] = co, -lo
    if any(axis[d] in masked and not masked[axis[d]][d] for d in moving):
        return None  # a dim walks a padded axis outside its mask
    rest = view.offset - sum(off[x] * alpha[x] for x in masked)
    for x in range(len(source)):  # the other axes' offsets, coarsest first
        if x not in masked:
            off[x], rest = divmod(rest, alpha[x])
    if rest:
        return None
    before, shape = [0] * len(source), list(source)
    for x in range(len(source)):
        lo_i = off[x]
        hi_i = off[x] + sum(coef[d] * (full[d] - 1) for d in moving if axis[d] == x)
        if x in masked:
            before[x] = max(0, -lo_i)
            shape[x] = source[x] + before[x] + max(0, hi_i - (source[x] - 1))
        elif lo_i < 0 or hi_i >= source[x]:
            return None
    beta = _row_major(tuple(shape))
    strides = tuple(coef[d] * beta[axis[d]] if d in axis else 0 for d in range(len(full)))
    offset = sum((off[x] + before[x]) * beta[x] for x in range(len(source)))
    rows_dims = [d for d in m if full[d] != 1]
    if not rows_dims or len(rows_dims) > 2 or strides[rows_dims[-1]] != 1:
        return None
    inner = rows_dims[-1]
    if not any(d in axis and axis[d] == axis[inner] for d in k):
        return None  # no window along the pixels (a 1x1 conv): nothing to share
    width = full[inner]
    pitch, rows = (strides[rows_dims[0]], full[rows_dims[0]]) if len(rows_dims) == 2 else (width, 1)
    if pitch < width or pitch > MAX_WASTE * width:
        return None
    reach = offset + sum(strides[d] * (full[d] - 1) for d in (*k, *batch)) + 1
    return Halo(source, tuple(shape), tuple(before), View(full, strides, offset), pitch, width, rows, reach)


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[x + 1:]) for x in range(len(shape)))


def _walks(strides: tuple[int, ...], moving: list[int], source: tuple[int, ...]
           ) -> tuple[dict[int, int], dict[int, int]] | None:
    """Per moving dim, the input axis it walks (the coarsest whose stride divides its own) and its step there."""
    alpha = _row_major(source)
    axis: dict[int, int] = {}
    coef: dict[int, int] = {}
    for d in moving:
        s = strides[d]
        walks = [x for x in range(len(source)) if source[x] > 1 and s > 0 and s % alpha[x] == 0]
        if not walks:
            return None
        axis[d] = max(walks, key=lambda x: alpha[x])
        coef[d] = s // alpha[axis[d]]
    return axis, coef


def halo_size(h: Halo, mr: int) -> int:
    """Floats of the copy: the padded input, and zeros past it up to what the last tile's rows read."""
    return max(math.prod(h.shape), h.reach + -(-h.wide // mr) * mr - 1)


def emit_halo_copy(h: Halo, buf: int, dst: str, size: int) -> list[str]:
    """Statements (inside a parallel region) filling ``dst`` with input ``buf`` between the zeros of its padding,
    then zeros up to ``size``; each loop ends in a barrier."""
    shape, before, source = h.shape, h.before, h.source
    alpha = _row_major(source)
    last = len(shape) - 1
    L = ["#pragma omp for schedule(static)",
         f"for (int64_t r = 0; r < {math.prod(shape[:last])}LL; r++) {{",
         f"    lum_t *restrict d = {dst} + r * {shape[last]};",
         "    int64_t s = 0, q = r; int ok = 1; (void)q;"]
    for x in reversed(range(last)):
        L.append(f"    {{ const int64_t u = q % {shape[x]} - {before[x]}; q /= {shape[x]}; "
                 f"ok &= (uint64_t)u < {source[x]}ULL; s += u * {alpha[x]}; }}")
    b, n = before[last], source[last]
    L += [f"    if (!ok) {{ for (int64_t w = 0; w < {shape[last]}; w++) d[w] = 0; continue; }}",
          f"    const lum_t *restrict x = in{buf} + s;",
          f"    for (int64_t w = 0; w < {b}; w++) d[w] = 0;",
          "    #pragma omp simd",
          f"    for (int64_t w = 0; w < {n}; w++) d[{b} + w] = x[w];",
          f"    for (int64_t w = {b + n}; w < {shape[last]}; w++) d[w] = 0;",
          "}",
          "#pragma omp for schedule(static)",
          f"for (int64_t w = {math.prod(shape)}; w < {size}; w++) {dst}[w] = 0;"]
    return L
