"""`luminal bench --html`: one self-contained HTML page (inline CSS and SVG, no scripts, no links)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection
from html import escape
from typing import Any

import numpy as np

from ..values import format_fixed
from .bench_svg import bar_plot, distribution_plot, line_plot

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 820px; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #2a7d2a; } .bad { color: #b22; font-weight: bold; }
details pre { background: #f6f6f6; padding: .5em; overflow-x: auto; font-size: 12px; }
h2 { border-bottom: 2px solid #4c72b0; padding-bottom: 2px; }
"""


def _binned(samples: list[float], bins: int = 600) -> list[tuple[float, float]]:
    """(round, latency in ms) with runs of rounds merged into their median, to keep the SVG small."""
    x = np.asarray(samples, dtype=np.float64) * 1e3
    if x.size <= bins:
        return list(enumerate(x.tolist()))
    edges = np.linspace(0, x.size, bins + 1).astype(int)
    return [(float((a + b - 1) / 2), float(np.median(x[a:b]))) for a, b in itertools.pairwise(edges)]


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{format_fixed(seconds * 1e3, 4)} ms"


def _speedup(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    return f"{s['ratio']:.3g}× [{s['low']:.3g}, {s['high']:.3g}]"


def _table(header: list[str], rows: list[list[str]], numeric: Collection[int] = frozenset()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _summary(doc: dict[str, Any]) -> str:
    peers = list(doc.get("settings", {}).get("against", []))
    gates = {g["model"]: g for g in (doc.get("regression") or {}).get("results", [])}
    rows = []
    for m in doc.get("models", []):
        rt = m.get("runtimes", {})
        ok = m.get("status") == "ok"
        row = [escape(m["name"]), '<span class="ok">ok</span>' if ok else '<span class="bad">wrong outputs</span>',
               _ms(rt.get("luminal", {}).get("median_s"))]
        for p in peers:
            row += [_ms(rt.get(p, {}).get("median_s")), escape(_speedup(m.get("speedup", {}).get(p)))]
        g = gates.get(m["name"])
        row.append("–" if g is None else (f'<span class="bad">{escape(g["message"])}</span>' if g["failed"]
                                          else escape(g["message"])))
        rows.append(row)
    header = ["model", "status", "luminal median"]
    for p in peers:
        header += [f"{p} median", f"speedup over {p} [CI]"]
    header.append("vs baseline")
    return _table(header, rows, numeric=set(range(2, 3 + 2 * len(peers))))


def _model_section(m: dict[str, Any]) -> str:
    out = [f"<h2>{escape(m['name'])}</h2>", f"<p><code>{escape(m.get('path', ''))}</code></p>"]
    if m.get("status") != "ok":
        out.append(f'<p class="bad">{escape(m.get("message", "no timings"))}</p>')
    for name, why in (m.get("skipped") or {}).items():
        out.append(f"<p>{escape(name)} skipped: {escape(why)}</p>")
    rt = m.get("runtimes", {})
    if rt:
        rows = [[escape(name), _ms(r["median_s"]), _ms(r["p10_s"]), _ms(r["p90_s"]), f"{r['throughput_per_s']:.4g}/s",
                 str(r["runs"])] for name, r in rt.items()]
        out.append(_table(["runtime", "median", "p10", "p90", "throughput", "runs"], rows, {1, 2, 3, 4, 5}))
        out.append("<h3>Latency distribution</h3>")
        out.append(distribution_plot({name: r["samples_s"] for name, r in rt.items()}))
        out.append("<h3>Latency per round (drift)</h3>")
        out.append(line_plot({name: _binned(r["samples_s"]) for name, r in rt.items()}, "round", "latency (ms)",
                             integer_x=True))
    if m.get("kernels"):
        out.append("<h3>Time per kernel (luminal)</h3>")
        out.append(bar_plot([(k["name"], k["seconds"]) for k in m["kernels"]]))
    parity = m.get("parity")
    if parity:
        ok = '<span class="ok">ok</span>'
        rows = [[escape(o["name"]), escape("x".join(map(str, o["shape"])) or "scalar"), escape(o["dtype"]),
                 "–" if o["max_abs"] is None else f"{o['max_abs']:.3g}",
                 "–" if o["max_rel"] is None else f"{o['max_rel']:.3g}",
                 ok if o["ok"] else f'<span class="bad">{escape(o["reason"] or "FAIL")}</span>']
                for o in parity["outputs"]]
        out.append(f"<h3>Parity with onnxruntime (atol {parity['atol']:g}, rtol {parity['rtol']:g})</h3>")
        out.append(_table(["output", "shape", "dtype", "max abs err", "max rel err", "result"], rows, {3, 4}))
    return "\n".join(out)


def _tuning(tuning: list[dict[str, Any]]) -> str:
    """The benched models' studies: the best time so far (ms) against the trial number, one line per kernel."""
    if not tuning:
        return ""
    label = lambda t: t.get("label") or t["study"]
    best = {label(t): [(n, v / 1e6) for n, v in t["best"]] for t in tuning if t["best"]}
    out = ["<h2>Tuning progress</h2>",
           "<p>The best time found so far for each kernel (and fusion plan) of the models above, against the "
           "trial number of its study (<code>luminal tune</code>'s Optuna storage); log scale.</p>",
           line_plot(best, "trial", "best time (ms)", log_y=all(v > 0 for s in best.values() for _, v in s),
                     integer_x=True)]
    tried = [t for t in tuning if t["trials"]]
    rows = [[escape(label(t)), f'<code title="{escape(t["study"])}">{escape(t["study"][:24])}…</code>',
             str(len(t["trials"])), _ms(t["best"][-1][1] / 1e9) if t["best"] else "–"] for t in tried]
    out.append(_table(["kernel", "study", "finished trials", "best"], rows, {2, 3}))
    if len(tried) < len(tuning):
        out.append(f"<p>{len(tuning) - len(tried)} more kernels of these models have a study without a finished "
                   f"trial.</p>")
    return "\n".join(out)


def render_html(doc: dict[str, Any]) -> str:
    env = doc.get("environment", {})
    device = env.get("device", {}).get("info", {})
    title = f"luminal bench — {doc.get('created', '')}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style></head><body>", f"<h1>{escape(title)}</h1>",
        f"<p>Device: {escape(str(device.get('name') or device.get('model') or '?'))} · backend "
        f"{escape(str(doc.get('settings', {}).get('backend')))} · {env.get('threads')} threads · luminal "
        f"{escape(str(env.get('luminal')))}</p>",
        "<p>Speedup is the peer's median latency over luminal's, with a paired bootstrap confidence interval "
        "over interleaved rounds.</p>",
        _summary(doc),
        *(_model_section(m) for m in doc.get("models", [])),
        _tuning(doc.get("tuning") or []),
        "<h2>Environment</h2><details><summary>fingerprints and versions</summary><pre>"
        f"{escape(json.dumps({'environment': env, 'settings': doc.get('settings')}, indent=2, default=str))}"
        "</pre></details>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)
