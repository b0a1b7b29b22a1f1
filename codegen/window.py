"""Windows: a kernel that reads part of an input reads it from the first element it reaches.

A kernel reading a slice of a buffer (one step of an unrolled recurrence reading its step's row of the inputs'
projection, a convolution over the second half of a split) carries where the slice starts in its views' offsets,
so kernels alike but for where they read generate different code: an LSTM over 80 steps compiled to 79 copies of
one matrix-vector product, each cold in the instruction cache when it ran. ``windowed`` takes that start out of
the kernel: each input it reads only part of becomes a window of the buffer along its outermost axis of more
than one element (the rows any of its reads reaches), with the views' offsets counted from the window's first
element, which the backend binds in place of the buffer's.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.view import View, extent
from .kernel import Buffer, Kernel


def _reach(view: View) -> tuple[int, int]:
    """The lowest and highest flat element ``view`` may read (at most these)."""
    lo, hi = extent(view, view.strides)
    return view.offset + lo, view.offset + hi


def _window(buffer: Buffer, views: list[View]) -> tuple[int, Buffer] | None:
    """(first element, the window's buffer) for an input read by ``views``, where they reach fewer rows of its
    outermost non-unit axis than it has."""
    if not views or buffer.constant or buffer.numel == 0 or any(v.numel == 0 for v in views):
        return None
    axis = next((d for d, s in enumerate(buffer.shape) if s > 1), None)
    if axis is None:
        return None
    inner = math.prod(buffer.shape[axis + 1:])
    reach = [_reach(v) for v in views]
    first = max(0, min(lo for lo, _ in reach)) // inner
    last = min(buffer.numel - 1, max(hi for _, hi in reach)) // inner
    if (first == 0 and last == buffer.shape[axis] - 1) or last < first:
        return None
    shape = (*buffer.shape[:axis], last - first + 1, *buffer.shape[axis + 1:])
    return first * inner, replace(buffer, shape=shape)


def windowed(kernel: Kernel) -> tuple[Kernel, tuple[int, ...]]:
    """``kernel`` reading each input it reads part of through a window (constant inputs stay whole: a backend
    keeps what it lays out once per buffer), and per input the element its window starts at (0 for whole ones)."""
    views: dict[int, list[View]] = {i: [] for i in range(len(kernel.inputs))}
    for op in kernel.ops:
        if op.attr("buf") is not None:
            views[op.attr("buf")].append(op.attr("view"))
    found = {i: w for i, b in enumerate(kernel.inputs) if (w := _window(b, views[i])) is not None}
    if not found:
        return kernel, (0,) * len(kernel.inputs)

    def moved(attrs: tuple) -> tuple:
        buf = dict(attrs).get("buf")
        if buf not in found:
            return attrs
        return tuple((k, replace(v, offset=v.offset - found[buf][0]) if k == "view" else v) for k, v in attrs)

    ops = tuple(replace(op, attrs=moved(op.attrs)) for op in kernel.ops)
    inputs = tuple(found[i][1] if i in found else b for i, b in enumerate(kernel.inputs))
    return replace(kernel, inputs=inputs, ops=ops), tuple(found[i][0] if i in found else 0
                                                          for i in range(len(kernel.inputs)))
