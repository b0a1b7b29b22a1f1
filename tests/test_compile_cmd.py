"""``luminal compile``: JSON summary, artifact directory, exit code 2 on bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner


def make_model(path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_compile_cli(tmp_path):
    model_path = make_model(tmp_path / "m.onnx")
    from luminal.cli.main import _register, app

    _register()
    r = CliRunner().invoke(app, ["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2",
                                 "-o", str(tmp_path / "art"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["kernels"] >= 1 and data["artifact"] and data["cache"]["used"] in (True, False)
    assert (tmp_path / "art" / "manifest.json").is_file()
    for args in (["compile", str(tmp_path / "missing.onnx")],
                 ["compile", str(model_path), "--backend", "nope"],
                 ["compile", str(model_path), "--shape", "batch=x"]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
    r = CliRunner().invoke(app, ["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2"])
    assert r.exit_code == 0 and "kernels" in r.stdout
    # an artifact directory that is someone else's is not overwritten
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file.txt").write_text("x")
    r = CliRunner().invoke(app, ["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2",
                                 "-o", str(tmp_path / "other")])
    assert r.exit_code == 2
