"""Weights read once: the wire scanner, weights as views of the file's bytes, bad files, peak memory, a file
rewritten under a live session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from frontend_util import run_ort
from onnx import TensorProto, helper, numpy_helper

from luminal import ir
from luminal.errors import LuminalError
from luminal.frontend_onnx import load, weights

RNG = np.random.default_rng(10)


def _inits() -> list[TensorProto]:
    """Initializers of every kind the scanner meets: raw_data of each plain type, typed fields
    (float_data, int64_data, int32_data), 0-d, empty."""
    f32 = RNG.standard_normal((5, 7)).astype(np.float32)
    return [
        numpy_helper.from_array(f32, "f32_raw"),
        helper.make_tensor("f32_typed", TensorProto.FLOAT, [5, 7], f32.reshape(-1).tolist()),
        numpy_helper.from_array(RNG.integers(-2**40, 2**40, (3, 4)), "i64_raw"),
        helper.make_tensor("i64_typed", TensorProto.INT64, [4], [1, -2, 3, 2**50]),
        numpy_helper.from_array(RNG.standard_normal((6, 3)).astype(np.float16), "f16_raw"),
        helper.make_tensor("f16_typed", TensorProto.FLOAT16, [3], np.array([1.5, -2, 3], np.float16)),
        numpy_helper.from_array(RNG.random((4, 5)) > 0.5, "bool_raw"),
        helper.make_tensor("bool_typed", TensorProto.BOOL, [3], [True, False, True]),
        numpy_helper.from_array(RNG.integers(-100, 100, (9,)).astype(np.int32), "i32_raw"),
        numpy_helper.from_array(RNG.integers(-100, 100, (2, 3)).astype(np.int8), "i8_raw"),
        numpy_helper.from_array(RNG.integers(0, 255, (7,)).astype(np.uint8), "u8_raw"),
        numpy_helper.from_array(RNG.standard_normal((3, 3)), "f64_raw"),
        numpy_helper.from_array(np.array([1.5, -2, 3], helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)),
                                "bf16_raw"),
        numpy_helper.from_array(np.array([2**63 + 5, 7], np.uint64), "u64_raw"),
        numpy_helper.from_array(np.float32(2.5).reshape(()), "scalar_raw"),
        numpy_helper.from_array(np.zeros((0, 4), np.float32), "empty_raw"),
    ]


def _model(inits: list[TensorProto], nodes=None, outputs=None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 7])
    nodes = nodes or [helper.make_node("Add", ["x", "f32_raw"], ["y"])]
    outs = [helper.make_empty_tensor_value_info(o) for o in (outputs or ["y"])]
    g = helper.make_graph(nodes, "g", [x], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _save(m: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(m.SerializeToString())
    return path


def _root(a: np.ndarray) -> object:
    """The object at the end of ``a``'s base chain (np.frombuffer bases it on the bytes or a memoryview)."""
    while isinstance(a, np.ndarray):
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def _mapped(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of bytes read whole, not a copy of its own."""
    return isinstance(_root(a), bytes)


def test_scanner_offsets_give_to_array_values(tmp_path):
    m = _model(_inits())
    p = _save(m, tmp_path / "m.onnx")
    got = weights.map_model(p)
    data = p.read_bytes()
    _, raws = weights.strip_model(data, len(data))
    assert len(raws) == len(m.graph.initializer)
    for t, t2, raw in zip(m.graph.initializer, got.proto.graph.initializer, raws):
        want = numpy_helper.to_array(t)
        assert (raw is not None) == t.HasField("raw_data"), t.name
        if raw is not None:  # the offsets point at exactly the tensor's raw_data
            assert data[raw[0]:raw[1]] == t.raw_data
        value = got.weights[t.name] if t.name in got.weights else numpy_helper.to_array(t2)
        assert value.dtype == want.dtype and value.shape == want.shape, t.name
        np.testing.assert_array_equal(value, want)
        if t.HasField("raw_data") and want.size:
            assert t.name in got.weights and not t2.HasField("raw_data")
            assert _mapped(value) and not value.flags.writeable
    assert {t.name for t in m.graph.initializer if t.HasField("raw_data") and t.dims != [0, 4]} <= set(got.weights)
    # everything but the payloads survives
    for t in got.proto.graph.initializer:
        if t.name in got.weights:
            t.raw_data = numpy_helper.from_array(got.weights[t.name]).raw_data
    assert got.proto.SerializeToString() == m.SerializeToString()


def test_import_from_file_matches_proto_and_onnxruntime(tmp_path):
    nodes = [
        helper.make_node("Add", ["x", "f32_raw"], ["a"]),
        helper.make_node("Mul", ["a", "f32_typed"], ["b"]),
        helper.make_node("Cast", ["f16_raw"], ["h"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["h", "shape"], ["h2"]),
        helper.make_node("Add", ["b", "h2"], ["c"]),
        helper.make_node("Cast", ["i64_raw"], ["i"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["i"], ["s"], keepdims=0),
        helper.make_node("Add", ["c", "s"], ["d"]),
        helper.make_node("Where", ["mask", "d", "x"], ["y"]),
    ]
    f16 = numpy_helper.from_array(RNG.standard_normal((5, 7)).astype(np.float16), "f16_raw")
    inits = [f16 if t.name == "f16_raw" else t for t in _inits()]
    inits += [numpy_helper.from_array(np.array([5, 7], np.int64), "shape"),
              numpy_helper.from_array(RNG.random((5, 7)) > 0.3, "mask")]
    m = _model(inits, nodes)
    p = _save(m, tmp_path / "m.onnx")
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    from_file, from_proto = load(p), load(m)
    (a,) = ir.run_reference(from_file.graph, {"x": x})
    (b,) = ir.run_reference(from_proto.graph, {"x": x})
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    # the file's weights are views of its bytes; a ModelProto's are read from the proto
    size = p.stat().st_size
    of_file = [n.attrs["value"] for n in from_file.graph.toposort() if n.op is ir.Op.Constant]
    assert any(_mapped(v) and len(_root(v)) == size for v in of_file)
    assert not any(_mapped(v) and len(_root(v)) == size
                   for v in (n.attrs["value"] for n in from_proto.graph.toposort() if n.op is ir.Op.Constant))


def test_weights_stay_views_of_the_map_through_import_and_passes(tmp_path):
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    b = RNG.standard_normal((96,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = _save(m, tmp_path / "m.onnx")
    r = load(p)
    consts = [n.attrs["value"] for n in r.graph.toposort() if n.op is ir.Op.Constant and n.attrs["value"].size > 1]
    big = [c for c in consts if c.size == w.size]
    assert len(big) == 1 and _mapped(big[0]) and not big[0].flags.writeable
    np.testing.assert_array_equal(big[0].reshape(w.shape), w)
    xv = RNG.standard_normal((2, 64)).astype(np.float32)
    (y,) = ir.run_reference(r.graph, {"x": xv})
    np.testing.assert_allclose(y, xv @ w + b, rtol=1e-5, atol=1e-5)


def test_big_endian_host_copies(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "LITTLE", False)
    m = _model(_inits())
    got = weights.map_model(_save(m, tmp_path / "m.onnx"))
    assert got.weights == {}
    for t, t2 in zip(m.graph.initializer, got.proto.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(t2), numpy_helper.to_array(t))


def test_subgraph_and_function_and_sparse_initializers(tmp_path):
    w = RNG.standard_normal((5, 7)).astype(np.float32)
    then_g = helper.make_graph([helper.make_node("Add", ["x", "tw"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [5, 7])],
                               [numpy_helper.from_array(w * 2, "tw")])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "f32_raw"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [5, 7])])
    fn = helper.make_function("local", "AddW", ["a", "b"], ["c"], [helper.make_node("Add", ["a", "b"], ["c"])],
                              [helper.make_opsetid("", 17)])
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, -2], np.float32), "sp"),
                                       numpy_helper.from_array(np.array([3, 20], np.int64), "sp_i"), [5, 7])
    nodes = [helper.make_node("If", ["cond"], ["i"], then_branch=then_g, else_branch=else_g),
             helper.make_node("AddW", ["i", "f32_raw"], ["j"], domain="local"),
             helper.make_node("Add", ["j", "sp"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])],
                          [numpy_helper.from_array(w, "f32_raw"), numpy_helper.from_array(np.array(True), "cond")],
                          sparse_initializer=[sparse])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[fn])
    m.ir_version = 8
    p = _save(m, tmp_path / "m.onnx")
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    r = load(p)
    assert "f32_raw" in weights.map_model(p).weights
    (y,) = ir.run_reference(r.graph, {"x": x})
    np.testing.assert_allclose(y, run_ort(m, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_external_data_is_read_the_same_way(tmp_path):
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    m = _model([numpy_helper.from_array(w, "w")], [helper.make_node("MatMul", ["x", "w"], ["y"])])
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 64
    p = tmp_path / "m.onnx"
    onnx.save_model(m, str(p), save_as_external_data=True, location="w.bin", size_threshold=0)
    r = load(p)
    big = [n.attrs["value"] for n in r.graph.toposort() if n.op is ir.Op.Constant and n.attrs["value"].size > 1]
    assert len(big) == 1 and _mapped(big[0])
    x = RNG.standard_normal((5, 64)).astype(np.float32)
    (y,) = ir.run_reference(r.graph, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_files_are_read_and_closed(tmp_path):
    m = _model(_inits())
    p = _save(m, tmp_path / "m.onnx")
    fds = len(os.listdir("/proc/self/fd"))
    got = weights.map_model(p)
    assert len(os.listdir("/proc/self/fd")) == fds  # no descriptor (nor map) held
    w = got.weights["f32_raw"]
    assert _mapped(w) and not w.flags.writeable
    np.testing.assert_array_equal(w, numpy_helper.to_array(m.graph.initializer[0]))
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    (y,) = ir.run_reference(load(p).graph, {"x": x})
    np.testing.assert_allclose(y, x + w, rtol=1e-6)


_REWRITE = r"""
import sys
from pathlib import Path
import numpy as np
from luminal import InferenceSession
from luminal.errors import LuminalError
model, pairs = sys.argv[1], sys.argv[2:]
s = InferenceSession(model, backend="cpu")
x = np.load(model + ".x.npy")
s.run(None, {"x": x[:2]})
for pair in pairs:  # written in place, as onnx.save over the same path does: truncated first
    target, source = pair.split("=")
    with open(target, "wb") as f:
        f.write(Path(source).read_bytes() if source else b"")
try:
    y, z = s.run(None, {"x": x})  # new sizes: a variant made after the file changed
except LuminalError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
np.save(model + ".y.npy", y)
"""


def _matmul_model(w: np.ndarray, segments: bool) -> onnx.ModelProto:
    """y = x @ w over n rows; with a NonZero beside it (segments), the session runs it as segments."""
    rows, cols = w.shape
    first = helper.make_node("NonZero", ["x"], ["z"]) if segments else helper.make_node("Relu", ["x"], ["z"])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, [2, "k"]) if segments else \
        helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", rows])
    g = helper.make_graph([first, helper.make_node("MatMul", ["x", "w"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", rows])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cols]), z],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("how", ["truncated", "rewritten"])
@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("segments", [True, False])
def test_a_model_file_changed_under_a_live_session(tmp_path, how, external, segments):
    """A session whose model (or its external data) is truncated, or rewritten as another model, after it was
    made, then run at new sizes in a child. With a NonZero it runs as segments, which keep the weights read when
    it was made: the original model's outputs (a map of the file gave SIGBUS). Without, the variant for the new
    sizes would be read from the file again: refused in one line (it read the other model's weights)."""
    w = RNG.standard_normal((1024, 512)).astype(np.float32)  # 2 MiB
    m = _matmul_model(w, segments)
    x = RNG.standard_normal((3, 1024)).astype(np.float32)
    want = run_ort(m, {"x": x})[0]
    p, other = tmp_path / "m.onnx", tmp_path / "other"
    other.mkdir()
    for folder, model in ((tmp_path, m), (other, _matmul_model(-w, segments))):
        if external:
            onnx.save_model(model, str(folder / "m.onnx"), save_as_external_data=True, location="w.bin",
                            size_threshold=0)
        else:
            _save(model, folder / "m.onnx")
    np.save(str(p) + ".x.npy", x)
    name = "w.bin" if external else "m.onnx"
    pair = f"{tmp_path / name}={other / name if how == 'rewritten' else ''}"
    r = subprocess.run([sys.executable, "-c", _REWRITE, str(p), pair], capture_output=True, text=True, timeout=300)
    assert r.returncode >= 0, f"killed by signal {-r.returncode}"
    if segments:
        assert r.returncode == 0, r.stderr[-3000:]
        np.testing.assert_allclose(np.load(str(p) + ".y.npy"), want, rtol=1e-4, atol=1e-4)
    else:
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (r.returncode, r.stderr[-3000:])
        assert f"file {str(tmp_path / name)!r} changed since this session was made" in r.stderr


def test_shape_and_size_mismatches_are_reported_as_before(tmp_path):
    for dims, raw in [([0, 2**62, 2**62], b""), ([5, 7], b"\0" * 12), ([2] * 70, b"\0" * 4)]:
        t = helper.make_tensor("f32_raw", TensorProto.FLOAT, [1], [0.0])
        t.ClearField("float_data")
        t.ClearField("dims")
        t.dims.extend(dims)
        t.raw_data = raw
        p = _save(_model([t]), tmp_path / "m.onnx")
        with pytest.raises(LuminalError) as e:
            load(p)
        assert "\n" not in str(e.value)


def test_text_format_file_still_loads(tmp_path):
    m = _model(_inits())
    p = tmp_path / "m.textproto"
    onnx.save_model(m, str(p), format="textproto")
    assert load(p).outputs[0].shape == (5, 7)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x3a\xff\xff\xff\xff\x0f", b"\x3a\x05\x2a\x03\x4a\x10",
                                  b"\x0b\x0c", b"\xff" * 12, b"not an onnx model at all\n"])
def test_bad_bytes_are_one_line_errors(tmp_path, data):
    p = tmp_path / "bad.onnx"
    p.write_bytes(data)
    with pytest.raises(LuminalError) as e:
        load(p)
    assert "\n" not in str(e.value)


def test_scanner_rejects_lengths_past_the_end():
    with pytest.raises(weights.WireError):
        weights.strip_model(b"\x3a\x05\x2a\x03", 4)
    with pytest.raises(weights.WireError):
        weights.strip_model(b"\x3a\x04\x2a\x03\x4a\x10", 6)
    with pytest.raises(weights.WireError):
        list(weights.fields(b"\x08" + b"\xff" * 11, 0, 12))


_FUZZ = r"""
import sys, random
from pathlib import Path
from luminal.errors import LuminalError
from luminal.frontend_onnx import load, weights
src, work, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
data = src.read_bytes()
rng = random.Random(seed)
ok = refused = 0
for k in range(int(sys.argv[4])):
    b = bytearray(data)
    if k % 3 == 0:
        b = b[:rng.randrange(len(b))]
    else:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    p = work / f"f{k}.onnx"  # never rewrite a file that may still be mapped
    p.write_bytes(bytes(b))
    try:
        load(p)
        ok += 1
    except LuminalError as e:
        assert "\n" not in str(e), str(e)
        refused += 1
print(ok, refused)
"""


def test_fuzzed_files_never_crash(tmp_path):
    """Random truncations and byte flips: a LuminalError or a model, never a traceback or a crash
    (run in a child so a segfault fails the test rather than pytest)."""
    m = _model([*_inits()[:6], numpy_helper.from_array(RNG.standard_normal((32, 7)).astype(np.float32), "big")],
               [helper.make_node("Add", ["x", "f32_raw"], ["a"]), helper.make_node("Mul", ["a", "f32_typed"], ["y"])])
    src = _save(m, tmp_path / "src.onnx")
    p = subprocess.run([sys.executable, "-c", _FUZZ, str(src), str(tmp_path), "7", "240"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    ok, refused = map(int, p.stdout.split())
    assert ok + refused == 240 and refused > 40


_PEAK = r"""
import json, sys
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
from luminal.frontend_onnx import importer  # the package registers every op
base = status("VmRSS")
r = importer.load(sys.argv[1])
print(json.dumps({"grown": status("VmHWM") - base, "shape": list(r.outputs[0].shape)}))
"""


def test_peak_memory_of_a_200mb_weight(tmp_path):
    """Importing a model whose one weight is 200 MB grows the peak resident set by well under
    its size (onnx.load + to_array would take about 3x)."""
    rows, cols = 12800, 4096  # float32: 200 MiB
    w = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    del w
    p = tmp_path / "big.onnx"
    p.write_bytes(m.SerializeToString())
    del m, g
    size = p.stat().st_size
    out = subprocess.run([sys.executable, "-c", _PEAK, str(p)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["shape"] == [1, cols]
    assert r["grown"] < 1.3 * size, (r["grown"] / size)
