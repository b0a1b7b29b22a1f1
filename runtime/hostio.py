"""Runs over host buffers that the launcher can point elsewhere (the cpu backend's): a feed the kernels can read as it
is is read in place, not copied in; an output only its kernel writes is written into the array returned."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..codegen.backend import Backend

Bind = Callable[[np.ndarray], None]


@runtime_checkable
class Rebinding(Protocol):
    def binder(self, buffer: np.ndarray) -> Bind:
        """A function pointing the kernels' arguments bound to ``buffer`` at another array of its shape and dtype."""

    def __call__(self) -> None: ...


@dataclass(frozen=True)
class Bound:
    """A buffer the kernels are bound to, and its binder (None: never rebound)."""

    own: np.ndarray
    bind: Bind | None


class HostIO:
    """``inputs``: (feed name, buffer) of each input, rebindable where no output passes it through; ``outputs``:
    (node, buffer, binder) of the output nodes written by exactly one kernel (none an input or a constant)."""

    def __init__(self, launch: Rebinding, inputs: list[tuple[str, Bound]], outputs: list[tuple[int, np.ndarray, Bind]]):
        self.launch = launch
        self.inputs = inputs
        self.outputs = outputs

    @staticmethod
    def readable(x: np.ndarray, own: np.ndarray) -> bool:
        """Whether the kernels can read ``x`` where they read ``own``."""
        return (isinstance(x, np.ndarray) and x.dtype == own.dtype and x.shape == own.shape and x.flags.c_contiguous
                and x.flags.aligned)

    def run(self, backend: Backend, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """Launch once; the outputs written in place, by node. A feed that cannot be read in place is written into
        its buffer. Every binding is undone before returning: no feed is referenced after the run."""
        bound: list[tuple[np.ndarray, Bind]] = []
        fresh: dict[int, np.ndarray] = {}
        try:
            for name, b in self.inputs:
                x = feeds[name]
                if b.bind is not None and self.readable(x, b.own):
                    b.bind(x)
                    bound.append((b.own, b.bind))
                else:
                    backend.write(b.own, x)
            for node, own, bind in self.outputs:
                fresh[node] = out = backend.empty(own.shape, own.dtype)
                bind(out)
                bound.append((own, bind))
            self.launch()
        finally:
            for own, bind in bound:
                bind(own)
        return fresh
