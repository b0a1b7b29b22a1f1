"""Seed models for the fuzzer: small graphs built with onnx.helper and the onnx package's model-zoo graphs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes  # the serialised ModelProto
    small: bool  # cheap enough to run through `check` and `compile` in bulk
    extra: tuple[tuple[str, bytes], ...] = ()  # files beside the model (external data)


def _vi(name: str, shape: list[int | str], dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _const(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(array, name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[TensorProto] = (), opset: int = OPSET) -> onnx.ModelProto:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def built_models() -> dict[str, onnx.ModelProto]:
    """Small graphs, one or two of each kind the importer treats specially."""
    n = helper.make_node
    models: dict[str, onnx.ModelProto] = {}
    models["matmul"] = _model([n("MatMul", ["x", "w"], ["t"]), n("Relu", ["t"], ["y"])],
                              [_vi("x", [4, 16])], [_vi("y", [4, 8])], [_const("w", _rand(16, 8))])
    models["conv"] = _model(
        [n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
         n("Relu", ["c"], ["r"]), n("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 4, 4])], [_const("w", _rand(4, 3, 3, 3)), _const("b", _rand(4))])
    models["gemm"] = _model([n("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5, beta=2.0)],
                            [_vi("x", [2, 6])], [_vi("y", [2, 5])], [_const("w", _rand(5, 6)), _const("b", _rand(5))])
    models["reshape"] = _model(
        [n("Reshape", ["x", "s"], ["r"]), n("Transpose", ["r"], ["t"], perm=[1, 0]),
         n("Softmax", ["t"], ["y"], axis=-1)],
        [_vi("x", [2, 3, 4])], [_vi("y", [12, 2])], [_const("s", np.array([2, 12], np.int64))])
    models["range"] = _model(
        [n("Range", ["start", "limit", "delta"], ["r"]), n("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
         n("Add", ["f", "x"], ["y"])],
        [_vi("x", [5])], [_vi("y", [5])],
        [_const("start", np.array(0, np.int64)), _const("limit", np.array(5, np.int64)),
         _const("delta", np.array(1, np.int64))])
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"]), n("Add", ["acc_in", "one"], ["acc_out"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [3])], [_const("one", np.ones(3, np.float32))])
    models["loop"] = _model(
        [n("Loop", ["trips", "cond", "x"], ["y"], body=body)], [_vi("x", [3])], [_vi("y", [3])],
        [_const("trips", np.array(4, np.int64)), _const("cond", np.array(True))])
    models["concat"] = _model(
        [n("Concat", ["x", "x"], ["c"], axis=1), n("Split", ["c", "parts"], ["a", "b"], axis=1),
         n("Slice", ["a", "starts", "ends", "axes"], ["s"]), n("Mul", ["s", "b"], ["y"])],
        [_vi("x", [2, 4])], [_vi("y", [2, 4])],
        [_const("parts", np.array([4, 4], np.int64)), _const("starts", np.array([0], np.int64)),
         _const("ends", np.array([4], np.int64)), _const("axes", np.array([1], np.int64))])
    models["dynamic"] = _model(
        [n("Add", ["x", "z"], ["a"]), n("ReduceMean", ["a"], ["y"], axes=[1], keepdims=1)],
        [_vi("x", ["N", 3]), _vi("z", ["N", 3])], [_vi("y", ["N", 1])], opset=13)
    models["gather"] = _model(
        [n("Gather", ["table", "idx"], ["g"], axis=0), n("LayerNormalization", ["g", "scale"], ["y"], axis=-1)],
        [_vi("idx", [2, 3], TensorProto.INT64)], [_vi("y", [2, 3, 4])],
        [_const("table", _rand(10, 4)), _const("scale", np.ones(4, np.float32))])
    then = helper.make_graph([n("Relu", ["x"], ["t"])], "then", [], [_vi("t", [3])])
    other = helper.make_graph([n("Neg", ["x"], ["e"])], "else", [], [_vi("e", [3])])
    models["if"] = _model([n("ReduceSum", ["x"], ["s"], keepdims=0), n("Greater", ["s", "zero"], ["c"]),
                           n("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                          [_vi("x", [3])], [_vi("y", [3])], [_const("zero", np.array(0, np.float32))])
    return models


def external_data_model() -> Seed:
    """A MatMul whose weight lives in a side file, so the fuzzer can damage offsets and lengths."""
    model = built_models()["matmul"]
    weight = model.graph.initializer[0]
    raw = weight.raw_data
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(len(raw)))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return Seed("external", model.SerializeToString(), True, (("w.bin", raw),))


def zoo_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def load_seeds() -> list[Seed]:
    seeds = [Seed(name, m.SerializeToString(), True) for name, m in built_models().items()]
    seeds.append(external_data_model())
    seeds += [Seed(p.stem, p.read_bytes(), False) for p in sorted(zoo_dir().glob("*.onnx"))]
    return seeds
