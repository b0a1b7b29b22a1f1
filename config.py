"""Project configuration: ``[tool.luminal]`` in pyproject.toml, or the same keys at the top of luminal.toml.

```toml
[tool.luminal]
backend = "auto"            # auto | cuda | cpu | interpret | reference
cache = ".luminal/tuning.db"
budget = "20m"              # per `luminal tune` run: 90, "90s", "20m", "1h30m"
max_regression = "5%"       # or 0.05
baseline = "bench/baseline.json"
atol = 1e-4
rtol = 1e-3
threads = 4

[[tool.luminal.models]]
path = "models/bert.onnx"   # relative to the file holding this table
name = "bert"
shapes = { batch = 1, seq = 128, pixel_values = "1x3x224x224" }
atol = 1e-3
```
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .errors import LuminalError, require_file
from .target import thread_count
from .values import Shape, non_negative, parse_duration, parse_fraction, parse_shape_value

BACKENDS = ("auto", "cuda", "cpu", "interpret", "reference")
DEFAULT_ATOL, DEFAULT_RTOL = 1e-4, 1e-3  # output tolerances of `check` and `bench` when nothing sets them


@dataclass(frozen=True)
class ModelConfig:
    """One configured model; ``atol``/``rtol`` already fall back to the project-wide values (or None)."""

    name: str
    path: Path
    shapes: dict[str, Shape] = field(default_factory=dict)
    atol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class Config:
    source: Path
    models: list[ModelConfig] = field(default_factory=list)
    backend: str | None = None
    cache: Path | None = None
    budget: float | None = None  # seconds
    max_regression: float | None = None  # fraction: 0.05 is 5 %
    baseline: Path | None = None
    atol: float | None = None
    rtol: float | None = None
    threads: int | None = None


# ---------------------------------------------------------------- schema

def _type_name(value: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


class _Reader:
    def __init__(self, source: Path, prefix: str):
        self.source = source
        self.base = source.parent
        self.prefix = prefix

    def error(self, key: str, message: str) -> LuminalError:
        return LuminalError(f"{self.prefix} {key}: {message} (in {self.source})")

    def expect(self, key: str, value: Any, kinds: tuple[type, ...], wanted: str) -> Any:
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise self.error(key, f"expected {wanted}, got {_type_name(value)}")
        return value

    def number(self, key: str, value: Any) -> float:
        return float(self.wrap(key, non_negative, float(self.expect(key, value, (int, float), "a number"))))

    def path(self, key: str, value: Any) -> Path:
        text = self.expect(key, value, (str,), "a path string")
        if not text.strip():
            raise self.error(key, "must not be empty")
        p = Path(text).expanduser()
        return p if p.is_absolute() else (self.base / p)

    def wrap(self, key: str, fn, value: Any) -> Any:
        try:
            return fn(value, key)
        except LuminalError as e:
            message = str(e).split(": ", 1)[-1]
            raise self.error(key, message) from None


_TOP_KEYS = {"models", "backend", "cache", "budget", "max_regression", "baseline", "atol", "rtol", "threads"}
_MODEL_KEYS = {"path", "shapes", "name", "atol", "rtol"}


def _unknown(r: _Reader, where: str, keys: set[str], allowed: set[str]) -> None:
    extra = sorted(keys - allowed)
    if extra:
        key = f"{where}.{extra[0]}" if where else extra[0]
        raise r.error(key, f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def _model(r: _Reader, i: int, table: Any, atol: float | None, rtol: float | None) -> ModelConfig:
    where = f"models[{i}]"
    r.expect(where, table, (dict,), "a table")
    _unknown(r, where, set(table), _MODEL_KEYS)
    if "path" not in table:
        raise r.error(f"{where}.path", "missing (every model needs a path)")
    path = r.path(f"{where}.path", table["path"])
    if not path.is_file():
        raise r.error(f"{where}.path", f"model file {str(table['path'])!r} not found (relative to {r.base})")
    shapes_in = r.expect(f"{where}.shapes", table.get("shapes", {}), (dict,), "a table")
    shapes = {str(k): r.wrap(f"{where}.shapes.{k}", parse_shape_value, v) for k, v in shapes_in.items()}
    name = r.expect(f"{where}.name", table.get("name", path.stem), (str,), "a string")
    if not name.strip():
        raise r.error(f"{where}.name", "must not be empty")
    m_atol = r.number(f"{where}.atol", table["atol"]) if "atol" in table else atol
    m_rtol = r.number(f"{where}.rtol", table["rtol"]) if "rtol" in table else rtol
    return ModelConfig(name=name, path=path.resolve(), shapes=shapes, atol=m_atol, rtol=m_rtol)


def parse_config(data: Any, source: Path, prefix: str = "[tool.luminal]") -> Config:
    """Validate the table of a config file; every error names the key."""
    r = _Reader(source, prefix)
    if not isinstance(data, dict):
        raise LuminalError(f"{prefix}: expected a table, got {_type_name(data)} (in {source})")
    _unknown(r, "", set(data), _TOP_KEYS)
    backend = data.get("backend")
    if backend is not None:
        r.expect("backend", backend, (str,), "a string")
        if backend not in BACKENDS:
            raise r.error("backend", f"expected one of {', '.join(BACKENDS)}, got {backend!r}")
    atol = r.number("atol", data["atol"]) if "atol" in data else None
    rtol = r.number("rtol", data["rtol"]) if "rtol" in data else None
    threads = None
    if "threads" in data:
        threads = r.wrap("threads", thread_count, r.expect("threads", data["threads"], (int,), "an integer"))
    models_in = r.expect("models", data.get("models", []), (list,), "an array of tables")
    names: set[str] = set()
    models = []
    for i, table in enumerate(models_in):
        m = _model(r, i, table, atol, rtol)
        if m.name in names:
            raise r.error(f"models[{i}].name", f"duplicate model name {m.name!r}")
        names.add(m.name)
        models.append(m)
    return Config(
        source=source.resolve(),
        models=models,
        backend=backend,
        cache=r.path("cache", data["cache"]).resolve() if "cache" in data else None,
        budget=r.wrap("budget", parse_duration, data["budget"]) if "budget" in data else None,
        max_regression=r.wrap("max_regression", parse_fraction, data["max_regression"])
        if "max_regression" in data else None,
        baseline=r.path("baseline", data["baseline"]).resolve() if "baseline" in data else None,
        atol=atol,
        rtol=rtol,
        threads=threads,
    )


# ---------------------------------------------------------------- finding and loading

def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise LuminalError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError:  # tomllib decodes the whole file before parsing
        raise LuminalError(f"{path}: not valid TOML (not UTF-8 text)") from None
    except OSError as e:
        raise LuminalError(f"cannot read {path}: {e.strerror or e}") from None


def _parse_file(path: Path, data: dict[str, Any]) -> Config | None:
    """The configuration in a parsed luminal.toml (keys at top level) or pyproject.toml (keys under
    [tool.luminal]; None when absent)."""
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict) or "luminal" not in tool:
            return None
        return parse_config(tool["luminal"], path, "[tool.luminal]")
    return parse_config(data, path, path.name)


def read_config_file(path: Path) -> Config | None:
    """A luminal.toml (keys at top level) or a pyproject.toml (keys under [tool.luminal]; None when absent)."""
    path = require_file(path, "config file")
    return _parse_file(path, _read_toml(path))


def _find(start_dir: Path | None) -> tuple[Path, dict[str, Any]] | None:
    """The first luminal.toml, or pyproject.toml with [tool.luminal], in start_dir or its parents (up to the
    folder holding .git), with its parsed TOML."""
    here = Path(start_dir or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "luminal.toml").is_file():
            return folder / "luminal.toml", _read_toml(folder / "luminal.toml")
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            data = _read_toml(pyproject)
            tool = data.get("tool", {})
            if isinstance(tool, dict) and "luminal" in tool:
                return pyproject, data
        if (folder / ".git").exists():
            break
    return None


def find_config_file(start_dir: Path | None = None) -> Path | None:
    """luminal.toml, else a pyproject.toml with [tool.luminal], in start_dir or its parents.
    The search stops at the first folder holding .git (the repository root)."""
    found = _find(start_dir)
    return found[0] if found else None


def load_config(start_dir: Path | None = None, path: Path | str | None = None) -> Config | None:
    """The project configuration found from ``start_dir`` (default: the current folder), or the one in
    ``path``; None when there is none."""
    if path is not None:
        return read_config_file(Path(path))
    found = _find(start_dir)
    return _parse_file(*found) if found else None


T = TypeVar("T")
S = TypeVar("S")
D = TypeVar("D")


def resolve(given: T | None, source: S | None, read: Callable[[S], T | None], default: D) -> T | D:
    """The one rule for every setting of every command: the command-line option when given, else what ``source``
    (the project's Config, or one configured model) says, else ``default``."""
    if given is not None:
        return given
    configured = read(source) if source is not None else None
    return default if configured is None else configured


def cache_of(given: str | None, config: Config | None) -> str | None:
    """The tuning cache a command uses: ``--cache`` when given, else the configuration's ``cache`` (None: the
    cache's own default)."""
    return resolve(given, config, lambda c: None if c.cache is None else str(c.cache), None)


def configured_models(start_dir: Path | None = None, path: Path | str | None = None) -> list[ModelConfig]:
    """What `tune`, `bench` and `check` act on when no MODEL is given. Raises LuminalError when there is
    no configuration or it lists no models."""
    where = Path(path) if path is not None else Path(start_dir or Path.cwd()).resolve()
    return models_of(load_config(start_dir, path), where)


def models_of(config: Config | None, searched_from: Path | None = None) -> list[ModelConfig]:
    """The models of a loaded configuration (found from ``searched_from``, default: the current folder);
    LuminalError when there is none or it lists none."""
    if config is None:
        where = searched_from or Path.cwd().resolve()
        raise LuminalError(f"no MODEL given and no [tool.luminal] in pyproject.toml or luminal.toml "
                           f"(searched from {where})")
    if not config.models:
        raise LuminalError(f"no MODEL given and {config.source} lists no models ([[tool.luminal.models]])")
    return config.models
