"""The tuning cache API: records, winners keyed by all three fingerprints, queries, pruning, default path."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from luminal.cache import Fingerprint, TuningCache, Winner, default_cache_path
from luminal.errors import LuminalError

DEV = Fingerprint.of("cpu", {"model": "test cpu", "isa": ["avx2"], "cores": 8})
DEV2 = Fingerprint.of("cpu", {"model": "other cpu", "isa": [], "cores": 4})
TC = Fingerprint.of("tc", {"codegen": "1", "cc": "cc 12"})
TC2 = Fingerprint.of("tc", {"codegen": "2", "cc": "cc 12"})


@pytest.fixture
def cache(tmp_path: Path):
    c = TuningCache(tmp_path / "t.db")
    yield c
    c.close()


def test_new_file_is_created_in_wal_mode(tmp_path: Path):
    path = tmp_path / "sub" / "dir" / "t.db"
    with TuningCache(path) as c:
        assert c.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        assert c.stats().trials == 0
    assert path.exists()


def test_trial_statistics(cache: TuningCache):
    samples = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100]
    tid = cache.record_trial("k1", DEV, TC, {"block": 64}, "ok", samples)
    [t] = cache.trials("k1")
    assert t.id == tid and t.status == "ok" and t.config == {"block": 64}
    assert (t.median_ns, t.p10_ns, t.p90_ns, t.n_samples) == (600, 200, 1000, 11)
    assert t.samples["min"] == 100 and t.samples["max"] == 1100 and t.samples["mean"] == 600.0
    assert t.device == DEV.key and t.toolchain == TC.key
    fid = cache.record_trial("k1", DEV, TC, {"block": 128}, "compile_error")
    assert fid > tid
    assert cache.trials("k1", status="compile_error")[0].median_ns is None
    assert [t.id for t in cache.trials("k1", device=DEV, toolchain=TC.key)] == [tid, fid]
    assert cache.trials("k1", device=DEV2) == []
    with pytest.raises(ValueError):
        cache.record_trial("k1", DEV, TC, {}, "great")
    with pytest.raises(ValueError):
        cache.record_trial("k1", DEV, TC, {"f": object()}, "ok")


def test_winner_needs_all_three_keys(cache: TuningCache):
    cache.set_winner("k1", DEV, TC, {"block": 64}, median_ns=1000, default_ns=3000)
    w = cache.best("k1", DEV, TC)
    assert isinstance(w, Winner)
    assert w.config == {"block": 64} and w.median_ns == 1000 and w.speedup == pytest.approx(3.0)
    assert cache.best("k1", DEV.key, TC.key) == w
    assert cache.best("k2", DEV, TC) is None
    assert cache.best("k1", DEV2, TC) is None
    assert cache.best("k1", DEV, TC2) is None


def test_propose_keeps_the_faster(cache: TuningCache):
    assert cache.propose_winner("k", DEV, TC, {"v": 1}, 500, default_ns=1000)
    assert not cache.propose_winner("k", DEV, TC, {"v": 2}, 700)
    assert not cache.propose_winner("k", DEV, TC, {"v": 3}, 500)
    assert cache.best("k", DEV, TC).config == {"v": 1}
    assert cache.propose_winner("k", DEV, TC, {"v": 4}, 250)
    w = cache.best("k", DEV, TC)
    assert w.config == {"v": 4} and w.median_ns == 250
    assert w.default_ns == 1000 and w.speedup == pytest.approx(4.0)  # default time carried over
    cache.set_winner("k", DEV, TC, {"v": 5}, 900)  # forced, even though slower
    assert cache.best("k", DEV, TC).config == {"v": 5}
    with pytest.raises(ValueError):
        cache.propose_winner("k", DEV, TC, {"v": 6}, 0)


def test_winner_counts_trials(cache: TuningCache):
    for i in range(3):
        cache.record_trial("k", DEV, TC, {"i": i}, "ok", [100 + i])
    cache.record_trial("k", DEV2, TC, {"i": 9}, "ok", [5])  # another device: not counted
    cache.propose_winner("k", DEV, TC, {"i": 0}, 100)
    assert cache.best("k", DEV, TC).n_trials == 3
    cache.record_trial("k", DEV, TC, {"i": 3}, "timeout")
    assert cache.best("k", DEV, TC).n_trials == 4


def test_transaction_is_all_or_nothing(cache: TuningCache):
    with pytest.raises(RuntimeError), cache.transaction():
        cache.record_trial("k", DEV, TC, {"i": 1}, "ok", [10])
        cache.propose_winner("k", DEV, TC, {"i": 1}, 10)
        raise RuntimeError("boom")
    assert cache.trials("k") == [] and cache.best("k", DEV, TC) is None
    with cache.transaction():
        cache.record_trial("k", DEV, TC, {"i": 1}, "ok", [10])
        cache.propose_winner("k", DEV, TC, {"i": 1}, 10)
    assert len(cache.trials("k")) == 1 and cache.best("k", DEV, TC).n_trials == 1


def test_kernels_and_models(cache: TuningCache):
    cache.record_kernel("abc123", "reduction", "r0 = SumReduce(x, axes=(1,))", {"x": [4, 8]}, model="a.onnx")
    cache.record_kernel("abc123", "reduction", "r0 = SumReduce(x, axes=(1,))", {"x": [4, 8]}, model="b.onnx")
    cache.record_kernel("abc123", "reduction", "r0 = SumReduce(x, axes=(1,))", {"x": [4, 8]}, model="a.onnx")
    cache.record_trial("abc123", DEV, TC, {"b": 1}, "ok", [10])
    cache.record_trial("zzz999", DEV, TC, {"b": 1}, "crash")  # tried but never recorded as a kernel
    cache.set_winner("abc123", DEV, TC, {"b": 1}, 10, default_ns=25)
    ks = {k.signature: k for k in cache.kernels()}
    assert set(ks) == {"abc123", "zzz999"}
    k = ks["abc123"]
    assert k.form == "reduction" and k.models == ["a.onnx", "b.onnx"] and k.shapes == {"x": [4, 8]}
    assert (k.n_trials, k.n_winners, k.best_speedup) == (1, 1, pytest.approx(2.5))
    assert ks["zzz999"].form is None and ks["zzz999"].n_trials == 1
    assert cache.kernel("abc123") == k and cache.kernel("nope") is None
    assert cache.resolve("abc") == "abc123" and cache.resolve("zzz999") == "zzz999"
    with pytest.raises(LuminalError, match="no kernel signature"):
        cache.resolve("q")
    cache.record_kernel("abd000", "gather", "", [])
    with pytest.raises(LuminalError, match="ambiguous"):
        cache.resolve("ab")


def test_stats_and_fingerprints(cache: TuningCache):
    cache.record_trial("k", DEV, TC, {}, "ok", [1, 2, 3])
    cache.record_trial("k", DEV, TC2, {}, "wrong_result", [1])
    s = cache.stats()
    assert (s.kernels, s.trials, s.winners) == (0, 2, 0)
    assert s.by_status == {"ok": 1, "wrong_result": 1}
    assert s.devices == {DEV.key: 2} and set(s.toolchains) == {TC.key, TC2.key}
    assert s.size_bytes > 0 and s.schema_version == 2 and s.oldest <= s.newest
    fps = cache.fingerprints()
    assert fps[DEV.key] == {"kind": "device", "info": DEV.info}
    assert fps[TC2.key] == {"kind": "toolchain", "info": TC2.info}
    assert cache.check() == []


def test_prune(cache: TuningCache):
    cache.record_kernel("old", "elementwise", "x", [])
    cache.record_kernel("new", "elementwise", "y", [])
    cache.record_trial("old", DEV, TC, {"i": 0}, "ok", [10])
    cache.record_trial("new", DEV, TC, {"i": 1}, "ok", [10])
    cache.record_trial("new", DEV, TC, {"i": 2}, "crash")
    cache.record_trial("new", DEV, TC2, {"i": 3}, "ok", [5])
    cache.set_winner("old", DEV, TC, {"i": 0}, 10)
    cache.set_winner("new", DEV, TC, {"i": 1}, 10)
    cache.set_winner("new", DEV, TC2, {"i": 3}, 5)
    with cache.transaction():  # age the "old" records
        cache.conn.execute("UPDATE trials SET created_at = '2020-01-01T00:00:00.000000Z' WHERE signature = 'old'")
        cache.conn.execute("UPDATE winners SET updated_at = '2020-01-01T00:00:00.000000Z' WHERE signature = 'old'")

    dry = cache.prune(dry_run=True)
    assert dry.dry_run and dry.trials == 1 and cache.stats().trials == 4

    r = cache.prune()  # failed trials only
    assert (r.trials, r.winners, r.kernels) == (1, 0, 0)
    assert cache.best("new", DEV, TC).n_trials == 1

    r = cache.prune(older_than=timedelta(days=30), failed=False)
    assert (r.trials, r.winners, r.kernels) == (1, 1, 1)
    assert cache.best("old", DEV, TC) is None and cache.kernel("old") is None

    r = cache.prune(other_toolchains=TC.key, failed=False)
    assert (r.trials, r.winners, r.kernels) == (1, 1, 0)
    assert cache.best("new", DEV, TC2) is None and cache.best("new", DEV, TC) is not None
    assert cache.prune(other_toolchains=[TC.key, TC2.key]).trials == 0


def test_default_path(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("LUMINAL_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_path() == tmp_path / "home" / ".cache" / "luminal" / "tuning.db"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "luminal" / "tuning.db"
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path / "env.db"))
    with TuningCache() as c:
        assert c.path == tmp_path / "env.db"
    with TuningCache(tmp_path / "explicit.db") as c:
        assert c.path == tmp_path / "explicit.db"
    assert (tmp_path / "env.db").exists() and (tmp_path / "explicit.db").exists()


def test_closed_cache_errors_cleanly(tmp_path: Path):
    c = TuningCache(tmp_path / "t.db")
    c.close()
    with pytest.raises(LuminalError, match="closed"):
        c.best("k", DEV, TC)
    with pytest.raises(LuminalError, match="closed"):
        c.record_trial("k", DEV, TC, {}, "ok")


def test_nested_failure_rolls_back_only_itself(cache: TuningCache):
    with cache.transaction():
        cache.record_trial("k", DEV, TC, {"i": 1}, "ok", [10])
        try:
            with cache.transaction():
                cache.record_trial("k", DEV, TC, {"i": 2}, "ok", [20])
                raise RuntimeError("inner")
        except RuntimeError:
            pass
        assert cache.prune(failed=False, other_toolchains="none", dry_run=True).trials == 1
    assert [t.config for t in cache.trials("k")] == [{"i": 1}]
    assert cache.fingerprints()[DEV.key]["kind"] == "device"
