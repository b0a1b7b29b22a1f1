"""Layers inside a model: luminal's kernels against onnxruntime's nodes, per layer of the ONNX graph.

A layer timed alone flatters whichever runtime converts its layout inside the layer: onnxruntime's CPU EP reorders a
lone Conv's input and output to and from its blocked NCHWc layout on every call, which inside a model it does once.
So each model here runs whole, the two runtimes taking turns run by run, and each run is cut into layers: luminal's
kernels by the model nodes fused into them (``CompiledModel.spans``: the clock read between kernels as the run goes),
onnxruntime's nodes from its profiler (its fused and NCHWc nodes named after a model node or the tensor they write).
A profiled run takes longer than a plain one: onnxruntime's nodes summed up to 1.2x its plain runs
(MobileNetV3 and ShuffleNet, many short nodes; ResNet-50 1.05x), luminal's kernels 0.85-1.0x of its own (a run
also writes its inputs and copies its outputs). So each side also runs plainly, taking turns with the profiled runs,
and its layer times are scaled by its plain runs' median over its profiled runs' median sum: a model's layers add
up to each side's plain run, as its end-to-end ratio does.
A layer is a set of model nodes that a kernel or a node of either runtime computes together; nodes only onnxruntime
adds (its layout reorders) are a row of their own. Per layer: the median and p10/p90 over the runs of each side's
time, their ratio, luminal's kernel count, and a summary per kind of layer (its Conv by kernel, stride, dilation and
groups; else its first node's op).

    python benchmarks/model_layers.py --size cnn --only resnet50 --threads 2 --runs 20
    python benchmarks/model_layers.py --size cnn --top 15 --json layers.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchutil import blas_threads_from_argv, spread

if __name__ == "__main__":
    blas_threads_from_argv("OPENBLAS_NUM_THREADS")

# numpy and onnxruntime load after the BLAS threads are set
import numpy as np
from cpu_models import MODELS, SIZES, manifest_models, seeded_feeds

UNMAPPED = "(no model node)"  # what computes no node of the model: onnxruntime's layout reorders, luminal's copies


@dataclass(frozen=True)
class Layer:
    """Model nodes computed together, each side's seconds per run."""

    nodes: tuple[str, ...]  # in graph order
    kind: str
    kernels: int  # luminal's kernels a run
    luminal: tuple[float, ...]
    onnxruntime: tuple[float, ...]


def _find(parent: dict[str, str], a: str) -> str:
    while parent.setdefault(a, a) != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


# onnxruntime's names for nodes it made from a model node: (pattern, the name it was made from)
_MADE_FROM = (
    re.compile(r"(.+)_token_\d+"),  # a name made unique
    re.compile(r"fused (.+)"),  # a Gemm with its ReLU
    re.compile(r"(.+)/[^/]+/"),  # a fusion's node: <node>/QuickGeluFusion/ (a SiLU's Mul and Sigmoid)
    re.compile(r"(.+)_[a-z]+_nchwc"),  # an NCHWc conv named after a tensor it derived: <tensor>_mul (a folded norm)
)


def _node_of(name: str, nodes: set[str], writers: Mapping[str, str]) -> str | None:
    """The model node an onnxruntime profile node stands for: itself, the writer of the tensor it is named after
    (``<tensor>_nchwc``: a node its NCHWc transformer rewrote, fused ones named after their last output), or the
    node it was made from (``_MADE_FROM``)."""
    if name in nodes:
        return name
    tensor = name.removesuffix("_nchwc")
    if tensor in writers or tensor in nodes:
        return writers.get(tensor, tensor)
    made = next((m.group(1) for p in _MADE_FROM if (m := p.fullmatch(name))), None)
    return _node_of(made, nodes, writers) if made else None


def layers(order: Sequence[str], kinds: Mapping[str, str], writers: Mapping[str, str],
           luminal_runs: Sequence[Sequence[tuple[tuple[str, ...], float]]],
           ort_runs: Sequence[Sequence[tuple[str, float]]]) -> list[Layer]:
    """The layers of a model whose nodes are ``order`` (graph order; ``kinds``: each node's kind, ``writers``: the
    node writing each tensor), from ``luminal_runs`` (per run, each kernel's model nodes and seconds) and
    ``ort_runs`` (per run, each profiled node's name and seconds)."""
    known = set(order)
    kernels = [[s for s in sources if s in known] for sources, _ in luminal_runs[0]] if luminal_runs else []
    parent: dict[str, str] = {}
    for inside in kernels:
        for s in inside[1:]:
            parent[_find(parent, s)] = _find(parent, inside[0])

    def root(node: str | None) -> str:
        return _find(parent, node) if node is not None else UNMAPPED

    kernel_roots = [root(inside[0] if inside else None) for inside in kernels]
    per_root = Counter(kernel_roots)
    lum: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(luminal_runs))
    for i, run in enumerate(luminal_runs):
        for r, (_, seconds) in zip(kernel_roots, run, strict=True):
            lum[r][i] += seconds
    ort: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(ort_runs))
    for i, ort_run in enumerate(ort_runs):
        for name, seconds in ort_run:
            ort[root(_node_of(name, known, writers))][i] += seconds
    groups: dict[str, list[str]] = defaultdict(list)
    first: dict[str, int] = {}
    for i, n in enumerate(order):
        groups[root(n)].append(n)
        first.setdefault(root(n), i)
    out = []
    for r in sorted(set(lum) | set(ort), key=lambda r: first.get(r, len(order))):
        nodes = tuple(groups[r]) if r in groups else (r,)
        kind = next((kinds[n] for n in nodes if kinds.get(n, "").startswith("Conv")), kinds.get(nodes[0], UNMAPPED))
        out.append(Layer(nodes, kind, per_root[r], tuple(lum.get(r, [0.0] * len(luminal_runs))),
                         tuple(ort.get(r, [0.0] * len(ort_runs)))))
    return out


def kind_of(node) -> str:
    """A Conv by its kernel, stride, dilation and groups ("Conv 3x3 s2", "Conv 3x3 d2", "Conv 1x1 g32",
    "ConvTranspose 2x2 s2"); else its op."""
    if node.op_type not in ("Conv", "ConvTranspose"):
        return node.op_type
    attrs = {a.name: a for a in node.attribute}
    k = "x".join(map(str, attrs["kernel_shape"].ints)) if "kernel_shape" in attrs else "?"
    s = max(attrs["strides"].ints, default=1) if "strides" in attrs else 1
    g = attrs["group"].i if "group" in attrs else 1
    d = max(attrs["dilations"].ints, default=1) if "dilations" in attrs else 1
    return node.op_type + f" {k}" + (f" s{s}" if s > 1 else "") + (f" d{d}" if d > 1 else "") + (
        f" g{g}" if g > 1 else "")


@dataclass(frozen=True)
class Runs:
    """Each side's runs of one model (the first of each, which allocates, left out)."""

    luminal: list[list[tuple[tuple[str, ...], float]]]  # per profiled run, each kernel's model nodes and seconds
    onnxruntime: list[list[tuple[str, float]]]  # per profiled run, each profiled node's name and seconds
    plain: dict[str, list[float]]  # per side, the seconds of each plain run


def _session(path: Path, threads: int, profile_to: str | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_to is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_to
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _runs(compiled, path: Path, feeds: Mapping[str, np.ndarray], threads: int, runs: int) -> Runs:
    """``runs`` profiled and ``runs`` plain runs of each side, all four taking turns."""
    with tempfile.TemporaryDirectory() as tmp:
        sess = _session(path, threads, str(Path(tmp) / "ort"))
        plain_sess = _session(path, threads, None)
        ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs() if i.name in feeds}
        ours = {s.name: feeds[s.name] for s in compiled.inputs}
        lum = []
        plain: dict[str, list[float]] = {"luminal": [], "onnxruntime": []}
        go = {"luminal": lambda: compiled.run(ours), "onnxruntime": lambda: plain_sess.run(None, ort_feeds)}
        for i in range(runs + 1):
            (run,) = compiled.spans(ours, 1)
            lum.append([(tuple(n for n, _ in k.sources), dur / 1e9) for k, (_, dur) in zip(compiled.launched, run)])
            sess.run(None, ort_feeds)
            for side, one in go.items():
                t0 = time.perf_counter()
                one()
                if i:
                    plain[side].append(time.perf_counter() - t0)
        events = json.loads(Path(sess.end_profiling()).read_text())
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[1:]
    out: list[list[tuple[str, float]]] = [[] for _ in spans]
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            at = next((i for i, (a, b) in enumerate(spans) if a <= e["ts"] <= b), None)
            if at is not None:
                out[at].append((e["name"].removesuffix("_kernel_time"), e["dur"] / 1e6))
    return Runs(lum[1:], out, plain)


def _scaled(runs: Sequence[Sequence[tuple[Any, float]]], plain: Sequence[float]
            ) -> tuple[list[list[tuple[Any, float]]], float]:
    """A side's profiled runs with each time multiplied by its plain runs' median over its profiled runs' median
    sum, and that factor."""
    sums = [sum(s for _, s in run) for run in runs]
    factor = float(np.median(plain) / np.median(sums)) if sums and np.median(sums) > 0 else 1.0
    return [[(what, s * factor) for what, s in run] for run in runs], factor


def bench(name: str, info: dict, threads: int, runs: int) -> dict:
    import onnx

    from luminal.runtime.session import InferenceSession

    path = MODELS / name
    ours = InferenceSession(path, backend="cpu", shapes=info.get("shapes") or {}, threads=threads)
    feeds = seeded_feeds(ours, np.random.default_rng(0))  # the inputs of the end-to-end benchmark
    ours.run(None, feeds)
    got = _runs(ours.model, path, feeds, threads, runs)
    lum_runs, lum_scale = _scaled(got.luminal, got.plain["luminal"])
    ort_runs, ort_scale = _scaled(got.onnxruntime, got.plain["onnxruntime"])
    scale = {"luminal": lum_scale, "onnxruntime": ort_scale}
    graph = onnx.load(str(path), load_external_data=False).graph
    names = [n.name or (n.output[0] if n.output else "") for n in graph.node]  # as the importer names them
    writers = {o: nm for n, nm in zip(graph.node, names) for o in n.output}
    kinds = {nm: kind_of(n) for n, nm in zip(graph.node, names)}
    rows = layers(names, kinds, writers, lum_runs, ort_runs)
    return {"model": name, "runs": runs, "scale": scale, "plain": {k: spread(v) for k, v in got.plain.items()},
            "layers": [
        {"nodes": list(r.nodes), "kind": r.kind, "kernels": r.kernels, "luminal": spread(list(r.luminal)),
         "onnxruntime": spread(list(r.onnxruntime))} for r in rows]}


def _ratio(ort_s: float, lum_s: float) -> str:
    return f"{ort_s / lum_s:5.2f}x" if lum_s > 0 and ort_s > 0 else "    -"


def _sums(rows: Sequence[dict]) -> tuple[float, float]:
    """The sums of luminal's and onnxruntime's medians over ``rows``."""
    return sum(r["luminal"]["median"] for r in rows), sum(r["onnxruntime"]["median"] for r in rows)


def report(result: dict, top: int) -> list[str]:
    """The lines printed for one model: totals, the kinds, the ``top`` layers by how much longer luminal takes."""
    rows = result["layers"]
    lum, ort = _sums(rows)
    plain, scale = result["plain"], result["scale"]
    lines = [f"{result['model']}: {len(rows)} layers, sums of medians luminal {lum * 1e3:.2f} ms, onnxruntime "
             f"{ort * 1e3:.2f} ms ({_ratio(ort, lum)}); plain runs {plain['luminal']['median'] * 1e3:.2f} / "
             f"{plain['onnxruntime']['median'] * 1e3:.2f} ms, profiles scaled x{scale['luminal']:.2f} / "
             f"x{scale['onnxruntime']:.2f}"]
    kinds: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        kinds[r["kind"]].append(r)
    for kind, rs in sorted(kinds.items(), key=lambda kv: -max(_sums(kv[1]))):
        lu, ox = _sums(rs)
        lines.append(f"  {kind:24s} x{len(rs):<3d} luminal {lu * 1e3:8.3f} ms  onnxruntime {ox * 1e3:8.3f} ms  "
                     f"{_ratio(ox, lu)}")
    worst = sorted(rows, key=lambda r: r["onnxruntime"]["median"] - r["luminal"]["median"])[:top]
    for r in worst:
        lu, ox = r["luminal"], r["onnxruntime"]
        label = r["nodes"][0] + (f" +{len(r['nodes']) - 1}" if len(r["nodes"]) > 1 else "")
        lines.append(f"  {label[-56:]:56s} {r['kind']:16s} k={r['kernels']:<3d} luminal {lu['median'] * 1e6:8.1f} us "
                     f"[{lu['p10'] * 1e6:.0f},{lu['p90'] * 1e6:.0f}]  onnxruntime {ox['median'] * 1e6:8.1f} us "
                     f"[{ox['p10'] * 1e6:.0f},{ox['p90'] * 1e6:.0f}]  {_ratio(ox['median'], lu['median'])}")
    return lines


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--size", choices=SIZES, default="cnn")
    ap.add_argument("--only", default="", help="substring of the model file names to run")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--top", type=int, default=10, help="layers listed per model, by luminal's excess time")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(None if argv is None else list(argv))
    from luminal.target import cores

    threads = args.threads or cores()
    print(f"threads={threads} load average={os.getloadavg()[0]:.1f}")
    results = []
    for name, info in manifest_models(args.size, args.only):
        try:
            result = bench(name, info, threads, args.runs)
        except Exception as e:  # one failing model does not stop the others
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        results.append(result)
        print("\n".join(report(result, args.top)), flush=True)
    ratios = [ort / lum for lum, ort in (_sums(m["layers"]) for m in results)]
    if ratios:
        print(f"geomean of the layer sums' ratios {statistics.geometric_mean(ratios):.2f}x over {len(ratios)} models")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/model_layers.py", *sys.argv[1:]]), "threads": threads,
            "models": results}, indent=1))


if __name__ == "__main__":
    main()
