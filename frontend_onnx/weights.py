"""Weights read once: read an ONNX file and hand its initializers out as numpy views of its bytes.

``onnx.load`` holds a model three times over while it is imported: the file's bytes, the
parsed protobuf, and a numpy copy of every initializer. Here the file is read into one bytes
object, a small protobuf wire-format scanner finds the ``raw_data`` payload of every initializer
of the main graph, and the ModelProto is parsed from the file with those payloads left out. The
weights are read-only ``np.frombuffer`` views of the bytes (they keep them alive through their
``base``), so they are held once. External data files are read the same way. The files are read,
not mapped: a session outlives its model file's contents, and a mapped file truncated or
rewritten under a live map kills the process with SIGBUS.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

# field numbers in onnx.proto
MODEL_GRAPH = 7
GRAPH_INITIALIZER = 5
TENSOR_RAW_DATA = 9
TENSOR_DATA_LOCATION = 14

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

# raw_data is little-endian; elsewhere numpy_helper byteswaps a copy, and so do we
LITTLE = sys.byteorder == "little"

# element types whose raw_data numpy_helper.to_array reads as a plain little-endian array
_PLAIN: dict[int, np.dtype] = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)) for t in (
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE, TensorProto.INT64,
    TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8, TensorProto.UINT16,
    TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL)}


class WireError(ValueError):
    """The bytes are not well-formed protobuf (truncated, a bad length, an unknown wire type)."""


@dataclass
class Field:
    number: int
    wire: int
    start: int  # the tag's first byte
    payload: int  # the first byte after the tag (after the length, for LENGTH fields)
    end: int
    value: int = 0  # a VARINT's value


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fields(buf, start: int, end: int):
    """The fields of the message in ``buf[start:end]``, in file order."""
    pos = start
    while pos < end:
        tag, p = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        value = 0
        if wire == VARINT:
            value, q = _varint(buf, p, end)
        elif wire == FIXED64:
            q = p + 8
        elif wire == FIXED32:
            q = p + 4
        elif wire == LENGTH:
            n, p = _varint(buf, p, end)
            q = p + n
        else:  # groups: never written by ONNX; the protobuf parser decides what such a file is
            raise WireError(f"wire type {wire}")
        if q > end:
            raise WireError("field runs past the end of its message")
        yield Field(number, wire, pos, p, q, value)
        pos = q


class _Builder:
    """A message re-serialised from slices of ``buf`` and replacement fields; adjacent slices
    are joined so the copy is one slice per run of kept fields."""

    def __init__(self, buf):
        self.buf, self.parts, self.run = buf, [], None

    def keep(self, f: Field) -> None:
        if self.run and self.run[1] == f.start:
            self.run[1] = f.end
        else:
            self._flush()
            self.run = [f.start, f.end]

    def add(self, number: int, payload: bytes) -> None:
        self._flush()
        self.parts += [encode_varint(number << 3 | LENGTH), encode_varint(len(payload)), payload]

    def _flush(self) -> None:
        if self.run:
            self.parts.append(self.buf[self.run[0]:self.run[1]])
            self.run = None

    def bytes(self) -> bytes:
        self._flush()
        return b"".join(self.parts)


def _strip_tensor(buf, f: Field) -> tuple[bytes, tuple[int, int]] | None:
    """The tensor's fields without raw_data, and where raw_data lies; None when it has no
    inline raw_data to take (external, float_data, ...)."""
    raw, external = None, False
    for g in fields(buf, f.payload, f.end):
        if g.number == TENSOR_RAW_DATA and g.wire == LENGTH:
            raw = (g.payload, g.end)  # the last one wins, as in protobuf
        elif g.number == TENSOR_DATA_LOCATION and g.wire == VARINT:
            external = g.value == TensorProto.EXTERNAL
    if raw is None or external:
        return None
    b = _Builder(buf)
    for g in fields(buf, f.payload, f.end):
        if not (g.number == TENSOR_RAW_DATA and g.wire == LENGTH):
            b.keep(g)
    return b.bytes(), raw


def _strip_graph(buf, f: Field, raws: list) -> bytes:
    b = _Builder(buf)
    for g in fields(buf, f.payload, f.end):
        stripped = _strip_tensor(buf, g) if g.number == GRAPH_INITIALIZER and g.wire == LENGTH else None
        if g.number == GRAPH_INITIALIZER and g.wire == LENGTH:
            raws.append(stripped[1] if stripped else None)
        if stripped is None:
            b.keep(g)
        else:
            b.add(GRAPH_INITIALIZER, stripped[0])
    return b.bytes()


def strip_model(buf, size: int) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The model's bytes with the main graph's raw_data payloads left out, and, per main-graph
    initializer in order, the (start, end) of its payload in ``buf`` (None: left in place).
    Repeated ``graph`` fields are kept apart; protobuf merges them as it would the file's."""
    raws: list[tuple[int, int] | None] = []
    b = _Builder(buf)
    for f in fields(buf, 0, size):
        if f.number == MODEL_GRAPH and f.wire == LENGTH:
            b.add(MODEL_GRAPH, _strip_graph(buf, f, raws))
        else:
            b.keep(f)
    return b.bytes(), raws


@dataclass
class MappedModel:
    proto: onnx.ModelProto
    # main-graph initializers by name: read-only views of the file's bytes
    weights: dict[str, np.ndarray] = field(default_factory=dict)


def _view(buf: bytes, t: TensorProto, start: int, end: int) -> np.ndarray | None:
    """``t``'s raw_data as a view of the file's bytes, or None where numpy_helper would read it otherwise."""
    dtype = _PLAIN.get(t.data_type)
    if dtype is None or not LITTLE or t.HasField("segment"):
        return None
    dims = tuple(t.dims)
    if any(d < 0 for d in dims) or math.prod(dims) * dtype.itemsize != end - start:
        return None  # the normal path reports the mismatch
    try:
        if start == end:
            return np.empty(dims, dtype)
        return np.frombuffer(buf, dtype, math.prod(dims), start).reshape(dims)
    except ValueError:  # more dims than numpy takes, or an empty shape too big to describe
        return None


def map_model(path: Path) -> MappedModel | None:
    """The model at ``path`` with its main-graph weights as read-only views of the file's bytes.
    None when the scanner cannot read the file (empty, truncated, corrupt): the caller then
    reads it the ordinary way, which names the problem."""
    buf = path.read_bytes()
    try:
        data, raws = strip_model(buf, len(buf))
    except WireError:
        return None
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception:  # protobuf's DecodeError; the ordinary reader words it
        return None
    del data
    inits = proto.graph.initializer
    if len(inits) != len(raws):
        return None
    names = Counter(t.name for t in inits)
    out = MappedModel(proto)
    for t, raw in zip(inits, raws):
        if raw is None:
            continue
        arr = _view(buf, t, *raw) if names[t.name] == 1 else None
        if arr is None:  # put the payload back; tensor_value reads (or refuses) it as before
            t.raw_data = buf[raw[0]:raw[1]]
        else:
            out.weights[t.name] = arr
    return out


def external_view(t: TensorProto, path: Path, offset: int, length: int, files: dict[Path, bytes]) -> np.ndarray | None:
    """An external tensor as a view of its data file's bytes (``files`` keeps each file read once);
    None where its declared extent or size does not fit, for the ordinary reader to report."""
    if path not in files:
        files[path] = path.read_bytes()
    buf = files[path]
    end = len(buf) if length < 0 else offset + length
    if offset > end or end > len(buf):
        return None
    return _view(buf, t, offset, end)
