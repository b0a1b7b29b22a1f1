"""``luminal compile`` on sizes that vary: several sets of sizes (``--shape seq=16,32``) compiled one by one, or,
with ``-o`` and dims left free, an artifact holding the model and a compiled variant per set of sizes given, which
compiles other sizes when a run first shows them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..values import Shape
from .common import console
from .project import shapes_label


def run_compile_dynamic(model: str, backend: str, shape_sets: Sequence[Mapping[str, Shape]], out: str,
                        cache: str | None, max_memory: int | None = None) -> dict:
    from ..frontend_onnx.importer import read_model
    from ..frontend_onnx.loader import unbound_dims
    from ..runtime.artifact import MANIFEST
    from ..runtime.compile import resolve_backend
    from ..runtime.dynamic_artifact import write_dynamic_artifact
    from ..runtime.feeds import model_io
    from .modelcheck import open_cache

    be = resolve_backend(backend)
    bound = [dict(s) for s in shape_sets if not unbound_dims(model, s)]
    tc = open_cache(cache)
    try:
        path = write_dynamic_artifact(model, out, be, bound, tc, max_memory)
    finally:
        if tc is not None:
            tc.close()
    built = json.loads((path / MANIFEST).read_text())["variants"]  # a set whose run is cut is not prebuilt
    inputs = model_io(read_model(model)[0])[0]
    return {"model": str(model), "backend": be.name, "artifact": str(path), "dynamic": True,
            "variants": [{"shapes": v["shapes"]} for v in built],
            "inputs": [{"name": i.name, "shape": i.shape, "type": i.type} for i in inputs]}


def show_dynamic(r: dict) -> None:
    t = Table(title=f"compiled {escape(Path(r['model']).name)} for {r['backend']}, sizes at run time",
              show_header=False)
    t.add_row("inputs", escape("; ".join(f"{i['name']} [{', '.join(map(str, i['shape']))}]" for i in r["inputs"])))
    built = [shapes_label(v["shapes"]) for v in r["variants"]]
    t.add_row("compiled now", escape("; ".join(built)) if built else "none: every size compiles at its first run")
    t.add_row("artifact", escape(r["artifact"]))
    console.print(t)
