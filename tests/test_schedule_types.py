"""Typed schedules and the frozen kernel IR: schedules keep their stored JSON form exactly, the knobs a
backend declares are its space, and a kernel's form is fixed when it is built."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from sample_graphs import small_cnn, transformer_layer

from luminal.codegen.c import schedule as csched
from luminal.codegen.c.backend import CPUBackend
from luminal.codegen.kernel import Form, Kernel, Leaf, Space
from luminal.codegen.knobs import to_json
from luminal.codegen.partition import fusible_edges, partition
from luminal.codegen.triton import schedule as tsched
from luminal.ir import DType, Op


def _kernels() -> list[Kernel]:
    out: dict[str, Kernel] = {}
    for g in (transformer_layer(), transformer_layer(dtype=DType.bfloat16), small_cnn()):
        rng = random.Random(0)
        edges = fusible_edges(g)
        for decisions in (None, {e: rng.random() < 0.5 for e in edges}):
            for k in partition(g, decisions):
                out.setdefault(k.signature, k)
    return list(out.values())


KERNELS = _kernels()


def _random(space, valid, rng: random.Random, n: int) -> list[dict]:
    got: list[dict] = []
    for _ in range(200):
        s = {kn.name: rng.choice(kn.choices) for kn in space}
        if valid(s) and s not in got:
            got.append(s)
        if len(got) == n:
            break
    return got


def test_kernels_cover_every_form():
    assert {k.form for k in KERNELS} >= {Form.elementwise, Form.reduction, Form.contraction}


@pytest.mark.parametrize("threads", [1, 6])
def test_c_schedules_round_trip_through_json(threads):
    be = CPUBackend(dataclasses.replace(CPUBackend().target, threads=threads))
    rng = random.Random(threads)
    for k in KERNELS:
        space = be.space(k)
        for s in [be.default_schedule(k), *_random(space, lambda s, k=k: be.valid(k, s), rng, 3)]:
            stored = json.loads(json.dumps(s))
            t = csched.typed(k, stored, threads)
            assert t is not None and to_json(t) == s and list(to_json(t)) == list(s)
        # the stored form names exactly the kernel's knobs, in the space's order
        assert list(be.default_schedule(k)) == [kn.name for kn in space]


def test_c_schedules_refuse_what_is_no_schedule_of_the_kernel():
    be = CPUBackend()
    for k in KERNELS:
        d = be.default_schedule(k)
        name = next(iter(d))
        assert be.valid(k, d)
        assert not be.valid(k, {**d, "bogus": 1})
        assert not be.valid(k, {n: v for n, v in d.items() if n != name})
        assert not be.valid(k, {**d, name: "no such choice"})
        assert be.valid(k, {**d, "threads": 0}) and not be.valid(k, {**d, "threads": True})
        with pytest.raises(ValueError, match="not a schedule"):
            be.source(k, {**d, "bogus": 1})


def test_triton_schedules_round_trip_through_json():
    rng = random.Random(1)
    for k in KERNELS:
        for s in [tsched.default(k), *_random(tsched.space(k), lambda s, k=k: tsched.valid(k, s), rng, 3)]:
            t = tsched.typed(k, json.loads(json.dumps(s)))
            assert t is not None and to_json(t) == s and list(to_json(t)) == list(s)


def test_triton_precision_may_be_absent_and_is_a_knob_of_float32_products_only():
    contractions = [k for k in KERNELS if tsched.kind_of(k) is Form.contraction]
    dtypes = {k.ops[k.contraction.mul].dtype for k in contractions}
    assert dtypes == {DType.float32, DType.bfloat16}
    for k in contractions:
        d = tsched.default(k)
        assert d["PRECISION"] == "ieee"  # in every default, as stored before
        f32 = k.ops[k.contraction.mul].dtype is DType.float32
        assert ("PRECISION" in [kn.name for kn in tsched.space(k)]) == f32
        old = {n: v for n, v in d.items() if n != "PRECISION"}  # stored before the knob existed
        t = tsched.typed(k, old)
        assert t is not None and to_json(t) == old and tsched.valid(k, old)
        assert tsched.constexprs(k, t)["PRECISION"] == "ieee"
        # other products ignore it (their dot has its own precision), as schedules stored for them hold it
        assert tsched.valid(k, {**d, "PRECISION": "tf32"}) and not tsched.valid(k, {**d, "PRECISION": "fast"})


def test_kernels_are_frozen_and_their_form_is_derived_when_built():
    for k in KERNELS:
        rebuilt = Kernel.of(k.full, k.reduce_axes, list(k.inputs), list(k.ops), list(k.outputs))
        assert rebuilt.form is k.form and rebuilt.signature == k.signature
        with pytest.raises(dataclasses.FrozenInstanceError):
            k.form = Form.gather  # type: ignore[misc]
        assert all(isinstance(o.op, Op | Leaf) and isinstance(o.space, Space) for o in k.ops)
    # names given as text (a kernel read back from JSON) become the enums
    k = KERNELS[0]
    texts = [dataclasses.replace(o, op=str(o.op), space=str(o.space)) for o in k.ops]
    assert tuple(texts) == k.ops and all(isinstance(o.op, Op | Leaf) for o in texts)
