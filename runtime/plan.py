"""Buffer plan: intermediates share one arena by liveness (first fit, largest first)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..codegen.kernel import Kernel

ALIGN = 256


@dataclass
class Slot:
    node: int
    nbytes: int
    first: int  # launch index that writes it
    last: int  # last launch index that reads it
    offset: int = 0


@dataclass
class BufferPlan:
    slots: dict[int, Slot] = field(default_factory=dict)
    arena_bytes: int = 0

    @property
    def naive_bytes(self) -> int:
        """What one buffer per intermediate would take."""
        return sum(s.nbytes for s in self.slots.values())


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buffers(launches: Sequence[tuple[Sequence[int], Sequence[tuple[int, int]]]], keep: set[int]) -> BufferPlan:
    """``launches``: per kernel (input node ids, [(output node id, nbytes)]). Nodes in ``keep``
    (graph outputs) get no slot: they must outlive the run."""
    plan = BufferPlan()
    for t, (_, outs) in enumerate(launches):
        for node, nbytes in outs:
            if node not in keep:
                plan.slots[node] = Slot(node, nbytes, t, t)
    for t, (ins, _) in enumerate(launches):
        for node in ins:
            if node in plan.slots:
                plan.slots[node].last = max(plan.slots[node].last, t)
    placed: list[Slot] = []
    for s in sorted(plan.slots.values(), key=lambda s: (-s.nbytes, s.first)):
        busy = sorted((p.offset, p.offset + _align(p.nbytes)) for p in placed
                      if not (p.last < s.first or s.last < p.first))
        offset = 0
        for lo, hi in busy:
            if offset + _align(s.nbytes) <= lo:
                break
            offset = max(offset, hi)
        s.offset = offset
        placed.append(s)
        plan.arena_bytes = max(plan.arena_bytes, offset + _align(s.nbytes))
    return plan


def plan_kernels(kernels: list[Kernel], keep: set[int]) -> BufferPlan:
    """The plan for kernels in launch order: all their outputs but those in ``keep``."""
    return plan_buffers([(k.input_nodes, [(n, b.nbytes) for n, (_, b) in zip(k.output_nodes, k.outputs)])
                         for k in kernels], keep)
