"""Index arithmetic of the kernel IR, shared by the emitters.

Each function derives the terms of an index expression from shapes and Views
once; an emitter only spells them in its language (``/`` in C, ``//`` in
Triton).
"""

from __future__ import annotations

import itertools

from ..ir.view import View, contiguous_strides


def digits(shape: tuple[int, ...]) -> list[tuple[int, int | None] | None]:
    """The row-major unravel of a linear index over ``shape``: per dim None where its size is 1 (its index is
    0), else ``(divisor, modulus)`` with index = linear // divisor % modulus. The outermost dim of size > 1
    takes no modulus (a linear index past the end is out of bounds anyway)."""
    out: list[tuple[int, int | None] | None] = []
    outer = True
    for s, c in zip(shape, contiguous_strides(shape)):
        if s == 1:
            out.append(None)
            continue
        out.append((c, None if outer else s))
        outer = False
    return out


def run_coeff(coeffs: tuple[int, ...], dims: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The coefficient of the row-major flattened index of ``dims`` when the affine ``coeffs`` walk those dims
    as one run (``coeffs[a] == coeffs[b] * shape[b]`` for neighbours; dims of size 1 do not count), else None.
    No dims: 0."""
    real = [d for d in dims if shape[d] != 1]
    for a, b in itertools.pairwise(real):
        if coeffs[a] != coeffs[b] * shape[b]:
            return None
    return coeffs[real[-1]] if real else 0


def view_run(view: View, dims: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The stride of the flattened index of ``dims`` when the view reads them as one strided run with no mask
    constraint on them, else None."""
    if any(c[d] for c, _, _ in view.mask for d in dims if shape[d] != 1):
        return None
    return run_coeff(view.strides, dims, shape)


def view_exprs(view: View) -> list[tuple[tuple[int, ...], int, int | None]]:
    """The affine expressions a read through ``view`` evaluates, as (coefficients, constant, bound): first the
    element's address (bound None), then each mask constraint, shifted so that it holds where
    ``0 <= value < bound``."""
    return [(view.strides, view.offset, None), *view_masks(view)]


def view_masks(view: View) -> list[tuple[tuple[int, ...], int, int]]:
    """The mask constraints of ``view_exprs``: (coefficients, constant, bound), holding where
    ``0 <= value < bound``."""
    return [(c, -lo, hi - lo) for c, lo, hi in view.mask]
