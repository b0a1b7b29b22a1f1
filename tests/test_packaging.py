"""The wheel installs one package, ``luminal``, with every module; the editable install maps the repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# folders of the repo that are not part of the package
NOT_PACKAGED = {"tests", "examples", "benchmarks", "docs", "build", "dist", ".venv", ".git", ".luminal"}
HEAVY = ("torch", "triton", "onnxruntime", "optuna")


def _package_modules() -> set[str]:
    """Every .py file the package should ship, as a path inside the wheel."""
    out = set()
    for p in REPO.rglob("*.py"):
        rel = p.relative_to(REPO)
        if rel.parts[0] in NOT_PACKAGED or rel.parts[0].startswith(".") or rel.parts[0].endswith(".egg-info"):
            continue
        if any(part == "__pycache__" for part in rel.parts):
            continue
        out.add("luminal/" + rel.as_posix())
    return out


def _copy_source(dst: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "models",
                                    ".luminal", ".pytest_cache", ".ruff_cache")
    shutil.copytree(REPO, dst, ignore=ignore)
    return dst


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = _copy_source(tmp_path_factory.mktemp("src") / "luminal")
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "--no-cache-dir", "-q", "-w", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_holds_only_luminal_and_every_module(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"luminal"}, tops
    assert wheel.name.startswith("luminal_onnx-")
    missing = sorted(_package_modules() - set(names))
    assert not missing, f"modules left out of the wheel (add their packages to pyproject): {missing}"
    # the conformance harness and its case list live with the tests, not in the package
    assert not [n for n in names if "conformance" in n or n.startswith("luminal/tests/")]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                        "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    installed = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth")) and
                 p.name not in ("__pycache__", "_distutils_hack")}
    assert installed == {"luminal"}, installed
    # dependencies are not installed in the fresh venv: the dev venv's come after its own site-packages
    (site / "zz_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    exe = venv / "bin" / "luminal"
    help_ = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert help_.returncode == 0, help_.stderr[-3000:]
    assert "check" in help_.stdout and "inspect" in help_.stdout
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120, env=env,
                             cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("luminal ")
    where = subprocess.run([str(py), "-c", "import luminal, luminal.ir, luminal.frontend_onnx.importer; "
                            "print(luminal.__file__)"], capture_output=True, text=True, timeout=120, env=env,
                           cwd=tmp_path)
    assert where.returncode == 0, where.stderr[-2000:]
    assert Path(where.stdout.strip()).is_relative_to(site)
    for name in ("cli", "cache", "search", "ir", "runtime", "codegen", "frontend_onnx"):
        r = subprocess.run([str(py), "-c", f"import {name}"], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert r.returncode != 0, f"a top-level {name!r} package is importable from the wheel's venv"


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_nothing_heavy(tmp_path, flag):
    code = ("import sys\n"
            "from luminal.cli.main import main\n"
            f"sys.argv = ['luminal', {flag!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    heavy = p.stdout.rsplit("HEAVY:", 1)[1].strip()
    assert heavy == "", f"`luminal {flag}` imports {heavy}"


def test_editable_install_maps_the_repo(tmp_path):
    code = ("import luminal, luminal.frontend_onnx.importer as m, importlib.util\n"
            "print(luminal.__file__)\nprint(m.__file__)\n"
            "print(all(importlib.util.find_spec(n) is None for n in ('cli', 'cache', 'search', 'ir')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    init, importer, no_top = p.stdout.strip().splitlines()
    assert Path(init) == REPO / "__init__.py"
    assert Path(importer) == REPO / "frontend_onnx" / "importer.py"
    assert no_top == "True"
