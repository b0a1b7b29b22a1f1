"""How the commands fail: one line per error, exit 2 for bad input and 3 for a fault in luminal,
names from a model never able to drive the terminal, onnxruntime's own log kept quiet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import typer
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from luminal.cli import check_cmd, common, inspect_cmd, modelcheck
from luminal.cli.main import _register, app
from luminal.errors import LuminalError


def _faulty_app(exc: BaseException) -> typer.Typer:
    fault = typer.Typer(pretty_exceptions_enable=False)

    @fault.callback()
    def root() -> None:
        """test root"""

    @fault.command("boom")
    @common.handle_errors
    def boom() -> None:
        raise exc

    return fault


@pytest.mark.parametrize("exc", [KeyError(13), AttributeError("'NoneType' object has no attribute 'shape'"),
                                 RecursionError("maximum recursion depth exceeded\nmore")])
def test_an_unexpected_fault_is_one_line_and_exit_3(exc):
    r = CliRunner().invoke(_faulty_app(exc), ["boom"])
    assert r.exit_code == common.INTERNAL_ERROR == 3
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: internal error: {type(exc).__name__}"), r.output
    assert "Traceback" not in r.output


def test_bad_input_stays_exit_2():
    r = CliRunner().invoke(_faulty_app(LuminalError("bad model")), ["boom"])
    assert r.exit_code == 2 and r.output.strip() == "error: bad model"


@pytest.fixture
def relu_model(tmp_path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_trace_of_an_internal_error(relu_model, monkeypatch, how):
    def broken(*args: object) -> None:
        raise KeyError("lost")

    monkeypatch.setattr(inspect_cmd, "inspect_model", broken)
    if not app.registered_commands:
        _register()
    plain = CliRunner().invoke(app, ["inspect", str(relu_model)])
    assert plain.exit_code == 3 and "Traceback" not in plain.output
    args, env = (["--debug"], {}) if how == "flag" else ([], {"LUMINAL_DEBUG": "1"})
    r = CliRunner().invoke(app, [*args, "inspect", str(relu_model)], env=env)
    common.show_traces(False)
    assert r.exit_code == 3
    assert "Traceback" in r.output and "in broken" in r.output
    assert r.output.strip().splitlines()[-1].startswith("error: internal error: KeyError")


def test_control_characters_in_names_are_printed_escaped(tmp_path):
    inp, out = "x\x1b[31mred\x1b]0;title\x07\nline", "y\u202egnp.exe"
    g = helper.make_graph([helper.make_node("Relu", [inp], [out])], "g",
                          [helper.make_tensor_value_info(inp, TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for args in (["check", str(path)], ["inspect", str(path), "--ir"]):
        r = invoke(check_cmd, inspect_cmd, args=args)
        assert r.exit_code == 0, r.output
        assert not any(c in r.output for c in "\x1b\x07\u202e"), repr(r.output)
        flat = "".join(r.output.split())
        assert "y\\u202egnp.exe" in flat
        if args[0] == "inspect":
            assert "x\\x1b[31mred\\x1b]0;title\\x07\\nline" in flat


def test_printable_keeps_ordinary_text():
    assert common.printable("naïve résumé [bold] 名前") == "naïve résumé [bold] 名前"
    assert common.printable("a\tb\x00c\x9bd") == "a\\tb\\x00c\\x9bd"


def test_onnxruntime_does_not_log_a_failed_run(tmp_path, capfd):
    """Its error comes back as the exception, which luminal words; its own coloured log line stays out."""
    g = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([7, 3], np.int64), "t")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(LuminalError, match="onnxruntime cannot run the model"):
        modelcheck.run_onnxruntime(str(path), {"x": np.zeros(20, np.float32)})
    captured = capfd.readouterr()
    assert "onnxruntime" not in captured.err and "\x1b[" not in captured.err, captured.err
