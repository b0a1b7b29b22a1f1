"""The tuning cache (SQLite, WAL, safe for several processes) and device / toolchain fingerprints."""

from .db import TuningCache, default_cache_path
from .fingerprint import (
    CODEGEN_VERSION,
    CompilerInfo,
    Fingerprint,
    backend_fingerprints,
    detect_c_compiler,
    device_fingerprint,
    toolchain_fingerprint,
)
from .records import CacheStats, ImportReport, Kernel, PruneReport, Trial, Winner

__all__ = [
    "backend_fingerprints",
    "CODEGEN_VERSION",
    "CacheStats",
    "CompilerInfo",
    "Fingerprint",
    "ImportReport",
    "Kernel",
    "PruneReport",
    "Trial",
    "TuningCache",
    "Winner",
    "default_cache_path",
    "detect_c_compiler",
    "device_fingerprint",
    "toolchain_fingerprint",
]
