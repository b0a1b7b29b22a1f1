"""Artifacts of models with symbolic dims: ``compile -o DIR`` without sizes for every dim (or with several sizes,
``--shape seq=16,32``) stores the model itself and a static artifact per set of sizes given; loading one gives a
DynamicModel that runs those sizes without compiling and compiles other sizes when it first sees them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..codegen.backend import Backend
from ..errors import LuminalError
from ..frontend_onnx.registry import DataDependent
from ..values import Shape
from .artifact import MANIFEST, file_sha256, load_artifact, write_artifact
from .dynamic import DynamicModel
from .variants import DEFAULT_SIZE

if TYPE_CHECKING:
    from ..cache import TuningCache

FORMAT = "luminal-dynamic-artifact"
FORMAT_VERSION = 1
MODEL_FILE = "model.onnx"


def is_dynamic_artifact(path: str | Path) -> bool:
    f = Path(path) / MANIFEST
    if not f.is_file():
        return False
    try:
        return json.loads(f.read_text()).get("format") == FORMAT
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


def _copy_model(model_path: Path, out: Path) -> None:
    """The model file and the external data files it names, under the same relative paths."""
    from ..frontend_onnx.importer import _external_tensors, read_model

    shutil.copyfile(model_path, out / MODEL_FILE)
    for t in _external_tensors(read_model(model_path)[0]):
        location = {e.key: e.value for e in t.external_data}.get("location", "")
        src, dst = (model_path.parent / location).resolve(), (out / location).resolve()
        if not location or out.resolve() not in dst.parents or not src.is_file():
            raise LuminalError(f"tensor {t.name!r}: its external data cannot be copied into the artifact")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            shutil.copyfile(src, dst)


def write_dynamic_artifact(model_path: str | Path, out_dir: str | Path, backend: Backend,
                           shape_sets: Sequence[Mapping[str, Shape]], cache: TuningCache | None = None,
                           max_memory: int | None = None) -> Path:
    """The model at ``model_path`` with a compiled variant for each fully bound set of sizes in ``shape_sets``
    (one that needs more than ``max_memory`` bytes is refused)."""
    from .compile import compile_model

    src, out = Path(model_path), Path(out_dir)
    if out.exists() and not out.is_dir():
        raise LuminalError(f"output path {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise LuminalError(f"output directory {out} is not empty and holds no luminal artifact")
    compiled_sets = []  # all compiled before anything is written: a refused model leaves no half-made folder
    for shapes in shape_sets:
        try:
            compiled_sets.append((shapes, compile_model(src, shapes, backend, cache, max_memory)))
        except DataDependent:  # cut into segments: those compile at run time
            continue
    out.mkdir(parents=True, exist_ok=True)
    _copy_model(src, out)
    variants: list[dict[str, Any]] = []
    for shapes, compiled in compiled_sets:
        rel = f"variants/v{len(variants):03d}"
        write_artifact(compiled, out / rel, src, dict(shapes))
        variants.append({"shapes": {k: list(v) if isinstance(v, tuple) else v for k, v in shapes.items()},
                         "dir": rel})
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "luminal_version": __version__,
                "model": {"file": MODEL_FILE, "sha256": file_sha256(src), "path": str(src.resolve())},
                "backend": backend.name, "variants": variants}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return out


def prebuilt_shapes(path: str | Path) -> list[dict[str, Shape]]:
    """The sets of sizes an artifact holds compiled variants for."""
    m = json.loads((Path(path) / MANIFEST).read_text())
    return [{k: tuple(v) if isinstance(v, list) else v for k, v in vs["shapes"].items()} for vs in m["variants"]]


def load_dynamic_artifact(path: str | Path, backend: str = "auto", threads: int | None = None,
                          cache: str | Path | TuningCache | None = None, variants: int = DEFAULT_SIZE
                          ) -> DynamicModel:
    from .compile import resolve_backend

    d = Path(path)
    try:
        m: dict[str, Any] = json.loads((d / MANIFEST).read_text())
        if m.get("format_version") != FORMAT_VERSION or m.get("luminal_version") != __version__:
            raise LuminalError(f"artifact {d} was written by luminal {m.get('luminal_version')} (format "
                               f"{m.get('format_version')}), this is {__version__}; recompile the model")
        model = d / str(m["model"]["file"])
        if not model.is_file() or file_sha256(model) != m["model"]["sha256"]:
            raise LuminalError(f"artifact {d}: its model file is missing or changed; recompile the model")
        name = m["backend"] if backend == "auto" else backend
        be = resolve_backend(name, threads)
        dyn = DynamicModel.of_file(model, be, cache, max(variants, len(m["variants"])))
        for v in m["variants"]:
            dyn.add(load_artifact(d / str(v["dir"]), be, model_path=model))
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise LuminalError(f"artifact {d} is malformed: {type(e).__name__}: {e}") from None
    return dyn
