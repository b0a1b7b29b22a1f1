"""The tuning cache (SQLite, WAL, safe for several processes) and device / toolchain fingerprints."""

from .db import TuningCache, default_cache_path
from .fingerprint import (
    CODEGEN_VERSION,
    Fingerprint,
    backend_fingerprints,
    device_fingerprint,
    toolchain_fingerprint,
)
from .records import CacheStats, ImportReport, KernelRecord, PruneReport, Trial, Winner

__all__ = [
    "CODEGEN_VERSION",
    "CacheStats",
    "Fingerprint",
    "ImportReport",
    "KernelRecord",
    "PruneReport",
    "Trial",
    "TuningCache",
    "Winner",
    "backend_fingerprints",
    "default_cache_path",
    "device_fingerprint",
    "toolchain_fingerprint",
]
