"""``luminal bench --trace``: a Chrome trace-event file with one span per kernel per profiled run, named by the
ONNX nodes fused into it; the per-kernel table names kernels the same way; the report's plots read plainly."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
from cli_util import needs_cpu
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from luminal.cli import bench_svg
from luminal.cli import main as cli_main
from luminal.values import format_fixed

if not any(c.name == "bench" for c in cli_main.app.registered_commands):
    cli_main._register()



def _model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="enc[0]/fc"),
             helper.make_node("Relu", ["y"], ["r"], name="enc[0]/act"),
             helper.make_node("Softmax", ["r"], ["z"], axis=-1, name="head/softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@needs_cpu
def test_trace_file_has_a_span_per_kernel_per_run_named_by_onnx_nodes(tmp_path):
    model, trace = _model(tmp_path / "m.onnx"), tmp_path / "trace.json"
    res = CliRunner().invoke(cli_main.app, ["bench", str(model), "--backend", "cpu", "--runs", "2", "--warmup", "0",
                                            "--threads", "1", "--cache", str(tmp_path / "t.db"), "--json",
                                            str(tmp_path / "b.json"), "--trace", str(trace)])
    assert res.exit_code == 0, res.output
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    for e in events:  # the trace-event format's complete ("X") and metadata ("M") events
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["name"], str) and e["name"]
        if e["ph"] == "X":
            assert isinstance(e["ts"], float | int) and e["ts"] >= 0 and e["dur"] >= 0
    (kernels,) = [m["kernels"] for m in json.loads((tmp_path / "b.json").read_text())["models"]]
    spans = [e for e in events if e.get("cat") == "kernel"]
    runs = [e for e in events if e.get("cat") == "run"]
    assert len(spans) == len(kernels) * len(runs) and len(runs) >= 2
    nodes = {n for e in spans for n in e["args"]["nodes"]}
    assert nodes == {"enc[0]/fc", "enc[0]/act", "head/softmax"}
    assert any(e["name"].startswith("enc[0]/fc") for e in spans)
    for run in runs:  # each run's kernels lie inside it, in launch order
        inside = sorted((e for e in spans if e["args"]["run"] == run["args"]["run"]), key=lambda e: e["ts"])
        assert [e["args"]["kernel"] for e in inside] == list(range(len(kernels)))
        assert run["ts"] <= inside[0]["ts"] and inside[-1]["ts"] + inside[-1]["dur"] <= run["ts"] + run["dur"] + 1e-3
    assert any(m["args"]["name"] == "luminal: m" for m in events if m["name"] == "process_name")
    # the terminal's per-kernel table names them too, brackets and all
    assert "slowest kernels" in res.output and "enc[0]/fc" in res.output


def test_wide_ranges_print_without_exponents():
    assert format_fixed(2850.4) == "2850" and format_fixed(3180.0) == "3180"
    assert format_fixed(31.84) == "31.8" and format_fixed(0.012345) == "0.0123" and format_fixed(0) == "0"
    assert "e+" not in format_fixed(2.85e7, 4)


def _texts(svg: str) -> list[str]:
    return [re.sub(r"<title>.*?</title>", "", t) for t in re.findall(r"<text [^>]*>(.*?)</text>", svg)]


def test_trial_axis_steps_by_whole_trials_and_log_axis_reads_in_units():
    svg = bench_svg.line_plot({"a": [(0, 5.0), (1, 3.0), (2, 2.5), (3, 2.0)]}, "trial", "best time (ms)",
                              log_y=True, integer_x=True)
    ticks = _texts(svg)
    assert {"0", "1", "2", "3"} <= set(ticks) and not {"0.5", "1.5", "2.5"} & set(ticks)  # no half trials
    assert "log10" not in svg and "best time (ms)" in svg
    assert "2" in ticks and "5" in ticks  # log ticks at 2 and 5 ms, in the values' own unit


def test_legend_entries_do_not_overlap():
    names = {f"resnet: #{i} /layers/layers.{i}/conv1/Conv +2 (Conv+BatchNormalization+Relu)": [(0, 1.0 + i), (1, 1.0)]
             for i in range(7)}
    svg = bench_svg.line_plot(names, "trial", "best time (ms)", log_y=True, integer_x=True)
    boxes = []
    for m in re.finditer(r'<rect x="([\d.]+)" y="([\d.]+)" width="10" height="10"[^>]*/><text x="[\d.]+" y="[\d.]+" '
                         r'[^>]*><title>[^<]*</title>([^<]*)</text>', svg):
        x, y, label = float(m.group(1)), float(m.group(2)), m.group(3)
        boxes.append((x, y, x + 14 + bench_svg.LEGEND_CHAR_PX * len(label), y + 10))
    assert len(boxes) == 7
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    height = float(re.search(r'height="(\d+)"', svg).group(1))
    assert max(b[3] for b in boxes) <= height  # inside the picture
