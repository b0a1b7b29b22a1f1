"""The regression gate fails closed: a baseline whose timings are damaged or implausible is exit 2 with one
line, never a silent pass ("+nan%", "-100%")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from luminal.cli import main as cli_main
from luminal.cli.bench_gate import gate, read_bench_json
from luminal.errors import LuminalError

if not any(c.name == "bench" for c in cli_main.app.registered_commands):
    cli_main._register()

GOOD = [0.0011, 0.0010, 0.0012, 0.0010]


def _doc(samples: object) -> dict:
    return {"models": [{"name": "tiny", "runtimes": {"luminal": {"samples_s": samples}}}]}


# JSON text, since NaN and Infinity are what a damaged or hand-edited file may hold
BAD = {
    "zeros": "[0, 0, 0]",
    "nan": "[NaN, NaN, NaN]",
    "a nan": "[0.001, NaN, 0.001]",
    "infinity": "[Infinity, 0.001]",
    "booleans": "[true, true, false]",
    "negative": "[-0.001, -0.002]",
    "text": '["0.001", "0.002"]',
    "empty": "[]",
    "not a list": "0.001",
    "nested": "[[0.001]]",
    "null": "null",
}


def _write(path: Path, samples_json: str) -> Path:
    path.write_text(json.dumps(_doc("@")).replace('"@"', samples_json))
    return path


@pytest.mark.parametrize("kind", list(BAD))
def test_an_implausible_baseline_is_refused(tmp_path: Path, kind: str):
    path = _write(tmp_path / "base.json", BAD[kind])
    with pytest.raises(LuminalError, match="implausible timings"):
        read_bench_json(path)
    with pytest.raises(LuminalError, match="implausible timings"):
        gate(_doc(GOOD), json.loads(path.read_text()), 0.05)


def test_a_sound_baseline_gates(tmp_path: Path):
    path = _write(tmp_path / "base.json", json.dumps(GOOD))
    (r,) = gate(_doc(GOOD), read_bench_json(path), 0.05)
    assert not r.failed and r.ratio == pytest.approx(1.0)
    unnamed: dict[str, object] = {"models": [{"runtimes": {}}]}
    (tmp_path / "unnamed.json").write_text(json.dumps(unnamed))
    with pytest.raises(LuminalError, match="without a name"):
        read_bench_json(tmp_path / "unnamed.json")
    # a model the baseline ran without luminal timings is not gated, as before
    (r,) = gate(_doc(GOOD), {"models": [{"name": "tiny", "runtimes": {}}]}, 0.05)
    assert r.ratio is None and not r.failed


def _tiny(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("kind", ["zeros", "nan", "booleans"])
def test_bench_with_a_corrupted_baseline_exits_2(tmp_path: Path, kind: str):
    model = _tiny(tmp_path / "tiny.onnx")
    base = _write(tmp_path / "base.json", BAD[kind])
    res = CliRunner().invoke(cli_main.app, ["bench", str(model), "--backend", "reference", "--runs", "2",
                                            "--warmup", "0", "--threads", "1", "--baseline", str(base)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "implausible timings" in lines[0], res.output
