"""Optuna studies in an RDB storage: opened by name (so a rerun resumes), with stale trials failed."""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ..errors import LuminalError

HOST = socket.gethostname()
CREATE_TRIES = 5
OPENED_BY = "opened_by"  # study attribute: host:pid of the processes that opened it
CREATE_RACE = ("already exists", "alembic_version", "database is locked")


def default_storage(cache_path: Path) -> str:
    return f"sqlite:///{cache_path.expanduser().resolve().parent / 'studies.db'}"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    kwargs = {}
    if url.startswith("sqlite:"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs = {"connect_args": {"timeout": 60}}
    for attempt in range(CREATE_TRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            break
        except Exception as e:
            # processes creating the same new storage at once: the losers of the race to create a table or
            # write the schema version find the schema there when they try again
            if any(m in str(e) for m in CREATE_RACE) and attempt + 1 < CREATE_TRIES:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise LuminalError(f"cannot open the study storage {url}: {str(e).splitlines()[0]}") from None
    if url.startswith("sqlite:"):
        _fast_sqlite(storage)
    return storage


def _fast_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """WAL with normal sync: a commit no longer waits for the disk (a crash loses at most the last trial)."""
    from sqlalchemy import event

    def on_connect(conn, _record) -> None:
        cur = conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()


def _alive(owner: str) -> bool:
    """Whether the process ``host:pid`` may still run: certainly not when it was on this host and is gone."""
    host, _, pid = owner.rpartition(":")
    if host != HOST or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def open_study(storage: optuna.storages.BaseStorage, name: str,
               sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                                load_if_exists=True)
    # trials left running by a tuning process on this host that was killed: fail them. A trial is claimed
    # only once its point is sampled (inside study.ask()), so one killed before that has no owner: it is
    # stale when no process that opened the study is alive
    me = f"{HOST}:{os.getpid()}"
    live = [o for o in study.user_attrs.get(OPENED_BY, []) if _alive(o)]
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(t.user_attrs.get("owner", ""))
        if (owner and owner != me and not _alive(owner)) or (not owner and not live):
            try:
                study.tell(t.number, state=TrialState.FAIL)
            except Exception:  # another process got there first
                pass
    study.set_user_attr(OPENED_BY, [o for o in live if o != me] + [me])
    return study


def claim(trial: optuna.Trial) -> None:
    """Mark the trial as this process's, so a rerun can tell a dead owner's trial from a live one."""
    trial.set_user_attr("owner", f"{HOST}:{os.getpid()}")
