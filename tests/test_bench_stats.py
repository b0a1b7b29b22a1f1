"""Bench statistics: summaries, bootstrap intervals, interleaved rounds, and the regression gate."""

from __future__ import annotations

import time

import numpy as np
import pytest

from luminal.cli.bench_gate import gate, gate_model
from luminal.cli.bench_stats import bootstrap_ratio, measure_interleaved, summarize


def test_summarize():
    s = summarize([0.001 * k for k in range(1, 101)])
    assert s.runs == 100
    assert s.median_s == pytest.approx(0.0505)
    assert s.p10_s == pytest.approx(0.0109)
    assert s.p90_s == pytest.approx(0.0901)
    assert s.min_s == pytest.approx(0.001)
    assert s.throughput_per_s == pytest.approx(1 / 0.0505)


def test_bootstrap_interval_covers_known_ratio_and_is_seeded():
    rng = np.random.default_rng(1)
    a = 2.0 * rng.lognormal(0, 0.05, 400)
    b = rng.lognormal(0, 0.05, 400)
    ci = bootstrap_ratio(a, b, seed=3)
    assert ci.low < 2.0 < ci.high
    assert ci.low < ci.estimate < ci.high
    assert ci.high - ci.low < 0.05
    assert bootstrap_ratio(a, b, seed=3) == ci
    wide = bootstrap_ratio(a[:20], b[:20], seed=3)
    assert wide.high - wide.low > ci.high - ci.low


def test_paired_bootstrap_cancels_shared_drift():
    # both runtimes slow down together over the rounds; pairing keeps the ratio tight
    drift = np.linspace(1.0, 3.0, 200)
    rng = np.random.default_rng(0)
    a = 1.5 * drift * rng.lognormal(0, 0.01, 200)
    b = drift * rng.lognormal(0, 0.01, 200)
    paired = bootstrap_ratio(a, b, paired=True)
    unpaired = bootstrap_ratio(a, b, paired=False)
    assert paired.low < 1.5 < paired.high
    assert paired.high - paired.low < (unpaired.high - unpaired.low) / 3


def test_paired_ratio_is_the_rounds_median_across_a_change_of_the_hosts_phase():
    """The host went from a fast phase to one 1.5x slower within a round: the numerator's median comes from the
    fast rounds, the denominator's from the slow ones, while every round's own ratio is 1.03 but that one."""
    rng = np.random.default_rng(2)
    a = np.array([1.0] * 8 + [1.5] * 7) * 1.03 * rng.lognormal(0, 0.002, 15)
    b = np.array([1.0] * 7 + [1.5] * 8) * rng.lognormal(0, 0.002, 15)
    assert np.median(a) / np.median(b) < 0.7
    paired = bootstrap_ratio(a, b, paired=True)
    assert paired.estimate == pytest.approx(1.03, rel=0.01)
    assert paired.low < 1.03 < paired.high


class _FakeClock:
    """A nanosecond clock that each fake runner advances by its own latency."""

    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def runner(self, latency_s: float, calls: list[str], name: str):
        def run():
            calls.append(name)
            self.now += int(latency_s * 1e9)
        return run


def test_interleaved_rounds_warmup_and_order():
    clock, calls = _FakeClock(), []
    runners = {"a": clock.runner(0.002, calls, "a"), "b": clock.runner(0.001, calls, "b")}
    samples = measure_interleaved(runners, warmup_s=0.01, runs=50, seed=0, clock=clock)
    assert samples == {"a": [0.002] * 50, "b": [0.001] * 50}
    warm = len(calls) - 100
    assert warm == 8  # whole rounds of 3 ms until 10 ms have passed: 4 rounds
    rounds = [tuple(calls[i:i + 2]) for i in range(warm, len(calls), 2)]
    assert all(sorted(r) == ["a", "b"] for r in rounds)  # every round runs each once
    assert {r[0] for r in rounds} == {"a", "b"}  # in varying order


def test_time_budget_and_min_runs():
    clock, calls = _FakeClock(), []
    samples = measure_interleaved({"a": clock.runner(0.1, calls, "a")}, warmup_s=0, time_s=1.0, clock=clock)
    assert len(samples["a"]) == 10
    samples = measure_interleaved({"a": clock.runner(1.0, calls, "a")}, warmup_s=0, time_s=0.5, min_runs=5,
                                  clock=clock)
    assert len(samples["a"]) == 5


def _doc(name: str, samples) -> dict:
    return {"models": [{"name": name, "runtimes": {"luminal": {"samples_s": list(map(float, samples))}}}]}


def test_gate_on_synthetic_distributions():
    rng = np.random.default_rng(7)
    base = 0.010 * rng.lognormal(0, 0.03, 200)
    same = 0.010 * rng.lognormal(0, 0.03, 200)
    slower = 0.0112 * rng.lognormal(0, 0.03, 200)  # 12 % slower
    barely = 0.0104 * rng.lognormal(0, 0.03, 200)  # 4 % slower: within 5 %
    assert not gate(_doc("m", base), _doc("m", base), 0.05)[0].failed
    assert not gate(_doc("m", same), _doc("m", base), 0.05)[0].failed
    assert not gate(_doc("m", barely), _doc("m", base), 0.05)[0].failed
    res = gate(_doc("m", slower), _doc("m", base), 0.05)[0]
    assert res.failed and res.ratio == pytest.approx(1.12, abs=0.02)
    assert res.message.startswith("m: +1") and "slower than the baseline" in res.message and "5%" in res.message
    # a 7 % slowdown measured on 6 noisy samples is not beyond the noise
    noisy_base = 0.010 * rng.lognormal(0, 0.3, 6)
    noisy_new = 1.07 * noisy_base[::-1]
    assert not gate_model("m", list(noisy_new), list(noisy_base), 0.05).failed


def test_gate_model_missing_from_baseline_is_not_gated():
    res = gate(_doc("new", [0.01] * 5), _doc("old", [0.01] * 5), 0.05)
    assert len(res) == 1 and not res[0].failed and res[0].ratio is None and "not in the baseline" in res[0].message


def test_gate_catches_a_runner_slowed_on_purpose():
    """Real timings: a fake runtime made 8 ms slower by a sleep fails the gate; the same runtime passes."""
    def fast():
        time.sleep(0.002)

    def slow():
        time.sleep(0.010)

    samples = measure_interleaved({"base": fast, "again": fast, "slow": slow}, warmup_s=0, runs=30)
    base = _doc("m", samples["base"])
    assert gate(_doc("m", samples["slow"]), base, 0.05)[0].failed
    # the same code measured again passes with a generous tolerance for this shared, noisy machine
    assert not gate(_doc("m", samples["again"]), base, 0.5)[0].failed
