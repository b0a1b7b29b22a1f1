"""Contraction epilogues that store a large output past the caches (``_Tiling.stream``: each run staged in L1, then
non-temporal stores), against the reference executor over the default and random points of the schedule space."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_util import compare_cpu, random_schedules
from codegen_util import graph as _graph
from test_c_direct_conv import _conv_graph, _the_conv

from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.c.contraction import STREAM_MIN_BYTES
from luminal.ir import DType, Tensor

RNG = np.random.default_rng(29)


def _check(g, feeds, ks, c, streams: bool) -> None:
    be = CPUBackend()
    default = be.default_schedule(c)
    assert ("lum_stream(" in be.source(c, default)) == streams
    for s in [default, *random_schedules(be, c, 4, 3, lambda s, _: s["impl"] == "generated")]:
        compare_cpu(g, feeds, 2e-5, 2e-5, scaled=True, schedules=[s if k is c else None for k in ks], kernels=ks)


@pytest.mark.parametrize("cin,cout,hw,stride,epilogue", [
    (3, 16, (128, 128), (1, 1), "relu"),      # pixels as columns: the epilogue stores along each tile row
    (3, 32, (200, 256), (2, 2), "silu"),      # a strided stem
])
def test_large_outputs_are_stored_past_the_caches(cin, cout, hw, stride, epilogue):
    g, feeds = _conv_graph(1, cin, cout, hw, stride=stride, epilogue=epilogue)
    ks, c = _the_conv(g)
    assert sum(b.nbytes for _, b in c.outputs) >= STREAM_MIN_BYTES
    _check(g, feeds, ks, c, True)


@pytest.mark.parametrize("cin,cout,hw,epilogue", [
    (3, 16, (64, 64), "relu"),        # 256 KiB: stays in the caches for its consumer
    (3, 24, (110, 110), "relu"),      # rows of 110 floats end mid-line
    (32, 96, (48, 64), "residual"),   # pixels as rows, read from the padded copy: tiles of wide rows of 66 cut lines
])
def test_other_outputs_are_stored_plainly(cin, cout, hw, epilogue):
    g, feeds = _conv_graph(1, cin, cout, hw, epilogue=epilogue)
    ks, c = _the_conv(g)
    assert sum(b.nbytes for _, b in c.outputs) >= STREAM_MIN_BYTES or hw == (64, 64)
    _check(g, feeds, ks, c, False)


def test_a_conv_with_two_outputs_streams_both():
    """The conv's sum and its ReLU, both graph outputs: one kernel, two staged rows."""
    x = Tensor.input("x", (1, 8, 96, 96), DType.float32)
    w = Tensor.const(RNG.standard_normal((32, 8, 1, 1)).astype(np.float32))
    y = x.reshape((8, 96 * 96)).permute((1, 0)).matmul(w.reshape((32, 8)).permute((1, 0)))
    g = _graph([x], [y, y.relu()])
    ks, c = _the_conv(g)
    assert len(c.outputs) == 2
    _check(g, {"x": RNG.standard_normal(x.shape).astype(np.float32)}, ks, c, True)
