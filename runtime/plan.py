"""Buffer plan: intermediates share one arena by liveness (first fit, largest first; with threads, in launch order
where the bytes' last writers are the threads that write them again; large ones half a page apart launch by
launch)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..codegen.backend import Backend
from ..codegen.kernel import Kernel
from ..codegen.knobs import Schedule
from ..target import PAGE_BYTES
from .alias import Elision, elide_concats

ALIGN = 256
STAGGER_MIN_BYTES = 1 << 16  # slots this large start half a page apart, launch by launch (see plan_buffers)
MOVED_SHARE = 8  # with threads, a slot may take at most 1/8 of its bytes from another thread's last writes


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


def plan_buffers(launches: Sequence[tuple[Sequence[int], Sequence[tuple[int, int]]]], keep: set[int],
                 threads: int = 1) -> BufferPlan:
    """``launches``: per kernel (input node ids, [(output node id, nbytes)]); a node written by several (the
    parts of a concatenation) lives from the first. Nodes in ``keep`` (graph outputs) get no slot: they must
    outlive the run.

    A slot of STAGGER_MIN_BYTES or more starts at the page offset 0 or half a page, by its writer's launch
    index, so that a kernel does not write at the page offsets it reads its producer's output from: where a
    memory-bound kernel's input and output lie at one offset into a page, loads and stores meet in the same L1
    sets and stores alias later loads (DeepLab's 1x1 conv 16 -> 64 over 256x256: 1026 us, 837 us with its
    output half a page on)."""
    plan = BufferPlan()
    for t, (_, outs) in enumerate(launches):
        for node, nbytes in outs:
            if node not in keep and node not in plan.slots:
                plan.slots[node] = Slot(node, nbytes, t, t)
    for t, (ins, _) in enumerate(launches):
        for node in ins:
            if node in plan.slots:
                plan.slots[node].last = max(plan.slots[node].last, t)
    order = sorted(plan.slots.values(), key=lambda s: (-s.nbytes, s.first))
    if len({s.nbytes for s in order}) == 1 and order[0].nbytes > 0:
        plan.arena_bytes = _place_one_size(order)
    elif threads == 1:
        plan.arena_bytes = _place_largest_first(order)
    else:
        plan.arena_bytes = _place_by_writer(sorted(order, key=lambda s: (s.first, -s.nbytes)), threads)
    return plan


def _start(s: Slot, at: int) -> int:
    """The first offset from ``at`` where slot ``s`` may start: a large slot on its half of a page, by its
    writer's launch index (see plan_buffers), a small one ALIGN-aligned."""
    if s.nbytes < STAGGER_MIN_BYTES:
        return _align(max(at, 0))
    color = s.first % 2 * PAGE_BYTES // 2
    return max(at, 0) + (color - max(at, 0)) % PAGE_BYTES


def _place_largest_first(order: list[Slot]) -> int:
    """First fit, largest slot first: each at the lowest start clear of the slots placed whose lifetimes overlap
    its own. Returns the arena's size."""
    placed: list[Slot] = []
    top = 0
    for s in order:
        busy = sorted((p.offset, p.offset + _align(p.nbytes)) for p in placed
                      if not (p.last < s.first or s.last < p.first))
        offset = _start(s, 0)
        for lo, hi in busy:
            if offset + _align(s.nbytes) <= lo:
                break
            if hi > offset:
                offset = _start(s, hi)
        s.offset = offset
        placed.append(s)
        top = max(top, offset + _align(s.nbytes))
    return top


def _shares(offset: int, nbytes: int, threads: int) -> list[tuple[int, int, int]]:
    """(start, end, thread): the contiguous parts of a slot that a kernel splitting its output statically among
    ``threads`` has each thread write."""
    return [(offset + nbytes * t // threads, offset + nbytes * (t + 1) // threads, t) for t in range(threads)]


def _moved(offset: int, nbytes: int, threads: int, owners: list[tuple[int, int, int]], limit: int) -> int:
    """The bytes of a slot at ``offset`` that its threads would write where ``owners`` (sorted, disjoint) say
    another thread did, counted until they pass ``limit``."""
    moved = 0
    for a, b, t in _shares(offset, nbytes, threads):
        for i in range(max(bisect.bisect_right(owners, (a, a, threads)) - 1, 0), len(owners)):
            lo, hi, u = owners[i]
            if lo >= b or moved > limit:
                break
            if u != t and hi > a:
                moved += min(b, hi) - max(a, lo)
    return moved


def _write(owners: list[tuple[int, int, int]], shares: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``owners`` (sorted, disjoint, neighbours of one thread merged) with ``shares`` (contiguous, in order)
    written over them."""
    start, end = shares[0][0], shares[-1][1]
    i = max(bisect.bisect_right(owners, (start, start, -1)) - 1, 0)
    j = bisect.bisect_left(owners, (end, end, -1), i)
    cut = [p for lo, hi, u in owners[i:j] for p in ((lo, min(hi, start), u), (max(lo, end), hi, u)) if p[0] < p[1]]
    merged: list[tuple[int, int, int]] = []
    for p in sorted([*owners[max(i - 1, 0):i], *cut, *shares, *owners[j:j + 1]]):
        if merged and merged[-1][2] == p[2] and merged[-1][1] == p[0]:
            merged[-1] = (merged[-1][0], p[1], p[2])
        else:
            merged.append(p)
    return owners[:max(i - 1, 0)] + merged + owners[j + 1:]


def _place_by_writer(order: list[Slot], threads: int) -> int:
    """Place slots in launch order, each where at most 1/MOVED_SHARE of its bytes were last written by another
    thread than the one that writes them now (each kernel's threads writing equal contiguous shares of its
    output, ``_shares``), at the lowest such start clear of the live slots, else past the top. A byte written by
    a thread on another die than its last writer's comes over from that die's cache first: the two vCPUs here on
    different dies, ResNet-18 ran 19.8 ms with largest-first reuse and 16.7 ms so (onnxruntime 17.8; on one die
    12.5 either way). Candidate starts in each free gap line a slot's share boundaries up with the boundaries of
    the last writers there. Returns the arena's size."""
    live: list[Slot] = []
    owners: list[tuple[int, int, int]] = []  # (start, end, thread) of each byte range's last writer, sorted
    top = 0
    for s in order:
        size = _align(s.nbytes)
        live = sorted((p for p in live if p.last >= s.first), key=lambda p: p.offset)
        s.offset = _start(s, top)
        gap = 0
        for p in [*live, None]:
            end = p.offset if p is not None else top
            if end - gap >= size:
                o = _fitting(s, gap, end, size, threads, owners)
                if o is not None:
                    s.offset = o
                    break
            if p is not None:
                gap = max(gap, p.offset + _align(p.nbytes))
        owners = _write(owners, _shares(s.offset, size, threads))
        live.append(s)
        top = max(top, s.offset + size)
    return top


def _fitting(s: Slot, gap: int, end: int, size: int, threads: int, owners: list[tuple[int, int, int]]) -> int | None:
    """The lowest start of slot ``s`` in the free bytes [gap, end) where its threads write at most 1/MOVED_SHARE of
    it over another thread's last writes, trying the gap's start and the starts that put its start or its middle
    share boundary on a last writer's boundary (a slot of one size on its start, one of half on the middle of
    two threads'); None where none does."""
    i = max(bisect.bisect_right(owners, (gap - size, gap - size, threads)) - 1, 0)
    j = bisect.bisect_left(owners, (end, end, -1), i)
    marks = {b for lo, hi, _ in owners[i:j] for b in (lo, hi)}
    starts = {_start(s, m - size * t // threads) for m in marks for t in {0, threads // 2}} | {_start(s, gap)}
    for o in sorted(x for x in starts if gap <= x and x + size <= end):
        if _moved(o, size, threads, owners, size // MOVED_SHARE) <= size // MOVED_SHARE:
            return o
    return None


def _place_one_size(order: list[Slot]) -> int:
    """First fit, as ``plan_buffers`` places slots, where every slot has one size: taken in order of their first
    launch, the slots live at a slot's first launch are those whose last reader has not run before it, each on
    its own multiple of the size, so the lowest free multiple is where it fits; a heap of the live slots by last
    launch gives their offsets back as they die (linear where the general search compares every pair). Returns
    the arena's size."""
    size = _align(order[0].nbytes)
    free: list[int] = []  # offsets below the top that no live slot holds
    live: list[tuple[int, int]] = []  # (last launch, offset)
    top = 0
    for s in order:
        while live and live[0][0] < s.first:
            heapq.heappush(free, heapq.heappop(live)[1])
        if free:
            s.offset = heapq.heappop(free)
        else:
            s.offset, top = top, top + size
        heapq.heappush(live, (s.last, s.offset))
    return top


def plan_kernels(launched: list[Kernel], keep: set[int], elision: Elision | None = None,
                 threads: int = 1) -> BufferPlan:
    """The plan for the kernels launched, in order, on ``threads`` threads: all their outputs but those in
    ``keep``; with ``elision`` (which picked them), each part of a concatenation in the concatenation's slot."""
    if elision is None:
        elision = Elision(tuple(range(len(launched))))

    def out(node: int, nbytes: int) -> tuple[int, int]:
        root = elision.place(node)[0]
        return root, elision.roots[root].nbytes if root in elision.roots else nbytes

    return plan_buffers([([elision.place(n)[0] for n in k.input_nodes],
                          [out(n, b.nbytes) for n, (_, b) in zip(k.output_nodes, k.outputs)])
                         for k in launched], keep, threads)


def plan_run(kernels: list[Kernel], keep: set[int], threads: int = 1, over: Sequence[tuple[int, ...]] = ()
             ) -> tuple[Elision, list[Kernel], BufferPlan]:
    """How a compiled model runs ``kernels`` (graph outputs ``keep``) on ``threads`` threads: the concatenations
    its parts' producers write in place, the kernels it then launches, the outputs written over an input of their
    kernel (``over``: per kernel, the inputs its schedule may write over, ``Backend.in_place``; none where empty),
    and the arena plan of their outputs."""
    elision = elide_concats(kernels, keep)
    launched = elision.pick(kernels)
    if over:
        elision = written_over(launched, keep, elision, elision.pick(over))
    return elision, launched, plan_kernels(launched, keep, elision, threads)


def over_of(backend: Backend, kernels: Sequence[Kernel], schedules: Sequence[Schedule]) -> list[tuple[int, ...]]:
    """Per kernel, the inputs the backend may write its output over under its schedule (``plan_run``'s ``over``;
    none where the backend says nothing of it: a test's fake one)."""
    in_place = getattr(backend, "in_place", None)
    return [in_place(k, s) for k, s in zip(kernels, schedules)] if in_place else []


def written_over(launched: list[Kernel], keep: set[int], elision: Elision, over: Sequence[tuple[int, ...]]
                 ) -> Elision:
    """``elision`` with each output of a launched kernel that may be written over one of its inputs (``over``, by
    launch) living in that input's buffer, where the input is an intermediate no later kernel reads and neither is
    a graph output or a concatenation's part. The output then needs no buffer of its own, and its stores meet lines
    the loads of the residual just brought in, where a buffer of its own had each line read from memory before it
    was written over: inside ResNet-50 (2 threads, each kernel's span) its 15 residual convs 6.30 -> 5.77 ms."""
    written = {n: t for t, k in enumerate(launched) for n in k.output_nodes}
    last = {n: t for t, k in enumerate(launched) for n in k.input_nodes}
    concat = set(elision.aliases) | set(elision.roots)
    aliases = dict(elision.aliases)
    for t, (k, inputs) in enumerate(zip(launched, over)):
        for i in inputs:
            r, (o,) = k.input_nodes[i], k.output_nodes
            if (written.get(r, t) < t and last[r] == t and k.input_nodes.count(r) == 1 and not {r, o} & keep
                    and not {r, o} & concat):
                aliases[o] = (r, 0)
                break
    return Elision(elision.launched, aliases, elision.roots)
