"""The official ONNX backend node tests for the ops in ops_elementwise/shape/reduce/control.

A case whose element types the IR does not have (float8, int4, strings, sequences)
must end in one clean LuminalError; every other case must match the expected outputs.
The installed onnx generates all its cases in memory at once (~15 s), so this is slow;
tests/conformance_harness.py runs the whole suite.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import pytest
from conformance_harness import bake, read_exclusions
from onnx import numpy_helper

from luminal import ir
from luminal.errors import LuminalError
from luminal.frontend_onnx import load, registry
from luminal.frontend_onnx.importer import all_graphs

MODULES = ("ops_elementwise", "ops_shape", "ops_reduce", "ops_control")
MINE = sorted({n for (d, n), fn in registry.REGISTRY.items() if fn.__module__.rsplit(".", 1)[-1] in MODULES and not d})
# ops the suite tests only inside multi-node cases ("expanded" here; test_frontend_control.py covers them)
NO_OWN_CASE = {"ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
               "SequenceLength", "SimplifiedLayerNormalization"}


@functools.cache
def _cases() -> dict[str, list]:
    """Cases whose every op is one of ours, grouped by the tested op ('expanded' for function bodies)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    out: dict[str, list] = {}
    for c in cases:
        if c.model is None:
            continue
        ops = {n.op_type for g in all_graphs(c.model.graph) for n in g.node}
        if not ops <= set(MINE):
            continue
        main = c.model.graph.node[-1].op_type if len(c.model.graph.node) == 1 else "expanded"
        out.setdefault(main, []).append(c)
    return out


def _unsupported(model: onnx.ModelProto) -> bool:
    """Element types or value kinds the IR has no dtype for."""
    ok = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE,
          onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
          onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
          onnx.TensorProto.BOOL}
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type not in ok:
            return True
    for n in model.graph.node:
        for a in n.attribute:
            if a.name == "to" and a.i not in ok:
                return True
    return False


def _array(v) -> np.ndarray:
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def _import(model: onnx.ModelProto, ins: list[np.ndarray]):
    """Node tests feed axes/shapes as inputs; real models carry them as initializers, so
    bake the inputs the importer needs constant into initializers: integer inputs first,
    then all of them (Range, NonZero)."""
    names = [vi.name for vi in model.graph.input]
    feeds = dict(zip(names, ins))
    for kinds in ("", "iu", "iufbV"):
        fixed = {k: v for k, v in feeds.items() if isinstance(v, np.ndarray) and v.dtype.kind in kinds}
        try:
            return load(bake(model, fixed)), {k: v for k, v in feeds.items() if k not in fixed}
        except LuminalError as e:
            if "must be constant" not in str(e) or kinds == "iufbV":
                raise
    raise AssertionError("unreachable")


# cases where x / scale lands exactly on a .5 rounding tie: the IR divides as x * Recip(scale),
# which can round the quotient to the other side of the tie, so a quantised value may differ by 1
QUANT_TIES = {"test_dynamicquantizelinear_expanded"}


def _close(got: np.ndarray, exp: np.ndarray, rtol: float, atol: float, int_atol: int = 0) -> None:
    assert got.shape == exp.shape, (got.shape, exp.shape)
    if int_atol and exp.dtype.kind in "iu":
        assert np.abs(got.astype(np.int64) - exp.astype(np.int64)).max(initial=0) <= int_atol
        return
    if exp.dtype.kind in "fV":
        half = exp.dtype.itemsize == 2
        tol = 1e-2 if half else max(rtol, 1e-4)
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), rtol=tol,
                                   atol=1e-2 if half else max(atol, 1e-5), equal_nan=True)
    else:
        np.testing.assert_array_equal(got.astype(exp.dtype), exp)


def _run(case) -> None:
    ins, outs = case.data_sets[0]
    if _unsupported(case.model) or f"node/{case.name}" in read_exclusions():  # refused in one line
        with pytest.raises(LuminalError) as e:
            _import(case.model, [v if isinstance(v, list) else _array(v) for v in ins])
        assert "\n" not in str(e.value)
        return
    ins, outs = [_array(v) for v in ins], [_array(v) for v in outs]
    r, feeds = _import(case.model, ins)
    got = ir.run_reference(r.graph, {k: v for k, v in feeds.items() if k in r.graph.input_names})
    assert len(got) == len(outs)
    for g, info, exp in zip(got, r.outputs, outs):
        _close(np.asarray(g).reshape(info.shape), exp, case.rtol, case.atol, int(case.name in QUANT_TIES))


@pytest.mark.slow
@pytest.mark.parametrize("group", [op for op in MINE if op not in NO_OWN_CASE] + ["expanded"])
def test_backend_node(group):
    cases = _cases().get(group, [])
    assert cases, f"the backend suite has no case for {group}"
    failures = []
    for case in cases:
        try:
            _run(case)
        except Exception as e:  # collect them all: one line per failing case
            failures.append(f"{case.name}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}")
    assert not failures, "\n".join(failures)

