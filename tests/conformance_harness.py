"""ONNX backend conformance: run the official backend test cases through the importer
and the reference executor, and compare with the expected outputs.

``python tests/conformance_harness.py [--backend cpu] [--json F] [--filter SUBSTR] [--update]``

A case is ``passed``, ``failed`` (import error or outputs out of tolerance) or
``unsupported`` (an op the registry lacks, a dtype/type the IR lacks, or a node whose
output is random, such as training-mode Dropout). Every
case runs in a worker process with a deadline; a worker past it is killed and
replaced, so one slow case cannot hang the run. It lives next to the tests, outside the package:
it imports the importer, the reference executor and the runtime, and keeps its list in tests/conformance/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import luminal
from luminal.compare import compare
from luminal.frontend_onnx import load, registry
from luminal.frontend_onnx.importer import all_graphs
from luminal.frontend_onnx.ops_nn_util import RandomOpError
from luminal.frontend_onnx.registry import DataDependent
from luminal.ir import Graph, run_reference
from luminal.runtime.compile import compile_graph, graph_specs

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")
BACKENDS = ("reference", "cpu", "cuda", "interpret", "onnxruntime")
PASSING_FILE = Path(__file__).resolve().parent / "conformance" / "passing.txt"
LUMINAL_ROOT = Path(luminal.__file__).resolve().parent

# elem types the IR has; everything else is recorded as unsupported with its name
_SUPPORTED_ELEM = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL,
    # computed in int32 / int64 and returned as the model declares them
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    # computed in float32 (the importer narrows it), returned as float64: compared at float32's tolerance
    onnx.TensorProto.DOUBLE,
}
# why a dtype the IR lacks cannot simply be computed in another one
_DTYPE_NOTES: dict[str, str] = {}
# ops whose attribute names an output dtype
_DTYPE_ATTRS = {"to", "dtype", "output_dtype"}
# bump when the on-disk layout of the generated node cases changes
_CACHE_VERSION = 2


@dataclass(frozen=True)
class Case:
    name: str  # "kind/test_name", unique across kinds
    model_dir: str
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class CaseResult:
    name: str
    status: str  # passed | failed | unsupported
    reason: str = ""
    ops: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # graph inputs fed as constants because the importer needs their values
    baked: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- collecting cases

def _data_root() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def _cache_root() -> Path:
    base = os.environ.get("LUMINAL_CONFORMANCE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "luminal", "conformance")
    return Path(base) / f"onnx-{onnx.__version__}-v{_CACHE_VERSION}"


def write_tensor(item, path: Path) -> None:
    if isinstance(item, onnx.TensorProto):
        data = item.SerializeToString()
    elif isinstance(item, (np.ndarray, np.generic)):
        data = numpy_helper.from_array(np.asarray(item)).SerializeToString()
    else:
        raise TypeError(type(item).__name__)
    path.write_bytes(data)


def _materialise_node_cases(root: Path) -> None:
    """The installed onnx generates its node cases in memory; write them once in the
    on-disk layout (model.onnx, test_data_set_N/{input,output}_K.pb)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".node-", dir=root.parent))
    for c in cases:
        d = tmp / c.name
        d.mkdir()
        (d / "model.onnx").write_bytes(c.model.SerializeToString())
        try:
            for k, (inputs, outputs) in enumerate(c.data_sets):
                ds = d / f"test_data_set_{k}"
                ds.mkdir()
                for i, x in enumerate(inputs):
                    write_tensor(x, ds / f"input_{i}.pb")
                for i, x in enumerate(outputs):
                    write_tensor(x, ds / f"output_{i}.pb")
        except TypeError as e:
            (d / "UNSUPPORTED").write_text(f"test data holds a {e} (sequence/optional values)")
        if c.rtol != 1e-3 or c.atol != 1e-7:
            (d / "data.json").write_text(json.dumps({"rtol": c.rtol, "atol": c.atol}))
    try:
        tmp.rename(root)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)


def _dir_cases(kind: str, kind_dir: Path) -> list[Case]:
    out = []
    for d in sorted(kind_dir.iterdir()):
        if not (d / "model.onnx").exists():
            continue
        rtol, atol = 1e-3, 1e-7
        if (d / "data.json").exists():
            meta = json.loads((d / "data.json").read_text())
            rtol, atol = meta.get("rtol", rtol), meta.get("atol", atol)
        out.append(Case(f"{kind}/{d.name}", str(d), rtol, atol))
    return out


def collect_cases(kinds: Sequence[str] = KINDS) -> list[Case]:
    cases: list[Case] = []
    for kind in kinds:
        if kind == "node":
            root = _cache_root() / "node"
            if not root.exists():
                _materialise_node_cases(root)
            cases += _dir_cases(kind, root)
        else:
            cases += _dir_cases(kind, _data_root() / kind)
    return cases


def select(cases: Iterable[Case], filter: str | None = None, names: Iterable[str] | None = None) -> list[Case]:
    wanted = set(names) if names is not None else None
    return [c for c in cases
            if (filter is None or filter in c.name) and (wanted is None or c.name in wanted)]


# ---------------------------------------------------------------- classification

def op_types(model: onnx.ModelProto) -> list[str]:
    ops = {n.op_type for g in all_graphs(model.graph) for n in g.node}
    return sorted(ops)


def _dtype_problem(elem_type: int) -> str:
    name = onnx.TensorProto.DataType.Name(elem_type).lower()
    note = _DTYPE_NOTES.get(name)
    return f"dtype {name} ({note})" if note else f"dtype {name}"


def _type_problem(tp: onnx.TypeProto) -> str | None:
    kind = tp.WhichOneof("value")
    if kind is None:
        return None
    if kind != "tensor_type":
        return f"{kind.replace('_type', '')} type"
    et = tp.tensor_type.elem_type
    if et and et not in _SUPPORTED_ELEM:
        return _dtype_problem(et)
    return None


def _unsupported_ops(model: onnx.ModelProto) -> list[str]:
    missing = {n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
               for g in all_graphs(model.graph) for n in g.node if registry.lookup(n.domain, n.op_type) is None}
    return sorted(missing)


def unsupported_reason(model: onnx.ModelProto) -> str | None:
    """Why luminal cannot run this model (ops, dtypes, non-tensor types), or None."""
    missing = _unsupported_ops(model)
    if missing:
        return "ops " + ", ".join(missing)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    problems: set[str] = set()
    for g in all_graphs(inferred.graph):
        for vi in [*g.input, *g.output, *g.value_info]:
            p = _type_problem(vi.type)
            if p:
                problems.add(p)
        for t in g.initializer:
            if t.data_type not in _SUPPORTED_ELEM:
                problems.add(_dtype_problem(t.data_type))
        for n in g.node:
            for a in n.attribute:
                if a.name in _DTYPE_ATTRS and a.type == onnx.AttributeProto.INT and a.i not in _SUPPORTED_ELEM:
                    problems.add(_dtype_problem(a.i))
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type not in _SUPPORTED_ELEM:
                    problems.add(_dtype_problem(a.t.data_type))
                if a.type == onnx.AttributeProto.SPARSE_TENSOR:
                    problems.add("sparse tensor")
    return ", ".join(sorted(problems)) if problems else None


# ---------------------------------------------------------------- comparing

def tolerances(dtype: np.dtype, rtol: float, atol: float) -> tuple[float, float]:
    """Per-dtype tolerances: onnx's backend runner's rtol, an atol floor of 1e-5 for
    float32, and wider ones for the half precisions (computed in float32 here,
    rounded differently from the generator's)."""
    name = np.dtype(dtype).name
    if name == "bfloat16":
        return max(rtol, 2 ** -6), max(atol, 1e-2)
    if name == "float16":
        return max(rtol, 2e-3), max(atol, 1e-3)
    return max(rtol, 1e-3), max(atol, 1e-5)


# ---------------------------------------------------------------- running one case

def _read_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def _data_sets(model_dir: Path) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    out = []
    for ds in sorted(model_dir.glob("test_data_set_*")):
        n_in = len(list(ds.glob("input_*.pb")))
        n_out = len(list(ds.glob("output_*.pb")))
        out.append(([_read_pb(ds / f"input_{i}.pb") for i in range(n_in)],
                    [_read_pb(ds / f"output_{i}.pb") for i in range(n_out)]))
    return out


def _one_line(msg: str, limit: int = 300) -> str:
    line = " ".join(str(msg).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


_NOT_CONSTANT = re.compile(r"node '(?P<node>.*)' \((?P<op>[^)]*)\): input (?P<idx>\d+) must be constant")


def _inputs_to_bake(model: onnx.ModelProto, message: str) -> set[str]:
    """The graph inputs that feed a value the importer needs constant (a shape, axes,
    pads...), found from its error message; empty when the message is another error."""
    m = _NOT_CONSTANT.search(message)
    if not m:
        return set()
    label, idx = m["node"], int(m["idx"])
    all_nodes = [n for g in all_graphs(model.graph) for n in g.node]
    nodes = [n for n in all_nodes if n.name == label] or [n for n in all_nodes if not n.name and n.op_type == label]
    producer = {o: n for n in all_nodes for o in n.output}
    graph_inputs = {i.name for i in model.graph.input}
    found: set[str] = set()
    stack = [n.input[idx] for n in nodes if idx < len(n.input) and n.input[idx]]
    seen: set[str] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in graph_inputs:
            found.add(v)
        elif v in producer:
            stack.extend(x for x in producer[v].input if x)
    if not found:
        # the value comes through a subgraph's captured names: every integer input may be a shape
        found = {i.name for i in model.graph.input
                 if i.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    return found


def bake(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` where the graph inputs in ``values`` are initializers."""
    baked = onnx.ModelProto()
    baked.CopyFrom(model)
    keep = [i for i in baked.graph.input if i.name not in values]
    del baked.graph.input[:]
    baked.graph.input.extend(keep)
    for name, v in values.items():
        baked.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    return baked


def _where(e: BaseException) -> str:
    """The innermost traceback frame inside luminal, as file:line."""
    root = str(LUMINAL_ROOT)
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith(root) and "site-packages" not in f.filename]
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def _import(model: onnx.ModelProto, feeds: dict[str, np.ndarray], baked: list[str]):
    """Import with the data set's shapes. Inputs the importer needs as constants (the
    node tests feed shapes and axes as inputs; real models carry them as initializers)
    become initializers holding the data set's values."""
    fixed: dict[str, np.ndarray] = {}
    while True:
        m = bake(model, fixed) if fixed else model
        live = {k: v for k, v in feeds.items() if k not in fixed}
        try:
            return load(m, {k: tuple(v.shape) for k, v in live.items()}), live
        except Exception as e:
            more = _inputs_to_bake(model, str(e)) - fixed.keys()
            more &= feeds.keys()
            if not more:
                raise
            for k in sorted(more):
                fixed[k] = feeds[k]
                baked.append(k)


def _run(graph: Graph, feeds: dict[str, np.ndarray], backend: str) -> list[np.ndarray]:
    """The graph's outputs from the reference executor, or compiled for ``backend``."""
    if backend == "reference":
        return run_reference(graph, feeds)
    return compile_graph(graph, backend).run(feeds)


class _ReferenceModel:
    """A segment's graph run by the reference executor, in the place of its compiled model."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.inputs, self.outputs, _ = graph_specs(graph)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return run_reference(self.graph, feeds)


def _reference_segment(graph: Graph, backend: object = None, **_: object) -> _ReferenceModel:
    return _ReferenceModel(graph)


def _run_segmented(path: Path, feeds: dict[str, np.ndarray], backend: str) -> dict[str, np.ndarray]:
    """The outputs of a model cut where the data decides a size, as InferenceSession runs it: its segments
    compiled for ``backend``, or run by the reference executor (their host steps are the same)."""
    from unittest import mock

    import luminal.runtime.compile as compile_module
    from luminal.codegen.backend import get_backend
    from luminal.runtime.dynamic import DynamicModel

    if backend != "reference":
        return DynamicModel.of_file(path, get_backend(backend), cache=None).run(feeds)
    # the segments are cut and bound as for a compiled backend; only their graphs run on numpy
    with mock.patch.object(compile_module, "compile_graph", _reference_segment):
        return DynamicModel.of_file(path, get_backend("cpu"), cache=None).run(feeds)


def _run_onnxruntime(d: Path, case: Case, res: CaseResult) -> CaseResult:
    """The case on onnxruntime's CPU provider, compared with the expected outputs as luminal's results are."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        res.status, res.reason = "failed", _one_line(f"onnxruntime: {type(e).__name__}: {e}")
        return res
    names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    for inputs, expected in _data_sets(d):
        try:
            got = sess.run(out_names, dict(zip(names, inputs)))
        except Exception as e:
            res.status, res.reason = "failed", _one_line(f"onnxruntime: {type(e).__name__}: {e}")
            return res
        for k, (have, want) in enumerate(zip(got, expected)):
            rtol, atol = tolerances(want.dtype, case.rtol, case.atol)
            cmp = compare(np.asarray(have), want, rtol, atol)
            if not cmp.ok:
                res.status, res.reason = "failed", f"output #{k}: {cmp.reason}"
                return res
    res.status, res.reason = "passed", ""
    return res


def run_case(case: Case, backend: str = "reference") -> CaseResult:
    """The case imported and run on ``backend`` (the reference executor, a compiled backend), or on
    onnxruntime (``backend="onnxruntime"``, for the comparison table)."""
    t0 = time.perf_counter()
    d = Path(case.model_dir)
    model = onnx.load(str(d / "model.onnx"))
    res = CaseResult(case.name, "unsupported", ops=op_types(model))
    try:
        if (d / "UNSUPPORTED").exists():
            res.reason = (d / "UNSUPPORTED").read_text().strip()
            return res
        if backend == "onnxruntime":
            return _run_onnxruntime(d, case, res)
        why = unsupported_reason(model)
        if why:
            res.reason = why
            return res
        inits = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        out_names = [o.name for o in model.graph.output]
        for inputs, expected in _data_sets(d):
            feeds = dict(zip(names, inputs))
            try:
                imported, live = _import(model, feeds, res.baked)
                got = dict(zip(imported.graph.output_names, _run(imported.graph, live, backend)))
            except RandomOpError as e:  # random output: no deterministic result to compare with
                res.reason = _one_line(str(e))
                return res
            except DataDependent:  # an output's size depends on the data: a session runs it in segments
                got = _run_segmented(d / "model.onnx", feeds, backend)
            except Exception as e:  # the importer's error is the failure reason
                res.status, res.reason = "failed", _one_line(f"import: {type(e).__name__}: {e}{_where(e)}")
                return res
            for k, (name, want) in enumerate(zip(out_names, expected)):
                if name not in got:
                    res.status, res.reason = "failed", f"output #{k} missing"
                    return res
                rtol, atol = tolerances(want.dtype, case.rtol, case.atol)
                cmp = compare(got[name], want, rtol, atol)
                if not cmp.ok:
                    res.status, res.reason = "failed", f"output #{k}: {cmp.reason}"
                    return res
        res.status, res.reason = "passed", ""
        return res
    except Exception as e:
        res.status, res.reason = "failed", _one_line(f"{type(e).__name__}: {e}{_where(e)}")
        return res
    finally:
        res.seconds = round(time.perf_counter() - t0, 3)


# ---------------------------------------------------------------- the pool

# a worker's first message: it has imported everything, so a case's time limit counts the case alone (a worker
# that starts while the machine is busy can take seconds to import luminal, onnx and numpy)
READY = "ready"
# how long a worker may take to start
STARTUP_TIMEOUT = 600.0


def _worker(conn, backend: str) -> None:
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    conn.send(READY)
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        conn.send(run_case(case, backend))


class _Slot:
    def __init__(self, ctx, backend: str):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, backend), daemon=True)
        self.proc.start()
        child.close()
        self.case: Case | None = None
        self.started = 0.0
        self.ready = False

    def give(self, case: Case) -> None:
        self.case, self.started = case, time.monotonic()
        self.conn.send(case)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def _finished(s: _Slot, ready: list, timeout: float) -> tuple[CaseResult | None, bool]:
    """The result of the slot's case, or None while it runs; True with a result when the worker died or ran
    past ``timeout`` seconds and must be replaced."""
    assert s.case is not None
    if s.conn in ready:
        try:
            msg = s.conn.recv()
        except (EOFError, OSError):
            return CaseResult(s.case.name, "failed", f"worker died (exit code {s.proc.exitcode})"), True
        if msg != READY:
            return msg, False
        s.ready, s.started = True, time.monotonic()  # the case waited in the pipe until now
    if not s.ready and time.monotonic() - s.started > STARTUP_TIMEOUT:
        return CaseResult(s.case.name, "failed", f"the worker did not start in {STARTUP_TIMEOUT:g} s"), True
    if s.ready and time.monotonic() - s.started > timeout:
        return CaseResult(s.case.name, "failed", f"timeout after {timeout:g} s", seconds=timeout), True
    return None, False


def _close(slots: Sequence[_Slot]) -> None:
    for s in slots:
        with contextlib.suppress(OSError):
            s.conn.send(None)
    for s in slots:
        s.proc.join(timeout=2)
        if s.proc.is_alive():
            s.kill()


def run_cases(cases: Sequence[Case], workers: int = 2, timeout: float = 60.0,
              progress: Callable[[CaseResult], None] | None = None,
              backend: str = "reference") -> list[CaseResult]:
    """Run every case in worker processes, through the reference executor or compiled for ``backend``; a
    case past ``timeout`` seconds fails."""
    if not cases:
        return []
    ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
    todo = list(cases)[::-1]
    results: dict[str, CaseResult] = {}
    slots = [_Slot(ctx, backend) for _ in range(max(1, min(workers, len(cases))))]
    try:
        for s in slots:
            if todo:
                s.give(todo.pop())
        while any(s.case is not None for s in slots):
            ready = wait([s.conn for s in slots if s.case is not None], timeout=1.0)
            for i, s in enumerate(slots):
                if s.case is None:
                    continue
                r, replace = _finished(s, ready, timeout)
                if r is None:
                    continue
                if replace:
                    s.kill()
                    s = slots[i] = _Slot(ctx, backend)
                results[r.name] = r
                if progress:
                    progress(r)
                s.case = None
                if todo:
                    s.give(todo.pop())
    finally:
        _close(slots)
    return [results[c.name] for c in cases]


# ---------------------------------------------------------------- reporting

def summarise(results: Sequence[CaseResult]) -> dict:
    totals = {"passed": 0, "failed": 0, "unsupported": 0}
    by_op: dict[str, dict[str, int]] = {}
    for r in results:
        totals[r.status] += 1
        for op in r.ops:
            by_op.setdefault(op, {"passed": 0, "failed": 0, "unsupported": 0})[r.status] += 1
    runnable = totals["passed"] + totals["failed"]
    return {
        "onnx_version": onnx.__version__,
        "totals": totals,
        "cases": len(results),
        "pass_rate_supported": round(totals["passed"] / runnable, 4) if runnable else None,
        "by_op": dict(sorted(by_op.items())),
    }


def read_passing(path: Path = PASSING_FILE) -> list[str]:
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def write_passing(results: Sequence[CaseResult], path: Path = PASSING_FILE) -> None:
    names = sorted(r.name for r in results if r.status == "passed")
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# ONNX backend test cases that pass (onnx {onnx.__version__}); "
              "rewrite with: python tests/conformance_harness.py --update\n")
    path.write_text(header + "\n".join(names) + "\n")


# ---------------------------------------------------------------- the comparison with onnxruntime

EXCLUSIONS_FILE = Path(__file__).resolve().parents[1] / "docs" / "conformance.md"
_EXCLUDED_ROW = re.compile(r"^\|\s*`?(?P<name>[a-z-]+/test_[^`|\s]+)`?\s*\|\s*(?P<reason>[^|]*?)\s*\|")


def read_exclusions(path: Path = EXCLUSIONS_FILE) -> dict[str, str]:
    """The cases docs/conformance.md lists as left out, with their reasons (its table rows
    ``| `node/test_x` | reason |``)."""
    if not path.exists():
        return {}
    rows = (_EXCLUDED_ROW.match(ln) for ln in path.read_text().splitlines())
    return {m["name"]: m["reason"] for m in rows if m}


def comparison(runs: dict[str, Sequence[CaseResult]], exclusions: dict[str, str]) -> dict:
    """Case by case, onnxruntime's status next to each luminal backend's in ``runs`` (which holds
    ``onnxruntime``), and per backend the cases onnxruntime passes and it does not: documented in
    ``exclusions`` or not."""
    ort = {r.name: r for r in runs["onnxruntime"]}
    ours = [b for b in runs if b != "onnxruntime"]
    by_backend = {b: {r.name: r for r in runs[b]} for b in ours}
    cases = []
    for name, o in ort.items():
        row = {"name": name, "ops": o.ops, "onnxruntime": o.status}
        for b in ours:
            r = by_backend[b].get(name)
            row[b] = r.status if r else "not run"
            row[f"{b}_reason"] = r.reason if r else ""
        if name in exclusions:
            row["excluded"] = exclusions[name]
        cases.append(row)
    ort_passed = [c for c in cases if c["onnxruntime"] == "passed"]
    summary: dict[str, object] = {"onnx_version": onnx.__version__, "cases": len(cases),
                                  "onnxruntime_passed": len(ort_passed)}
    for b in ours:
        gaps = [c["name"] for c in ort_passed if c[b] != "passed"]
        summary[b] = {
            "passed": sum(c[b] == "passed" for c in cases),
            "onnxruntime_passed_and_not_here": len(gaps),
            "documented": sum(g in exclusions for g in gaps),
            "undocumented": [g for g in gaps if g not in exclusions],
        }
    return {"summary": summary, "cases": cases}


def comparison_markdown(table: dict) -> str:
    s = table["summary"]
    ours = [k for k, v in s.items() if isinstance(v, dict)]
    lines = [f"# ONNX backend cases: luminal and onnxruntime (onnx {s['onnx_version']})", "",
             f"{s['cases']} cases; onnxruntime passes {s['onnxruntime_passed']}.", ""]
    for b in ours:
        v = s[b]
        lines.append(f"- {b}: passes {v['passed']}; of onnxruntime's passes, {v['onnxruntime_passed_and_not_here']} "
                     f"do not pass here, {v['documented']} of them documented in docs/conformance.md, "
                     f"{len(v['undocumented'])} not")
    lines += ["", "| case | onnxruntime | " + " | ".join(ours) + " | left out because |",
              "|---|---|" + "---|" * len(ours) + "---|"]
    for c in table["cases"]:
        cells = [c["name"], c["onnxruntime"], *(c[b] for b in ours), c.get("excluded", "")]
        lines.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    return "\n".join(lines) + "\n"


def _summary_lines(table: dict) -> list[str]:
    s = table["summary"]
    out = [f"{s['cases']} cases: onnxruntime passes {s['onnxruntime_passed']}"]
    for b, v in s.items():
        if isinstance(v, dict):
            out.append(f"{b}: passes {v['passed']}; {v['onnxruntime_passed_and_not_here']} that onnxruntime passes "
                       f"do not ({v['documented']} documented, {len(v['undocumented'])} not)")
            out += [f"  undocumented: {n}" for n in v["undocumented"][:40]]
            if len(v["undocumented"]) > 40:
                out.append(f"  ... and {len(v['undocumented']) - 40} more")
    return out


def read_results(path: Path) -> tuple[str, list[CaseResult]]:
    """The backend and results of an earlier ``--json`` run."""
    data = json.loads(path.read_text())
    return data["backend"], [CaseResult(**r) for r in data["results"]]


def _print_report(results: Sequence[CaseResult], summary: dict, show_failures: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title="conformance by op (cases containing the op)")
    for col in ("op", "passed", "failed", "unsupported"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for op, c in summary["by_op"].items():
        table.add_row(op, str(c["passed"]), f"[red]{c['failed']}[/]" if c["failed"] else "0", str(c["unsupported"]))
    console.print(table)
    failed = [r for r in results if r.status == "failed"]
    for r in failed[:show_failures]:
        console.print(f"[red]FAILED[/] {r.name}: {r.reason}", markup=True, soft_wrap=True)
    if len(failed) > show_failures:
        console.print(f"... and {len(failed) - show_failures} more failures")
    t = summary["totals"]
    rate = summary["pass_rate_supported"]
    console.print(f"[bold]{summary['cases']} cases[/]: {t['passed']} passed, {t['failed']} failed, "
                  f"{t['unsupported']} unsupported; pass rate over supported: "
                  f"{'-' if rate is None else f'{100 * rate:.1f}%'}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tests/conformance_harness.py",
                                description="Run the ONNX backend test cases through luminal (the reference "
                                            "executor, or compiled for a backend).")
    p.add_argument("--backend", default="reference",
                   help="run the imported graphs on the reference executor (default), compiled for a backend "
                        f"({', '.join(BACKENDS[1:])}), or run the models on onnxruntime; with --compare a "
                        "comma-separated list")
    p.add_argument("--compare", metavar="F", help="also run onnxruntime and write the case-by-case comparison to F "
                                                  "(.json: JSON, else markdown)")
    p.add_argument("--reuse", metavar="F", action="append", default=[],
                   help="with --compare: take a backend's results from an earlier --json file instead of running it")
    p.add_argument("--json", metavar="F", help="write the results as JSON to F ('-' for stdout)")
    p.add_argument("--filter", metavar="SUBSTR", help="only cases whose name contains SUBSTR")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated case kinds ({','.join(KINDS)})")
    p.add_argument("--passing-only", action="store_true", help="only the cases listed in passing.txt")
    p.add_argument("--update", action="store_true", help="rewrite passing.txt with the cases that pass")
    p.add_argument("--passing-file", default=str(PASSING_FILE), help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--show-failures", type=int, default=50)
    a = p.parse_args(argv)

    kinds = [k for k in a.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kind {unknown[0]!r}")
    passing_file = Path(a.passing_file)
    cases = select(collect_cases(kinds), a.filter, read_passing(passing_file) if a.passing_only else None)
    if a.update and (a.filter or a.passing_only or len(kinds) != len(KINDS)):
        p.error("--update needs the full run (no --filter, --kinds or --passing-only)")
    if a.update and a.backend != "reference":
        p.error("--update keeps the reference executor's passing list")
    backends = [b for b in a.backend.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends:
        p.error(f"--backend: expected one of {', '.join(BACKENDS)}, got {bad[0] if bad else a.backend!r}")
    if len(backends) > 1 and not a.compare:
        p.error("several backends need --compare")
    if a.compare:
        return _compare(cases, backends, a)
    results = run_cases(cases, a.workers, a.timeout, backend=a.backend)
    summary = summarise(results)
    if a.json:
        data = dict(summary, backend=a.backend, results=[asdict(r) for r in results])
        text = json.dumps(data, indent=2)
        if a.json == "-":
            print(text)
        else:
            Path(a.json).write_text(text + "\n")
    if a.json != "-":
        _print_report(results, summary, a.show_failures)
    if a.update:
        passed = {r.name for r in results if r.status == "passed"}
        lost = sorted(set(read_passing(passing_file)) - passed)
        write_passing(results, passing_file)
        print(f"wrote {passing_file} ({len(passed)} cases)")
        if lost:
            print(f"{len(lost)} previously kept cases no longer pass and were dropped: {', '.join(lost[:20])}"
                  + (" ..." if len(lost) > 20 else ""))
    return 0


def _compare(cases: Sequence[Case], backends: Sequence[str], a: argparse.Namespace) -> int:
    names = {c.name for c in cases}
    runs: dict[str, list[CaseResult]] = {}
    for f in a.reuse:
        b, results = read_results(Path(f))
        runs[b] = [r for r in results if r.name in names]
    for b in ["onnxruntime", *backends]:
        if b not in runs:
            runs[b] = run_cases(cases, a.workers, a.timeout, backend=b)
    table = comparison(runs, read_exclusions())
    out = Path(a.compare)
    out.write_text(json.dumps(table, indent=1) + "\n" if out.suffix == ".json" else comparison_markdown(table))
    print("\n".join(_summary_lines(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
