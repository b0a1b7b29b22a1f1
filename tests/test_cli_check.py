"""``luminal check`` and ``luminal inspect``: exit codes, tables, JSON, seeded inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cli import check_cmd, inspect_cmd, modelcheck
from luminal.errors import LuminalError
from luminal.target import resolve_backend


def _invoke(*args: str):
    return invoke(check_cmd, inspect_cmd, args=list(args))


@pytest.fixture(scope="module")
def embed_model(tmp_path_factory) -> Path:
    """ids[batch, seq] -> Gather from a 7-row table -> MatMul -> Softmax; the ids must stay < 7."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((7, 4)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["m"]),
             helper.make_node("Softmax", ["m"], ["probs"], axis=-1),
             helper.make_node("ArgMax", ["m"], ["best"], axis=-1, keepdims=0)]
    g = helper.make_graph(nodes, "embed",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", "seq", 3]),
                           helper.make_tensor_value_info("best", TensorProto.INT64, ["batch", "seq"])],
                          [table, w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("models") / "embed.onnx"
    onnx.save(model, str(path))
    return path


def test_index_inputs_stay_inside_the_table(embed_model):
    proto = onnx.load(str(embed_model))
    assert modelcheck.index_bounds(proto) == {"ids": 7}

    class IO:
        name, dtype, shape = "ids", np.dtype(np.int64), (4, 50)

    feeds = modelcheck.make_inputs([IO()], proto, seed=3)
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() == 6
    again = modelcheck.make_inputs([IO()], proto, seed=3)
    assert np.array_equal(feeds["ids"], again["ids"])


def test_check_ok_prints_a_table(embed_model):
    r = _invoke("check", str(embed_model), "--shape", "batch=2,seq=5")
    assert r.exit_code == 0, r.output
    assert "probs" in r.output and "best" in r.output and "pass" in r.output
    # by default the kernels compile would build, named in the title
    assert f"{resolve_backend('auto')} vs onnxruntime" in " ".join(r.output.split())


def test_check_reference_backend_stays(embed_model):
    r = _invoke("check", str(embed_model), "--shape", "batch=2,seq=5", "--backend", "reference", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["backend"] == "reference"


def test_check_json_report(embed_model, tmp_path):
    out = tmp_path / "report.json"
    r = _invoke("check", str(embed_model), "--shape", "batch=2,seq=5", "--seed", "4", "--json", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["ok"] is True and data["seed"] == 4 and data["backend"] == resolve_backend("auto")
    assert data["inputs"]["ids"] == {"shape": [2, 5], "dtype": "int64"}
    assert {o["name"] for o in data["outputs"]} == {"probs", "best"}
    assert all(o["max_abs"] <= 1e-5 for o in data["outputs"])


def test_check_exit_1_when_out_of_tolerance(embed_model, monkeypatch):
    def perturbed(graph, feeds):
        return [o + 1 if o.dtype.kind == "f" else o for o in modelcheck.run_reference(graph, dict(feeds))]

    monkeypatch.setitem(modelcheck.BACKENDS, "perturbed", perturbed)
    r = _invoke("check", str(embed_model), "--shape", "batch=1,seq=3", "--backend", "perturbed")
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.output and "out of tolerance" in r.output


def test_the_absolute_tolerance_scales_with_an_outputs_largest_magnitude():
    # logits reaching 150: float32 rounding of 1e-6 of that lands on the elements near zero too
    want = {"y": np.array([150.0, -40.0, 0.01, -0.003], dtype=np.float32)}
    noisy = {"y": want["y"] + np.float32(3e-4) * np.array([1, -1, 1, 1], dtype=np.float32)}
    (c,) = modelcheck.compare_outputs(noisy, want, atol=1e-4, rtol=1e-3)
    assert c.ok and c.max_abs > 1e-4, c.reason
    # an error of a hundredth of the output's scale stays a failure, as does any error past atol below 1
    wrong = {"y": want["y"] + np.float32(1.5) * np.array([0, 0, 1, 0], dtype=np.float32)}
    (c,) = modelcheck.compare_outputs(wrong, want, atol=1e-4, rtol=1e-3)
    assert not c.ok and "1/4 out of tolerance" in c.reason
    small = {"y": np.array([0.5, 0.0], dtype=np.float32)}
    (c,) = modelcheck.compare_outputs({"y": small["y"] + np.float32(3e-4)}, small, atol=1e-4, rtol=1e-3)
    assert not c.ok
    # infinities and NaN do not set the scale; integer outputs stay exact
    inf = {"y": np.array([np.inf, np.nan, 0.0], dtype=np.float32)}
    (c,) = modelcheck.compare_outputs({"y": inf["y"] + np.float32(3e-4)}, inf, atol=1e-4, rtol=1e-3)
    assert not c.ok
    ints = {"i": np.array([1000, 0], dtype=np.int64)}
    (c,) = modelcheck.compare_outputs({"i": np.array([1000, 1], dtype=np.int64)}, ints, atol=1e-4, rtol=1e-3)
    assert not c.ok


def test_the_onnx_reference_decides_where_onnxruntime_is_the_one_off(embed_model, monkeypatch):
    real = modelcheck.run_onnxruntime

    def off(path, feeds):  # as onnxruntime's saturating integer kernels are on some CPUs
        return {k: v + 1 if v.dtype.kind == "f" else v for k, v in real(path, feeds).items()}

    monkeypatch.setattr(modelcheck, "run_onnxruntime", off)
    r = _invoke("check", str(embed_model), "--shape", "batch=1,seq=3")
    assert r.exit_code == 0, r.output
    assert "onnxruntime differs from the ONNX reference" in r.output and "probs" in r.output
    # without a reference to decide, the disagreement stays a failure
    monkeypatch.setattr(modelcheck, "run_onnx_reference", lambda path, feeds: None)
    r = _invoke("check", str(embed_model), "--shape", "batch=1,seq=3")
    assert r.exit_code == 1 and "out of tolerance" in r.output, r.output


def test_the_onnx_reference_runs_quantized_models_of_older_opsets(tmp_path):
    """onnxruntime's quantizer writes QuantizeLinear/DequantizeLinear at opsets 10-13, which onnx.reference only
    implements from 19: such a model runs converted to its newest opset (before: no reference, so a quantized
    output one step off onnxruntime's, as its own optimised graph is, could not be decided)."""
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(3, np.uint8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], [scale, zero])
    path = tmp_path / "q11.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), path)
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    got = modelcheck.run_onnx_reference(str(path), {"x": x})
    assert got is not None
    want = (np.clip(np.round(x / np.float32(0.05)) + 3, 0, 255) - 3) * np.float32(0.05)
    np.testing.assert_allclose(got["y"], want, rtol=1e-6)
    assert modelcheck.run_onnx_reference(str(path), {"nope": x}) is None  # a run that fails is no reference


def test_check_unknown_backend_is_exit_2_one_line(embed_model):
    r = _invoke("check", str(embed_model), "--shape", "batch=1,seq=3", "--backend", "tpu")
    assert r.exit_code == 2
    assert "--backend: expected one of auto, cuda, cpu, interpret, reference, got 'tpu'" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_run_backend_dispatch(embed_model):
    from luminal.frontend_onnx import load

    res = load(str(embed_model), {"batch": 1, "seq": 2})
    feeds = {"ids": np.array([[1, 6]], np.int64)}
    out = modelcheck.run_backend(res.graph, feeds, "reference")
    assert set(out) == {"probs", "best"} and out["probs"].shape == (1, 2, 3)
    with pytest.raises(LuminalError, match="backend 'tpu' is not available"):
        modelcheck.run_backend(res.graph, feeds, "tpu")
    compiled = modelcheck.run_backend(res.graph, feeds, "cpu")
    for name in out:
        np.testing.assert_allclose(compiled[name], out[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("content", [None, b"", b"\x08\x07garbage that is not protobuf \xff\xff\xff"])
def test_check_bad_files_exit_2(tmp_path, content):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    r = _invoke("check", str(path))
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_check_bad_shape_exit_2(embed_model):
    r = _invoke("check", str(embed_model), "--shape", "batch=two")
    assert r.exit_code == 2 and "bad --shape" in r.output


def test_inspect_table_and_ir(embed_model):
    r = _invoke("inspect", str(embed_model), "--shape", "batch=2,seq=5", "--ir")
    assert r.exit_code == 0, r.output
    for word in ("Gather", "MatMul", "Softmax", "SumReduce", "MaxReduce", "ids", "probs", "2x5x3"):
        assert word in r.output


def test_inspect_json(embed_model):
    r = _invoke("inspect", str(embed_model), "--shape", "batch=2,seq=5", "--json", "-")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["onnx_ops"] == {"ArgMax": 1, "Gather": 1, "MatMul": 1, "Softmax": 1}
    assert data["inputs"] == [{"name": "ids", "dtype": "int64", "shape": [2, 5]}]
    assert {o["name"]: o["shape"] for o in data["outputs"]} == {"probs": [2, 5, 3], "best": [2, 5]}
    assert data["primitive_nodes_after"] == sum(data["primitives_after_passes"].values()) > 0
    assert data["primitive_nodes_before"] == sum(data["primitives_before_passes"].values())
    assert data["primitive_nodes_before"] >= data["primitive_nodes_after"]


def test_luminal_entry_point_check(embed_model):
    exe = shutil.which("luminal", path=str(Path(sys.executable).parent))
    assert exe, "the luminal console script is not installed in this environment"
    p = subprocess.run([exe, "check", str(embed_model), "--shape", "batch=1,seq=4", "--json", "-"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ok"] is True
    p = subprocess.run([exe, "check", str(embed_model) + ".missing"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_check_without_model_reads_the_project_config(embed_model, tmp_path, monkeypatch):
    (tmp_path / "luminal.toml").write_text(
        f'atol = 1e-4\n[[models]]\nname = "embed"\npath = "{embed_model}"\nshapes = {{ batch = 2, seq = 3 }}\n'
        f'[[models]]\nname = "embed-whole"\npath = "{embed_model}"\nshapes = {{ ids = "1x4" }}\n')
    monkeypatch.chdir(tmp_path)
    r = _invoke("check", "--json", "-")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["ok"] is True and [m["inputs"]["ids"]["shape"] for m in data["models"]] == [[2, 3], [1, 4]]


def test_check_without_model_or_config_is_exit_2(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    r = _invoke("check")
    assert r.exit_code == 2 and "no MODEL given" in r.output


def test_check_without_model_uses_the_configured_cache(embed_model, tmp_path, monkeypatch):
    (tmp_path / "luminal.toml").write_text(
        f'cache = "proj.db"\n[[models]]\nname = "embed"\npath = "{embed_model}"\nshapes = {{ batch = 2, seq = 3 }}\n')
    monkeypatch.chdir(tmp_path)
    seen = []
    real = modelcheck.check_model
    monkeypatch.setattr(modelcheck, "check_model", lambda *a, cache=None, **kw: seen.append(cache) or real(*a, **kw))
    r = _invoke("check", "--json", "-")
    assert r.exit_code == 0, r.output
    assert seen == [str(tmp_path / "proj.db")]


def test_names_from_the_model_are_never_markup(tmp_path):
    path = tmp_path / "m[red].onnx"
    node = helper.make_node("Relu", ["[/in]"], ["[/out]"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("[/in]", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("[/out]", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for cmd, names in (("check", ("[/out]", "m[red].onnx")), ("inspect", ("[/in]", "[/out]", "m[red].onnx"))):
        r = _invoke(cmd, str(path))
        assert r.exit_code == 0, r.output
        flat = "".join(r.output.split())  # a long temporary path wraps the title
        assert all(n in flat for n in names), r.output


def test_check_missing_cache_file_is_exit_2(embed_model, tmp_path):
    """A mistyped --cache must not silently check the default schedules."""
    r = _invoke("check", str(embed_model), "--shape", "batch=1,seq=3", "--backend", "cpu",
                "--cache", str(tmp_path / "typo.db"))
    assert r.exit_code == 2 and "tuning cache " in r.output and "typo.db' not found" in r.output, r.output
    assert not (tmp_path / "typo.db").exists()
