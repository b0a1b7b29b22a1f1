"""The buffer plan: slots whose lifetimes overlap never share bytes, and where every intermediate has one size
(a long chain of one shape, placed in n log n) the arena holds exactly as many slots as are ever live at once."""

from __future__ import annotations

import random

import pytest

import luminal.runtime.plan as plan_module
from luminal.runtime.plan import ALIGN, STAGGER_MIN_BYTES, plan_buffers
from luminal.target import PAGE_BYTES as PAGE


def _launches(rnd: random.Random, n: int, sizes: list[int]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """n kernels, kernel t writing node t and reading up to three earlier nodes (some far back)."""
    return [([rnd.randrange(t) for _ in range(rnd.randint(0, min(3, t)))], [(t, rnd.choice(sizes))])
            for t in range(n)]


def _overlaps(plan) -> list[tuple[int, int]]:
    slots = list(plan.slots.values())
    bad = []
    for i, a in enumerate(slots):
        for b in slots[i + 1:]:
            live = not (a.last < b.first or b.last < a.first)
            apart = a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
            if live and not apart:
                bad.append((a.node, b.node))
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_one_size_slots_never_overlap_and_fill_the_arena_tightly(seed):
    rnd = random.Random(seed)
    n, size = rnd.randint(1, 80), rnd.choice([4, 100, ALIGN, 3 * ALIGN + 8])
    launches = _launches(rnd, n, [size])
    keep = {n - 1} | {rnd.randrange(n) for _ in range(rnd.randint(0, 2))}
    plan = plan_buffers(launches, keep)
    assert not _overlaps(plan)
    assert all(s.offset % ALIGN == 0 for s in plan.slots.values())
    # the most slots live at one launch, each in its own aligned place
    most = max((sum(s.first <= t <= s.last for s in plan.slots.values()) for t in range(n)), default=0)
    assert plan.arena_bytes == most * -(-size // ALIGN) * ALIGN


@pytest.mark.parametrize("seed", range(20))
def test_mixed_sizes_never_overlap(seed):
    rnd = random.Random(seed)
    n = rnd.randint(1, 60)
    plan = plan_buffers(_launches(rnd, n, [4, 300, 1024, 5000, STAGGER_MIN_BYTES, 3 * STAGGER_MIN_BYTES + 8]),
                        {n - 1})
    assert not _overlaps(plan)
    assert plan.arena_bytes >= max((s.offset + s.nbytes for s in plan.slots.values()), default=0)


def test_a_long_chain_of_one_size_plans_in_two_slots():
    n = 20000
    plan = plan_buffers([([t - 1] if t else [], [(t, 4096)]) for t in range(n)], {n - 1})
    assert plan.arena_bytes == 2 * 4096 and len(plan.slots) == n - 1


@pytest.mark.parametrize("seed", range(20))
def test_a_large_slot_starts_half_a_page_from_the_one_its_writer_reads(seed, monkeypatch):
    """Consecutive kernels of a chain write at page offsets half a page apart (loads and stores of a memory-bound
    kernel then meet in other L1 sets), where the slots are large enough for it to matter; small ones pack."""
    rnd = random.Random(seed)
    n = rnd.randint(3, 60)
    sizes = [300, 5000, STAGGER_MIN_BYTES, 3 * STAGGER_MIN_BYTES + 8, 1 << 20]
    launches = [([t - 1] if t else [], [(t, 300 if t == 0 else rnd.choice(sizes))]) for t in range(n)]
    plan = plan_buffers(launches, {n - 1})
    assert not _overlaps(plan)
    large = [t for t in range(n - 1) if plan.slots[t].nbytes >= STAGGER_MIN_BYTES]
    assert all(plan.slots[t].offset % PAGE == t % 2 * PAGE // 2 for t in large)
    assert all(s.offset % ALIGN == 0 for s in plan.slots.values())
    monkeypatch.setattr(plan_module, "STAGGER_MIN_BYTES", 1 << 62)
    assert plan.arena_bytes <= plan_buffers(launches, {n - 1}).arena_bytes + PAGE * len(large)


def _moved(plan, threads: int) -> dict[int, int]:
    """Per slot, placed in launch order: the bytes its writer's threads (each a contiguous equal share of the
    slot) write where another thread wrote last, replayed ALIGN bytes at a time."""
    owner: dict[int, int] = {}
    moved = {}
    for s in sorted(plan.slots.values(), key=lambda s: (s.first, -s.nbytes)):
        size = -(-s.nbytes // ALIGN) * ALIGN
        cells = range(s.offset // ALIGN, (s.offset + size) // ALIGN)
        mine = {c: (c * ALIGN - s.offset) * threads // size for c in cells}
        moved[s.node] = sum(ALIGN for c in cells if owner.get(c, mine[c]) != mine[c])
        owner.update(mine)
    return moved


@pytest.mark.parametrize("seed", range(20))
def test_with_threads_a_slot_takes_few_bytes_another_thread_wrote_last(seed):
    """A kernel's threads write the bytes their threads wrote at the slot's last tenant, all but an eighth: a
    byte that another core wrote last comes over from its cache first (across dies, the dominant cost)."""
    rnd = random.Random(seed)
    n, threads = rnd.randint(2, 60), rnd.choice([2, 3, 4])
    sizes = [300, 5000, STAGGER_MIN_BYTES, 2 * STAGGER_MIN_BYTES, 3 * STAGGER_MIN_BYTES + 8, 1 << 20]
    launches = _launches(rnd, n, sizes)
    plan = plan_buffers(launches, {n - 1}, threads)
    assert not _overlaps(plan)
    large = [s for s in plan.slots.values() if s.nbytes >= STAGGER_MIN_BYTES]
    assert all(s.offset % PAGE == s.first % 2 * PAGE // 2 for s in large)
    assert all(s.offset % ALIGN == 0 for s in plan.slots.values())
    assert plan.arena_bytes >= max((s.offset + s.nbytes for s in plan.slots.values()), default=0)
    moved = _moved(plan, threads)
    for s in plan.slots.values():
        # the replay counts whole ALIGN cells where a share boundary falls inside one
        assert moved[s.node] * plan_module.MOVED_SHARE <= s.nbytes + threads * ALIGN * 8


def test_a_half_size_slot_sits_across_the_threads_boundary_of_the_one_before():
    """1 MB written by two threads, then 512 KB: one thread reuses the start, two centre it on the 1 MB slot's
    halves (each thread writes what it wrote before)."""
    mb = 1 << 20
    launches = [([], [(0, mb)]), ([0], [(1, mb)]), ([1], [(2, mb // 2)]), ([2], [(3, 4)])]
    assert plan_buffers(launches, {3}, 1).slots[2].offset == 0
    plan = plan_buffers(launches, {3}, 2)
    assert plan.slots[0].offset == 0 and plan.slots[2].offset == mb // 4
    assert _moved(plan, 2)[2] == 0
