"""``luminal cache ls|show|stats|check|export|import|prune|pull``: look into and move the tuning cache."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..config import cache_of, load_config
from ..errors import LuminalError
from ..values import format_duration, parse_duration
from .common import CACHE_OPT, JSON_OPT, console, emit_json, err_console, fail, handle_errors

if TYPE_CHECKING:
    from ..cache import CacheStats, TuningCache


def _open(path: str | None, readonly: bool, create: bool = True) -> TuningCache:
    """The cache of --cache, else of the project configuration, else the default one; a read (or, without
    ``create``, a write) must find one, and without ``create`` an empty file is read, not made a cache."""
    from ..cache import TuningCache, default_cache_path

    chosen = cache_of(path, load_config())
    where = Path(chosen).expanduser() if chosen is not None else default_cache_path()
    if (readonly or not create) and not where.exists():
        raise LuminalError(f"no tuning cache at {where}")
    empty = where.is_file() and where.stat().st_size == 0
    return TuningCache(where, readonly=readonly or (empty and not create), warn=_warn)


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)


def _ms(ns: int | None) -> str:
    return format_duration(None if ns is None else ns / 1e9)


def _x(speedup: float | None) -> str:
    return f"{speedup:.2f}x" if speedup else "-"


def _plain(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj


def cache_ls(cache: str = CACHE_OPT, as_json: bool = JSON_OPT,
             limit: int = typer.Option(50, "--limit", help="Rows to show.")) -> None:
    """List the kernels the cache knows, with trial and winner counts."""
    with _open(cache, readonly=True) as c:
        kernels = c.kernels()
        path = c.path
    if as_json:
        emit_json({"cache": str(path), "kernels": [
            {k: v for k, v in _plain(k).items() if k != "ir_text"} for k in kernels]})
        return
    table = Table(title=f"{len(kernels)} kernels in {escape(str(path))}", title_justify="left")
    for col in ("signature", "form", "models", "trials", "winners", "speedup", "last seen"):
        table.add_column(col, justify="right" if col in ("trials", "winners", "speedup") else "left",
                         no_wrap=col in ("signature", "last seen"), min_width=12 if col == "signature" else None)
    for k in kernels[:limit]:
        models = ", ".join(k.models[:3]) + (f" +{len(k.models) - 3}" if len(k.models) > 3 else "")
        _row(table, k.signature[:16], k.form or "-", models or "-", str(k.n_trials), str(k.n_winners),
             _x(k.best_speedup), (k.last_seen or "-")[:10])
    console.print(table)
    if len(kernels) > limit:
        console.print(f"... {len(kernels) - limit} more (--limit)")


def cache_show(signature: str = typer.Argument(..., help="A kernel signature or a unique prefix of one."),
               cache: str = CACHE_OPT, as_json: bool = JSON_OPT,
               n: int = typer.Option(10, "--trials", help="Fastest trials to list.")) -> None:
    """One kernel: its IR, winners per device and toolchain, fastest trials."""
    from ..cache import KernelRecord

    with _open(cache, readonly=True) as c:
        sig = c.resolve(signature)
        kernel = c.kernel(sig) or KernelRecord(sig, None, None, None)  # its own row may be damaged
        winners = c.winners(sig)
        trials = c.trials(sig)
    ok = sorted((t for t in trials if t.status == "ok" and t.median_ns is not None), key=lambda t: t.median_ns or 0)
    by_status = dict(Counter(t.status for t in trials))
    if as_json:
        emit_json({"kernel": _plain(kernel), "winners": [_plain(w) for w in winners], "by_status": by_status,
                   "fastest_trials": [_plain(t) for t in ok[:n]]})
        return
    console.print(f"[bold]{escape(sig)}[/]  form {escape(kernel.form or '-')}  shapes {escape(str(kernel.shapes))}",
                  markup=True, soft_wrap=True)
    if kernel.models:
        console.print("models: " + ", ".join(kernel.models), markup=False, soft_wrap=True)
    nodes = kernel.shapes.get("nodes") if isinstance(kernel.shapes, dict) else None
    if nodes and isinstance(nodes, list):  # the model nodes fused into it, as the first model to tune it names them
        from .common import printable

        console.print("model nodes: " + ", ".join(printable(f"{n[0]} ({n[1]})") for n in nodes
                                                  if isinstance(n, list) and len(n) == 2),
                      markup=False, soft_wrap=True)
    if kernel.ir_text:
        console.print(kernel.ir_text, markup=False, highlight=False)
    wt = Table(title="winners", title_justify="left")
    for col in ("device", "toolchain", "median", "default", "speedup", "trials", "config", "updated"):
        wt.add_column(col)
    for w in winners:
        _row(wt, w.device, w.toolchain, _ms(w.median_ns), _ms(w.default_ns), _x(w.speedup), str(w.n_trials),
             _config_text(w.config), w.updated_at[:19])
    console.print(wt)
    tt = Table(title=f"fastest {min(n, len(ok))} of {len(trials)} trials "
                     f"({', '.join(f'{k} {v}' for k, v in sorted(by_status.items())) or 'none'})",
               title_justify="left")
    for col in ("id", "median", "p10", "p90", "n", "device", "config"):
        tt.add_column(col)
    for t in ok[:n]:
        _row(tt, str(t.id), _ms(t.median_ns), _ms(t.p10_ns), _ms(t.p90_ns), str(t.n_samples), t.device,
             _config_text(t.config))
    console.print(tt)


def _report(as_json: bool, data: dict[str, Any], text: str) -> None:
    """What a command did: ``data`` as JSON, or ``text`` (holding paths: never markup) for people."""
    if as_json:
        emit_json(data)
    else:
        console.print(text, markup=False, soft_wrap=True)


def _row(table: Table, *cells: str) -> None:
    table.add_row(*(Text(c) for c in cells))  # names come from models: never read them as markup


def _config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(config.items()))


def cache_stats(cache: str = CACHE_OPT, as_json: bool = JSON_OPT) -> None:
    """Counts, size, schema version and an integrity check."""
    with _open(cache, readonly=True) as c:
        stats = c.stats()
        problems = c.check()
    data = {**_plain(stats), "integrity": problems or "ok"}
    if as_json:
        emit_json(data)
    else:
        _stats_table(stats, problems)
    if problems:
        fail(f"tuning cache {stats.path} fails SQLite's integrity check: {problems[0][:200]}", 1)


def _stats_table(stats: CacheStats, problems: list[str]) -> None:
    table = Table(show_header=False, title=f"tuning cache {escape(stats.path)}", title_justify="left")
    table.add_column("what")
    table.add_column("value")
    for label, value in (
        ("size", f"{stats.size_bytes / 1e6:.2f} MB"), ("schema", f"v{stats.schema_version}"),
        ("kernels", stats.kernels), ("trials", stats.trials), ("winners", stats.winners),
        ("by status", ", ".join(f"{k} {v}" for k, v in stats.by_status.items()) or "-"),
        ("devices", len(stats.devices)), ("toolchains", len(stats.toolchains)),
        ("oldest trial", stats.oldest or "-"), ("newest trial", stats.newest or "-"),
        ("integrity", "ok" if not problems else "; ".join(problems[:3])),
    ):
        _row(table, label, str(value))
    console.print(table)


def cache_check(cache: str = CACHE_OPT, as_json: bool = JSON_OPT) -> None:
    """SQLite's integrity check, then every row decoded: lists the damaged ones (exit 1 when any)."""
    with _open(cache, readonly=True) as c:
        problems = c.check()
        damaged = [] if problems else c.damaged()
        path = c.path
    if as_json:
        emit_json({"cache": str(path), "integrity": problems or "ok", "damaged": [_plain(d) for d in damaged]})
    else:
        for line in [*problems[:20], *map(str, damaged)]:
            console.print(line, markup=False, soft_wrap=True)
        if not problems:
            hint = " (`luminal cache prune --damaged` removes them)" if damaged else ""
            console.print(f"{len(damaged)} damaged rows in {path}{hint}", markup=False, soft_wrap=True)
    if problems:
        fail(f"tuning cache {path} fails SQLite's integrity check: {problems[0][:200]}", 1)
    if damaged:
        raise typer.Exit(1)


def _current_toolchains() -> list[str]:
    """The toolchain keys this machine's backends store and look up winners under."""
    from ..cache import backend_fingerprints
    from ..codegen.backend import get_backend

    keys = []
    for name in ("cpu", "cuda", "interpret"):
        try:
            keys.append(backend_fingerprints(get_backend(name))[1].key)
        except LuminalError:  # the backend cannot run here
            continue
    return keys


def cache_export(file: str = typer.Argument(..., help="Output file (JSON lines; gzip when it ends in .gz)."),
                 cache: str = CACHE_OPT, as_json: bool = JSON_OPT) -> None:
    """Write the whole cache to a portable file."""
    with _open(cache, readonly=True) as c:
        n = c.export(file)
    _report(as_json, {"cache": str(c.path), "file": file, "records": n},
            f"exported {n} records from {c.path} to {file}")


def cache_import(file: str = typer.Argument(..., help="A file written by `luminal cache export`."),
                 cache: str = CACHE_OPT, as_json: bool = JSON_OPT) -> None:
    """Merge an export: trials de-duplicated, the faster winner kept per key."""
    with _open(cache, readonly=False) as c:
        r = c.import_(file)
    _report(as_json, {"cache": str(c.path), **_plain(r)},
            f"imported into {c.path}: {r.trials_added} trials ({r.trials_duplicate} already there), "
            f"{r.kernels_added} new kernels, winners {r.winners_added} new / {r.winners_replaced} faster / "
            f"{r.winners_kept} kept")


def cache_prune(cache: str = CACHE_OPT, as_json: bool = JSON_OPT,
                older_than: str = typer.Option(None, "--older-than", help="Drop records older than this (30d, 12h)."),
                other_toolchains: bool = typer.Option(False, "--other-toolchains",
                                                      help="Drop records of toolchains other than this machine's."),
                failed: bool = typer.Option(False, "--failed", help="Drop failed trials (the default alone)."),
                damaged: bool = typer.Option(False, "--damaged", help="Drop the rows `luminal cache check` lists."),
                dry_run: bool = typer.Option(False, "--dry-run", help="Count only; change nothing.")) -> None:
    """Delete stale records. With no option: failed trials."""
    age = None if older_than is None else _age(older_than)
    if age is None and not other_toolchains and not damaged:
        failed = True
    keep = _current_toolchains() if other_toolchains else None
    with _open(cache, readonly=False, create=False) as c:
        bad = c.prune_damaged(dry_run=dry_run) if damaged else []
        r = c.prune(older_than=age, other_toolchains=keep, failed=failed, dry_run=dry_run)
    _report(as_json, {"cache": str(c.path), **_plain(r), "damaged": len(bad)},
            f"{'would remove' if dry_run else 'removed'} {r.trials} trials, {r.winners} winners, "
            f"{r.kernels} kernels" + (f", {len(bad)} damaged rows" if damaged else "") + f" from {c.path}")


def cache_pull(storage: str = typer.Option(..., "--storage", help="The shared study storage URL (as given to "
                                            "`luminal tune --storage`, e.g. postgresql+psycopg://user@host/db)."),
               backend: str = typer.Option("auto", "--backend", help="The backend whose device and toolchain "
                                           "fingerprints choose the studies: auto, cpu or cuda."),
               cache: str = CACHE_OPT, as_json: bool = JSON_OPT) -> None:
    """Write the best verified winner of every kernel that the machines of this kind tuned into a shared storage
    into this machine's cache (the faster winner kept where the cache has one)."""
    from ..cache import backend_fingerprints
    from ..codegen.backend import get_backend
    from ..search.pool import pull_winners
    from ..search.studies import open_storage

    device, toolchain = backend_fingerprints(get_backend(backend))
    studies = open_storage(storage)
    try:
        with _open(cache, readonly=False) as c:
            r = pull_winners(studies, c, device, toolchain)
    finally:
        studies.close()
    _report(as_json, {"cache": str(c.path), "storage": studies.shown, "device": device.key,
                      "toolchain": toolchain.key, **_plain(r)},
            f"pulled into {c.path} from {studies.shown}: {r.studies} studies of this device and toolchain, "
            f"{r.written} winners written, {r.kept} kept (the cache's own, or the default, was as fast)")


def _age(text: str) -> timedelta:
    seconds = parse_duration(text, "bad duration for --older-than", units="wdhms")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise LuminalError(f"--older-than {text[:40]!r} is longer than {timedelta.max.days} days") from None


def register(app: typer.Typer) -> None:
    cache_app = typer.Typer(name="cache", help="Look into and move the tuning cache.", no_args_is_help=True)
    cache_app.command("ls")(handle_errors(cache_ls))
    cache_app.command("show")(handle_errors(cache_show))
    cache_app.command("stats")(handle_errors(cache_stats))
    cache_app.command("check")(handle_errors(cache_check))
    cache_app.command("export")(handle_errors(cache_export))
    cache_app.command("import")(handle_errors(cache_import))
    cache_app.command("prune")(handle_errors(cache_prune))
    cache_app.command("pull")(handle_errors(cache_pull))
    app.add_typer(cache_app, name="cache")
