"""Optuna studies in an RDB storage (a SQLite file by default, PostgreSQL for tuning across machines): opened by
name, so a rerun resumes; every trial a process holds beats (Optuna's RDBStorage heartbeat), and a trial whose
process stopped beating for the grace period is failed by whichever process looks next and asked again
(RetryHeartbeatStaleTrialCallback). Calls are retried with backoff while the server is away (restart, network
blip); one that stays away stops the run with a LuminalError."""

from __future__ import annotations

import copy
import functools
import json
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import TrialState

from ..errors import LuminalError

CREATE_TRIES = 5
CREATE_RACE = ("already exists", "alembic_version", "database is locked")
PREFIX = "luminal-"  # every study's name: luminal-{cache key}-{device key}-{toolchain key}
MAX_BACKOFF_S = 5.0
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Liveness:
    """How trials are kept alive and a lost server waited for.

    ``heartbeat_s``: seconds between two heartbeats of a trial a process holds. ``grace_s``: a running trial
    with no heartbeat for this long is failed by the next process that asks its study, and asked again (at most
    ``retries`` times). ``reconnect_s``: how long calls are retried, with backoff, while the server is away.
    """

    heartbeat_s: int = 10
    grace_s: int = 60
    reconnect_s: float = 60.0
    retries: int = 3


def default_storage(cache_path: Path) -> str:
    return f"sqlite:///{cache_path.expanduser().resolve().parent / 'studies.db'}"


def checked_url(url: str, what: str = "--storage", must_exist: bool = False) -> str:
    """A study storage URL refused at once where no run could use it: not a URL, an SQLite URL without a file, an
    in-memory SQLite (each process would have its own, lost at exit), a file in a folder that does not exist (no
    folders are made), or, with ``must_exist``, a file that does not."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    hint = "expected a database URL such as sqlite:///studies.db or postgresql+psycopg://host/db"
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise LuminalError(f"{what}: {hint}, got {url!r}") from None
    if parsed.get_backend_name() != "sqlite":
        return url
    database = parsed.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise LuminalError(f"{what}: an SQLite storage needs a file (sqlite:///studies.db), got {url!r}")
    path = Path(database).expanduser()
    if not path.parent.is_dir():
        raise LuminalError(f"{what}: folder {str(path.parent)!r} does not exist (make it first)")
    if must_exist and not path.is_file():
        raise LuminalError(f"{what}: {str(path)!r} is not a file")
    return url


def shown_url(url: str) -> str:
    """The URL with its password masked, for messages and reports."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def _lost_connection(e: BaseException) -> bool:
    """Whether ``e`` or an error it was raised from (Optuna wraps SQLAlchemy's, which wraps the driver's) says the
    server could not be reached or the connection dropped: a commit cut by a restarting server surfaces as a
    rollback SQLAlchemy still owes the dead connection, or as a closed connection."""
    from sqlalchemy import exc

    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, exc.DisconnectionError | exc.PendingRollbackError | exc.ResourceClosedError):
            return True
        if isinstance(cause, exc.DBAPIError) and (
                cause.connection_invalidated or isinstance(cause, exc.OperationalError | exc.InterfaceError)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _one_line(e: BaseException) -> str:
    cause = e.__cause__ if isinstance(e, optuna.exceptions.StorageInternalError) and e.__cause__ else e
    orig = getattr(cause, "orig", None) or cause
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


def _retried(fn: F) -> F:
    """``fn`` retried with backoff while the connection is lost, for up to ``reconnect_s`` in all; then (and on
    every later call, at once) a LuminalError."""

    @functools.wraps(fn)
    def call(self: _Reconnecting, *args: Any, **kwargs: Any) -> Any:
        delay, waited = 0.1, 0.0
        while True:
            if self.lost is not None:
                raise LuminalError(self.lost)
            try:
                return fn(self, *args, **kwargs)
            except Exception as e:
                if not _lost_connection(e):
                    raise
                if waited >= self.reconnect_s:
                    self.lost = f"lost the study storage {shown_url(self.url)} for {waited:.0f} s: {_one_line(e)}"
                    raise LuminalError(self.lost) from None
                time.sleep(delay)
                waited += delay
                delay = min(2 * delay, MAX_BACKOFF_S)

    return call  # type: ignore[return-value]


class _Reconnecting(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose database calls wait for a lost server (see _retried)."""

    reconnect_s: float = 60.0
    lost: str | None = None  # why the server counts as gone

    def finished_since(self, after: int, unfinished: set[int]) -> list[tuple[int, int, int, TrialState,
                                                                            float | None, dict[str, Any]]]:
        """Trials of every study with an id above ``after`` or in ``unfinished``, in one read whatever the number
        of studies: (trial id, study id, number, state, value, params) with the value and params of complete ones."""
        from optuna.distributions import json_to_distribution
        from optuna.storages._rdb import models as m
        from sqlalchemy import or_

        cond = m.TrialModel.trial_id > after
        if unfinished:
            cond = or_(cond, m.TrialModel.trial_id.in_(sorted(unfinished)))
        done = (m.TrialModel.state == TrialState.COMPLETE) & cond
        session = self.scoped_session()
        try:
            # ids and numbers of stored trials are never NULL, whatever the models' column types say
            rows = cast(list[tuple[int, int, int, TrialState]], session.query(
                m.TrialModel.trial_id, m.TrialModel.study_id, m.TrialModel.number, m.TrialModel.state
            ).filter(cond).all())
            values = {tid: m.TrialValueModel.stored_repr_to_value(v, vt) for tid, v, vt in session.query(
                m.TrialValueModel.trial_id, m.TrialValueModel.value, m.TrialValueModel.value_type).join(
                m.TrialModel, m.TrialModel.trial_id == m.TrialValueModel.trial_id).filter(
                done, m.TrialValueModel.objective == 0)}
            params: dict[int | None, dict[str, Any]] = {}
            dists: dict[str, Any] = {}
            for tid, name, value, dj in session.query(
                    m.TrialParamModel.trial_id, m.TrialParamModel.param_name, m.TrialParamModel.param_value,
                    m.TrialParamModel.distribution_json).join(
                    m.TrialModel, m.TrialModel.trial_id == m.TrialParamModel.trial_id).filter(done):
                dist = dists[dj] if dj in dists else dists.setdefault(dj, json_to_distribution(dj))
                params.setdefault(tid, {})[name] = dist.to_external_repr(value)
            session.commit()
        except Exception as e:
            session.rollback()
            from sqlalchemy import exc

            if isinstance(e, exc.SQLAlchemyError):
                raise optuna.exceptions.StorageInternalError("reading the finished trials failed") from e
            raise
        finally:
            session.close()
        return [(tid, sid, num, st, values.get(tid), params.get(tid, {})) for tid, sid, num, st in rows]


_DATABASE_CALLS = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr", "get_study_id_from_name",
    "get_study_name_from_id", "get_study_directions", "get_study_user_attrs", "get_study_system_attrs",
    "get_trial_user_attrs", "get_trial_system_attrs", "get_all_studies", "_create_new_trial", "_set_trial_param",
    "get_trial_param", "set_trial_state_values", "set_trial_intermediate_value", "set_trial_user_attr",
    "set_trial_system_attr", "get_trial_id_from_study_id_trial_number", "get_trial", "_get_trials",
    "_get_best_trial_id", "record_heartbeat", "_get_stale_trial_ids", "finished_since",
)
for _name in _DATABASE_CALLS:
    setattr(_Reconnecting, _name, _retried(getattr(_Reconnecting, _name)))


class Heartbeats:
    """One thread that records a heartbeat for every trial this process holds, every ``interval_s``."""

    def __init__(self, rdb: _Reconnecting, interval_s: int):
        self.rdb = rdb
        self.interval_s = interval_s
        self._held: dict[int, optuna.Study] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, study: optuna.Study, trial: optuna.Trial) -> None:
        with self._lock:
            self._held[trial._trial_id] = study  # its first beat came with it (_first_beat)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="luminal-heartbeat", daemon=True)
            self._thread.start()

    def release(self, trial: optuna.Trial) -> None:
        with self._lock:
            self._held.pop(trial._trial_id, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            with self._lock:
                held = list(self._held)
            for tid in held:
                try:
                    self.rdb.record_heartbeat(tid)
                except Exception:  # the server is away: the main thread's next call waits for it or says so
                    break
            self._wake.wait(self.interval_s)

    def close(self) -> None:
        """Stop beating; the trials still held (a run stopped mid-step) are failed and asked again at once."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            held, self._held = dict(self._held), {}
        callback = self.rdb.get_heartbeat_stale_trial_callback()
        for tid, study in held.items():
            try:
                if self.rdb.set_trial_state_values(tid, TrialState.FAIL) and callback is not None:
                    callback(study, copy.deepcopy(self.rdb.get_trial(tid)))
            except Exception:  # finished meanwhile, or the server is gone: its heartbeat goes stale instead
                continue


class StudyStorage:
    """An opened study storage: the RDBStorage, the heartbeats of this process's trials, and reads across its
    studies. Close it at the end of a run."""

    def __init__(self, url: str, rdb: _Reconnecting, liveness: Liveness):
        self.url = url
        self.rdb = rdb
        self.liveness = liveness
        self.heartbeats = Heartbeats(rdb, liveness.heartbeat_s)

    @property
    def shown(self) -> str:
        return shown_url(self.url)

    @property
    def shared(self) -> bool:
        """A database server other machines may use too (not a SQLite file)."""
        return not self.url.startswith("sqlite")

    def finished_since(self, after: int, unfinished: set[int]) -> list[tuple[int, int, int, TrialState,
                                                                            float | None, dict[str, Any]]]:
        return self.rdb.finished_since(after, unfinished)

    def close(self) -> None:
        self.heartbeats.close()


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite:"):
        return {"connect_args": {"timeout": 60}}
    from sqlalchemy.engine import make_url

    given = set(make_url(url).query)
    args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        # a dead peer is found within ~30 s instead of the system's TCP timeouts (minutes)
        defaults = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                    "keepalives_count": 3}
        args = {k: v for k, v in defaults.items() if k not in given}
    # pooled connections a server restart closed are replaced before use
    return {"pool_pre_ping": True, "connect_args": args}


def open_storage(url: str, liveness: Liveness | None = None) -> StudyStorage:
    liveness = liveness or Liveness()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    kwargs = _engine_kwargs(checked_url(url))
    for attempt in range(CREATE_TRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=liveness.retries)
                rdb = _Reconnecting(url, engine_kwargs=kwargs, heartbeat_interval=liveness.heartbeat_s,
                                    grace_period=liveness.grace_s, heartbeat_stale_trial_callback=retry)
            break
        except ImportError as e:
            raise LuminalError(f"the study storage {shown_url(url)} needs a driver that is not installed "
                               f"({_one_line(e.__cause__ or e)}); for PostgreSQL: "
                               f"pip install 'luminal-onnx[distributed]' and a postgresql+psycopg:// URL") from None
        except Exception as e:
            # processes creating the same new storage at once: the losers of the race to create a table or
            # write the schema version find the schema there when they try again
            if any(m in str(e) for m in CREATE_RACE) and attempt + 1 < CREATE_TRIES:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise LuminalError(f"cannot open the study storage {shown_url(url)}: {_one_line(e)}") from None
    rdb.reconnect_s = liveness.reconnect_s
    _BEATING.add(rdb.engine)
    _listen_first_beats()
    if url.startswith("sqlite:"):
        _fast_sqlite(rdb)
    return StudyStorage(url, rdb, liveness)


_BEATING: weakref.WeakSet[Any] = weakref.WeakSet()  # the engines of storages opened here


def _first_beat(_mapper: Any, connection: Any, trial: Any) -> None:
    """A trial created running, or popped from waiting, gets its first heartbeat in the same transaction: a process
    killed between the two commits would leave a running trial no heartbeat check can ever find stale."""
    import sqlalchemy
    from optuna.storages._rdb import models

    if trial.state == TrialState.RUNNING and connection.engine in _BEATING \
            and sqlalchemy.inspect(trial).attrs.state.history.has_changes():
        beats = models.TrialHeartbeatModel.__table__
        # an enqueued trial is inserted running, then set waiting (Optuna's _create_new_trial): its beat from
        # then is replaced when it is popped
        connection.execute(beats.delete().where(beats.c.trial_id == trial.trial_id))
        connection.execute(beats.insert().values(trial_id=trial.trial_id))


def _listen_first_beats() -> None:
    from optuna.storages._rdb import models
    from sqlalchemy import event

    for when in ("after_insert", "after_update"):
        if not event.contains(models.TrialModel, when, _first_beat):
            event.listen(models.TrialModel, when, _first_beat)


def _fast_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """WAL with normal sync: a commit no longer waits for the disk (a crash loses at most the last trial)."""
    from sqlalchemy import event

    def on_connect(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()


def ask(study: optuna.Study) -> optuna.Trial:
    """``study.ask()``, outside Study.optimize on purpose: the tuner holds its trials' heartbeats itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        return study.ask()


def fail_stale(study: optuna.Study) -> None:
    """Fail the study's running trials whose heartbeat stopped for the grace period; each is asked again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def open_study(storage: StudyStorage, name: str, sampler: optuna.samplers.BaseSampler,
               attrs: dict[str, Any] | None = None) -> optuna.Study:
    """The study ``name`` (created if new), its stale trials failed, with ``attrs`` among its user attributes."""
    study = optuna.create_study(study_name=name, storage=storage.rdb, sampler=sampler, direction="minimize",
                                load_if_exists=True)
    have = study.user_attrs if attrs else {}
    for key, value in (attrs or {}).items():
        if json.dumps(have.get(key)) != json.dumps(value):
            study.set_user_attr(key, value)
    fail_stale(study)
    return study


def study_name(key: str, device: str, toolchain: str) -> str:
    return f"{PREFIX}{key}-{device}-{toolchain}"
