"""Fuzz cases of each family: model files, tuning-cache files and command-line values.

``make_case(family, index, ctx)`` is a pure function of its arguments and the run's seed, so a case can be
made again from its family and index alone.
"""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fuzz_models import ODD_NAMES, byte_mutant, structural_mutant
from fuzz_runner import Case
from fuzz_seeds import Seed

FAMILIES = ("model", "cache", "cli")
TINY = "tiny.onnx"
CACHE = "tuning.db"


@dataclass(frozen=True)
class Base:
    """Real files made by luminal once per run: a tuned cache, its export and a bench report."""

    cache: bytes  # a tuning cache written by `luminal tune` (WAL mode, checkpointed)
    export: bytes  # `luminal cache export` of it (JSON lines)
    bench: bytes  # `luminal bench --json` of the tiny model
    signature: str  # a kernel signature in the cache


@dataclass(frozen=True)
class Context:
    seed: int
    seeds: tuple[Seed, ...]
    tiny: Seed
    base: Base
    surface: dict[str, frozenset[str]]  # command -> its options, as the app has them now
    scratch: Path  # a folder for temporary files


def make_case(family: str, index: int, ctx: Context) -> Case:
    rng = random.Random(f"{ctx.seed}:{family}:{index}")
    return CASE_MAKERS[family](rng, index, ctx)


# ---------------------------------------------------------------- model files


def model_case(rng: random.Random, index: int, ctx: Context) -> Case:
    seed = rng.choice(ctx.seeds)
    if rng.random() < 0.3:
        data, how = byte_mutant(rng, seed, rng.choice(ctx.seeds))
    else:
        data, how = structural_mutant(rng, seed)
    if seed.small:
        command = rng.choice((["check", "m.onnx", "--backend", "cpu"], ["inspect", "m.onnx"],
                              ["compile", "m.onnx", "--backend", "cpu"]))
    elif len(seed.data) < 50_000:  # a small zoo graph compiles in seconds once its kernels are built
        command = rng.choice((["inspect", "m.onnx"], ["inspect", "m.onnx"], ["compile", "m.onnx", "--backend", "cpu"]))
    else:  # the large ones take half a minute to compile cold: inspect only
        command = ["inspect", "m.onnx"]
    if seed.name == "dynamic" and command[0] != "inspect" and rng.random() < 0.8:
        command += ["--shape", "N=2"]
    files = (("m.onnx", data), *seed.extra)
    return Case("model", index, f"{seed.name}: {how}", tuple(command), files, untouched=tuple(n for n, _ in files),
                names_from_files=True)


# ---------------------------------------------------------------- cache files

ODD_VALUES: tuple[object, ...] = (
    None, 0, -1, 2**63 - 1, -(2**63), 1.5, 1e308, -0.0, "", "not json", "{", "[1, 2]", "1", "null", '"s"', "{}",
    '{"vec": "x"}', '{"vec": -1}', '{"impl": 7}', '{"threads": 100000}', '{"mc": 1e309}', '{"mc": NaN}',
    "[" * 100000 + "]" * 100000, "x" * 100000, "bogus", "ok", "12abc", "\x1b[31mred", "[bold]x", "a\nb", "*/",
    b"\xff\xfe\x00garbage", b"", b"\x80" * 16,
)


def _damage_rows(rng: random.Random, path: Path, base: Base) -> str:
    db = sqlite3.connect(path)
    try:
        table = rng.choice(("trials", "trials", "winners", "winners", "kernels", "fingerprints", "meta"))
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})") if row[1] != "id"]
        count = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if not count:
            return f"{table}: empty"
        rowid = db.execute(f"SELECT rowid FROM {table} LIMIT 1 OFFSET ?", (rng.randrange(count),)).fetchone()[0]
        column = rng.choice(columns)
        value = rng.choice(ODD_VALUES)
        if isinstance(value, str) and rng.random() < 0.3:
            value = value.encode()  # the same text, stored as a blob
        for attempt in (value, b"\xff\x00", "\x00"):
            try:
                db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (attempt, rowid))
                value = attempt
                break
            except sqlite3.IntegrityError:  # NOT NULL or a duplicate key: damage another way
                continue
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return f"{table}.{column} row {rowid} = {str(value)[:40]!r}"
    finally:
        db.close()


def _damage_bytes(rng: random.Random, data: bytearray) -> str:
    page = 4096
    choice = rng.randrange(5)
    if choice == 0:  # flip bytes inside the rows' pages
        for _ in range(rng.choice((1, 2, 8))):
            i = rng.randrange(min(page, len(data) - 1), len(data))
            data[i] ^= 1 << rng.randrange(8)
        return "flipped bytes in data pages"
    if choice == 1:
        n = rng.choice((0, 16, 100, page, page + rng.randrange(len(data) - page), len(data) - 1))
        del data[n:]
        return f"truncated to {n}"
    if choice == 2:
        i = rng.randrange(len(data) // page) * page
        data[i:i + page] = bytes(page)
        return f"zeroed page @{i}"
    if choice == 3:
        i = rng.randrange(100)
        data[i] ^= 0xFF
        return f"header byte {i} flipped"
    data.extend(rng.randbytes(rng.choice((1, 100, page))))
    return "garbage appended"


def _damaged_export(rng: random.Random, base: Base) -> tuple[str, bytes, str]:
    lines = base.export.decode().splitlines()
    choice = rng.randrange(5)
    i = rng.randrange(len(lines))
    if choice == 0:
        record = json.loads(lines[i])
        key = rng.choice(sorted(_keys(record)))
        _set(record, key, rng.choice([v for v in ODD_VALUES if not isinstance(v, bytes)] + [[], {}, True]))
        lines[i] = json.dumps(record)
        how = f"export line {i} {key} replaced"
    elif choice == 1:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        how = f"export line {i} truncated"
    elif choice == 2:
        lines.insert(i, rng.choice(("", "{}", "[]", "null", "1", '{"kind": "trial"}', "\x00\xff", "{" * 10000)))
        how = f"odd line at {i}"
    elif choice == 3:
        flipped = bytearray("\n".join(lines).encode())
        for _ in range(rng.choice((1, 4))):
            j = rng.randrange(len(flipped))
            flipped[j] ^= 1 << rng.randrange(8)
        return "x.jsonl", bytes(flipped), "export bytes flipped"
    else:
        data = gzip.compress("\n".join(lines).encode())
        cut = rng.randrange(len(data))
        return "x.jsonl.gz", data[:cut] if rng.random() < 0.5 else data[:cut] + b"\x00" + data[cut + 1:], "damaged gz"
    return "x.jsonl", ("\n".join(lines) + "\n").encode(), how


def _keys(record: dict[str, object], prefix: str = "") -> list[str]:
    out = []
    for k, v in record.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += _keys(v, prefix + k + ".")
    return out


def _set(record: dict[str, object], dotted: str, value: object) -> None:
    *path, last = dotted.split(".")
    for k in path:
        record = record[k]  # type: ignore[assignment]
    record[last] = value


def _cache_commands(ctx: Context) -> list[list[str]]:
    sig = ctx.base.signature
    cmds = [["cache", "ls"], ["cache", "ls", "--json"], ["cache", "stats"], ["cache", "stats", "--json"],
            ["cache", "show", sig[:6]], ["cache", "show", sig, "--json"], ["cache", "export", "out.jsonl"],
            ["cache", "export", "out.jsonl.gz", "--json"], ["cache", "prune"], ["cache", "prune", "--dry-run"],
            ["cache", "prune", "--older-than", "1d"], ["cache", "prune", "--other-toolchains"],
            ["compile", TINY, "--backend", "cpu"], ["check", TINY, "--backend", "cpu"],
            ["cache", "import", "good.jsonl"]]
    if "check" in ctx.surface.get("cache", frozenset()):
        cmds += [["cache", "check"], ["cache", "check", "--json"]]
    if "--damaged" in ctx.surface.get("cache prune", frozenset()):
        cmds += [["cache", "prune", "--damaged"], ["cache", "prune", "--damaged", "--dry-run"]]
    return cmds


def _special_cache(rng: random.Random, ctx: Context, files: list[tuple[str, bytes]]) -> tuple[
        str, str, list[tuple[str, bytes]], tuple[str, ...], tuple[str, ...], bool]:
    """Not a damaged database but an odd file: a FIFO, a folder, a read-only folder, a missing folder..."""
    special = rng.choice(("fifo", "folder", "empty", "text", "model", "readonly", "readonly-missing",
                          "missing-folder", "odd-name", "wal-garbage"))
    cache, fifos, folders = CACHE, tuple[str, ...](), tuple[str, ...]()
    if special == "fifo":
        fifos = (CACHE,)
    elif special == "folder":
        folders = (CACHE,)
    elif special == "empty":
        files.append((CACHE, b""))
    elif special == "text":
        files.append((CACHE, b"hello, I am not a database\n"))
    elif special in ("model", "readonly"):
        files.append((CACHE, ctx.tiny.data if special == "model" else ctx.base.cache))
    elif special == "missing-folder":
        cache = "no/such/folder/tuning.db"
    elif special == "odd-name":
        cache = rng.choice(("-", " ", "a\nb.db", "[bold]x.db", "\x1b[31m.db", "*/.db"))
        files.append((cache, ctx.base.cache))
    elif special == "wal-garbage":
        files += [(CACHE, ctx.base.cache), (CACHE + "-wal", rng.randbytes(rng.choice((32, 4096, 9000))))]
    return special, cache, files, fifos, folders, special.startswith("readonly")


TUNE = ["tune", TINY, "--backend", "cpu", "--budget", "1s", "--workers", "1", "--storage", "sqlite:///studies.db"]


def cache_case(rng: random.Random, index: int, ctx: Context) -> Case:
    files: list[tuple[str, bytes]] = [(TINY, ctx.tiny.data), ("good.jsonl", ctx.base.export)]
    fifos: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    readonly = False
    cache = CACHE
    command = rng.choice(_cache_commands(ctx)) if rng.random() > 0.05 else list(TUNE)
    kind = rng.random()
    if kind < 0.45:
        with tempfile.NamedTemporaryFile(dir=ctx.scratch, suffix=".db") as tmp:
            path = Path(tmp.name)
            path.write_bytes(ctx.base.cache)
            how = _damage_rows(rng, path, ctx.base)
            if rng.random() < 0.3:
                how += "; " + _damage_rows(rng, path, ctx.base)
            files.append((CACHE, path.read_bytes()))
            Path(f"{path}-wal").unlink(missing_ok=True)
            Path(f"{path}-shm").unlink(missing_ok=True)
    elif kind < 0.65:
        damaged = bytearray(ctx.base.cache)
        how = _damage_bytes(rng, damaged)
        files.append((CACHE, bytes(damaged)))
    elif kind < 0.85:
        name, data, how = _damaged_export(rng, ctx.base)
        files.append((name, data))
        command = ["cache", "import", name]
        if rng.random() < 0.5:
            files.append((CACHE, ctx.base.cache))
    else:
        how, cache, files, fifos, folders, readonly = _special_cache(rng, ctx, files)
    if readonly and command[0] == "cache" and command[1] == "export":
        command = ["cache", "export", "/dev/null"]
    argv = [*command, "--cache", cache]
    untouched = (cache,) if _reads_only(argv) else ()
    # a path typed on the command line may be echoed as typed; names read from a cache or an export may not
    return Case("cache", index, how, tuple(argv), tuple(files), fifos, folders, readonly, untouched,
                names_from_files=how != "odd-name")


def _reads_only(argv: list[str]) -> bool:
    """The cache commands that must leave the cache file as it is (and create no -wal or -shm beside it)."""
    return argv[0] == "cache" and (argv[1] in ("ls", "show", "stats", "export", "check") or "--dry-run" in argv)


# ---------------------------------------------------------------- command-line values

NUMBERS = ("", "0", "-1", "1", "2", "3", "1000", "100000", str(2**31 - 1), str(2**31), str(2**32), str(2**63),
           str(2**64), str(-(2**63)), "nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "0x10", "1_000", " 1", "abc",
           "1.5", "-0")
# seconds: what must be refused (not finite, negative, overflowing) and short valid values; no long valid ones,
# since a run that was asked to take a day is no hang
SECONDS = ("", "0", "-1", "0.5", "1", "nan", "inf", "-inf", "1e308", "-1e308", "1e-320", str(2**64), "abc", "0x10",
           "0_1", "-0")
COUNTS = ("", "0", "-1", "1", "2", "3", "nan", "abc", "1.5", "-0", str(2**63), str(2**64), str(-(2**63)), "1e3")
BUDGETS = ("0s", "-1s", "1s", "nans", "infs", "", "-", "1", "0", "1e309s", "abc", "1x")
DURATIONS = ("0s", "-1s", "1s", "1w", "9999999999999w", "1e9h", "nans", "30", "1h30m", "", "1", "-", "1.5m", "infs",
             "1y", "0")
PERCENTS = ("5%", "-5%", "nan%", "1e309%", "0%", "100%", "abc", "", "5", "%", "inf%", "1e-400%")
PATHS = ("-", "", ".", "/dev/null", "/dev/full", "out", "new/dir/x", "m.onnx", "a\nb", "[bold]x", "\x1b[31mx",
         "*/")
STORAGE = ("sqlite://", "sqlite:///", "sqlite:///new/dir/x.db", "sqlite:///studies.db", "sqlite:///:memory:",
           ":memory:", "mysql://u@127.0.0.1:1/x", "postgresql://u@127.0.0.1:1/x", "redis://", "file:///tmp",
           "studies.db", "", "-", "bogus://x", "sqlite:///tiny.onnx", "sqlite:///good.json")
SHAPES = ("x=4x16", "x=0x16", "x=-1", "x=99999999999x16", "x=4x16x", "=", "x==1", "x=1e3", "x=4x16,x=4x16",
          "nope=3", "x=", "", ",", "x=4x16x1x1", f"x={2**63}x1", "N=2", "x=4X16", "\x1b[31m=1", "[bold]=1")
BACKENDS = ("cpu", "auto", "cuda", "interpret", "reference", "", "CPU", "tpu", "[bold]", "\x1b[31m")

# command -> the options worth bending, each with its pool of values
OPTION_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "bench": {"--threads": NUMBERS, "--warmup": SECONDS, "--runs": COUNTS, "--time": SECONDS, "--seed": NUMBERS,
              "--atol": NUMBERS, "--rtol": NUMBERS, "--confidence": NUMBERS, "--max-regression": PERCENTS,
              "--baseline": ("base.json", "bad.json", "nowhere.json", "tiny.onnx", "-", ""), "--json": PATHS,
              "--html": PATHS, "--storage": STORAGE, "--config": ("bad.toml", "nowhere.toml", "tiny.onnx", ""),
              "--shape": SHAPES, "--against": ("onnxruntime", "torch", "", "bogus", "onnxruntime,onnxruntime"),
              "--backend": BACKENDS},
    "tune": {"--budget": BUDGETS, "--seed": NUMBERS, "--workers": NUMBERS, "--timeout": SECONDS,
             "--storage": STORAGE, "--sampler": ("gp", "tpe", "random", "cmaes", "grid", "", "bogus"),
             "--shape": SHAPES, "--json": PATHS, "--backend": BACKENDS},
    "check": {"--atol": NUMBERS, "--rtol": NUMBERS, "--seed": NUMBERS, "--shape": SHAPES, "--json": PATHS,
              "--junit": PATHS, "--backend": BACKENDS},
    "compile": {"--backend": BACKENDS, "--shape": SHAPES, "--output": PATHS},
    "inspect": {"--shape": SHAPES, "--json": PATHS},
    "cache prune": {"--older-than": DURATIONS},
    "cache ls": {"--limit": NUMBERS},
    "cache show": {"--trials": NUMBERS},
}
BASE_ARGS: dict[str, list[str]] = {
    "bench": ["bench", TINY, "--backend", "cpu", "--runs", "2", "--warmup", "0", "--threads", "1"],
    "tune": ["tune", TINY, "--backend", "cpu", "--budget", "1s", "--workers", "1", "--storage", "sqlite:///studies.db"],
    "check": ["check", TINY, "--backend", "cpu"],
    "compile": ["compile", TINY, "--backend", "cpu"],
    "inspect": ["inspect", TINY],
    "cache prune": ["cache", "prune", "--dry-run"],
    "cache ls": ["cache", "ls"],
    "cache show": ["cache", "show", "SIG"],
}
# tune and bench take seconds each; the rest a fraction of one
COMMAND_WEIGHTS = {"bench": 3, "tune": 1, "check": 3, "compile": 2, "inspect": 3, "cache prune": 1, "cache ls": 1,
                   "cache show": 1}


BAD_SAMPLES: tuple[object, ...] = (0, -1.0, float("nan"), float("inf"), True, "x", None, [])


def _broken_baseline(rng: random.Random, bench: bytes) -> tuple[bytes, str]:
    """A baseline no regression gate may trust: every luminal sample unusable, or the file cut short."""
    if rng.random() < 0.2:
        return bench[: rng.randrange(len(bench))], "baseline cut short"
    doc = json.loads(bench)
    value = rng.choice(BAD_SAMPLES)
    for model in doc.get("models", []):
        runtime = model.get("runtimes", {}).get("luminal", {})
        if rng.random() < 0.2:
            runtime["samples_s"] = rng.choice(([], None, "x", {}))
        else:
            runtime["samples_s"] = [value] * len(runtime.get("samples_s") or [1])
    return json.dumps(doc).encode(), f"baseline samples {value!r}"


def _bad_baseline(rng: random.Random, bench: bytes) -> bytes:
    doc = json.loads(bench)
    value: object = rng.choice((0, float("nan"), True, -1, 1e308, "x", None, [], float("inf")))
    text = json.dumps(doc)
    if rng.random() < 0.2:
        return text[: rng.randrange(len(text))].encode()
    _replace_numbers(doc, rng, value)
    return json.dumps(doc).encode()


def _replace_numbers(node: object, rng: random.Random, value: object) -> None:
    """Replace some numbers (the samples among them) of a bench report by ``value``."""
    items: list[tuple[object, object]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for key, child in items:
        if isinstance(child, int | float) and not isinstance(child, bool) and rng.random() < 0.5:
            node[key] = value  # type: ignore[index]
        else:
            _replace_numbers(child, rng, value)


def cli_case(rng: random.Random, index: int, ctx: Context) -> Case:
    commands = [c for c in COMMAND_WEIGHTS if c in ctx.surface]
    command = rng.choices(commands, weights=[COMMAND_WEIGHTS[c] for c in commands])[0]
    argv = [ctx.base.signature if a == "SIG" else a for a in BASE_ARGS[command]]
    options = [o for o in OPTION_VALUES[command] if o in ctx.surface[command]]
    bent = []
    for option in rng.sample(options, min(len(options), rng.choice((1, 1, 1, 2)))):
        value = rng.choice(OPTION_VALUES[command][option] + ODD_NAMES[:4])
        if option in argv:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, value]
        bent.append(f"{option} {value[:40]!r}")
    files = [(TINY, ctx.tiny.data), ("base.json", ctx.base.bench), ("bad.json", _bad_baseline(rng, ctx.base.bench)),
             ("bad.toml", b"[tool.luminal]\nthreads = 100000\nwarmup = nan\nmodels = 3\n"),
             ("good.json", ctx.base.export)]
    if command.startswith("cache") or rng.random() < 0.3:
        files.append(("default-cache.db", ctx.base.cache))
    untouched = (TINY, "default-cache.db") if _reads_only(argv) else (TINY,)
    must_refuse = False
    if command == "bench" and rng.random() < 0.15 and b'"samples_s"' in ctx.base.bench:
        broken, what = _broken_baseline(rng, ctx.base.bench)
        files.append(("broken.json", broken))
        argv += ["--baseline", "broken.json"]
        bent.append(what)
        must_refuse = True
    return Case("cli", index, ", ".join(bent), tuple(argv), tuple(files), untouched=untouched,
                must_refuse=must_refuse)


CASE_MAKERS: dict[str, Callable[[random.Random, int, Context], Case]] = {
    "model": model_case, "cache": cache_case, "cli": cli_case}
