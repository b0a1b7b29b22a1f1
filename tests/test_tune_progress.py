"""``luminal tune`` as a log sees it (output not a terminal): plain progress lines, --trials, --patience, the notes
on timeouts, and Ctrl-C saving what was found then exiting 130. The tuning runs on the numpy fake backend."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import search_util as helpers
from cli_util import invoke
from runtime_util import matmul_relu_softmax

from luminal.cache import TuningCache
from luminal.cli import tune_cmd
from luminal.search import tuner
from luminal.search.report import KernelReport, TuneReport
from luminal.search.scheduler import TaskState, pick


def _model(path: Path) -> Path:
    return matmul_relu_softmax(path, names=("layer1/matmul", "layer1/relu", "head/softmax"))


@pytest.fixture
def fake_tune(monkeypatch):
    """``luminal tune`` on the fake backend (the command refuses any but auto, cpu and cuda); ``calls`` holds each
    call's keyword arguments, and ``on_progress`` runs at every progress report."""
    real = tuner.tune
    state: dict = {"calls": [], "on_progress": None}

    def fake(model, backend, budget_s, **kw):
        state["calls"].append(kw)
        shown = kw.pop("progress")

        def progress(report):
            if state["on_progress"] is not None:
                state["on_progress"](report)
            shown(report)

        kw.setdefault("plan", helpers.PLAN)
        return real(model, helpers.FakeBackend(modes=("ok",), virtual=True), budget_s, progress=progress, **kw)

    monkeypatch.setattr(tuner, "tune", fake)
    return state


def _tune(tmp_path, *args):
    model = _model(tmp_path / "m.onnx")
    return invoke(tune_cmd, args=["tune", str(model), "--cache", str(tmp_path / "t.db"), "--storage",
                                  f"sqlite:///{tmp_path / 's.db'}", "--sampler", "random", "--workers", "1",
                                  "--no-fusion", *args])


def test_a_log_gets_plain_progress_lines_and_trials_stops_the_run(tmp_path, fake_tune):
    r = _tune(tmp_path, "--budget", "10m", "--trials", "6")
    assert r.exit_code == 0, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("tuning m.onnx: ")]
    assert lines, r.output
    assert "\x1b[" not in r.output and "┏" not in r.output.split("end-to-end")[0]  # no live table in a log
    last = lines[-1]
    assert " of 600 s (the last " in last and "kept for the final timing)" in last
    assert "trials, best " in last and "x (estimated)" in last
    assert "layer1/matmul" in r.output or "head/softmax" in r.output  # a kernel named after its model nodes
    assert fake_tune["calls"][0]["trials"] == 6
    assert "trials" in r.output.split("end-to-end")[1]  # the reason it stopped


def test_json_report_counts_trials_and_names_kernels(tmp_path, fake_tune):
    out = tmp_path / "r.json"
    r = _tune(tmp_path, "--budget", "10m", "--trials", "5", "--json", str(out))
    assert r.exit_code == 0, r.output
    (rep,) = json.loads(out.read_text())["models"]
    assert rep["stopped"] == "trials" and 5 <= rep["trials"] < 5 + 4  # a step may finish its batch
    assert rep["budget_s"] == 600 and 0 < rep["reserve_s"] < 600
    names = {n[0] for k in rep["kernels"] for n in k["nodes"]}
    assert names <= {"layer1/matmul", "layer1/relu", "head/softmax"} and names
    # the cache keeps which model nodes a kernel came from: cache show prints them
    k = rep["kernels"][0]
    rec = TuningCache(tmp_path / "t.db").kernel(k["signature"])
    assert rec is not None and rec.shapes["nodes"] == k["nodes"]


def test_patience_leaves_a_kernel_after_trials_without_a_gain():
    a, b = TaskState("a", 1.0), TaskState("b", 1.0)
    a.record(10.0, 1.0, 1)
    a.record(10.0, 1.0, 3)  # three trials without a gain
    b.record(10.0, 1.0, 1)
    b.record(5.0, 1.0, 1)
    assert a.stale == 3 and b.stale == 0
    assert pick([a, b], patience=3) is b
    assert pick([a], patience=3) is None and pick([a], patience=4) is a


def test_patience_on_the_command_line(tmp_path, fake_tune):
    r = _tune(tmp_path, "--budget", "10m", "--patience", "2", "--json", "-")
    assert r.exit_code == 0, r.output
    (rep,) = json.loads(r.output)["models"]
    assert rep["stopped"] in ("patience", "exhausted")
    assert fake_tune["calls"][0]["patience"] == 2


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers: must be at least 1, got 0"),
    (["--trials", "0"], "--trials: must be at least 1, got 0"),
    (["--patience", "-3"], "--patience: must be at least 1, got -3"),
    (["--timeout", "0"], "--timeout: must be a positive duration"),
])
def test_bad_counts_are_refused_in_one_line(tmp_path, fake_tune, args, message):
    r = _tune(tmp_path, "--budget", "1m", *args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert not fake_tune["calls"]


def test_ctrl_c_saves_what_was_found_and_exits_130(tmp_path, fake_tune):
    fake_tune["on_progress"] = lambda report: os.kill(os.getpid(), signal.SIGINT)
    r = _tune(tmp_path, "--budget", "10m")
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.output
    assert TuningCache(tmp_path / "t.db").kernels()  # what it had seen is in the cache


def test_timeouts_are_said():
    rep = TuneReport("m.onnx", "cpu", "d", "t", "gp", 0, 60.0, "s", "c", timeout_s=3.0,
                     kernels=[KernelReport("abc", "contraction", 1, trials=4, statuses={"ok": 2, "timeout": 2})])
    assert any("2 candidates timed out (each may take 3 s; --timeout sets it)" in n for n in tune_cmd.notes_of(rep))
    assert "2" in next(c for c in tune_cmd.progress_table(rep).columns if c.header == "timeouts")._cells


def test_help_shows_bracketed_text():
    r = invoke(tune_cmd, args=["tune", "--help"])
    assert "[tool.luminal]" in r.output


def test_no_compile_or_timing_waits_past_the_budgets_end(monkeypatch):
    """The measurer gives every wait at most the time left to the end it was given (a slow compile or a hung
    candidate spent the budget unseen): the waits it asks for are read, not timed."""
    import time

    from luminal.codegen.partition import partition
    from luminal.search.measure import Measurer

    end = time.monotonic() + 1.0
    m = Measurer(helpers.FakeBackend(modes=("ok", "hang")), helpers.small_graph(), workers=2, plan=helpers.PLAN,
                 timeout_s=60.0, end=end)
    waits: list[float] = []
    real = m.timer.call

    def call(job, timeout_s, stop=None):
        waits.append(timeout_s)
        return real(job, timeout_s, stop)

    monkeypatch.setattr(m.timer, "call", call)
    try:
        kernel = partition(helpers.small_graph())[0]
        (r,) = m.compare(kernel, [{"speed": 1, "mode": "hang"}])
        assert r.status == "timeout"
        assert waits and max(waits) <= 1.0  # not the 60 s a candidate may take on its own
        assert m._capped(end + 100) == end and m._capped(end - 5) == end - 5  # compile deadlines too
    finally:
        m.close()
