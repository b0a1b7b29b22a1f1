"""`luminal bench` end to end on a tiny model (reference backend): JSON schema, HTML, parity refusal, the gate."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from luminal.cli import main as cli_main

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "bench.schema.json").read_text())
FAST = ["--backend", "reference", "--runs", "6", "--warmup", "0", "--threads", "1"]

if not any(c.name == "bench" for c in cli_main.app.registered_commands):
    cli_main._register()


# ---------------------------------------------------------------- a tiny JSON Schema validator (subset)

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(value, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def _bounds(value: float, schema: dict, where: str) -> list[str]:
    errors = []
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: {value} < {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{where}: {value} > {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        errors.append(f"{where}: {value} <= {schema['exclusiveMinimum']}")
    return errors


def _object_errors(value: dict, schema: dict, root: dict, where: str) -> list[str]:
    errors = [f"{where}: missing {key!r}" for key in schema.get("required", []) if key not in value]
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, v in value.items():
        if key in props:
            errors += validate(v, props[key], root, f"{where}.{key}")
        elif extra is False:
            errors.append(f"{where}: unexpected key {key!r}")
        elif isinstance(extra, dict):
            errors += validate(v, extra, root, f"{where}.{key}")
    return errors


def _array_errors(value: list, schema: dict, root: dict, where: str) -> list[str]:
    errors = []
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
        errors.append(f"{where}: {len(value)} items out of bounds")
    if "items" in schema:
        for i, v in enumerate(value):
            errors += validate(v, schema["items"], root, f"{where}[{i}]")
    return errors


def validate(value, schema: dict, root: dict | None = None, where: str = "$") -> list[str]:
    """Errors of ``value`` against the subset of JSON Schema that bench.schema.json uses."""
    root = root or schema
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return validate(value, node, root, where)
    errors: list[str] = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if "anyOf" in schema and all(validate(value, s, root, where) for s in schema["anyOf"]):
        errors.append(f"{where}: matches none of anyOf")
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is_type(value, t) for t in types):
            return [*errors, f"{where}: {type(value).__name__} is not {types}"]
    if _is_type(value, "number"):
        errors += _bounds(value, schema, where)
    if isinstance(value, dict):
        errors += _object_errors(value, schema, root, where)
    if isinstance(value, list):
        errors += _array_errors(value, schema, root, where)
    return errors


def test_validator_rejects_what_it_should():
    good = {"schema": "luminal-bench/1"}
    assert validate(good, {"type": "object", "properties": {"schema": {"const": "luminal-bench/1"}}}) == []
    assert validate({"x": 1}, {"type": "object", "required": ["y"], "additionalProperties": False})
    assert validate([1, "a"], {"type": "array", "items": {"type": "integer"}})
    assert validate(True, {"type": "number"})
    assert validate(-1, {"type": "number", "minimum": 0})


# ---------------------------------------------------------------- fixtures

def _save_tiny(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def tiny(tmp_path) -> Path:
    return _save_tiny(tmp_path / "tiny.onnx")


def invoke(*args: str):
    return CliRunner().invoke(cli_main.app, [str(a) for a in args])


# ---------------------------------------------------------------- tests

def test_json_output_matches_schema_and_holds_every_sample(tiny, tmp_path):
    out = tmp_path / "bench.json"
    res = invoke("bench", tiny, "--shape", "batch=3", *FAST, "--json", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert validate(doc, SCHEMA) == []
    (model,) = doc["models"]
    assert model["name"] == "tiny" and model["status"] == "ok" and model["parity"]["ok"]
    assert model["inputs"] == {"x": {"shape": [3, 8], "dtype": "float32"}}
    assert set(model["runtimes"]) == {"luminal", "onnxruntime"}
    for rt in model["runtimes"].values():
        assert len(rt["samples_s"]) == rt["runs"] == 6
        assert rt["p10_s"] <= rt["median_s"] <= rt["p90_s"]
    s = model["speedup"]["onnxruntime"]
    assert s["low"] <= s["ratio"] <= s["high"]
    assert doc["environment"]["threads"] == 1 and doc["settings"]["backend"] == "reference"
    assert "tiny" in res.output and "onnxruntime" in res.output


def test_json_to_stdout_is_pure_json(tiny):
    res = CliRunner().invoke(cli_main.app, ["bench", str(tiny), "--shape", "batch=1", *FAST, "--json", "-"])
    assert res.exit_code == 0
    assert validate(json.loads(res.stdout), SCHEMA) == []


def test_html_report_is_self_contained(tiny, tmp_path):
    html = tmp_path / "report.html"
    res = invoke("bench", tiny, "--shape", "batch=2", *FAST, "--html", html)
    assert res.exit_code == 0, res.output
    text = html.read_text()
    assert text.startswith("<!DOCTYPE html>") and "tiny" in text
    assert not re.search(r"<script|<link|\bsrc=|\bhref=|@import|url\(", text, re.I)
    svgs = re.findall(r"<svg.*?</svg>", text, re.S)
    assert len(svgs) >= 2
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    assert text.count("<circle") >= 12  # one dot per sample and runtime


def test_wrong_outputs_refuse_a_speed(tiny, tmp_path, monkeypatch):
    import luminal.ir

    real = luminal.ir.run_reference
    monkeypatch.setattr(luminal.ir, "run_reference", lambda g, feeds: [o + 0.5 for o in real(g, feeds)])
    out = tmp_path / "bench.json"
    res = invoke("bench", tiny, "--shape", "batch=2", *FAST, "--json", out)
    assert res.exit_code == 1
    assert "tiny: luminal's output 'z' differs from onnxruntime's" in res.output
    assert "no speed reported" in res.output
    doc = json.loads(out.read_text())
    assert validate(doc, SCHEMA) == []
    assert doc["models"][0]["status"] == "wrong-outputs" and "runtimes" not in doc["models"][0]


def test_baseline_gate(tiny, tmp_path):
    base = tmp_path / "base.json"
    assert invoke("bench", tiny, "--shape", "batch=2", *FAST, "--json", base).exit_code == 0
    doc = json.loads(base.read_text())
    samples = doc["models"][0]["runtimes"]["luminal"]["samples_s"]

    # a baseline 1000x slower than now: passes (factors far beyond the drift of a shared machine)
    doc["models"][0]["runtimes"]["luminal"]["samples_s"] = [s * 1000 for s in samples]
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(doc))
    res = invoke("bench", tiny, "--shape", "batch=2", *FAST, "--baseline", slow, "--max-regression", "5%")
    assert res.exit_code == 0, res.output
    assert "baseline: tiny: -" in res.output

    # a baseline 1000x faster than now: a regression beyond the noise
    doc["models"][0]["runtimes"]["luminal"]["samples_s"] = [s / 1000 for s in samples]
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(doc))
    out = tmp_path / "gated.json"
    res = invoke("bench", tiny, "--shape", "batch=2", *FAST, "--baseline", fast, "--max-regression", "5%",
                 "--json", out)
    assert res.exit_code == 1
    assert re.search(r"regression: tiny: \+\d+(\.\d)?% .*slower than the baseline, beyond the allowed 5%",
                     " ".join(res.output.split()))
    gated = json.loads(out.read_text())
    assert validate(gated, SCHEMA) == []
    assert gated["regression"]["results"][0]["failed"] is True


def test_configured_models_without_model_argument(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    _save_tiny(tmp_path / "models" / "a.onnx")
    _save_tiny(tmp_path / "b.onnx")
    (tmp_path / "luminal.toml").write_text("""
backend = "reference"
threads = 1
max_regression = "10%"
baseline = "bench/missing.json"
[[models]]
path = "models/a.onnx"
shapes = { batch = 2 }
[[models]]
path = "b.onnx"
name = "bee"
shapes = { x = "4x8" }
""")
    monkeypatch.chdir(tmp_path)
    res = invoke("bench", "--runs", "4", "--warmup", "0", "--json", "out.json")
    assert res.exit_code == 0, res.output
    assert "not gated" in res.output  # the configured baseline does not exist yet
    doc = json.loads((tmp_path / "out.json").read_text())
    assert validate(doc, SCHEMA) == []
    assert [m["name"] for m in doc["models"]] == ["a", "bee"]
    assert doc["models"][1]["inputs"]["x"]["shape"] == [4, 8]
    assert doc["settings"]["threads"] == 1 and doc["settings"]["backend"] == "reference"

    # a MODEL that the configuration lists keeps its configured name and shapes
    res = invoke("bench", "b.onnx", "--runs", "2", "--warmup", "0", "--json", "one.json")
    assert res.exit_code == 0, res.output
    (model,) = json.loads((tmp_path / "one.json").read_text())["models"]
    assert model["name"] == "bee" and model["inputs"]["x"]["shape"] == [4, 8]


@pytest.mark.parametrize("args, message", [
    (["missing.onnx", "--backend", "reference"], "model 'missing.onnx' not found"),
    (["{tiny}", "--backend", "tpu"], "--backend: expected one of"),
    (["{tiny}", "--runs", "1"], "--runs: must be at least 2, got 1"),
    (["{tiny}", "--threads", "0"], "--threads: must be at least 1, got 0"),
    (["{tiny}", "--atol", "-1"], "--atol: must be a non-negative number, got -1"),
    (["{tiny}", "--runs", "3", "--time", "2"], "give --runs or --time, not both"),
    (["{tiny}", "--against", "tensorflow"], "--against: unknown runtime 'tensorflow'"),
    (["{tiny}", "--max-regression", "lots"], "--max-regression: expected a percentage"),
    (["{tiny}", "--baseline", "nope.json"], "baseline 'nope.json' not found"),
    (["{tiny}", "--shape", "batch", "--backend", "reference"], "bad --shape 'batch'"),
    (["--shape", "batch=1", "--backend", "reference"], "--shape needs a MODEL"),
])
def test_bad_input_is_one_line_and_exit_2(tiny, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    res = invoke("bench", *[a.replace("{tiny}", str(tiny)) for a in args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_a_peer_that_cannot_run_the_model_is_skipped(tiny, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnx2torch", None)  # as if not installed
    out = tmp_path / "b.json"
    res = invoke("bench", tiny, "--backend", "reference", "--against", "onnxruntime,torch", "--runs", "2",
                 "--json", out)
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if " torch " in line)
    assert "skipped" in row  # one line in the table, the reason in a note
    text = " ".join(res.output.split())
    assert "tiny: torch skipped: --against torch needs the onnx2torch converter, which is not installed" in text
    doc = json.loads(out.read_text())
    assert validate(doc, SCHEMA) == []
    (model,) = doc["models"]
    assert set(model["runtimes"]) == {"luminal", "onnxruntime"} and "onnxruntime" in model["speedup"]
    assert model["skipped"] == {"torch": "--against torch needs the onnx2torch converter, which is not installed"}


def test_a_peer_that_fails_to_run_is_skipped(tiny, monkeypatch):
    from luminal.cli import benchlib

    def broken(model, feeds, settings, gpu=False):
        def call():
            raise NotImplementedError("Converter is not implemented (OperationDescription(op_type='Softmax'))")

        return benchlib.Runner("torch", call, lambda: {})

    monkeypatch.setattr(benchlib, "torch_runner", broken)
    res = invoke("bench", tiny, "--backend", "reference", "--against", "torch,onnxruntime", "--runs", "2",
                 "--json", "-")
    assert res.exit_code == 0, res.output
    (model,) = json.loads(res.stdout)["models"]
    assert model["skipped"]["torch"].startswith("NotImplementedError: Converter is not implemented")
    assert set(model["runtimes"]) == {"luminal", "onnxruntime"}


def test_no_model_and_no_config(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    res = invoke("bench")
    assert res.exit_code == 2
    assert "no MODEL given" in res.output


def test_cpu_backend_with_kernel_profile_and_tuning_progress(tiny, tmp_path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from luminal.codegen.partition import partition
    from luminal.frontend_onnx.loader import Unbound, load_model

    # `luminal tune` keeps its studies next to the cache: --html finds them without --storage; the report keeps
    # those of the benched model's kernels, not another model's that share the file
    sig = partition(load_model(tiny, {"batch": 4}, Unbound.REFUSE).graph)[0].signature
    for name in (f"luminal-kernel-{sig}-dev-tc", "luminal-kernel-0123456789abcdef0123-dev-tc", "k0"):
        study = optuna.create_study(study_name=name, storage=f"sqlite:///{tmp_path / 'studies.db'}")
        study.optimize(lambda t: t.suggest_float("x", 1e5, 2e5), n_trials=3)
    out, html = tmp_path / "cpu.json", tmp_path / "cpu.html"
    res = invoke("bench", tiny, "--shape", "batch=4", "--backend", "cpu", "--runs", "4", "--warmup", "0",
                 "--threads", "1", "--cache", tmp_path / "tuning.db", "--json", out,
                 "--html", html)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert validate(doc, SCHEMA) == []
    (model,) = doc["models"]
    assert model["parity"]["ok"] and model["kernels"] and all(k["seconds"] > 0 for k in model["kernels"])
    assert model["runtimes"]["luminal"]["info"]["backend"] == "cpu"
    assert doc["environment"]["toolchain"]["info"]["backend"] == "cpu"
    assert [t["study"] for t in doc["tuning"]] == [f"luminal-kernel-{sig}-dev-tc"]
    assert len(doc["tuning"][0]["trials"]) == 3 and doc["tuning"][0]["label"].startswith("#0 ")  # one model
    text = html.read_text()
    assert "Time per kernel" in text and "Tuning progress" in text and "best time (ms)" in text
    assert "0123456789abcdef0123" not in text and ">k0<" not in text
