"""Export CNNs through other frameworks' ONNX exporters, seeded, for benchmarks/cpu_models.py.

    python examples/export_foreign.py --exporter tf2onnx      # Keras applications through tf2onnx
    python examples/export_foreign.py --exporter paddle2onnx  # paddle.vision models through paddle2onnx

Run it with a Python that has the exporter installed (luminal installs neither: tensorflow and tf2onnx, or
paddlepaddle and paddle2onnx); it imports only that framework, numpy and the standard library. The models are
each framework's own architectures, randomly initialised with a fixed seed, their batch norms' statistics and
affine parameters moved off the identity (as trained ones are), exported with their batch dim symbolic under the
exporter's own name for it. Each is added to ``manifest.json`` in the output folder (size ``tf2onnx`` or
``paddle2onnx``) with its input's whole shape, so that

    python benchmarks/cpu_models.py --size tf2onnx --threads 2

times them against onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

KERAS = {"MobileNetV3Large": 224, "MobileNetV3Small": 224, "MobileNetV2": 224, "MobileNet": 224,
         "EfficientNetB0": 224, "ResNet50": 224, "DenseNet121": 224, "Xception": 299}
PADDLE = {"mobilenet_v3_large": 224, "mobilenet_v3_small": 224, "mobilenet_v2": 224, "shufflenet_v2_x1_0": 224,
          "resnet50": 224, "densenet121": 224, "googlenet": 224}


def _bn_values(rng: np.random.Generator, c: int) -> list[np.ndarray]:
    """gamma, beta, mean, variance of a batch norm over ``c`` channels."""
    return [(1 + 0.1 * rng.standard_normal(c)).astype(np.float32), (0.1 * rng.standard_normal(c)).astype(np.float32),
            (0.1 * rng.standard_normal(c)).astype(np.float32), rng.uniform(0.5, 1.5, c).astype(np.float32)]


def keras(name: str, size: int, path: Path) -> None:
    """Keras' ``name`` through tf2onnx (a SavedModel converted by its command line, as users run it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    model = getattr(tf.keras.applications, name)(weights=None, input_shape=(size, size, 3))
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.set_weights(_bn_values(rng, layer.get_weights()[0].shape[0]))
    with tempfile.TemporaryDirectory() as tmp:
        model.export(tmp)
        subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", tmp, "--output", str(path),
                        "--opset", "17"], check=True, capture_output=True)


def paddle(name: str, size: int, path: Path) -> None:
    """paddle.vision's ``name`` saved for inference and converted by paddle2onnx's command line."""
    import paddle as pd
    from paddle.static import InputSpec

    pd.seed(0)
    model = getattr(pd.vision.models, name)(pretrained=False)
    model.eval()
    rng = np.random.default_rng(0)
    for layer in model.sublayers():
        if isinstance(layer, pd.nn.BatchNorm2D):
            gamma, beta, mean, var = _bn_values(rng, layer.weight.shape[0])
            for p, v in ((layer.weight, gamma), (layer.bias, beta), (layer._mean, mean), (layer._variance, var)):
                p.set_value(v)
    with tempfile.TemporaryDirectory() as tmp:
        pd.jit.save(model, f"{tmp}/inference", input_spec=[InputSpec([None, 3, size, size], "float32", "x")])
        graph = "inference.json" if Path(f"{tmp}/inference.json").exists() else "inference.pdmodel"
        subprocess.run([str(Path(sys.executable).with_name("paddle2onnx")), "--model_dir", tmp, "--model_filename",
                        graph, "--params_filename", "inference.pdiparams", "--save_file", str(path),
                        "--opset_version", "13"], check=True, capture_output=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--exporter", choices=["tf2onnx", "paddle2onnx"], required=True)
    p.add_argument("--out", default=str(HERE / "models"), help="output folder (default examples/models)")
    p.add_argument("--only", default="", help="comma-separated model names")
    p.add_argument("--force", action="store_true", help="re-export files that exist")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {x for x in a.only.split(",") if x}
    models, export = (KERAS, keras) if a.exporter == "tf2onnx" else (PADDLE, paddle)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name, size in models.items():
        if only and name not in only:
            continue
        fname = f"{name}-{a.exporter}.onnx"
        if not a.force and fname in manifest and (out / fname).exists():
            continue
        shape = [1, size, size, 3] if a.exporter == "tf2onnx" else [1, 3, size, size]
        try:
            export(name, size, out / fname)
            import onnx  # both exporters install it

            inp = onnx.load(str(out / fname), load_external_data=False).graph.input[0].name
        except Exception as e:  # one model the exporter fails on does not stop the others
            print(f"{fname}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        manifest[fname] = {"model": name, "size": a.exporter, "exporter": a.exporter, "shapes": {inp: shape}}
        print(f"{fname}: exported", flush=True)
        manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
