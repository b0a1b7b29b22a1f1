"""The memory a model needs, checked while it is imported: before luminal allocates an input, runs a
node or hands the model to onnxruntime. Any runtime that runs the graph as written holds a node's
inputs and outputs at once, and the graph's inputs and outputs throughout; where that is more than the
machine has (or than ``--max-memory``), the model is refused naming the tensor."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from ..errors import LuminalError
from ..ir import Tensor

SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
              "t": 1 << 40, "tb": 1 << 40}


def available_memory() -> int:
    """The bytes this machine can give now (Linux's MemAvailable), else its physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def parse_size(text: str) -> int:
    """``8G``, ``512MB``, ``1.5g``, ``1000000`` (bytes) as a number of bytes."""
    t = text.strip().lower()
    digits = t.rstrip("kmgtb")
    unit = t[len(digits):]
    try:
        value = float(digits)
    except ValueError:
        value = math.nan
    if unit not in SIZE_UNITS or not math.isfinite(value) or value <= 0 or value * SIZE_UNITS[unit] >= 1 << 62:
        raise LuminalError(f"bad memory size {text!r}: expected a positive number of bytes, or with K, M, G or T")
    return int(value * SIZE_UNITS[unit])


def format_bytes(n: int) -> str:
    for unit, size in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n < 1000 * (1 << 40) else f"{n:.3g} bytes"
    return f"{n} bytes"


def tensor_bytes(t: Tensor) -> int:
    return math.prod(t.shape) * t.dtype.np.itemsize


def _shape(t: Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


@dataclass(frozen=True)
class MemoryGuard:
    limit: int
    source: str  # what the limit is: "the memory available" or "--max-memory"

    @staticmethod
    def of(max_memory: int | None) -> MemoryGuard:
        if max_memory is not None:
            return MemoryGuard(max_memory, "--max-memory")
        return MemoryGuard(available_memory(), "the memory available")

    def _refuse(self, what: str, need: int) -> NoReturn:
        raise LuminalError(f"{what} needs {format_bytes(need)}, more than {format_bytes(self.limit)} "
                           f"({self.source})")

    def allocation(self, what: str, size: int) -> None:
        """Something of ``size`` bytes about to be made."""
        if size > self.limit:
            self._refuse(what, size)

    def inputs(self, tensors: Mapping[str, Tensor]) -> None:
        """The graph's inputs, one by one and together (a caller holds them all while it runs)."""
        sizes = {name: tensor_bytes(t) for name, t in tensors.items()}
        for name, size in sizes.items():
            if size > self.limit:
                self._refuse(f"input {name!r} ({_shape(tensors[name])}, {tensors[name].dtype.value})", size)
        if sum(sizes.values()) > self.limit:
            self._refuse(f"the {len(sizes)} inputs together", sum(sizes.values()))

    def node(self, label: Callable[[], str], inputs: Iterable[Tensor], outputs: Mapping[str, Tensor]) -> None:
        """One node's outputs, and its inputs and outputs together (an output that is a view of an input,
        as a Reshape's, counts once); ``label`` names the node where it is refused."""
        total, seen = 0, set()
        for name, t in outputs.items():
            size = tensor_bytes(t)
            if size > self.limit:
                self._refuse(f"tensor {name!r} ({_shape(t)}, {t.dtype.value}; {label()})", size)
            if id(t.node) not in seen:
                seen.add(id(t.node))
                total += size
        for t in inputs:
            if id(t.node) not in seen:
                seen.add(id(t.node))
                total += tensor_bytes(t)
        if total > self.limit:
            self._refuse(f"{label()} with its inputs and outputs", total)
