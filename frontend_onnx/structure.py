"""The graph's names and edges, checked before anything is imported: each value defined once,
every edge from a value that exists, at least one output."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import onnx

from ..errors import LuminalError


def clean(s: str | bytes, limit: int = 80) -> str:
    """A name from the model, fit for a one-line message: unprintable characters as ``?``, at most ``limit``."""
    if isinstance(s, bytes):  # proto2 hands out strings that are not UTF-8 as bytes
        s = s.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else "?" for c in s)[:limit]


def _unique(kind: str, names: Iterable[str]) -> None:
    twice = [n for n, k in Counter(names).items() if k > 1]
    if twice:
        raise LuminalError(f"{kind} {clean(twice[0])!r} is listed more than once"
                           + (f" ({len(twice)} names are)" if len(twice) > 1 else ""))


class NodeFields(NamedTuple):
    """A node's fields read out of its proto once (each read of a repeated field builds new wrappers)."""

    proto: onnx.NodeProto
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: int  # how many: most nodes have none, and a walk over none still costs


def read_nodes(g: onnx.GraphProto) -> list[NodeFields]:
    return [NodeFields(n, n.op_type, n.domain, list(n.input), list(n.output), len(n.attribute)) for n in g.node]


def check_graph(g: onnx.GraphProto, nodes: Sequence[NodeFields]) -> None:
    """Refuse, in one line, a main graph whose names or edges are malformed; ``nodes``: ``read_nodes(g)``."""
    if not g.output:
        raise LuminalError("the graph has no outputs")
    _unique("graph input", (vi.name for vi in g.input))
    _unique("graph output", (vi.name for vi in g.output))
    inits = [t.name for t in g.initializer] + [sp.values.name for sp in g.sparse_initializer]
    _unique("initializer", inits)
    given = {vi.name for vi in g.input} | set(inits)
    produced = set(given)
    for n in nodes:
        for o in n.outputs:
            if not o:
                continue
            if o in given:
                raise LuminalError(f"value {clean(o)!r} is both a graph input or initializer and a node's output")
            produced.add(o)  # a value two nodes produce is refused where the nodes are ordered
    for n in nodes:
        for i in n.inputs:
            if i and i not in produced:
                label = clean(n.proto.name or (n.outputs[0] if n.outputs else "")) or "?"
                raise LuminalError(f"node {label!r} ({clean(n.op_type)}) reads {clean(i)!r}, which no graph input, "
                                   f"initializer or node defines")
    for o in g.output:
        if o.name not in produced:
            raise LuminalError(f"graph output {clean(o.name)!r} is never produced")
