"""The tuning cache under stress: several writers, SIGKILL mid-write, damaged or foreign files,
read-only files, and schema upgrades."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from luminal.cache import TuningCache
from luminal.cache.schema import SCHEMA_VERSION
from luminal.errors import LuminalError

WRITER = r"""
import random, sys
from luminal.cache import TuningCache
path, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(wid)
c = TuningCache(path)
print("ready", flush=True)
for i in range(n):
    sig = f"sig{i % 3}"
    med = rng.randint(1_000, 1_000_000)
    with c.transaction():
        c.record_trial(sig, "dev", "tc", {"w": wid, "i": i}, "ok", [med])
        c.propose_winner(sig, "dev", "tc", {"w": wid, "i": i}, med, default_ns=2_000_000)
c.close()
"""

# each transaction writes a batch of BATCH trials and the winner: a partial batch would show
KILLED = r"""
import random, sys
from luminal.cache import TuningCache
path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
c = TuningCache(path)
step = 0
while True:
    with c.transaction():
        for j in range(20):
            med = rng.randint(1_000, 10_000_000)
            c.record_trial("sig", "dev", "tc", {"seed": seed, "step": step, "j": j, "pad": "x" * 300}, "ok",
                           [med - 10, med, med + 10])
            c.propose_winner("sig", "dev", "tc", {"seed": seed, "step": step, "j": j}, med)
        c.record_kernel(f"k{seed}-{step}", "elementwise", "y" * 2000, [step])
    step += 1
    if step == 1:
        print("ready", flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def _consistent(path: Path, batch: int | None = None) -> int:
    """Check winners against trials from scratch; return the number of trials."""
    with TuningCache(path) as c:
        assert c.check() == []
        rows = c.conn.execute("SELECT signature, config, median_ns, n_samples FROM trials").fetchall()
        by_sig: dict[str, list] = {}
        for sig, config, med, n in rows:
            assert med is not None and n >= 1
            by_sig.setdefault(sig, []).append((med, config))
        for sig, items in by_sig.items():
            w = c.best(sig, "dev", "tc")
            assert w is not None
            assert w.median_ns == min(m for m, _ in items)
            assert w.n_trials == len(items)
        if batch:
            assert len(rows) % batch == 0
            n_kernels = c.conn.execute("SELECT count(*) FROM kernels").fetchone()[0]
            assert n_kernels * batch == len(rows)
        return len(rows)


def test_four_writers_lose_nothing(tmp_path: Path):
    path = tmp_path / "shared.db"  # not created yet: the writers race to create it too
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), "200"], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(4)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    lookups = 0
    while any(p.poll() is None for p in procs) or not lookups:  # a reader meanwhile: never blocked, never wrong
        with TuningCache(path, readonly=True) as c:
            w = c.best("sig0", "dev", "tc")
            assert w is None or w.median_ns <= 1_000_000
            lookups += 1
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert _consistent(path) == 800
    with TuningCache(path) as c:
        keys = {tuple(sorted(t.config.items())) for s in ("sig0", "sig1", "sig2") for t in c.trials(s)}
        assert len(keys) == 800
        assert len({t.uid for s in ("sig0", "sig1", "sig2") for t in c.trials(s)}) == 800


def test_sigkill_mid_write_leaves_no_partial_record(tmp_path: Path):
    path = tmp_path / "killed.db"
    total = 0
    for seed, delay in enumerate((0.05, 0.3, 0.7)):
        p = subprocess.Popen([sys.executable, "-c", KILLED, str(path), str(seed)], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
            time.sleep(delay)
        finally:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
        n = _consistent(path, batch=20)
        assert n > total
        total = n
    with TuningCache(path) as c:  # and the file still takes writes
        c.record_trial("sig", "dev", "tc", {"after": True}, "ok", [1])
        assert c.best("sig", "dev", "tc").n_trials == total + 1


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _make_cache(path: Path, n: int = 400) -> None:
    with TuningCache(path) as c, c.transaction():
        for i in range(n):
            c.record_trial(f"k{i % 7}", "dev", "tc", {"i": i, "pad": "p" * 100}, "ok", [i + 1])
        c.set_winner("k0", "dev", "tc", {"i": 0}, 1)


def _assert_refused(path: Path, match: str, readonly: bool = False) -> None:
    before = _snapshot(path)
    time.sleep(0.01)
    with pytest.raises(LuminalError, match=match) as info, TuningCache(path, readonly=readonly) as c:
        c.stats()
        c.trials("k0")
    assert "\n" not in str(info.value)
    assert _snapshot(path) == before


@pytest.mark.parametrize("readonly", [False, True])
def test_not_sqlite_is_refused_untouched(tmp_path: Path, readonly: bool):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 20)
    _assert_refused(path, "not a luminal tuning cache", readonly)
    short = tmp_path / "short.db"
    short.write_bytes(b"SQLite format 3\x00")
    _assert_refused(short, "not a luminal tuning cache", readonly)


def test_truncated_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "t.db"
    _make_cache(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _assert_refused(path, "truncated")


def test_damaged_schema_page_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "t.db"
    _make_cache(path)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 400)
    _assert_refused(path, "corrupted")


def test_damaged_data_page_is_an_error_not_a_traceback(tmp_path: Path):
    path = tmp_path / "t.db"
    _make_cache(path, n=3000)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xa5" * 8192)
    with pytest.raises(LuminalError, match="corrupted"), TuningCache(path) as c:
        problems = c.check()
        c.trials("k3")
        assert problems == []  # unreachable when the damage is seen: check() or the read raise first


def test_foreign_sqlite_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ann')")
    conn.commit()
    conn.close()
    _assert_refused(path, r"not a luminal tuning cache .*customers")
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE "evil\nname" (x)')
    conn.execute("CREATE TABLE meta (name TEXT)")  # a meta table, but not ours
    conn.commit()
    conn.close()
    _assert_refused(path, r"not a luminal tuning cache .*evil\?name")
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE meta")
    conn.execute('DROP TABLE "evil\nname"')
    conn.commit()
    conn.close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('app', 'something-else')")
    conn.commit()
    conn.close()
    _assert_refused(path, "not a luminal tuning cache")


def test_directory_is_refused(tmp_path: Path):
    with pytest.raises(LuminalError, match="directory"):
        TuningCache(tmp_path)


def test_empty_file_becomes_a_cache(tmp_path: Path):
    path = tmp_path / "empty.db"
    path.touch()
    with TuningCache(path) as c:
        c.record_trial("k", "d", "t", {}, "ok", [5])
    with TuningCache(path, readonly=True) as c:
        assert len(c.trials("k")) == 1


def test_readonly_serves_lookups(tmp_path: Path):
    path = tmp_path / "t.db"
    _make_cache(path)
    before = _snapshot(path)
    with TuningCache(path, readonly=True) as c:
        assert c.best("k0", "dev", "tc").config == {"i": 0}
        with pytest.raises(LuminalError, match="read-only"):
            c.record_trial("k0", "dev", "tc", {}, "ok", [1])
        with pytest.raises(LuminalError, match="read-only"):
            c.set_winner("k0", "dev", "tc", {}, 1)
    assert _snapshot(path) == before


def test_chmod_444_serves_lookups(tmp_path: Path):
    path = tmp_path / "t.db"
    _make_cache(path)
    os.chmod(path, 0o444)
    try:
        with TuningCache(path) as c:
            assert c.best("k0", "dev", "tc").config == {"i": 0}
            if os.geteuid() != 0:  # root may write anyway
                assert c.readonly
                with pytest.raises(LuminalError, match="read-only"):
                    c.record_trial("k0", "dev", "tc", {}, "ok", [1])
    finally:
        os.chmod(path, 0o644)


def test_readonly_missing_file_is_empty_and_not_created(tmp_path: Path):
    path = tmp_path / "missing.db"
    with TuningCache(path, readonly=True) as c:
        assert c.best("k", "d", "t") is None
        assert c.kernels() == [] and c.stats().trials == 0
    assert not path.exists()


V1_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE kernels (signature TEXT PRIMARY KEY, form TEXT, ir_text TEXT, shapes TEXT);
CREATE TABLE trials (id INTEGER PRIMARY KEY, signature TEXT NOT NULL, device TEXT NOT NULL,
    toolchain TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, median_ns INTEGER,
    n_samples INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE winners (signature TEXT, device TEXT, toolchain TEXT, config TEXT NOT NULL, median_ns INTEGER,
    updated_at TEXT NOT NULL, PRIMARY KEY (signature, device, toolchain));
INSERT INTO meta VALUES ('app', 'luminal-tuning-cache'), ('schema_version', '1');
INSERT INTO kernels VALUES ('s1', 'elementwise', 'out = Add(a, b)', '[[4]]');
INSERT INTO trials VALUES (1, 's1', 'dev', 'tc', '{"v":1}', 'ok', 900, 5, '2026-01-01T00:00:00.000000Z');
INSERT INTO trials VALUES (2, 's1', 'dev', 'tc', '{"v":2}', 'ok', 700, 5, '2026-01-01T00:00:01.000000Z');
INSERT INTO trials VALUES (3, 's1', 'dev', 'tc', '{"v":3}', 'crash', NULL, 0, '2026-01-01T00:00:02.000000Z');
INSERT INTO winners VALUES ('s1', 'dev', 'tc', '{"v":2}', 700, '2026-01-01T00:00:03.000000Z');
"""


def _v1(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(V1_DDL)
    conn.commit()
    conn.close()


def test_v1_is_upgraded_in_place(tmp_path: Path):
    path = tmp_path / "old.db"
    _v1(path)
    with pytest.raises(LuminalError, match="upgrade"):
        TuningCache(path, readonly=True)
    with TuningCache(path) as c:
        assert c.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(
            SCHEMA_VERSION)
        w = c.best("s1", "dev", "tc")
        assert w.config == {"v": 2} and w.median_ns == 700 and w.n_trials == 3 and w.speedup is None
        ts = c.trials("s1")
        assert [t.median_ns for t in ts] == [900, 700, None]
        assert len({t.uid for t in ts}) == 3
        assert c.kernel("s1").models == [] and c.kernel("s1").form == "elementwise"
        c.record_trial("s1", "dev", "tc", {"v": 4}, "ok", [600])
        assert c.propose_winner("s1", "dev", "tc", {"v": 4}, 600, default_ns=900)
        assert c.best("s1", "dev", "tc").n_trials == 4
        assert c.export(tmp_path / "old.jsonl") > 0
        assert c.check() == []
    with TuningCache(path, readonly=True) as c:  # upgraded once, readable after
        assert c.best("s1", "dev", "tc").config == {"v": 4}


def test_newer_schema_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "future.db"
    _v1(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    _assert_refused(path, "schema v99, newer than this luminal")


def test_a_new_file_switched_to_wal_under_a_lock_deadlock_is_retried(tmp_path: Path, monkeypatch):
    """Processes switching a new cache file to WAL together can deadlock on their locks inside SQLite, which then
    answers "locked" at once instead of waiting (four writers racing to create one cache lost one so). Opening
    retries the switch until its busy timeout: three refusals in a row still open the cache in WAL mode; with no
    time to wait, the refusal is the one-line locked error."""
    refusals: list[str] = []

    class Refusing(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode") and len(refusals) < 3:
                refusals.append(sql)
                raise sqlite3.OperationalError("database is locked")
            return super().execute(sql, *args)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, factory=Refusing, **k))
    with TuningCache(tmp_path / "new.db") as c:
        c.record_trial("sig", "dev", "tc", {"x": 1}, "ok", [5])
        assert c.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert len(refusals) == 3
    refusals.clear()
    with pytest.raises(LuminalError, match="locked"):
        TuningCache(tmp_path / "other.db", busy_timeout_s=0)
