"""How import, the passes and partition scale with the number of nodes.

    python benchmarks/import_scaling.py [--sizes 1000,10000,100000] [--shapes chain,wide] [--compile] [--json F]

Two generated graphs per size: ``chain`` (n Relus one after the other) and ``wide`` (n Adds, node i adding
t[i] and t[i // 2], so values are read far from where they are made). Each runs in a fresh subprocess and
reports the seconds of ``frontend_onnx.load`` without the passes, of ``ir.optimize`` and of ``partition``,
wall and CPU, with the time per node: linear scaling keeps the time per node flat from 1k to 100k nodes.
``--compile`` goes on as ``luminal compile --backend cpu`` does: ``codegen`` (each kernel's default schedule and
C source) and ``build`` (the C backend's compile: the sources again, then the C compiler, with an empty build
cache), reported after the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time
import onnx
from onnx import TensorProto, helper
from luminal import ir
from luminal.codegen.partition import partition
from luminal.frontend_onnx import load

shape, n, path, compile_too = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
if shape == "chain":
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
else:
    nodes = [helper.make_node("Add", [f"t{i}", f"t{i // 2}"], [f"t{i + 1}"]) for i in range(n)]
g = helper.make_graph(nodes, shape, [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
out = {}
clocks = (time.perf_counter, time.process_time)
def stage(name, fn):
    t = [c() for c in clocks]
    r = fn()
    out[name] = [round(c() - t0, 3) for c, t0 in zip(clocks, t)]
    return r
res = stage("import", lambda: load(path, optimize=False))
graph = stage("optimize", lambda: ir.optimize(res.graph))
kernels = stage("partition", lambda: partition(graph))
out["primitives"] = sum(graph.primitive_counts().values())
out["kernels"] = len(kernels)
if compile_too:
    from luminal.codegen.backend import get_backend
    be = get_backend("cpu")
    stage("codegen", lambda: [be.source(k, be.default_schedule(k)) for k in kernels])
    stage("build", lambda: be.compile([(k, be.default_schedule(k)) for k in kernels]))
print(json.dumps(out))
"""


def measure(shape: str, n: int, folder: Path, compile_too: bool = False) -> dict:
    env = {**os.environ, "LUMINAL_C_CACHE": str(folder / f"c{shape}{n}")}  # every build from scratch
    p = subprocess.run([sys.executable, "-c", _CHILD, shape, str(n), str(folder / f"{shape}{n}.onnx"),
                        str(int(compile_too))], capture_output=True, text=True, timeout=3600, env=env)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--shapes", default="chain,wide")
    ap.add_argument("--compile", action="store_true", help="also time codegen and the C build (cpu backend)")
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            for n in (int(s) for s in args.sizes.split(",")):
                r = dict(shape=shape, nodes=n, **measure(shape, n, Path(tmp), args.compile))
                rows.append(r)
                if "error" in r:
                    print(f"{shape:5} {n:>7} nodes: {r['error']}")
                    continue
                cpu = sum(r[s][1] for s in ("import", "optimize", "partition"))
                print(f"{shape:5} {n:>7} nodes: " + ", ".join(f"{s} {r[s][0]:.2f} s" for s in
                                                          ("import", "optimize", "partition"))
                      + f" (wall); {cpu:.2f} s CPU in all, {1e6 * cpu / n:.0f} us per node; "
                        f"{r['primitives']} primitives, {r['kernels']} kernels"
                      + (f"; codegen {r['codegen'][0]:.2f} s, build {r['build'][0]:.2f} s" if "codegen" in r else ""))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
