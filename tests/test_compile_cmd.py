"""``luminal compile``: JSON summary, artifact directory, exit code 2 on bad input."""

from __future__ import annotations

import json

from cli_util import invoke
from runtime_util import make_model

from luminal.cli import compile_cmd


def test_compile_cli(tmp_path):
    model_path = make_model(tmp_path / "m.onnx")
    r = invoke(compile_cmd, args=["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2",
                                  "-o", str(tmp_path / "art"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["kernels"] >= 1 and data["artifact"] and data["cache"]["used"] in (True, False)
    assert (tmp_path / "art" / "manifest.json").is_file()
    for args in (["compile", str(tmp_path / "missing.onnx")],
                 ["compile", str(model_path), "--backend", "nope"],
                 ["compile", str(model_path), "--shape", "batch=x"]):
        r = invoke(compile_cmd, args=args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
    r = invoke(compile_cmd, args=["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2"])
    assert r.exit_code == 0 and "kernels" in r.stdout
    # an artifact directory that is someone else's is not overwritten
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file.txt").write_text("x")
    r = invoke(compile_cmd, args=["compile", str(model_path), "--backend", "interpret", "--shape", "batch=2",
                                  "-o", str(tmp_path / "other")])
    assert r.exit_code == 2
