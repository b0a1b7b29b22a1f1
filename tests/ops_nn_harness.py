"""Run one ONNX node through luminal's op function and through onnxruntime, and compare."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from luminal.frontend_onnx.importer import const_tensor, materialise
from luminal.frontend_onnx.registry import OpContext, lookup
from luminal.ir import DType, Graph, Op, Tensor, optimize, run_reference


def luminal_run(op_type: str, inputs: list, attrs: dict, n_out: int = 1, opset: int = 17,
                consts: set[int] | frozenset = frozenset(), out_names: list[str] | None = None):
    """Returns (outputs, optimised graph). ``inputs`` entries may be None (absent)."""
    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    out_names = out_names or [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op_type, in_names, out_names, **attrs)
    tensors, graph_inputs, feeds = [], [], {}
    for k, a in enumerate(inputs):
        if a is None:
            tensors.append(None)
        elif k in consts:
            tensors.append(const_tensor(a))
        else:
            t = Tensor.input(in_names[k], a.shape, DType.from_numpy(a.dtype))
            tensors.append(t)
            graph_inputs.append(t.node)
            feeds[in_names[k]] = a
    fn = lookup("", op_type)
    assert fn is not None, op_type
    ctx = OpContext(node, opset, tensors, dict(attrs))
    outs = fn(ctx)
    if not isinstance(outs, list | tuple):
        outs = [outs]
    got = [(name, t) for name, t in zip(out_names, outs) if name and t is not None]
    g = Graph(graph_inputs, [materialise(t).node for _, t in got], [name for name, _ in got])
    g = optimize(g)
    vals = run_reference(g, feeds)
    return {name: v for (name, _), v in zip(got, vals)}, g


def ort_run(op_type: str, inputs: list, attrs: dict, out_types: dict, opset: int = 17,
            consts: set[int] | frozenset = frozenset(), out_names: list[str] | None = None):
    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    out_names = out_names or list(out_types)
    node = helper.make_node(op_type, in_names, out_names, **attrs)
    g_in, inits, feeds = [], [], {}
    for k, a in enumerate(inputs):
        if a is None:
            continue
        if k in consts:
            inits.append(onnx.numpy_helper.from_array(a, in_names[k]))
        else:
            g_in.append(helper.make_tensor_value_info(in_names[k], helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
            feeds[in_names[k]] = a
    g_out = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(out_types[n].dtype), None)
             for n in out_names if n]
    graph = helper.make_graph([node], "t", g_in, g_out, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [n for n in out_names if n]
    return dict(zip(names, sess.run(names, feeds)))


def check(op_type: str, inputs: list, attrs: dict | None = None, n_out: int = 1, opset: int = 17,
          consts=frozenset(), rtol: float = 1e-4, atol: float = 1e-5, out_names: list[str] | None = None):
    attrs = attrs or {}
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    got, g = luminal_run(op_type, inputs, attrs, n_out, opset, consts, out_names)
    want = ort_run(op_type, inputs, attrs, got, opset, consts, out_names or list(got))
    assert set(want) == set(got)
    for name in want:
        w, r = want[name], got[name]
        assert r.shape == w.shape, (name, r.shape, w.shape)
        assert r.dtype == w.dtype, (name, r.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(r.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(r, w, err_msg=name)
    return g


def op_counts(g: Graph) -> dict[Op, int]:
    out: dict[Op, int] = {}
    for n in g.toposort():
        out[n.op] = out.get(n.op, 0) + 1
    return out


def rand(*shape, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape).astype(dtype)


def check_against_onnx_reference(op_type: str, inputs: list, attrs: dict, opset: int = 19,
                                 consts=frozenset(), rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Like ``check`` but against onnx's own reference implementation (for where onnxruntime deviates)."""
    from onnx.reference import ReferenceEvaluator

    inputs = [None if a is None else np.asarray(a) for a in inputs]
    got, _g = luminal_run(op_type, inputs, attrs, 1, opset, consts)
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["o0"], **attrs)
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    want = ReferenceEvaluator(node).run(None, feeds)[0]
    np.testing.assert_allclose(got["o0"], want, rtol=rtol, atol=atol)
    return _g
