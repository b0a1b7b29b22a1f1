"""Measurement in isolated workers: every failure kind gets its status and the worker comes back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import search_util as helpers

from luminal.cache.records import SampleStats
from luminal.codegen.partition import fusible_edges, partition
from luminal.ir.dtypes import DType
from luminal.search.measure import Measurer
from luminal.search.stats import beats
from luminal.search.timing import TimingPlan
from luminal.search.verify import mismatch

PLAN = helpers.PLAN


@pytest.fixture
def measurer():
    m = Measurer(helpers.FakeBackend(), helpers.small_graph(), workers=2, plan=PLAN, timeout_s=0.8)
    yield m
    m.close()


def test_statuses_of_bad_candidates_and_recovery(measurer):
    kernel = partition(helpers.small_graph())[0]
    modes = ["ok", "crash", "ok", "hang", "wrong", "bad", "ok"]
    res = measurer.measure(kernel, [{"speed": 1, "mode": m} for m in modes])
    assert [r.status for r in res] == ["ok", "crash", "ok", "timeout", "wrong_result", "compile_error", "ok"]
    assert "SIGABRT" in res[1].message
    assert "does not compile" in res[5].message
    for r in (res[0], res[2], res[6]):
        assert len(r.samples_ns) >= PLAN.min_reps and r.median_ns > 0
    assert measurer.timer.restarts >= 2  # replaced after the crash and after the hang


def test_speed_knob_is_measured(measurer):
    kernel = partition(helpers.small_graph())[0]
    fast, slow = measurer.compare(kernel, [{"speed": 1, "mode": "ok"}, {"speed": 8, "mode": "ok"}])
    assert fast.ok and slow.ok
    assert len(fast.samples_ns) == len(slow.samples_ns)  # interleaved rounds
    assert beats(fast.samples_ns, slow.samples_ns)
    assert not beats(slow.samples_ns, fast.samples_ns)


def test_whole_model_verified_and_timed(measurer):
    g = helpers.small_graph()
    unfused = {e: False for e in fusible_edges(g)}
    fused, split = measurer.measure_model([({}, {}), (unfused, {})])
    assert fused.ok and split.ok
    # each kernel launch of the fake backend costs 8 units: more kernels, more time
    assert split.median_ns > fused.median_ns


def test_wrong_model_variant_is_caught(measurer):
    g = helpers.small_graph()
    sig = partition(g)[0].signature
    (r,) = measurer.measure_model([({}, {sig: {"speed": 1, "mode": "wrong"}})])
    assert r.status == "wrong_result"


def test_a_model_variant_runs_a_schedule_the_backend_refuses_as_the_default(measurer):
    """A winner kept by an earlier run may no longer be valid for its kernel (FakeBackend refuses speed 2 with
    mode "wrong"): the kernel runs its default schedule, not the refused one."""
    g = helpers.small_graph()
    sig = partition(g)[0].signature
    (r,) = measurer.measure_model([({}, {sig: {"speed": 2, "mode": "wrong"}})])
    assert r.status == "ok"


def test_a_lost_device_answers_for_every_candidate():
    """On the GPU a crash poisons the context: the candidates after it crash with it, one outcome each."""
    from luminal.search.jobs import JobRunner, KernelJob, ModelJob

    class Lost(helpers.FakeBackend):
        name = "cuda"

        def compile(self, items):
            def launch(buffers):
                raise RuntimeError("illegal memory access")

            return [launch for _ in items]

    g = helpers.small_graph()
    runner = JobRunner(Lost(), g)
    for job in (ModelJob([({}, {}), ({}, {})], 0, PLAN), KernelJob(partition(g)[0], [{"speed": 1}] * 2, 0, PLAN)):
        reply = runner.handle(job)
        assert reply.poisoned and [o.status for o in reply.outcomes] == ["crash", "crash"]
        assert reply.outcomes[1].message == "device context lost"


def test_kernel_candidates_are_timed_through_the_launcher():
    """A kernel candidate runs timed the way a compiled model runs it: through the backend's launcher, bound once to
    its buffers (the cpu backend's keeps the OpenMP workers off the caller's CPU there)."""
    from luminal.search.jobs import JobRunner, KernelJob

    bound = []

    class Counting(helpers.FakeBackend):
        def launcher(self, compiled, buffers):
            bound.append(len(compiled))
            return super().launcher(compiled, buffers)

    kernel = partition(helpers.small_graph())[0]
    reply = JobRunner(Counting(), None).handle(KernelJob(kernel, [{"speed": 1}, {"speed": 2}], 0, PLAN))
    assert [o.status for o in reply.outcomes] == ["ok", "ok"]
    assert bound == [1, 1] and all(len(o.samples_ns) >= PLAN.min_reps for o in reply.outcomes)


def test_every_candidate_is_timed_on_one_set_of_buffers_placed_as_its_model_places_them():
    """Where a kernel's buffers lie against each other moves a memory-bound kernel's time by a fifth, so every
    candidate runs on the same buffers, each at its offset into a page as the job's placement says (None: anywhere);
    the outputs are reset before each candidate, so one that writes nothing fails after one that wrote them."""
    from luminal.codegen.c.backend import aligned_empty
    from luminal.search.jobs import JobRunner, KernelJob
    from luminal.target import PAGE_BYTES as PAGE

    bound = []

    class Placing(helpers.FakeBackend):
        def empty_at(self, shape, dtype, offset):
            return aligned_empty(shape, dtype, PAGE, offset)

        def compile(self, items):
            idle = lambda buffers: None
            return [idle if s.get("mode") == "idle" else ck for (_, s), ck in zip(items, super().compile(items))]

        def launcher(self, compiled, buffers):
            bound.append(buffers[0])
            return super().launcher(compiled, buffers)

    kernel = partition(helpers.small_graph())[0]
    n = len(kernel.inputs) + len(kernel.outputs)
    placement = tuple(None if i == 0 else PAGE * 3 + 576 * i for i in range(n))
    job = KernelJob(kernel, [{"speed": 1}, {"speed": 2}, {"speed": 1, "mode": "idle"}], 0, PLAN, placement)
    reply = JobRunner(Placing(), None).handle(job)
    assert [o.status for o in reply.outcomes] == ["ok", "ok", "wrong_result"]
    assert len(bound) == 2 and all(a is b for a, b in zip(*bound))
    assert [b.ctypes.data % PAGE for b in bound[0][1:]] == [p % PAGE for p in placement[1:]]


def test_interpret_is_never_timed():
    from luminal.errors import LuminalError

    class Interp(helpers.FakeBackend):
        name = "interpret"

    with pytest.raises(LuminalError, match="never timed"):
        Measurer(Interp())


def test_beats_needs_margin_and_consistency():
    base = [1000, 1010, 990, 1005, 995, 1000, 1002, 998] * 2
    assert not beats([b * 0.99 for b in base], base)  # 1% is inside the 2% margin
    assert beats([b * 0.9 for b in base], base)
    noisy = [b * (0.7 if k % 2 else 1.3) for k, b in enumerate(base * 2)]
    assert not beats(noisy, base * 2)  # faster on median but loses half the rounds
    s = SampleStats.of(base)
    assert s.p10_ns <= s.median_ns <= s.p90_ns and s.n == len(base)


def test_mismatch_tolerances():
    e = np.linspace(-1, 1, 50, dtype=np.float32)
    assert mismatch(e + 1e-7, e, DType.float32) is None
    assert mismatch(e + 1e-2, e, DType.float32) is not None
    assert mismatch(e.astype(np.float16) + np.float16(1e-3), e.astype(np.float16), DType.float16) is None
    assert mismatch(np.array([1, 2]), np.array([1, 3]), DType.int64) == "1 of 2 values differ"
    assert mismatch(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), DType.float32) is not None


def test_measuring_after_this_process_ran_openmp_kernels():
    """An OpenMP team started in the tuning process does not survive a fork: workers must not inherit it."""
    from luminal.codegen.backend import get_backend
    from luminal.ir import Graph, Tensor
    from luminal.runtime.compile import compile_graph

    a = Tensor.input("a", (128, 128), DType.float32)
    b = Tensor.input("b", (128, 128), DType.float32)
    g = Graph([a.node, b.node], [a.matmul(b).relu().contiguous().node], ["y"])
    cpu = get_backend("cpu")
    x = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    compile_graph(g, cpu).run({"a": x, "b": x})  # runs a parallel region here, in the parent
    m = Measurer(cpu, workers=0, plan=PLAN, timeout_s=10)
    try:
        (kernel,) = partition(g)
        (r,) = m.measure(kernel, [cpu.default_schedule(kernel)])
    finally:
        m.close()
    assert r.ok, (r.status, r.message)


def test_cpu_timer_evicts_the_last_level_cache():
    from luminal.codegen.backend import get_backend
    from luminal.search.timing import CpuTimer, _size, interleaved, last_level_cache_bytes

    assert _size("32768K\n") == 32 << 20 and _size("1M") == 1 << 20 and _size("512") == 512
    timer = CpuTimer(get_backend("cpu"))
    timer.flush()
    assert timer._evict.nbytes >= 2 * last_level_cache_bytes() >= 2 << 20
    calls = []
    timer.flush = lambda: calls.append("flush")
    samples = interleaved(timer, [lambda: calls.append("run")], TimingPlan(warmup_s=0, cap_s=0, min_reps=3),
                          lambda: None)
    assert len(samples[0]) == 3 and calls[-6:] == ["flush", "run"] * 3
    calls.clear()
    interleaved(timer, [lambda: calls.append("run")], TimingPlan(warmup_s=0, cap_s=0, min_reps=3, flush=False),
                lambda: None)
    assert "flush" not in calls


def test_the_flush_reads_on_every_thread_the_kernels_run_on():
    """The CPU backend reads the flush buffer with its kernels' thread team (each core's caches flushed, every
    thread awake and busy when the timed kernel starts); a backend without a team is read by numpy."""
    from luminal.codegen.c.backend import CPUBackend
    from luminal.search.timing import CpuTimer
    from luminal.target import detect_target

    rng = np.random.default_rng(5)
    for threads in (1, 2, 3):
        be = CPUBackend(replace(detect_target("cpu"), threads=threads))
        for n in (0, 1, 7, 100_003):
            x = rng.standard_normal(n)
            assert be.read_through(x) == pytest.approx(x.sum(), abs=1e-9 * max(n, 1))

    class Team:
        name = "cpu"

        def __init__(self):
            self.read = []

        def read_through(self, buffer):
            self.read.append(buffer)
            return 0.0

    team = Team()
    timer = CpuTimer(team)
    timer.flush()
    timer.flush()
    assert len(team.read) == 2 and team.read[0] is timer._evict
