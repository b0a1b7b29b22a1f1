"""The tuning loop on a numpy backend whose knobs change speed, crash, hang, answer wrong or fail to build."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
import search_util as helpers
from optuna.trial import TrialState

from luminal.cache import TuningCache
from luminal.codegen.backend import Knob
from luminal.codegen.partition import partition
from luminal.errors import LuminalError
from luminal.ir.dtypes import DType
from luminal.ir.graph import Graph
from luminal.ir.tensor import Tensor
from luminal.search.samplers import make_sampler
from luminal.search.scheduler import TaskState, pick, step_seconds
from luminal.search.space import ScheduleSpace
from luminal.search.studies import Liveness
from luminal.search.tuner import Tuner, tune

PLAN = helpers.PLAN


def _tune(tmp_path, backend, budget, **kw):
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("plan", PLAN)
    return tune(helpers.small_graph(), backend, budget, cache=tmp_path / "tuning.db",
                storage=f"sqlite:///{tmp_path / 'studies.db'}", **kw)


def _sig():
    return partition(helpers.small_graph())[0].signature


def test_bad_candidates_are_recorded_and_the_winner_is_correct(tmp_path):
    # virtual time: speed 1 is 8x faster than speed 8 however busy the machine is; the grid ends the search, long
    # before the budget, and a candidate gets 5 s before it counts as hung
    backend = helpers.FakeBackend(modes=("ok", "crash", "hang", "wrong", "bad"), speeds=(1, 8), virtual=True)
    report = _tune(tmp_path, backend, 300, sampler="grid", workers=2, fusion=False, timeout_s=5.0)
    cache = TuningCache(tmp_path / "tuning.db")
    trials = cache.trials(_sig(), report.device, report.toolchain)
    seen = {t.status for t in trials}
    assert {"ok", "crash", "timeout", "wrong_result", "compile_error"} <= seen, seen
    for t in trials:
        if t.status != "ok":
            assert t.median_ns is None
    best = cache.best(_sig(), report.device, report.toolchain)
    assert best is not None and best.config == {"speed": 1, "mode": "ok"}
    k = next(k for k in report.kernels if k.signature == _sig())
    assert k.best_config == {"speed": 1, "mode": "ok"} and k.speedup == pytest.approx(8)
    assert report.stopped == "exhausted" and report.e2e_tuned_ns < report.e2e_default_ns


def test_budget_is_kept(tmp_path):
    # no candidate hangs, so the generous timeout only matters on a busy machine, where it keeps good ones ok
    budget, timeout = 10.0, 5.0
    t0 = time.monotonic()
    report = _tune(tmp_path, helpers.FakeBackend(modes=("ok", "crash", "wrong", "bad"), virtual=True), budget,
                   sampler="random", timeout_s=timeout)
    elapsed = time.monotonic() - t0
    # 5% of the budget, plus one candidate's timeout (its own limit, the reference's allowance, the timing cap)
    assert elapsed <= budget * 1.05 + timeout + 1.2, elapsed
    assert report.stopped in ("budget", "exhausted")
    assert report.trials > 5
    assert all(k.best_ns for k in report.kernels)  # a best-so-far for every kernel


def _script(tmp_path, budget):
    code = f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import search_util as h
        from luminal.search.studies import Liveness
        from luminal.search.tuner import tune
        r = tune(h.small_graph(), h.FakeBackend(modes=("ok", "wrong")), {budget}, sampler="random", seed=3,
                 cache={str(tmp_path / 'tuning.db')!r}, storage="sqlite:///{tmp_path / 'studies.db'}",
                 timeout_s=0.5, plan=h.PLAN, workers=1, liveness=Liveness(heartbeat_s=1, grace_s=2))
        print(json.dumps(r.to_json()))
    """
    path = tmp_path / "run.py"
    path.write_text(textwrap.dedent(code))
    return [sys.executable, str(path)]


def _kernel_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    names = [s.study_name for s in optuna.get_all_study_summaries(url) if "-kernel-" in s.study_name]
    return optuna.load_study(study_name=names[0], storage=url) if names else None


def _wait_for_trials(tmp_path, proc, n, limit_s=60):
    t_end = time.monotonic() + limit_s
    while time.monotonic() < t_end and proc.poll() is None:
        time.sleep(0.3)
        try:
            study = _kernel_study(tmp_path)
        except Exception:  # the storage is still being created
            continue
        if study is not None and len(study.get_trials(states=(TrialState.COMPLETE,))) >= n:
            return study
    raise AssertionError("the tuning process made no progress")


def test_resume_after_kill(tmp_path):
    proc = subprocess.Popen(_script(tmp_path, 120), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_trials(tmp_path, proc, 4)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = _kernel_study(tmp_path).get_trials()
    assert len(before) >= 4
    time.sleep(3)  # past the grace period of the killed process's heartbeats
    _tune(tmp_path, helpers.FakeBackend(modes=("ok", "wrong")), 6, sampler="random", seed=3, workers=1,
          liveness=Liveness(heartbeat_s=1, grace_s=2))
    after = _kernel_study(tmp_path).get_trials()
    assert len(after) > len(before)
    # the earlier trials are still there, unchanged, and none is left running: a trial the killed process held
    # failed, and its point was asked again
    for old, new in zip(before, after):
        assert (old.number, old.params) == (new.number, new.params)
        if old.state is TrialState.COMPLETE:
            assert new.state is TrialState.COMPLETE and new.value == old.value
        if old.state is TrialState.RUNNING and new.state is TrialState.FAIL:
            assert any(t.system_attrs.get("failed_trial") == old.number for t in after)
    assert not [t for t in after if t.state is TrialState.RUNNING]


def test_sigterm_stops_cleanly_and_keeps_the_winners(tmp_path):
    proc = subprocess.Popen(_script(tmp_path, 120), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_trials(tmp_path, proc, 3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert time.monotonic() - t0 < 30  # far short of the 120 s budget, even on a busy machine
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["stopped"] == "interrupted"
    cache = TuningCache(tmp_path / "tuning.db")
    best = cache.best(_sig(), report["device"], report["toolchain"])
    assert best is not None and best.config["mode"] == "ok"


def test_seed_makes_random_search_reproducible(tmp_path):
    runs = []
    for k in range(2):
        d = tmp_path / str(k)
        d.mkdir()
        _tune(d, helpers.FakeBackend(modes=("ok",)), 10, sampler="random", seed=11, workers=1, fusion=False)
        runs.append([t.params for t in _kernel_study(d).get_trials()])
    n = min(len(r) for r in runs)
    assert n >= 2 and runs[0][:n] == runs[1][:n]


class TwoNumeric(helpers.FakeBackend):
    def space(self, kernel):
        return [Knob("speed", self.speeds), Knob("unroll", (1, 2, 4, 8))]

    def default_schedule(self, kernel):
        return {"speed": max(self.speeds), "unroll": 1}

    def valid(self, kernel, schedule):
        return schedule["unroll"] != 8 or schedule["speed"] < 4


def test_samplers_and_their_fallbacks():
    k = partition(helpers.small_graph())[0]
    numeric = ScheduleSpace(TwoNumeric(), k)
    assert numeric.numeric and numeric.size == 32
    assert numeric.valid({"speed": 8, "unroll": 4}) and not numeric.valid({"speed": 8, "unroll": 8})
    s, note = make_sampler("cmaes", 0, numeric, "k")
    assert isinstance(s, optuna.samplers.CmaEsSampler) and note is None
    s, note = make_sampler("cmaes", 0, ScheduleSpace(helpers.FakeBackend(), k), "k")
    assert isinstance(s, optuna.samplers.TPESampler) and "categorical" in note
    s, note = make_sampler("grid", 0, numeric, "k")
    assert isinstance(s, optuna.samplers.GridSampler)
    with pytest.raises(LuminalError, match="unknown sampler"):
        make_sampler("annealing", 0, numeric, "k")


def test_cmaes_tunes_a_numeric_space(tmp_path):
    # virtual time, so the sampler sees the true order of the speeds on a busy machine too
    report = _tune(tmp_path, TwoNumeric(speeds=(1, 2, 3, 4, 5, 6, 7, 8), virtual=True), 10, sampler="cmaes",
                   workers=1, fusion=False, timeout_s=10.0)
    (k,) = report.kernels
    assert k.best_config["speed"] <= 3 and k.pruned + k.trials > 5
    assert not any("using tpe" in n for n in report.notes)  # the sampler did not fall back


def test_scheduler_spends_where_time_and_improvement_are():
    big = TaskState("big", 1)
    small = TaskState("small", 1)
    for t, ns in ((big, 1000.0), (small, 10.0)):
        t.record(ns, 1.0)
    assert pick([small, big]).name == "big"
    stuck = TaskState("stuck", 1)
    moving = TaskState("moving", 1)
    for v in (600, 600, 600, 600, 600):
        stuck.record(v, 1.0)
    for v in (1000, 900, 800, 700, 600):
        moving.record(v, 1.0)
    assert pick([stuck, moving]).name == "moving"
    new = TaskState("new", 1)
    assert pick([stuck, moving, new]).name == "new"  # every task gets its first trial
    assert pick([TaskState("done", 1, done=True)]) is None


def test_a_task_not_yet_measured_is_expected_as_slow_as_the_slowest_measured():
    fast, slow, new = TaskState("fast", 1), TaskState("slow", 1), TaskState("new", 1)
    fast.record(10.0, 0.5, 5)
    slow.record(10.0, 2.0, 4)
    assert step_seconds(fast, [fast, slow, new], 4) == pytest.approx(0.4)
    assert step_seconds(new, [fast, slow, new], 4) == pytest.approx(0.5)
    assert step_seconds(new, [new], 4) == 0.0  # nothing measured: the first step always runs


def test_interpret_is_refused(tmp_path):
    class Interp(helpers.FakeBackend):
        name = "interpret"

    with pytest.raises(LuminalError, match="never timed"):
        _tune(tmp_path, Interp(), 5)


def test_fusion_decisions_are_searched(tmp_path):
    report = _tune(tmp_path, helpers.FakeBackend(modes=("ok",)), 6, sampler="tpe", workers=1)
    assert report.fusion is not None and report.fusion.edges == 6 and report.fusion.trials >= 2
    assert report.fusion.statuses.get("ok", 0) >= 2
    assert os.path.exists(tmp_path / "studies.db")


def test_incumbent_changes_only_on_a_paired_win():
    from luminal.search.measure import Measurement
    from luminal.search.tasks import KernelTask

    k = partition(helpers.small_graph())[0]
    task = KernelTask(k, k.signature, optuna.create_study(), ScheduleSpace(helpers.FakeBackend(), k), 1, None)
    a, b, c = ({"speed": s, "mode": "ok"} for s in (8, 4, 7))
    base = [1000 + (i % 3) for i in range(20)]
    times = {8: base, 4: [t // 2 for t in base], 7: [t * 0.99 if i % 2 else t * 1.03 for i, t in enumerate(base)]}
    compare = lambda pts: [Measurement("ok", list(times[p["speed"]])) for p in pts]
    task.tell(None, a, Measurement("ok", base))
    assert task.consider(a, Measurement("ok", base), compare) and task.incumbent == a
    assert not task.consider({"speed": 1, "mode": "wrong"}, Measurement("wrong_result"), compare)
    # c looks faster alone but does not win the interleaved rounds: the incumbent stays
    assert not task.consider(c, Measurement("ok", [900] * 5), compare) and task.incumbent == a
    assert task.consider(b, Measurement("ok", times[4]), compare) and task.incumbent == b
    task.tell(None, b, Measurement("ok", times[4]))
    task.tell(None, c, Measurement("ok", times[7]))
    pts = task.finalists()
    assert b in pts and a in pts  # the best few, the incumbent and the default are re-timed together
    task.settle(pts, compare(pts))
    assert task.incumbent == b and task.default_m is not None


def test_winners_that_lose_end_to_end_are_not_written(tmp_path, monkeypatch):
    """Kernel winners are kept only if the tuned model is not slower than the default as a whole."""
    import luminal.search.tuner as tuner_mod

    monkeypatch.setattr(tuner_mod, "beats", lambda challenger, incumbent, *a, **k: True)
    backend = helpers.FakeBackend(modes=("ok",), speeds=(1, 8))
    report = _tune(tmp_path, backend, 10, sampler="grid", fusion=False)
    assert report.e2e_tuned_ns and report.e2e_default_ns
    assert report.winners_written == 0
    assert any("slower than the default" in n for n in report.notes)
    assert TuningCache(tmp_path / "tuning.db").best(_sig(), report.device, report.toolchain) is None


def test_the_end_to_end_check_keeps_the_time_a_whole_model_took(tmp_path, monkeypatch):
    """The check of the tuned model against the default keeps twice the quickest whole-model measurement so far
    (a fusion step's), not a timing plan's few rounds: a model slow to load and verify (here 3 s more per
    measurement) is still checked before the budget ends."""
    from luminal.search.measure import Measurer

    real = Measurer.measure_model

    def slow(self, *a, **k):
        time.sleep(3.0)
        return real(self, *a, **k)

    monkeypatch.setattr(Measurer, "measure_model", slow)
    report = _tune(tmp_path, helpers.FakeBackend(modes=("ok",)), 16, sampler="random", workers=1)
    assert report.fusion is not None and report.fusion.statuses.get("ok", 0) >= 1
    assert report.e2e_default_ns and report.e2e_tuned_ns, report.notes


def _open(url, q):
    from luminal.search.studies import open_storage

    try:
        open_storage(url)
        q.put("ok")
    except Exception as e:
        q.put(str(e))


def test_processes_creating_one_new_study_storage_at_once_all_open_it(tmp_path):
    """Two tuning runs started together on a fresh studies.db (a CI matrix sharing a cache folder) race to
    create Optuna's schema; the losers retry instead of failing."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for k in range(4):
        url = f"sqlite:///{tmp_path / f'studies{k}.db'}"
        q = ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, q)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [q.get(timeout=5) for _ in procs] == ["ok"] * 4


def _hold_and_die(url, liveness):
    from luminal.search.studies import ask, open_storage, open_study

    storage = open_storage(url, liveness)
    study = open_study(storage, "s", optuna.samplers.RandomSampler(seed=0))
    trial = ask(study)
    trial.suggest_int("x", 0, 9)
    storage.heartbeats.hold(study, trial)
    time.sleep(1.5)  # a beat or two, then killed mid-trial
    os._exit(0)


def test_a_trial_whose_process_stopped_beating_is_failed_after_the_grace_period_and_asked_again(tmp_path):
    import multiprocessing as mp

    from luminal.search.studies import Liveness, ask, open_storage, open_study

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    liveness = Liveness(heartbeat_s=1, grace_s=2)
    p = mp.get_context("fork").Process(target=_hold_and_die, args=(url, liveness))
    p.start()
    p.join(60)
    storage = open_storage(url, liveness)
    # a live process's trial, beating, is left alone
    live = open_study(storage, "s", optuna.samplers.RandomSampler(seed=1))
    mine = ask(live)
    mine.suggest_int("x", 0, 9)
    storage.heartbeats.hold(live, mine)
    time.sleep(liveness.grace_s + 1.5)
    study = open_study(storage, "s", optuna.samplers.RandomSampler(seed=0))
    dead, held, again = study.get_trials()
    assert (dead.state, held.state, again.state) == (TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING)
    assert again.params == dead.params and again.system_attrs["failed_trial"] == dead.number
    assert ask(study).params == dead.params  # the point is asked again
    storage.close()  # a run that stops holding a trial: failed, and asked again at once
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert [t.state for t in trials].count(TrialState.RUNNING) == 1  # the point asked again above, held by no one
    assert any(t.system_attrs.get("failed_trial") == held.number and t.state is TrialState.WAITING for t in trials)


def test_kernels_are_timed_after_a_flush_only_when_the_weights_outgrow_the_cache():
    from types import SimpleNamespace

    from luminal.ir import DType, Graph, Tensor
    from luminal.search.timing import last_level_cache_bytes
    from luminal.search.tuner import _plan_for

    def graph(weight_floats: int) -> Graph:
        x = Tensor.input("x", (1, weight_floats), DType.float32)
        w = Tensor.const(np.arange(weight_floats, dtype=np.float32))
        return Graph([x.node], [x.mul(w.reshape((1, weight_floats))).contiguous().node], ["y"])

    cpu, cuda = SimpleNamespace(name="cpu"), SimpleNamespace(name="cuda")
    small, big = graph(1024), graph(last_level_cache_bytes() // 4 + 1024)
    assert not _plan_for(60, small, cpu).flush
    assert _plan_for(60, big, cpu).flush
    assert _plan_for(60, small, cuda).flush  # L2 is flushed on the GPU whatever the model


class _Stuck(optuna.samplers.BaseSampler):
    """Proposes one point only, as a model-based sampler does once it trusts its model: the tasks must explore."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        return distribution.to_external_repr(0) if isinstance(distribution, optuna.distributions.IntDistribution) \
            else distribution.choices[0]


def test_two_processes_exploring_one_study_never_time_the_same_point(monkeypatch):
    """Both draw the same random point to explore (one seed per kernel); the one that pops it second from the
    study's queue sees the other's running trial of it and yields."""
    from luminal.search import tasks as tasks_mod
    from luminal.search.measure import Measurement
    from luminal.search.tasks import KernelTask

    monkeypatch.setattr(tasks_mod, "ASK_S", 600.0)
    k = partition(helpers.small_graph())[0]
    study = optuna.create_study(sampler=_Stuck())
    a, b = (KernelTask(k, k.signature, study, ScheduleSpace(helpers.FakeBackend(), k), 1, None) for _ in range(2))
    stuck = a.space.suggest(optuna.create_study(sampler=_Stuck()).ask())
    for task in (a, b):
        task.tell(None, stuck, Measurement("ok", [1000] * 5))
    ((_, pa),) = a.ask(1)
    ((_, pb),) = b.ask(1)
    assert a.key(pa) != b.key(pb) and a.key(pa) != a.key(stuck)
    assert a.key(pa) in b.elsewhere


def test_a_commit_cut_by_a_restarting_server_counts_as_a_lost_connection():
    """What a storage call raises when the server goes away mid-commit is retried; other database errors are not.
    Optuna wraps SQLAlchemy's error, which may be the rollback owed to the dead connection, raised while handling
    the driver's own."""
    from sqlalchemy import exc

    from luminal.search.studies import _lost_connection

    def wrapped(cause: BaseException) -> optuna.exceptions.StorageInternalError:
        try:
            try:
                raise cause
            except BaseException as e:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
        except optuna.exceptions.StorageInternalError as outer:
            return outer

    dropped = exc.OperationalError("COMMIT", {}, ConnectionError("server closed the connection unexpectedly"))
    assert _lost_connection(wrapped(dropped))
    owed = exc.PendingRollbackError("Can't reconnect until invalid transaction is rolled back")
    assert _lost_connection(wrapped(owed))
    try:
        try:
            raise dropped
        except exc.OperationalError:
            raise exc.ResourceClosedError("This Connection is closed")  # noqa: B904
    except exc.ResourceClosedError as e:
        assert _lost_connection(wrapped(e))
    assert not _lost_connection(wrapped(exc.IntegrityError("INSERT", {}, ValueError("duplicate key"))))
    assert not _lost_connection(ValueError("not a database error"))


def test_a_trial_gets_its_first_heartbeat_as_it_is_created(tmp_path):
    """A process killed right after it asked a trial, before its heartbeat thread ran, leaves no trial running for
    good: the trial's first beat is written with it (created, or popped from waiting), so the next process fails
    it once the grace period is past."""
    from optuna.storages._rdb import models

    from luminal.search.studies import fail_stale, open_storage, open_study

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}", Liveness(heartbeat_s=1, grace_s=1))
    try:
        study = open_study(storage, "luminal-beats", optuna.samplers.RandomSampler(seed=0))
        created = storage.rdb.create_new_trial(study._study_id)
        study.enqueue_trial({"x": 1})
        popped = study.ask()._trial_id  # the waiting trial, set running
        session = storage.rdb.scoped_session()
        beating = {b.trial_id for b in session.query(models.TrialHeartbeatModel)}
        session.close()
        assert beating == {created, popped}
        time.sleep(2.5)  # nothing beats for them: the grace period passes
        assert set(storage.rdb._get_stale_trial_ids(study._study_id)) == {created, popped}
        fail_stale(study)
        states = {t._trial_id: t.state for t in study.get_trials()}
        assert states[created] is TrialState.FAIL and states[popped] is TrialState.FAIL
        # each was asked again, as a waiting trial
        assert sum(t.state is TrialState.WAITING for t in study.get_trials()) == 2
    finally:
        storage.close()


def test_a_worker_that_failed_to_start_closes_quietly(monkeypatch):
    """A worker process that could not start (a spawn refused, no memory to fork) raises its own error, and the
    worker then closes without joining a process that never ran."""
    import multiprocessing.context

    from luminal.search.worker import Worker, WorkerContext

    def refuse(self):
        raise OSError("cannot start a process")

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", refuse)
    w = Worker(WorkerContext("cpu"))
    with pytest.raises(OSError, match="cannot start"):
        w.submit("job")
    assert w.proc is None
    w.close()


def test_a_trial_failed_by_another_process_while_it_is_sampled_is_dropped(monkeypatch):
    """A server away for longer than the grace period: another process fails this one's running trial as stale
    while this one still draws its point. The trial is dropped and another asked, not an internal error."""
    from luminal.search.tasks import KernelTask

    k = partition(helpers.small_graph())[0]
    study = optuna.create_study()
    task = KernelTask(k, k.signature, study, ScheduleSpace(helpers.FakeBackend(), k), 1, None)
    draw, failed = task.space.suggest, []

    def failed_meanwhile(trial):
        if not failed:
            study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
            failed.append(trial.number)
        return draw(trial)

    monkeypatch.setattr(task.space, "suggest", failed_meanwhile)
    ((trial, _),) = task.ask(1)
    # a draw between them may be pruned (an invalid point) or answered (a repeat): the sampler is not seeded
    states = [t.state for t in study.get_trials()]
    assert failed == [0] and trial.number == len(states) - 1
    running = optuna.trial.TrialState.RUNNING
    assert states[0] == optuna.trial.TrialState.FAIL and states[-1] == running and running not in states[1:-1]


def test_each_kernel_is_timed_on_buffers_placed_as_the_compiled_model_places_them(tmp_path):
    """A kernel task carries where the model's arena puts each of its buffers (what jobs.KernelJob places them
    by): an intermediate that one kernel writes and the next reads is at one offset in both, the model's inputs and
    output, which lie outside the arena, nowhere in particular."""
    x = Tensor.input("x", (4, 8), DType.float32)
    y = Tensor.input("y", (4, 8), DType.float32)
    t = x.mul(x.exp().mul(y).sum(axes=(1,), keepdim=True).recip()).add(y).contiguous()
    v = t.mul(t.sum(axes=(0,), keepdim=True)).contiguous()
    graph = Graph([x.node, y.node], [v.node], ["v"])
    tuner = Tuner(graph, helpers.FakeBackend(), 60, storage=f"sqlite:///{tmp_path / 'studies.db'}",
                  cache=tmp_path / "tuning.db", fusion=False)
    kernels = partition(graph)
    where: dict[int, set] = {}
    for k in kernels:
        for n, p in zip((*k.input_nodes, *k.output_nodes), tuner.tasks[k.signature].placement, strict=True):
            where.setdefault(n, set()).add(p)
    outside = {x.node.id, y.node.id, v.node.id}
    between = set(where) - outside
    assert between and all(len(where[n]) == 1 and isinstance(next(iter(where[n])), int) for n in between)
    assert all(where[n] == {None} for n in outside)
