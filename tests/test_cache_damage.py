"""A tuning cache whose rows are damaged (valid SQLite, bad values): every command that reads one skips
the damaged rows with one warning each, never a traceback, never a damaged winner; `cache check` lists
them and `cache prune --damaged` removes them; nothing changes on disk unless the command writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_util import invoke
from onnx import TensorProto, helper, numpy_helper

from luminal.cache import TuningCache, backend_fingerprints
from luminal.cache.records import dumps
from luminal.cli import cache_cmd, check_cmd, compile_cmd, tune_cmd
from luminal.codegen.backend import Backend, get_backend
from luminal.codegen.partition import fusible_edges, fusion_key, partition
from luminal.frontend_onnx import load


def _cpu() -> Backend | None:
    try:
        return get_backend("cpu")
    except Exception:  # no C compiler: the commands that compile are skipped
        return None


CPU = _cpu()
needs_cpu = pytest.mark.skipif(CPU is None, reason="no C compiler on this machine")


def _model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((6,)).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def make_cache(path: Path, model: Path) -> dict[str, str]:
    """A cache written by the code, the way tune writes one: each kernel of ``model`` recorded, tried and
    won under the C backend's keys, and a fusion winner. Returns the signatures {"kernel", "fusion"}."""
    backend = CPU if CPU is not None else get_backend("reference")
    dev, tc = backend_fingerprints(backend)
    graph = load(str(model), {}).graph
    kernels = partition(graph)
    with TuningCache(path) as c, c.transaction():
        for k in kernels:
            config = dict(backend.default_schedule(k)) if CPU is not None else {"block": 4}
            c.record_kernel(k.signature, k.form, k.canonical(), {"full": list(k.full)}, model.name)
            c.record_trial(k.signature, dev, tc, config, "ok", [900, 1000, 1100])
            c.record_trial(k.signature, dev, tc, config, "crash")
            c.set_winner(k.signature, dev, tc, config, 1000, default_ns=1200)
        unfused = [list(e) for e in fusible_edges(graph)][:1]
        c.record_trial(fusion_key(graph, kernels), dev, tc, {"unfused": unfused}, "ok", [5000])
        c.set_winner(fusion_key(graph, kernels), dev, tc, {"unfused": []}, 5000, default_ns=6000)  # the default plan
    assert not Path(f"{path}-wal").exists()  # closed: everything is in the main file
    return {"kernel": kernels[0].signature, "fusion": fusion_key(graph, kernels)}


def _sql(*statements: str) -> Callable[[Path, dict[str, str]], None]:
    def damage(path: Path, sigs: dict[str, str]) -> None:
        conn = sqlite3.connect(path)
        for st in statements:
            assert conn.execute(st.format(**sigs)).rowcount >= 1, st
        conn.commit()
        conn.execute("PRAGMA journal_mode = WAL")  # as the cache keeps it
        conn.close()

    return damage


def _flip(path: Path, sigs: dict[str, str]) -> None:
    """Bytes flipped inside a row: the kernel winner's config (and its trials') turn into invalid UTF-8."""
    with TuningCache(path, readonly=True) as c:
        config = c.winners(sigs["kernel"])[0].config
    data = bytearray(path.read_bytes())
    text = dumps(config).encode()
    at = data.find(text)
    assert at > 0
    while at > 0:
        for i in range(at + 1, at + len(text) - 1):
            data[i] ^= 0x80
        at = data.find(text, at + 1)
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path, dict[str, str]], None]] = {
    "flipped bytes": _flip,
    "config not JSON": _sql("UPDATE winners SET config = '{{\"threads\": 2' WHERE signature = '{kernel}'"),
    "config a list": _sql("UPDATE winners SET config = '[1, 2]' WHERE signature = '{kernel}'"),
    "unfused an int": _sql("UPDATE winners SET config = '{{\"unfused\": 7}}' WHERE signature = '{fusion}'"),
    "median as text": _sql("UPDATE winners SET median_ns = 'fast' WHERE signature = '{kernel}'",
                           "UPDATE winners SET median_ns = '12' WHERE signature = '{fusion}'"),
    "fingerprint garbage": _sql("UPDATE fingerprints SET info = 'garbage{{' WHERE kind = 'device'",
                                "UPDATE fingerprints SET kind = x'00ff' WHERE kind = 'toolchain'"),
    "non-finite JSON": _sql("UPDATE fingerprints SET info = '{{\"mc\": NaN}}' WHERE kind = 'device'",
                            "UPDATE winners SET config = '{{\"threads\": Infinity}}' WHERE signature = '{kernel}'"),
    "kernel garbage": _sql("UPDATE kernels SET models = '[', shapes = x'ff00'",
                           "INSERT INTO kernels (signature, models) VALUES (x'c3', '[]')"),
    "trial garbage": _sql("UPDATE trials SET samples = 'oops' WHERE status = 'ok' AND signature = '{kernel}'",
                          "UPDATE trials SET n_samples = 'many', config = x'c328' WHERE status = 'crash'",
                          "UPDATE trials SET created_at = 17, status = 'weird' WHERE signature = '{fusion}'"),
}


def damaged_cache(tmp_path: Path, kinds: list[str]) -> tuple[Path, Path, dict[str, str]]:
    model = _model(tmp_path / "m.onnx")
    path = tmp_path / "tuning.db"
    sigs = make_cache(path, model)
    for kind in kinds:
        DAMAGE[kind](path, sigs)
    return path, model, sigs


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and ".db" in p.name}


def run_ok(*args: str, codes: tuple[int, ...] = (0, 2)) -> tuple[int, list[str]]:
    """Run a command in-process: an allowed exit code, no traceback, an exit 2 in exactly one line, each
    warning once. Returns (exit code, warning lines)."""
    r = invoke(cache_cmd, check_cmd, compile_cmd, tune_cmd, args=list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code in codes, (args, r.exit_code, r.output[-2000:])
    assert "Traceback" not in r.output, (args, r.output)
    if r.exit_code == 2:
        assert len(r.output.strip().splitlines()) == 1, (args, r.output)
    warnings = [line for line in r.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == len(set(warnings)), (args, warnings)
    assert all("damaged" in w for w in warnings), warnings
    return r.exit_code, warnings


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_cache_commands_skip_damaged_rows(tmp_path: Path, kind: str):
    path, _, sigs = damaged_cache(tmp_path, [kind])
    before = _files(tmp_path)
    db = ["--cache", str(path)]
    seen = []
    for args in (["stats"], ["ls"], ["ls", "--json"], ["show", sigs["kernel"]], ["show", sigs["fusion"], "--json"],
                 ["export", str(tmp_path / "out.jsonl")]):
        code, warnings = run_ok("cache", *args, *db)
        assert code == 0, args
        seen += warnings
    assert seen, "the damage was never reported"
    code, _ = run_ok("cache", "check", *db, codes=(1,))
    assert _files(tmp_path) == before  # reading changed nothing, left no -wal / -shm
    # what the export holds is whole: it imports into a fresh cache
    fresh = tmp_path / "fresh.db"
    run_ok("cache", "import", str(tmp_path / "out.jsonl"), "--cache", str(fresh), codes=(0,))
    with TuningCache(fresh) as c:
        assert c.damaged() == []
    # importing into the damaged cache writes over damaged winners, keeps the rest
    code, _ = run_ok("cache", "import", str(tmp_path / "out.jsonl"), *db, codes=(0,))
    run_ok("cache", "prune", *db, codes=(0,))
    run_ok("cache", "prune", "--damaged", "--dry-run", *db, codes=(0,))
    run_ok("cache", "prune", "--damaged", *db, codes=(0,))
    code, warnings = run_ok("cache", "check", *db, codes=(0,))
    assert warnings == []
    with TuningCache(path, readonly=True) as c:
        assert c.damaged() == []


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_row_is_never_a_winner(tmp_path: Path, kind: str):
    path, _, sigs = damaged_cache(tmp_path, [kind])
    warned: list[str] = []
    with TuningCache(path, readonly=True, warn=warned.append) as c:
        winners = c.winners()
        damaged = c.damaged()
        for w in winners:
            assert isinstance(w.config, dict) and isinstance(w.median_ns, int)
            if w.signature.startswith("fusion-"):
                assert isinstance(w.config["unfused"], list)
        for key in ("kernel", "fusion"):
            best = c.best(sigs[key], winners[0].device if winners else "d", winners[0].toolchain if winners else "t")
            assert best is None or best in winners
        c.trials(sigs["kernel"]), c.kernels(), c.fingerprints(), c.stats()
    assert damaged, kind
    assert len(warned) == len(set(warned)) and warned
    named = [str(d) for d in damaged]
    assert all(any(n in w for n in named) for w in warned)  # each warning names a damaged row
    assert all(any(str(d) in w for w in warned) for d in damaged if d.table in ("winners", "fingerprints"))


def test_check_lists_each_damaged_row(tmp_path: Path):
    path, _, sigs = damaged_cache(tmp_path, list(DAMAGE))
    r = invoke(cache_cmd, args=["cache", "check", "--cache", str(path), "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["integrity"] == "ok"
    tables = {d["table"] for d in data["damaged"]}
    assert tables == {"fingerprints", "kernels", "trials", "winners"}
    assert {d["key"] for d in data["damaged"] if d["table"] == "winners"} == {sigs["kernel"], sigs["fusion"]}
    text = invoke(cache_cmd, args=["cache", "check", "--cache", str(path)]).stdout
    assert f"{len(data['damaged'])} damaged rows" in text and "winners row" in text


@needs_cpu
def test_compile_check_and_tune_with_every_damage(tmp_path: Path):
    path, model, _ = damaged_cache(tmp_path, list(DAMAGE))
    before = _files(tmp_path)
    code, warnings = run_ok("compile", str(model), "--backend", "cpu", "--cache", str(path), "--json")
    assert code == 0 and warnings
    code, warnings = run_ok("check", str(model), "--backend", "cpu", "--cache", str(path), codes=(0,))
    assert _files(tmp_path) == before
    code, warnings = run_ok("tune", str(model), "--backend", "cpu", "--budget", "3s", "--cache", str(path),
                            "--storage", f"sqlite:///{tmp_path / 'studies.db'}", "--json", "-", codes=(0,))
    with TuningCache(path, readonly=True) as c:
        assert c.check() == []  # tune wrote beside the damaged rows (what it found depends on the machine's load)


@needs_cpu
def test_compile_takes_no_damaged_winner(tmp_path: Path):
    model = _model(tmp_path / "m.onnx")
    good = tmp_path / "good.db"
    make_cache(good, model)

    def hits(path: Path) -> int:
        r = invoke(compile_cmd, args=["compile", str(model), "--backend", "cpu", "--cache", str(path), "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout[r.stdout.index("{"):])["cache"]["hits"]

    n = hits(good)
    assert n >= 1
    for kind in ("config not JSON", "config a list", "median as text", "flipped bytes"):
        folder = tmp_path / kind.replace(" ", "_")
        folder.mkdir()
        path, _, _ = damaged_cache(folder, [kind])
        assert hits(path) == n - 1, kind
