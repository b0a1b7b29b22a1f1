"""The CPU benchmarks tag each interleaved round with where the host put the process's two CPUs (one die or two)
and give the speedup per placement beside the overall one (benchmarks/benchutil.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import benchutil


def test_rounds_split_by_placement_take_each_placement_s_median_ratio():
    tags = ["one die", "two dies", "one die", None, "one die", "two dies"]
    ours = [1.0, 2.0, 1.0, 5.0, 1.0, 2.0]
    theirs = [1.1, 1.6, 1.3, 1.0, 1.2, 1.8]
    split = benchutil.by_placement(tags, ours, theirs)
    assert split == {"one die": {"rounds": 3, "speedup": pytest.approx(1.2)},
                     "two dies": {"rounds": 2, "speedup": pytest.approx(0.85)}}
    assert "two dies: 2 rounds 0.85x" in benchutil.placement_note(split)
    assert benchutil.placement_note({"one die": split["one die"]}) == ""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no placement to probe")
def test_the_probe_names_a_placement_for_every_round():
    probe = benchutil.placement_probe()
    assert probe is not None  # two CPUs and the C compiler the cpu backend builds with
    calls = []
    times, tags = benchutil.timed_rounds([lambda: calls.append(1)], 3, 2, probe)
    assert len(calls) == 6 and len(times[0]) == 3 and all(t >= 0 for t in times[0])
    assert len(tags) == 3 and set(tags) <= {"one die", "two dies", None}
