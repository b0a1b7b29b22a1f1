"""Concatenations written in place: the parts of a concatenation written by their producers into its buffer.

A Concat is imported as a sum of its parts, each zero-padded along the axis (``ops_shape.concat``), and runs as
an elementwise kernel copying every part. Where each part is a slice of the output that is one contiguous range
(every dim outside the axis is 1: channels of one image), the part's producer can write its output there in
the first place, as the kernels write whole contiguous buffers: the copy is not launched and the part's buffer is
a view into the concatenation's. A concatenation of concatenations (a DenseNet block) becomes one buffer, as do
concatenations each of which starts the next (torchvision's DenseNet block) and a buffer split into slices that
are concatenated again side by side (a YOLOv8 C2f block's chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..codegen.kernel import Buffer, Form, Kernel, Leaf
from ..ir.graph import Op
from ..ir.view import whole_parts

T = TypeVar("T")


@dataclass(frozen=True)
class Elision:
    """The kernels to launch (indices into the lowered list) and where the elided copies' parts live."""

    launched: tuple[int, ...]
    aliases: dict[int, tuple[int, int]] = field(default_factory=dict)  # part -> (its concatenation, first element)
    roots: dict[int, Buffer] = field(default_factory=dict)  # every concatenation that holds parts: its buffer

    def place(self, node: int) -> tuple[int, int]:
        """(the buffer's node, first element) where ``node``'s values live: itself at 0 unless a part."""
        off = 0
        while node in self.aliases:
            node, o = self.aliases[node]
            off += o
        return node, off

    def pick(self, items: Sequence[T]) -> list[T]:
        """The items (kernels, their schedules) of the launched kernels, in launch order."""
        return [items[t] for t in self.launched]

    def buffers(self, written: dict[int, Buffer], make: Callable[[int, Buffer], Any]) -> dict[int, Any]:
        """A buffer per node the launched kernels write (``written``) and per concatenation: ``make(node, its
        Buffer)`` for each that is no part, a view into its concatenation's for each part."""
        out: dict[int, Any] = {}
        for n, b in {**written, **self.roots}.items():
            root, off = self.place(n)
            if root not in out:
                out[root] = make(root, self.roots.get(root, b))
            if root != n:
                out[n] = out[root].reshape(-1)[off:off + b.numel].reshape(b.shape)
        return out


def _parts(k: Kernel) -> list[tuple[int, int]] | None:
    """(input position, first element in the output) per part, where ``k`` is a concatenation of contiguous
    ranges of its output: one output, a sum of loads each reading a range of its input zero-padded along one axis
    outside which the output's dims are 1, each input read whole in order (a part, or the slices of a split that
    are concatenated again side by side), the parts tiling the output."""
    if k.form is not Form.elementwise or len(k.outputs) != 1:
        return None
    root, out = k.outputs[0]
    loads: list[int] = []
    stack = [root]
    while stack:
        i = stack.pop()
        op = k.ops[i]
        if op.op is Op.Add and op.dtype == out.dtype:
            stack += op.args
        elif op.op is Leaf.Load:
            loads.append(i)
        else:
            return None
    reads = [(k.ops[i].attr("buf"), k.ops[i].attr("view")) for i in loads]
    if any(k.inputs[b].constant or k.inputs[b].dtype != out.dtype for b, _ in reads):
        return None
    at = whole_parts([(b, v, k.inputs[b].numel) for b, v in reads])
    if at is None:
        return None
    parts = list(at.items())
    ranges = sorted((off, off + k.inputs[b].numel) for b, off in parts)
    if len(parts) < 2 or [r[0] for r in ranges] != [0, *(r[1] for r in ranges[:-1])] or ranges[-1][1] != out.numel:
        return None
    return parts


def elide_concats(kernels: Sequence[Kernel], keep: set[int]) -> Elision:
    """Which concatenations' copies need not run: those whose parts are each written by one earlier kernel
    (not a model input, a weight or an output in ``keep``), and whose own output is not in ``keep``. A part
    already placed in an earlier concatenation may be one of them where that concatenation's whole buffer lies
    within this one, its parts where this one has them (``_holders``): torchvision's DenseNet concatenates all
    of a block's earlier outputs at each layer, each concatenation the start of the next."""
    writer = {n: t for t, k in enumerate(kernels) for n in k.output_nodes}
    aliases: dict[int, tuple[int, int]] = {}
    roots: dict[int, Buffer] = {}
    placed = Elision((), aliases, roots)  # where the parts elided so far live
    skipped: set[int] = set()
    for t, k in enumerate(kernels):
        parts = _parts(k)
        if parts is None or k.output_nodes[0] in keep:
            continue
        nodes = [k.input_nodes[b] for b, _ in parts]
        if len(set(nodes)) != len(nodes) or any(n in keep or writer.get(n, t) >= t for n in nodes):
            continue
        holders = _holders(k, parts, nodes, placed)
        if holders is None:
            continue
        node = k.output_nodes[0]
        aliases.update({n: (node, off) for n, (_, off) in zip(nodes, parts) if n not in aliases})
        aliases.update({h: (node, shift) for h, shift in holders.items()})
        roots[node] = k.outputs[0][1]
        skipped.add(t)
    return Elision(tuple(t for t in range(len(kernels)) if t not in skipped), aliases, roots)


def _holders(k: Kernel, parts: list[tuple[int, int]], nodes: list[int], placed: Elision) -> dict[int, int] | None:
    """The earlier concatenations (their buffers' roots) that hold some of the parts of ``k``, each with the
    first element of ``k``'s output it would start at: where every such part lies in it where ``k`` has it (one
    shift per root), those parts fill it whole, and it is none of the parts itself; None where one does not."""
    shifts: dict[int, int] = {}
    held: dict[int, int] = {}
    for n, (b, off) in zip(nodes, parts):
        if n not in placed.aliases:
            continue
        root, at = placed.place(n)
        if shifts.setdefault(root, off - at) != off - at:
            return None
        held[root] = held.get(root, 0) + k.inputs[b].numel
    if any(root in nodes or held[root] != placed.roots[root].numel for root in shifts):
        return None
    return shifts
