"""Several sizes on the command line (``--shape seq=16,32``, or the option repeated), and ``luminal check`` on
models whose sizes vary: a detector ending in NonMaxSuppression and a text model, at three sizes each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cli import check_cmd, inspect_cmd
from luminal.errors import LuminalError
from luminal.values import parse_shape_args, parse_shape_sets

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def test_a_comma_item_without_a_name_is_one_more_size_of_the_name_before():
    assert parse_shape_sets(["batch=1,seq=16,32"]) == [{"batch": 1, "seq": 16}, {"batch": 1, "seq": 32}]
    assert parse_shape_sets(["seq=16", "seq=128"]) == [{"seq": 16}, {"seq": 128}]
    assert parse_shape_sets(["batch=1,2", "x=1x3x8x8"]) == [{"batch": 1, "x": (1, 3, 8, 8)},
                                                          {"batch": 2, "x": (1, 3, 8, 8)}]
    assert parse_shape_sets(["x=1x3x8x8,1x3x16x16"]) == [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 16)}]
    assert parse_shape_args(["batch=1,seq=128"]) == {"batch": 1, "seq": 128}
    with pytest.raises(LuminalError, match="one size per dimension"):
        parse_shape_args(["seq=16,32"])
    with pytest.raises(LuminalError, match="expected name=value"):
        parse_shape_sets(["16,seq=3"])


def _detector(path: Path) -> Path:
    """A small conv head exported from torch, with NonMaxSuppression and the kept boxes added by onnx.helper."""
    torch = pytest.importorskip("torch")

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU())
            self.box, self.score = torch.nn.Conv2d(8, 4, 1), torch.nn.Conv2d(8, 1, 1)

        def forward(self, img):
            f = self.body(img)
            b = self.box(f).flatten(2).transpose(1, 2)
            xy, wh = b[..., :2] * 4, b[..., 2:].exp() * 2
            return torch.cat([xy - wh, xy + wh], dim=-1), torch.sigmoid(self.score(f).flatten(2))

    head = path.with_name("head.onnx")
    torch.onnx.export(Head(), torch.randn(1, 3, 16, 16), str(head), input_names=["img"],
                      output_names=["boxes", "scores"], dynamic_axes={"img": {2: "h", 3: "w"}}, opset_version=17,
                      dynamo=False)
    m = onnx.load(str(head))
    g = m.graph
    g.initializer.extend([numpy_helper.from_array(np.array([50], np.int64), "nms_max"),
                          numpy_helper.from_array(np.array([0.9], np.float32), "nms_iou"),
                          numpy_helper.from_array(np.array([0.4], np.float32), "nms_thr"),
                          numpy_helper.from_array(np.int64(2), "nms_col"),
                          numpy_helper.from_array(np.array([0], np.int64), "nms_axis")])
    g.node.extend([helper.make_node("NonMaxSuppression", ["boxes", "scores", "nms_max", "nms_iou", "nms_thr"],
                                    ["selected"]),
                   helper.make_node("Gather", ["selected", "nms_col"], ["keep"], axis=1),
                   helper.make_node("Squeeze", ["boxes", "nms_axis"], ["boxes2d"]),
                   helper.make_node("Gather", ["boxes2d", "keep"], ["det_boxes"], axis=0)])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["k", 4]),
                     helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3])])
    onnx.save(m, str(path))
    return path


def _check(path: Path, *shapes: str) -> dict:
    args = ["check", str(path), "--backend", "cpu", "--json", "-"]
    for s in shapes:
        args += ["--shape", s]
    r = invoke(check_cmd, args=args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_detector_with_nms_passes_check_at_three_sizes(tmp_path):
    report = _check(_detector(tmp_path / "det.onnx"), "h=16,32,48", "w=24")
    assert report["ok"] and len(report["models"]) == 3
    assert [m["inputs"]["img"]["shape"] for m in report["models"]] == [[1, 3, 16, 24], [1, 3, 32, 24], [1, 3, 48, 24]]
    kept = [m["outputs"][0]["shape"][0] for m in report["models"]]
    assert all(o["ok"] for m in report["models"] for o in m["outputs"]) and max(kept) > 1


def test_text_model_passes_check_at_three_sequence_lengths():
    report = _check(MODELS / "bert-small-torchscript.onnx", "batch=1", "seq=8", "seq=16", "seq=33")
    assert report["ok"] and [m["inputs"]["input_ids"]["shape"] for m in report["models"]] == [[1, 8], [1, 16], [1, 33]]


def test_a_command_on_one_size_refuses_several_in_one_line():
    r = invoke(inspect_cmd, args=["inspect", str(MODELS / "bert-small-torchscript.onnx"), "--shape", "seq=8,16"])
    assert r.exit_code == 2 and "one size per dimension" in r.output and "Traceback" not in r.output


def test_compile_without_sizes_writes_an_artifact_that_compiles_at_run_time(tmp_path):
    import shutil

    from runtime_util import make_model

    from luminal.cli import compile_cmd
    from luminal.runtime.session import InferenceSession

    src = make_model(tmp_path / "m.onnx")
    r = invoke(compile_cmd, args=["compile", str(src), "--backend", "cpu"])
    assert r.exit_code == 2 and "batch" in r.output and "--shape" in r.output  # no -o: one static plan, refused
    lazy, ready = tmp_path / "lazy", tmp_path / "ready"
    assert invoke(compile_cmd, args=["compile", str(src), "--backend", "cpu", "-o", str(lazy)]).exit_code == 0
    r = invoke(compile_cmd, args=["compile", str(src), "--backend", "cpu", "--shape", "batch=2,3", "-o", str(ready),
                                  "--json"])
    assert r.exit_code == 0 and [v["shapes"] for v in json.loads(r.output)["variants"]] == [{"batch": 2}, {"batch": 3}]
    moved = shutil.move(str(src), str(tmp_path / "elsewhere.onnx"))  # the artifact carries its model
    want = InferenceSession(moved, backend="cpu")
    for art, misses in ((lazy, 2), (ready, 0)):
        sess = InferenceSession(art)
        assert sess.get_inputs()[0].shape == ["batch", 8]
        for batch in (2, 3):
            x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
            for got, ref in zip(sess.run(None, {"x": x}), want.run(None, {"x": x})):
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        assert sess.variant_stats.misses == misses


def test_compile_of_a_model_cut_by_the_data(tmp_path):
    from luminal.cli import compile_cmd
    from luminal.runtime.session import InferenceSession

    det = _detector(tmp_path / "det.onnx")
    r = invoke(compile_cmd, args=["compile", str(det), "--backend", "cpu", "--shape", "h=16,w=16"])
    assert r.exit_code == 2 and "NonMaxSuppression" in r.output and "compile -o" in r.output, r.output
    art = tmp_path / "art"
    r = invoke(compile_cmd, args=["compile", str(det), "--backend", "cpu", "--shape", "h=16,w=16", "-o", str(art),
                                  "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["variants"] == [], r.output
    img = np.random.default_rng(0).standard_normal((1, 3, 32, 16)).astype(np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession(str(det), providers=["CPUExecutionProvider"]).run(None, {"img": img})
    for got, ref in zip(InferenceSession(art).run(None, {"img": img}), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_tune_takes_several_sizes_in_one_run(tmp_path):
    from runtime_util import make_model

    from luminal.cli import tune_cmd

    src = make_model(tmp_path / "m.onnx")
    r = invoke(tune_cmd, args=["tune", str(src), "--backend", "cpu", "--shape", "batch=2,3", "--budget", "4s",
                               "--cache", str(tmp_path / "c.db"), "--storage", f"sqlite:///{tmp_path / 's.db'}",
                               "--json", "-"])
    assert r.exit_code == 0, r.output
    models = json.loads(r.output[r.output.index("{"):])["models"]
    assert len(models) == 2 and models[0]["kernels"] and models[1]["kernels"]
    assert [m["shapes"] for m in models] == [{"batch": 2}, {"batch": 3}]  # each entry says its sizes
    assert {k["signature"] for k in models[0]["kernels"]}.isdisjoint(k["signature"] for k in models[1]["kernels"])


def test_bench_times_a_model_cut_by_the_data_at_two_sizes(tmp_path):
    from test_bench_cli import SCHEMA, validate

    from luminal.cli import main as cli_main

    if not any(c.name == "bench" for c in cli_main.app.registered_commands):
        cli_main._register()
    det, out = _detector(tmp_path / "det.onnx"), tmp_path / "bench.json"
    from typer.testing import CliRunner

    r = CliRunner().invoke(cli_main.app, ["bench", str(det), "--shape", "h=16,32", "--shape", "w=16", "--backend",
                                          "cpu", "--runs", "4", "--warmup", "0", "--threads", "1", "--json",
                                          str(out)])
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert validate(report, SCHEMA) == []
    assert [m["status"] for m in report["models"]] == ["ok", "ok"] and len({m["name"] for m in report["models"]}) == 2


def test_where_a_cut_model_cannot_run_the_refusal_is_one_line(tmp_path):
    det = _detector(tmp_path / "det.onnx")
    r = invoke(check_cmd, args=["check", str(det), "--backend", "reference", "--shape", "h=16,w=16"])
    assert r.exit_code == 2 and "output sizes depend on the data" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_check_takes_an_artifact_of_sizes_known_at_run_time(tmp_path):
    from runtime_util import make_model

    from luminal.cli import compile_cmd

    src, art = make_model(tmp_path / "m.onnx"), tmp_path / "art"
    assert invoke(compile_cmd, args=["compile", str(src), "--backend", "cpu", "-o", str(art)]).exit_code == 0
    r = invoke(check_cmd, args=["check", str(art), "--shape", "batch=2,5", "--json", "-"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["ok"] and [m["inputs"]["x"]["shape"] for m in report["models"]] == [[2, 8], [5, 8]]


def test_bench_times_an_artifact_of_sizes_known_at_run_time(tmp_path):
    """bench DIR on what compile -o writes for sizes known at run time (a foreign manifest to the static artifact's
    reader before): at the sizes given, else the first it holds a variant for; a model cut by the data too."""
    from runtime_util import make_model
    from test_bench_cli import SCHEMA, validate
    from typer.testing import CliRunner

    from luminal.cli import compile_cmd
    from luminal.cli import main as cli_main

    if not any(c.name == "bench" for c in cli_main.app.registered_commands):
        cli_main._register()
    src, art, cut_art = make_model(tmp_path / "m.onnx"), tmp_path / "art", tmp_path / "cut"
    det = _detector(tmp_path / "det.onnx")
    r = invoke(compile_cmd, args=["compile", str(src), "--backend", "cpu", "--shape", "batch=2,3", "-o", str(art)])
    assert r.exit_code == 0, r.output
    r = invoke(compile_cmd, args=["compile", str(det), "--backend", "cpu", "--shape", "h=16,w=16", "-o", str(cut_art)])
    assert r.exit_code == 0, r.output
    for folder, extra, shape in ((art, [], {"x": [2, 8]}), (art, ["--shape", "batch=5"], {"x": [5, 8]}),
                                 (cut_art, ["--shape", "h=16,w=16"], {"img": [1, 3, 16, 16]})):
        out = tmp_path / "bench.json"
        r = CliRunner().invoke(cli_main.app, ["bench", str(folder), *extra, "--runs", "3", "--warmup", "0",
                                              "--threads", "1", "--json", str(out)])
        assert r.exit_code == 0, r.output
        report = json.loads(out.read_text())
        assert validate(report, SCHEMA) == []
        (m,) = report["models"]
        assert m["status"] == "ok" and m["parity"]["ok"] and m["path"] == str(folder)
        assert {k: v["shape"] for k, v in m["inputs"].items()} == shape
