"""A numpy backend for the search tests: one knob changes speed, others crash, hang, answer wrong
or fail to compile. Shared by the test_search files."""

from __future__ import annotations

import os
import time

import numpy as np

from luminal.codegen.backend import Knob, sequential_launcher
from luminal.codegen.kernel_eval import run_kernel
from luminal.ir.dtypes import DType
from luminal.ir.graph import Graph
from luminal.ir.tensor import Tensor
from luminal.search.timing import TimingPlan

UNIT_S = 100e-6

# virtual time, per process: a virtual fake kernel's run adds ``speed`` units to it instead of spinning, and the
# virtual timer reads it, so what the search measures does not depend on how busy the machine is
CLOCK_NS = [0]


class VirtualTimer:
    def flush(self):
        pass

    def __call__(self, fn):
        t0 = CLOCK_NS[0]
        fn()
        return CLOCK_NS[0] - t0


class FakeKernel:
    def __init__(self, kernel, schedule, virtual=False):
        self.kernel = kernel
        self.schedule = schedule
        self.virtual = virtual

    def __call__(self, buffers):
        k, s = self.kernel, self.schedule
        n_in = len(k.inputs)
        mode = s.get("mode", "ok")
        if mode == "crash":
            os.abort()
        if mode == "hang":
            time.sleep(3600)
        outs = run_kernel(k, [np.asarray(b) for b in buffers[:n_in]])
        for dst, val in zip(buffers[n_in:], outs):
            dst[...] = val + (1 if mode == "wrong" else 0)
        if self.virtual:
            CLOCK_NS[0] += round(s.get("speed", 1) * UNIT_S * 1e9)
            return
        t_end = time.perf_counter() + s.get("speed", 1) * UNIT_S
        while time.perf_counter() < t_end:
            pass


# short timings; no cache flush, since the fake kernels touch no memory
PLAN = TimingPlan(warmup_s=0.005, cap_s=0.02, min_reps=5, flush=False)


class FakeBackend:
    name = "fake"

    def __init__(self, modes=("ok", "crash", "hang", "wrong", "bad"), speeds=(1, 2, 3, 4, 5, 6, 7, 8), virtual=False):
        """``virtual``: kernels take ``speed`` units of virtual time, which is what the search measures."""
        self.modes = tuple(modes)
        self.speeds = tuple(speeds)
        self.virtual = virtual
        if virtual:
            self.make_timer = VirtualTimer  # what search.timing.make_timer takes instead of the wall clock

    def available(self):
        return None

    def threads(self):
        return 1

    def space(self, kernel):
        return [Knob("speed", self.speeds), Knob("mode", self.modes)]

    def default_schedule(self, kernel):
        return {"speed": max(self.speeds), "mode": "ok"}

    def valid(self, kernel, schedule):
        return not (schedule["speed"] == 2 and schedule["mode"] == "wrong")

    def source(self, kernel, schedule):
        return repr(schedule)

    def compile(self, items):
        out = []
        for k, s in items:
            if s.get("mode") == "bad":
                raise RuntimeError("does not compile")
            out.append(FakeKernel(k, s, self.virtual))
        return out

    def from_numpy(self, a):
        return np.array(a, copy=True)

    def write(self, b, a):
        b[...] = a

    def to_numpy(self, b):
        return np.array(b, copy=True)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def empty_at(self, shape, dtype, offset):
        return np.empty(shape, dtype)

    def synchronize(self):
        pass

    def fork_safe(self):
        return True

    def launcher(self, compiled, buffers):
        return sequential_launcher(compiled, buffers)

    def toolchain(self):
        return {"fake": 1}


def small_graph() -> Graph:
    """x -> exp -> *y -> sum over the last axis, plus a softmax-like second output."""
    x = Tensor.input("x", (4, 8), DType.float32)
    y = Tensor.input("y", (4, 8), DType.float32)
    s = x.exp().mul(y).sum(axes=(1,), keepdim=True)
    t = x.mul(s.recip()).add(y).contiguous()
    return Graph([x.node, y.node], [s.node, t.node], ["s", "t"])


class SleepKernel:
    """Right outputs, then ``speed`` units of sleep: a fixed time that leaves the CPU to others."""

    def __init__(self, kernel, schedule, unit_s):
        self.kernel, self.schedule, self.unit_s = kernel, schedule, unit_s

    def __call__(self, buffers):
        n_in = len(self.kernel.inputs)
        for dst, val in zip(buffers[n_in:], run_kernel(self.kernel, [np.asarray(b) for b in buffers[:n_in]])):
            dst[...] = val
        time.sleep(self.schedule["speed"] * self.unit_s)


class SleepBackend(FakeBackend):
    """Every candidate takes a fixed ``compile_s`` to build (a sleep) and runs ``speed`` x ``unit_s``: many
    tuning processes share two cores without the cores being what limits them. ``pad`` changes nothing; it only
    makes the space big enough for several processes to search at once."""

    def __init__(self, compile_s=0.3, unit_s=0.002, speeds=(1, 2, 3, 4, 5, 6, 7, 8), pads=(0, 1, 2)):
        super().__init__(modes=("ok",), speeds=speeds)
        self.compile_s, self.unit_s, self.pads = compile_s, unit_s, tuple(pads)

    def space(self, kernel):
        return [Knob("speed", self.speeds), Knob("pad", self.pads)]

    def default_schedule(self, kernel):
        return {"speed": max(self.speeds), "pad": self.pads[0]}

    def valid(self, kernel, schedule):
        return True

    def compile(self, items):
        time.sleep(self.compile_s * len(items))
        return [SleepKernel(k, s, self.unit_s) for k, s in items]
