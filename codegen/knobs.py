"""Typed schedules: a backend declares its knobs once, as the fields of a frozen dataclass.

Each field is a ``knob``: its choices for a kernel (none: not a knob of that
kernel, and the field is None). From the declaration come the search space
(``space``), the reading of a stored schedule (``parse``: names, types and
choices checked) and its JSON form (``to_json``), which is what caches and
Optuna keep: ``to_json(parse(d)) == d`` for every schedule a strict ``parse``
accepts (a lenient one leaves out the names it ignores).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, Generic, Protocol, TypeVar

KnobValue = bool | int | float | str  # what JSON and Optuna keep as they are
Schedule = dict[str, KnobValue]  # a schedule as stored: knob name -> value, in the declaration's order


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[KnobValue, ...]


C = TypeVar("C", contravariant=True)  # what a backend's choices are functions of (a kernel, or more)
Choices = Callable[[C], tuple[KnobValue, ...]]


@dataclass(frozen=True)
class _Decl(Generic[C]):
    choices: Choices[C]
    optional: bool  # may be left out even where it is a knob (a stored schedule older than the knob)
    accepts: Callable[[KnobValue], bool] | None
    universe: tuple[KnobValue, ...] | None  # values it may hold where it is no knob (lenient parse), None: none


def knob(choices: Choices[C], *, optional: bool = False, conditional: bool = False,
         accepts: Callable[[KnobValue], bool] | None = None, universe: tuple[KnobValue, ...] | None = None) -> Any:
    """A schedule field (typed by its annotation; ``Any`` here as dataclasses' own ``field`` is: a backend
    wraps it with its own context type, so that its choice functions are checked). ``accepts``:
    the values a stored schedule may hold when not only the choices (a thread count made on another machine)."""
    decl = _Decl(choices, optional, accepts, universe)
    # fields that are not knobs of every kernel (``conditional``), or may be left out, are None where absent
    default = None if optional or conditional or universe is not None else MISSING
    return field(default=default, metadata={"knob": decl})


class Declared(Protocol):
    """A dataclass (what ``dataclasses.fields`` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


S = TypeVar("S", bound=Declared)


def _decls(cls: type[Declared]) -> list[tuple[str, _Decl[Any]]]:
    return [(f.name, f.metadata["knob"]) for f in fields(cls)]


def space(cls: type[Declared], ctx: object) -> list[Knob]:
    """The knobs of this schedule type for one kernel (``ctx``: what its choices are functions of)."""
    return [Knob(name, cs) for name, d in _decls(cls) if (cs := d.choices(ctx))]


def parse(cls: type[S], stored: Mapping[str, object], ctx: object, *, strict: bool = True,
          choices: bool = True) -> S | None:
    """The typed schedule of a stored one, or None where it is not one of this kernel's: a knob missing
    (unless optional), a value outside its choices (unless ``choices`` is False: a default may lie outside
    them), or (``strict``) a name that is no knob of this kernel. Not strict: names this type does not
    declare are ignored, and a declared field that is no knob of this kernel is kept where its value is in
    its ``universe``."""
    out: dict[str, object] = {}
    for name, d in _decls(cls):
        cs = d.choices(ctx)
        if name not in stored:
            if cs and not d.optional:
                return None
            out[name] = None
            continue
        v = stored[name]
        if not _holds(d, cs, v, strict, choices):
            return None
        out[name] = v
    if strict and not set(stored) <= set(out):
        return None
    return cls(**out)


def _holds(d: _Decl[Any], cs: tuple[KnobValue, ...], v: object, strict: bool, choices: bool) -> bool:
    """Whether a stored schedule may hold ``v`` for a knob of choices ``cs`` (none: no knob of this kernel)."""
    if not cs:
        return not strict and d.universe is not None and v in d.universe
    if not isinstance(v, KnobValue):
        return False
    return not choices or (d.accepts(v) if d.accepts is not None else v in cs)


def to_json(schedule: Declared) -> Schedule:
    """The stored form: every field that holds a value, in declaration order."""
    out: Schedule = {}
    for f in fields(schedule):
        v = getattr(schedule, f.name)
        if v is not None:
            out[f.name] = v
    return out
