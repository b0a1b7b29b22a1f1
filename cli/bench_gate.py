"""The regression gate of `luminal bench --baseline`: fail only when a slowdown is beyond the noise."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LuminalError
from .bench_stats import bootstrap_ratio
from .benchlib import SUBJECT


@dataclass(frozen=True)
class GateResult:
    model: str
    ratio: float | None  # median(new) / median(baseline); None when the baseline has no such model
    low: float | None
    high: float | None
    allowed: float
    failed: bool
    message: str


def read_bench_json(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise LuminalError(f"baseline {str(p)!r} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LuminalError(f"cannot read baseline {str(p)!r}: {e}") from None
    except json.JSONDecodeError as e:
        raise LuminalError(f"baseline {str(p)!r} is not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        raise LuminalError(f"baseline {str(p)!r} is not a `luminal bench --json` file (no models list)")
    for m in doc["models"]:
        baseline_samples(m, str(p))
    return doc


def baseline_samples(model: object, where: str = "the baseline") -> list[float] | None:
    """A baseline model's luminal timings: None when it has none; anything implausible (not a list of
    positive, finite seconds) raises, so that a damaged baseline fails the gate instead of passing it."""
    if not isinstance(model, dict) or not isinstance(model.get("name"), str):
        raise LuminalError(f"baseline {where!r}: a model entry without a name")
    runtimes = model.get("runtimes")
    if not isinstance(runtimes, dict) or SUBJECT not in runtimes:
        return None
    entry = runtimes[SUBJECT]  # bench writes every runtime it timed with its samples: null or missing is damage
    samples = entry.get("samples_s") if isinstance(entry, dict) else None
    if not isinstance(samples, list) or not samples or not all(
            type(s) in (int, float) and math.isfinite(s) and s > 0 for s in samples):
        raise LuminalError(f"baseline {where!r}: model {model['name'][:80]!r} has implausible timings "
                           "(samples_s must be positive, finite seconds)")
    return [float(s) for s in samples]


def _samples(model: dict[str, Any]) -> list[float] | None:
    try:
        samples = model["runtimes"][SUBJECT]["samples_s"]
    except (KeyError, TypeError):
        return None
    if not isinstance(samples, list) or not samples or not all(isinstance(s, int | float) for s in samples):
        return None
    return [float(s) for s in samples]


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def gate_model(name: str, new: list[float], base: list[float], allowed: float, *, confidence: float = 0.95,
               seed: int = 0) -> GateResult:
    ci = bootstrap_ratio(new, base, confidence=confidence, seed=seed)
    failed = ci.low > 1 + allowed
    change = f"{_pct(ci.estimate - 1)} (CI {_pct(ci.low - 1)} .. {_pct(ci.high - 1)})"
    if failed:
        message = f"{name}: {change} slower than the baseline, beyond the allowed {allowed * 100:g}%"
    elif ci.estimate - 1 > allowed:
        message = f"{name}: {change} vs the baseline, within the noise of the allowed {allowed * 100:g}%"
    else:
        message = f"{name}: {change} vs the baseline, within the allowed {allowed * 100:g}%"
    return GateResult(name, ci.estimate, ci.low, ci.high, allowed, failed, message)


def gate(new_doc: dict[str, Any], base_doc: dict[str, Any], allowed: float, *, confidence: float = 0.95,
         seed: int = 0) -> list[GateResult]:
    """One result per model of ``new_doc`` that has timings; models unknown to the baseline pass with a note."""
    base = {m.get("name"): m for m in base_doc.get("models", []) if isinstance(m, dict)}
    results = []
    for m in new_doc.get("models", []):
        new = _samples(m)
        if new is None:
            continue
        name = m.get("name", "?")
        old = baseline_samples(base[name]) if name in base else None
        if old is None:
            results.append(GateResult(name, None, None, None, allowed, False,
                                      f"{name}: not in the baseline (or without luminal timings); not gated"))
            continue
        results.append(gate_model(name, new, old, allowed, confidence=confidence, seed=seed))
    return results
