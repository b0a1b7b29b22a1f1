"""Model-file mutants for the fuzzer: byte-level damage and structural edits of seed models.

Each mutator takes a ``random.Random`` and returns a short description of what it did, so a saved
failure says how its model was made.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import onnx
from fuzz_seeds import Seed
from onnx import AttributeProto, TensorProto, helper

# tensor and node names a terminal, a table, a C comment or a markup parser may choke on
ODD_NAMES = (
    "", " ", "x y", "'", '"', "\\", "a\nb", "\r", "\t", "*/", "/*", "*/ int main(){} /*", "[bold]x[/bold]", "[red]",
    "[/]", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "\x1b[2J", "\x00", "nul\x00byte", "é", "\u202e", "🙂",
    "%s%n", "{}", "{0}", "../x", "/etc/passwd", "-", "--help", "x" * 5000, "a.b", "a:b", "$(echo hi)", "`x`",
    "?", "-1", "unk__123", "DynamicDimension.0", "N", "0", "123",
)
DIMS = (0, -1, -5, 1, 2, 7, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**63))
DIM_PARAMS = ("?", "", "-1", "unk__123", "DynamicDimension.0", "N", "batch", "x", "[bold]", "\x1b[31m", "a\nb")
ALL_DTYPES = (*tuple(TensorProto.DataType.values()), 99, 1000, -1)
UNKNOWN_OPS = ("Frobnicate", "", "relu", "RELU", "Conv2D", "Loop ", "Foo\nBar", "[bold]Op", "\x1b[2JOp", "*/")
DOMAINS = ("com.bogus", "ai.onnx.ml", "com.microsoft", "ai.onnx", "ai.onnx.preview.training", "", "\x1b[31m", "*/")
OPSET_VERSIONS = (0, 1, 5, 6, 7, 9, 11, 13, 17, 21, 22, 99, 2**31 - 1, -1)
IR_VERSIONS = (0, 1, 3, 7, 8, 10, 11, 99, -1)
HUGE_INTS = (0, -1, -2, 1, 2**31 - 1, 2**31, 2**62, 2**63 - 1, -(2**63), 100000)


# ---------------------------------------------------------------- byte-level


def bit_flip(rng: random.Random, data: bytearray, other: bytes) -> str:
    flips = rng.choice((1, 1, 2, 4, 16))
    for _ in range(flips):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return f"bit_flip x{flips}"


def byte_set(rng: random.Random, data: bytearray, other: bytes) -> str:
    i = rng.randrange(len(data))
    data[i] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01))
    return f"byte_set @{i}"


def truncate(rng: random.Random, data: bytearray, other: bytes) -> str:
    n = rng.randrange(len(data))
    del data[n:]
    return f"truncate to {n}"


def splice(rng: random.Random, data: bytearray, other: bytes) -> str:
    i, j = rng.randrange(len(data) + 1), rng.randrange(len(other) + 1)
    k = rng.randrange(j, min(len(other), j + 4096) + 1)
    data[i:] = other[j:k] + bytes(data[i:])
    return f"splice {k - j} bytes @{i}"


def duplicate_chunk(rng: random.Random, data: bytearray, other: bytes) -> str:
    i = rng.randrange(len(data))
    k = rng.randrange(i, min(len(data), i + 512) + 1)
    data[k:k] = data[i:k]
    return f"duplicate [{i}:{k}]"


def delete_chunk(rng: random.Random, data: bytearray, other: bytes) -> str:
    i = rng.randrange(len(data))
    k = rng.randrange(i, min(len(data), i + 64) + 1)
    del data[i:k]
    return f"delete [{i}:{k}]"


def insert_random(rng: random.Random, data: bytearray, other: bytes) -> str:
    i = rng.randrange(len(data) + 1)
    n = rng.choice((1, 2, 8, 64))
    data[i:i] = bytes(rng.randrange(256) for _ in range(n))
    return f"insert {n} @{i}"


def varint_bump(rng: random.Random, data: bytearray, other: bytes) -> str:
    """Turn a length or number field into a long varint: lengths past the end, huge dims."""
    i = rng.randrange(len(data))
    data[i:i + 1] = bytes([0xFF] * rng.choice((1, 4, 9)) + [0x01])
    return f"varint_bump @{i}"


BYTE_MUTATORS: tuple[Callable[[random.Random, bytearray, bytes], str], ...] = (
    bit_flip, bit_flip, byte_set, truncate, splice, duplicate_chunk, delete_chunk, insert_random, varint_bump)


def byte_mutant(rng: random.Random, seed: Seed, other: Seed) -> tuple[bytes, str]:
    data = bytearray(seed.data)
    steps = [rng.choice(BYTE_MUTATORS)(rng, data, other.data) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    return bytes(data), "; ".join(steps)


# ---------------------------------------------------------------- structural


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graph and every subgraph (Loop, If, Scan bodies), outermost first."""
    out = [graph]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                out += _graphs(attr.g)
            for g in attr.graphs:
                out += _graphs(g)
    return out


def _names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    names += [o for node in graph.node for o in node.output]
    return [n for n in dict.fromkeys(names) if n]


def _value_infos(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return list(graph.input) + list(graph.output) + list(graph.value_info)


def _pick_graph(rng: random.Random, model: onnx.ModelProto) -> onnx.GraphProto:
    graphs = _graphs(model.graph)
    return graphs[0] if rng.random() < 0.7 else rng.choice(graphs)


def _rename(model: onnx.ModelProto, old: str, new: str, partial: bool) -> None:
    for graph in _graphs(model.graph):
        for v in _value_infos(graph):
            if v.name == old:
                v.name = new
        for t in graph.initializer:
            if t.name == old:
                t.name = new
        for node in graph.node:
            for seq in (node.input, node.output):
                for i, name in enumerate(seq):
                    if name == old:
                        seq[i] = new
                        if partial:
                            return


def odd_tensor_name(rng: random.Random, model: onnx.ModelProto) -> str:
    names = _names(model.graph)
    if not names:
        return "odd_tensor_name: none"
    old, new, partial = rng.choice(names), rng.choice(ODD_NAMES), rng.random() < 0.2
    _rename(model, old, new, partial)
    return f"rename {old!r} -> {new[:40]!r}{' (one use)' if partial else ''}"


def odd_other_name(rng: random.Random, model: onnx.ModelProto) -> str:
    graph, text = _pick_graph(rng, model), rng.choice(ODD_NAMES)
    what = rng.choice(("node", "graph", "doc", "producer", "metadata"))
    if what == "node" and graph.node:
        rng.choice(graph.node).name = text
    elif what == "graph":
        graph.name = text
    elif what == "doc":
        (rng.choice(graph.node) if graph.node else graph).doc_string = text
    elif what == "producer":
        model.producer_name, model.producer_version = text, text
    else:
        entry = model.metadata_props.add()
        entry.key, entry.value = text, text
    return f"odd {what} name {text[:40]!r}"


def attr_type(rng: random.Random, model: onnx.ModelProto) -> str:
    nodes = [n for g in _graphs(model.graph) for n in g.node if n.attribute]
    if not nodes:
        return "attr_type: none"
    attr = rng.choice(rng.choice(nodes).attribute)
    name = attr.name
    choice = rng.randrange(8)
    if choice == 0:
        new = helper.make_attribute(name, 1.5)
    elif choice == 1:
        new = helper.make_attribute(name, "three")
    elif choice == 2:
        new = helper.make_attribute(name, [1.0, 2.0])
    elif choice == 3:
        new = helper.make_attribute(name, rng.choice(HUGE_INTS))
    elif choice == 4:
        new = helper.make_attribute(name, [rng.choice(HUGE_INTS) for _ in range(rng.randrange(1, 5))])
    elif choice == 5:
        new = helper.make_attribute(name, helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0]))
    elif choice == 6:
        new = AttributeProto(name=name)  # no type, no value
    else:
        new = helper.make_attribute(name, [b"a", b"b"])
    attr.CopyFrom(new)
    return f"attr {name!r} -> {AttributeProto.AttributeType.Name(attr.type)}"


def attr_value(rng: random.Random, model: onnx.ModelProto) -> str:
    nodes = [n for g in _graphs(model.graph) for n in g.node if n.attribute]
    if not nodes:
        return "attr_value: none"
    attr = rng.choice(rng.choice(nodes).attribute)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(HUGE_INTS)
        return f"attr {attr.name}={attr.i}"
    if attr.type == AttributeProto.INTS:
        values = [rng.choice(HUGE_INTS) for _ in range(rng.choice((0, 1, len(attr.ints), 9)))]
        del attr.ints[:]
        attr.ints.extend(values)
        return f"attr {attr.name}={values}"
    if attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice((float("nan"), float("inf"), -1.0, 0.0, 1e38))
        return f"attr {attr.name}={attr.f}"
    if attr.type == AttributeProto.STRING:
        attr.s = rng.choice(ODD_NAMES).encode("utf-8", "surrogatepass")
        return f"attr {attr.name}={attr.s[:40]!r}"
    return f"attr_value: {attr.name} unchanged"


def drop_attr(rng: random.Random, model: onnx.ModelProto) -> str:
    nodes = [n for g in _graphs(model.graph) for n in g.node if n.attribute]
    if not nodes:
        return "drop_attr: none"
    node = rng.choice(nodes)
    attr = node.attribute.pop(rng.randrange(len(node.attribute)))
    return f"drop attr {node.op_type}.{attr.name}"


def add_attr(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _pick_graph(rng, model)
    if not graph.node:
        return "add_attr: none"
    node = rng.choice(graph.node)
    name = rng.choice(("bogus", "axis", "perm", "to", "kernel_shape", "body", ""))
    node.attribute.append(helper.make_attribute(name, rng.choice((3, [2, 2], "x", 1.0))))
    return f"add attr {node.op_type}.{name}"


def node_inputs(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _pick_graph(rng, model)
    if not graph.node:
        return "node_inputs: none"
    node = rng.choice(graph.node)
    choice = rng.randrange(5)
    if choice == 0 and node.input:
        del node.input[rng.randrange(len(node.input))]
        return f"drop an input of {node.op_type}"
    if choice == 1 and node.input:
        node.input[rng.randrange(len(node.input))] = ""
        return f"empty input of {node.op_type}"
    if choice == 2 and node.input:
        node.input[rng.randrange(len(node.input))] = "nowhere"
        return f"dangling input of {node.op_type}"
    if choice == 3:
        names = _names(graph) or ["x"]
        node.input.extend(rng.choice(names) for _ in range(rng.choice((1, 3))))
        return f"extra inputs of {node.op_type}"
    del node.output[:]
    return f"no outputs of {node.op_type}"


def graph_io(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = model.graph
    choice = rng.randrange(7)
    if choice == 0 and graph.input:
        graph.input.append(graph.input[rng.randrange(len(graph.input))])
        return "duplicate graph input"
    if choice == 1 and graph.output:
        graph.output.append(graph.output[rng.randrange(len(graph.output))])
        return "duplicate graph output"
    if choice == 2 and graph.initializer:
        graph.initializer.append(graph.initializer[rng.randrange(len(graph.initializer))])
        return "duplicate initializer"
    if choice == 3 and len(graph.node) > 1:
        a, b = rng.sample(range(len(graph.node)), 2)
        if graph.node[b].output:
            graph.node[a].output[0] = graph.node[b].output[0]
        return "two nodes write one tensor"
    if choice == 4:
        del graph.output[:]
        return "no graph outputs"
    if choice == 5:
        del graph.node[:]
        return "no nodes"
    if graph.output:
        graph.output[0].name = rng.choice(("nowhere", graph.input[0].name if graph.input else "x"))
        return "graph output renamed"
    return "graph_io: none"


def _pick_value_info(rng: random.Random, model: onnx.ModelProto) -> onnx.ValueInfoProto | None:
    infos = _value_infos(model.graph) if rng.random() < 0.8 else [v for g in _graphs(model.graph)
                                                                   for v in _value_infos(g)]
    return rng.choice(infos) if infos else None


def dims(rng: random.Random, model: onnx.ModelProto) -> str:
    info = _pick_value_info(rng, model)
    if info is None or not info.type.HasField("tensor_type"):
        return "dims: none"
    shape = info.type.tensor_type.shape
    choice = rng.randrange(5)
    if choice == 0 and shape.dim:
        dim = rng.choice(shape.dim)
        dim.dim_value = rng.choice(DIMS)
        return f"{info.name[:40]!r} dim={dim.dim_value}"
    if choice == 1 and shape.dim:
        dim = rng.choice(shape.dim)
        dim.dim_param = rng.choice(DIM_PARAMS)
        return f"{info.name[:40]!r} dim={dim.dim_param!r}"
    if choice == 2:
        info.type.tensor_type.ClearField("shape")
        return f"{info.name[:40]!r} no shape"
    if choice == 3:
        shape.dim.add().dim_value = rng.choice((1, 2, 3))
        return f"{info.name[:40]!r} one more dim"
    if shape.dim:
        del shape.dim[rng.randrange(len(shape.dim))]
    return f"{info.name[:40]!r} one dim fewer"


def dtype(rng: random.Random, model: onnx.ModelProto) -> str:
    new = rng.choice(ALL_DTYPES)
    if rng.random() < 0.5 or not model.graph.initializer:
        info = _pick_value_info(rng, model)
        if info is None:
            return "dtype: none"
        info.type.tensor_type.elem_type = new
        return f"{info.name[:40]!r} elem_type={new}"
    t = rng.choice(model.graph.initializer)
    t.data_type = new
    return f"initializer {t.name[:40]!r} data_type={new}"


def initializer(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _pick_graph(rng, model)
    if not graph.initializer:
        return "initializer: none"
    t = rng.choice(graph.initializer)
    choice = rng.randrange(6)
    if choice == 0:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)] if t.raw_data else b"\x00" * 3
        return f"{t.name[:40]!r} short raw_data"
    if choice == 1:
        t.raw_data = (t.raw_data or b"") + b"\x01" * rng.choice((1, 4, 4096))
        return f"{t.name[:40]!r} long raw_data"
    if choice == 2:
        del t.dims[:]
        t.dims.extend(rng.choice(DIMS) for _ in range(rng.choice((0, 1, 2, 4))))
        return f"{t.name[:40]!r} dims={list(t.dims)}"
    if choice == 3:
        t.float_data.extend([1.0, 2.0])
        return f"{t.name[:40]!r} raw and typed data"
    if choice == 4:
        return external_data(rng, model)
    t.data_location = TensorProto.EXTERNAL
    return f"{t.name[:40]!r} external with no entries"


def external_data(rng: random.Random, model: onnx.ModelProto) -> str:
    tensors = [t for t in model.graph.initializer]
    if not tensors:
        return "external_data: none"
    t = rng.choice(tensors)
    ext = [t for t in tensors if t.data_location == TensorProto.EXTERNAL] or [t]
    t = rng.choice(ext)
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    entries = {e.key: e.value for e in t.external_data}
    key = rng.choice(("location", "offset", "length", "checksum", "bogus"))
    value = {
        "location": rng.choice(("w.bin", "nowhere.bin", "/etc/passwd", "../../../etc/passwd", "", ".", "/dev/zero",
                                "/proc/self/mem", "w.bin\x00x", "/dev/urandom")),
        "offset": rng.choice(("0", "1", "-1", "4096", str(2**31), str(2**63), str(2**70), "x", "", "1e3")),
        "length": rng.choice(("0", "1", "-1", "63", str(2**31), str(2**63), str(2**70), "x", "")),
    }.get(key, "1")
    entries[key] = value
    entries.setdefault("location", "w.bin")
    del t.external_data[:]
    for k, v in entries.items():
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    return f"{t.name[:40]!r} external {key}={value!r}"


def op_type(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _pick_graph(rng, model)
    if not graph.node:
        return "op_type: none"
    node = rng.choice(graph.node)
    choice = rng.randrange(3)
    if choice == 0:
        node.op_type = rng.choice(UNKNOWN_OPS)
        return f"op {node.op_type!r}"
    if choice == 1:
        node.domain = rng.choice(DOMAINS)
        if rng.random() < 0.5:
            model.opset_import.append(helper.make_opsetid(node.domain, rng.choice(OPSET_VERSIONS)))
        return f"domain {node.domain!r}"
    node.op_type = rng.choice(("Add", "Relu", "MatMul", "Conv", "Reshape", "Concat", "Loop", "If", "Range", "Gather",
                               "Identity", "Split", "Cast", "Transpose", "Expand", "Tile", "Pad", "Resize", "Scan"))
    return f"op -> {node.op_type}"


def opset(rng: random.Random, model: onnx.ModelProto) -> str:
    choice = rng.randrange(4)
    if choice == 0:
        for entry in model.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = rng.choice(OPSET_VERSIONS)
        return f"opset {[e.version for e in model.opset_import]}"
    if choice == 1:
        del model.opset_import[:]
        return "no opset_import"
    if choice == 2:
        model.opset_import.append(helper.make_opsetid("", rng.choice(OPSET_VERSIONS)))
        return "two default opsets"
    model.ir_version = rng.choice(IR_VERSIONS)
    return f"ir_version {model.ir_version}"


def rewire(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _pick_graph(rng, model)
    nodes = graph.node
    if len(nodes) < 2:
        return "rewire: none"
    if rng.random() < 0.5:
        a = rng.randrange(len(nodes) - 1)
        b = rng.randrange(a + 1, len(nodes))
        if nodes[a].input and nodes[b].output:
            nodes[a].input[rng.randrange(len(nodes[a].input))] = nodes[b].output[0]  # a cycle or an unsorted graph
        return "input from a later node"
    order = list(nodes)
    rng.shuffle(order)
    del graph.node[:]
    graph.node.extend(order)
    return "nodes shuffled"


def value_info(rng: random.Random, model: onnx.ModelProto) -> str:
    names = [o for n in model.graph.node for o in n.output]
    if not names:
        return "value_info: none"
    name = rng.choice(names)
    shape = [rng.choice((*DIMS, "N", "?")) for _ in range(rng.randrange(4))]
    model.graph.value_info.append(helper.make_tensor_value_info(name, rng.choice(ALL_DTYPES[:17]), shape))
    return f"value_info {name[:40]!r} {shape}"


def local_function(rng: random.Random, model: onnx.ModelProto) -> str:
    """A model-local function that calls itself (or a missing one): inliners must not recurse forever."""
    if not model.graph.node:
        return "local_function: none"
    node = rng.choice(model.graph.node)
    node.domain, node.op_type = "local", "Loopy"
    inner = helper.make_node(rng.choice(("Loopy", "Missing")), ["a"], ["b"], domain="local")
    fn = helper.make_function("local", "Loopy", ["a"], ["b"], [inner], [helper.make_opsetid("", 17)])
    model.functions.append(fn)
    model.opset_import.append(helper.make_opsetid("local", 1))
    return "self-calling local function"


def _bomb_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: str,
                inits: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bomb", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bomb(rng: random.Random, model: onnx.ModelProto) -> str:
    """Replace the model with one that asks for far more work or memory than its size suggests."""
    n, c = helper.make_node, onnx.numpy_helper.from_array
    kind = rng.choice(("range", "matmul", "concat", "chain", "expand", "loops", "constant"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    if kind == "range":
        new = _bomb_model([n("Range", ["a", "b", "d"], ["y"])], [], "y",
                          [c(np.array(0.0, np.float32), "a"), c(np.array(1e9, np.float32), "b"),
                           c(np.array(rng.choice((1e-3, 1.0, 1e-30)), np.float32), "d")])
    elif kind == "matmul":
        size = rng.choice((50000, 2**20, 2**31))
        xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])
        new = _bomb_model([n("MatMul", ["x", "x"], ["y"])], [xi], "y", [])
    elif kind == "concat":
        nodes = [n("Concat", [f"t{i}", f"t{i}"], [f"t{i + 1}"], axis=0) for i in range(rng.choice((30, 40, 64)))]
        nodes[0].input[:] = ["x", "x"]
        new = _bomb_model(nodes, [x], nodes[-1].output[0], [])
    elif kind == "chain":
        length = rng.choice((2000, 20000))
        nodes = [n("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(length)]
        nodes[0].input[0] = "x"
        new = _bomb_model(nodes, [x], nodes[-1].output[0], [])
    elif kind == "expand":
        new = _bomb_model([n("Expand", ["x", "s"], ["y"])], [x], "y",
                          [c(np.array([2**20, 2**20, 2], np.int64), "s")])
    elif kind == "constant":
        new = _bomb_model([n("ConstantOfShape", ["s"], ["y"])], [], "y",
                          [c(np.array([rng.choice((2**40, 2**62, -1))], np.int64), "s")])
    else:
        new = _nested_loops(rng.choice((2, 3)), 1000)
    model.CopyFrom(new)
    return f"bomb {kind}"


def _nested_loops(depth: int, trips: int) -> onnx.ModelProto:
    n, c = helper.make_node, onnx.numpy_helper.from_array
    scalar_bool = helper.make_tensor_value_info
    body = helper.make_graph([n("Identity", ["c"], ["co"]), n("Relu", ["v"], ["vo"])], "inner",
                             [scalar_bool("i", TensorProto.INT64, []), scalar_bool("c", TensorProto.BOOL, []),
                              scalar_bool("v", TensorProto.FLOAT, [2])],
                             [scalar_bool("co", TensorProto.BOOL, []), scalar_bool("vo", TensorProto.FLOAT, [2])])
    for level in range(depth - 1):
        body = helper.make_graph(
            [n("Identity", ["c"], ["co"]), n("Loop", ["trips", "c", "v"], ["vo"], body=body)], f"level{level}",
            [scalar_bool("i", TensorProto.INT64, []), scalar_bool("c", TensorProto.BOOL, []),
             scalar_bool("v", TensorProto.FLOAT, [2])],
            [scalar_bool("co", TensorProto.BOOL, []), scalar_bool("vo", TensorProto.FLOAT, [2])])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    graph = helper.make_graph([n("Loop", ["trips", "cond", "x"], ["y"], body=body)], "loops", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [c(np.array(trips, np.int64), "trips"), c(np.array(True), "cond")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


STRUCTURAL_MUTATORS: tuple[Callable[[random.Random, onnx.ModelProto], str], ...] = (
    odd_tensor_name, odd_tensor_name, odd_other_name, attr_type, attr_value, attr_value, drop_attr, add_attr,
    node_inputs, graph_io, dims, dims, dtype, initializer, external_data, op_type, opset, rewire, value_info,
    local_function,
)


def structural_mutant(rng: random.Random, seed: Seed) -> tuple[bytes, str]:
    model = onnx.load_from_string(seed.data)
    if rng.random() < 0.03:
        steps = [bomb(rng, model)]
    else:
        steps = [rng.choice(STRUCTURAL_MUTATORS)(rng, model) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    return model.SerializeToString(), "; ".join(steps)
