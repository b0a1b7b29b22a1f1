"""onnxruntime's schemas of its com.microsoft ops, checked as it checks a node: onnx's checker knows only the
standard domains, so a contrib node with an attribute its op lacks, or more inputs than it takes, ran here where
onnxruntime refuses the model."""

from __future__ import annotations

import functools
from typing import Any

import onnx

from ..errors import LuminalError
from .registry import MS
from .structure import clean


@functools.cache
def _schemas() -> dict[str, list[Any]]:
    """Each contrib op's schemas by name, newest first (onnxruntime is imported only for a model that has one)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    out: dict[str, list[Any]] = {}
    for s in ort_c.get_all_operator_schema():
        if s.domain == MS:
            out.setdefault(s.name, []).append(s)
    for versions in out.values():
        versions.sort(key=lambda s: -s.since_version)
    return out


def check_contrib_node(n: onnx.NodeProto, opset: int, label: str) -> None:
    """Refuse a com.microsoft node onnxruntime's schema for its op at ``opset`` refuses: an unknown or missing
    required attribute, one of another type, more inputs than the op takes, a required input left empty."""
    schema = next((s for s in _schemas().get(n.op_type, ()) if s.since_version <= opset), None)
    if schema is None:
        return
    for a in n.attribute:
        want = schema.attributes.get(a.name)
        if want is None:
            raise LuminalError(f"{label}: attribute {clean(a.name)!r} is not one of {n.op_type}'s")
        if int(want.type) != a.type and a.type != onnx.AttributeProto.UNDEFINED:
            name = onnx.AttributeProto.AttributeType.Name
            raise LuminalError(f"{label}: attribute {clean(a.name)!r} is {name(a.type)}, {n.op_type} takes "
                               f"{name(int(want.type))}")
    given = {a.name for a in n.attribute}
    missing = [name for name, a in schema.attributes.items() if a.required and name not in given]
    if missing:
        raise LuminalError(f"{label}: {n.op_type} needs attribute {clean(missing[0])!r}")
    variadic = any(f.option == f.option.Variadic for f in schema.inputs)
    if not variadic and len(n.input) > schema.max_input:
        raise LuminalError(f"{label}: {n.op_type} takes at most {schema.max_input} inputs, not {len(n.input)}")
    for i, formal in enumerate(schema.inputs):
        if formal.option == formal.option.Single and (i >= len(n.input) or not n.input[i]):
            raise LuminalError(f"{label}: {n.op_type} needs input {i} ({formal.name})")
