"""What a command acts on, chosen one way by every command: the models (MODEL, else the configured ones), each
with its shapes and tolerances, and each setting from its option, else the configuration, else its default."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ..config import BACKENDS, DEFAULT_ATOL, DEFAULT_RTOL, Config, ModelConfig, models_of, resolve
from ..errors import LuminalError
from ..values import Shape, format_shape, non_negative, parse_shape_sets


@dataclass(frozen=True)
class Job:
    """One model a command acts on, its settings resolved."""

    name: str
    path: Path
    shapes: dict[str, Shape]
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL


def chosen_models(model: str | None, shape: list[str] | None, config: Config | None,
                  config_path: str | None = None) -> list[ModelConfig]:
    """MODEL, taking the name, shapes and tolerances the configuration gives the same file (``--shape`` replaces
    its shapes); else every configured model, which take their shapes from the configuration only."""
    if model is None:
        if shape:
            raise LuminalError("--shape needs a MODEL; configured models take their shapes from the configuration")
        return models_of(config, Path(config_path) if config_path else None)
    path = Path(model)
    known = {m.path: m for m in config.models} if config else {}
    found = known.get(path.resolve()) if path.is_file() else None
    name = found.name if found else path.stem
    sets = parse_shape_sets(shape) if shape else [dict(found.shapes) if found else {}]
    atol = found.atol if found else config.atol if config else None
    rtol = found.rtol if found else config.rtol if config else None
    return [ModelConfig(f"{name} ({shapes_label(s)})" if len(sets) > 1 else name, path, s, atol, rtol)
            for s in sets]


def shapes_label(shapes: dict[str, Shape]) -> str:
    return ", ".join(f"{k}={format_shape(v)}" for k, v in shapes.items())


def one_model(model: str | None, shape: list[str] | None, config: Config | None) -> ModelConfig:
    """The one model (and one size per dim) of a command that acts on one."""
    chosen = chosen_models(model, shape, config)
    if len(chosen) != 1:
        raise LuminalError(f"this command takes one model and one size per dimension, got {len(chosen)}: "
                           + "; ".join(m.name for m in chosen))
    return chosen[0]


def jobs(model: str | None, shape: list[str] | None, config: Config | None, atol: float | None = None,
         rtol: float | None = None, config_path: str | None = None) -> list[Job]:
    """The models of ``chosen_models`` with their tolerances: ``--atol``/``--rtol``, else the model's (or the
    project's) in the configuration, else the defaults."""
    non_negative(atol, "--atol")
    non_negative(rtol, "--rtol")
    return [Job(m.name, m.path, dict(m.shapes), resolve(atol, m, lambda m: m.atol, DEFAULT_ATOL),
                resolve(rtol, m, lambda m: m.rtol, DEFAULT_RTOL))
            for m in chosen_models(model, shape, config, config_path)]


def backend_of(given: str | None, config: Config | None, default: str,
               allowed: Collection[str] = BACKENDS) -> str:
    """``--backend``, else the configured backend, else the command's default; a ``--backend`` not ``allowed`` is
    refused in the words every option's bad value gets."""
    if given is not None and given not in allowed:
        raise LuminalError(f"--backend: expected one of {', '.join(allowed)}, got {given!r}")
    return resolve(given, config, lambda c: c.backend, default)
