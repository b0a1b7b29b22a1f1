"""Tuning across processes on one real PostgreSQL server (tests/postgres_util.py starts a throwaway one): no point
timed twice, every cache ends with the pool's best, a killed tuner's trial is failed after the grace period and
asked again, a restarted server is waited for, one that stays away stops a tuner with one line, and a late
joiner pulls every winner. The candidates sleep (search_util.SleepBackend), so the two cores here are not the
limit; nothing asserts on wall-clock time."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import optuna
import postgres_util
import pytest
import search_util as helpers
from cli_util import invoke
from optuna.trial import TrialState

from luminal.cache import TuningCache, backend_fingerprints
from luminal.cli import cache_cmd
from luminal.search.tasks import DEFAULT_ATTR

TESTS = Path(__file__).resolve().parent
optuna.logging.set_verbosity(optuna.logging.ERROR)


@pytest.fixture(scope="session")
def postgres():
    bindir = postgres_util.bin_dir()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        bindir = None
    if bindir is None:
        why = "PostgreSQL (initdb, pg_ctl) or psycopg is not installed (.ci/run installs them)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    server = postgres_util.PostgresServer(bindir).start()
    yield server
    server.close()


@pytest.fixture
def pg_url(postgres, request):
    return postgres.create_database(re.sub(r"\W", "_", request.node.name)[:60])


SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import typer
import search_util as h
from luminal.cli.common import handle_errors
from luminal.search.studies import Liveness
from luminal.search.tuner import tune

app = typer.Typer(add_completion=False)


@app.command()
@handle_errors
def main() -> None:
    r = tune(h.small_graph(), h.SleepBackend(compile_s={compile_s}, pads={pads}), {budget}, sampler="gp",
             seed={seed}, cache={cache!r}, storage={url!r}, timeout_s=20, plan=h.PLAN, workers=0, fusion=False,
             liveness=Liveness(heartbeat_s=1, grace_s={grace}, reconnect_s={reconnect}))
    print(json.dumps(r.to_json()))


app()
"""


def _start(tmp_path: Path, name: str, url: str, budget: float, *, compile_s: float = 0.3, pads=(0, 1, 2),
           grace: int = 3, reconnect: float = 60, seed: int = 0) -> subprocess.Popen:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(SCRIPT.format(tests=str(TESTS), compile_s=compile_s, pads=tuple(pads),
                                                    budget=budget, seed=seed, cache=str(tmp_path / f"{name}.db"),
                                                    url=url, grace=grace, reconnect=reconnect)))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, code: int = 0) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err[-3000:]
    return out, err


def _studies(url: str) -> list[optuna.Study]:
    names = [s.study_name for s in optuna.get_all_study_summaries(url) if s.study_name.startswith("luminal-kernel-")]
    return [optuna.load_study(study_name=n, storage=url) for n in names]


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return [t for s in _studies(url) for t in s.get_trials()]


def _measured(trials):
    """Trials whose point this study timed (not answered from another trial, not skipped at the deadline)."""
    return [t for t in trials if t.user_attrs.get("status") not in (None, "skipped")]


def _wait(what, limit_s: float = 60.0):
    t_end = time.monotonic() + limit_s
    while time.monotonic() < t_end:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("waited in vain")


def _fake_keys():
    return backend_fingerprints(helpers.SleepBackend())


def test_three_tuners_time_no_point_twice_and_each_cache_holds_the_best_of_all_then_a_late_joiner_pulls_it(
        tmp_path, pg_url, monkeypatch):
    # a budget a loaded machine needs; they stop once the 24 points are measured
    procs = [_start(tmp_path, f"t{i}", pg_url, 30, seed=i) for i in range(3)]
    reports = [json.loads(_finish(p)[0].strip().splitlines()[-1]) for p in procs]
    (study,) = _studies(pg_url)
    trials = study.get_trials()
    measured = _measured(trials)
    # every point of the space timed, each once, by whichever process drew it first (the default, which each
    # process times as its baseline, is told to the study from that measurement)
    assert Counter(json.dumps(t.params, sort_keys=True) for t in measured).most_common(1)[0][1] == 1
    assert len({json.dumps(t.params, sort_keys=True) for t in trials if t.state is TrialState.COMPLETE}) == 24
    assert all(r["trials"] >= 2 for r in reports)  # all three did part of it
    assert not [t for t in trials if t.state is TrialState.RUNNING]
    best = min((t for t in measured if t.state is TrialState.COMPLETE), key=lambda t: t.value)
    assert best.user_attrs["config"]["speed"] == 1
    sig = study.study_name.split("-")[2]
    device, toolchain = _fake_keys()
    for i in range(3):
        w = TuningCache(tmp_path / f"t{i}.db").best(sig, device, toolchain)
        assert w is not None and w.config["speed"] == 1, (i, w)

    # a machine that joins late: `luminal cache pull` writes the pool's best into its own cache
    from luminal.codegen import backend as backend_mod

    monkeypatch.setitem(backend_mod._BACKENDS, "fake", lambda target: helpers.SleepBackend())
    late = tmp_path / "late.db"
    r = invoke(cache_cmd, args=["cache", "pull", "--storage", pg_url, "--backend", "fake", "--cache", str(late),
                                "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["written"] == 1
    w = TuningCache(late).best(sig, device, toolchain)
    assert w is not None and w.config == best.user_attrs["config"] and w.median_ns == int(best.value)
    assert w.default_ns is not None  # the default's time came along


def _held(url: str) -> list[tuple[int, int]]:
    """(trial id, number) of running trials with a heartbeat whose point is drawn whole (its last knob, pad, set):
    a process killed between two knobs leaves a partial point, whose retry draws the missing knob anew."""
    import psycopg

    params = dict(re.findall(r"(\w+)=([^&]+)", url.split("?", 1)[1]))
    with psycopg.connect(host=params["host"], port=int(params["port"]), user="postgres",
                         dbname=url.split("/")[3].split("?")[0]) as conn:
        try:
            return conn.execute("SELECT t.trial_id, t.number FROM trials t JOIN trial_heartbeats h USING (trial_id)"
                                " WHERE t.state = 'RUNNING' AND EXISTS (SELECT 1 FROM trial_params p"
                                " WHERE p.trial_id = t.trial_id AND p.param_name = 'pad')").fetchall()
        except psycopg.errors.UndefinedTable:  # the storage is not made yet
            return []


def test_a_tuner_killed_mid_trial_has_it_failed_by_another_after_the_grace_period_and_the_point_asked_again(
        tmp_path, pg_url):
    # its candidates take 2 s to build: killed (with its workers, as a machine dies) while it times one; the
    # trials it holds are read again once it is dead (one may complete between the first look and the kill, on a
    # loaded machine), and it is started again where none is left running
    held: list[tuple[int, int]] = []
    for _ in range(3):
        doomed = _start(tmp_path, "doomed", pg_url, 60, compile_s=2.0, pads=range(6))
        try:
            _wait(lambda: _held(pg_url))
        finally:
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait()
        if held := _held(pg_url):
            break
    ((tid, number),) = held
    survivor = _start(tmp_path, "survivor", pg_url, 15, pads=range(6))
    _finish(survivor)
    (study,) = _studies(pg_url)
    trials = study.get_trials()
    dead = next(t for t in trials if t._trial_id == tid)
    assert dead.state is TrialState.FAIL  # failed by the survivor once its heartbeat was stale
    (again,) = [t for t in trials if t.system_attrs.get("failed_trial") == number]
    assert again.params == dead.params and again.state is TrialState.COMPLETE
    # the point was asked again and timed: by the retried trial, by the survivor's own trial where it drew the same
    # point first, or, where the point is the default one, by the survivor's measurement of the default outside the
    # study (kept as the study's attribute); the retried trial took that time
    measured = {t.value for t in trials if t.user_attrs.get("status") == "ok"} | {study.user_attrs.get(DEFAULT_ATTR)}
    assert again.value in measured
    assert not [t for t in trials if t.state is TrialState.RUNNING]
    assert Counter(json.dumps(t.params, sort_keys=True) for t in _measured(trials)).most_common(1)[0][1] == 1


def _completed(url: str) -> set[int]:
    return {t._trial_id for t in _trials(url) if t.state is TrialState.COMPLETE}


def test_tuners_wait_for_a_restarted_server_and_go_on(tmp_path, pg_url, postgres):
    procs = [_start(tmp_path, f"r{i}", pg_url, 20, pads=range(8), seed=i) for i in range(2)]
    try:
        before = _wait(lambda: (done := _completed(pg_url)) and len(done) >= 2 and done)
        postgres.stop()
        time.sleep(2)
    finally:
        postgres.start()
    reports = [json.loads(_finish(p)[0].strip().splitlines()[-1]) for p in procs]
    after = _completed(pg_url)
    assert before <= after  # no finished trial lost
    assert max(after) > max(before) and len(after) > len(before)  # and trials went on after the restart
    assert all(r["stopped"] in ("budget", "exhausted") for r in reports)


def test_a_server_that_stays_away_stops_the_tuner_with_one_line_its_winners_in_the_cache(tmp_path, pg_url, postgres):
    proc = _start(tmp_path, "alone", pg_url, 60, pads=range(6), reconnect=3)
    try:
        before = _wait(lambda: (done := _completed(pg_url)) and len(done) >= 3 and done)
        postgres.stop()
        _, err = _finish(proc, code=2)
    finally:
        postgres.start()
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: lost the study storage"), err
    assert "postgres@" in err and "password" not in err
    assert before <= _completed(pg_url)  # every finished trial is still there
    (study,) = _studies(pg_url)
    device, toolchain = _fake_keys()
    w = TuningCache(tmp_path / "alone.db").best(study.study_name.split("-")[2], device, toolchain)
    assert w is not None and w.median_ns > 0  # the winner it had found
