"""Every kernel of small example graphs compiles ahead of time for sm_80 and sm_90 (no GPU
needed) and fits the architecture's shared memory with its default schedule."""

from __future__ import annotations

import json
import os

import pytest
from sample_graphs import SAMPLES

from luminal.codegen.partition import partition
from luminal.codegen.triton import schedule as sched
from luminal.codegen.triton.aot import compile_aot

ARCHS = (80, 90)


@pytest.mark.parametrize("name", ["small_cnn", pytest.param("transformer_layer", marks=pytest.mark.slow)])
def test_aot_all_kernels(name, tmp_path):
    kernels = partition(SAMPLES[name]())
    record = []
    for k in kernels:
        s = sched.default(k)
        for arch in ARCHS:
            assert sched.valid(k, s, arch)
            info = compile_aot(k, s, arch)
            assert info.fits, (k.form, arch, info.shared)
            assert info.shared <= sched.SMEM_LIMIT[arch]
            record.append({"signature": k.signature, "form": k.form, **info.to_dict()})
    assert {r["arch"] for r in record} == set(ARCHS)
    out = os.environ.get("LUMINAL_AOT_REPORT")
    (tmp_path / f"{name}.json").write_text(json.dumps(record))
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({name: record}) + "\n")


def test_aot_big_tiles_exceed_sm80_but_not_sm90():
    from luminal.ir import DType, Graph, Tensor, optimize

    a = Tensor.input("a", (512, 512), DType.float32)
    b = Tensor.input("b", (512, 512), DType.float32)
    k, = partition(optimize(Graph([a.node, b.node], [a.matmul(b).contiguous().node], ["y"])))
    s = {**sched.default(k), "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3, "num_warps": 8}
    assert sched.shared_memory(k, s) == (128 * 64 * 2) * 4 * 3
    assert not sched.valid(k, s, 80) and sched.valid(k, s, 90)


def test_aot_split_k_and_half_contraction():
    from luminal.ir import DType, Graph, Tensor, optimize

    for dt in (DType.float32, DType.float16, DType.bfloat16):
        a = Tensor.input("a", (64, 256), dt)
        b = Tensor.input("b", (256, 48), dt)
        k, = partition(optimize(Graph([a.node, b.node], [a.matmul(b).contiguous().node], ["y"])))
        s = sched.default(k)
        if dt is DType.float32:
            s = {**s, "SPLIT_K": 4, "PRECISION": "tf32"}
        assert sched.valid(k, s, 90)
        assert compile_aot(k, s, 90).fits
