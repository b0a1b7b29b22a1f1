"""A readable text form of a graph, one primitive per line."""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node, Op
from .view import View


def _view(v: View, src: Node) -> str:
    if v.is_contiguous and v.shape == src.shape:
        return ""
    parts = [f"shape={list(v.shape)}", f"strides={list(v.strides)}"]
    if v.offset:
        parts.append(f"offset={v.offset}")
    if v.mask:
        parts.append(f"mask={len(v.mask)}")
    return "[" + " ".join(parts) + "]"


def _attrs(n: Node) -> str:
    if n.op is Op.Constant:
        v = n.attrs["value"]
        return f" {v.item()!r}" if v.ndim == 0 else f" <{v.size} values>"
    if n.op is Op.Input:
        return f" {n.attrs['name']!r}"
    extra = {k: v for k, v in n.attrs.items() if not isinstance(v, np.ndarray)}
    return "".join(f" {k}={v}" for k, v in extra.items())


def format_graph(graph: Graph) -> str:
    order = graph.toposort()
    names = {n.id: f"%{i}" for i, n in enumerate(order)}
    lines = []
    for n in order:
        srcs = ", ".join(names[s.id] + _view(v, s) for s, v in n.srcs)
        lines.append(f"{names[n.id]} = {n.op.value}{_attrs(n)}({srcs}) : {n.dtype.value}{list(n.shape)}")
    for name, o in zip(graph.output_names, graph.outputs):
        lines.append(f"output {name!r} = {names[o.id]}")
    return "\n".join(lines)
