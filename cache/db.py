"""The tuning cache: one SQLite file of kernels, timed trials and the best config per
(kernel signature, device fingerprint, toolchain fingerprint).

WAL mode, a busy timeout, and every write in one ``BEGIN IMMEDIATE`` transaction: several
processes may write at once, and a process killed mid-write leaves no partial record.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from .. import __version__
from ..errors import LuminalError
from . import export as export_file
from . import rows, schema
from .check import check_header
from .fingerprint import Fingerprint
from .records import (
    CacheStats,
    ImportReport,
    KernelRecord,
    PruneReport,
    SampleStats,
    Trial,
    Winner,
    dumps,
    now_iso,
    to_iso,
)

if TYPE_CHECKING:
    from sqlite_utils import Database

BUSY_TIMEOUT_S = 30.0
BATCH = 5000
_TRIAL_COLS = ("uid", "signature", "device", "toolchain", "config", "status", "median_ns", "p10_ns", "p90_ns",
               "n_samples", "samples", "created_at")  # the fields of a Trial after its id
_INSERT_TRIAL = f"INTO trials ({', '.join(_TRIAL_COLS)}) VALUES ({', '.join('?' * len(_TRIAL_COLS))})"
_IN_SIGNATURES = " WHERE signature IN (SELECT value FROM json_each(?))"  # the signatures of a JSON list
F = TypeVar("F", bound=Callable[..., Any])


def default_cache_path() -> Path:
    """``$LUMINAL_CACHE``, else ``$XDG_CACHE_HOME/luminal/tuning.db``, else ``~/.cache/luminal/tuning.db``."""
    if os.environ.get("LUMINAL_CACHE"):
        return Path(os.environ["LUMINAL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "luminal" / "tuning.db"


def _guarded(fn: F) -> F:
    """Turn SQLite failures into one-line LuminalErrors that name the file."""

    @functools.wraps(fn)
    def wrapper(self: TuningCache, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except (sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # misuse of the API (e.g. another thread), not a problem with the file
        except sqlite3.Error as e:
            raise self._error(e) from None

    return wrapper  # type: ignore[return-value]


class _Rollback(Exception):
    pass


def _key(fp: str | Fingerprint) -> str:
    key = fp.key if isinstance(fp, Fingerprint) else fp
    if not isinstance(key, str) or not key:
        raise ValueError("device and toolchain must be Fingerprints or non-empty key strings")
    return key


def _config(config: dict[str, Any]) -> str:
    if not isinstance(config, dict):
        raise ValueError("config must be a dict")
    try:
        return dumps(config)
    except (TypeError, ValueError) as e:
        raise ValueError(f"config is not plain JSON: {e}") from None


def _speedup(default_ns: int | None, median_ns: int | None) -> float | None:
    return default_ns / median_ns if default_ns and median_ns else None


def warn_stderr(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


def _busy(e: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock."""
    low = str(e).lower()
    return "locked" in low or "busy" in low


def _check_settled(path: Path, tries: int = 20) -> None:
    """check_header, allowing a file that another process is creating right now (a few KB, seconds
    old) to finish its first page before it is judged."""
    for attempt in range(tries):
        try:
            check_header(path)
            return
        except LuminalError:
            st = path.stat()
            if attempt == tries - 1 or st.st_size > 65536 or time.time() - st.st_mtime > 2.0:
                raise
            time.sleep(0.05)


class TuningCache:
    """Open (creating, checking or upgrading) the tuning cache at ``path``.

    ``path`` None means :func:`default_cache_path`. ``readonly=True`` (or a file this process
    may not write) serves lookups only and changes nothing on disk; a missing file then reads as an
    empty cache. A damaged row is skipped and reported once through ``warn``; opening for writes
    refuses a file that fails SQLite's quick check.
    """

    def __init__(self, path: str | Path | None = None, readonly: bool = False,
                 busy_timeout_s: float = BUSY_TIMEOUT_S, warn: Callable[[str], None] = warn_stderr) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.readonly = readonly
        self._busy_s = busy_timeout_s
        self._warn = warn
        self._warned: set[tuple[str, int]] = set()
        self._depth = 0
        self._memory = False
        self._fp_known: set[str] = set()  # fingerprints this connection has stored and committed
        self._fp_pending: set[str] = set()
        self.conn: sqlite3.Connection | None = None
        if self.path.exists():
            if self.path.is_dir():
                raise LuminalError(f"tuning cache {self.path} is a directory, not a file")
            if not self.path.is_file():  # a FIFO or a device: opening it could block forever
                raise LuminalError(f"tuning cache {self.path} is not a regular file")
            _check_settled(self.path)
            if not readonly and not os.access(self.path, os.W_OK):
                self.readonly = True
        elif readonly:
            self._memory = True
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LuminalError(f"cannot create the cache folder {self.path.parent}: {e.strerror or e}") from None
        try:
            self._open()
        except sqlite3.Error as e:
            self.close()
            raise self._error(e) from None
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ opening

    def _connect(self) -> sqlite3.Connection:
        if self._memory:
            conn = sqlite3.connect(":memory:", isolation_level=None)
        elif self.readonly:
            # Without -wal and -shm files no writer is connected (a WAL writer keeps both while it is): read the
            # file as it is, so that a read creates no -wal / -shm beside it and works in a folder we may not write.
            live = all(Path(f"{self.path}-{end}").exists() for end in ("wal", "shm"))
            conn = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro{'' if live else '&immutable=1'}",
                                   uri=True, timeout=self._busy_s, isolation_level=None)
        else:
            conn = sqlite3.connect(str(self.path), timeout=self._busy_s, isolation_level=None)
        conn.text_factory = rows.text_factory
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_s * 1000)}")
        return conn

    def _open(self) -> None:
        self.conn = self._connect()
        version = self._inspect()
        if self._memory:
            with self.transaction(_internal=True):
                schema.create(self._tables())
            return
        if self.readonly:
            if version is None:  # an empty SQLite file: nothing cached yet
                self.close()
                self._memory = True
                self._open()
            elif version < schema.SCHEMA_VERSION:
                raise LuminalError(f"tuning cache {self.path} uses schema v{version}; open it once with write "
                                   f"access to upgrade it to v{schema.SCHEMA_VERSION}")
            return
        if version is not None:  # an existing cache: nothing changes in it until it is known sound
            problems = self.check()
            if problems:
                raise LuminalError(f"tuning cache {self.path} is corrupted: it fails SQLite's integrity check "
                                   f"({problems[0][:120]}); restore a copy or delete it")
        self._db.execute("PRAGMA synchronous = NORMAL")  # with WAL: safe against crashes, not power loss
        if version is None:  # a new file: WAL from the first page, so readers never see it half-made
            self._wal()
        if version != schema.SCHEMA_VERSION:
            with self.transaction():
                version = self._inspect()  # another process may have created or upgraded it meanwhile
                if version is None:
                    schema.create(self._tables())
                elif version < schema.SCHEMA_VERSION:
                    schema.migrate(self._tables(), version)
        self._wal()  # only after an upgrade succeeded: a failed one leaves the file's header as it was

    def _wal(self) -> None:
        # Processes switching a new file to WAL at once can deadlock inside SQLite (each holds the shared lock the
        # other's exclusive one waits for), which then answers "locked" at once instead of waiting: the statement,
        # which holds no lock after failing, is retried until the busy timeout
        deadline = time.monotonic() + self._busy_s
        while True:
            try:
                mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if not _busy(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
        if mode.lower() != "wal":
            raise LuminalError(f"tuning cache {self.path}: cannot switch it to WAL mode (network file system?)")

    def _tables(self) -> Database:
        """sqlite-utils over our connection, for creating and upgrading tables (imported only then)."""
        from sqlite_utils import Database

        return Database(self.conn, execute_plugins=False)

    def _inspect(self) -> int | None:
        """Schema version of an existing cache, None for an empty file; foreign files raise."""
        assert self.conn is not None
        tables = {r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if not tables:
            return None
        meta = {}
        if "meta" in tables:
            try:
                meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.OperationalError as e:
                if "no such column" not in str(e):
                    raise
        if meta.get("app") != schema.APP_NAME:
            names = ["".join(ch if ch.isprintable() else "?" for ch in t[:40]) for t in sorted(tables)[:5]]
            listed = ", ".join(names) + (", ..." if len(tables) > 5 else "")
            raise LuminalError(f"{self.path} is not a luminal tuning cache (a SQLite database with tables {listed})")
        try:
            version = int(meta.get("schema_version", ""))
        except (TypeError, ValueError):  # NULL, a blob, text
            raise LuminalError(f"tuning cache {self.path} is corrupted (bad schema version)") from None
        if version > schema.SCHEMA_VERSION:
            raise LuminalError(f"tuning cache {self.path} has schema v{version}, newer than this luminal reads "
                               f"(v{schema.SCHEMA_VERSION}); upgrade luminal or use another --cache")
        if version < 1 or (version == schema.SCHEMA_VERSION and not set(schema.TABLES) <= tables):
            raise LuminalError(f"tuning cache {self.path} is corrupted (tables missing)")
        return version

    def _error(self, e: sqlite3.Error) -> LuminalError:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        low = msg.lower()
        if _busy(e):
            return LuminalError(f"tuning cache {self.path} is locked by another process (waited {self._busy_s:g} s)")
        if "readonly" in low or "read-only" in low:
            return LuminalError(f"tuning cache {self.path} is read-only")
        if any(w in low for w in ("malformed", "not a database", "corrupt", "no such table", "no such column")):
            return LuminalError(f"tuning cache {self.path} is corrupted or unreadable ({msg})")
        if "unable to open" in low:
            return LuminalError(f"cannot open tuning cache {self.path}: {msg}")
        return LuminalError(f"tuning cache {self.path}: {msg}")

    @property
    def _db(self) -> sqlite3.Connection:
        if self.conn is None:
            raise LuminalError("the tuning cache is closed")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self._db.close()
            self.conn = None

    def __enter__(self) -> TuningCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningCache({str(self.path)!r}, readonly={self.readonly})"

    # ------------------------------------------------------------ transactions

    @contextlib.contextmanager
    def transaction(self, _internal: bool = False) -> Iterator[TuningCache]:
        """One write transaction, all or nothing; a nested call is a savepoint inside the outer one."""
        if self.conn is None:
            raise LuminalError("the tuning cache is closed")
        if self.readonly and not _internal:
            raise LuminalError(f"tuning cache {self.path} is open read-only")
        if self._depth:
            name = f"luminal_{self._depth}"
            self._db.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute(f"ROLLBACK TO {name}")
                    self._db.execute(f"RELEASE {name}")
                self._fp_pending = set()  # unsure which were rolled back: store them again next time
                raise
            else:
                self._db.execute(f"RELEASE {name}")
            finally:
                self._depth -= 1
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # e.g. disk full: leave the connection usable
                    self._db.execute("ROLLBACK")
                raise
            self._fp_known |= self._fp_pending
        finally:
            self._depth = 0
            self._fp_pending = set()

    def _store_fingerprints(self, *fps: str | Fingerprint) -> None:
        for fp, kind in zip(fps, ("device", "toolchain")):
            if isinstance(fp, Fingerprint) and fp.key not in self._fp_known:
                self._db.execute("INSERT OR IGNORE INTO fingerprints (key, kind, info) VALUES (?, ?, ?)",
                                  (fp.key, kind, dumps(fp.info)))
                self._fp_pending.add(fp.key)

    # ------------------------------------------------------------ writing

    @_guarded
    def record_kernel(self, signature: str, form: str, ir_text: str, shapes: Any, model: str | None = None) -> None:
        """Remember what a signature stands for, and which models contain it."""
        now = now_iso()
        with self.transaction():
            self._merge_kernel({"signature": signature, "form": form, "ir_text": ir_text, "shapes": shapes,
                                "models": [model] if model else [], "first_seen": now, "last_seen": now})

    @_guarded
    def record_trial(self, signature: str, device: str | Fingerprint, toolchain: str | Fingerprint,
                     config: dict[str, Any], status: str, samples_ns: list[int] | None = None) -> int:
        """Store one timed (or failed) candidate; returns its id."""
        if status not in schema.STATUSES:
            raise ValueError(f"status must be one of {schema.STATUSES}, not {status!r}")
        dev, tc, cfg = _key(device), _key(toolchain), _config(config)
        st = SampleStats.of(samples_ns)
        with self.transaction():
            self._store_fingerprints(device, toolchain)
            cur = self._db.execute(
                "INSERT " + _INSERT_TRIAL,
                (uuid.uuid4().hex, signature, dev, tc, cfg, status, st.median_ns, st.p10_ns, st.p90_ns, st.n,
                 dumps(st.summary) if st.summary else None, now_iso()))
            self._db.execute("UPDATE winners SET n_trials = n_trials + 1"
                             " WHERE signature = ? AND device = ? AND toolchain = ?", (signature, dev, tc))
            rowid = cur.lastrowid
            assert rowid is not None
            return rowid

    def _put_winner(self, signature: str, device: str | Fingerprint, toolchain: str | Fingerprint,
                    config: dict[str, Any], median_ns: int, default_ns: int | None, force: bool) -> bool:
        if isinstance(median_ns, bool) or not isinstance(median_ns, int) or median_ns <= 0:
            raise ValueError("a winner needs a positive integer median_ns")
        key = (signature, _key(device), _key(toolchain))
        cfg = _config(config)
        with self.transaction():
            self._store_fingerprints(device, toolchain)
            return self._write_winner(key, cfg, median_ns, default_ns, now_iso(), force) != "kept"

    def _write_winner(self, key: tuple[str, str, str], config: str, median_ns: int, default_ns: int | None,
                      updated_at: str, force: bool) -> str:
        """Store the winner of ``key`` unless (without ``force``) the stored one is at least as fast; a
        missing ``default_ns`` keeps the stored one. Returns "added", "replaced" or "kept"."""
        where = "signature = ? AND device = ? AND toolchain = ?"
        stored = self._db.execute(f"{rows.select('winners')} WHERE {where}", key).fetchone()
        if stored is not None:
            try:
                w = rows.winner(stored)
                row = (w.median_ns, w.default_ns)
            except rows.DamagedRow as e:  # the new winner takes the damaged one's place
                self._report(e.damaged, "replaced")
                self._db.execute("DELETE FROM winners WHERE rowid = ?", (stored[0],))
                stored = None
        if stored is None:
            self._db.execute(
                "INSERT INTO winners (signature, device, toolchain, config, median_ns, default_ns, speedup,"
                f" n_trials, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT count(*) FROM trials WHERE {where}), ?)",
                (*key, config, median_ns, default_ns, _speedup(default_ns, median_ns), *key, updated_at))
            return "added"
        if not force and row[0] is not None and median_ns >= row[0]:
            return "kept"
        default_ns = default_ns if default_ns is not None else row[1]
        self._db.execute(
            f"UPDATE winners SET config = ?, median_ns = ?, default_ns = ?, speedup = ?, updated_at = ? WHERE {where}",
            (config, median_ns, default_ns, _speedup(default_ns, median_ns), updated_at, *key))
        return "replaced"

    @_guarded
    def set_winner(self, signature: str, device: str | Fingerprint, toolchain: str | Fingerprint,
                   config: dict[str, Any], median_ns: int, default_ns: int | None = None) -> None:
        """Make ``config`` the winner for the key, whatever was there."""
        self._put_winner(signature, device, toolchain, config, median_ns, default_ns, force=True)

    @_guarded
    def propose_winner(self, signature: str, device: str | Fingerprint, toolchain: str | Fingerprint,
                       config: dict[str, Any], median_ns: int, default_ns: int | None = None) -> bool:
        """Keep the faster of ``config`` and the current winner; True when ``config`` won."""
        return self._put_winner(signature, device, toolchain, config, median_ns, default_ns, force=False)

    # ------------------------------------------------------------ reading

    @_guarded
    def best(self, signature: str, device: str | Fingerprint, toolchain: str | Fingerprint) -> Winner | None:
        """The winner when all three keys match, else None."""
        if self.conn is None:
            raise LuminalError("the tuning cache is closed")
        found = self._decoded("winners", self._db.execute(
            rows.select("winners") + " WHERE signature = ? AND device = ? AND toolchain = ?",
            (signature, _key(device), _key(toolchain))))
        return found[0] if found else None

    @_guarded
    def winners(self, signature: str | None = None) -> list[Winner]:
        return self._decoded("winners", self._db.execute(
            rows.select("winners") + (" WHERE signature = ?" if signature else "") + " ORDER BY signature, device",
            (signature,) if signature else ()))

    def _decoded(self, table: str, cursor: Iterable[tuple[Any, ...]]) -> list[Any]:
        """The rows that decode; each damaged one is skipped and reported once."""
        decode = rows.DECODERS[table]
        out = []
        for r in cursor:
            try:
                out.append(decode(r))
            except rows.DamagedRow as e:
                self._report(e.damaged)
        return out

    def _report(self, damaged: rows.Damaged, done: str = "skipped") -> None:
        if (damaged.table, damaged.rowid) not in self._warned:
            self._warned.add((damaged.table, damaged.rowid))
            hint = " (`luminal cache prune --damaged` removes it)" if done == "skipped" else ""
            self._warn(f"tuning cache {self.path}: {done} damaged {damaged}{hint}")

    @_guarded
    def trials(self, signature: str, device: str | Fingerprint | None = None,
               toolchain: str | Fingerprint | None = None, status: str | None = None,
               limit: int | None = None) -> list[Trial]:
        """Trials of one signature, oldest first, optionally narrowed by key and status."""
        where, args = ["signature = ?"], [signature]
        for col, val in (("device", device), ("toolchain", toolchain)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(_key(val))
        if status is not None:
            where.append("status = ?")
            args.append(status)
        sql = f"{rows.select('trials')} WHERE {' AND '.join(where)} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._decoded("trials", self._db.execute(sql, args))

    _KERNELS_SQL = """
        WITH sigs AS (SELECT signature FROM kernels UNION SELECT signature FROM trials
                      UNION SELECT signature FROM winners),
             tc AS (SELECT signature, count(*) AS n FROM trials GROUP BY signature),
             wc AS (SELECT signature, count(*) AS n, max(speedup) AS s FROM winners GROUP BY signature)
        SELECT k.rowid, s.signature, k.form, k.ir_text, k.shapes, k.models, k.first_seen, k.last_seen,
               coalesce(tc.n, 0), coalesce(wc.n, 0), wc.s
        FROM sigs s LEFT JOIN kernels k USING (signature) LEFT JOIN tc USING (signature)
             LEFT JOIN wc USING (signature) {where}
        ORDER BY coalesce(k.last_seen, '') DESC, s.signature"""

    def _kernels(self, where: str = "", args: tuple[str, ...] = ()) -> list[KernelRecord]:
        out = []
        for r in self._db.execute(self._KERNELS_SQL.format(where=where), args):
            counts = (r[8], r[9], r[10] if isinstance(r[10], float) else None)
            if r[0] is None and not rows.clean(r[1]):
                continue  # a damaged signature of a trial or winner: that row is reported where it is read
            try:
                out.append(rows.kernel(r[:8], *counts) if r[0] is not None else
                           KernelRecord(r[1], None, None, None, [], None, None, *counts))
            except rows.DamagedRow as e:
                self._report(e.damaged)
        return out

    @_guarded
    def kernels(self) -> list[KernelRecord]:
        """Every signature the cache knows (recorded, tried or won), newest first, with counts."""
        return self._kernels()

    @_guarded
    def kernel(self, signature: str) -> KernelRecord | None:
        found = self._kernels("WHERE s.signature = ?", (signature,))
        return found[0] if found else None

    @_guarded
    def resolve(self, prefix: str) -> str:
        """The one signature starting with ``prefix`` (like a short git hash)."""
        found = [r[0] for r in self._db.execute(
            "SELECT signature FROM kernels WHERE substr(signature, 1, ?) = ? UNION "
            "SELECT signature FROM winners WHERE substr(signature, 1, ?) = ? UNION "
            "SELECT DISTINCT signature FROM trials WHERE substr(signature, 1, ?) = ? LIMIT 11",
            (len(prefix), prefix) * 3) if rows.clean(r[0])]
        if prefix in found:
            return prefix
        if not found:
            raise LuminalError(f"no kernel signature starting with {prefix[:80]!r} in {self.path}")
        if len(found) > 1:
            raise LuminalError(f"signature prefix {prefix[:80]!r} is ambiguous ({len(found)}+ matches)")
        return found[0]

    @_guarded
    def fingerprints(self) -> dict[str, dict[str, Any]]:
        found = self._decoded("fingerprints", self._db.execute(rows.select("fingerprints") + " ORDER BY key"))
        return {k: {"kind": kind, "info": info} for k, kind, info in found}

    def size_bytes(self) -> int:
        if self._memory:
            return 0
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    @_guarded
    def stats(self) -> CacheStats:
        q = self._db.execute
        counts = {t: q(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("kernels", "trials", "winners")}
        times = q("SELECT min(created_at), max(created_at) FROM trials"
                  " WHERE typeof(created_at) = 'text' AND length(created_at) = 27").fetchone()
        oldest, newest = (t if rows.clean(t) else None for t in times)

        def by(col: str) -> dict[str, int]:
            out: dict[str, int] = {}
            for value, n in q(f"SELECT {col}, count(*) FROM trials GROUP BY {col} ORDER BY {col}"):
                name = value if rows.clean(value) else "(damaged)"
                out[name] = out.get(name, 0) + n
            return out

        return CacheStats(
            path=str(self.path), size_bytes=self.size_bytes(), schema_version=schema.SCHEMA_VERSION,
            readonly=self.readonly, kernels=counts["kernels"], trials=counts["trials"], winners=counts["winners"],
            by_status=by("status"), devices=by("device"), toolchains=by("toolchain"), oldest=oldest, newest=newest,
        )

    @_guarded
    def check(self) -> list[str]:
        """SQLite's own consistency check: [] when the file is sound."""
        found = [line for r in self._db.execute("PRAGMA quick_check") for line in str(r[0]).splitlines()
                 if line and not line.startswith("*** in database")]
        return [] if found == ["ok"] else found

    @_guarded
    def damaged(self) -> list[rows.Damaged]:
        """Every row that does not decode, table by table (a full read of the file)."""
        out = []
        for table, decode in rows.DECODERS.items():
            for r in self._db.execute(rows.select(table)):
                try:
                    decode(r)
                except rows.DamagedRow as e:
                    out.append(e.damaged)
        return out

    @_guarded
    def prune_damaged(self, dry_run: bool = False) -> list[rows.Damaged]:
        """Delete every row that does not decode (winners' trial counts redone); returns them."""
        found = self.damaged()
        with self.transaction(_internal=self._memory):  # an empty file read as a cache: nothing to remove
            for d in found:
                if not dry_run:
                    self._db.execute(f"DELETE FROM {d.table} WHERE rowid = ?", (d.rowid,))
            if found and not dry_run:
                self._db.execute(schema.RECOUNT_TRIALS)
        return found

    # ------------------------------------------------------------ export / import

    @_guarded
    def export(self, path: str | Path) -> int:
        """Write everything to a portable JSON-lines file (gzip for *.gz); returns the record count."""
        own = not self._db.in_transaction
        if own:
            self._db.execute("BEGIN")  # one consistent snapshot, even while others write
        try:
            header = {"luminal": __version__, "schema_version": schema.SCHEMA_VERSION, "exported_at": now_iso()}
            return export_file.write(path, header, self._records())
        finally:
            if own:
                self._db.execute("COMMIT")

    def _records(self) -> Iterator[dict[str, Any]]:
        """Every row that decodes, as an export record; damaged rows are skipped and reported."""
        q = self._db.execute
        for table, order in (("fingerprints", "key"), ("kernels", "rowid"), ("trials", "id"), ("winners", "rowid")):
            decode = rows.DECODERS[table]
            for r in q(f"{rows.select(table)} ORDER BY {order}"):
                try:
                    rec = decode(r)
                except rows.DamagedRow as e:
                    self._report(e.damaged)
                    continue
                if table == "fingerprints":
                    yield {"type": rec[1], "key": rec[0], "info": rec[2]}
                elif table == "kernels":
                    now = now_iso()
                    yield {"type": "kernel", "signature": rec.signature, "form": rec.form, "ir_text": rec.ir_text,
                           "shapes": rec.shapes, "models": rec.models, "first_seen": rec.first_seen or rec.last_seen
                           or now, "last_seen": rec.last_seen or rec.first_seen or now}
                elif table == "trials":
                    yield {"type": "trial", **{k: getattr(rec, k) for k in _TRIAL_COLS}}
                else:
                    yield {"type": "winner", "signature": rec.signature, "device": rec.device,
                           "toolchain": rec.toolchain, "config": rec.config, "median_ns": rec.median_ns,
                           "default_ns": rec.default_ns, "speedup": rec.speedup, "updated_at": rec.updated_at}

    @_guarded
    def import_(self, path: str | Path) -> ImportReport:
        """Merge an export: trials de-duplicated by uid, the faster measured winner kept per key.

        All or nothing: a bad line anywhere leaves the cache as it was.
        """
        counts = dict.fromkeys(ImportReport.__dataclass_fields__, 0)
        trials: list[tuple] = []
        trial_row = operator.itemgetter(*_TRIAL_COLS)
        touched: set[str] = set()  # signatures whose winners need their trials recounted

        def flush() -> None:
            before = self._db.total_changes
            # plain executemany: sqlite-utils' per-value conversion costs more than the insert here
            self._db.executemany("INSERT OR IGNORE " + _INSERT_TRIAL, trials)
            added = self._db.total_changes - before
            counts["trials_added"] += added
            counts["trials_duplicate"] += len(trials) - added
            trials.clear()

        self._db.execute("PRAGMA cache_size = -65536")  # 64 MB while merging: the uid index is written at random
        try:
            with self.transaction():
                for kind, rec in export_file.read(path):
                    if kind == "trial":
                        rec["config"] = dumps(rec["config"])
                        rec["samples"] = dumps(rec["samples"]) if rec.get("samples") else None
                        row = trial_row(rec)
                        trials.append(row)
                        touched.add(row[1])
                        if len(trials) >= BATCH:
                            flush()
                    elif kind in ("device", "toolchain"):
                        before = self._db.total_changes
                        self._db.execute("INSERT OR IGNORE INTO fingerprints (key, kind, info) VALUES (?, ?, ?)",
                                          (rec["key"], rec["kind"], dumps(rec["info"])))
                        counts["fingerprints_added"] += self._db.total_changes - before
                    elif kind == "kernel":
                        counts["kernels_added" if self._merge_kernel(rec) else "kernels_merged"] += 1
                    else:
                        key = (rec["signature"], rec["device"], rec["toolchain"])
                        counts["winners_" + self._write_winner(key, dumps(rec["config"]), rec["median_ns"],
                                                               rec["default_ns"], rec["updated_at"], force=False)] += 1
                        touched.add(rec["signature"])
                flush()
                self._db.execute(schema.RECOUNT_TRIALS + _IN_SIGNATURES, (dumps(sorted(touched)),))
        finally:
            self._db.execute("PRAGMA cache_size = -2000")
        return ImportReport(**counts)

    def _merge_kernel(self, rec: dict[str, Any]) -> bool:
        """Add the kernel, or merge it into the stored one (models united, first and last seen widened);
        True when it was new."""
        stored = self._db.execute(f"{rows.select('kernels')} WHERE signature = ?", (rec["signature"],)).fetchone()
        if stored is not None:
            try:
                k = rows.kernel(stored)
                row = (k.models, k.first_seen, k.last_seen)
            except rows.DamagedRow as e:  # the record takes the damaged one's place
                self._report(e.damaged, "replaced")
                self._db.execute("DELETE FROM kernels WHERE rowid = ?", (stored[0],))
                stored = None
        if stored is None:
            self._db.execute(
                "INSERT INTO kernels (signature, form, ir_text, shapes, models, first_seen, last_seen)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (rec["signature"], rec["form"], rec["ir_text"], dumps(rec["shapes"]), dumps(rec["models"]),
                 rec["first_seen"], rec["last_seen"]))
            return True
        models = list(row[0])
        models += [m for m in rec["models"] if m not in models]
        first = min(x for x in (row[1], rec["first_seen"]) if x)
        last = max(x for x in (row[2], rec["last_seen"]) if x)
        self._db.execute(
            "UPDATE kernels SET form = coalesce(form, ?), ir_text = coalesce(ir_text, ?), shapes = coalesce(shapes, ?),"
            " models = ?, first_seen = ?, last_seen = ? WHERE signature = ?",
            (rec["form"], rec["ir_text"], dumps(rec["shapes"]), dumps(models), first, last, rec["signature"]))
        return False

    # ------------------------------------------------------------ pruning

    @_guarded
    def prune(self, older_than: timedelta | None = None, other_toolchains: str | Iterable[str] | None = None,
              failed: bool = True, dry_run: bool = False) -> PruneReport:
        """Delete failed trials, records older than ``older_than``, and records of toolchains other than
        ``other_toolchains`` (the key, or keys, to keep). Kernels left with nothing are dropped."""
        n_trials = n_winners = 0
        touched: set[str] = set()

        def delete(table: str, where: str, args: tuple[str, ...] = ()) -> int:
            deleted = self._db.execute(f"DELETE FROM {table} WHERE {where} RETURNING signature", args).fetchall()
            touched.update(r[0] for r in deleted if rows.clean(r[0]))
            return len(deleted)

        cutoff = None
        if older_than is not None:
            try:
                cutoff = (to_iso(datetime.now(UTC) - older_than),)
            except OverflowError:
                raise LuminalError(f"an age of {older_than.days} days reaches back before the year 1") from None

        try:
            with self.transaction(_internal=self._memory):  # an empty file read as a cache: nothing to remove
                if failed:
                    n_trials += delete("trials", "status != 'ok'")
                if cutoff is not None:
                    n_trials += delete("trials", "created_at < ?", cutoff)
                    n_winners += delete("winners", "updated_at < ?", cutoff)
                if other_toolchains is not None:
                    keep = (other_toolchains,) if isinstance(other_toolchains, str) else tuple(other_toolchains)
                    marks = ", ".join("?" * len(keep)) or "NULL"
                    n_trials += delete("trials", f"toolchain NOT IN ({marks})", keep)
                    n_winners += delete("winners", f"toolchain NOT IN ({marks})", keep)
                pruned = (dumps(sorted(touched)),)
                n_kernels = self._db.execute(
                    "DELETE FROM kernels" + _IN_SIGNATURES + " AND signature NOT IN (SELECT signature FROM trials)"
                    " AND signature NOT IN (SELECT signature FROM winners)", pruned).rowcount
                self._db.execute(schema.RECOUNT_TRIALS + _IN_SIGNATURES, pruned)
                report = PruneReport(n_trials, n_winners, n_kernels, dry_run)
                if dry_run:
                    raise _Rollback
        except _Rollback:
            pass
        return report
