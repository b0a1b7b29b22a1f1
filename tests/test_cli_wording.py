"""One wording per kind of error across commands, option values refused as the configuration refuses them, and
text from a user or a model shown as written (rich markup never read from it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cli import bench_cmd, check_cmd, compile_cmd, doctor_cmd, inspect_cmd, tune_cmd


def _model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="fc[0]"), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], [w])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


COMMANDS = [(check_cmd, ["check"]), (compile_cmd, ["compile"]), (inspect_cmd, ["inspect"]),
            (bench_cmd, ["bench", "--runs", "2"]), (tune_cmd, ["tune", "--budget", "5s"])]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()  # no configuration found above
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path / "none.db"))
    return tmp_path


@pytest.mark.parametrize("module, args", COMMANDS)
def test_a_missing_model_is_worded_one_way(project, module, args):
    r = invoke(module, args=[*args, "nope.onnx"])
    assert r.exit_code == 2 and r.output.strip() == "error: model 'nope.onnx' not found", r.output


@pytest.mark.parametrize("module, args", COMMANDS)
def test_a_folder_is_said_to_be_one(project, module, args):
    (project / "models").mkdir()
    r = invoke(module, args=[*args, "models"])
    assert r.exit_code == 2 and r.output.strip() == "error: model 'models' is a folder, not a file", r.output


@pytest.mark.parametrize("module, args", [(check_cmd, ["check"]), (compile_cmd, ["compile"]),
                                          (bench_cmd, ["bench"]), (doctor_cmd, ["doctor"])])
def test_an_unknown_backend_is_worded_one_way(project, module, args):
    model = [] if module is doctor_cmd else [str(_model(project / "m.onnx"))]
    r = invoke(module, args=[*args, *model, "--backend", "tpu"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --backend: expected one of auto, cuda, cpu, interpret, reference")
    assert r.output.rstrip().endswith("got 'tpu'")


def test_tolerances_are_refused_as_the_configuration_refuses_them(project):
    model = _model(project / "m.onnx")
    r = invoke(check_cmd, args=["check", str(model), "--atol", "-1"])
    assert r.exit_code == 2 and "error: --atol: must be a non-negative number, got -1" in r.output, r.output
    (project / "luminal.toml").write_text('atol = -1\n[[models]]\npath = "m.onnx"\n')
    r = invoke(check_cmd, args=["check"])
    assert r.exit_code == 2 and "luminal.toml atol: must be a non-negative number, got -1" in r.output, r.output


def test_doctor_separates_a_backend_state_from_its_detail(project):
    r = invoke(doctor_cmd, args=["doctor"])
    rows = [line for line in r.output.splitlines() if "backend auto" in line]
    assert rows and "ok: picks " in rows[0], r.output


def test_names_with_brackets_print_as_written(project):
    model = _model(project / "exp[v2]" / "zf[bold].onnx")
    r = invoke(compile_cmd, args=["compile", str(model), "--backend", "cpu"])
    assert r.exit_code == 0, r.output
    assert "compiled zf[bold].onnx for cpu" in r.output
    r = invoke(check_cmd, args=["check", str(model)])
    assert r.exit_code == 0 and "exp[v2]/zf[bold].onnx" in "".join(r.output.split()), r.output  # wrapped title
    r = invoke(inspect_cmd, args=["inspect", str(model), "--kernels"])
    assert r.exit_code == 0 and "zf[bold].onnx" in r.output and "fc[0]" in r.output, r.output
    r = invoke(bench_cmd, args=["bench", str(model), "--backend", "reference", "--runs", "2", "--warmup", "0"])
    assert r.exit_code == 0 and "zf[bold]" in r.output, r.output
    r = invoke(check_cmd, args=["check", str(model), "--json", "-"])
    assert json.loads(r.stdout)["model"].endswith("exp[v2]/zf[bold].onnx")


def test_help_texts_keep_their_brackets():
    for module, name in ((tune_cmd, "tune"), (check_cmd, "check")):
        r = invoke(module, args=[name, "--help"])
        assert "[tool.luminal]" in r.output, r.output
