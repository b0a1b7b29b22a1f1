"""The two layers of the search space as Optuna parameters: fusion edges and schedule knobs.

Ordered numeric knobs (block sizes, unroll, threads) are sampled as an index into their sorted
choices, so TPE and CMA-ES can exploit their order; other knobs are categorical.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import optuna

from ..codegen.backend import Knob
from ..codegen.kernel import Kernel
from ..codegen.partition import FLAGS, ByImage, ChannelsLast, Decisions, Edge, Flag, Winograd, decisions_config
from ..ir.winograd import TILES

if TYPE_CHECKING:
    from ..codegen.backend import Backend


_PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class Param:
    name: str
    choices: tuple[Any, ...]
    ordinal: bool

    @cached_property
    def by_index(self) -> bool:
        """Optuna stores the choice's index: an ordered knob, or choices Optuna cannot store as they are."""
        return self.ordinal or not all(isinstance(c, _PRIMITIVE) for c in self.choices)

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.ordinal:
            return self.choices[trial.suggest_int(self.name, 0, len(self.choices) - 1)]
        if self.by_index:
            return self.choices[trial.suggest_categorical(self.name, list(range(len(self.choices))))]
        return trial.suggest_categorical(self.name, list(self.choices))

    def encode(self, value: Any) -> Any:
        """The value as Optuna stores it."""
        return self.choices.index(value) if self.by_index else value

    def grid(self) -> list[Any]:
        return [self.encode(c) for c in self.choices]

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """The distribution ``suggest`` asks Optuna for."""
        if self.ordinal:
            return optuna.distributions.IntDistribution(0, len(self.choices) - 1)
        return optuna.distributions.CategoricalDistribution(self.grid())

    def position(self, stored: Any) -> float:
        """A stored value as a number for a cost model: an ordered knob's place in [0, 1], on a log2 scale
        when all choices are positive; any other knob's choice index (only compared for equality)."""
        if not self.ordinal:
            return float(int(stored) if self.by_index else self.choices.index(stored))
        if self.choices[0] > 0:
            return self._log_place(self.choices[int(stored)])
        return int(stored) / (len(self.choices) - 1)

    def _log_place(self, value: float) -> float:
        lo, hi = math.log2(self.choices[0]), math.log2(self.choices[-1])
        return (math.log2(value) - lo) / (hi - lo)

    def decode(self, stored: Any) -> Any:
        return self.choices[int(stored)] if self.by_index else stored

    def feature(self, value: Any) -> float | None:
        """A value of this knob, maybe from another kernel's space with other choices, in ``position``'s
        coordinates: an ordered value between or beyond the choices on the log2 scale, a categorical one
        this space lacks as a place of its own; None where it has no place."""
        if any(type(c) is type(value) and c == value for c in self.choices):
            return self.position(self.encode(value))
        if not self.ordinal:
            return -1.0
        if self.choices[0] > 0 and isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return self._log_place(value)
        return None

    def described(self) -> list[Any]:
        return [self.name, list(self.choices), self.ordinal]


def _param(knob: Knob, default: Any) -> Param:
    choices = tuple(knob.choices)
    if default is not None and default not in choices:
        choices += (default,)
    numeric = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    if numeric and len(choices) > 2:
        return Param(knob.name, tuple(sorted(choices)), True)
    return Param(knob.name, choices, False)


def schedule_key(schedule: dict[str, Any]) -> str:
    return json.dumps(schedule, sort_keys=True, default=str)


class ScheduleSpace:
    """One kernel's schedule knobs on one backend."""

    def __init__(self, backend: Backend, kernel: Kernel):
        self.backend = backend
        self.kernel = kernel
        self.default = dict(backend.default_schedule(kernel))
        self.params = [_param(k, self.default.get(k.name)) for k in backend.space(kernel) if len(k.choices) > 0]
        self._keys: dict[str, str] = {}

    def key(self, schedule: dict[str, Any]) -> str:
        """Equal for schedules that run the same code (the backend's identity); an invalid one keeps its own."""
        sk = schedule_key(schedule)
        if sk not in self._keys:
            identity = getattr(self.backend, "identity", None)
            self._keys[sk] = identity(self.kernel, schedule) if identity and self.valid(schedule) else sk
        return self._keys[sk]

    @property
    def starts(self) -> list[dict[str, Any]]:
        """The points measured first: the default."""
        return [self.default]

    @property
    def size(self) -> int:
        return math.prod(len(p.choices) for p in self.params)

    @property
    def numeric(self) -> bool:
        return bool(self.params) and all(p.ordinal for p in self.params)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        sched = dict(self.default)
        for p in self.params:
            sched[p.name] = p.suggest(trial)
        return sched

    def encode(self, schedule: dict[str, Any]) -> dict[str, Any] | None:
        """Optuna params for a schedule; None when a value lies outside the space."""
        try:
            return {p.name: p.encode(schedule[p.name]) for p in self.params}
        except (KeyError, ValueError):
            return None

    def decode(self, params: dict[str, Any]) -> dict[str, Any]:
        sched = dict(self.default)
        for p in self.params:
            if p.name in params:
                sched[p.name] = p.decode(params[p.name])
        return sched

    def grid(self) -> dict[str, list[Any]]:
        return {p.name: p.grid() for p in self.params}

    @property
    def signature(self) -> str:
        """The backend and the knobs' names: a knob value means the same in every kernel with this signature,
        whatever choices each kernel's space offers."""
        return json.dumps([self.backend.name, [p.name for p in self.params]])

    @property
    def described(self) -> str | None:
        """The knobs and their choices, from which ``params_of`` rebuilds them (None: choices JSON cannot hold)."""
        try:
            return json.dumps([p.described() for p in self.params])
        except (TypeError, ValueError):
            return None

    def random(self, rng: random.Random) -> dict[str, Any]:
        sched = dict(self.default)
        sched.update({p.name: rng.choice(p.choices) for p in self.params})
        return sched

    def valid(self, schedule: dict[str, Any]) -> bool:
        try:
            return bool(self.backend.valid(self.kernel, schedule))
        except Exception:
            return False


def params_of(described: str) -> list[Param]:
    """The knobs of a space from its ``described`` form."""
    return [Param(name, tuple(choices), bool(ordinal)) for name, choices, ordinal in json.loads(described)]


def edge_name(e: Edge) -> str:
    return f"fuse_{e[0]}_{e[1]}_{e[2]}"


def conv_name(node: int) -> str:
    return f"winograd_{node}"


def flag_name(flag: Flag) -> str:
    return f"{FLAGS[type(flag)][0]}_{flag.node}"


def _tile(decisions: Decisions, node: int) -> int:
    """The Winograd tile ``decisions`` compute the convolution at ``node`` with (0: directly)."""
    return max((w.tile for w, v in decisions.items() if isinstance(w, Winograd) and w.node == node and v), default=0)


class FusionSpace:
    """One yes/no per fusible edge, an algorithm per convolution that has a choice (0: direct, else the Winograd
    tile), and the yes/no decisions per convolution (``flags``, ``partition.offered_flags``: one per convolution
    that may store its output channels-last and one per convolution over a batch that Winograd may take image by
    image); the default point fuses every edge and takes the ``algorithms`` given (an untuned compile's,
    ``partition.default_algorithms``; none: every convolution direct, every output in its logical order)."""

    def __init__(self, edges: list[Edge], convs: list[int] | None = None, algorithms: Decisions | None = None,
                 flags: list[Flag] | None = None):
        self.edges = list(edges)
        self.convs = list(convs or [])
        self.flags = list(flags or [])
        self.tiles = (0, *TILES)
        self.algorithms = {p: _tile(algorithms or {}, p) for p in self.convs}
        self.flagged = {f: bool((algorithms or {}).get(f)) for f in self.flags}

    @property
    def size(self) -> int:
        return 2 ** (len(self.edges) + len(self.flags)) * len(self.tiles) ** len(self.convs)

    @property
    def numeric(self) -> bool:
        return False

    @property
    def default(self) -> Decisions:
        return self._point({e: True for e in self.edges}, self.algorithms, self.flagged)

    def _point(self, fused: dict[Edge, bool], tiles: dict[int, int], flags: dict[Flag, bool]) -> Decisions:
        point: Decisions = {e: v for e, v in fused.items()}
        point |= {Winograd(p, t): True for p, t in tiles.items() if t}
        # a convolution computed directly has no images to take one by one
        return point | {f: True for f, v in flags.items() if v and (tiles.get(f.node) or type(f) is not ByImage)}

    @property
    def starts(self) -> list[Decisions]:
        """The points measured first: the default, then, where any convolution may be stored channels-last, the
        default with every such one so (a layout decided for the whole graph at once, which a sampler setting flags
        one by one hardly reaches)."""
        last = self._point({e: True for e in self.edges}, self.algorithms,
                           {f: v or type(f) is ChannelsLast for f, v in self.flagged.items()})
        return [self.default] + ([last] if last != self.default else [])

    def count(self, kind: type[Flag]) -> int:
        """The convolutions offered decisions of ``kind``."""
        return sum(type(f) is kind for f in self.flags)

    def suggest(self, trial: optuna.Trial) -> Decisions:
        return self._point({e: trial.suggest_categorical(edge_name(e), [True, False]) for e in self.edges},
                           {p: trial.suggest_categorical(conv_name(p), list(self.tiles)) for p in self.convs},
                           {f: trial.suggest_categorical(flag_name(f), [False, True]) for f in self.flags})

    def encode(self, decisions: Decisions) -> dict[str, Any]:
        return ({edge_name(e): bool(decisions.get(e, True)) for e in self.edges}
                | {conv_name(p): _tile(decisions, p) for p in self.convs}
                | {flag_name(f): bool(decisions.get(f)) for f in self.flags})

    def decode(self, params: dict[str, Any]) -> Decisions:
        return self._point({e: bool(params.get(edge_name(e), True)) for e in self.edges},
                           {p: int(params.get(conv_name(p), 0)) for p in self.convs},
                           {f: bool(params.get(flag_name(f), False)) for f in self.flags})

    def grid(self) -> dict[str, list[Any]]:
        return ({edge_name(e): [True, False] for e in self.edges} | {conv_name(p): list(self.tiles) for p in self.convs}
                | {flag_name(f): [False, True] for f in self.flags})

    def random(self, rng: random.Random) -> Decisions:
        return self._point({e: rng.random() < 0.5 for e in self.edges},
                           {p: rng.choice(self.tiles) for p in self.convs},
                           {f: rng.random() < 0.5 for f in self.flags})

    def valid(self, decisions: Decisions) -> bool:
        return True


def decisions_key(decisions: Decisions) -> str:
    return json.dumps(decisions_config(decisions), sort_keys=True)
