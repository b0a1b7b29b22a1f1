"""Odd cache files and folders: a FIFO, a read-only folder, a failed upgrade, a file that fails SQLite's own
check, ages past the calendar. Each is one line and exit 2 (or 1 for a failed check), no hang, and the
file is left as it was unless the command writes."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper

from luminal.cache import TuningCache
from luminal.cli import cache_cmd, tune_cmd
from luminal.errors import LuminalError

LUMINAL = [sys.executable, "-c", "from luminal.cli.main import main; main()"]


def _cache(path: Path, n: int = 20) -> Path:
    with TuningCache(path) as c, c.transaction():
        for i in range(n):
            c.record_kernel(f"k{i}", "elementwise", "out = Relu(x)", [[4]])
            c.record_trial(f"k{i}", "dev", "tc", {"i": i}, "ok", [100 + i])
            c.set_winner(f"k{i}", "dev", "tc", {"i": i}, 100 + i)
    return path


def _one_line_error(r: subprocess.CompletedProcess[str] | object, text: str) -> None:
    out = r.stderr if isinstance(r, subprocess.CompletedProcess) else r.output  # type: ignore[attr-defined]
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "cache.db"
    os.mkfifo(fifo)
    for args in (["ls"], ["stats"], ["show", "k0"], ["export", str(tmp_path / "out.jsonl")], ["check"]):
        r = subprocess.run([*LUMINAL, "cache", *args, "--cache", str(fifo)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        _one_line_error(r, "is not a regular file")
    with pytest.raises(LuminalError, match="not a regular file"):
        TuningCache(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def _reads_leave_no_files(path: Path) -> None:
    before = sorted(os.listdir(path.parent))
    data = path.read_bytes()
    for args in (["ls"], ["stats"], ["show", "k3"], ["check"], ["export", os.devnull]):
        r = invoke(cache_cmd, args=["cache", *args, "--cache", str(path)])
        assert r.exit_code == 0, (args, r.output)
    with TuningCache(path, readonly=True) as c:
        w = c.best("k3", "dev", "tc")
        assert w is not None and w.config == {"i": 3}
    assert sorted(os.listdir(path.parent)) == before  # no -wal, no -shm
    assert path.read_bytes() == data


def test_reading_creates_no_wal_or_shm(tmp_path: Path):
    path = _cache(tmp_path / "c.db")
    assert path.read_bytes()[18:20] == b"\x02\x02"  # a WAL file, closed
    _reads_leave_no_files(path)


READER = """
import sys
from luminal.cache import TuningCache
with TuningCache(sys.argv[1], readonly=True) as c:
    print(c.best("k3", "dev", "tc").config["i"], len(c.kernels()))
"""


# root writes anywhere: without the capability to override file modes, a 0555 folder is read-only to it too
UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


@pytest.mark.skipif(bool(UNPRIVILEGED) and not shutil.which("setpriv"), reason="root, and no setpriv to drop it")
def test_a_cache_in_a_read_only_folder_is_readable(tmp_path: Path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _cache(folder / "c.db")
    os.chmod(path, 0o444)
    os.chmod(folder, 0o555)
    try:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        probe = subprocess.run([*UNPRIVILEGED, "touch", str(folder / "probe")], capture_output=True)
        assert probe.returncode != 0  # the folder really is read-only to the reader
        r = subprocess.run([*UNPRIVILEGED, sys.executable, "-c", READER, str(path)], capture_output=True, text=True,
                           timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["3", "20"]
        r = subprocess.run([*UNPRIVILEGED, *LUMINAL, "cache", "stats", "--cache", str(path)], capture_output=True,
                           text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(folder)) == ["c.db"]
    finally:
        os.chmod(folder, 0o755)


V1_WITH_A_CLASH = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE kernels (signature TEXT PRIMARY KEY, form TEXT, ir_text TEXT, shapes TEXT, models TEXT);
CREATE TABLE trials (id INTEGER PRIMARY KEY, signature TEXT NOT NULL, device TEXT NOT NULL,
    toolchain TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, median_ns INTEGER,
    n_samples INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE winners (signature TEXT, device TEXT, toolchain TEXT, config TEXT NOT NULL, median_ns INTEGER,
    updated_at TEXT NOT NULL, PRIMARY KEY (signature, device, toolchain));
INSERT INTO meta VALUES ('app', 'luminal-tuning-cache'), ('schema_version', '1');
"""


def test_a_failed_upgrade_leaves_the_file_as_it_was(tmp_path: Path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(V1_WITH_A_CLASH)  # kernels already has the column v2 adds: the upgrade fails
    conn.commit()
    conn.close()
    before = path.read_bytes()
    assert before[18:20] == b"\x01\x01"  # a rollback-journal file
    with pytest.raises(LuminalError, match="duplicate column"):
        TuningCache(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["old.db"]


def _fails_quick_check(path: Path) -> Path:
    """A cache whose free-page count in the header is wrong: every row reads, SQLite's check fails."""
    with TuningCache(path) as c, c.transaction():
        for i in range(300):
            c.record_trial("k", "dev", "tc", {"i": i, "pad": "x" * 500}, "crash")
        c.record_trial("k", "dev", "tc", {"i": -1}, "ok", [10])
    with TuningCache(path) as c:
        c.prune()
    data = bytearray(path.read_bytes())
    free = int.from_bytes(data[36:40], "big")
    assert free > 0
    data[36:40] = (free + 3).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with TuningCache(path, readonly=True) as c:
        assert c.check() and c.stats().trials == 1
    return path


def test_stats_fails_when_the_integrity_check_fails_and_tune_refuses_the_file(tmp_path: Path):
    path = _fails_quick_check(tmp_path / "c.db")
    before = path.read_bytes()
    for args in (["stats"], ["stats", "--json"], ["check"]):
        r = invoke(cache_cmd, args=["cache", *args, "--cache", str(path)])
        assert r.exit_code == 1, (args, r.output)
        assert "fails SQLite's integrity check: Main freelist" in r.output
    for args in (["import", os.devnull], ["prune"]):
        r = invoke(cache_cmd, args=["cache", *args, "--cache", str(path)])
        assert r.exit_code == 2
        _one_line_error(r, "fails SQLite's integrity check")
    model = tmp_path / "m.onnx"
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = invoke(tune_cmd, args=["tune", str(model), "--budget", "5s", "--cache", str(path), "--backend", "cpu"])
    assert r.exit_code == 2, r.output
    _one_line_error(r, "fails SQLite's integrity check")
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["c.db", "m.onnx"]


@pytest.mark.parametrize("age", ["9999999999999w", "99999999999999999999d", "1" + "0" * 400 + "s"])
def test_an_age_beyond_the_calendar_is_one_line(tmp_path: Path, age: str):
    path = _cache(tmp_path / "c.db")
    before = path.read_bytes()
    r = invoke(cache_cmd, args=["cache", "prune", "--older-than", age, "--cache", str(path)])
    assert r.exit_code == 2, r.output
    _one_line_error(r, "--older-than")
    assert path.read_bytes() == before


def test_prune_refuses_an_age_before_the_year_1(tmp_path: Path):
    from datetime import timedelta

    with TuningCache(_cache(tmp_path / "c.db")) as c, pytest.raises(LuminalError, match="before the year 1"):
        c.prune(older_than=timedelta(days=999_999_999))


def test_a_leftover_wal_without_shm_is_read_around_not_touched(tmp_path: Path):
    path = _cache(tmp_path / "c.db")
    (tmp_path / "c.db-wal").write_bytes(os.urandom(32))  # a stray log no writer holds (it would keep a -shm)
    _reads_leave_no_files(path)


def test_a_damaged_gzip_export_is_one_line(tmp_path: Path):
    path = _cache(tmp_path / "c.db", n=200)
    good = tmp_path / "x.jsonl.gz"
    with TuningCache(path, readonly=True) as c:
        c.export(good)
    data = good.read_bytes()
    refused = 0
    for at in range(20, len(data) - 8, max(1, (len(data) - 28) // 12)):
        bad = tmp_path / "bad.jsonl.gz"
        bad.write_bytes(data[:at] + bytes(b ^ 0x5A for b in data[at:at + 4]) + data[at + 4:])
        r = invoke(cache_cmd, args=["cache", "import", str(bad), "--cache", str(path)])
        assert r.exit_code in (0, 2), (at, r.output)  # a flip the checks cannot see may still import
        if r.exit_code == 2:
            _one_line_error(r, str(bad))
            refused += 1
    assert refused >= 6


def test_prune_makes_no_cache_where_there_is_none(tmp_path: Path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for args in (["--dry-run"], [], ["--damaged"], ["--older-than", "1d"]):
        r = invoke(cache_cmd, args=["cache", "prune", *args, "--cache", str(empty)])
        assert r.exit_code == 0 and "0 trials, 0 winners, 0 kernels" in r.output, r.output
        r = invoke(cache_cmd, args=["cache", "prune", *args, "--cache", str(tmp_path / "none.db")])
        assert r.exit_code == 2
        _one_line_error(r, "no tuning cache at")
    assert sorted(os.listdir(tmp_path)) == ["empty.db"] and empty.stat().st_size == 0
