"""The ONNX node cases of the ops whose output's size depends on the data, compiled for the C backend: the harness
runs them as InferenceSession does (segments and host steps), and every one passes, on the reference executor
too."""

from __future__ import annotations

import conformance_harness as conf
import pytest

OPS = ("nonmaxsuppression", "unique", "compress")


@pytest.mark.parametrize("op", OPS)
def test_cut_op_node_cases_pass_on_the_c_backend(op):
    cases = conf.select(conf.collect_cases(["node"]), filter=f"test_{op}")
    assert len(cases) >= 5
    results = [conf.run_case(c, "cpu") for c in cases]
    assert [f"{r.name}: {r.reason}" for r in results if r.status != "passed"] == []


@pytest.mark.parametrize("op", OPS)
def test_cut_op_node_cases_pass_on_the_reference_executor_in_segments(op):
    cases = conf.select(conf.collect_cases(["node"]), filter=f"test_{op}")
    results = [conf.run_case(c, "reference") for c in cases]
    assert [f"{r.name}: {r.reason}" for r in results if r.status != "passed"] == []
