"""Exported example models through the Triton interpreter, against onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from luminal.cli.modelcheck import load_model_proto, make_inputs
from luminal.runtime.session import InferenceSession

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
NAMES = ["resnet-small-torchscript.onnx", "bert-small-torchscript.onnx", "gpt2-small-dynamo.onnx"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_small_model_interpret_matches_onnxruntime(name):
    path = MODELS / name
    if not path.is_file():
        pytest.skip(f"{name} not exported (run examples/export_models.py --small-only)")
    shapes = json.loads((MODELS / "manifest.json").read_text())[name]["shapes"]
    sess = InferenceSession(path, backend="interpret", shapes=shapes)
    feeds = make_inputs(sess.model.inputs, load_model_proto(str(path)), seed=0)
    got = sess.run(None, feeds)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        [o.name for o in sess.get_outputs()], feeds)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
