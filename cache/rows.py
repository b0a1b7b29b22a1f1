"""Decode and validate the rows read from a cache file: a row whose bytes or types are damaged becomes a
``Damaged`` note, never a record, so a damaged winner is never used.

A cache travels between machines like a model file; its rows are input. The rules for a row are the
rules an export line must meet (export.PARSERS), so an imported record and a stored row are held to one
standard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .export import PARSERS, Bad, loads
from .records import KernelRecord, Trial, Winner

# the columns each decoder reads, after the rowid
FINGERPRINT_COLS = ("key", "kind", "info")
KERNEL_COLS = ("signature", "form", "ir_text", "shapes", "models", "first_seen", "last_seen")
TRIAL_COLS = ("id", "uid", "signature", "device", "toolchain", "config", "status", "median_ns", "p10_ns", "p90_ns",
              "n_samples", "samples", "created_at")
WINNER_COLS = ("signature", "device", "toolchain", "config", "median_ns", "default_ns", "speedup", "n_trials",
               "updated_at")
COLUMNS = {"fingerprints": FINGERPRINT_COLS, "kernels": KERNEL_COLS, "trials": TRIAL_COLS, "winners": WINNER_COLS}


class Undecodable(str):
    """TEXT that is not valid UTF-8 (its bad bytes as surrogates): a value no decoder accepts."""


def text_factory(raw: bytes) -> str:
    """How the connection turns TEXT into str: invalid UTF-8 becomes an Undecodable, not an exception that
    would end the whole query."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(raw.decode("utf-8", "surrogateescape"))


@dataclass(frozen=True)
class Damaged:
    """A row that failed validation: where it is and what is wrong with it."""

    table: str
    rowid: int
    key: str | None  # the row's signature or fingerprint key, when that much is readable
    reason: str

    def __str__(self) -> str:
        name = f" ({self.key})" if self.key else ""
        return f"{self.table} row {self.rowid}{name}: {self.reason}"


class DamagedRow(Exception):
    def __init__(self, damaged: Damaged) -> None:
        super().__init__(str(damaged))
        self.damaged = damaged


def clean(value: object) -> bool:
    """A str that came from valid UTF-8 and holds nothing a terminal would act on."""
    return type(value) is str and value.isprintable()


def label(value: object, limit: int = 80) -> str | None:
    """``value`` when it is clean enough to print in a message, else None."""
    return value[:limit] if isinstance(value, str) and value and clean(value) else None


def _text(value: object, name: str, optional: bool = False, lines: bool = False) -> str | None:
    """Text of valid UTF-8 without control characters (but newlines and tabs where ``lines``)."""
    if value is None and optional:
        return None
    if type(value) is not str:
        raise _not_text(value, name)
    if not (value.replace("\n", " ").replace("\t", " ") if lines else value).isprintable():
        raise Bad(f"field {name!r} holds control characters")
    return value


def _json(value: object, name: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if type(value) is not str:  # JSON itself refuses control characters inside its strings
        raise _not_text(value, name)
    try:
        return loads(value)
    except (ValueError, RecursionError):
        raise Bad(f"field {name!r} is not JSON") from None


def _not_text(value: object, name: str) -> Bad:
    if isinstance(value, Undecodable):
        return Bad(f"field {name!r} is not valid UTF-8")
    kind = {bytes: "a blob", int: "an integer", float: "a number"}.get(type(value), "empty")
    return Bad(f"field {name!r} is {kind}, not text")


def _record(table: str, row: tuple[Any, ...]) -> dict[str, Any]:
    rec = dict(zip(COLUMNS[table], row[1:], strict=True))
    if table == "fingerprints":
        return {"type": _text(rec["kind"], "kind"), "key": _text(rec["key"], "key"), "info": _json(rec["info"], "info")}
    if table == "kernels":
        for k in ("signature", "form", "first_seen", "last_seen"):
            _text(rec[k], k, optional=k != "signature")
        rec["ir_text"] = _text(rec["ir_text"], "ir_text", optional=True, lines=True)
        rec["shapes"] = _json(rec["shapes"], "shapes", optional=True)
        rec["models"] = _json(rec["models"], "models", optional=True) or []
        # files upgraded from v1 have no times; the export fills them in
        rec["first_seen"] = rec["first_seen"] or rec["last_seen"] or "2000-01-01T00:00:00.000000Z"
        rec["last_seen"] = rec["last_seen"] or rec["first_seen"]
        return rec
    for k in ("signature", "device", "toolchain", "updated_at", "uid", "status", "created_at"):
        if k in rec:
            _text(rec[k], k)
    rec["config"] = _json(rec["config"], "config")
    if table == "trials":
        rec["samples"] = _json(rec["samples"], "samples", optional=True)
        if type(rec["id"]) is not int:
            raise Bad("field 'id' is not an integer")
    else:
        n = rec["n_trials"]
        if type(n) is not int or n < 0:
            raise Bad("field 'n_trials' must be a non-negative integer")
        if isinstance(rec["speedup"], int) and not isinstance(rec["speedup"], bool):
            rec["speedup"] = float(rec["speedup"])  # SQLite keeps a whole REAL as an integer
    return rec


def _validate(table: str, row: tuple[Any, ...]) -> dict[str, Any]:
    """The row as a record that passed the export rules; DamagedRow otherwise. ``row`` is (rowid, *COLUMNS)."""
    try:
        rec = _record(table, row)
        kind = {"fingerprints": rec.get("type"), "kernels": "kernel", "trials": "trial", "winners": "winner"}[table]
        if not isinstance(kind, str) or (table == "fingerprints" and kind not in ("device", "toolchain")):
            raise Bad("field 'kind' must be device or toolchain")
        parsed = PARSERS[kind](dict(rec))
    except Bad as e:
        key_col = "key" if table == "fingerprints" else "signature"
        key = row[1 + COLUMNS[table].index(key_col)]
        raise DamagedRow(Damaged(table, row[0] if type(row[0]) is int else -1, label(key), str(e))) from None
    return {**rec, **parsed}


def fingerprint(row: tuple[Any, ...]) -> tuple[str, str, dict[str, Any]]:
    rec = _validate("fingerprints", row)
    return rec["key"], rec["kind"], rec["info"]


def kernel(row: tuple[Any, ...], n_trials: int = 0, n_winners: int = 0,
           best_speedup: float | None = None) -> KernelRecord:
    rec = _validate("kernels", row)
    return KernelRecord(rec["signature"], rec["form"], rec["ir_text"], rec["shapes"], rec["models"], row[6], row[7],
                        n_trials, n_winners, best_speedup)


def trial(row: tuple[Any, ...]) -> Trial:
    rec = _validate("trials", row)
    return Trial(**{k: rec[k] for k in TRIAL_COLS})


def winner(row: tuple[Any, ...]) -> Winner:
    rec = _validate("winners", row)
    return Winner(rec["config"], rec["median_ns"], rec["speedup"], rec["n_trials"], rec["default_ns"],
                  rec["updated_at"], rec["signature"], rec["device"], rec["toolchain"])


DECODERS: dict[str, Callable[[tuple[Any, ...]], Any]] = {
    "fingerprints": fingerprint, "kernels": kernel, "trials": trial, "winners": winner}


def select(table: str) -> str:
    """The SELECT whose rows the decoder of ``table`` takes (append WHERE / ORDER BY)."""
    return f"SELECT rowid, {', '.join(COLUMNS[table])} FROM {table}"
