"""Plain records the tuning cache hands out, and the small helpers that build them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order


def now_iso() -> str:
    return datetime.now(UTC).strftime(TIME_FORMAT)


def to_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """Canonical JSON: equal values give equal text."""
    return _ENCODER.encode(value)


@dataclass(frozen=True)
class SampleStats:
    median_ns: int | None
    p10_ns: int | None
    p90_ns: int | None
    n: int
    summary: dict[str, Any] | None

    @classmethod
    def of(cls, samples_ns: list[int] | None) -> SampleStats:
        if not samples_ns:
            return cls(None, None, None, 0, None)
        import numpy as np  # here, not at import: `luminal cache ...` never records trials

        a = np.asarray(samples_ns).astype(np.int64)
        if a.min() < 0:
            raise ValueError("timing samples must be non-negative nanoseconds")
        p10, median, p90 = (round(float(p)) for p in np.percentile(a, [10, 50, 90]))
        summary = {"min": int(a.min()), "max": int(a.max()), "mean": round(float(a.mean()), 1),
                   "std": round(float(a.std()), 1)}
        return cls(median, p10, p90, int(a.size), summary)


@dataclass(frozen=True)
class Winner:
    """The best known config for one (signature, device, toolchain)."""

    config: dict[str, Any]
    median_ns: int
    speedup: float | None
    n_trials: int
    default_ns: int | None = None
    updated_at: str = ""
    signature: str = ""
    device: str = ""
    toolchain: str = ""


@dataclass(frozen=True)
class Trial:
    id: int
    uid: str
    signature: str
    device: str
    toolchain: str
    config: dict[str, Any]
    status: str
    median_ns: int | None
    p10_ns: int | None
    p90_ns: int | None
    n_samples: int
    samples: dict[str, Any] | None
    created_at: str


@dataclass(frozen=True)
class KernelRecord:
    signature: str
    form: str | None
    ir_text: str | None
    shapes: Any
    models: list[str] = field(default_factory=list)
    first_seen: str | None = None
    last_seen: str | None = None
    n_trials: int = 0
    n_winners: int = 0
    best_speedup: float | None = None


@dataclass(frozen=True)
class CacheStats:
    path: str
    size_bytes: int
    schema_version: int
    readonly: bool
    kernels: int
    trials: int
    winners: int
    by_status: dict[str, int]
    devices: dict[str, int]
    toolchains: dict[str, int]
    oldest: str | None
    newest: str | None


@dataclass(frozen=True)
class ImportReport:
    fingerprints_added: int = 0
    kernels_added: int = 0
    kernels_merged: int = 0
    trials_added: int = 0
    trials_duplicate: int = 0
    winners_added: int = 0
    winners_replaced: int = 0
    winners_kept: int = 0


@dataclass(frozen=True)
class PruneReport:
    trials: int = 0
    winners: int = 0
    kernels: int = 0
    dry_run: bool = False
