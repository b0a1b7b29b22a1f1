"""Python's cyclic garbage collector paused while a graph is built or rewritten.

The IR makes no reference cycles (a node holds its sources, never its users), so reference counting frees
everything; but the collector's passes over the hundreds of thousands of objects alive while a large graph
is imported, optimised or partitioned cost more than the work itself (a 20,000-node chain's passes: 14.6 s
with it, 3.4 s without). Usable as a decorator; nests.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
