"""The values a person writes, read and written one way whether they come from the command line or from
``[tool.luminal]``: shapes, durations, fractions."""

from __future__ import annotations

import math
import re

from .errors import LuminalError

Shape = int | tuple[int, ...]  # an int binds a dimension name (or is a rank-1 input's whole shape)

# ---------------------------------------------------------------- shapes

_SHAPE_HINT = "expected an integer or a shape like \"1x3x224x224\""


def parse_shape_value(value: object, what: str) -> Shape:
    """One shapes entry: ``8``, ``"8"`` and ``[8]`` are the integer 8; ``"1x3x224x224"`` and ``[1, 3, 224, 224]``
    a whole input's shape. ``what`` names where the value came from, for the error."""
    dims: tuple[int, ...]
    if isinstance(value, bool):
        raise LuminalError(f"{what}: {_SHAPE_HINT}, got {value!r}")
    if isinstance(value, int):
        dims = (value,)
    elif isinstance(value, str):
        try:
            dims = tuple(int(d) for d in value.lower().split("x"))
        except ValueError:
            raise LuminalError(f"{what}: {_SHAPE_HINT}, got {value!r}") from None
    elif isinstance(value, list) and value and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        dims = tuple(value)
    else:
        raise LuminalError(f"{what}: {_SHAPE_HINT}, got {value!r}")
    if any(d < 0 for d in dims):
        raise LuminalError(f"{what}: dimensions must be non-negative, got {value!r}")
    return dims[0] if len(dims) == 1 else dims


def parse_shape_sizes(spec: list[str] | None) -> dict[str, list[Shape]]:
    """Every size ``--shape`` gives each name, in order: ``batch=1,seq=128`` gives two names; an item without ``=``
    is one more size of the name before it (``seq=16,32,64``); a name given again by a repeated option adds a size
    (``--shape seq=16 --shape seq=128``)."""
    out: dict[str, list[Shape]] = {}
    for item in spec or []:
        name = None
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            if sep:
                name = key.strip()
            elif name is None:
                raise LuminalError(f"bad --shape {part!r}: expected name=value or input=AxBxC")
            else:
                value = part
            if not name:
                raise LuminalError(f"bad --shape {part!r}: expected name=value or input=AxBxC")
            size = parse_shape_value(value.strip(), f"bad --shape {part!r}")
            sizes = out.setdefault(name, [])
            if size not in sizes:
                sizes.append(size)
    return out


def parse_shape_sets(spec: list[str] | None) -> list[dict[str, Shape]]:
    """One {name: shape} per combination of the sizes ``--shape`` gives (see parse_shape_sizes), the last name
    varying fastest: ``--shape batch=1,2 --shape seq=16,32`` is four."""
    sets: list[dict[str, Shape]] = [{}]
    for name, sizes in parse_shape_sizes(spec).items():
        sets = [{**s, name: size} for s in sets for size in sizes]
    return sets


def parse_shape_args(spec: list[str] | None) -> dict[str, Shape]:
    """``--shape batch=1,seq=128`` and ``--shape x=1x3x48x320`` (the option may repeat) into {name: shape}, where
    one size per name is wanted."""
    sizes = parse_shape_sizes(spec)
    several = [f"{name}={','.join(map(format_shape, v))}" for name, v in sizes.items() if len(v) > 1]
    if several:
        raise LuminalError(f"--shape {' '.join(several)}: this command takes one size per dimension")
    return {name: v[0] for name, v in sizes.items()}


def format_shape(shape: Shape) -> str:
    """The way a shape is written: ``8``, ``1x3x224x224``."""
    return str(shape) if isinstance(shape, int) else "x".join(map(str, shape))


# ---------------------------------------------------------------- durations

_UNIT_SECONDS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_duration(value: object, what: str = "duration", units: str = "hms") -> float:
    """Seconds from a positive duration: a number of seconds (90, 90.5, "90") or number-unit parts, largest unit
    first ("90s", "20m", "1h30m", "2w 3d"). ``units`` are the units this setting takes, of w, d, h, m and s."""
    example = "30d" if "d" in units else "20m"
    bad = LuminalError(f"{what}: expected seconds or a duration in {', '.join(units)} (e.g. \"{example}\"), "
                       f"got {value!r}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_text(value.lower(), units, bad)
    else:
        raise bad
    if not math.isfinite(seconds) or seconds <= 0:
        raise LuminalError(f"{what}: must be a positive duration, got {value!r}")
    return seconds


def _duration_text(text: str, units: str, bad: LuminalError) -> float:
    text, order = text.strip(), list(_UNIT_SECONDS)
    seconds, end, previous = 0.0, 0, -1
    for m in _PART.finditer(text):
        number, unit = m.groups()
        if not unit and m.end() == len(text):  # a bare number at the end counts seconds
            unit = "s"
        if m.start() != end or unit not in _UNIT_SECONDS or unit not in units or order.index(unit) <= previous:
            raise bad
        seconds += float(number) * _UNIT_SECONDS[unit]
        previous, end = order.index(unit), m.end()
    if end == 0 or end != len(text):
        raise bad
    return seconds


def format_duration(seconds: float | None) -> str:
    """A duration for people, three significant digits in the largest unit below it: 2.35 s, 410 ms, 12.5 µs,
    a whole number of seconds from 100 s; "-" for None."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 100:
        return f"{seconds:.0f} s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_fixed(x: float, digits: int = 3) -> str:
    """A number to ``digits`` significant digits, never in exponent form: 2850, 31.8, 0.0123."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


# ---------------------------------------------------------------- counts and tolerances

def at_least(value: int | None, what: str, low: int = 1) -> int | None:
    """A count a person gave (threads, workers, trials), refused below ``low`` in the words the configuration uses."""
    if value is not None and value < low:
        raise LuminalError(f"{what}: must be at least {low}, got {value}")
    return value


def at_most(value: float | None, what: str, high: float, unit: str = "") -> float | None:
    """A count or a number of seconds a person gave, refused above ``high``, which no sensible run asks for
    (a value past it means an endless loop, a flood of threads or processes, or an overflow)."""
    if value is not None and value > high:
        raise LuminalError(f"{what}: must be at most {_number(high)}{unit}, got {_number(value)}{unit}")
    return value


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


# threads (of a runtime) and processes (tune's workers) beyond this many per core only slow a run down; far
# beyond it, onnxruntime hangs or crashes on its thread pool. FLOOR keeps a configuration written for a bigger
# machine (threads = 16, 32) usable on a small CI runner.
PER_CORE = 4
FLOOR = 64


def most_per_core(cores: int) -> int:
    return max(FLOOR, PER_CORE * cores)


def per_core_count(value: int | None, what: str, cores: int) -> int | None:
    """A thread or worker count a person gave: at least 1, at most PER_CORE times the ``cores`` this process may
    use (and never less than FLOOR)."""
    at_least(value, what)
    if value is not None and value > most_per_core(cores):
        raise LuminalError(f"{what}: must be at most {most_per_core(cores)} ({PER_CORE} per core of the {cores} "
                           f"here, at least {FLOOR}), got {value}")
    return value


SEEDS = 2**32  # seeds are unsigned 32-bit integers (numpy's and the samplers')


def seed_of(value: int, what: str = "--seed") -> int:
    """A seed a person gave: 0 to 2^32 - 1."""
    if not 0 <= value < SEEDS:
        raise LuminalError(f"{what}: must be between 0 and {SEEDS - 1}, got {value}")
    return value


def non_negative(value: float | None, what: str) -> float | None:
    """A tolerance a person gave, refused when negative or not finite in the words the configuration uses."""
    if value is not None and (not math.isfinite(value) or value < 0):
        raise LuminalError(f"{what}: must be a non-negative number, got {value:g}")
    return value


# ---------------------------------------------------------------- fractions

def parse_fraction(value: object, what: str = "max_regression") -> float:
    """A fraction from "5%", "0.5%", 0.05 (numbers are fractions, strings with % are percents)."""
    bad = LuminalError(f"{what}: expected a percentage like \"5%\" or a fraction like 0.05, got {value!r}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int | float):
        frac = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            frac = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise bad from None
    else:
        raise bad
    if not math.isfinite(frac) or frac < 0:
        raise LuminalError(f"{what}: must be a non-negative percentage, got {value!r}")
    return frac
