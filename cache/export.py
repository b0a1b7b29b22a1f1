"""The portable export file: JSON lines (gzip when the name ends in .gz), a header line, then one record a line.

Record types: ``device`` / ``toolchain`` (fingerprint key and info), ``kernel``, ``trial``, ``winner``.
Reading validates every line, so a damaged or hostile file fails with its line number and nothing merges.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import LuminalError
from .records import dumps
from .schema import STATUSES

FORMAT = "luminal-tuning-cache-export"
FORMAT_VERSION = 1
MAX_LINE = 64 * 1024 * 1024


def _open_write(path: Path) -> tuple[IO[str], str | None]:
    """A text stream to write ``path`` through, and the temporary file to rename over it at the end (None where
    the target is not a regular file, a device or a FIFO: renaming over /dev/null would replace the device)."""
    if path.exists() and not path.is_file():
        raw: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed by the caller's with)
        tmp = None
    else:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        raw = os.fdopen(fd, "wb")
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6), encoding="utf-8"), tmp
    return io.TextIOWrapper(raw, encoding="utf-8"), tmp


def write(path: str | Path, header: dict[str, Any], records: Iterable[dict[str, Any]]) -> int:
    """Write atomically (temp file, then rename) where the target is a regular file or new, in place where it is
    a device or a FIFO; return the number of records."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise LuminalError(f"export target {path} is a directory")
    try:
        f, tmp = _open_write(path)
    except OSError as e:
        raise LuminalError(f"cannot write export file {path}: {e.strerror or e}") from None
    n = 0
    try:
        with f:
            f.write(dumps({"format": FORMAT, "version": FORMAT_VERSION, **header}) + "\n")
            for rec in records:
                f.write(dumps(rec) + "\n")
                n += 1
        if tmp is not None:
            os.replace(tmp, path)
    except OSError as e:
        raise LuminalError(f"cannot write export file {path}: {e.strerror or e}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return n


# ---------------------------------------------------------------- reading


class Bad(Exception):
    pass


def _str(rec: dict, key: str, optional: bool = False, max_len: int = 1 << 20) -> str | None:
    v = rec.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v or len(v) > max_len:
        raise Bad(f"field {key!r} must be a non-empty string")
    return v


def _int(rec: dict, key: str, optional: bool = True) -> int | None:
    v = rec.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 63:
        raise Bad(f"field {key!r} must be a non-negative integer")
    return v


_TIME = re.compile(r"\d{4}-[01]\d-[0-3]\dT[0-2]\d:[0-5]\d:[0-6]\d\.\d{6}Z")  # TIME_FORMAT, fixed width


def _time(rec: dict, key: str) -> str:
    v = rec.get(key)
    if not isinstance(v, str) or not _TIME.fullmatch(v):
        raise Bad(f"field {key!r} must be a time like 2026-01-31T12:00:00.000000Z")
    return v


def _obj(rec: dict, key: str, optional: bool = False) -> dict | None:
    v = rec.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, dict):
        raise Bad(f"field {key!r} must be an object")
    return v


def _fingerprint(rec: dict) -> dict:
    return {"key": _str(rec, "key", max_len=256), "kind": rec["type"], "info": _obj(rec, "info")}


def _kernel(rec: dict) -> dict:
    models = rec.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise Bad("field 'models' must be a list of strings")
    return {
        "signature": _str(rec, "signature", max_len=256), "form": _str(rec, "form", optional=True),
        "ir_text": _str(rec, "ir_text", optional=True, max_len=MAX_LINE), "shapes": rec.get("shapes"),
        "models": models, "first_seen": _time(rec, "first_seen"), "last_seen": _time(rec, "last_seen"),
    }


_KEYS = ("uid", "signature", "device", "toolchain")
_TIMES = ("median_ns", "p10_ns", "p90_ns")


def _trial(rec: dict) -> dict:
    # the hot loop of an import: plain type checks, no helpers
    if rec.get("status") not in STATUSES:
        raise Bad(f"field 'status' must be one of {', '.join(STATUSES)}")
    for k in _KEYS:
        v = rec.get(k)
        if type(v) is not str or not v or len(v) > 256:
            raise Bad(f"field {k!r} must be a non-empty string")
    for k in _TIMES:
        v = rec.get(k)
        if v is not None and (type(v) is not int or not 0 <= v < 1 << 63):
            raise Bad(f"field {k!r} must be a non-negative integer")
    n = rec.get("n_samples")
    if type(n) is not int or not 0 <= n < 1 << 31:
        raise Bad("field 'n_samples' must be a non-negative integer")
    if type(rec.get("config")) is not dict:
        raise Bad("field 'config' must be an object")
    samples = rec.get("samples")
    if samples is not None and type(samples) is not dict:
        raise Bad("field 'samples' must be an object")
    _time(rec, "created_at")
    for k in (*_TIMES, "samples"):
        rec.setdefault(k, None)
    return rec


FUSION_PREFIX = "fusion-"  # codegen.partition.fusion_key: a graph's tuned fusion decisions


def _int_lists(value: object, n: int) -> bool:
    return isinstance(value, list) and all(
        isinstance(e, list) and len(e) == n and all(type(x) is int and x >= 0 for x in e) for e in value)


def _fusion_config(config: dict) -> None:
    """A fusion winner's config is {"unfused": [[producer, consumer, slot], ...]}, with the convolutions it
    computes by Winograd where any ("winograd": [[node, tile], ...]), those it stores channels-last where any
    ("channels_last": [node, ...]) and those it computes image by image where any ("by_image": [node, ...])."""
    nodes = [config.get("channels_last", []), config.get("by_image", [])]
    if not {"unfused"} <= set(config) <= {"unfused", "winograd", "channels_last", "by_image"} \
            or not _int_lists(config["unfused"], 3) or not _int_lists(config.get("winograd", []), 2) \
            or not all(isinstance(n, list) and all(type(x) is int for x in n) for n in nodes):
        raise Bad("field 'config' of a fusion winner must be {\"unfused\": [[producer, consumer, slot], ...]} "
                  "(and \"winograd\": [[node, tile], ...], \"channels_last\": [node, ...], \"by_image\": "
                  "[node, ...])")


def _winner(rec: dict) -> dict:
    speedup = rec.get("speedup")
    if speedup is not None and (isinstance(speedup, bool) or not isinstance(speedup, int | float) or speedup < 0
                                or not math.isfinite(speedup)):
        raise Bad("field 'speedup' must be a non-negative number")
    signature, config = _str(rec, "signature", max_len=256), _obj(rec, "config")
    if signature and config is not None and signature.startswith(FUSION_PREFIX):
        _fusion_config(config)
    return {
        "signature": signature, "device": _str(rec, "device", max_len=256),
        "toolchain": _str(rec, "toolchain", max_len=256), "config": config,
        "median_ns": _int(rec, "median_ns", False), "default_ns": _int(rec, "default_ns"),
        "speedup": speedup, "updated_at": _time(rec, "updated_at"),
    }


PARSERS: dict[str, Callable[[dict], dict]] = {
    "device": _fingerprint, "toolchain": _fingerprint, "kernel": _kernel, "trial": _trial, "winner": _winner,
}


def _no_constant(name: str) -> None:
    raise Bad(f"{name} is not a number this format allows")


def loads(text: str) -> Any:
    """JSON as this format allows it: no NaN or Infinity (Python reads them, but no JSON writer may write them
    back). The rule for an export line and for a JSON column of a cache row."""
    return json.loads(text, parse_constant=_no_constant)


def _lines(path: Path) -> Iterator[str]:
    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else open(path, "rb") as raw:
        for line in raw:
            if len(line) > MAX_LINE:
                raise Bad("line too long")
            yield line.decode("utf-8")


def read(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (record type, validated record); the header is checked first."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise LuminalError(f"import file {path} does not exist or is not a file")
    lineno = 0
    header = False
    try:
        lines = _lines(path)
        for line in lines:
            lineno += 1
            if not line.strip():
                continue
            rec = loads(line)
            if not isinstance(rec, dict):
                raise Bad("expected a JSON object")
            if not header:
                header = True
                if rec.get("format") != FORMAT:
                    raise Bad("not a luminal tuning cache export")
                if not isinstance(rec.get("version"), int) or rec["version"] > FORMAT_VERSION:
                    raise Bad(f"export format version {rec.get('version')!r} is newer than this luminal reads "
                               f"({FORMAT_VERSION})")
                continue
            kind = rec.get("type")
            if not isinstance(kind, str) or kind not in PARSERS:
                raise Bad(f"unknown record type {str(kind)[:40]!r}")
            yield kind, PARSERS[kind](rec)
        if not header:
            raise Bad("the file is empty")
    except Bad as e:
        raise LuminalError(f"bad export file {path}, line {max(lineno, 1)}: {e}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, 5000-digit numbers, nesting
        raise LuminalError(f"bad export file {path}, line {max(lineno, 1)}: not JSON ({type(e).__name__})") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise LuminalError(f"cannot read export file {path}: {e}") from None
