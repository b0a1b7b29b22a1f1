"""Kernels named after the model: the ONNX nodes (name, op type) fused into each kernel, kept through the passes,
in artifacts, in ``inspect --kernels`` and in ``cache show``."""

from __future__ import annotations

import json
from pathlib import Path

from cli_util import invoke
from runtime_util import matmul_relu_softmax

from luminal.cli import cache_cmd, inspect_cmd
from luminal.codegen.partition import partition
from luminal.frontend_onnx.loader import Unbound, load_model
from luminal.ir import optimize
from luminal.runtime.report import node_label, op_label
from luminal.runtime.serialize import kernel_from_json, kernel_to_json

NAMES = {"exp[v2]/fc": "MatMul", "exp[v2]/act": "Relu", "head/softmax": "Softmax"}


def _model(path: Path) -> Path:
    return matmul_relu_softmax(path, names=("exp[v2]/fc", "exp[v2]/act", "head/softmax"))


def test_every_kernel_carries_the_model_nodes_fused_into_it(tmp_path):
    graph = optimize(load_model(_model(tmp_path / "m.onnx"), None, Unbound.REFUSE).graph)
    kernels = partition(graph)
    seen = [s for k in kernels for s in k.sources]
    assert {name for name, _ in seen} == set(NAMES)
    assert all(NAMES[name] == op for name, op in seen)
    fc = next(k for k in kernels if ("exp[v2]/fc", "MatMul") in k.sources)
    assert fc.sources[0] == ("exp[v2]/fc", "MatMul")  # graph order
    # never part of what a kernel is: the same structure from other nodes has the same signature
    again = kernel_from_json(kernel_to_json(fc))
    assert again.sources == fc.sources and again.signature == fc.signature


def test_labels():
    assert node_label([("a/conv", "Conv"), ("a/bn", "BatchNormalization"), ("a/relu", "Relu")]) == "a/conv +2"
    assert op_label([("a", "Conv"), ("b", "Relu"), ("c", "Relu")]) == "Conv+Relu"
    assert node_label([("x" * 100, "Add")], 20).startswith("…") and len(node_label([("x" * 100, "Add")], 20)) == 20
    assert node_label([]) == ""


def test_inspect_kernels_names_them(tmp_path):
    model = _model(tmp_path / "m.onnx")
    r = invoke(inspect_cmd, args=["inspect", str(model), "--kernels", "--json", "-"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["kernels"]
    assert {n[0] for row in rows for n in row["nodes"]} == set(NAMES)
    r = invoke(inspect_cmd, args=["inspect", str(model), "--kernels"])
    assert r.exit_code == 0 and "exp[v2]/fc" in r.output and "model nodes" in r.output, r.output


def test_cache_show_names_them(tmp_path):
    from luminal.cache import TuningCache

    c = TuningCache(tmp_path / "t.db")
    c.record_kernel("abcdef0123456789abcd", "contraction", "ir", {"full": [4], "nodes": [["exp[v2]/fc", "MatMul"]]},
                    "m.onnx")
    c.close()
    r = invoke(cache_cmd, args=["cache", "show", "abcdef", "--cache", str(tmp_path / "t.db")])
    assert r.exit_code == 0, r.output
    assert "model nodes: exp[v2]/fc (MatMul)" in r.output
