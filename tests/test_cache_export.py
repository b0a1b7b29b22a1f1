"""Export and import: a portable file, merged with de-duplicated trials and the faster winner kept."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from luminal.cache import Fingerprint, TuningCache
from luminal.cache.export import FORMAT, FORMAT_VERSION
from luminal.errors import LuminalError

DEV = Fingerprint.of("cuda", {"name": "Test GPU", "capability": "9.0", "sm_count": 132})
TC = Fingerprint.of("tc", {"codegen": "1", "triton": "3.9.0"})


def _fill(c: TuningCache, tag: str, n: int = 5, winner_ns: int = 500) -> None:
    c.record_kernel("sigA", "contraction", "acc = SumReduce(Mul(a, b))", {"a": [64, 64]}, model=f"{tag}.onnx")
    for i in range(n):
        c.record_trial("sigA", DEV, TC, {"tag": tag, "i": i}, "ok", [1000 + i, 1100 + i, 1200 + i])
    c.record_trial("sigA", DEV, TC, {"tag": tag, "i": -1}, "compile_error")
    c.set_winner("sigA", DEV, TC, {"tag": tag}, winner_ns, default_ns=2000)


def _dump(c: TuningCache) -> dict:
    trials = sorted((t.uid, t.config["i"], t.status, t.median_ns, t.p10_ns, t.p90_ns, t.n_samples,
                     json.dumps(t.samples, sort_keys=True), t.created_at) for t in c.trials("sigA"))
    winners = [(w.signature, w.device, w.toolchain, w.config, w.median_ns, w.default_ns, w.n_trials)
               for w in c.winners()]
    return {"trials": trials, "winners": winners, "kernels": c.kernels(), "fingerprints": c.fingerprints()}


@pytest.mark.parametrize("name", ["dump.jsonl", "dump.jsonl.gz"])
def test_round_trip(tmp_path: Path, name: str):
    with TuningCache(tmp_path / "a.db") as a:
        _fill(a, "a")
        n = a.export(tmp_path / name)
        want = _dump(a)
    assert n == 2 + 1 + 6 + 1  # fingerprints, kernel, trials, winner
    raw = (gzip.open if name.endswith(".gz") else open)(tmp_path / name, "rt")
    with raw as f:
        header = json.loads(f.readline())
        assert header["format"] == FORMAT and header["version"] == FORMAT_VERSION
        assert {json.loads(line)["type"] for line in f} == {"device", "toolchain", "kernel", "trial", "winner"}
    with TuningCache(tmp_path / "b.db") as b:
        r = b.import_(tmp_path / name)
        assert (r.fingerprints_added, r.kernels_added, r.trials_added, r.winners_added) == (2, 1, 6, 1)
        assert _dump(b) == want
        r = b.import_(tmp_path / name)  # again: nothing new
        assert (r.trials_added, r.trials_duplicate, r.winners_kept, r.kernels_merged) == (0, 6, 1, 1)
        assert _dump(b) == want


def test_merge_keeps_faster_winner_and_unions(tmp_path: Path):
    with TuningCache(tmp_path / "fast.db") as fast:
        _fill(fast, "fast", winner_ns=300)
        fast.export(tmp_path / "fast.jsonl")
    with TuningCache(tmp_path / "slow.db") as slow:
        _fill(slow, "slow", winner_ns=800)
        slow.export(tmp_path / "slow.jsonl")
    with TuningCache(tmp_path / "mid.db") as mid:
        _fill(mid, "mid", winner_ns=500)
        r = mid.import_(tmp_path / "slow.jsonl")
        assert (r.winners_kept, r.winners_replaced, r.trials_added) == (1, 0, 6)
        assert mid.best("sigA", DEV, TC).config == {"tag": "mid"}
        r = mid.import_(tmp_path / "fast.jsonl")
        assert (r.winners_kept, r.winners_replaced, r.trials_added) == (0, 1, 6)
        w = mid.best("sigA", DEV, TC)
        assert w.config == {"tag": "fast"} and w.median_ns == 300 and w.n_trials == 18
        assert w.speedup == pytest.approx(2000 / 300)
        assert mid.kernel("sigA").models == ["mid.onnx", "slow.onnx", "fast.onnx"]
        assert len(mid.trials("sigA")) == 18


def test_import_into_readonly_is_refused(tmp_path: Path):
    with TuningCache(tmp_path / "a.db") as a:
        _fill(a, "a")
        a.export(tmp_path / "a.jsonl")
    with TuningCache(tmp_path / "a.db", readonly=True) as a, pytest.raises(LuminalError, match="read-only"):
        a.import_(tmp_path / "a.jsonl")


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.parametrize("damage, match", [
    (lambda ls: [*ls[:5], "{not json", *ls[5:]], "line 6: not JSON"),
    (lambda ls: [*ls[:5], ls[5].replace('"ok"', '"fabulous"'), *ls[6:]], "line 6: field 'status'"),
    (lambda ls: [*ls, '{"type": "trial", "uid": "x", "status": "ok"}'], "line 12: field 'signature'"),
    (lambda ls: [*ls, '{"type": "virus"}'], "line 12: unknown record type"),
    (lambda ls: [*ls, '[1, 2]'], "line 12: expected a JSON object"),
    (lambda ls: ['{"format": "something-else", "version": 1}', *ls[1:]], "line 1: not a luminal tuning cache export"),
    (lambda ls: [json.dumps({"format": FORMAT, "version": 99}), *ls[1:]], "line 1: export format version 99"),
    (lambda ls: [], "empty"),
    (lambda ls: [*ls[:5], ls[5].replace('"config":{', '"config":{"x":NaN,'), *ls[6:]], "line 6: NaN is not"),
    (lambda ls: [*ls, '{"type": "trial", "n": ' + "9" * 5000 + "}"], "line 12: not JSON"),
    (lambda ls: [*ls, "[" * 100_000 + "]" * 100_000], "line 12: not JSON"),
])
def test_bad_file_changes_nothing(tmp_path: Path, damage, match):
    with TuningCache(tmp_path / "a.db") as a:
        _fill(a, "a")
        a.export(tmp_path / "a.jsonl")
    lines = _lines(tmp_path / "a.jsonl")
    assert json.loads(lines[5])["type"] == "trial" and len(lines) == 11
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(damage(lines)) + "\n")
    with TuningCache(tmp_path / "b.db") as b:
        with pytest.raises(LuminalError, match=match) as info:
            b.import_(bad)
        assert "\n" not in str(info.value)
        s = b.stats()
        assert (s.trials, s.winners, s.kernels) == (0, 0, 0)  # all or nothing
        assert b.fingerprints() == {}


def test_missing_and_binary_files(tmp_path: Path):
    with TuningCache(tmp_path / "b.db") as b:
        with pytest.raises(LuminalError, match="does not exist"):
            b.import_(tmp_path / "nope.jsonl")
        (tmp_path / "bin").write_bytes(bytes(range(256)) * 10)
        with pytest.raises(LuminalError, match="bad export file"):
            b.import_(tmp_path / "bin")
        (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 50)
        with pytest.raises(LuminalError, match="export file"):
            b.import_(tmp_path / "broken.gz")
        with pytest.raises(LuminalError, match="cannot write"):
            b.export(tmp_path / "no" / "such" / "dir" / "x.jsonl")


def test_hand_written_minimal_file(tmp_path: Path):
    """Optional fields may be left out; the format is documented, not just whatever export writes."""
    lines = [
        {"format": FORMAT, "version": FORMAT_VERSION},
        {"type": "trial", "uid": "u1", "signature": "s", "device": "d", "toolchain": "t", "config": {"b": 1},
         "status": "ok", "median_ns": 50, "n_samples": 1, "created_at": "2026-03-01T10:00:00.000000Z"},
        {"type": "trial", "uid": "u2", "signature": "s", "device": "d", "toolchain": "t", "config": {"b": 2},
         "status": "timeout", "n_samples": 0, "created_at": "2026-03-01T10:00:01.000000Z"},
        {"type": "winner", "signature": "s", "device": "d", "toolchain": "t", "config": {"b": 1}, "median_ns": 50,
         "updated_at": "2026-03-01T10:00:02.000000Z"},
    ]
    f = tmp_path / "hand.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with TuningCache(tmp_path / "c.db") as c:
        r = c.import_(f)
        assert (r.trials_added, r.winners_added) == (2, 1)
        w = c.best("s", "d", "t")
        assert w.config == {"b": 1} and w.n_trials == 2 and w.speedup is None
        t1, t2 = c.trials("s")
        assert (t1.median_ns, t1.p10_ns, t1.samples) == (50, None, None) and t2.status == "timeout"


def test_export_to_a_fifo_writes_through_it_and_leaves_it_in_place(tmp_path: Path):
    """A target that is not a regular file (a FIFO here, /dev/null for a user) is written in place: renaming a
    temporary file over it would replace the device with a file."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with TuningCache(tmp_path / "a.db") as a:
        _fill(a, "a")
        n = a.export(fifo)
    reader.join(timeout=600)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".pipe")] == []  # no temporary file left
    lines = got[0].decode().splitlines()
    assert json.loads(lines[0])["format"] == FORMAT and len(lines) == n + 1
