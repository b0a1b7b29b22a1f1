"""Buffer plan: intermediates share one arena by liveness (first fit, largest first)."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    def to_json(self) -> dict:
        return {"arena_bytes": self.arena_bytes,
                "slots": [[s.node, s.nbytes, s.first, s.last, s.offset] for s in self.slots.values()]}

    @staticmethod
    def from_json(d: dict) -> BufferPlan:
        p = BufferPlan(arena_bytes=int(d["arena_bytes"]))
        for node, nbytes, first, last, offset in d["slots"]:
            p.slots[int(node)] = Slot(int(node), int(nbytes), int(first), int(last), int(offset))
        if any(s.offset < 0 or s.offset + s.nbytes > p.arena_bytes for s in p.slots.values()):
            raise ValueError("buffer plan slot outside its arena")
        return p


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buffers(launches: list[tuple[list[int], list[tuple[int, int]]]], keep: set[int]) -> BufferPlan:
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
