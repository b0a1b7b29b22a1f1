"""Shared test setup: the ``slow`` marker and the exported example models.

Tests marked ``slow`` run with ``--runslow`` or when ``-m`` selects them (``-m slow``).
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "examples" / "models"


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    expr = config.getoption("-m") or ""
    if config.getoption("--runslow") or ("slow" in expr and "not slow" not in expr):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def export_example_models(small_only: bool, only: str = "") -> dict:
    """Export the example models into examples/models (once; files that exist are kept)
    and return the manifest {file name: {model, size, exporter, shapes, outputs}}."""
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(REPO / "examples" / "export_models.py"), "--out", str(MODELS_DIR)]
    if small_only:
        cmd.append("--small-only")
    if only:
        cmd += ["--only", only]
    with open(MODELS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if proc.returncode:
                raise RuntimeError(f"export_models.py failed:\n{proc.stderr[-3000:]}")
            return json.loads((MODELS_DIR / "manifest.json").read_text())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def small_models() -> dict:
    manifest = export_example_models(small_only=True)
    return {k: v for k, v in manifest.items() if v["size"] == "small"}


@pytest.fixture(scope="session")
def full_models() -> dict:
    manifest = export_example_models(small_only=False)
    return {k: v for k, v in manifest.items() if v["size"] == "full"}


@pytest.fixture
def lanes(monkeypatch):
    """``lanes(vw)``: the C backend's rules and code for vectors of ``vw`` float32 lanes, whatever this host's
    (``contraction.host_simd_width``, which ``schedule.simd_width`` reads); the code still builds and runs here, its
    vectors split or joined by the compiler."""
    import luminal.codegen.c.contraction as contraction

    def pin(vw: int) -> None:
        monkeypatch.setattr(contraction, "host_simd_width", lambda: vw)

    return pin


@pytest.fixture
def sixteen_lanes(lanes):
    """The C backend as on a host of 16-lane vectors (AVX-512): for tests of rules measured there."""
    lanes(16)
