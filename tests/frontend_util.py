"""Shared helpers for the frontend tests: build one-node models, run ours and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from luminal import ir
from luminal.frontend_onnx import load


def make_model(nodes, feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None,
               outputs: list[str] | None = None, opset: int = 17, input_shapes: dict | None = None,
               ) -> onnx.ModelProto:
    nodes = nodes if isinstance(nodes, list) else [nodes]
    inputs = []
    for name, v in feeds.items():
        shape = (input_shapes or {}).get(name, list(v.shape))
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), shape))
    outputs = outputs or [o for o in nodes[-1].output if o]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "test", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_ours(model: onnx.ModelProto, feeds: dict[str, np.ndarray], shapes=None) -> list[np.ndarray]:
    r = load(model, shapes)
    outs = ir.run_reference(r.graph, {k: v for k, v in feeds.items() if k in r.graph.input_names})
    # the reference executor returns 0-d outputs as shape [1]; the import records the true shape
    return [np.asarray(o).reshape(info.shape) for o, info in zip(outs, r.outputs)]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in s.get_inputs()}
    return s.run(None, {k: v for k, v in feeds.items() if k in names})


def assert_matches(model, feeds, rtol=1e-5, atol=1e-6, shapes=None) -> list[np.ndarray]:
    ours = run_ours(model, feeds, shapes)
    theirs = run_ort(model, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        b = np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        if b.dtype.kind == "f":
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)
        else:
            assert a.dtype.kind == b.dtype.kind or (a.dtype.kind in "iu" and b.dtype.kind in "iu"), (a.dtype, b.dtype)
            np.testing.assert_array_equal(a.astype(b.dtype), b)
    return ours


def session_matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], folder,
                                backend: str = "interpret", rtol: float = 1e-6, atol: float = 0.0,
                                ort_optimize: bool = True) -> Path:
    """The model saved in ``folder``: luminal's InferenceSession on ``backend`` against onnxruntime's (its graph
    optimisations off where ``ort_optimize`` is False), each output of the same shape and type, and close; the
    saved model's path."""
    from luminal.runtime.session import InferenceSession

    path = Path(folder) / "m.onnx"
    onnx.save(model, path)
    options = ort.SessionOptions()
    if not ort_optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = InferenceSession(path, backend=backend).run(None, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return path
