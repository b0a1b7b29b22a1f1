"""The tables of the tuning cache, how to create them, and how to upgrade older files in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database

APP_NAME = "luminal-tuning-cache"
APPLICATION_ID = 0x4C4D4E54  # "LMNT" in the SQLite header, so `file` can tell what this is
SCHEMA_VERSION = 2
TABLES = ("meta", "fingerprints", "kernels", "trials", "winners")
STATUSES = ("ok", "compile_error", "crash", "timeout", "wrong_result")
# every winner's n_trials counted afresh from its trials; append a WHERE to narrow it
RECOUNT_TRIALS = ("UPDATE winners SET n_trials = (SELECT count(*) FROM trials t WHERE t.signature = winners.signature"
                  " AND t.device = winners.device AND t.toolchain = winners.toolchain)")


def create(db: Database) -> None:
    """Create every table and index of the current schema (caller holds a write transaction)."""
    db.table("meta").create({"key": str, "value": str}, pk="key")
    db.table("fingerprints").create({"key": str, "kind": str, "info": str}, pk="key", not_null=["kind", "info"])
    db.table("kernels").create(
        {"signature": str, "form": str, "ir_text": str, "shapes": str, "models": str,
         "first_seen": str, "last_seen": str},
        pk="signature", not_null=["models"], defaults={"models": "[]"},
    )
    db.table("trials").create(
        {"id": int, "uid": str, "signature": str, "device": str, "toolchain": str, "config": str,
         "status": str, "median_ns": int, "p10_ns": int, "p90_ns": int, "n_samples": int,
         "samples": str, "created_at": str},
        pk="id", not_null=["uid", "signature", "device", "toolchain", "config", "status", "n_samples", "created_at"],
    )
    db.table("winners").create(
        {"signature": str, "device": str, "toolchain": str, "config": str, "median_ns": int,
         "default_ns": int, "speedup": float, "n_trials": int, "updated_at": str},
        pk=("signature", "device", "toolchain"), not_null=["config", "n_trials", "updated_at"],
        defaults={"n_trials": 0},
    )
    _indexes(db)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.table("meta").insert_all([{"key": "app", "value": APP_NAME},
                                 {"key": "schema_version", "value": str(SCHEMA_VERSION)}], replace=True)


def _indexes(db: Database) -> None:
    db.table("trials").create_index(["uid"], index_name="trials_uid", unique=True, if_not_exists=True)
    db.table("trials").create_index(["signature", "device", "toolchain"], index_name="trials_key", if_not_exists=True)
    db.table("winners").create_index(["toolchain"], index_name="winners_toolchain", if_not_exists=True)


def _v1_to_v2(db: Database) -> None:
    """v2 added: fingerprints, kernel model names, trial uid / percentiles / sample summary,
    winner default time / speedup / trial count."""
    db.table("fingerprints").create({"key": str, "kind": str, "info": str}, pk="key", not_null=["kind", "info"],
                              if_not_exists=True)
    db.table("kernels").add_column("models", str, not_null_default="[]")
    db.table("kernels").add_column("first_seen", str)
    db.table("kernels").add_column("last_seen", str)
    trials = db.table("trials")
    for col, typ in (("uid", str), ("p10_ns", int), ("p90_ns", int), ("samples", str)):
        trials.add_column(col, typ)
    db.execute("UPDATE trials SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL")
    winners = db.table("winners")
    winners.add_column("default_ns", int)
    winners.add_column("speedup", float)
    winners.add_column("n_trials", int, not_null_default=0)
    db.execute(RECOUNT_TRIALS)
    _indexes(db)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


# MIGRATIONS[v] upgrades a file at version v to v + 1
MIGRATIONS: dict[int, Callable[[Database], None]] = {1: _v1_to_v2}


def migrate(db: Database, version: int) -> None:
    """Upgrade from ``version`` to SCHEMA_VERSION (caller holds a write transaction)."""
    while version < SCHEMA_VERSION:
        MIGRATIONS[version](db)
        version += 1
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
