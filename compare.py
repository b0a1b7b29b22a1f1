"""Arrays compared within a tolerance, as ``luminal check`` and the conformance harness compare outputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    reason: str = ""


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Comparison:
    """|got - want| <= atol + rtol * |want| elementwise; NaN and inf where expected;
    integers and bools exactly; shapes and dtypes must match."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return Comparison(False, reason=f"shape {list(got.shape)} != expected {list(want.shape)}")
    if got.dtype != want.dtype:
        return Comparison(False, reason=f"dtype {got.dtype} != expected {want.dtype}")
    if got.size == 0:
        return Comparison(True)
    if want.dtype.kind in "biu":
        diff = got.astype(np.float64) - want.astype(np.float64)
        n_bad = int(np.count_nonzero(diff))
        max_abs = float(np.abs(diff).max())
        return Comparison(n_bad == 0, max_abs, 0.0, f"{n_bad} elements differ (max {max_abs:g})" if n_bad else "")
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    if (gn != wn).any():
        return Comparison(False, float("nan"), float("nan"), f"NaN at {int((gn != wn).sum())} wrong positions")
    winf = np.isinf(w)
    if (np.isinf(g) != winf).any() or (g[winf] != w[winf]).any():
        return Comparison(False, float("inf"), float("inf"), "inf mismatch")
    fin = ~(wn | winf)
    if not fin.any():
        return Comparison(True)
    err = np.abs(g[fin] - w[fin])
    scale = np.abs(w[fin])
    max_abs = float(err.max())
    nz = scale > 0
    max_rel = float((err[nz] / scale[nz]).max()) if nz.any() else 0.0
    bad = err > atol + rtol * scale
    if bad.any():
        return Comparison(False, max_abs, max_rel, f"{int(bad.sum())}/{err.size} out of tolerance "
                                                   f"(max abs {max_abs:.3g}, max rel {max_rel:.3g})")
    return Comparison(True, max_abs, max_rel)
