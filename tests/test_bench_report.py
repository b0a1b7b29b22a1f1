"""The bench report's parts: JUnit XML, the HTML page with tuning progress, SVG plots, per-kernel profiles."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from luminal.cli.bench_report import render_html
from luminal.cli.bench_svg import bar_plot, distribution_plot, line_plot, nice_ticks
from luminal.cli.bench_tuning import tuning_progress
from luminal.cli.benchlib import profile_kernels, sanitize
from luminal.cli.junit import JUnitCase, check_cases, junit_xml, write_junit
from luminal.errors import LuminalError


def test_junit_counts_and_escaping(tmp_path):
    cases = [
        JUnitCase("bert", "luminal.check", 1.25),
        JUnitCase("gpt2 <&\"'>", "luminal.check", 0.5, failure="output 'logits': max abs err 0.3\nsecond line"),
        JUnitCase("vit", error="cannot import: \x00bad byte"),
        JUnitCase("resnet", skipped="not configured"),
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, "luminal check", cases)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root
    assert suite.attrib == {"name": "luminal check", "tests": "4", "failures": "1", "errors": "1",
                            "skipped": "1", "time": "1.750"}
    got = {c.attrib["name"]: c for c in suite}
    assert set(got) == {"bert", "gpt2 <&\"'>", "vit", "resnet"}
    assert list(got["bert"]) == []
    failure = got["gpt2 <&\"'>"].find("failure")
    assert failure.attrib["message"] == "output 'logits': max abs err 0.3" and "second line" in failure.text
    assert got["vit"].find("error").text == "cannot import: \ufffdbad byte"
    assert got["resnet"].find("skipped") is not None
    assert junit_xml("s", []).count("<testsuite ") == 1


def test_junit_cases_from_check_reports():
    from luminal.cli.modelcheck import CheckReport, OutputCheck

    good = CheckReport("m/a.onnx", "cpu", 1e-4, 1e-3, 0, {}, [OutputCheck("y", [2], "float32", 0.0, 0.0, True)],
                       {"import": 0.5, "cpu": 0.25}, ["opset 99 is new"])
    bad = CheckReport("m/b.onnx", "cpu", 1e-4, 1e-3, 0, {},
                      [OutputCheck("y", [2], "float32", 0.5, 0.1, False),
                       OutputCheck("z", [2], "int64", 1.0, 0.0, False, "1 elements differ (max 1)")])
    a, b = check_cases([good, bad])
    assert (a.name, a.classname, a.time_s, a.failure, a.output) == ("a.onnx", "luminal.check.cpu", 0.75, None,
                                                                      "opset 99 is new")
    assert b.failure == "output 'y': max abs err 0.5, max rel err 0.1\noutput 'z': 1 elements differ (max 1)"
    root = ET.fromstring(junit_xml("luminal check", [a, b]))
    assert root.attrib["failures"] == "1"


def test_svg_plots_are_well_formed_and_escape_labels():
    rng = np.random.default_rng(0)
    series = {"luminal <x>": list(rng.lognormal(-7, 0.1, 50)), "onnxruntime": list(rng.lognormal(-6.5, 0.1, 50))}
    for svg in (distribution_plot(series), line_plot({"a&b": [(0, 1.0), (1, 0.5)]}, "trial", "best", log_y=True),
                bar_plot([("k<0>", 0.001), ("k1", 0.002)] + [(f"k{i}", 1e-5) for i in range(2, 40)])):
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg")
        assert "<x>" not in svg and "k<0>" not in svg
    assert distribution_plot(series).count("<circle") == 100
    assert bar_plot([(f"k{i}", 1e-5) for i in range(40)], limit=10).count("<rect") == 11  # 10 bars + background
    assert distribution_plot({}) == "" and line_plot({}, "x", "y") == "" and bar_plot([]) == ""
    assert nice_ticks(0, 1) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])


def _study(storage: str, name: str, values: list[float]) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
    it = iter(values)
    study.optimize(lambda trial: (trial.suggest_int("x", 0, 3), next(it))[1], n_trials=len(values))


def test_tuning_progress_from_optuna_storage(tmp_path):
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    _study(storage, "kernel-a", [5.0, 3.0, 4.0, 1.0])
    _study(storage, "kernel-b", [2.0])
    progress = tuning_progress(storage)
    assert [p["study"] for p in progress] == ["kernel-a", "kernel-b"]
    assert progress[0]["best"] == [[0, 5.0], [1, 3.0], [2, 3.0], [3, 1.0]]
    assert progress[0]["trials"][2] == [2, 4.0]
    assert tuning_progress(str(tmp_path / "studies.db"))[1]["best"] == [[0, 2.0]]  # a bare file path works
    with pytest.raises(LuminalError, match="not found"):
        tuning_progress(str(tmp_path / "typo.db"))
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(LuminalError, match="cannot read the Optuna storage"):
        tuning_progress(str(tmp_path / "junk.db"))

    doc = sanitize({
        "created": "now", "settings": {"backend": "cpu", "against": ["onnxruntime"]},
        "environment": {"threads": 2, "luminal": "0", "device": {"info": {"model": "cpu <b>"}}},
        "models": [{"name": "m", "path": "m.onnx", "status": "ok",
                    "runtimes": {n: {"median_s": 0.01, "p10_s": 0.009, "p90_s": 0.012, "throughput_per_s": 100.0,
                                     "runs": 3, "samples_s": [0.009, 0.01, 0.012]}
                                 for n in ("luminal", "onnxruntime")},
                    "speedup": {"onnxruntime": {"ratio": 1.0, "low": 0.9, "high": 1.1, "confidence": 0.95}},
                    "kernels": [{"name": "#0 contraction", "seconds": 0.004}],
                    "parity": {"atol": 1e-4, "rtol": 1e-3, "ok": True,
                               "outputs": [{"name": "y", "shape": [2], "dtype": "float32", "max_abs": float("nan"),
                                            "max_rel": 0.0, "ok": True, "reason": ""}]}}],
        "tuning": progress,
    })
    html = render_html(doc)
    assert "Tuning progress" in html and "kernel-a" in html and "Time per kernel" in html
    assert "cpu &lt;b&gt;" in html and "<b>" not in html
    assert len(re.findall(r"<svg", html)) == 4  # distribution, drift, kernels, tuning
    assert not re.search(r"<script|\bsrc=|\bhref=", html)


def test_profile_kernels_times_every_kernel_of_a_compiled_model():
    from luminal.ir import DType, Graph, Tensor, optimize
    from luminal.runtime.compile import compile_graph

    x = Tensor.input("x", (256, 256), DType.float32)
    y = x.exp().add(1.0).matmul(Tensor.const(np.ones((256, 256), np.float32)))
    model = compile_graph(optimize(Graph([x.node], [y.contiguous().node], ["y"])), "cpu")
    feeds = {"x": np.zeros((256, 256), np.float32)}
    times = profile_kernels(model, feeds, repeats=3)
    assert [t["name"].split()[1] for t in times] == [k.form for k in model.kernels]
    assert all(t["name"].startswith(f"#{i} ") for i, t in enumerate(times))
    assert all(t["seconds"] > 0 for t in times)
    np.testing.assert_allclose(model.run(feeds)[0], np.full((256, 256), 512.0), rtol=1e-5)  # still runs
    assert profile_kernels(object(), {}) == []
