"""The ONNX backend conformance harness, and the cases kept in tests/conformance/passing.txt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import conformance_harness as conf
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from luminal.compare import compare

# ---------------------------------------------------------------- comparison


def test_compare_uses_atol_plus_rtol_times_expected():
    want = np.array([1.0, 100.0, 0.0], np.float32)
    assert compare(want * np.float32(1 + 5e-4) + np.float32(5e-6), want, rtol=1e-3, atol=1e-5).ok
    bad = compare(np.array([1.0, 100.0, 2e-5], np.float32), want, rtol=1e-3, atol=1e-5)
    assert not bad.ok and "1/3 out of tolerance" in bad.reason
    assert bad.max_abs == pytest.approx(2e-5, rel=1e-3)


def test_compare_nan_and_inf_positions():
    want = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert compare(want.copy(), want, 1e-3, 1e-5).ok
    assert not compare(np.array([0.0, np.inf, -np.inf, 1.0], np.float32), want, 1e-3, 1e-5).ok
    assert not compare(np.array([np.nan, -np.inf, -np.inf, 1.0], np.float32), want, 1e-3, 1e-5).ok
    assert not compare(np.array([np.nan, np.inf, -np.inf, np.nan], np.float32), want, 1e-3, 1e-5).ok


def test_compare_integers_bools_exact_and_shape_dtype_must_match():
    assert compare(np.array([1, 2], np.int64), np.array([1, 2], np.int64), 1, 1).ok
    assert not compare(np.array([1, 3], np.int64), np.array([1, 2], np.int64), 1, 1).ok
    assert not compare(np.array([True]), np.array([False]), 1, 1).ok
    assert "dtype" in compare(np.array([1], np.int32), np.array([1], np.int64), 1, 1).reason
    assert "shape" in compare(np.zeros((1,), np.float32), np.zeros((), np.float32), 1, 1).reason


def test_half_precision_tolerances_are_wider():
    assert conf.tolerances(np.dtype(np.float32), 1e-3, 1e-7) == (1e-3, 1e-5)
    assert conf.tolerances(np.dtype(np.float16), 1e-3, 1e-7)[0] > 1e-3
    import ml_dtypes

    assert conf.tolerances(np.dtype(ml_dtypes.bfloat16), 1e-3, 1e-7)[0] == 2 ** -6


# ---------------------------------------------------------------- classification and one case

def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, et, shape):
    return helper.make_tensor_value_info(name, et, shape)


def test_unsupported_reasons():
    unknown_op = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2])],
                        [_vi("y", TensorProto.FLOAT, [2])])
    assert conf.unsupported_reason(unknown_op) == "ops NoSuchOp"
    uint4 = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", TensorProto.UINT4, [2])],
                   [_vi("y", TensorProto.UINT4, [2])])
    assert conf.unsupported_reason(uint4) == "dtype uint4"
    uint8 = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", TensorProto.UINT8, [2])],
                   [_vi("y", TensorProto.UINT8, [2])])
    assert conf.unsupported_reason(uint8) is None  # computed in int32, returned as uint8
    to_double = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE),
                        helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
                       [_vi("x", TensorProto.FLOAT, [2])], [_vi("z", TensorProto.FLOAT, [2])])
    assert conf.unsupported_reason(to_double) is None  # computed in float32, returned as float64
    to_complex = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.COMPLEX64)],
                        [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.COMPLEX64, [2])])
    assert conf.unsupported_reason(to_complex) == "dtype complex64"
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    seq_model = _model([helper.make_node("SequenceConstruct", ["x"], ["s"])], [_vi("x", TensorProto.FLOAT, [2])],
                       [seq])
    assert conf.unsupported_reason(seq_model) is not None
    ok = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2])],
                [_vi("y", TensorProto.FLOAT, [2])])
    assert conf.unsupported_reason(ok) is None


def _write_case(root: Path, name: str, model: onnx.ModelProto, inputs, outputs) -> conf.Case:
    d = root / name
    ds = d / "test_data_set_0"
    ds.mkdir(parents=True)
    onnx.save(model, str(d / "model.onnx"))
    for i, x in enumerate(inputs):
        conf.write_tensor(x, ds / f"input_{i}.pb")
    for i, x in enumerate(outputs):
        conf.write_tensor(x, ds / f"output_{i}.pb")
    return conf.Case(f"local/{name}", str(d))


def _reshape_relu():
    return _model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                  [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("shape", TensorProto.INT64, [2])],
                  [_vi("y", TensorProto.FLOAT, [3, 2])])


def test_run_case_passes_and_bakes_shape_inputs(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    case = _write_case(tmp_path, "reshape", _reshape_relu(), [x, np.array([3, 2], np.int64)],
                       [np.maximum(x.reshape(3, 2), 0)])
    r = conf.run_case(case)
    assert r.status == "passed", r.reason
    assert r.baked == ["shape"]
    assert r.ops == ["Relu", "Reshape"]


def test_run_case_fails_on_wrong_expected_output(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    case = _write_case(tmp_path, "wrong", _reshape_relu(), [x, np.array([3, 2], np.int64)],
                       [np.maximum(x.reshape(3, 2), 0) + 0.5])
    r = conf.run_case(case)
    assert r.status == "failed" and "out of tolerance" in r.reason


def test_run_case_counts_random_nodes_unsupported(tmp_path):
    x = np.ones((2, 3), np.float32)
    model = _model([helper.make_node("Dropout", ["x", "ratio", "train"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("ratio", TensorProto.FLOAT, []),
                    _vi("train", TensorProto.BOOL, [])], [_vi("y", TensorProto.FLOAT, [2, 3])], opset=13)
    random = _write_case(tmp_path, "random", model, [x, np.array(0.5, np.float32), np.array(True)], [x])
    r = conf.run_case(random)
    assert r.status == "unsupported" and "training-mode Dropout" in r.reason
    # ratio 0 keeps every element: deterministic, so it runs and is compared
    keep = _write_case(tmp_path, "keep", model, [x, np.array(0.0, np.float32), np.array(True)], [x])
    assert conf.run_case(keep).status == "passed"


def test_pool_times_out_a_hanging_case(tmp_path):
    # reading model.onnx from a FIFO with no writer blocks forever
    hang = tmp_path / "hang"
    hang.mkdir()
    os.mkfifo(hang / "model.onnx")
    x = np.ones((2, 3), np.float32)
    good = _write_case(tmp_path, "good", _reshape_relu(), [x, np.array([3, 2], np.int64)], [x.reshape(3, 2)])
    # the limit counts from when a started worker takes the case, so a slow start on a busy machine does not
    # eat into the good case's 20 s (it takes milliseconds); the two run side by side
    results = conf.run_cases([conf.Case("local/hang", str(hang)), good], workers=2, timeout=20)
    assert [r.status for r in results] == ["failed", "passed"]
    assert results[0].reason == "timeout after 20 s"


def test_main_writes_json(tmp_path):
    out = tmp_path / "r.json"
    assert conf.main(["--kinds", "node", "--filter", "test_relu", "--json", str(out), "--workers", "1"]) == 0
    data = json.loads(out.read_text())
    names = {r["name"] for r in data["results"]}
    assert "node/test_relu" in names
    assert data["totals"]["passed"] >= 1 and data["by_op"]["Relu"]["passed"] >= 1


def test_run_case_on_onnxruntime(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2, 3])],
                   [_vi("y", TensorProto.FLOAT, [2, 3])])
    assert conf.run_case(_write_case(tmp_path, "ok", model, [x], [np.maximum(x, 0)]), "onnxruntime").status == "passed"
    r = conf.run_case(_write_case(tmp_path, "bad", model, [x], [np.maximum(x, 0) + 1]), "onnxruntime")
    assert r.status == "failed" and "out of tolerance" in r.reason
    unknown = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2, 3])],
                     [_vi("y", TensorProto.FLOAT, [2, 3])])
    r = conf.run_case(_write_case(tmp_path, "unknown", unknown, [x], [x]), "onnxruntime")
    assert r.status == "failed" and r.reason.startswith("onnxruntime:")


def test_reference_runs_a_model_cut_by_the_data_in_segments(tmp_path):
    # NonZero's output size depends on the data: the reference executor runs the segments around it
    model = _model([helper.make_node("NonZero", ["x"], ["i"]), helper.make_node("Neg", ["i"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.INT64, None)])
    x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    case = _write_case(tmp_path, "nonzero", model, [x], [-np.stack(np.nonzero(x)).astype(np.int64)])
    r = conf.run_case(case, "reference")
    assert r.status == "passed", r.reason
    wrong = _write_case(tmp_path, "nonzero_wrong", model, [x], [np.stack(np.nonzero(x)).astype(np.int64)])
    assert conf.run_case(wrong, "reference").status == "failed"


def _result(name: str, status: str) -> conf.CaseResult:
    return conf.CaseResult(name, status, ops=["Relu"])


def test_comparison_counts_gaps_and_documented_exclusions(tmp_path):
    doc = tmp_path / "conformance.md"
    doc.write_text("| case | reason |\n|---|---|\n| `node/test_b` | string tensors |\nnode/test_c is not a row\n")
    exclusions = conf.read_exclusions(doc)
    assert exclusions == {"node/test_b": "string tensors"}
    runs = {
        "onnxruntime": [_result("node/test_a", "passed"), _result("node/test_b", "passed"),
                        _result("node/test_c", "passed"), _result("node/test_d", "failed")],
        "reference": [_result("node/test_a", "passed"), _result("node/test_b", "unsupported"),
                      _result("node/test_c", "failed"), _result("node/test_d", "passed")],
    }
    table = conf.comparison(runs, exclusions)
    s = table["summary"]
    assert s["onnxruntime_passed"] == 3
    assert s["reference"] == {"passed": 2, "onnxruntime_passed_and_not_here": 2, "documented": 1,
                              "undocumented": ["node/test_c"]}
    rows = {c["name"]: c for c in table["cases"]}
    assert rows["node/test_b"]["excluded"] == "string tensors" and rows["node/test_d"]["reference"] == "passed"
    md = conf.comparison_markdown(table)
    assert "| node/test_c | passed | failed |  |" in md and "onnxruntime passes 3" in md


def test_main_compare_reuses_earlier_results(tmp_path):
    earlier = tmp_path / "ref.json"
    assert conf.main(["--kinds", "node", "--filter", "test_relu", "--json", str(earlier), "--workers", "1"]) == 0
    out = tmp_path / "cmp.json"
    assert conf.main(["--kinds", "node", "--filter", "test_relu", "--compare", str(out), "--reuse", str(earlier),
                      "--workers", "1"]) == 0
    table = json.loads(out.read_text())
    relu = next(c for c in table["cases"] if c["name"] == "node/test_relu")
    assert relu["onnxruntime"] == "passed" and relu["reference"] == "passed"
    assert table["summary"]["reference"]["undocumented"] == []


def test_documented_exclusions_are_cases_this_onnx_ships():
    shipped = {c.name for c in conf.collect_cases(["node"])}
    listed = conf.read_exclusions()
    assert listed and not set(listed) - shipped, sorted(set(listed) - shipped)[:10]


# ---------------------------------------------------------------- the kept list

PASSING = conf.read_passing()


def _check_passing(names: list[str], backend: str = "reference") -> None:
    cases = conf.select(conf.collect_cases(), names=names)
    missing = sorted(set(names) - {c.name for c in cases})
    assert not missing, f"cases in passing.txt that this onnx does not ship: {missing[:10]}"
    results = conf.run_cases(cases, workers=2, timeout=120, backend=backend)
    broken = [f"{r.name}: {r.status} {r.reason}" for r in results if r.status != "passed"]
    assert not broken, f"{len(broken)} kept cases stopped passing:\n" + "\n".join(broken[:40])


def test_passing_list_is_substantial():
    assert len(PASSING) >= 1000


def test_kept_cases_still_pass_subset():
    """A deterministic third of passing.txt (every third case)."""
    _check_passing(PASSING[::3])


@pytest.mark.slow
def test_kept_cases_still_pass_all():
    _check_passing(PASSING)


def test_kept_cases_pass_compiled_for_cpu_subset():
    """A deterministic fifth of passing.txt, compiled to C kernels instead of run by the reference executor."""
    _check_passing(PASSING[1::5], backend="cpu")


@pytest.mark.slow
def test_kept_cases_pass_compiled_for_cpu_all():
    _check_passing(PASSING, backend="cpu")
