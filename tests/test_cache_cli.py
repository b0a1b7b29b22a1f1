"""``luminal cache ...``: tables for people, --json for machines, one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import invoke

from luminal.cache import Fingerprint, TuningCache, backend_fingerprints
from luminal.cli import cache_cmd
from luminal.codegen.backend import get_backend

DEV = Fingerprint.of("cpu", {"model": "cli cpu"})
TC = Fingerprint.of("tc", {"codegen": "1", "cc": "cli cc"})


def run(*args: str, code: int = 0):
    result = invoke(cache_cmd, args=["cache", *args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "c.db"
    with TuningCache(path) as c:
        c.record_kernel("deadbeef01", "elementwise", "out = Add(x, y)", {"x": [8]}, model="m.onnx")
        c.record_kernel("cafe0002", "reduction", "r = SumReduce(x)", {"x": [8, 8]})
        for i in range(4):
            c.record_trial("deadbeef01", DEV, TC, {"vec": 2 ** i}, "ok", [400 - 50 * i, 410 - 50 * i])
        c.record_trial("deadbeef01", DEV, TC, {"vec": 64}, "crash")
        c.propose_winner("deadbeef01", DEV, TC, {"vec": 8}, 255, default_ns=405)
    return str(path)


def test_ls(db: str):
    data = json.loads(run("ls", "--cache", db, "--json").stdout)
    ks = {k["signature"]: k for k in data["kernels"]}
    assert set(ks) == {"deadbeef01", "cafe0002"}
    assert ks["deadbeef01"]["n_trials"] == 5 and ks["deadbeef01"]["n_winners"] == 1
    assert "ir_text" not in ks["deadbeef01"]
    out = run("ls", "--cache", db).stdout
    assert "deadbeef01" in out and "1.59x" in out and "2 kernels" in out


def test_show(db: str):
    data = json.loads(run("show", "deadb", "--cache", db, "--json", "--trials", "2").stdout)
    assert data["kernel"]["signature"] == "deadbeef01" and data["kernel"]["models"] == ["m.onnx"]
    assert data["by_status"] == {"ok": 4, "crash": 1}
    assert [t["config"]["vec"] for t in data["fastest_trials"]] == [8, 4]
    assert data["winners"][0]["config"] == {"vec": 8}
    out = run("show", "deadbeef01", "--cache", db).stdout
    assert "Add(x, y)" in out and "vec=8" in out and "1.59x" in out
    r = run("show", "ffff", "--cache", db, code=2)
    assert "no kernel signature starting with 'ffff'" in r.output and len(r.output.strip().splitlines()) == 1


def test_stats(db: str):
    data = json.loads(run("stats", "--cache", db, "--json").stdout)
    assert (data["kernels"], data["trials"], data["winners"]) == (2, 5, 1)
    assert data["by_status"] == {"crash": 1, "ok": 4} and data["integrity"] == "ok"
    assert "integrity" in run("stats", "--cache", db).stdout


def test_export_import(db: str, tmp_path: Path):
    out = tmp_path / "x.jsonl.gz"
    data = json.loads(run("export", str(out), "--cache", db, "--json").stdout)
    assert data["records"] == 2 + 2 + 5 + 1 and out.exists()
    other = str(tmp_path / "other.db")
    data = json.loads(run("import", str(out), "--cache", other, "--json").stdout)
    assert data["trials_added"] == 5 and data["winners_added"] == 1 and data["kernels_added"] == 2
    assert "0 trials (5 already there)" in run("import", str(out), "--cache", other).stdout
    with TuningCache(other, readonly=True) as c:
        assert c.best("deadbeef01", DEV, TC).config == {"vec": 8}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    r = run("import", str(bad), "--cache", other, code=2)
    assert "line 1: not JSON" in r.output and len(r.output.strip().splitlines()) == 1


def test_prune(db: str):
    data = json.loads(run("prune", "--cache", db, "--json", "--dry-run").stdout)
    assert data["trials"] == 1 and data["dry_run"]
    assert "removed 1 trials" in run("prune", "--cache", db).stdout
    assert json.loads(run("prune", "--older-than", "30d", "--cache", db, "--json").stdout)["trials"] == 0
    # every record here was made by a toolchain this machine does not have
    data = json.loads(run("prune", "--other-toolchains", "--cache", db, "--json").stdout)
    assert (data["trials"], data["winners"], data["kernels"]) == (4, 1, 1)
    r = run("prune", "--older-than", "soon", "--cache", db, code=2)
    assert "bad duration" in r.output


def test_prune_keeps_this_machines_toolchain(tmp_path: Path):
    path = tmp_path / "c.db"
    mine = backend_fingerprints(get_backend("cpu"))[1]  # the key tune and compile use
    with TuningCache(path) as c:
        c.record_trial("k", DEV, mine, {}, "ok", [1])
        c.record_trial("k", DEV, TC, {}, "ok", [1])
    data = json.loads(run("prune", "--other-toolchains", "--cache", str(path), "--json").stdout)
    assert data["trials"] == 1
    with TuningCache(path, readonly=True) as c:
        assert [t.toolchain for t in c.trials("k")] == [mine.key]


@pytest.mark.parametrize("cmd", [["ls"], ["stats"], ["show", "abc"], ["prune"], ["export", "out.jsonl"]])
def test_bad_cache_file_is_exit_2(tmp_path: Path, cmd: list[str]):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 100)
    r = run(*cmd, "--cache", str(bad), code=2)
    assert r.output.strip().startswith("error:") and len(r.output.strip().splitlines()) == 1
    assert bad.read_bytes() == b"\x00garbage" * 100


def test_names_are_never_markup(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cache_cmd.console, "width", 250)
    path = tmp_path / "c.db"
    with TuningCache(path) as c:
        c.record_kernel("k[red]1", "elementwise", "[bold]x[/bold]", [], model="[blink]evil.onnx")
    out = run("ls", "--cache", str(path)).stdout
    assert "[blink]evil.onnx" in out and "k[red]1" in out
    out = run("show", "k[red]1", "--cache", str(path)).stdout
    assert "[bold]x[/bold]" in out and "[blink]evil.onnx" in out


def test_missing_cache_is_an_error_and_creates_nothing(tmp_path: Path):
    path = tmp_path / "none.db"
    for cmd in (["ls"], ["stats"], ["check"], ["show", "abc"], ["export", str(tmp_path / "out.jsonl")]):
        r = run(*cmd, "--cache", str(path), code=2)
        assert r.output.strip().splitlines() == [f"error: no tuning cache at {path}"]
    assert not path.exists() and not (tmp_path / "out.jsonl").exists()


def test_real_entry_point(tmp_path: Path):
    bad = tmp_path / "bad.db"
    bad.write_text("not a db")
    r = subprocess.run([sys.executable, "-c", "from luminal.cli.main import main; main()", "cache", "ls",
                        "--cache", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {bad} is not a luminal tuning cache (not a SQLite database)"]
