"""Size and work limits checked at import, before anything big is allocated or run: the memory a
model needs, external data extents, Range bombs, nested Loops."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from cli_util import invoke
from frontend_util import assert_matches, make_model
from onnx import TensorProto, helper, numpy_helper

from luminal.cli import bench_cmd, check_cmd, compile_cmd, inspect_cmd, modelcheck, tune_cmd
from luminal.errors import LuminalError
from luminal.frontend_onnx import load
from luminal.frontend_onnx.limits import MemoryGuard, format_bytes, parse_size

F = TensorProto.FLOAT


def relu_model(dims: list) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, dims)], [helper.make_tensor_value_info("y", F, dims)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_input_bigger_than_any_memory_is_refused_naming_it(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(relu_model([2 ** 62]), str(path))
    with pytest.raises(LuminalError, match=r"input 'x' \(4611686018427387904, float32\) needs .* more than"):
        load(str(path))
    for cmd in ("check", "inspect"):  # numpy's "array is too big" came from check's seeded inputs
        r = invoke(check_cmd, inspect_cmd, args=[cmd, str(path)])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert "input 'x'" in r.output


def test_max_memory_bounds_inputs_and_each_node():
    m = relu_model([1024, 1024])  # 4 MB in, 4 MB out
    assert load(m, max_memory=8 << 20).outputs[0].shape == (1024, 1024)
    with pytest.raises(LuminalError, match=r"input 'x' \(1024x1024, float32\) needs 4 MB, more than 1 MB "
                                           r"\(--max-memory\)"):
        load(m, max_memory=1 << 20)
    with pytest.raises(LuminalError, match=r"node 'y' \(Relu\) with its inputs and outputs needs 8 MB"):
        load(m, max_memory=6 << 20)


def test_an_intermediate_tensor_is_named():
    """A MatMul whose 50000 x 50000 product is 9.3 GB, of two small inputs."""
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", F, ["n", 8]),
                           helper.make_tensor_value_info("b", F, [8, "n"])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LuminalError, match=r"tensor 'c' \(50000x50000, float32; node 'c' \(MatMul\)\) needs 9.31 GB"):
        load(m, {"n": 50000}, max_memory=4 << 30)


def test_concat_doubling_is_refused_before_it_is_built():
    nodes, prev = [], "x"
    for k in range(30):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"c{k}"], axis=0))
        prev = f"c{k}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4])],
                          [helper.make_tensor_value_info(prev, F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LuminalError, match=r"node 'c26' \(Concat\) with its inputs and outputs needs 3 GB, more "
                                           r"than 2 GB"):
        load(m, max_memory=2 << 30)
    with pytest.raises(LuminalError, match=r"tensor 'c27' \(1073741824, float32; node 'c27' \(Concat\)\) needs 4 GB"):
        load(m, max_memory=3 << 30)


def test_check_refuses_before_onnxruntime_runs(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(relu_model([2 ** 40]), str(path))
    ran = []
    monkeypatch.setattr(modelcheck, "run_onnxruntime", lambda *a: ran.append(a))
    with pytest.raises(LuminalError, match="input 'x'"):
        modelcheck.check_model(str(path))
    assert ran == []


def test_size_grammar():
    assert [parse_size(s) for s in ("8G", "512mb", "1.5g", "1000", "2T")] == \
        [8 << 30, 512 << 20, 3 << 29, 1000, 2 << 40]
    for bad in ("", "-1G", "0", "nan", "inf", "1e30", "8Q", "G"):
        with pytest.raises(LuminalError, match="bad memory size"):
            parse_size(bad)
    assert format_bytes(3 << 29) == "1.5 GB" and format_bytes(12) == "12 bytes"


def test_the_default_limit_is_the_memory_available():
    guard = MemoryGuard.of(None)
    assert guard.source == "the memory available" and 0 < guard.limit < 1 << 50


# -- external data ----------------------------------------------------------------

def _external(tmp_path, offset: int, length: int):
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    w = TensorProto(name="w", data_type=F, dims=[4], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "w.bin"), ("offset", str(offset)), ("length", str(length))):
        w.external_data.add(key=k, value=v)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [4])],
                          [helper.make_tensor_value_info("y", F, [4])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("offset,length", [(2 ** 70, 16), (0, 2 ** 70), (2 ** 63 - 8, 16), (2 ** 64, 2 ** 64), (8, 16)])
def test_external_data_past_the_end_of_its_file_is_refused(tmp_path, offset, length):
    """Offsets and lengths of 2^70 were a ValueError or OverflowError out of seek and read."""
    with pytest.raises(LuminalError, match=r"external data file \(16 bytes\) is shorter than its offset"):
        load(_external(tmp_path, offset, length))


def test_external_data_within_its_file_loads(tmp_path):
    assert load(_external(tmp_path, 0, 16)).outputs[0].shape == (4,)


# -- work bombs -------------------------------------------------------------------

def test_a_range_of_a_tiny_delta_is_not_built_in_memory(tmp_path):
    """A 150-byte model whose Range has 10^9 elements: inspect took 11.5 GB building np.arange."""
    c = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.float32)))
         for n, v in (("a", 0.0), ("b", 1.0), ("d", 1e-9))]
    g = helper.make_graph([*c, helper.make_node("Range", ["a", "b", "d"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", F, None)])
    path = tmp_path / "range.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from luminal.frontend_onnx import load\n"
            f"r = load({str(path)!r}, max_memory=1 << 40)\n"
            "print(r.outputs[0].shape)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert 10 ** 9 <= int(p.stdout.strip().strip("(,)")) < 1.001e9  # float32's 1e-9 rounds


def _nested_loops(depth: int, trip: int) -> onnx.ModelProto:
    """``depth`` Loops nested, each of ``trip`` iterations, the innermost adding 1 to a carried value."""
    def body(level: int) -> onnx.GraphProto:
        ins = [helper.make_tensor_value_info(f"i{level}", TensorProto.INT64, []),
               helper.make_tensor_value_info(f"c{level}", TensorProto.BOOL, []),
               helper.make_tensor_value_info(f"v{level}", F, [1])]
        nodes = [helper.make_node("Identity", [f"c{level}"], [f"co{level}"])]
        if level == depth - 1:
            nodes.append(helper.make_node("Add", [f"v{level}", "one"], [f"vo{level}"]))
        else:
            nodes.append(helper.make_node("Loop", ["trip", "cond", f"v{level}"], [f"vo{level}"], body=body(level + 1)))
        outs = [helper.make_tensor_value_info(f"co{level}", TensorProto.BOOL, []),
                helper.make_tensor_value_info(f"vo{level}", F, [1])]
        return helper.make_graph(nodes, f"body{level}", ins, outs)

    inits = {"trip": np.array(trip, np.int64), "cond": np.array(True), "one": np.ones(1, np.float32)}
    return make_model([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body(0))],
                      {"x": np.zeros(1, np.float32)}, inits, outputs=["y"])


def test_nested_loops_share_one_unroll_budget():
    """Three Loops of 1000 iterations each: 10^9 body runs, each Loop under its own bound."""
    with pytest.raises(LuminalError, match=r"unrolling the model's loops imports more than 131072 nodes in all"):
        load(_nested_loops(3, 1000))


def test_nested_loops_within_the_budget_match_onnxruntime():
    assert_matches(_nested_loops(2, 20), {"x": np.zeros(1, np.float32)})


def test_the_max_memory_option(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(relu_model([256, 256]), str(path))
    for cmd in ("check", "inspect"):
        r = invoke(check_cmd, inspect_cmd, args=[cmd, str(path), "--max-memory", "300K"])
        assert r.exit_code == 2 and r.output.strip() == \
            "error: node 'y' (Relu) with its inputs and outputs needs 512 KB, more than 300 KB (--max-memory)", r.output
        assert invoke(check_cmd, inspect_cmd, args=[cmd, str(path), "--max-memory", "1M"]).exit_code == 0


@pytest.mark.parametrize("cmd, extra", [("compile", []), ("compile", ["-o", "art"]),
                                        ("compile", ["-o", "art", "--shape", "n=256,128"]),  # sizes at run time
                                        ("tune", ["--budget", "10s"]), ("bench", ["--runs", "2"])])
def test_commands_that_compile_take_the_max_memory_option(tmp_path, monkeypatch, cmd, extra):
    """compile, tune and bench refuse a model over --max-memory as check does: one line naming the tensor, exit 2,
    before anything is compiled, tuned or timed (nothing is written to the cache or the artifact)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.onnx"
    onnx.save(relu_model(["n", 256]), str(path))
    extra = extra if "--shape" in extra else [*extra, "--shape", "n=256"]
    cache = ["--cache", str(tmp_path / "c.db")] if cmd == "tune" else []  # the others refuse a cache not there
    modules = (compile_cmd, tune_cmd, bench_cmd)
    r = invoke(*modules, args=[cmd, str(path), *extra, *cache, "--max-memory", "200K"])
    assert r.exit_code == 2 and r.output.strip() == \
        "error: input 'x' (256x256, float32) needs 256 KB, more than 200 KB (--max-memory)", r.output
    assert not (tmp_path / "c.db").exists() and not (tmp_path / "art").exists()
    r = invoke(*modules, args=[cmd, str(path), *extra, "--max-memory", "lots"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "bad memory size 'lots'" in r.output
    if cmd == "compile":  # within the limit it compiles
        r = invoke(*modules, args=[cmd, str(path), *extra, "--max-memory", "2M"])
        assert r.exit_code == 0, r.output


def test_a_huge_sparse_initializer_is_refused_before_it_is_made_dense():
    values = numpy_helper.from_array(np.array([1.0], np.float32), "s")
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([3], np.int64), "i"), [2 ** 40])
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", F, None)], sparse_initializer=[sparse])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LuminalError, match=r"sparse initializer 's' needs 4 TB"):  # numpy's MemoryError before
        load(m)
