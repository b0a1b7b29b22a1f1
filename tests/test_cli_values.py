"""Values the fuzzer bent on the command line: each refused in one line with exit 2 before anything runs (no
traceback, no box, no hang, no file the user did not ask for), and the reports that go to stdout with '-'."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner, Result

from luminal.cache import TuningCache
from luminal.cli.main import _register, app
from luminal.target import cores
from luminal.values import most_per_core


def luminal(*args: str) -> Result:
    if not app.registered_commands:
        _register()
    return CliRunner().invoke(app, list(args))


def refused(r: Result, *words: str) -> None:
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output and "╭" not in r.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")
    return "m.onnx"


# ---------------------------------------------------------------- typer's usage errors

@pytest.mark.parametrize("args, words", [
    (["bench", "m.onnx", "--runs", "abc"], ["luminal bench", "--runs", "integer"]),
    (["check", "m.onnx", "--seed", "1.5"], ["--seed"]),
    (["cache", "ls", "--bogus"], ["luminal cache ls", "--bogus"]),
    (["cache", "prune", "--older-than"], ["--older-than"]),
    (["compile"], ["luminal compile", "model"]),
    (["tune", "m.onnx", "--workers"], ["--workers"]),
    (["bogus"], ["bogus"]),
    (["--bogus"], ["--bogus"]),
])
def test_a_usage_error_is_one_line_and_exit_2(model, args, words):
    refused(luminal(*args), *words)


def test_help_still_shows():
    for args in (["--help"], ["bench", "--help"], ["cache", "ls", "--help"]):
        r = luminal(*args)
        assert r.exit_code == 0 and "Usage" in r.output, r.output


# ---------------------------------------------------------------- numbers out of range

BIG = str(2**63)


@pytest.mark.parametrize("args, words", [
    (["check", "m.onnx", "--seed", "-1"], ["--seed", "-1"]),
    (["check", "m.onnx", "--seed", str(2**32)], ["--seed"]),
    (["bench", "m.onnx", "--seed", "-1"], ["--seed"]),
    (["tune", "m.onnx", "--budget", "1s", "--seed", str(2**40)], ["--seed"]),
    (["bench", "m.onnx", "--threads", "100000"], ["--threads", "at most"]),
    (["bench", "m.onnx", "--threads", "1000"], ["--threads"]),
    (["bench", "m.onnx", "--threads", str(2**31)], ["--threads"]),
    (["bench", "m.onnx", "--warmup", "nan"], ["--warmup"]),
    (["bench", "m.onnx", "--warmup", "inf"], ["--warmup"]),
    (["bench", "m.onnx", "--warmup", "1e308"], ["--warmup"]),
    (["bench", "m.onnx", "--warmup", BIG], ["--warmup"]),
    (["bench", "m.onnx", "--time", "1e308"], ["--time"]),
    (["bench", "m.onnx", "--runs", str(2**64)], ["--runs"]),
    (["bench", "m.onnx", "--runs", str(2**31)], ["--runs"]),
    (["tune", "m.onnx", "--budget", "1s", "--workers", str(2**31 - 1)], ["--workers"]),
    (["check", "m.onnx", "--atol", "-1"], ["--atol"]),
    (["check", "m.onnx", "--rtol", "-inf"], ["--rtol"]),
    (["bench", "m.onnx", "--atol", "-1e-3"], ["--atol"]),
])
def test_values_out_of_range_are_refused(model, args, words):
    refused(luminal(*args), *words)


def test_threads_bound_is_per_core(model):
    most = most_per_core(cores())
    refused(luminal("bench", "m.onnx", "--threads", str(most + 1)), str(most))


@pytest.mark.parametrize("line, words", [("threads = 100000", ["threads", "at most"]),
                                         ("threads = 0", ["threads"]),
                                         ("atol = -1.0", ["atol"]),
                                         ("rtol = -inf", ["rtol"])])
def test_the_configuration_is_held_to_the_same_bounds(model, line, words):
    Path("luminal.toml").write_text(f'{line}\nmodels = [{{path = "m.onnx"}}]\n')
    refused(luminal("bench", "--config", "luminal.toml", "--runs", "2"), *words)
    refused(luminal("check"), *words)


def test_a_binary_config_file_is_one_line(model):
    Path("bin.toml").write_bytes(b"\xff\xfe\x00\x81threads = 1\n")
    refused(luminal("bench", "m.onnx", "--config", "bin.toml"))


# ---------------------------------------------------------------- study storages

@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://", "sqlite:///", "x y", ":memory:",
                                 "sqlite:///no/such/dir/x.db"])
def test_a_storage_no_run_can_use_is_refused_at_once(model, url):
    refused(luminal("tune", "m.onnx", "--budget", "1s", "--storage", url), "--storage")
    assert not Path("no").exists()


def test_bench_reads_a_storage_that_exists_only(model):
    refused(luminal("bench", "m.onnx", "--storage", "sqlite:///studies.db", "--runs", "2", "--warmup", "0"),
            "--storage")
    assert not Path("studies.db").exists()


# ---------------------------------------------------------------- '-' is stdout, never a file named '-'

def test_compile_output_dash_is_refused(model):
    refused(luminal("compile", "m.onnx", "--output", "-"), "--output")
    assert not Path("-").exists()


def test_junit_and_json_dash_go_to_stdout(model):
    r = luminal("check", "m.onnx", "--backend", "reference", "--junit", "-")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("<?xml") and "<testsuites" in r.stdout and "onnxruntime" not in r.stdout
    r = luminal("check", "m.onnx", "--backend", "reference", "--json", "-")
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True
    assert not Path("-").exists()
    refused(luminal("check", "m.onnx", "--json", "-", "--junit", "-"), "--json", "--junit")


def test_html_dash_goes_to_stdout(model):
    r = luminal("bench", "m.onnx", "--backend", "reference", "--runs", "2", "--warmup", "0", "--threads", "1",
                "--html", "-")
    assert r.exit_code == 0, r.output
    assert r.stdout.lstrip().lower().startswith("<!doctype html") and "luminal bench" in r.stderr
    assert not Path("-").exists()
    refused(luminal("bench", "m.onnx", "--html", "-", "--json", "-"))


# ---------------------------------------------------------------- three the fuzzer found

def test_a_null_schema_version_is_a_corrupted_cache(tmp_path):
    path = tmp_path / "c.db"
    TuningCache(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = NULL WHERE key = 'schema_version'")
    db.close()
    refused(luminal("cache", "check", "--cache", str(path)), "schema version")


def test_an_export_record_type_that_is_not_a_string(tmp_path):
    export = tmp_path / "e.jsonl"
    export.write_text('{"format": "luminal-tuning-cache-export", "version": 1}\n{"type": {"a": 1}}\n')
    refused(luminal("cache", "import", str(export), "--cache", str(tmp_path / "c.db")), "record type")


def test_an_attribute_of_the_wrong_type_is_one_line(tmp_path):
    cast = helper.make_node("Cast", ["x"], ["y"])
    cast.attribute.append(helper.make_attribute("to", helper.make_tensor("t", TensorProto.INT64, [1], [1])))
    g = helper.make_graph([cast], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for command in ("compile", "inspect"):
        refused(luminal(command, str(path)), "'to'", "TENSOR", "INT")
